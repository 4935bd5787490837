"""The fire-and-forget ``send_nowait`` of every face against a real broker: the anyio
``Producer`` (asyncio and trio), ``AIOKafkaProducer`` and the blocking ``KafkaProducer``.

The rule is the core's (``ProducerMachine.send(block=False)``, tests/core/producer/
test_producer_nowait.py): a record that does not fit ``buffer_memory`` now is refused with
``BufferFullError`` (a builtin ``BufferError``, as confluent-kafka's ``produce()``) and
nothing is appended; the awaited / blocking send then waits for room as usual. Records are
read back with kafka-python's consumer and matched with the metadata the producer returned.

The buffer refusal is made deterministic, not timed: ``buffer_memory`` holds one 1 KB
record but not two, and a 30 s linger keeps the first one's batch in the buffer until the
refusal makes every batch sendable (Java's rule for an exhausted pool).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.anyio import Delivery, open_producer
from kafkastate.asyncio import AIOKafkaProducer
from kafkastate.errors import BufferFullError, KafkaTimeoutError
from kafkastate.sync import KafkaProducer

kafka = pytest.importorskip("kafka")

from tests._support.readback import consume  # noqa: E402 (after the importorskip)

BIG = b"x" * 1000
ONE_RECORD: dict[str, Any] = {"buffer_memory": 2000, "linger_ms": 30_000}


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"nowait-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def _values(n: int) -> list[bytes]:
    return [f"v{i}".encode() for i in range(n)]


def _check_log(bootstrap: str, topic: str, values: list[bytes], metas: list[Any]) -> None:
    """Every value written once, where its metadata says, in send order per partition."""
    records = consume(bootstrap, topic, len(values))
    where = {(r.partition, r.offset): r.value for r in records}
    assert len(where) == len(records) == len(values)
    for value, meta in zip(values, metas, strict=True):
        assert meta.topic == topic
        assert where[(meta.partition, meta.offset)] == value
    by_partition: dict[int, list[int]] = {}
    for meta in metas:
        by_partition.setdefault(meta.partition, []).append(meta.offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets)


@pytest.fixture(autouse=True)
def _no_io_thread_left() -> Iterator[None]:
    def threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("kafkastate-producer-io")}

    before = threads()
    yield
    deadline = time.monotonic() + 5
    while threads() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads() - before == set()


# ------------------------------------------------------------------------------ anyio


@pytest.mark.anyio
async def test_anyio_send_nowait_in_a_loop_delivers_everything(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=3)
    values = _values(3000)
    deliveries: list[Delivery] = []
    called: list[Delivery] = []
    with anyio.fail_after(60):
        async with open_producer(bootstrap, linger_ms=5) as producer:
            for i, value in enumerate(values):
                delivery = producer.send_nowait(topic, value, key=b"k" if i % 3 == 0 else None)
                if i % 500 == 0:
                    delivery.add_done_callback(called.append)
                deliveries.append(delivery)
                if i % 100 == 99:
                    await anyio.sleep(0)  # confluent's poll(0): let the producer's task run
            await producer.flush()
            assert all(d.done() for d in deliveries)
    assert sorted(d.record_id for d in called) == [
        deliveries[i].record_id for i in range(0, 3000, 500)
    ]
    _check_log(bootstrap, topic, values, [d.result() for d in deliveries])


@pytest.mark.anyio
async def test_anyio_full_buffer_refuses_then_enqueue_waits(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    with anyio.fail_after(20):  # well under the linger: the refusal sends the first batch
        async with open_producer(bootstrap, **ONE_RECORD) as producer:
            await producer.partitions_for(topic)
            first = producer.send_nowait(topic, BIG)
            with pytest.raises(BufferFullError) as info:
                producer.send_nowait(topic, BIG + b"2")
            assert isinstance(info.value, BufferError) and info.value.retriable
            second = await producer.enqueue(topic, BIG + b"2")  # waits for room
            assert first.done()  # the refusal sent the lingering batch
            await producer.flush()  # the second one's batch lingers
            metas = [await first, await second]
    _check_log(bootstrap, topic, [BIG, BIG + b"2"], metas)


@pytest.mark.anyio
async def test_anyio_send_nowait_to_a_missing_topic_fails_its_delivery(
    kafka_cluster: Any,
) -> None:
    async with open_producer(
        kafka_cluster.bootstrap, max_block_ms=300, allow_auto_create_topics=False
    ) as producer:
        delivery = producer.send_nowait(f"missing-{uuid.uuid4().hex[:8]}", b"x")
        assert not delivery.done()  # held for its metadata, not raised
        with anyio.fail_after(10), pytest.raises(KafkaTimeoutError, match="max_block"):
            await delivery


# ---------------------------------------------------------------------------- asyncio


def test_aiokafka_send_nowait_futures(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    values = _values(500)

    async def main() -> tuple[list[Any], BufferFullError]:
        async with AIOKafkaProducer(
            bootstrap_servers=bootstrap, value_serializer=lambda v: v
        ) as producer:
            futures = [producer.send_nowait(topic, v) for v in values]
            assert all(isinstance(f, asyncio.Future) for f in futures)
            await producer.flush()
            metas = [f.result() for f in futures]
        async with AIOKafkaProducer(bootstrap_servers=bootstrap, **ONE_RECORD) as small:
            await small.partitions_for(topic)
            pending = small.send_nowait(topic, BIG, partition=0)
            with pytest.raises(BufferFullError) as info:
                small.send_nowait(topic, BIG, partition=0)
            await asyncio.wait_for(pending, 20)  # the refusal sent the lingering batch
        return metas, info.value

    metas, refused = asyncio.run(main())
    assert isinstance(refused, BufferError)
    records = consume(bootstrap, topic, len(values) + 1)
    assert len(records) == len(values) + 1  # the refused record was not written
    _check_log_subset(records, values, metas)


def _check_log_subset(records: list[Any], values: list[bytes], metas: list[Any]) -> None:
    where = {(r.partition, r.offset): r.value for r in records}
    for value, meta in zip(values, metas, strict=True):
        assert where[(meta.partition, meta.offset)] == value


# --------------------------------------------------------------------------- blocking


def test_sync_send_nowait_refuses_instead_of_blocking(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    with KafkaProducer(bootstrap_servers=bootstrap, **ONE_RECORD) as producer:
        producer.partitions_for(topic)
        first = producer.send_nowait(topic, BIG)
        with pytest.raises(BufferFullError):
            producer.send_nowait(topic, BIG + b"2")
        second = producer.send(topic, BIG + b"2")  # blocks for room (max_block_ms)
        assert first.is_done  # the refusal sent the lingering batch
        producer.flush(timeout=20)  # the second one's batch lingers
        metas = [first.get(timeout=0), second.get(timeout=0)]
        values = _values(300)
        futures = [producer.send_nowait(topic, v) for v in values[:1]]
        for v in values[1:]:
            while True:
                try:
                    futures.append(producer.send_nowait(topic, v))
                    break
                except BufferFullError:
                    time.sleep(0.001)  # the IO thread frees room by itself: no poll()
        producer.flush(timeout=30)
        metas += [f.get(timeout=0) for f in futures]
    _check_log(bootstrap, topic, [BIG, BIG + b"2", *values], metas)


def test_sync_send_nowait_to_a_missing_topic_fails_its_future(kafka_cluster: Any) -> None:
    with KafkaProducer(
        bootstrap_servers=kafka_cluster.bootstrap, max_block_ms=300, allow_auto_create_topics=False
    ) as producer:
        future = producer.send_nowait(f"missing-{uuid.uuid4().hex[:8]}", b"x")
        with pytest.raises(KafkaTimeoutError, match="max_block"):
            future.get(timeout=10)
