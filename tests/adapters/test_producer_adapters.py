"""Every producer adapter through the same integration cases against real Kafka.

The four adapters -- ``AIOKafkaProducer`` under ``asyncio.run`` ("asyncio"),
``kafkastate.anyio.open_producer`` under ``anyio.run`` on asyncio ("anyio-asyncio"),
``kafkastate.trio.open_producer`` under ``trio.run`` ("trio") and the kafka-python-style
``kafkastate.sync.KafkaProducer`` ("sync") -- are driven through one small facade: a
:class:`Plan` (records, options, what to do between sends) goes in, a :class:`Report` with one
:class:`Outcome` per record comes out. Each case is then one test parametrized over the
adapters. Records are read back with kafka-python's consumer (an independent client).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.to_thread
import pytest
import trio

import kafkastate.anyio
import kafkastate.trio
from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.asyncio import AIOKafkaProducer
from kafkastate.errors import KafkaError, KafkaTimeoutError, NoBrokersAvailable
from kafkastate.sync import KafkaProducer

pytestmark = pytest.mark.integration

kafka = pytest.importorskip("kafka")

from kafka.partitioner.default import murmur2  # noqa: E402 (after the importorskip)

from tests._support.readback import consume  # noqa: E402

ADAPTERS = ["asyncio", "anyio-asyncio", "trio", "sync"]

# ----------------------------------------------------------------------------- the facade

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Rec:
    """One record to send."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    partition: int | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Acked:
    """The producer reported the record written here."""

    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True)
class Refused:
    """``send`` itself raised, after blocking ``seconds``."""

    error: BaseException
    seconds: float


@dataclass(frozen=True)
class Failed:
    """The record was accepted, then failed."""

    error: BaseException


@dataclass(frozen=True)
class Cancelled:
    """The send was cancelled while it waited to be appended."""


@dataclass(frozen=True)
class Pending:
    """No outcome after flush/close: always a bug."""


Outcome = Acked | Refused | Failed | Cancelled | Pending


@dataclass
class Plan:
    """What to send and how.

    ``options`` use ``open_producer``'s (kafka-python's) names; each adapter translates them.
    Sequential mode sends the records in order, one at a time: after record ``i`` it flushes
    if ``i in flush_after``, then runs ``hooks[i]`` (blocking; in a worker thread for the async
    adapters), then sleeps ``pace`` every ``pace_every`` records. The record ``cancel`` is
    cancelled if its send still waits after ``cancel_after`` s (async adapters only).
    Concurrent mode (async adapters only) starts one task per record, cancels the send of
    record ``cancel`` after ``cancel_after`` s, runs ``on_waiting`` (blocking, in a worker
    thread) and waits for the other sends.
    ``finish``: "flush" flushes then closes; "close" closes (stop/close/leaving the block)
    without flushing first.
    """

    bootstrap: str
    topic: str
    records: Sequence[Rec]
    options: dict[str, Any]
    finish: Literal["flush", "close"] = "flush"
    concurrent: bool = False
    cancel: int | None = None
    cancel_after: float = 0.5
    on_waiting: Callable[[], None] | None = None
    hooks: dict[int, Callable[[], None]] = field(default_factory=dict)
    flush_after: frozenset[int] = frozenset()
    pace_every: int = 0
    pace: float = 0.0
    limit: float = 60.0


@dataclass
class Report:
    """What happened: one outcome per record, unless the producer did not even start."""

    outcomes: list[Outcome]
    start_error: BaseException | None = None
    start_seconds: float = 0.0
    done_before_finish: int = 0
    finish_seconds: float = 0.0


# ---------------------------------------------------------------- asyncio: AIOKafkaProducer


def _asyncio_options(options: dict[str, Any]) -> dict[str, Any]:
    out = dict(options)  # buffer_memory too: kafkastate's AIOKafkaProducer takes it
    if "batch_size" in out:
        out["max_batch_size"] = out.pop("batch_size")
    return out


def _future_outcome(future: asyncio.Future[Any]) -> Outcome:
    if not future.done():
        return Pending()
    if future.cancelled():
        return Cancelled()
    error = future.exception()
    if error is not None:
        return Failed(error)
    meta = future.result()
    return Acked(meta.partition, meta.offset, meta.timestamp)


async def _asyncio_main(plan: Plan) -> Report:
    producer = AIOKafkaProducer(
        bootstrap_servers=plan.bootstrap,
        # Topics are created by the tests (and a test waits on a missing one).
        allow_auto_create_topics=False,
        **_asyncio_options(plan.options),
    )
    t0 = time.monotonic()
    try:
        await producer.start()
    except KafkaError as exc:
        return Report([], start_error=exc, start_seconds=time.monotonic() - t0)
    slots: list[Outcome | asyncio.Future[Any]] = [Pending()] * len(plan.records)

    async def send(i: int) -> None:
        rec = plan.records[i]
        started = time.monotonic()
        try:
            slots[i] = await producer.send(
                plan.topic,
                rec.value,
                rec.key,
                partition=rec.partition,
                timestamp_ms=rec.timestamp_ms,
                headers=rec.headers,
            )
        except KafkaError as exc:
            slots[i] = Refused(exc, time.monotonic() - started)

    async def cancel_if_waiting(task: asyncio.Task[None], i: int) -> None:
        done, _ = await asyncio.wait({task}, timeout=plan.cancel_after)
        if not done:
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            slots[i] = Cancelled()

    try:
        async with asyncio.timeout(plan.limit):
            if plan.concurrent:
                tasks = [asyncio.create_task(send(i)) for i in range(len(plan.records))]
                if plan.cancel is not None:
                    await cancel_if_waiting(tasks[plan.cancel], plan.cancel)
                if plan.on_waiting is not None:
                    await asyncio.to_thread(plan.on_waiting)
                await asyncio.gather(*tasks, return_exceptions=True)
            else:
                for i in range(len(plan.records)):
                    if i == plan.cancel:
                        await cancel_if_waiting(asyncio.create_task(send(i)), i)
                    else:
                        await send(i)
                    if i in plan.flush_after:
                        await producer.flush()
                    if i in plan.hooks:
                        await asyncio.to_thread(plan.hooks[i])
                    if plan.pace_every and (i + 1) % plan.pace_every == 0:
                        await asyncio.sleep(plan.pace)
            futures = [s for s in slots if isinstance(s, asyncio.Future)]
            done_before = sum(f.done() for f in futures)
            t1 = time.monotonic()
            if plan.finish == "flush":
                await producer.flush()
            await producer.stop()
            finish = time.monotonic() - t1
    finally:
        await producer.stop()  # a no-op once stopped
    outcomes = [_future_outcome(s) if isinstance(s, asyncio.Future) else s for s in slots]
    return Report(outcomes, done_before_finish=done_before, finish_seconds=finish)


def _run_asyncio(plan: Plan) -> Report:
    return asyncio.run(_asyncio_main(plan))


# ------------------------------------------------------- anyio (on asyncio) and trio


@dataclass(frozen=True)
class _Runtime:
    """The async library's own primitives, so the trio run uses trio's."""

    open_producer: Callable[..., Any]
    sleep: Callable[[float], Any]
    fail_after: Callable[[float], Any]
    move_on_after: Callable[[float], Any]
    cancel_scope: Callable[[], Any]
    task_group: Callable[[], Any]
    to_thread: Callable[[Callable[[], None]], Any]


_ANYIO = _Runtime(
    open_producer=kafkastate.anyio.open_producer,
    sleep=anyio.sleep,
    fail_after=anyio.fail_after,
    move_on_after=anyio.move_on_after,
    cancel_scope=anyio.CancelScope,
    task_group=anyio.create_task_group,
    to_thread=anyio.to_thread.run_sync,
)
_TRIO = _Runtime(
    open_producer=kafkastate.trio.open_producer,
    sleep=trio.sleep,
    fail_after=trio.fail_after,
    move_on_after=trio.move_on_after,
    cancel_scope=trio.CancelScope,
    task_group=trio.open_nursery,
    to_thread=trio.to_thread.run_sync,
)


def _delivery_outcome(delivery: kafkastate.anyio.Delivery) -> Outcome:
    if not delivery.done():
        return Pending()
    try:
        meta = delivery.result()
    except KafkaError as exc:
        return Failed(exc)
    return Acked(meta.partition, meta.offset, meta.timestamp)


async def _anyio_main(plan: Plan, rt: _Runtime) -> Report:
    Delivery = kafkastate.anyio.Delivery
    slots: list[Outcome | kafkastate.anyio.Delivery] = [Pending()] * len(plan.records)
    done_before = 0
    with rt.fail_after(plan.limit):
        async with rt.open_producer(
            plan.bootstrap, allow_auto_create_topics=False, **plan.options
        ) as producer:

            async def send(i: int) -> None:
                rec = plan.records[i]
                started = time.monotonic()
                try:
                    slots[i] = await producer.enqueue(
                        plan.topic,
                        rec.value,
                        rec.key,
                        partition=rec.partition,
                        timestamp_ms=rec.timestamp_ms,
                        headers=rec.headers,
                    )
                except KafkaError as exc:
                    slots[i] = Refused(exc, time.monotonic() - started)

            if plan.concurrent:
                scopes = [rt.cancel_scope() for _ in plan.records]

                async def send_in(i: int) -> None:
                    with scopes[i]:
                        await send(i)
                    if scopes[i].cancelled_caught:
                        slots[i] = Cancelled()

                async with rt.task_group() as tg:
                    for i in range(len(plan.records)):
                        tg.start_soon(send_in, i)
                    await rt.sleep(plan.cancel_after)
                    if plan.cancel is not None:
                        scopes[plan.cancel].cancel()
                        await rt.sleep(0)
                    if plan.on_waiting is not None:
                        await rt.to_thread(plan.on_waiting)
            else:
                for i in range(len(plan.records)):
                    if i == plan.cancel:
                        with rt.move_on_after(plan.cancel_after) as scope:
                            await send(i)
                        if scope.cancelled_caught:
                            slots[i] = Cancelled()
                    else:
                        await send(i)
                    if i in plan.flush_after:
                        await producer.flush()
                    if i in plan.hooks:
                        await rt.to_thread(plan.hooks[i])
                    if plan.pace_every and (i + 1) % plan.pace_every == 0:
                        await rt.sleep(plan.pace)
            done_before = sum(s.done() for s in slots if isinstance(s, Delivery))
            t1 = time.monotonic()
            if plan.finish == "flush":
                await producer.flush()
        finish = time.monotonic() - t1
    outcomes = [_delivery_outcome(s) if isinstance(s, Delivery) else s for s in slots]
    return Report(outcomes, done_before_finish=done_before, finish_seconds=finish)


def _run_anyio(plan: Plan) -> Report:
    return anyio.run(_anyio_main, plan, _ANYIO, backend="asyncio")


def _run_trio(plan: Plan) -> Report:
    return trio.run(_anyio_main, plan, _TRIO)


# ------------------------------------------------------------------ sync: KafkaProducer


def _run_sync(plan: Plan) -> Report:
    if plan.concurrent or plan.cancel is not None:
        raise ValueError("KafkaProducer.send cannot be cancelled: plan a max_block timeout")
    t0 = time.monotonic()
    try:
        producer = KafkaProducer(
            bootstrap_servers=plan.bootstrap,
            # Topics are created by the tests (and a test waits on a missing one).
            allow_auto_create_topics=False,
            # kafka-python 3 waits 30 s for a bootstrap server; the bounds below want 2.
            bootstrap_timeout_ms=2000,
            # The core's default (what the async adapters use), not kafka-python's 30 s.
            reconnect_backoff_max_ms=1000,
            **plan.options,
        )
    except KafkaError as exc:
        return Report([], start_error=exc, start_seconds=time.monotonic() - t0)
    slots: list[Outcome | Any] = [Pending()] * len(plan.records)
    clean = False
    try:
        for i, rec in enumerate(plan.records):
            started = time.monotonic()
            try:
                slots[i] = producer.send(
                    plan.topic,
                    value=rec.value,
                    key=rec.key,
                    headers=list(rec.headers),  # type: ignore[arg-type]
                    partition=rec.partition,
                    timestamp_ms=rec.timestamp_ms,
                )
            except KafkaError as exc:
                slots[i] = Refused(exc, time.monotonic() - started)
            if i in plan.flush_after:
                producer.flush(timeout=plan.limit)
            if i in plan.hooks:
                plan.hooks[i]()
            if plan.pace_every and (i + 1) % plan.pace_every == 0:
                time.sleep(plan.pace)
        futures = [s for s in slots if not isinstance(s, Outcome)]
        done_before = sum(f.is_done for f in futures)
        t1 = time.monotonic()
        if plan.finish == "flush":
            producer.flush(timeout=plan.limit)
        producer.close(timeout=plan.limit)
        finish = time.monotonic() - t1
        clean = True
    finally:
        if not clean:
            producer.close(timeout=0)

    def outcome(slot: Any) -> Outcome:
        if isinstance(slot, Outcome):
            return slot
        if not slot.is_done:
            return Pending()
        if slot.exception is not None:
            return Failed(slot.exception)
        return Acked(slot.value.partition, slot.value.offset, slot.value.timestamp)

    return Report(
        [outcome(s) for s in slots], done_before_finish=done_before, finish_seconds=finish
    )


_RUNNERS: dict[str, Callable[[Plan], Report]] = {
    "asyncio": _run_asyncio,
    "anyio-asyncio": _run_anyio,
    "trio": _run_trio,
    "sync": _run_sync,
}


def produce(adapter: str, plan: Plan) -> Report:
    """Run ``plan`` on ``adapter``; the report has one outcome per record."""
    report = _RUNNERS[adapter](plan)
    if report.start_error is None:
        assert len(report.outcomes) == len(plan.records)
    return report


# -------------------------------------------------------------------------------- helpers


def _io_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("kafkastate-producer-io")}


@pytest.fixture(autouse=True)
def _no_io_thread_left() -> Iterator[None]:
    """KafkaProducer's IO thread ends with close(), whatever the test did."""
    before = _io_threads()
    yield
    deadline = time.monotonic() + 5
    while _io_threads() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _io_threads() - before == set()


def _topic(bootstrap: str, partitions: int = 3, replication: int = -1, **configs: str) -> str:
    name = f"adapters-{uuid.uuid4().hex[:10]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics(
            [
                NewTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication,
                    configs=configs,
                )
            ]
        )
    return name


def _create(bootstrap: str, name: str, partitions: int = 1) -> Callable[[], None]:
    def create() -> None:
        with BlockingAdmin(bootstrap) as admin:
            admin.create_topics([NewTopic(name=name, num_partitions=partitions)])

    return create


def _murmur2_partition(key: bytes, partitions: int) -> int:
    """kafka-python's (and Java's) default partition for a key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _codecs_in_log(bootstrap: str, topic: str, partitions: int) -> set[int]:
    """The compression codec (attribute bits 0-2) of every record batch in the log."""
    codecs: set[int] = set()
    with BlockingAdmin(bootstrap) as admin:
        for p in range(partitions):
            data, _ = admin.fetch(topic, p, 0)
            pos = 0
            while pos + 23 <= len(data):
                (length,) = struct.unpack_from(">i", data, pos + 8)
                if pos + 12 + length > len(data):
                    break  # a partial batch at the end of the fetch
                (attributes,) = struct.unpack_from(">h", data, pos + 21)
                codecs.add(attributes & 0x7)
                pos += 12 + length
    return codecs


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens here now: connections are refused at once


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    with BlockingAdmin(bootstrap) as admin:
        return admin.topics([topic])[topic].partitions[partition]


def _acked(report: Report) -> list[Acked]:
    assert report.start_error is None, report.start_error
    bad = [(i, o) for i, o in enumerate(report.outcomes) if not isinstance(o, Acked)]
    assert bad == []
    return [o for o in report.outcomes if isinstance(o, Acked)]


def _check_read_back(
    records: Sequence[Rec], acked: Sequence[Acked], read: Sequence[Any], partitions: int
) -> None:
    """Every record exactly once where its metadata says, with its key, value, headers and
    timestamp, on its partition (explicit, or murmur2 of its key), in send order."""
    where = {(r.partition, r.offset): r for r in read}
    assert len(where) == len(read) == len(records)
    assert set(where) == {(a.partition, a.offset) for a in acked}
    per_partition: dict[int, list[int]] = {}
    for rec, meta in zip(records, acked, strict=True):
        got = where[(meta.partition, meta.offset)]
        assert (got.key, got.value) == (rec.key, rec.value)
        assert got.headers == list(rec.headers)
        if rec.timestamp_ms is not None:
            assert got.timestamp == meta.timestamp == rec.timestamp_ms
        if rec.partition is not None:
            assert meta.partition == rec.partition
        elif rec.key is not None:
            assert meta.partition == _murmur2_partition(rec.key, partitions)
        per_partition.setdefault(meta.partition, []).append(meta.offset)
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))  # dense, in send order


# ---------------------------------------------------------------------------------- cases

CODECS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _mixed_records(n: int, base_ms: int) -> list[Rec]:
    records = []
    for i in range(n):
        key = None if i % 3 == 0 else f"key-{i % 5}".encode()
        if i == 1:
            key = b""  # an empty key is a key: murmur2-partitioned, read back as b""
        value: bytes | None = (f"value-{i}-".encode() + b"abc" * (i % 40)) * (1 + i % 4)
        if i == 7:
            value = None  # a tombstone
        elif i == 8:
            value = b""
        headers: tuple[Header, ...] = ()
        if i % 2:
            headers = (("i", b"%d" % i), ("dup", b"a"), ("dup", b"b"), ("empty", b""))
        if i % 10 == 5:
            headers += (("ключ", "значение".encode()),)
        records.append(
            Rec(
                value=value,
                key=key,
                headers=headers,
                partition=i % 3 if i % 4 == 0 else None,
                timestamp_ms=base_ms + i,
            )
        )
    return records


@pytest.mark.parametrize("codec", list(CODECS), ids=[str(c).lower() for c in CODECS])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_round_trip_every_codec(kafka_cluster: Any, adapter: str, codec: str | None) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=3)
    records = _mixed_records(60, int(time.time() * 1000) - 60_000)
    options = {"compression_type": codec, "acks": "all", "enable_idempotence": True}
    report = produce(adapter, Plan(bootstrap, topic, records, {**options, "linger_ms": 5}))
    acked = _acked(report)
    _check_read_back(records, acked, consume(bootstrap, topic, len(records)), partitions=3)
    assert _codecs_in_log(bootstrap, topic, 3) == {CODECS[codec]}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_null_header_value_round_trip(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    if adapter == "sync":
        # kafkastate.sync.KafkaProducer.send takes only (str, bytes) headers, as
        # kafka-python's does: a None header value is refused, nothing is sent.
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        try:
            with pytest.raises(TypeError, match="header"):
                producer.send(topic, b"v0", headers=[("nil", None)])
            producer.send(topic, b"v1", headers=[("a", b"1")]).get(timeout=30)
        finally:
            producer.close()
        read = consume(bootstrap, topic, 1)
        assert [(r.value, r.headers) for r in read] == [(b"v1", [("a", b"1")])]
        return
    records = [
        Rec(b"v0", b"k", (("nil", None),)),
        Rec(b"v1", None, (("a", b"1"), ("nil", None), ("b", b""))),
        Rec(None, b"k2", (("nil", None), ("nil", None))),
    ]
    for codec in ("zstd", None):
        report = produce(adapter, Plan(bootstrap, topic, records, {"compression_type": codec}))
        _acked(report)
    read = consume(bootstrap, topic, 2 * len(records))
    assert [(r.key, r.value, r.headers) for r in read] == 2 * [
        (rec.key, rec.value, list(rec.headers)) for rec in records
    ]


@pytest.mark.kafka_needs("fault_control")
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_idempotent_through_leader_sigkill(kafka_cluster3: Any, adapter: str) -> None:
    bootstrap = kafka_cluster3.bootstrap
    topic = _topic(bootstrap, partitions=3, replication=3, **{"min.insync.replicas": "2"})
    victim = kafka_cluster3.broker(_leader(bootstrap, topic, 0))
    killed: list[float] = []

    def kill() -> None:  # SIGKILL the leader of partition 0 (no controlled shutdown)
        victim.kill()
        killed.append(time.monotonic())

    n = 3000
    records = [Rec(b"%d" % i, partition=i % 3) for i in range(n)]
    plan = Plan(
        bootstrap,
        topic,
        records,
        {
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 5,
            # Long, so that a recovery paced by request timeouts (not by the cluster's
            # own failover, ~3 s here: broker.session.timeout.ms) shows.
            "request_timeout_ms": 15_000,
            "delivery_timeout_ms": 60_000,
            "max_block_ms": 30_000,
        },
        hooks={n // 6: kill},  # the stream goes on while the node is dead
        pace_every=20,
        pace=0.02,
        limit=90,
    )
    try:
        report = produce(adapter, plan)
    finally:
        # From this thread: the harness ties a JVM's life to the thread that started it.
        if not victim.is_running:
            victim.start()
    assert len(killed) == 1
    acked = _acked(report)  # with a 60 s delivery timeout, none may fail
    read = consume(bootstrap, topic, n, timeout=40)
    values = [int(r.value) for r in read]
    assert [v for v, c in Counter(values).items() if c > 1] == []  # nothing twice
    assert sorted(values) == list(range(n))  # nothing lost
    for p in range(3):
        in_log = [int(r.value) for r in sorted(read, key=lambda r: r.offset) if r.partition == p]
        assert in_log == list(range(p, n, 3))  # send order kept per partition
    where = {(r.partition, r.offset): r.value for r in read}
    for rec, meta in zip(records, acked, strict=True):
        assert (meta.partition, where[(meta.partition, meta.offset)]) == (rec.partition, rec.value)
    # The stream outlasts the failover (kill at ~0.5 s, new leader ~3 s later, stream
    # ~3.5 s): once the cluster has a new leader, the producer must find it promptly, as
    # the Java client does (it refreshes metadata on every disconnect), not only when a
    # request to the dead node times out -- which would take the 15 s request timeout.
    # A loose bound well below that (not a speed measurement).
    assert report.finish_seconds < 12, f"flush took {report.finish_seconds:.1f} s after the stream"


# What an unreachable cluster looks like from each adapter's API: AIOKafkaProducer.start()
# and KafkaProducer() wait for a bootstrap server as aiokafka and kafka-python do;
# open_producer never contacts the cluster before the first send.
_UNREACHABLE: dict[str, tuple[str, type[KafkaError]]] = {
    "asyncio": ("start", NoBrokersAvailable),
    "anyio-asyncio": ("send", KafkaTimeoutError),
    "trio": ("send", KafkaTimeoutError),
    "sync": ("start", NoBrokersAvailable),
}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_unreachable_bootstrap_fails_typed_and_bounded(adapter: str) -> None:
    plan = Plan(
        f"127.0.0.1:{_closed_port()}",
        "nowhere",
        [Rec(b"v0"), Rec(b"v1")],
        {"max_block_ms": 500, "request_timeout_ms": 1000, "delivery_timeout_ms": 3000},
        limit=20,
    )
    started = time.monotonic()
    report = produce(adapter, plan)
    elapsed = time.monotonic() - started
    where, error_type = _UNREACHABLE[adapter]
    if where == "start":
        assert isinstance(report.start_error, error_type), report.start_error
        assert 0.5 <= report.start_seconds < 5
    else:
        assert report.start_error is None
        for outcome in report.outcomes:  # each send waits max_block_ms, then raises
            assert isinstance(outcome, Refused), outcome
            assert isinstance(outcome.error, error_type), outcome.error
            assert "max_block" in str(outcome.error)
            assert 0.45 <= outcome.seconds < 5
    assert elapsed < 15  # not a hang: closing the producer is prompt too


@pytest.mark.kafka_needs("fault_control")
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_unresponsive_leader_fails_records_at_delivery_timeout(
    kafka_cluster: Any, adapter: str
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    (broker,) = kafka_cluster.brokers
    plan = Plan(
        bootstrap,
        topic,
        [Rec(b"before"), Rec(b"during")],
        {"request_timeout_ms": 800, "delivery_timeout_ms": 1500, "linger_ms": 0},
        flush_after=frozenset({0}),
        hooks={0: broker.pause},  # SIGSTOP: connections stay open, nothing answers
        limit=20,
    )
    started = time.monotonic()
    try:
        report = produce(adapter, plan)
    finally:
        broker.resume(settle=True)  # not fenced for the next test's topic
    elapsed = time.monotonic() - started
    assert report.start_error is None
    before, during = report.outcomes
    assert isinstance(before, Acked) and before.offset == 0
    assert isinstance(during, Failed), during
    assert isinstance(during.error, KafkaTimeoutError), repr(during.error)
    assert "delivery" in str(during.error)
    assert elapsed < 12


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_full_buffer_memory_makes_sends_wait_in_order(kafka_cluster: Any, adapter: str) -> None:
    # buffer_memory holds a handful of records: most sends wait in the machine's FIFO.
    # Idempotent, so a retry cannot reorder (a CI run saw offsets [1, 0, ...]: without it,
    # a first batch refused while the new topic's leader was being elected went after the
    # second, which Kafka allows with several requests in flight)
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=3)
    records = [
        Rec(b"%03d" % i + bytes(300), key=None if i % 3 else b"k%d" % (i % 4)) for i in range(120)
    ]
    options = {
        "buffer_memory": 2000,
        "batch_size": 700,
        "linger_ms": 0,
        "max_block_ms": 30_000,
        "acks": "all",
        "enable_idempotence": True,
    }
    report = produce(adapter, Plan(bootstrap, topic, records, options))
    acked = _acked(report)
    _check_read_back(records, acked, consume(bootstrap, topic, len(records)), partitions=3)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_full_buffer_memory_send_times_out_at_max_block(kafka_cluster: Any, adapter: str) -> None:
    if not kafka_cluster.controllable:
        pytest.skip("KAFKASTATE_BOOTSTRAP names a cluster the harness cannot pause")
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    (broker,) = kafka_cluster.brokers
    records = [Rec(b"first")] + [Rec(bytes(300)) for _ in range(6)]
    plan = Plan(
        bootstrap,
        topic,
        records,
        {
            "buffer_memory": 1000,
            "max_block_ms": 500,
            "linger_ms": 0,
            "request_timeout_ms": 2000,
            "delivery_timeout_ms": 4000,
        },
        flush_after=frozenset({0}),
        hooks={0: broker.pause},  # nothing is acknowledged: buffer memory stays full
        limit=30,
    )
    try:
        report = produce(adapter, plan)
    finally:
        broker.resume(settle=True)  # not fenced for the next test's topic
    assert report.start_error is None
    assert isinstance(report.outcomes[0], Acked)
    refused = [o for o in report.outcomes if isinstance(o, Refused)]
    assert refused, report.outcomes  # the buffer filled up: later sends gave up waiting
    for outcome in refused:
        assert isinstance(outcome.error, KafkaTimeoutError), repr(outcome.error)
        assert "max_block_ms" in str(outcome.error) and "buffer_memory" in str(outcome.error)
        assert 0.45 <= outcome.seconds < 5
    for outcome in report.outcomes[1 : 1 + len(records) - 1 - len(refused)]:
        assert isinstance(outcome, Failed | Acked), outcome  # they got into the buffer


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_close_delivers_lingering_records(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=3)
    records = [
        Rec(b"v%d" % i, key=b"k%d" % (i % 4), headers=(("i", b"%d" % i),)) for i in range(30)
    ]
    plan = Plan(
        bootstrap,
        topic,
        records,
        {"linger_ms": 20_000, "acks": "all", "enable_idempotence": True},
        finish="close",
    )
    report = produce(adapter, plan)
    assert report.done_before_finish == 0  # all still lingering when the producer closes
    assert report.finish_seconds < 10  # closing sends them at once: it does not linger
    acked = _acked(report)
    _check_read_back(records, acked, consume(bootstrap, topic, len(records)), partitions=3)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_cancelled_send_waiting_for_metadata_drops_only_that_record(
    kafka_cluster: Any, adapter: str
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = f"adapters-later-{uuid.uuid4().hex[:10]}"  # created while the sends wait
    records = [Rec(b"v%d" % i, headers=(("i", b"%d" % i),)) for i in range(5)]
    victim = 2
    if adapter == "sync":
        # KafkaProducer.send cannot be cancelled. Its equivalent: the record's send gives
        # up at max_block_ms (KafkaTimeoutError); the later ones, sent once the topic
        # exists, are delivered.
        order = [victim] + [i for i in range(len(records)) if i != victim]
        plan = Plan(
            bootstrap,
            topic,
            [records[i] for i in order],
            {"max_block_ms": 2000},
            hooks={0: _create(bootstrap, topic)},
        )
        report = produce(adapter, plan)
        outcomes = dict(zip(order, report.outcomes, strict=True))
        dropped = outcomes[victim]
        assert isinstance(dropped, Refused), dropped
        assert isinstance(dropped.error, KafkaTimeoutError), dropped.error
    else:
        plan = Plan(
            bootstrap,
            topic,
            records,
            {"max_block_ms": 30_000},
            concurrent=True,  # every send waits for the topic's metadata
            cancel=victim,
            on_waiting=_create(bootstrap, topic),
        )
        report = produce(adapter, plan)
        outcomes = dict(enumerate(report.outcomes))
        assert outcomes[victim] == Cancelled()
    kept = [i for i in range(len(records)) if i != victim]
    acked = [outcomes[i] for i in kept]
    assert all(isinstance(o, Acked) for o in acked), acked
    read = consume(bootstrap, topic, len(kept))
    assert sorted(r.value for r in read) == sorted(records[i].value for i in kept)  # type: ignore[type-var]
    where = {r.offset: r for r in read}
    for i, meta in zip(kept, acked, strict=True):
        assert isinstance(meta, Acked)
        assert where[meta.offset].value == records[i].value
        assert where[meta.offset].headers == list(records[i].headers)
