"""Rebalance listeners and group semantics in one process, against real Kafka: a listener
that raises (also when the member's partitions are lost: asyncio, trio, aiokafka's face and
blocking), commit before revoke, max_poll_interval, pattern subscriptions, fenced commits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator
from typing import Any

import anyio
import pytest

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.anyio import open_consumer
from kafkastate.errors import (
    CommitFailedError,
    KafkaConfigurationError,
    KafkaError,
    RebalanceListenerError,
)
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer
from kafkastate.testing.chaos._txn import Op, run_async, run_blocking
from tests.integration.test_groups import _produce, _topic

pytestmark = pytest.mark.integration

FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


class Recorder(ConsumerRebalanceListener):
    """Remembers every callback; raises from the ``fail``-th assignment callback."""

    def __init__(self, fail: int = 0) -> None:
        self.calls: list[tuple[str, set[int]]] = []
        self.fail = fail

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", {tp.partition for tp in revoked}))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", {tp.partition for tp in assigned}))
        if len([c for c in self.calls if c[0] == "assigned"]) == self.fail:
            raise ValueError("listener bug")

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", {tp.partition for tp in lost}))


@pytest.mark.anyio
async def test_async_listener_error_surfaces_once_and_the_member_goes_on(
    kafka_cluster: Any,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    _produce(bootstrap, topic, 5, partitions=2)
    listener = Recorder(fail=1)

    async def main() -> None:
        async with open_consumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            listener=listener,
            **FAST,
        ) as consumer:
            with anyio.fail_after(30):
                with pytest.raises(RebalanceListenerError) as caught:
                    while True:
                        await consumer.getmany(timeout_ms=500)
                assert caught.value.callback == "on_partitions_assigned"
                assert isinstance(caught.value.__cause__, ValueError)
                got: list[int] = []
                while len(got) < 10:  # the assignment stood: records come
                    batch = await consumer.getmany(timeout_ms=500)
                    got.extend(r.offset for records in batch.values() for r in records)
            assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}

    await main()
    assert listener.calls[0] == ("assigned", {0, 1})
    assert listener.calls[-1] == ("revoked", {0, 1})  # on close


def test_sync_listener_error_is_raised_by_poll(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    _produce(bootstrap, topic, 5, partitions=2)
    listener = Recorder(fail=1)
    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        **FAST,
    ) as consumer:
        consumer.subscribe([topic], listener=listener)
        deadline = time.monotonic() + 30
        with pytest.raises(RebalanceListenerError, match="on_partitions_assigned"):
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=500)
        got = 0
        while got < 10 and time.monotonic() < deadline:
            got += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
        assert got == 10


def test_auto_commit_before_revoke_hands_over_without_duplicates(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=4)
    _produce(bootstrap, topic, 25, partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    options = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": True,
        "auto_commit_interval_ms": 600_000,  # only the commit before revoking counts
        "partition_assignment_strategy": ["range"],
        **FAST,
    }
    first = Recorder()
    second = Recorder()

    async def main() -> None:
        async with open_consumer(topic, listener=first, **options) as a:
            got = 0
            with anyio.fail_after(30):
                while got < 100:
                    batch = await a.getmany(timeout_ms=500)
                    got += sum(len(v) for v in batch.values())
            async with open_consumer(topic, listener=second, **options) as b:
                extra = 0
                with anyio.fail_after(30):
                    while len(b.assignment()) != 2 or len(a.assignment()) != 2:
                        await a.getmany(timeout_ms=100)
                        extra += sum(len(v) for v in (await b.getmany(timeout_ms=100)).values())
                    for _ in range(5):  # what b would read again shows up by now
                        extra += sum(len(v) for v in (await b.getmany(timeout_ms=200)).values())
                assert extra == 0, "records read twice: the revoke did not commit"
                for tp in b.assignment():
                    assert await b.committed(tp) == 25

    anyio.run(main)
    assert ("revoked", {0, 1, 2, 3}) in first.calls


def test_member_that_stops_polling_leaves_and_rejoins(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    options = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "max_poll_interval_ms": 3000,
        **FAST,
    }
    slow_listener, steady_listener = Recorder(), Recorder()
    with KafkaConsumer(**options) as slow, KafkaConsumer(**options) as steady:
        slow.subscribe([topic], listener=slow_listener)
        steady.subscribe([topic], listener=steady_listener)
        deadline = time.monotonic() + 30
        while (len(slow.assignment()), len(steady.assignment())) != (1, 1):
            assert time.monotonic() < deadline, (slow.assignment(), steady.assignment())
            slow.poll(timeout_ms=100)
            steady.poll(timeout_ms=100)
        owned = {tp.partition for tp in slow.assignment()}
        # slow stops polling; its background thread keeps heartbeating, but the poll
        # timeout makes it leave: steady gets everything
        while len(steady.assignment()) != 2:
            assert time.monotonic() < deadline + 15, steady.assignment()
            steady.poll(timeout_ms=200)
        with pytest.raises(CommitFailedError):
            slow.commit({TopicPartition(topic, 0): 0})
        slow.poll(timeout_ms=0)  # runs the lost-partitions callback, and rejoins
        assert ("lost", owned) in slow_listener.calls, (owned, slow_listener.calls)
        deadline = time.monotonic() + 30
        while (len(slow.assignment()), len(steady.assignment())) != (1, 1):
            assert time.monotonic() < deadline, (slow.assignment(), steady.assignment())
            slow.poll(timeout_ms=100)
            steady.poll(timeout_ms=100)


def test_pattern_subscription_picks_up_new_topics(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    from kafkastate.adapters.blocking import BlockingAdmin  # noqa: PLC0415
    from kafkastate.core.protocol.requests import NewTopic  # noqa: PLC0415

    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=f"{prefix}-a", num_partitions=2)])
    seen: list[str] = []

    async def main() -> None:
        async with open_consumer(
            bootstrap_servers=bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            metadata_max_age_ms=1000,
            **FAST,
        ) as consumer:
            consumer.subscribe(pattern=f"{prefix}-.*")
            with anyio.fail_after(30):
                while len(consumer.assignment()) != 2:
                    await consumer.getmany(timeout_ms=200)
                with BlockingAdmin(bootstrap) as admin:
                    admin.create_topics([NewTopic(name=f"{prefix}-b", num_partitions=1)])
                while len(consumer.assignment()) != 3:
                    await consumer.getmany(timeout_ms=200)
            seen.extend(sorted(consumer.subscription()))

    anyio.run(main)
    assert seen == [f"{prefix}-a", f"{prefix}-b"]


def test_group_metadata_fences_transactional_offsets(kafka_cluster: Any) -> None:
    # consume-transform-produce: offsets sent with the member's group metadata commit with
    # the transaction; the same metadata after the member left is refused (KIP-447)
    import asyncio  # noqa: PLC0415

    from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 5, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}"
        )
        await producer.start()
        try:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                **FAST,
            )
            await consumer.start()
            consumer.subscribe([topic])
            got = []
            async with asyncio.timeout(30):
                while len(got) < 5:
                    batch = await consumer.getmany(timeout_ms=500)
                    got.extend(r for records in batch.values() for r in records)
            metadata = consumer.group_metadata()
            assert metadata.group_id == group and metadata.generation_id >= 1
            assert metadata.member_id
            async with producer.transaction():
                await producer.send_offsets_to_transaction({tp: 5}, metadata)
            assert await consumer.committed(tp) == 5
            await consumer.stop()  # leaves the group: that generation is over
            with pytest.raises(KafkaError) as caught:
                async with producer.transaction():
                    await producer.send_offsets_to_transaction({tp: 3}, metadata)
            fenced = f"{caught.value!r} {caught.value.__cause__!r}"
            assert "UnknownMemberId" in fenced or "IllegalGeneration" in fenced, fenced
            reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
            await reader.start()
            assert await reader.committed(tp) == 5  # the refused offsets did not land
            await reader.stop()
        finally:
            await producer.stop()

    asyncio.run(main())


def test_aiokafka_subscribe_before_start(kafka_cluster: Any) -> None:
    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    _produce(bootstrap, topic, 3, partitions=2)
    listener = Recorder()

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            **FAST,
        )
        consumer.subscribe([topic], listener=listener)  # as aiokafka allows
        with pytest.raises(KafkaConfigurationError, match="not both"):
            consumer.subscribe([topic], pattern="x")
        await consumer.start()
        try:
            got = 0
            with anyio.fail_after(30):
                while got < 6:
                    got += sum(len(v) for v in (await consumer.getmany(timeout_ms=500)).values())
            assert consumer.subscription() == {topic}
        finally:
            await consumer.stop()

    anyio.run(main)
    assert ("assigned", {0, 1}) in listener.calls  # the listener given before start() ran


# -- a listener that raises when the member's partitions are lost -------------------------

POLL_INTERVAL_MS = 3000
"""``max_poll_interval_ms`` of the lost-partitions tests: the application then stops
reading for longer, so the member leaves the group and its partitions are lost."""


class LostRaises(ConsumerRebalanceListener):
    """Remembers every callback; ``on_partitions_lost`` raises, and so do the assignments
    after the loss and the revoke on close."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[int]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", {tp.partition for tp in revoked}))
        raise ValueError("revoke bug")

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", {tp.partition for tp in assigned}))
        if any(c[0] == "lost" for c in self.calls):
            raise ValueError("assign bug")

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", {tp.partition for tp in lost}))
        raise ValueError("lost bug")


def _read_all(wanted: int, errors: list[str]) -> Generator[Op, Any, set[tuple[int, int]]]:
    """Read until ``wanted`` records came; each RebalanceListenerError's callback goes to
    ``errors``. Returns: (partition, offset) of the records."""
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + 60
    while len(seen) < wanted:
        assert time.monotonic() < deadline, (sorted(seen), errors)
        try:
            batch = yield Op("read")
        except RebalanceListenerError as exc:
            assert isinstance(exc.__cause__, ValueError), exc
            errors.append(exc.callback)
            continue
        seen.update((r.partition, r.offset) for records in batch.values() for r in records)
    return seen


def _committed(tps: list[TopicPartition]) -> Generator[Op, Any, list[int | None]]:
    found = []
    for tp in tps:
        found.append((yield Op("committed", (tp,))))
    return found


def lost_program(bootstrap: str, topic: str) -> Generator[Op, Any, None]:
    """Read and commit offsets 0-4 of both partitions, read 5-9 without committing, stop
    reading past ``max_poll_interval_ms``: the member leaves, its partitions are lost and
    ``on_partitions_lost`` raises. A commit of the lost partitions must be refused (the
    group is empty: sent, the broker would store it) and the committed offsets stay 5;
    the next read raises the listener's error once, the member joins again (whose raising
    assignment callback surfaces next) and reads 5-9 again from the committed offsets:
    nothing lost, nothing skipped, and its commit then stores 10."""
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    errors: list[str] = []
    first = yield from _read_all(10, errors)
    assert first == {(p, o) for p in (0, 1) for o in range(5)} and errors == []
    yield Op("commit")
    _produce(bootstrap, topic, 5, partitions=2)
    second = yield from _read_all(10, errors)
    assert second == {(p, o) for p in (0, 1) for o in range(5, 10)} and errors == []
    yield Op("sleep", (POLL_INTERVAL_MS / 1000 + 3,))
    refused: KafkaError | None = None
    try:
        yield Op("commit", ({tp: 10 for tp in tps},))
    except CommitFailedError as exc:
        refused = exc
    assert refused is not None, "a commit of lost partitions went through"
    assert (yield from _committed(tps)) == [5, 5]
    third = yield from _read_all(10, errors)
    assert errors == ["on_partitions_lost", "on_partitions_assigned"], errors
    assert third == second
    yield Op("commit")
    assert (yield from _committed(tps)) == [10, 10]


def _lost_options(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap,
        "group_id": f"g-{uuid.uuid4().hex[:8]}",
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "max_poll_interval_ms": POLL_INTERVAL_MS,
        **FAST,
    }


def _lost_topic(bootstrap: str) -> str:
    topic = _topic(bootstrap, partitions=2)
    _produce(bootstrap, topic, 5, partitions=2)
    return topic


LOST_CALLS = [("assigned", {0, 1}), ("lost", {0, 1}), ("assigned", {0, 1}), ("revoked", {0, 1})]
"""What the listener saw (leaving out calls with no partitions: a member that joins before
the metadata knows the topic is assigned again once it does); the last, on close, raised
too (logged)."""


def _calls(listener: LostRaises) -> list[tuple[str, set[int]]]:
    return [call for call in listener.calls if call[1]]


@pytest.mark.anyio
async def test_raising_lost_listener_anyio(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _lost_topic(bootstrap)
    listener = LostRaises()
    async with open_consumer(topic, listener=listener, **_lost_options(bootstrap)) as consumer:
        ops = {
            "read": lambda: consumer.getmany(timeout_ms=500),
            "commit": consumer.commit,
            "committed": consumer.committed,
            "sleep": anyio.sleep,
        }
        await run_async(lost_program(bootstrap, topic), ops)
    assert _calls(listener) == LOST_CALLS


def test_raising_lost_listener_aiokafka(kafka_cluster: Any) -> None:
    import asyncio  # noqa: PLC0415

    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _lost_topic(bootstrap)
    listener = LostRaises()

    async def main() -> None:
        consumer = AIOKafkaConsumer(**_lost_options(bootstrap))
        await consumer.start()
        try:
            consumer.subscribe([topic], listener=listener)
            ops = {
                "read": lambda: consumer.getmany(timeout_ms=500),
                "commit": consumer.commit,
                "committed": consumer.committed,
                "sleep": asyncio.sleep,
            }
            await run_async(lost_program(bootstrap, topic), ops)
        finally:
            await consumer.stop()

    asyncio.run(main())
    assert _calls(listener) == LOST_CALLS


def test_raising_lost_listener_blocking(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _lost_topic(bootstrap)
    listener = LostRaises()
    with KafkaConsumer(**_lost_options(bootstrap)) as consumer:
        consumer.subscribe([topic], listener=listener)
        ops = {
            "read": lambda: consumer.poll(timeout_ms=500),
            "commit": consumer.commit,
            "committed": consumer.committed,
            "sleep": time.sleep,
        }
        run_blocking(lost_program(bootstrap, topic), ops)
    assert _calls(listener) == LOST_CALLS
