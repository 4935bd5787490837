"""The anyio producer (on asyncio and trio) and AIOKafkaProducer against a real broker.

Records are read back with kafka-python's consumer (an independent implementation) and
matched with the metadata the producer returned. Sockets are counted through ``/proc``,
not through the driver's private state.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import ssl
import uuid
import weakref
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.anyio import Delivery, RecordMetadata, open_producer
from kafkastate.asyncio import AIOKafkaProducer
from kafkastate.core.producer.partitioner import murmur2
from kafkastate.core.producer.producer import ProducerClosedError
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    ProducerClosed,
)
from kafkastate.structs import TopicPartition

kafka = pytest.importorskip("kafka")

from tests._support.buffer import send_until_refused  # noqa: E402
from tests._support.readback import consume  # noqa: E402 (after the importorskip)
from tests._support.suspensions import counting_suspensions  # noqa: E402


def _topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"async-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def _sockets_to(port: int) -> int:
    """Established TCP connections of this process to ``port`` (Linux /proc)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    mine = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            mine += 1
    return mine


def _port(bootstrap: str) -> int:
    return int(bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)[1])


def _check_against_log(metas: list[RecordMetadata], records: list[Any], topic: str) -> None:
    where = {(r.partition, r.offset): r.value for r in records}
    assert len(where) == len(records)  # nothing twice
    for i, meta in enumerate(metas):
        assert meta.topic == topic
        assert where[(meta.partition, meta.offset)] == f"v{i}".encode()


# ------------------------------------------------------------------------------ anyio


async def _round_trip(bootstrap: str, topic: str, n: int) -> list[RecordMetadata]:
    async with open_producer(bootstrap, linger_ms=2, compression_type="lz4") as producer:
        assert await producer.partitions_for(topic) == frozenset({0, 1, 2})
        first = await producer.send(topic, b"v0", key=b"k0")
        deliveries: list[Delivery] = []
        for i in range(1, n):
            key = f"k{i % 7}".encode() if i % 2 else None
            deliveries.append(await producer.enqueue(topic, f"v{i}".encode(), key))
        await producer.flush()
        assert all(d.done() for d in deliveries)
        metas = [first] + [d.result() for d in deliveries]
        # an idle producer answers promptly: received bytes wake the pump, no timer needed
        for i in range(n, n + 3):
            with anyio.fail_after(2):
                metas.append(await producer.send(topic, f"v{i}".encode()))
    return metas


@pytest.mark.anyio
async def test_open_producer_round_trip(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    n = 200
    with anyio.fail_after(60):
        metas = await _round_trip(bootstrap, topic, n)
    n += 3
    assert all(0 <= m.partition < 3 and m.offset >= 0 for m in metas)
    per_partition: dict[int, list[int]] = {}
    for m in metas:
        per_partition.setdefault(m.partition, []).append(m.offset)
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))  # dense, in send order
    records = consume(bootstrap, topic, n)
    assert len(records) == n
    _check_against_log(metas, records, topic)


@pytest.mark.anyio
async def test_clean_exit_delivers_lingering_records(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    with anyio.fail_after(10):  # well under the 30 s linger: close does not linger
        async with open_producer(bootstrap, linger_ms=30_000) as producer:
            deliveries = [await producer.enqueue(topic, f"v{i}".encode()) for i in range(5)]
            assert not any(d.done() for d in deliveries)
    metas = [d.result() for d in deliveries]
    assert [m.offset for m in metas] == list(range(5))
    _check_against_log(metas, consume(bootstrap, topic, 5), topic)


@pytest.mark.anyio
async def test_awaited_send_yields_only_for_sendable_batches(kafka_cluster: Any) -> None:
    # A record that only opens a batch (waiting for its linger) does not yield to the event
    # loop -- with keys over many partitions that would be every few records; one that
    # fills a batch does, so the producer's task sends it while this one goes on.
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=8)
    keys = {}  # one key per partition
    for i in range(1000):
        key = b"k%d" % i
        keys.setdefault((murmur2(key) & 0x7FFFFFFF) % 8, key)
    with anyio.fail_after(30):
        async with open_producer(bootstrap, linger_ms=60_000, batch_size=1000) as producer:
            await producer.enqueue(topic, b"warm-up", keys[0])  # waits for the metadata
            await producer.flush()

            async def enqueue(partition: int, yields: list[int]) -> Delivery:
                coro = producer.enqueue(topic, b"v" * 100, keys[partition])
                return await counting_suspensions(coro, yields)

            opened_yields = [0]
            opened = [await enqueue(p, opened_yields) for p in range(8)]
            assert opened_yields == [0], "a batch that only waits for its linger cost a yield"
            filling_yields = [0]
            filling = [await enqueue(0, filling_yields) for _ in range(12)]
            # 13 records of ~110 bytes fill one 1000-byte batch, not two
            assert filling_yields == [1], "a full batch is sendable now: the send yields once"
            with anyio.fail_after(10):  # well under the linger: sent because full
                await filling[0].wait()
    assert all(d.result().topic == topic for d in opened + filling)  # delivered at close


@pytest.mark.kafka_needs("ssl")
@pytest.mark.anyio
async def test_ssl(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap, partitions=1)
    context = ssl.create_default_context(cafile=str(kafka_cluster.ca_file))
    async with open_producer(
        kafka_cluster.ssl_bootstrap, security_protocol="SSL", ssl_context=context
    ) as producer:
        meta = await producer.send(topic, b"v0")
    assert (meta.partition, meta.offset) == (0, 0)
    _check_against_log([meta], consume(kafka_cluster.bootstrap, topic, 1), topic)


@pytest.mark.anyio
async def test_cancelled_send_does_not_lose_the_driver(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    async with open_producer(bootstrap, linger_ms=500) as producer:
        await producer.partitions_for(topic)
        with anyio.move_on_after(0.05) as scope:
            await producer.send(topic, b"v0")  # lingers 500 ms: still pending at 50 ms
        assert scope.cancelled_caught
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in (1, 2):
                    tg.start_soon(producer.send, topic, f"v{i}".encode())
                tg.cancel_scope.deadline = anyio.current_time() + 0.01  # cancel them too
            third = await producer.send(topic, b"v3")
            await producer.flush()
    records = consume(bootstrap, topic, 4)
    # cancelling a wait never withdraws the record: all four are in the log
    assert sorted(r.value for r in records) == [b"v0", b"v1", b"v2", b"v3"]
    assert third.offset == 3


class _Boom(Exception):
    pass


@pytest.mark.anyio
async def test_exception_aborts_and_closes_sockets(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    port = _port(bootstrap)
    before = _sockets_to(port)
    pending: Delivery | None = None
    with anyio.fail_after(10), pytest.raises(_Boom):
        async with open_producer(bootstrap, linger_ms=30_000) as producer:
            await producer.enqueue(topic, b"v0")
            await producer.flush()  # connected now
            assert _sockets_to(port) > before
            pending = await producer.enqueue(topic, b"never")  # lingers 30 s
            raise _Boom
    assert pending is not None
    with pytest.raises(ProducerClosedError):
        pending.result()
    assert _sockets_to(port) == before
    assert [r.value for r in consume(bootstrap, topic, 1, timeout=3)] == [b"v0"]


@pytest.mark.anyio
async def test_cancellation_aborts(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    port = _port(bootstrap)
    before = _sockets_to(port)
    pending: Delivery | None = None
    with anyio.move_on_after(1) as scope:
        async with open_producer(bootstrap, linger_ms=30_000) as producer:
            pending = await producer.enqueue(topic, b"never")
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert pending is not None
    with pytest.raises(ProducerClosedError):
        pending.result()
    assert _sockets_to(port) == before


@pytest.mark.anyio
async def test_max_block_times_out_on_a_missing_topic(kafka_cluster: Any) -> None:
    async with open_producer(
        kafka_cluster.bootstrap, max_block_ms=300, allow_auto_create_topics=False
    ) as producer:
        # the error only: when max_block ends the wait is checked on the fake clock in
        # tests/core/producer/test_producer_metadata_wait.py
        with pytest.raises(KafkaTimeoutError, match="max_block"):
            await producer.send(f"missing-{uuid.uuid4().hex[:8]}", b"x")


@pytest.mark.anyio
async def test_a_send_waiting_for_metadata_fails_closed_when_the_producer_closes(
    kafka_cluster: Any,
) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    outcome: list[BaseException] = []

    async def send(producer: Any) -> None:
        try:
            await producer.send(missing, b"x")
        except KafkaError as exc:
            outcome.append(exc)

    with anyio.fail_after(20):
        async with (
            open_producer(
                kafka_cluster.bootstrap, max_block_ms=60_000, allow_auto_create_topics=False
            ) as producer,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(send, producer)
            while producer.machine.accumulator.waiting_sends == 0:
                await anyio.sleep(0.01)
            await producer.aclose()
    (error,) = outcome
    assert isinstance(error, ProducerClosedError), repr(error)


def test_aiokafka_send_waiting_for_metadata_raises_producer_closed_on_stop(
    kafka_cluster: Any,
) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_cluster.bootstrap,
            max_block_ms=60_000,
            allow_auto_create_topics=False,
        )
        await producer.start()
        send = asyncio.ensure_future(producer.send(missing, b"x"))
        await asyncio.sleep(0)  # the send is appended, and held for the topic's metadata
        assert not send.done()
        await producer.stop()
        with pytest.raises(ProducerClosed):
            await asyncio.wait_for(send, 20)

    asyncio.run(main())


@pytest.mark.anyio
async def test_fire_and_forget_sends_to_a_topic_without_metadata_meet_buffer_memory(
    kafka_cluster: Any,
) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    async with open_producer(
        kafka_cluster.bootstrap,
        buffer_memory=4096,
        max_block_ms=60_000,
        allow_auto_create_topics=False,
    ) as producer:
        # the records held for metadata count too: the bound refuses the burst
        held = send_until_refused(lambda: producer.send_nowait(missing, bytes(100)))
        assert producer.machine.accumulator.buffer_used <= 4096
        producer.abort()  # the held records fail, their memory is given back
    for delivery in held:
        with pytest.raises(ProducerClosedError):
            delivery.result()  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_missing_topic_is_created_by_default_like_java(kafka_cluster: Any) -> None:
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    async with open_producer(kafka_cluster.bootstrap, max_block_ms=20_000) as producer:
        meta = await producer.send(topic, b"first")
    assert meta.topic == topic and meta.offset == 0


def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="lingr_ms"):
        open_producer("localhost:9092", lingr_ms=5)  # type: ignore[call-arg]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("acks", 2, "acks"),
        ("compression_type", "brotli", "compression_type"),
        ("security_protocol", "SASL_KERBEROS", "security_protocol"),
        ("linger_ms", -1, "linger_ms"),
        ("batch_size", "big", "batch_size"),
        ("max_block_ms", -5, "max_block_ms"),
    ],
)
async def test_bad_option_values(option: str, value: Any, match: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=match):
        async with open_producer("127.0.0.1:9", **{option: value}):
            pytest.fail("the producer started")


# ------------------------------------------------------------------------------ asyncio


def test_aiokafka_producer(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)

    async def main() -> list[RecordMetadata]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            key_serializer=lambda k: None if k is None else str(k).encode(),
            value_serializer=lambda v: json.dumps(v).encode(),
            linger_ms=5,
        )
        with pytest.raises(RuntimeError, match="not started"):
            await producer.send(topic, 1)
        await producer.start()
        try:
            assert await producer.partitions_for(topic) == {0, 1, 2}
            metas = [await producer.send_and_wait(topic, {"i": 0}, key=0)]
            futures = [await producer.send(topic, {"i": i}, key=i) for i in range(1, 50)]
            assert all(isinstance(f, asyncio.Future) for f in futures)
            await producer.flush()
            assert all(f.done() for f in futures)
            metas += [f.result() for f in futures]
        finally:
            await producer.stop()
        async with AIOKafkaProducer(bootstrap_servers=bootstrap) as again:
            metas.append(await again.send_and_wait(topic, b"raw", partition=1))
        return metas

    metas = asyncio.run(main())
    records = consume(bootstrap, topic, 51)
    by_place = {(r.partition, r.offset): r for r in records}
    assert len(by_place) == 51
    for i, meta in enumerate(metas[:50]):
        record = by_place[(meta.partition, meta.offset)]
        assert json.loads(record.value) == {"i": i}
        assert record.key == str(i).encode()
    last = by_place[(metas[50].partition, metas[50].offset)]
    assert (last.partition, last.value, last.key) == (1, b"raw", None)


def test_aiokafka_send_futures_and_record_metadata(kafka_cluster: Any) -> None:
    # Keyless sends take the producer's hot path. Futures the caller keeps, awaits or
    # hangs a callback on get aiokafka's RecordMetadata; a dropped one (nobody can see
    # it) is simply released.
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)

    async def main() -> tuple[list[Any], list[Any], int, list[Any]]:
        async with AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            kept = []
            called: list[Any] = []
            dropped = []
            for i in range(600):
                future = await producer.send(topic, b"v%d" % i)
                if i % 3 == 0:
                    kept.append(future)
                elif i % 3 == 1:
                    future.add_done_callback(lambda f: called.append(f.result()))
                else:
                    dropped.append(weakref.ref(future))
                del future
            gathered = await asyncio.gather(*kept)
            await producer.flush()
            gc.collect()
            alive = sum(ref() is not None for ref in dropped)
            return gathered, called, alive, [f.result() for f in kept]

    gathered, called, alive, results = asyncio.run(main())
    assert gathered == results
    assert len(called) == 200 and alive == 0
    metas = sorted([*gathered, *called], key=lambda m: m.offset)
    assert [m.offset for m in metas] == [i for i in range(600) if i % 3 != 2]
    first = metas[0]
    assert isinstance(first, tuple) and first._fields == (
        "topic",
        "partition",
        "topic_partition",
        "offset",
        "timestamp",
        "timestamp_type",
        "log_start_offset",
    )
    assert first.topic_partition == TopicPartition(topic, 0) == (first.topic, first.partition)
    assert all(m.timestamp_type == 0 and m.log_start_offset == 0 for m in metas)
    records = consume(bootstrap, topic, 600)
    assert [r.value for r in sorted(records, key=lambda r: r.offset)] == [
        b"v%d" % i for i in range(600)
    ]


def test_aiokafka_producer_bad_options() -> None:
    AIOKafkaProducer(bootstrap_servers="localhost:9092", loop=None)  # aiokafka's, ignored
    with pytest.raises(KafkaConfigurationError, match="transactional_id"):
        AIOKafkaProducer(bootstrap_servers="localhost:9092", transactional_id="")
    with pytest.raises(KafkaConfigurationError, match="transaction_timeout_ms"):
        AIOKafkaProducer(
            bootstrap_servers="localhost:9092", transactional_id="t", transaction_timeout_ms=-1
        )
    with pytest.raises(TypeError, match="bogus"):
        AIOKafkaProducer(bootstrap_servers="localhost:9092", bogus=1)
    with pytest.raises(KafkaConfigurationError, match="compression_type"):
        AIOKafkaProducer(bootstrap_servers="localhost:9092", compression_type="brotli")
    with pytest.raises(KafkaConfigurationError, match="acks"):
        AIOKafkaProducer(bootstrap_servers="localhost:9092", acks="some")


def test_aiokafka_batches_and_custom_partitioner(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    calls: list[tuple[bytes | None, list[int], list[int]]] = []

    def last_partition(key: bytes | None, all_parts: list[int], available: list[int]) -> int:
        calls.append((key, all_parts, available))
        return all_parts[-1]

    async def main() -> tuple[RecordMetadata, RecordMetadata, int, list[int]]:
        async with AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            partitioner=last_partition,
            value_serializer=lambda v: v.encode(),
            max_batch_size=300,
        ) as producer:
            batch = producer.create_batch()
            sizes = []
            for i in range(100):
                meta = batch.append(key=None, value=f"v{i:02}", timestamp=None, headers=None)
                if meta is None:
                    break  # full: it closed itself
                assert meta.offset == i and meta.crc is None
                sizes.append(meta.size)
            count = batch.record_count()
            assert 1 < count < 100 and batch.size() <= 300
            assert batch.append(key=None, value="late", timestamp=None) is None
            future = await producer.send_batch(batch, topic, partition=1)
            first = await future
            keyed = await producer.send_and_wait(topic, "k", key=b"key")
            return first, keyed, count, sizes

    first, keyed, count, sizes = asyncio.run(main())
    assert first.partition == 1 and all(s > 0 for s in sizes)
    assert keyed.partition == 2 and calls == [(b"key", [0, 1, 2], [0, 1, 2])]
    records = consume(bootstrap, topic, count + 1)
    batch_records = sorted((r for r in records if r.partition == 1), key=lambda r: r.offset)
    assert [r.value for r in batch_records] == [f"v{i:02}".encode() for i in range(count)]
    assert [r.offset for r in batch_records] == list(range(first.offset, first.offset + count))


@pytest.mark.trio
async def test_send_batch_errors_are_typed(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)

    async def main() -> None:
        async with open_producer(bootstrap, max_request_size=2000, max_block_ms=2000) as p:
            empty = p.create_batch()
            with pytest.raises(KafkaConfigurationError, match="at least one record"):
                await p.send_batch(empty, topic, partition=0)
            big = p.create_batch()
            assert big.append(timestamp=None, key=None, value=b"x" * 5000) is not None
            with pytest.raises(MessageTooLargeError, match="max_request_size"):
                await p.send_batch(big, topic, partition=0)
            bad = p.create_batch()
            with pytest.raises(KafkaConfigurationError, match="value"):
                bad.append(timestamp=None, key=None, value="not bytes")
            with pytest.raises(KafkaTimeoutError, match="max_block_ms"):
                ok = p.create_batch()
                ok.append(timestamp=None, key=None, value=b"v")
                await p.send_batch(ok, topic, partition=7)  # no such partition
            # the producer is still usable
            assert (await p.send(topic, b"after")).partition == 0

    await main()


def test_aiokafka_start_fails_without_a_broker() -> None:
    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", request_timeout_ms=300)
        with pytest.raises(KafkaConnectionError, match=r"127\.0\.0\.1:1"):
            await producer.start()
        with pytest.raises(RuntimeError, match="not started"):
            await producer.send("t", b"v")
        await producer.stop()  # harmless

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_crashed_driver_fails_waiters_instead_of_hanging(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)

    async def main() -> BaseException | None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=60_000)
        await producer.start()
        pending = await producer.send(topic, b"lingering")
        inner = producer._producer
        assert inner is not None and inner._driver is not None

        def broken(*, now: float) -> None:
            raise _Boom("a bug in the machine")

        def broken_timer() -> float | None:
            raise _Boom("a bug in the machine")

        inner.machine.handle_timer = broken  # type: ignore[method-assign]
        inner.machine.get_timer = broken_timer  # type: ignore[method-assign]
        inner.machine.abort = broken  # type: ignore[method-assign]  # no orderly outcome
        inner._driver.wake()
        with pytest.raises(ProducerClosedError):
            await asyncio.wait_for(pending, 10)
        try:
            await asyncio.wait_for(producer.stop(), 10)
        except BaseException as exc:  # the crash surfaces here
            return exc
        return None

    crash = asyncio.run(main())
    assert crash is not None
    assert isinstance(crash, _Boom) or (
        isinstance(crash, BaseExceptionGroup) and crash.subgroup(_Boom) is not None
    )


@pytest.mark.kafka_needs("sasl:SCRAM-SHA-256")
def test_wrong_sasl_password_is_an_authentication_error(kafka_cluster: Any) -> None:

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_cluster.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=kafka_cluster.sasl.username,
            sasl_plain_password="wrong",
            request_timeout_ms=2000,
        )
        with pytest.raises(AuthenticationFailedError):
            await producer.start()

    asyncio.run(asyncio.wait_for(main(), 20))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sasl_mechanism": "AWS_MSK_IAM"}, "SASL_SSL"),
        ({"sasl_mechanism": "PLAIN"}, "username and a password"),
        ({"sasl_mechanism": "OAUTHBEARER"}, "token"),
    ],
)
def test_sasl_options_are_checked_up_front(options: dict[str, Any], match: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=match):
        AIOKafkaProducer(
            bootstrap_servers="localhost:9092", security_protocol="SASL_PLAINTEXT", **options
        )
