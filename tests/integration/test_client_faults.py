"""Client-side faults against a real broker: user code that raises (serializers, the
partitioner, delivery callbacks, rebalance listeners), close() while sends and commits are
in flight, and cancellation of the public awaitables at successive points. In every case
the client stays consistent: each acknowledged record is in the topic (read back by
kafka-python, an independent client), every pending future resolves with a value or a
typed error, no task or thread is left behind, and the caller gets the error type an
aiokafka / kafka-python user catches (docs/reliability.md, "Client-side faults")."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import anyio
import pytest

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.adapters.blocking import NewTopic
from kafkastate.anyio import Delivery, open_admin, open_consumer, open_producer
from kafkastate.asyncio import AIOKafkaProducer
from kafkastate.errors import KafkaError, PartitionerError, RebalanceListenerError
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer, KafkaProducer

pytestmark = pytest.mark.integration

kafka = pytest.importorskip("kafka")

from tests._support.readback import consume  # noqa: E402 (after the importorskip)
from tests.integration.test_groups import _topic as new_topic  # noqa: E402


def _topic(bootstrap: str, partitions: int = 1) -> str:
    return new_topic(bootstrap, partitions)


class _UserBug(Exception):
    """What the user's callback raises."""


def _serializer(value: str) -> bytes:
    if value == "bad":
        raise _UserBug("cannot encode")
    return value.encode()


def _partitioner(key: bytes | None, every: list[int], available: list[int]) -> int:
    if key == b"bad":
        raise _UserBug("no partition for it")
    return every[0]


def _values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return [r.value for r in consume(bootstrap, topic, expected, timeout=45)]  # (loaded CI)


# -- user code that raises: the producer ------------------------------------------------------


@pytest.mark.anyio
async def test_a_raising_partitioner_refuses_only_that_record(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    async with open_producer(bootstrap, partitioner=_partitioner) as producer:
        first = await producer.send(topic, b"v0", key=b"k")
        with pytest.raises(PartitionerError) as caught:  # a KafkaError, the cause kept
            await producer.send(topic, b"v-bad-key", key=b"bad")
        assert isinstance(caught.value.__cause__, _UserBug)
        with pytest.raises(PartitionerError):
            producer.send_nowait(topic, b"v-bad-key", key=b"bad")
        second = await producer.send(topic, b"v1", key=b"k")  # the producer goes on
    assert (first.offset, second.offset) == (0, 1)
    assert _values(bootstrap, topic, 2) == [b"v0", b"v1"]


def test_a_raising_serializer_or_partitioner_aiokafka_producer(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, value_serializer=_serializer, partitioner=_partitioner
        )
        await producer.start()
        try:
            await producer.send_and_wait(topic, "v0")
            with pytest.raises(_UserBug):  # aiokafka: the serializer's own exception
                await producer.send(topic, "bad")
            with pytest.raises(_UserBug):
                await producer.send_and_wait(topic, "bad")
            with pytest.raises(PartitionerError):
                await producer.send(topic, "v-bad-key", key=b"bad")
            await producer.send_and_wait(topic, "v1")
        finally:
            await producer.stop()

    asyncio.run(main())
    assert _values(bootstrap, topic, 2) == [b"v0", b"v1"]


def test_a_raising_serializer_or_partitioner_sync_producer(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    threads = set(threading.enumerate())
    with KafkaProducer(
        bootstrap_servers=bootstrap, value_serializer=_serializer, partitioner=_partitioner
    ) as producer:
        producer.send(topic, "v0", key=b"k").get(timeout=15)
        with pytest.raises(_UserBug):  # kafka-python: raised by send() itself
            producer.send(topic, "bad", key=b"k")
        with pytest.raises(PartitionerError):
            producer.send(topic, "v-bad-key", key=b"bad")
        producer.send(topic, "v1", key=b"k").get(timeout=15)
    assert _values(bootstrap, topic, 2) == [b"v0", b"v1"]
    assert set(threading.enumerate()) <= threads  # the IO thread is gone


@pytest.mark.anyio
async def test_a_raising_delivery_callback_is_logged_and_the_producer_goes_on(
    kafka_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    seen: list[int] = []

    def callback(delivery: Delivery) -> None:
        seen.append(delivery.result().offset)
        raise _UserBug("callback bug")

    with anyio.fail_after(20):
        async with open_producer(bootstrap, linger_ms=50) as producer:
            deliveries = [producer.send_nowait(topic, f"v{i}".encode()) for i in range(4)]
            for delivery in deliveries[:2]:  # two raising callbacks on one batch
                delivery.add_done_callback(callback)
            offsets = [(await d).offset for d in deliveries]
            assert (await producer.send(topic, b"v4")).offset == 4
    assert offsets == [0, 1, 2, 3] and sorted(seen) == [0, 1]
    assert "callback bug" in caplog.text
    assert _values(bootstrap, topic, 5) == [f"v{i}".encode() for i in range(5)]


# -- close() while sends and commits are in flight --------------------------------------------

FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def _produce(bootstrap: str, topic: str, count: int) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), partition=0)


@pytest.mark.anyio
async def test_close_with_sends_and_commits_in_flight_from_other_tasks(
    kafka_cluster: Any,
) -> None:
    """Tasks outside the clients' blocks await sends and commits when the blocks end: each
    gets its outcome at once (the record's metadata, the commit's answer or a typed
    error), every acknowledged record is in the topic, nothing waits on."""
    bootstrap = kafka_cluster.bootstrap
    topic, source = _topic(bootstrap), _topic(bootstrap)
    _produce(bootstrap, source, 10)
    sent: dict[int, Any] = {}
    committed: list[Any] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:

            async def send(producer: Any, i: int) -> None:
                try:
                    sent[i] = await producer.send(topic, f"v{i}".encode())
                except KafkaError as exc:
                    sent[i] = exc

            async with open_producer(bootstrap, linger_ms=200) as producer:
                await producer.partitions_for(topic)  # (a send still waiting for metadata
                # at close fails: ProducerClosedError, as a send after close)
                for i in range(20):
                    tg.start_soon(send, producer, i)
                await anyio.sleep(0.01)  # the sends are appended, lingering
            assert len(sent) == 20  # a graceful close delivered them before returning

            async def commit(consumer: Any) -> None:
                try:
                    await consumer.commit({(source, 0): 5})
                    committed.append("ok")
                except KafkaError as exc:
                    committed.append(exc)

            group = f"g-{uuid.uuid4().hex[:8]}"
            async with open_consumer(
                bootstrap_servers=bootstrap, group_id=group, **FAST
            ) as consumer:
                consumer.assign([(source, 0)])
                await consumer.committed((source, 0))  # the coordinator is known
                for _ in range(3):
                    tg.start_soon(commit, consumer)
                await anyio.sleep(0)  # the commits are under way
        assert len(committed) == 3  # answered or failed: none left waiting
    acked = {i: m for i, m in sent.items() if not isinstance(m, BaseException)}
    assert len(acked) == 20, sent
    values = _values(bootstrap, topic, 20)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(20))
    if "ok" in committed:  # an acknowledged commit stands
        async with open_consumer(bootstrap_servers=bootstrap, group_id=group) as reader:
            assert await reader.committed((source, 0)) == 5


# -- cancellation of every public awaitable, at successive points -----------------------------

CHECKPOINTS = 6
"""Cancel after k = 0..CHECKPOINTS-1 scheduler passes (each lets the client's tasks run once)."""
DELAYS = (0.002, 0.01, 0.03, 0.1)
"""...then after these many seconds (a response on its way, a retry pending)."""


async def _cancel_after(scope: anyio.CancelScope, step: int) -> None:
    if step < CHECKPOINTS:
        for _ in range(step):
            await anyio.lowlevel.checkpoint()
    else:
        await anyio.sleep(DELAYS[step - CHECKPOINTS])
    scope.cancel()


async def _sweep(name: str, call: Any, check: Any) -> list[str]:
    """Run ``call()`` once per cancellation point, then ``check()`` (which must work: the
    client is still usable). What each run ended with: cancelled, done, or a typed error
    (anything else fails the test)."""
    outcomes: list[str] = []
    for step in range(CHECKPOINTS + len(DELAYS)):
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:
                tg.start_soon(_cancel_after, scope, step)
                try:
                    await call()
                except KafkaError as exc:
                    outcomes.append(f"{type(exc).__name__}")
                else:
                    outcomes.append("done")
                scope.cancel()  # (stops the canceller too)
            if scope.cancelled_caught and len(outcomes) <= step:
                outcomes.append("cancelled")
        with anyio.fail_after(20):
            await check()
    assert outcomes, name
    return outcomes


@pytest.mark.anyio
async def test_cancelling_producer_calls_at_every_point(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    acked: list[bytes] = []
    counter = iter(range(10_000))

    async def send() -> None:
        value = f"v{next(counter)}".encode()
        await producer.send(topic, value, key=value)
        acked.append(value)

    async def flush() -> None:
        producer.send_nowait(topic, f"v{next(counter)}".encode())
        await producer.flush()

    async def works() -> None:
        await send()

    async with open_producer(bootstrap, linger_ms=5) as producer:
        # (metadata first: a send cancelled while it waits for metadata is withdrawn,
        # documented; here each cancels a wait for the acknowledgement)
        await producer.partitions_for(topic)
        await _sweep("send", send, works)
        await _sweep("flush", flush, works)
        await producer.flush()
        sent = next(counter)
    values = [r.value for r in consume(bootstrap, topic, sent, timeout=20)]
    assert set(acked) <= set(values)  # every acknowledged record is there
    assert len(values) == len(set(values))  # idempotence: none twice
    # a cancelled wait for the acknowledgement never withdraws the record: all are there
    assert len(values) == sent


@pytest.mark.anyio
async def test_cancelling_transaction_calls_at_every_point(kafka_cluster: Any) -> None:
    """A cancelled commit_transaction or abort_transaction goes on in the producer; asked
    again, it is resumed (Java's rule), and the producer takes the next transaction.
    Committed records are read by a read_committed reader, aborted ones are not."""
    bootstrap = kafka_cluster.bootstrap
    topic, source = _topic(bootstrap), _topic(bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    committed: list[bytes] = []
    aborted: list[bytes] = []
    counter = iter(range(10_000))
    async with open_producer(bootstrap, transactional_id=f"t-{uuid.uuid4().hex[:8]}") as producer:

        def transaction(end: Any, bucket: list[bytes]) -> Any:
            async def run() -> None:
                value = f"v{next(counter)}".encode()
                await producer.begin_transaction()
                await producer.send(topic, value)
                await producer.send_offsets_to_transaction({(source, 0): 1}, group)
                await end()
                bucket.append(value)

            return run

        async def ends_cleanly() -> None:  # resume what was cancelled, then a new one works
            txn = producer.machine.transactions
            assert txn is not None
            if txn.operation == "commit":
                await producer.commit_transaction()
            elif txn.operation in ("abort", "send_offsets") or txn.state.name in (
                "IN_TRANSACTION",
                "ABORTABLE_ERROR",
            ):
                await producer.abort_transaction()
            await producer.begin_transaction()
            await producer.abort_transaction()

        await _sweep("commit", transaction(producer.commit_transaction, committed), ends_cleanly)
        await _sweep("abort", transaction(producer.abort_transaction, aborted), ends_cleanly)
    with kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    ) as reader:
        values = [r.value for r in reader]
    assert set(committed) <= set(values)  # every acknowledged commit is readable
    assert not set(aborted) & set(values)  # no aborted record is


@pytest.mark.anyio
async def test_cancelling_consumer_calls_at_every_point(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    _produce(bootstrap, topic, 50)
    tp = (topic, 0)
    async with open_consumer(
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
    ) as consumer:
        consumer.assign([tp])
        seen: list[int] = []

        async def getone() -> None:
            seen.append((await consumer.getone()).offset)

        async def getmany() -> None:
            batch = await consumer.getmany(timeout_ms=100, max_records=3)
            seen.extend(r.offset for records in batch.values() for r in records)

        async def commit() -> None:
            await consumer.commit({tp: len(seen)})

        async def rewind() -> None:
            await consumer.seek_to_beginning(tp)
            seen.clear()

        async def to_end() -> None:
            await consumer.seek_to_end(tp)

        async def reads_on() -> None:  # the positions hold: a read goes on from where it was
            position = await consumer.position(tp)
            if position < 50:
                record = await consumer.getone()
                assert record.offset == position
                seen.append(record.offset)

        await _sweep("getone", getone, reads_on)
        await _sweep("getmany", getmany, reads_on)
        await _sweep("commit", commit, reads_on)
        await _sweep("seek_to_beginning", rewind, reads_on)
        await _sweep("seek_to_end", to_end, reads_on)
        assert seen == sorted(set(seen))  # no record handed out twice, none skipped
        await consumer.commit({tp: 7})
        assert await consumer.committed(tp) == 7


@pytest.mark.anyio
async def test_cancelling_admin_calls_at_every_point(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    made: list[str] = []
    async with open_admin(bootstrap) as admin:

        async def create() -> None:
            name = f"faults-{uuid.uuid4().hex[:8]}"
            made.append(name)
            await admin.create_topics([NewTopic(name=name, num_partitions=1)])

        async def works() -> None:
            await admin.describe_cluster()

        await _sweep("create_topics", create, works)
        await _sweep("list_topics", admin.list_topics, works)
        with anyio.fail_after(20):
            await admin.wait_for_topics(made[-1:])
        listed = set(await admin.list_topics())
    assert made[-1] in listed


@pytest.mark.anyio
async def test_cancelling_the_start_of_a_client_leaves_nothing_behind(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)

    async def start_producer() -> None:
        async with open_producer(bootstrap) as producer:
            await producer.wait_for_cluster(10)

    async def start_consumer() -> None:
        async with open_consumer(topic, bootstrap_servers=bootstrap, group_id="g-start"):
            await anyio.sleep(0)

    async def works() -> None:
        async with open_producer(bootstrap) as producer:
            await producer.send(topic, b"after")

    await _sweep("open_producer", start_producer, works)
    await _sweep("open_consumer", start_consumer, works)
    assert len(_values(bootstrap, topic, 20)) == 20


# -- user code that raises: the rebalance listener's revoke -----------------------------------


class _RaisingRevoke(ConsumerRebalanceListener):
    """Raises from every on_partitions_revoked; remembers the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[str]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", {tp.topic for tp in revoked}))
        if revoked:
            raise _UserBug("revoke bug")

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", {tp.topic for tp in assigned}))


@pytest.mark.anyio
async def test_a_raising_revoke_callback_surfaces_once_and_the_member_goes_on(
    kafka_cluster: Any,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    first, second = _topic(bootstrap), _topic(bootstrap)
    _produce(bootstrap, first, 3)
    _produce(bootstrap, second, 4)
    listener = _RaisingRevoke()
    got: dict[str, list[int]] = {first: [], second: []}
    async with open_consumer(
        first,
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        listener=listener,
        **FAST,
    ) as consumer:

        async def read() -> None:
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                got[tp.topic].extend(r.offset for r in records)

        with anyio.fail_after(40):
            while len(got[first]) < 3:
                await read()
            consumer.subscribe([second], listener=listener)  # revokes `first`'s partition
            with pytest.raises(RebalanceListenerError) as caught:
                while True:
                    await read()
            assert caught.value.callback == "on_partitions_revoked"
            assert isinstance(caught.value.__cause__, _UserBug)
            while len(got[second]) < 4:  # the rebalance went on: the new topic is read
                await read()
    # (the revoke on close raised too: logged, the close went on)
    assert got == {first: [0, 1, 2], second: [0, 1, 2, 3]}
    assert listener.calls[-1] == ("revoked", {second})


def test_a_raising_revoke_callback_sync_consumer(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    first, second = _topic(bootstrap), _topic(bootstrap)
    _produce(bootstrap, first, 3)
    _produce(bootstrap, second, 4)
    listener = _RaisingRevoke()
    got: dict[str, list[int]] = {first: [], second: []}
    threads = set(threading.enumerate())

    def poll(consumer: Any) -> None:
        for tp, records in consumer.poll(timeout_ms=200).items():
            got[tp.topic].extend(r.offset for r in records)

    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        **FAST,
    ) as consumer:
        consumer.subscribe([first], listener=listener)
        deadline = time.monotonic() + 40
        while len(got[first]) < 3:
            assert time.monotonic() < deadline
            poll(consumer)
        consumer.subscribe([second], listener=listener)
        with pytest.raises(RebalanceListenerError, match="on_partitions_revoked"):
            while time.monotonic() < deadline:
                poll(consumer)
        while len(got[second]) < 4:
            assert time.monotonic() < deadline
            poll(consumer)
    assert got == {first: [0, 1, 2], second: [0, 1, 2, 3]}
    assert set(threading.enumerate()) <= threads  # the heartbeat thread is gone


def test_close_with_sends_and_commits_in_flight_sync(kafka_cluster: Any) -> None:
    """kafka-python's faces: close() while futures wait and async commits are out: every
    future has its outcome, every commit callback runs (Java's close completes them too),
    every acknowledged record is in the topic, the IO and heartbeat threads are gone."""
    bootstrap = kafka_cluster.bootstrap
    topic, source = _topic(bootstrap), _topic(bootstrap)
    _produce(bootstrap, source, 10)
    threads = set(threading.enumerate())
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=300)
    producer.partitions_for(topic)
    futures = [producer.send(topic, f"v{i}".encode()) for i in range(20)]
    producer.close()
    assert all(f.is_done for f in futures)
    acked = [f.value for f in futures if f.exception is None]
    assert len(acked) == 20  # a graceful close delivers what was appended
    answered: list[Any] = []
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
    )
    consumer.assign([TopicPartition(source, 0)])
    consumer.committed(TopicPartition(source, 0))  # the coordinator is known
    for offset in (3, 4, 5):
        consumer.commit_async(
            {TopicPartition(source, 0): offset},
            callback=lambda offsets, result: answered.append((offsets, result)),
        )
    consumer.close()
    assert len(answered) == 3  # each commit callback ran: stored, or a typed error
    for _offsets, result in answered:
        assert result is None or isinstance(result, KafkaError), result
    assert set(threading.enumerate()) <= threads
    assert sorted(_values(bootstrap, topic, 20)) == sorted(f"v{i}".encode() for i in range(20))


def test_stop_with_commits_and_sends_in_flight_aiokafka(kafka_cluster: Any) -> None:
    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415 (asyncio-only test)

    bootstrap = kafka_cluster.bootstrap
    topic, source = _topic(bootstrap), _topic(bootstrap)

    async def main() -> tuple[list[Any], list[Any]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=300)
        await producer.start()
        await producer.partitions_for(topic)
        sends = [await producer.send(topic, f"v{i}".encode()) for i in range(10)]
        await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}"
        )
        await consumer.start()
        consumer.assign([TopicPartition(source, 0)])
        await consumer.committed(TopicPartition(source, 0))
        commits = [
            asyncio.ensure_future(consumer.commit({TopicPartition(source, 0): n})) for n in (1, 2)
        ]
        await asyncio.sleep(0)
        await consumer.stop()
        async with asyncio.timeout(5):  # none left waiting
            done = await asyncio.gather(*commits, return_exceptions=True)
        return [f.exception() or f.result() for f in sends], done

    sends, commits = asyncio.run(main())
    assert all(not isinstance(s, BaseException) for s in sends)  # delivered on stop()
    assert all(c is None or isinstance(c, KafkaError) for c in commits), commits
    assert sorted(_values(bootstrap, topic, 10)) == sorted(f"v{i}".encode() for i in range(10))
