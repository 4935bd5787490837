"""A call on a closed producer or consumer, on every face, against a real broker: the same
typed error everywhere -- ProducerClosedError (aiokafka's ``ProducerClosed``) for a producer,
ConsumerStoppedError for a consumer, both an ``IllegalStateError`` (kafka-python's type after
``close()``) and a ``RuntimeError`` (what the anyio face raised before, and aiokafka's
``KafkaError`` is). ``flush()`` and closing again return at once, as in aiokafka 0.14 and
kafka-python 3.0 (checked against both on the same broker)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from kafkastate.anyio import open_consumer, open_producer
from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer
from kafkastate.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    ProducerClosed,
    ProducerClosedError,
)
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer, KafkaProducer
from tests.adapters.test_consumer import _topic

pytestmark = pytest.mark.integration


def test_the_closed_errors_are_what_aiokafka_and_kafka_python_users_catch() -> None:
    assert ProducerClosed is ProducerClosedError
    for error in (ProducerClosedError, ConsumerStoppedError):
        assert issubclass(error, IllegalStateError)
        assert issubclass(error, RuntimeError)


async def _refused(call: Callable[[], Awaitable[Any]], error: type[Exception], *words: str) -> None:
    with pytest.raises(error) as info:
        await call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.anyio
async def test_anyio_producer_after_its_block(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap, partitions=1)
    async with open_producer(kafka_cluster.bootstrap) as producer:
        await producer.send(topic, b"before")
        await producer.aclose()
        # closed inside the block: the core's refusal, the same type
        await _refused(lambda: producer.send(topic, b"v"), ProducerClosedError, "send", "closed")
        with pytest.raises(ProducerClosedError, match="closed"):
            producer.send_nowait(topic, b"v")
        await producer.flush()  # every record has its outcome
    outside = "`async with open_producer(...)`"
    for name, call in (
        ("send", lambda: producer.send(topic, b"v")),
        ("send_batch", lambda: producer.send_batch(producer.create_batch(), topic, partition=0)),
        ("begin_transaction", producer.begin_transaction),
        ("commit_transaction", producer.commit_transaction),
        ("partitions_for", lambda: producer.partitions_for(topic)),
    ):
        await _refused(call, ProducerClosedError, name, "closed", outside)
    with pytest.raises(ProducerClosedError, match=r"send: the producer is closed"):
        producer.send_nowait(topic, b"v")
    with anyio.fail_after(5):  # at once: nothing is left to wait for
        await producer.flush()
        await producer.aclose()  # closing again does nothing
    producer.abort()


@pytest.mark.anyio
async def test_anyio_consumer_after_its_block(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with open_consumer(bootstrap_servers=kafka_cluster.bootstrap, group_id=group) as c:
        c.assign([(topic, 0)])
    outside = "`async with open_consumer(...)`"
    for call in (
        c.getone,
        c.getmany,
        lambda: c.commit({(topic, 0): 0}),
        lambda: c.position((topic, 0)),
        lambda: c.committed((topic, 0)),
    ):
        await _refused(call, ConsumerStoppedError, "closed", outside)


def test_aiokafka_faces_after_stop(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        await producer.send_and_wait(topic, b"before")
        await producer.stop()
        for call in (
            lambda: producer.send(topic, b"v"),
            lambda: producer.send_and_wait(topic, b"v"),
            producer.begin_transaction,
            lambda: producer.partitions_for(topic),
        ):
            await _refused(call, ProducerClosed, "stopped")
        await asyncio.wait_for(producer.flush(), 5)  # aiokafka's returns too
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4()}")
        await consumer.start()
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.stop()
        for call in (
            consumer.getone,
            consumer.getmany,
            consumer.commit,  # (these said "not started" before)
            lambda: consumer.position(TopicPartition(topic, 0)),
        ):
            await _refused(call, ConsumerStoppedError, "stopped")

    asyncio.run(main())


def test_kafka_python_faces_after_close(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topic, b"before").get(30)
    producer.close()
    for refused in (
        lambda: producer.send(topic, b"v"),
        producer.begin_transaction,
        lambda: producer.partitions_for(topic),
    ):
        with pytest.raises(ProducerClosedError, match="closed"):
            refused()
    producer.flush()  # kafka-python's returns too
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4()}")
    consumer.assign([TopicPartition(topic, 0)])
    consumer.close()
    for refused in (
        lambda: consumer.poll(100),
        lambda: consumer.commit({TopicPartition(topic, 0): 0}),
        lambda: consumer.position(TopicPartition(topic, 0)),
    ):
        with pytest.raises(ConsumerStoppedError, match="closed"):
            refused()


@pytest.mark.anyio
async def test_anyio_partitions_for_waiting_when_the_producer_closes(kafka_cluster: Any) -> None:
    # A task outside the block waits for a topic that will not appear; the block ends:
    # its wait ends at once with ProducerClosedError (no KafkaTimeoutError at max_block_ms).
    missing = f"closed-missing-{uuid.uuid4().hex[:8]}"
    outcome: list[BaseException] = []

    async def waiter(producer: Any) -> None:
        try:
            await producer.partitions_for(missing)
        except Exception as exc:
            outcome.append(exc)

    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            open_producer(
                kafka_cluster.bootstrap, allow_auto_create_topics=False, max_block_ms=60000
            ) as producer,
        ):
            tg.start_soon(waiter, producer)
            await anyio.sleep(0.5)
    (error,) = outcome
    assert isinstance(error, ProducerClosedError), error


def test_aiokafka_partitions_for_waiting_when_the_producer_stops(kafka_cluster: Any) -> None:
    missing = f"closed-missing-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_cluster.bootstrap,
            allow_auto_create_topics=False,
            max_block_ms=60000,
        )
        await producer.start()
        waiting = asyncio.ensure_future(producer.partitions_for(missing))
        await asyncio.sleep(0.5)
        await producer.stop()
        with pytest.raises(ProducerClosedError):
            await asyncio.wait_for(waiting, 10)

    asyncio.run(main())
