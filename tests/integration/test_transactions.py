"""Transactions against a real Kafka broker, on every producer adapter.

Each case is a script of transactional steps (begin, send, offsets, commit, abort, sleep,
a blocking call) run by one adapter -- ``AIOKafkaProducer`` ("asyncio"),
``kafkastate.anyio.open_producer`` on asyncio ("anyio-asyncio"), ``kafkastate.trio`` under
``trio.run`` ("trio") and ``kafkastate.sync.KafkaProducer`` ("sync") -- which records each
step's outcome (None or the exception). What landed is then read back with kafka-python
(an independent client) and with kafkastate's own consumer, both ``read_committed``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import pytest
import trio

import kafkastate.anyio
import kafkastate.trio
from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.asyncio import AIOKafkaProducer
from kafkastate.errors import (
    ProducerFencedError,
    TransactionAbortedError,
    TransactionFailedError,
    TransactionStateError,
    TransactionTimedOutError,
)
from kafkastate.structs import ConsumerGroupMetadata, TopicPartition
from kafkastate.sync import KafkaConsumer, KafkaProducer
from tests._support.txn import commit_one

pytestmark = pytest.mark.integration

kafka = pytest.importorskip("kafka")

ADAPTERS = ["asyncio", "trio", "sync"]
ALL_ADAPTERS = ["asyncio", "anyio-asyncio", "trio", "sync"]


# ----------------------------------------------------------------------------- the facade


@dataclass(frozen=True)
class Step:
    """One transactional step: ``begin``, ``send`` (waits for the ack), ``offsets``,
    ``commit``, ``abort``, ``sleep`` (seconds in ``arg``) or ``call`` (a blocking
    function in ``arg``, run off the event loop)."""

    op: str
    topic: str = ""
    partition: int = 0
    value: bytes = b""
    arg: Any = None


def begin() -> Step:
    return Step("begin")


def send(topic: str, value: bytes, partition: int = 0) -> Step:
    return Step("send", topic=topic, partition=partition, value=value)


def offsets(values: Mapping[tuple[str, int], int], group: Any) -> Step:
    return Step("offsets", arg=(dict(values), group))


def commit() -> Step:
    return Step("commit")


def abort() -> Step:
    return Step("abort")


def sleep(seconds: float) -> Step:
    return Step("sleep", arg=seconds)


def call(fn: Callable[[], None]) -> Step:
    return Step("call", arg=fn)


Outcome = BaseException | None


async def _async_steps(producer: Any, steps: list[Step], sleeper: Any) -> list[Outcome]:
    out: list[Outcome] = []
    for step in steps:
        try:
            match step.op:
                case "begin":
                    await producer.begin_transaction()
                case "send":
                    result = await producer.send(step.topic, step.value, partition=step.partition)
                    if isinstance(result, asyncio.Future):  # AIOKafkaProducer
                        await result
                case "offsets":
                    await producer.send_offsets_to_transaction(*step.arg)
                case "commit":
                    await producer.commit_transaction()
                case "abort":
                    await producer.abort_transaction()
                case "sleep":
                    await sleeper(step.arg)
                case "call":
                    await anyio.to_thread.run_sync(step.arg)
            out.append(None)
        except Exception as exc:
            out.append(exc)
    return out


def run_script(
    adapter: str, bootstrap: str, tid: str, steps: list[Step], *, timeout_ms: int = 60000
) -> list[Outcome]:
    """Run ``steps`` on a fresh transactional producer of ``adapter``; one outcome each."""
    if adapter == "sync":
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=tid,
            transaction_timeout_ms=timeout_ms,
            linger_ms=5,
        )
        try:
            producer.init_transactions()
            out: list[Outcome] = []
            for step in steps:
                try:
                    match step.op:
                        case "begin":
                            producer.begin_transaction()
                        case "send":
                            producer.send(step.topic, step.value, partition=step.partition).get(
                                timeout=60
                            )
                        case "offsets":
                            producer.send_offsets_to_transaction(*step.arg)
                        case "commit":
                            producer.commit_transaction()
                        case "abort":
                            producer.abort_transaction()
                        case "sleep":
                            time.sleep(step.arg)
                        case "call":
                            step.arg()
                    out.append(None)
                except Exception as exc:
                    out.append(exc)
            return out
        finally:
            producer.close(timeout=30)
    if adapter == "asyncio":

        async def aio() -> list[Outcome]:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                transactional_id=tid,
                transaction_timeout_ms=timeout_ms,
            )
            await producer.start()
            try:
                return await _async_steps(producer, steps, asyncio.sleep)
            finally:
                await producer.stop()

        return asyncio.run(aio())

    async def native() -> list[Outcome]:
        module = kafkastate.trio if adapter == "trio" else kafkastate.anyio
        async with module.open_producer(
            bootstrap, transactional_id=tid, transaction_timeout_ms=timeout_ms
        ) as producer:
            return await _async_steps(producer, steps, anyio.sleep)

    if adapter == "trio":
        return trio.run(native)
    return anyio.run(native, backend="asyncio")


# ------------------------------------------------------------------------ reading back


def topic_with(bootstrap: str, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def read_independent(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """Every value of ``topic`` as kafka-python sees it with ``isolation``."""
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation,
        consumer_timeout_ms=3000,
    )
    try:
        return sorted(r.value for r in consumer)
    finally:
        consumer.close()


def read_own(bootstrap: str, topic: str, partitions: int = 2) -> list[bytes]:
    """Every value of ``topic`` through kafkastate's consumer, ``read_committed``, until the
    end offsets (which lie past the commit markers) are reached."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                out.extend(r.value for r in records)
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
        return sorted(out)
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group: str, tp: tuple[str, int]) -> int | None:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    try:
        return consumer.committed(kafka.TopicPartition(*tp))  # type: ignore[no-any-return]
    finally:
        consumer.close()


# ------------------------------------------------------------------------------- cases


@pytest.mark.parametrize("adapter", ALL_ADAPTERS)
def test_committed_visible_aborted_invisible(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)
    outcomes = run_script(
        adapter,
        bootstrap,
        f"tid-{topic}",
        [
            begin(),
            send(topic, b"c1", 0),
            send(topic, b"c2", 1),
            commit(),
            begin(),
            send(topic, b"a1", 0),
            send(topic, b"a2", 1),
            abort(),
            begin(),
            send(topic, b"c3", 0),
            commit(),
        ],
    )
    assert outcomes == [None] * len(outcomes)
    assert read_independent(bootstrap, topic) == [b"c1", b"c2", b"c3"]
    assert read_own(bootstrap, topic) == [b"c1", b"c2", b"c3"]
    # the aborted records were written: only the abort marker hides them
    assert read_independent(bootstrap, topic, "read_uncommitted") == [
        b"a1",
        b"a2",
        b"c1",
        b"c2",
        b"c3",
    ]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_illegal_calls_raise_typed_errors(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)
    outcomes = run_script(
        adapter,
        bootstrap,
        f"tid-{topic}",
        [
            send(topic, b"outside"),
            commit(),
            abort(),
            begin(),
            begin(),
            send(topic, b"in"),
            commit(),
        ],
    )
    assert isinstance(outcomes[0], TransactionStateError)
    assert isinstance(outcomes[1], TransactionStateError)
    assert isinstance(outcomes[2], TransactionStateError)
    assert outcomes[3] is None
    assert isinstance(outcomes[4], TransactionStateError)
    assert outcomes[5:] == [None, None]
    assert read_independent(bootstrap, topic) == [b"in"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_second_producer_with_the_same_id_fences_the_first(
    kafka_cluster: Any, adapter: str
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)
    tid = f"tid-{topic}"

    def newer_producer() -> None:
        # the newer incarnation: InitProducerId aborts the first one's open transaction
        # and bumps the epoch; then it commits a transaction of its own
        commit_one(bootstrap, tid, topic, b"newer", partition=1)

    outcomes = run_script(
        adapter,
        bootstrap,
        tid,
        [
            begin(),
            send(topic, b"old-1", 0),
            call(newer_producer),
            send(topic, b"old-2", 0),
            commit(),
            begin(),
        ],
    )
    assert outcomes[:3] == [None, None, None]
    fenced = [o for o in outcomes[3:] if o is not None]
    assert len(fenced) == 3, outcomes
    assert all(isinstance(o, ProducerFencedError) for o in fenced), outcomes
    assert read_independent(bootstrap, topic) == [b"newer"]
    assert read_own(bootstrap, topic) == [b"newer"]
    # nothing of the fenced producer after the fence landed at all, even uncommitted
    assert b"old-2" not in read_independent(bootstrap, topic, "read_uncommitted")


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_transaction_past_its_timeout_is_aborted_with_a_typed_error(
    kafka_cluster: Any, adapter: str
) -> None:
    """The coordinator aborts a transaction open longer than transaction_timeout_ms and
    bumps the epoch: the producer sees TransactionTimedOutError, and after
    abort_transaction() (KIP-588: re-initialised with the old epoch) it goes on."""
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)
    outcomes = run_script(
        adapter,
        bootstrap,
        f"tid-{topic}",
        [
            begin(),
            send(topic, b"late", 0),
            sleep(3.0),
            send(topic, b"later", 0),
            commit(),
            abort(),
            begin(),
            send(topic, b"next", 0),
            commit(),
        ],
        timeout_ms=1000,
    )
    assert outcomes[:3] == [None, None, None]
    assert isinstance(outcomes[3], TransactionTimedOutError), outcomes
    assert isinstance(outcomes[4], TransactionTimedOutError), outcomes
    assert isinstance(outcomes[4], TransactionFailedError)  # abort, then go on
    assert outcomes[5:] == [None, None, None, None], outcomes
    assert read_independent(bootstrap, topic) == [b"next"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_send_offsets_commit_with_the_transaction_only(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)
    source = topic_with(bootstrap)
    group, aborted_group = f"g-{topic}", f"ga-{topic}"
    meta = ConsumerGroupMetadata(group)  # no generation: an assign-based consumer
    outcomes = run_script(
        adapter,
        bootstrap,
        f"tid-{topic}",
        [
            begin(),
            send(topic, b"out-1", 0),
            offsets({(source, 0): 7, (source, 1): 3}, meta),
            commit(),
            begin(),
            send(topic, b"out-2", 0),
            offsets({(source, 0): 9}, aborted_group),  # a plain group id
            abort(),
            begin(),
            offsets({(source, 1): 4}, group),
            commit(),
        ],
    )
    assert outcomes == [None] * len(outcomes)
    assert committed_offset(bootstrap, group, (source, 0)) == 7
    assert committed_offset(bootstrap, group, (source, 1)) == 4
    assert committed_offset(bootstrap, aborted_group, (source, 0)) is None
    assert read_independent(bootstrap, topic) == [b"out-1"]


def test_a_fenced_group_generation_makes_the_offsets_abortable(kafka_cluster: Any) -> None:
    """KIP-447: offsets sent with a generation the group does not have are refused; the
    transaction becomes abortable and the producer goes on after the abort."""
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)
    group = f"g-{topic}"
    # a live group with one member (kafka-python, subscribed), generation >= 1
    member = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group)
    try:
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(timeout_ms=200)
        assert member.assignment()
        stale = ConsumerGroupMetadata(group, 9999, "not-a-member", None)
        outcomes = run_script(
            "sync",
            bootstrap,
            f"tid-{topic}",
            [
                begin(),
                offsets({(topic, 0): 1}, stale),
                abort(),
                begin(),
                send(topic, b"after", 0),
                commit(),
            ],
        )
    finally:
        member.close()
    assert isinstance(outcomes[1], TransactionFailedError), outcomes
    assert outcomes[2:] == [None, None, None, None]
    assert read_independent(bootstrap, topic) == [b"after"]


@pytest.mark.trio
async def test_abort_fails_records_not_yet_sent(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)

    async def main() -> list[Any]:
        async with kafkastate.trio.open_producer(
            bootstrap, transactional_id=f"tid-{topic}", linger_ms=10_000
        ) as producer:
            await producer.begin_transaction()
            deliveries = [await producer.enqueue(topic, b"x", partition=0) for _ in range(3)]
            await producer.abort_transaction()
            results = []
            for d in deliveries:
                try:
                    results.append(await d)
                except Exception as exc:
                    results.append(exc)
            return results

    results = await main()
    assert all(isinstance(r, TransactionAbortedError) for r in results), results
    assert read_independent(bootstrap, topic, "read_uncommitted") == []


@pytest.mark.anyio
async def test_transaction_block_aborts_even_with_offsets_under_way(kafka_cluster: Any) -> None:
    """A block whose send_offsets_to_transaction wait was cancelled, then raised: the
    abort ends the offsets too, and the producer goes on with the next transaction."""
    bootstrap = kafka_cluster.bootstrap
    topic = topic_with(bootstrap)
    group = f"g-{topic}"

    async def main() -> None:
        async with kafkastate.anyio.open_producer(bootstrap, transactional_id=f"t-{topic}") as p:
            with pytest.raises(RuntimeError, match="boom"):
                async with p.transaction():
                    await p.send(topic, b"aborted", partition=0)
                    with anyio.move_on_after(0):  # cancelled at once: the offsets go on
                        await p.send_offsets_to_transaction({(topic, 0): 5}, group)
                    txn = p.machine.transactions
                    assert txn is not None and txn.operation == "send_offsets"
                    raise RuntimeError("boom")
            async with p.transaction():
                await p.send(topic, b"committed", partition=0)

    await main()
    assert read_independent(bootstrap, topic) == [b"committed"]
    assert committed_offset(bootstrap, group, (topic, 0)) is None
