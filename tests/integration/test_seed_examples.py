"""Every code example of seeds 000-003 (aiokafka 0.8 docs, aiokafka consumer and producer
guides, kafka-python's KafkaConsumer reference) runs against the real broker with only its
import changed (issue 16).

Each test names the seed and the example (seed 000's line number; 001 and 002 repeat 000's
guide sections, noted where they do). What changes from the seed text, and only that:

* imports: ``aiokafka`` -> ``kafkastate.asyncio``, ``aiokafka.errors`` / ``kafka.common`` ->
  ``kafkastate.errors``, ``aiokafka.structs`` -> ``kafkastate.structs``;
* ``bootstrap_servers`` points at the test broker, topic and group names are fresh;
* examples that loop forever (``async for`` / ``while True``) stop once they have seen what
  the test wrote; a helper the example leaves undefined (``process_msg_batch``) is defined;
* intervals shortened through the example's own options (``metadata_max_age_ms``).

Where an example is wrong as printed, the corrected form runs and docs/migrating-from-aiokafka.md
("Seed examples") says what was wrong. Seed 003 has no code examples (an API reference; its
``api_version`` tuples are covered in test_seed_003_api_version_examples).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

import kafkastate.asyncio as aiokafka
from kafkastate.asyncio import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from kafkastate.errors import KafkaError, KafkaTimeoutError, OffsetOutOfRangeError
from kafkastate.sync import KafkaConsumer, KafkaProducer

pytestmark = pytest.mark.integration

NewTopic = Callable[..., str]


def _group() -> str:
    return f"seed-{uuid.uuid4().hex[:10]}"


def _write(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    """Put ``values`` on ``topic`` (setup, not part of any example)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for value in values:
            producer.send(topic, value, key=value, partition=partition)
        producer.flush()
    finally:
        producer.close()


async def _read_all(bootstrap: str, topic: str, count: int, **options: Any) -> list[Any]:
    """Read ``count`` records of ``topic`` from the beginning (checks, not examples)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **options
    )
    await consumer.start()
    try:
        out: list[Any] = []
        while len(out) < count:
            batch = await consumer.getmany(timeout_ms=10_000)
            assert batch, f"only {len(out)} of {count} records of {topic} arrived"
            for records in batch.values():
                out.extend(records)
        return out
    finally:
        await consumer.stop()


async def _committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        return await consumer.committed(tp)
    finally:
        await consumer.stop()


# -- seed 000 "Getting started" ---------------------------------------------------------------


def test_seed_000_l77_consume(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic, my_other_topic = new_topic(), new_topic()
    _write(bootstrap, my_topic, [b"a"])
    _write(bootstrap, my_other_topic, [b"b"])
    seen = []

    async def consume() -> None:
        consumer = AIOKafkaConsumer(
            my_topic,
            my_other_topic,
            bootstrap_servers=bootstrap,
            group_id=_group(),
            auto_offset_reset="earliest",  # the records were written before the group joined
        )
        # Get cluster layout and join group `my-group`
        await consumer.start()
        try:
            # Consume messages
            async for msg in consumer:
                print(
                    "consumed: ",
                    msg.topic,
                    msg.partition,
                    msg.offset,
                    msg.key,
                    msg.value,
                    msg.timestamp,
                )
                seen.append((msg.topic, msg.value))
                if len(seen) == 2:
                    break
        finally:
            # Will leave consumer group; perform autocommit if enabled.
            await consumer.stop()

    asyncio.run(consume())
    assert sorted(seen) == sorted([(my_topic, b"a"), (my_other_topic, b"b")])


def test_seed_000_l108_send_one(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()

    async def send_one() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        # Get cluster layout and initial topic/partition leadership information
        await producer.start()
        try:
            # Produce message
            await producer.send_and_wait(my_topic, b"Super message")
        finally:
            # Wait for all pending messages to be delivered or expire.
            await producer.stop()

    asyncio.run(send_one())
    assert [m.value for m in asyncio.run(_read_all(bootstrap, my_topic, 1))] == [b"Super message"]


# -- seed 000 producer guide = seed 002 -------------------------------------------------------


def test_seed_000_l231_002_simple_producer_with_loop(bootstrap: str, new_topic: NewTopic) -> None:
    """Seed 002 passes ``loop=loop`` (deprecated in aiokafka, accepted with a warning)."""
    my_topic = new_topic()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.warns(DeprecationWarning):
            producer = aiokafka.AIOKafkaProducer(loop=loop, bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(my_topic, b"Super message")
        finally:
            await producer.stop()

    asyncio.run(main())
    assert [m.value for m in asyncio.run(_read_all(bootstrap, my_topic, 1))] == [b"Super message"]


def test_seed_000_l250_002_send_future_and_wait_for(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic(2)

    async def main() -> Any:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            # Will add the message to 1st partition's batch.
            fut = await producer.send(my_topic, b"Super message", partition=1)
            # Message will either be delivered or an unrecoverable error will occur.
            msg = await fut
            # the buffer-wait recipe of the same section
            timeout = 10
            fut2 = await asyncio.wait_for(producer.send(my_topic, b"two"), timeout=timeout)
            await fut2
            return msg
        finally:
            await producer.stop()

    msg = asyncio.run(main())
    assert (msg.topic, msg.partition, msg.offset) == (my_topic, 1, 0)


def test_seed_000_l290_002_idempotent(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()

    async def main() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            await producer.send_and_wait(my_topic, b"Super message")
        finally:
            await producer.stop()

    asyncio.run(main())
    assert [m.value for m in asyncio.run(_read_all(bootstrap, my_topic, 1))] == [b"Super message"]
    # "If any other value is explicitly passed with enable_idempotence=True a ValueError"
    with pytest.raises(ValueError):
        AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks=1)


def test_seed_000_l312_002_transactional(bootstrap: str, new_topic: NewTopic) -> None:
    test_topic, some_topic = new_topic(), new_topic()
    group = _group()

    async def main() -> Any:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"transactional_test-{group}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                res = await producer.send_and_wait(test_topic, b"Super transactional message")
            # l333: a consumer offset committed in the same transaction
            async with producer.transaction():
                commit_offsets = {TopicPartition(some_topic, 0): 100}
                await producer.send_offsets_to_transaction(commit_offsets, group)
            return res
        finally:
            await producer.stop()

    res = asyncio.run(main())
    assert res.offset == 0
    got = asyncio.run(_read_all(bootstrap, test_topic, 1, isolation_level="read_committed"))
    assert [m.value for m in got] == [b"Super transactional message"]
    assert asyncio.run(_committed(bootstrap, group, TopicPartition(some_topic, 0))) == 100


def test_seed_000_l360_002_direct_batch_control(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic(2)
    _write(bootstrap, my_topic, [b"first"], partition=1)

    async def main() -> Any:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            # Create the batch without queueing for delivery.
            batch = producer.create_batch()
            # Populate the batch.
            for i in range(2):
                metadata = batch.append(value=b"msg %d" % i, key=None, timestamp=None)
                assert metadata is not None
            # Optionally close the batch to further submission.
            batch.close()
            fut = await producer.send_batch(batch, my_topic, partition=1)
            record = await fut
            return record
        finally:
            await producer.stop()

    record = asyncio.run(main())
    # "Upon delivery, record.offset will match the batch's first message."
    assert (record.partition, record.offset) == (1, 1)
    got = asyncio.run(_read_all(bootstrap, my_topic, 3))
    assert [m.value for m in got] == [b"first", b"msg 0", b"msg 1"]


def test_seed_000_l1697_exception_handling(bootstrap: str, new_topic: NewTopic) -> None:
    foobar = new_topic()
    printed = []

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            try:
                send_future = await producer.send(foobar, b"test data")
                response = await send_future  # wait until message is produced
                printed.append(response)
            except KafkaTimeoutError:
                print("produce timeout... maybe we want to resend data again?")
            except KafkaError as err:
                print(f"some kafka error on produce: {err}")
        finally:
            await producer.stop()

    asyncio.run(main())
    assert printed[0].topic == foobar
    assert issubclass(KafkaTimeoutError, KafkaError)
