# ruff: noqa: UP031, SIM105 -- the examples keep their code as the seeds print it
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
import contextlib
import json
import pathlib
import random
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

import kafkastate.abc
import kafkastate.asyncio as aiokafka
from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.asyncio import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from kafkastate.core.protocol.requests import NewTopic as Spec
from kafkastate.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
)
from kafkastate.helpers import create_ssl_context
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


def _values(bootstrap: str, topic: str, count: int, **options: Any) -> list[bytes]:
    return [m.value for m in asyncio.run(_read_all(bootstrap, topic, count, **options))]


def _manual_commit_consumer(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    """The consumer of the API reference's commit examples (their constructors are elided)."""
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )


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


# The three forms of "start, send_and_wait, stop" differ only in the constructor's options:
# 000 "Getting started" (l108), the producer guide's plain and idempotent producers (000
# l229/l288 = 002, which also passes ``loop=loop``: deprecated, accepted with a warning).
SEND_ONE = {
    "000-l108-send_one": {},
    "002-loop": {"loop": True},
    "000-l288-002-idempotent": {"enable_idempotence": True},
}


@pytest.mark.parametrize("options", SEND_ONE.values(), ids=SEND_ONE.keys())
def test_seed_send_one(bootstrap: str, new_topic: NewTopic, options: dict[str, Any]) -> None:
    my_topic = new_topic()

    async def send_one() -> None:
        kwargs = dict(options)
        if kwargs.pop("loop", False):
            kwargs["loop"] = asyncio.get_running_loop()
        with pytest.warns(DeprecationWarning) if "loop" in kwargs else contextlib.nullcontext():
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, **kwargs)
        # Get cluster layout and initial topic/partition leadership information
        await producer.start()
        try:
            # Produce message
            await producer.send_and_wait(my_topic, b"Super message")
        finally:
            # Wait for all pending messages to be delivered or expire.
            await producer.stop()

    asyncio.run(send_one())
    assert _values(bootstrap, my_topic, 1) == [b"Super message"]


def test_seed_000_l288_002_idempotent_refuses_other_acks(bootstrap: str) -> None:
    """ "If any other value is explicitly passed with enable_idempotence=True a ValueError
    will be raised.\""""
    with pytest.raises(ValueError):
        AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks=1)


# -- seed 000 producer guide = seed 002 -------------------------------------------------------


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


# -- seed 000 consumer guide = seed 001 -------------------------------------------------------


def test_seed_000_l391_001_simple_consumer(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"x"])
    lines = []

    async def main() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            my_topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            async for msg in consumer:
                lines.append(
                    "{}:{:d}:{:d}: key={} value={} timestamp_ms={}".format(  # noqa: UP032 -- as printed
                        msg.topic, msg.partition, msg.offset, msg.key, msg.value, msg.timestamp
                    )
                )
                break
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert lines[0].startswith(f"{my_topic}:0:0: key=b'x' value=b'x' timestamp_ms=")


def test_seed_000_l420_001_position_and_committed(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"a", b"b"])
    group = _group()

    async def main() -> tuple[int, int | None, int | None]:
        consumer = _manual_commit_consumer(bootstrap, my_topic, group)
        await consumer.start()
        try:
            msg = await consumer.getone()
            print(msg.offset)  # Unique msg autoincrement ID in this topic-partition.
            tp = aiokafka.TopicPartition(msg.topic, msg.partition)
            position = await consumer.position(tp)
            # Position is the next fetched offset
            assert position == msg.offset + 1
            committed = await consumer.committed(tp)
            await consumer.commit()
            return msg.offset, committed, await consumer.committed(tp)
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == (0, None, 1)


def test_seed_000_l461_001_auto_commit(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"a", b"b", b"c"])
    group = _group()

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            my_topic,
            bootstrap_servers=bootstrap,
            group_id=group,  # Consumer must be in a group to commit
            enable_auto_commit=True,  # Is True by default anyway
            auto_commit_interval_ms=1000,  # Autocommit every second
            auto_offset_reset="earliest",  # If committed offset not found, start
            # from beginning
        )
        await consumer.start()
        n = 0
        try:
            async for _msg in consumer:  # Will periodically commit returned messages.
                # process message
                n += 1
                if n == 3:
                    break
        finally:
            await consumer.stop()  # commits what was returned (autocommit on stop)

    asyncio.run(main())
    assert asyncio.run(_committed(bootstrap, group, TopicPartition(my_topic, 0))) == 3


def test_seed_000_l480_001_manual_commit_batch(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"%d" % i for i in range(101)])
    group = _group()
    processed: list[list[Any]] = []

    async def process_msg_batch(batch: list[Any]) -> None:
        processed.append(list(batch))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            my_topic,
            bootstrap_servers=bootstrap,
            group_id=group,  # Consumer must be in a group to commit
            enable_auto_commit=False,  # Will disable autocommit
            auto_offset_reset="earliest",  # If committed offset not found, start
            # from beginning
        )
        await consumer.start()
        try:
            batch = []
            async for msg in consumer:
                batch.append(msg)
                if len(batch) == 100:
                    await process_msg_batch(batch)
                    await consumer.commit()
                    batch = []
                    break
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert [len(b) for b in processed] == [100]
    assert asyncio.run(_committed(bootstrap, group, TopicPartition(my_topic, 0))) == 100


def test_seed_000_l510_001_commit_per_partition(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic(2)
    _write(bootstrap, my_topic, [b"p0-a", b"p0-b"], partition=0)
    _write(bootstrap, my_topic, [b"p1-a"], partition=1)
    group = _group()
    done: set[int] = set()

    async def process_msg_batch(messages: list[Any]) -> None:
        pass

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            my_topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            while len(done) < 2:
                result = await consumer.getmany(timeout_ms=10 * 1000)
                for tp, messages in result.items():
                    if messages:
                        await process_msg_batch(messages)
                        # Commit progress only for this partition
                        await consumer.commit({tp: messages[-1].offset + 1})
                        if messages[-1].value in {b"p0-b", b"p1-a"}:
                            done.add(tp.partition)
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert asyncio.run(_committed(bootstrap, group, TopicPartition(my_topic, 0))) == 2
    assert asyncio.run(_committed(bootstrap, group, TopicPartition(my_topic, 1))) == 1


def test_seed_000_l530_001_latest(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"old"])
    seen = []

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            my_topic, bootstrap_servers=bootstrap, auto_offset_reset="latest"
        )
        await consumer.start()
        try:
            _write(bootstrap, my_topic, [b"new"])
            async for msg in consumer:
                # process message
                seen.append(msg.value)
                break
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert seen == [b"new"]


def test_seed_000_l545_001_seek_reconsume(bootstrap: str, new_topic: NewTopic) -> None:
    """Seed 001 prints this example mangled (``tp = TopicPartition(msg.topic, msg.partition),
    msg.offset)``, the seek line lost); seed 000 has it whole -- that form runs."""
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"a", b"b"])

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            my_topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            msg = await consumer.getone()
            tp = TopicPartition(msg.topic, msg.partition)
            consumer.seek(tp, msg.offset)
            msg2 = await consumer.getone()
            assert msg2 == msg
        finally:
            await consumer.stop()

    asyncio.run(main())


class _FakeRedis:
    """In-memory stand-in for the example's aioredis connection (hgetall / hset)."""

    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, str]] = {}

    async def hgetall(self, key: str, encoding: str = "utf-8") -> dict[str, str]:
        return dict(self.hashes.get(key, {}))

    async def hset(self, key: str, field: str, value: str) -> None:
        self.hashes.setdefault(key, {})[field] = value


def test_seed_000_l579_001_offsets_outside_kafka(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"k1", b"k2", b"k1"])
    redis = _FakeRedis()
    redis_hash_key = f"aggregated_count:{my_topic}:0"

    async def run_once(stop_after: int) -> Counter[str]:
        tp = TopicPartition(my_topic, 0)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        consumer.assign([tp])
        try:
            # Load initial state of aggregation and last processed offset
            offset = -1
            counts: Counter[str] = Counter()
            initial_counts = await redis.hgetall(redis_hash_key, encoding="utf-8")
            for key, state in initial_counts.items():
                state = json.loads(state)
                offset = max([offset, state["offset"]])
                counts[key] = state["count"]
            # Same as with manual commit, you need to fetch next message, so +1
            consumer.seek(tp, offset + 1)
            n = 0
            async for msg in consumer:
                key = msg.key.decode("utf-8")
                counts[key] += 1
                value = json.dumps({"count": counts[key], "offset": msg.offset})
                await redis.hset(redis_hash_key, key, value)
                n += 1
                if n == stop_after:
                    break
            return counts
        finally:
            await consumer.stop()

    assert asyncio.run(run_once(2)) == Counter({"k1": 1, "k2": 1})
    # a restart resumes from the stored offset: only the third record is new
    assert asyncio.run(run_once(1)) == Counter({"k1": 2, "k2": 1})


def test_seed_000_l644_001_two_group_members(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic(2)
    group = _group()

    async def main() -> tuple[set[int], set[int]]:
        consumer = AIOKafkaConsumer(
            my_topic,
            bootstrap_servers=bootstrap,
            group_id=group,  # This will enable Consumer Groups
            auto_offset_reset="earliest",
        )
        await consumer.start()
        consumer2 = AIOKafkaConsumer(
            my_topic,
            bootstrap_servers=bootstrap,
            group_id=group,  # This will enable Consumer Groups
            auto_offset_reset="earliest",
        )
        start2 = asyncio.ensure_future(consumer2.start())
        try:
            # the first member keeps polling so that it takes part in the rebalance
            while not start2.done() or len(consumer.assignment()) != 1:
                await consumer.getmany(timeout_ms=100)
            await start2
            while len(consumer2.assignment()) != 1:
                await consumer2.getmany(timeout_ms=100)
            _write(bootstrap, my_topic, [b"0"], partition=0)
            _write(bootstrap, my_topic, [b"1"], partition=1)
            got: tuple[set[int], set[int]] = (set(), set())
            for member, seen in ((consumer, got[0]), (consumer2, got[1])):
                msg = await member.getone()
                print(f"Process {msg.partition} consumed msg from partition {msg.partition}")
                seen.add(msg.partition)
            return got
        finally:
            await consumer2.stop()
            await consumer.stop()

    first, second = asyncio.run(main())
    assert first | second == {0, 1}
    assert not first & second


def test_seed_000_l680_001_rebalance_listener_lock(bootstrap: str, new_topic: NewTopic) -> None:
    """The example shows a deadlock on purpose, and calls ``subscribe("topic", ...)`` with a
    bare string (a TypeError in aiokafka too). Run here: the corrected form the text asks for
    (getmany outside the lock, a list of topics)."""
    topic = new_topic()
    _write(bootstrap, topic, [b"x"])
    calls: list[str] = []

    async def main() -> list[Any]:
        lock = asyncio.Lock()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=_group(), auto_offset_reset="earliest"
        )

        class MyRebalancer(aiokafka.ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: Any) -> None:
                async with lock:
                    calls.append("revoked")

            async def on_partitions_assigned(self, assigned: Any) -> None:
                calls.append("assigned")

        await consumer.start()
        try:
            with pytest.raises(TypeError):
                consumer.subscribe(topic, listener=MyRebalancer())
            consumer.subscribe([topic], listener=MyRebalancer())
            while True:
                msgs = await consumer.getmany(timeout_ms=1000)
                async with lock:
                    # process messages
                    if msgs:
                        return [m.value for ms in msgs.values() for m in ms]
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [b"x"]
    assert calls[0] == "assigned"


def test_seed_000_l705_001_pattern_subscription(bootstrap: str) -> None:
    prefix = f"MyGreatTopic{uuid.uuid4().hex[:8]}"
    seen = []

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            metadata_max_age_ms=500,  # This controls the polling interval (30000 in the seed)
            auto_offset_reset="earliest",  # the test writes before the topic is noticed
        )
        await consumer.start()
        consumer.subscribe(pattern=f"^{prefix}-.*$")
        try:
            # a topic matching the pattern, created after subscribe(), is picked up
            with BlockingAdmin(bootstrap) as admin:
                admin.create_topics([Spec(name=f"{prefix}-1", num_partitions=1)])
            _write(bootstrap, f"{prefix}-1", [b"hello"])
            async for msg in consumer:  # Will detect metadata changes
                print(f"Consumed msg {msg.topic} {msg.partition} {msg.value}")
                seen.append((msg.topic, msg.value))
                break
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert seen == [(f"{prefix}-1", b"hello")]


def test_seed_000_l725_001_manual_assignment(bootstrap: str, new_topic: NewTopic) -> None:
    """The example never calls ``start()`` (a seed bug: aiokafka fails there too); the
    corrected form starts the consumer after assign()."""
    my_topic = new_topic(3)
    for p in range(3):
        _write(bootstrap, my_topic, [b"p%d" % p], partition=p)
    seen = set()

    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        tp1 = TopicPartition(my_topic, 1)
        tp2 = TopicPartition(my_topic, 2)
        consumer.assign([tp1, tp2])
        await consumer.start()  # missing in the seed
        try:
            async for msg in consumer:
                print("Consumed msg %s %s %s", msg.topic, msg.partition, msg.value)
                seen.add(msg.value)
                if len(seen) == 2:
                    break
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert seen == {b"p1", b"p2"}


def test_seed_000_l745_001_flow_control(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic(2)
    _write(bootstrap, my_topic, [b"a"] * 5, partition=0)
    _write(bootstrap, my_topic, [b"b"], partition=1)
    position_threshold = 2
    time_threshold = 60_000
    rounds: list[list[TopicPartition]] = []
    got: Counter[int] = Counter()

    async def process_messages(msgs: dict[TopicPartition, list[Any]]) -> None:
        for tp, records in msgs.items():
            got[tp.partition] += len(records)

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            my_topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=1
        )
        await consumer.start()
        try:
            partitions: list[TopicPartition] = []  # Fetch all partitions on first request
            while sum(got.values()) < 6:
                msgs = await consumer.getmany(*partitions, timeout_ms=5000)
                # process messages
                await process_messages(msgs)
                # Prioritize partitions, that lag behind.
                partitions = []
                for partition in consumer.assignment():
                    highwater = consumer.highwater(partition)
                    position = await consumer.position(partition)
                    if highwater is None:  # not fetched yet
                        continue
                    position_lag = highwater - position
                    timestamp = consumer.last_poll_timestamp(partition)
                    time_lag = time.time() * 1000 - timestamp
                    if position_lag > position_threshold or time_lag > time_threshold:
                        partitions.append(partition)
                rounds.append(partitions)
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert got == Counter({0: 5, 1: 1})
    # partition 0 lagged by more than the threshold at some point and was prioritised
    assert [TopicPartition(my_topic, 0)] in rounds


def test_seed_000_l780_001_read_committed(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()

    async def main() -> tuple[list[bytes], list[int], int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"txn-{uuid.uuid4().hex[:8]}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send(my_topic, b"committed")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(my_topic, b"aborted")
                    raise RuntimeError
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            my_topic,
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        values, lags = [], []
        try:
            async for msg in consumer:  # Only read committed transactions
                values.append(msg.value)
                tp = TopicPartition(msg.topic, msg.partition)
                lso = consumer.last_stable_offset(tp)
                lag = lso - msg.offset
                print(f"Consumer is behind by {lag} messages")
                lags.append(lag)
                end_offsets = await consumer.end_offsets([tp])
                assert end_offsets[tp] == lso
                break
            await consumer.seek_to_end(tp)
            position = await consumer.position(tp)
        finally:
            await consumer.stop()
        return values, lags, position

    values, lags, position = asyncio.run(main())
    # committed record, commit marker, aborted record, abort marker: LSO = 4
    assert values == [b"committed"]
    assert lags == [4]
    assert position == 4


# -- seed 000 API reference examples ------------------------------------------------------------


def test_seed_000_l1196_commit_with_metadata(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"a", b"b"])
    group = _group()

    async def main() -> Any:
        consumer = _manual_commit_consumer(bootstrap, my_topic, group)
        await consumer.start()
        try:
            msg = await consumer.getone()
            tp = TopicPartition(msg.topic, msg.partition)
            metadata = "Some utf-8 metadata"
            # Either
            await consumer.commit({tp: msg.offset + 1})
            first = await consumer.committed(tp)
            msg = await consumer.getone()
            # Or position directly
            await consumer.commit({tp: (msg.offset + 1, metadata)})
            return first, await consumer.committed(tp)
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == (1, 2)


def test_seed_000_l1284_getmany_and_getone(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"a", b"b", b"c"])
    printed = []

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            my_topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            data: dict[Any, list[Any]] = {}
            while not data:  # the seed's bare getmany() returns {} until the first fetch lands
                data = await consumer.getmany()
            for tp, messages in data.items():
                topic = tp.topic
                partition = tp.partition
                assert (topic, partition) == (my_topic, 0)
                for message in messages:
                    # Process message
                    print(message.offset, message.key, message.value)
                    printed.append(message.offset)
            while len(printed) < 3:
                message = await consumer.getone()
                topic = message.topic
                partition = message.partition
                # Process message
                print(message.offset, message.key, message.value)
                printed.append(message.offset)
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert printed == [0, 1, 2]


def test_seed_000_l738_001_assign_then_subscribe_raises(bootstrap: str) -> None:
    """ "It is not possible to mix manual partition assignment assign() and topic subscription
    subscribe(). An attempt to do so will result in an IllegalStateError.\""""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    consumer.assign([TopicPartition("my_topic", 1)])
    with pytest.raises(IllegalStateError):
        consumer.subscribe(["my_topic"])


# -- seed 000 "Examples" ----------------------------------------------------------------------


def test_seed_000_l2041_serialize_compress(bootstrap: str, new_topic: NewTopic) -> None:
    foobar = new_topic()

    def serializer(value: Any) -> bytes:
        return json.dumps(value).encode()

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, value_serializer=serializer, compression_type="gzip"
        )
        await producer.start()
        data: Any = {"a": 123.4, "b": "some string"}
        await producer.send(foobar, data)
        data = [1, 2, 3, 4]
        await producer.send(foobar, data)
        await producer.stop()

    def deserializer(serialized: bytes) -> Any:
        return json.loads(serialized)

    got = []

    async def consume() -> None:
        # consumer will decompress messages automatically
        # in accordance to compression type specified in producer
        consumer = AIOKafkaConsumer(
            foobar,
            bootstrap_servers=bootstrap,
            value_deserializer=deserializer,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        data = await consumer.getmany(timeout_ms=10000)
        for _tp, messages in data.items():
            for message in messages:
                print(type(message.value), message.value)
                got.append(message.value)
        await consumer.stop()

    asyncio.run(produce())
    asyncio.run(consume())
    assert got == [{"a": 123.4, "b": "some string"}, [1, 2, 3, 4]]


def test_seed_000_l2125_manual_commit_ten(bootstrap: str, new_topic: NewTopic) -> None:
    foobar = new_topic()
    _write(bootstrap, foobar, [b"%d" % i for i in range(12)])
    group = _group()

    async def consume() -> None:
        consumer = AIOKafkaConsumer(
            foobar,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            group_id=group,
            enable_auto_commit=False,
        )
        await consumer.start()
        # we want to consume 10 messages from "foobar" topic
        # and commit after that
        for _ in range(10):
            await consumer.getone()
        await consumer.commit()
        await consumer.stop()

    asyncio.run(consume())
    assert asyncio.run(_committed(bootstrap, group, TopicPartition(foobar, 0))) == 10


def test_seed_000_l2158_group_scripts(bootstrap: str, new_topic: NewTopic) -> None:
    """producer.py <partition> <message> and consumer.py <group_id> <count>, and the seed's
    session with them (l2221): consumers as processes of their own, the producer script run
    with its argv in this process. The producer's page break is undone (its body indented)."""
    some_topic = new_topic(2)
    producer_py = f"""
import sys
import asyncio
from kafkastate.asyncio import AIOKafkaProducer

async def produce(value, partition):
    producer = AIOKafkaProducer(bootstrap_servers={bootstrap!r})

    await producer.start()
    await producer.send({some_topic!r}, value, partition=partition)
    await producer.stop()

if len(sys.argv) != 3:
    print("usage: producer.py <partition> <message>")
    sys.exit(1)
value = sys.argv[2].encode()
partition = int(sys.argv[1])

asyncio.run(produce(value, partition))
"""
    consumer_py = f"""
import sys
import asyncio
from kafkastate.asyncio import AIOKafkaConsumer

async def consume(group_id, msg_cnt):
    consumer = AIOKafkaConsumer(
        {some_topic!r},
        group_id=group_id,
        bootstrap_servers={bootstrap!r},
        auto_offset_reset='earliest')
    await consumer.start()
    for _ in range(msg_cnt):
        msg = await consumer.getone()
        print(f"Message from partition [{{msg.partition}}]: {{msg.value}}")
    await consumer.stop()

if len(sys.argv) != 3:
    print("usage: consumer.py <group_id> <wait messages count>")
    sys.exit(1)
group_id = sys.argv[1]
msg_cnt = int(sys.argv[2])

asyncio.run(consume(group_id, msg_cnt))
"""

    def run(script: str, *args: str) -> None:
        """``python3 producer.py ARGS``, in this process (an interpreter start saved)."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "argv", ["producer.py", *args])
            exec(compile(script, "producer.py", "exec"), {"__name__": "__main__"})

    # The seed's session: terminals 1-3 start consumers, terminal 4 runs the producer.
    test_group, other_group = _group(), _group()
    consumers = [
        subprocess.Popen(
            [sys.executable, "-c", consumer_py, group, count],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group, count in ((test_group, "2"), (test_group, "2"), (other_group, "4"))
    ]
    try:
        for partition, message in ((0, "#1"), (0, "#2"), (1, "#3"), (1, "#4")):
            run(producer_py, str(partition), f"message {message}")
        outputs = [c.communicate(timeout=30)[0].splitlines() for c in consumers]
    finally:
        for c in consumers:
            c.kill()
    expected = [
        "Message from partition [0]: b'message #1'",
        "Message from partition [0]: b'message #2'",
        "Message from partition [1]: b'message #3'",
        "Message from partition [1]: b'message #4'",
    ]
    # TEST_GROUP's two members share the four messages (which member gets which partition
    # depends on when each joined; the seed shows one outcome), OTHER_GROUP reads them all.
    assert [len(out) for out in outputs[:2]] == [2, 2]
    assert sorted(outputs[0] + outputs[1]) == expected
    assert sorted(outputs[2]) == expected
    for out in outputs:  # each partition in order
        for partition in ("[0]", "[1]"):
            mine = [line for line in out if partition in line]
            assert mine == sorted(mine)


def test_seed_000_l2290_custom_partitioner(bootstrap: str, new_topic: NewTopic) -> None:
    foobar = new_topic(3)
    printed = []

    def my_partitioner(key: bytes, all_partitions: list[int], available_partitions: Any) -> int:
        if key == b"first":
            return all_partitions[0]
        elif key == b"last":
            return all_partitions[-1]
        return random.choice(all_partitions)

    async def produce_one(producer: Any, key: bytes, value: bytes) -> None:
        future = await producer.send(foobar, value, key=key)
        resp = await future
        print("%s produced in partition: %i" % (value.decode(), resp.partition))
        printed.append((value, resp.partition))

    async def produce_task() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, partitioner=my_partitioner)
        await producer.start()
        await produce_one(producer, b"last", b"1")
        await produce_one(producer, b"some", b"2")
        await produce_one(producer, b"first", b"3")
        await producer.stop()

    asyncio.run(produce_task())
    assert printed[0] == (b"1", 2)
    assert printed[2] == (b"3", 0)
    assert printed[1][1] in {0, 1, 2}


def test_seed_000_l2420_local_state(
    bootstrap: str, new_topic: NewTopic, tmp_path: pathlib.Path
) -> None:
    """The example's indentation is broken by a page break (the ``OffsetOutOfRangeError``
    handler and the ``for tp, msgs`` loop belong inside ``while True``); this is the intended
    form. Its consumer runs until cancelled: here until it has counted what was written."""
    test = new_topic()
    _write(bootstrap, test, [b"a", b"b", b"a"])
    file_name_tmpl = str(tmp_path / "my-partition-state-{tp.topic}-{tp.partition}.json")
    group = _group()

    class RebalanceListener(ConsumerRebalanceListener):
        def __init__(self, consumer: Any, local_state: Any) -> None:
            self.consumer = consumer
            self.local_state = local_state

        async def on_partitions_revoked(self, revoked: Any) -> None:
            print("Revoked", revoked)
            self.local_state.dump_local_state()

        async def on_partitions_assigned(self, assigned: Any) -> None:
            print("Assigned", assigned)
            self.local_state.load_local_state(assigned)
            for tp in assigned:
                last_offset = self.local_state.get_last_offset(tp)
                if last_offset < 0:
                    await self.consumer.seek_to_beginning(tp)
                else:
                    self.consumer.seek(tp, last_offset + 1)

    class LocalState:
        def __init__(self) -> None:
            self._counts: dict[Any, Counter[str]] = {}
            self._offsets: dict[Any, int] = {}

        def dump_local_state(self) -> None:
            for tp in self._counts:
                fpath = pathlib.Path(file_name_tmpl.format(tp=tp))
                with fpath.open("w+") as f:
                    json.dump(
                        {"last_offset": self._offsets[tp], "counts": dict(self._counts[tp])}, f
                    )

        def load_local_state(self, partitions: Any) -> None:
            self._counts.clear()
            self._offsets.clear()
            for tp in partitions:
                fpath = pathlib.Path(file_name_tmpl.format(tp=tp))
                state: dict[str, Any] = {
                    "last_offset": -1,  # Non existing, will reset
                    "counts": {},
                }
                if fpath.exists():
                    with fpath.open("r+") as f:
                        try:
                            state = json.load(f)
                        except json.JSONDecodeError:
                            pass
                self._counts[tp] = Counter(state["counts"])
                self._offsets[tp] = state["last_offset"]

        def add_counts(self, tp: Any, counts: Counter[str], last_offset: int) -> None:
            self._counts[tp] += counts
            self._offsets[tp] = last_offset

        def get_last_offset(self, tp: Any) -> int:
            return self._offsets[tp]

        def discard_state(self, tps: Any) -> None:
            for tp in tps:
                self._offsets[tp] = -1
                self._counts[tp] = Counter()

    async def save_state_every_second(local_state: LocalState) -> None:
        while True:
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                break
            local_state.dump_local_state()

    out_of_range: list[Any] = []

    async def consume(expect: int) -> dict[str, Any]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,  # Consumer must be in a group to commit
            enable_auto_commit=False,  # Will disable autocommit
            auto_offset_reset="none",
            key_deserializer=lambda key: key.decode("utf-8") if key else "",
        )
        await consumer.start()
        local_state = LocalState()
        listener = RebalanceListener(consumer, local_state)
        consumer.subscribe(topics=[test], listener=listener)
        save_task = asyncio.create_task(save_state_every_second(local_state))
        tp0 = TopicPartition(test, 0)
        try:
            while sum(local_state._counts.get(tp0, Counter()).values()) < expect:
                try:
                    msg_set = await consumer.getmany(timeout_ms=1000)
                except OffsetOutOfRangeError as err:
                    # This means that saved file is outdated and should be
                    # discarded
                    tps = err.args[0].keys()
                    out_of_range.append(set(tps))
                    local_state.discard_state(tps)
                    await consumer.seek_to_beginning(*tps)
                    continue
                for tp, msgs in msg_set.items():
                    counts: Counter[str] = Counter()
                    for msg in msgs:
                        print("Process", tp, msg.key)
                        counts[msg.key] += 1
                    local_state.add_counts(tp, counts, msg.offset)
        finally:
            await consumer.stop()
            save_task.cancel()
            await save_task
        path = pathlib.Path(file_name_tmpl.format(tp=tp0))
        return dict(json.loads(path.read_text()))

    state = asyncio.run(consume(3))
    assert state == {"last_offset": 2, "counts": {"a": 2, "b": 1}}
    # a restart resumes after the saved offset: one new record, counts carried on
    _write(bootstrap, test, [b"b"])
    state = asyncio.run(consume(4))
    assert state == {"last_offset": 3, "counts": {"a": 2, "b": 2}}
    # an outdated file (offset past the end) -> OffsetOutOfRangeError -> from the beginning
    path = pathlib.Path(file_name_tmpl.format(tp=TopicPartition(test, 0)))
    path.write_text(json.dumps({"last_offset": 100, "counts": {"a": 9}}))
    state = asyncio.run(consume(4))
    assert out_of_range == [{TopicPartition(test, 0)}]
    assert state == {"last_offset": 3, "counts": {"a": 2, "b": 2}}


def test_seed_000_l2633_send_many_batches(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic(2)
    sent = []

    async def send_many(num: int) -> None:
        topic = my_topic
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()

        batch = producer.create_batch()

        i = 0
        while i < num:
            msg = ("Test message %d" % i).encode("utf-8")
            metadata = batch.append(key=None, value=msg, timestamp=None)
            if metadata is None:
                partitions = await producer.partitions_for(topic)
                partition = random.choice(tuple(partitions))
                await producer.send_batch(batch, topic, partition=partition)
                print("%d messages sent to partition %d" % (batch.record_count(), partition))
                sent.append(batch.record_count())
                batch = producer.create_batch()
                continue
            i += 1
        partitions = await producer.partitions_for(topic)
        partition = random.choice(tuple(partitions))
        await producer.send_batch(batch, topic, partition=partition)
        print("%d messages sent to partition %d" % (batch.record_count(), partition))
        sent.append(batch.record_count())
        await producer.stop()

    asyncio.run(send_many(1000))
    assert sum(sent) == 1000 and len(sent) > 1  # 16 KiB batches: more than one
    got = asyncio.run(_read_all(bootstrap, my_topic, 1000))
    assert sorted(m.value for m in got) == sorted(b"Test message %d" % i for i in range(1000))


def test_seed_000_l2682_consume_process_produce(bootstrap: str, new_topic: NewTopic) -> None:
    in_topic, out_topic = new_topic(), new_topic()
    group_id = _group()
    transactional_id = f"my-txn-id-{group_id}"
    poll_timeout = 60_000
    _write(bootstrap, in_topic, [b"k1", b"k2", b"k1"])

    def process_batch(msgs: list[Any]) -> list[tuple[bytes, bytes, int]]:
        # Group by key do simple count sampling by a minute window
        buckets_by_key: defaultdict[bytes, Counter[int]] = defaultdict(Counter)
        for msg in msgs:
            timestamp = (msg.timestamp // 60_000) * 60
            buckets_by_key[msg.key][timestamp] += 1

        res = []
        for key, counts in buckets_by_key.items():
            for timestamp, count in counts.items():
                value = str(count).encode()
                res.append((key, value, timestamp))

        return res

    async def transactional_process() -> None:
        consumer = AIOKafkaConsumer(
            in_topic,
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=group_id,
            isolation_level="read_committed",  # <-- This will filter aborted txn's
            auto_offset_reset="earliest",  # the input was written before the group started
        )
        await consumer.start()

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
        await producer.start()

        seen = 0
        try:
            while seen < 3:
                msg_batch = await consumer.getmany(timeout_ms=poll_timeout)

                async with producer.transaction():
                    commit_offsets = {}
                    in_msgs = []
                    for tp, msgs in msg_batch.items():
                        in_msgs.extend(msgs)
                        commit_offsets[tp] = msgs[-1].offset + 1

                    out_msgs = process_batch(in_msgs)
                    for key, value, timestamp in out_msgs:
                        await producer.send(
                            out_topic, value=value, key=key, timestamp_ms=int(timestamp * 1000)
                        )
                    # We commit through the producer because we want the commit
                    # to only succeed if the whole transaction is done
                    # successfully.
                    await producer.send_offsets_to_transaction(commit_offsets, group_id)
                seen += len(in_msgs)
        finally:
            await consumer.stop()
            await producer.stop()

    asyncio.run(transactional_process())
    assert asyncio.run(_committed(bootstrap, group_id, TopicPartition(in_topic, 0))) == 3
    out = asyncio.run(_read_all(bootstrap, out_topic, 2, isolation_level="read_committed"))
    counts: Counter[bytes] = Counter()
    for m in out:
        counts[m.key] += int(m.value)
        assert m.timestamp % 60_000 == 0
    assert counts == Counter({b"k1": 2, b"k2": 1})


@pytest.mark.kafka_needs("ssl")
def test_seed_000_l2346_ssl(kafka_cluster: Any, new_topic: NewTopic) -> None:
    """The example's ``create_ssl_context(cafile=, certfile=, keyfile=, password=)``, from
    ``kafkastate.helpers`` (issue 19), with the harness's CA and client certificate (whose
    key is encrypted, as the example's); an external cluster without the client
    certificate gets the CA only."""
    tls = kafka_cluster.tls
    my_topic = new_topic()
    if tls.client_cert is None:
        context = create_ssl_context(cafile=str(tls.ca_file))
    else:
        context = create_ssl_context(
            cafile=str(tls.ca_file),
            certfile=str(tls.client_cert),
            keyfile=str(tls.client_key),
            password=tls.client_key_password,
        )
    ssl_bootstrap = kafka_cluster.ssl_bootstrap
    result = []

    async def produce_and_consume() -> None:
        # Produce
        producer = AIOKafkaProducer(
            bootstrap_servers=ssl_bootstrap, security_protocol="SSL", ssl_context=context
        )
        await producer.start()
        try:
            msg = await producer.send_and_wait(my_topic, b"Super Message", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            my_topic, bootstrap_servers=ssl_bootstrap, security_protocol="SSL", ssl_context=context
        )
        await consumer.start()
        try:
            consumer.seek(TopicPartition(my_topic, 0), msg.offset)
            fetch_msg = await consumer.getone()
        finally:
            await consumer.stop()
        print("Success", msg, fetch_msg)
        result.append((msg.offset, fetch_msg.offset, fetch_msg.value))

    asyncio.run(produce_and_consume())
    assert result == [(0, 0, b"Super Message")]


# -- seed 003 (kafka-python KafkaConsumer reference) -------------------------------------------


@pytest.mark.parametrize("api_version", [(0, 9), (0, 8, 2), (0, 8, 1), (0, 8, 0)])
def test_seed_003_api_version_examples(
    bootstrap: str, new_topic: NewTopic, api_version: tuple[int, ...]
) -> None:
    """Seed 003's only code is the ``api_version`` examples: each hint is accepted, and the
    consumer reads with what the broker negotiates (Kafka 4 has no 0.8 protocol to fall back
    to), manual assignment with every hint as the reference describes."""
    topic = new_topic()
    _write(bootstrap, topic, [b"v"])
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, api_version=api_version, auto_offset_reset="earliest"
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        records = consumer.poll(timeout_ms=10_000)
        assert [r.value for r in records[TopicPartition(topic, 0)]] == [b"v"]
    finally:
        consumer.close()


def test_seed_000_l1209_fire_and_forget_commit(bootstrap: str, new_topic: NewTopic) -> None:
    my_topic = new_topic()
    _write(bootstrap, my_topic, [b"a"])
    group = _group()
    done: list[Any] = []

    def on_commit_done(fut: asyncio.Future[None]) -> None:
        done.append(fut.exception())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        consumer = _manual_commit_consumer(bootstrap, my_topic, group)
        await consumer.start()
        try:
            await consumer.getone()
            fut = loop.create_task(consumer.commit())
            fut.add_done_callback(on_commit_done)
            await fut
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert done == [None]
    assert asyncio.run(_committed(bootstrap, group, TopicPartition(my_topic, 0))) == 1


def test_seed_000_l1612_token_provider_is_checked() -> None:
    """aiokafka's AbstractTokenProvider is there (docs/security-oauth.md); an object
    without token() is refused, naming the option."""
    assert hasattr(kafkastate.abc, "AbstractTokenProvider")
    with pytest.raises(KafkaConfigurationError, match="sasl_oauth_token_provider"):
        AIOKafkaProducer(
            bootstrap_servers="localhost:9092",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=object(),
        )
