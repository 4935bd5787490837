"""The consumer (fetcher, positions, offsets) against a real broker, on the blocking and the
anyio (asyncio and trio) adapters. Records are written with kafka-python, an independent
client, so a bug shared by our producer and consumer cannot hide."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.anyio import open_consumer
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from kafkastate.structs import OffsetAndMetadata, TopicPartition
from kafkastate.sync import KafkaConsumer

kafka = pytest.importorskip("kafka")

from tests._support.suspensions import counting_suspensions  # noqa: E402 (after the importorskip)

pytestmark = pytest.mark.integration

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"consume-{uuid.uuid4().hex[:10]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def _produce(
    bootstrap: str, topic: str, count: int, *, codec: str | None = None, partitions: int = 3
) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """Write ``count`` records round-robin over the partitions; return what was written as
    (partition, key, value, headers) in send order."""
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
    written = []
    for i in range(count):
        partition = i % partitions
        key, value = f"k{i}".encode(), f"value-{i}".encode() * 3
        headers = [("n", str(i).encode())]
        producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        written.append((partition, key, value, headers))
    producer.flush(30)
    producer.close()
    return written


def _by_partition(written: list[Any]) -> dict[int, list[tuple[bytes, bytes]]]:
    out: dict[int, list[tuple[bytes, bytes]]] = {}
    for partition, key, value, _headers in written:
        out.setdefault(partition, []).append((key, value))
    return out


def _drain_sync(consumer: KafkaConsumer, expected: int, limit: float = 30) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + limit
    while len(got) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    got.extend(r for rs in consumer.poll(timeout_ms=300).values() for r in rs)  # no extras
    return got


# ------------------------------------------------------------------------------ blocking


@pytest.mark.parametrize("codec", CODECS)
def test_sync_round_trip_every_codec(kafka_cluster: Any, codec: str | None) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    written = _produce(bootstrap, topic, 90, codec=codec)
    with KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        got = _drain_sync(c, 90)
        assert c.assignment() == {TopicPartition(topic, p) for p in range(3)}
    assert len(got) == 90
    per: dict[int, list[Any]] = {}
    for record in got:
        per.setdefault(record.partition, []).append(record)
    for partition, records in per.items():
        assert [r.offset for r in records] == list(range(len(records)))  # in order, no gaps
        assert [(r.key, r.value) for r in records] == _by_partition(written)[partition]
        assert all(r.headers == (("n", r.key[1:]),) for r in records)
        assert all(r.serialized_value_size == len(r.value) for r in records)


def test_sync_assign_seek_position_and_offset_queries(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    before = int(time.time() * 1000)
    _produce(bootstrap, topic, 20, partitions=1)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        value_deserializer=lambda v: v.decode(),
        max_poll_records=5,
    ) as c:
        c.assign([tp])
        assert c.position(tp) == 20  # latest by default
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 20}
        found = c.offsets_for_times({tp: before})[tp]
        assert found is not None and found.offset == 0 and found.timestamp >= before
        assert c.offsets_for_times({tp: int(time.time() * 1000) + 60_000}) == {tp: None}
        c.seek(tp, 7)
        batch = c.poll(timeout_ms=10_000)
        assert [r.offset for r in batch[tp]] == [7, 8, 9, 10, 11]  # max_poll_records
        assert batch[tp][0].value == "value-7" * 3
        assert c.position(tp) == 12
        assert c.highwater(tp) == 20
        c.seek_to_beginning()
        assert c.position(tp) == 0
        c.pause(tp)
        assert c.poll(timeout_ms=300) == {} and c.paused() == {tp}
        c.resume(tp)
        assert [r.offset for r in c.poll(timeout_ms=10_000)[tp]][:1] == [0]
        c.seek_to_end(tp)
        assert c.position(tp) == 20
        with pytest.raises(IllegalStateError, match="not assigned"):
            c.seek(TopicPartition(topic, 5), 0)
        with pytest.raises(KafkaConfigurationError):
            c.seek(tp, -3)


def test_sync_reset_none_and_commits(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    _produce(bootstrap, topic, 10, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="none",
        enable_auto_commit=False,  # the polls below move positions; commit by hand only
    ) as c:
        c.assign(tps)
        with pytest.raises(NoOffsetForPartitionError):
            c.poll(timeout_ms=10_000)
        assert c.committed(tps[0]) is None
        c.seek(tps[0], 2)
        c.seek(tps[1], 4)
        c.commit({tps[0]: OffsetAndMetadata(3, "three")})
        assert c.committed(tps[0], metadata=True) == OffsetAndMetadata(3, "three")
        results: list[Any] = []
        c.commit_async({tps[1]: 4}, callback=lambda offsets, error: results.append(error))
        deadline = time.monotonic() + 10
        while not results and time.monotonic() < deadline:
            c.poll(timeout_ms=100)
        assert results == [None]
    # A new consumer of the group starts from the committed offsets.
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group) as again:
        again.assign(tps)
        assert again.position(tps[0]) == 3 and again.position(tps[1]) == 4
        got = _drain_sync(again, 3)
        assert sorted((r.partition, r.offset) for r in got) == [(0, 3), (0, 4), (1, 4)]


def test_sync_iteration_stops_after_consumer_timeout(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 4, partitions=1)
    with KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=800
    ) as c:
        started = time.monotonic()
        assert [r.offset for r in c] == [0, 1, 2, 3]
        assert time.monotonic() - started < 15


# ---------------------------------------------------------------------------- anyio/trio


@pytest.mark.anyio
async def test_async_round_trip_and_iteration(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    written = _produce(bootstrap, topic, 60, codec="lz4")

    async def main() -> list[Any]:
        got: list[Any] = []
        async with open_consumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            with anyio.fail_after(30):
                while len(got) < 50:
                    batch = await consumer.getmany(timeout_ms=1000, max_records=10)
                    assert sum(len(rs) for rs in batch.values()) <= 10
                    for records in batch.values():
                        got.extend(records)
                async for record in consumer:  # the rest, one by one
                    got.append(record)
                    if len(got) == 60:
                        break
            assert await consumer.getmany(timeout_ms=300) == {}
            positions = {p: await consumer.position((topic, p)) for p in range(3)}
            assert positions == {0: 20, 1: 20, 2: 20}
        return got

    got = await main()
    per: dict[int, list[tuple[bytes, bytes]]] = {}
    for record in sorted(got, key=lambda r: (r.partition, r.offset)):
        per.setdefault(record.partition, []).append((record.key, record.value))
    assert per == _by_partition(written)


@pytest.mark.anyio
async def test_async_offsets_and_commit(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 10, partitions=1)
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with open_consumer(bootstrap_servers=bootstrap, group_id=group) as consumer:
            consumer.assign([tp])
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 10}
            assert await consumer.committed(tp) is None
            assert await consumer.position(tp) == 10  # no commit: latest
            consumer.seek(tp, 6)
            records = (await consumer.getmany(timeout_ms=10_000))[tp]
            assert records[0].offset == 6
            await consumer.commit()
            assert await consumer.committed(tp) == records[-1].offset + 1
            assert await consumer.partitions_for_topic(topic) == frozenset({0})
            assert topic in await consumer.topics()

    await main()


@pytest.mark.anyio
async def test_async_getmany_zero_timeout_yields_and_last_poll_timestamp(
    kafka_cluster: Any,
) -> None:
    """aiokafka's ``while not await getmany(): ...`` (timeout_ms=0) must let the connection
    task run, and last_poll_timestamp() is the last fetch's time, known with highwater() even
    before a record of the partition is handed out (seed 000's flow-control example)."""
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    _produce(bootstrap, topic, 4, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    before = int(time.time() * 1000)
    async with open_consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp0, tp1])
        assert c.last_poll_timestamp(tp1) is None
        data: dict[Any, Any] = {}
        with anyio.fail_after(20):
            while tp0 not in data:
                data = await c.getmany(tp0)  # timeout_ms=0
        with anyio.fail_after(20):
            while c.highwater(tp1) is None:
                await c.getmany(tp0)
        assert c.highwater(tp1) == 2
        stamp = c.last_poll_timestamp(tp1)  # fetched, none of its records handed out
        assert stamp is not None and before - 1000 <= stamp <= int(time.time() * 1000) + 1000


def test_bad_consumer_options_are_typed() -> None:
    bad: list[Callable[[], Any]] = [
        lambda: KafkaConsumer(bootstrap_servers="localhost:1", auto_offset_reset="first"),
        lambda: KafkaConsumer(bootstrap_servers="localhost:1", isolation_level="dirty"),
        lambda: KafkaConsumer(bootstrap_servers="localhost:1", max_poll_records=0),
    ]
    for make in bad:
        with pytest.raises(KafkaConfigurationError):
            make()
    with pytest.raises(KafkaConfigurationError, match=r"Unrecognized configs: \{'bogus'\}"):
        KafkaConsumer(bootstrap_servers="localhost:1", bogus=1)  # kafka-python's words
    with pytest.raises(KafkaConfigurationError, match="session_timeout_ms"):
        KafkaConsumer(bootstrap_servers="localhost:1", group_id="g", session_timeout_ms=-1)
    with pytest.raises(KafkaConfigurationError, match="'fair' is not an assignor"):
        KafkaConsumer(
            bootstrap_servers="localhost:1", group_id="g", partition_assignment_strategy=["fair"]
        )


def test_aiokafka_consumer(kafka_cluster: Any) -> None:
    import asyncio  # noqa: PLC0415

    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    written = _produce(bootstrap, topic, 20, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def main() -> list[Any]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            value_deserializer=lambda v: v.decode(),
        )
        with pytest.raises(IllegalStateError, match="not started"):
            consumer.assignment()
        await consumer.start()
        got: list[Any] = []
        try:
            async with asyncio.timeout(30):
                async for record in consumer:
                    got.append(record)
                    if len(got) == 20:
                        break
            assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
            assert consumer.partitions_for_topic(topic) == {0, 1}
            assert await consumer.end_offsets([TopicPartition(topic, 0)]) == {
                TopicPartition(topic, 0): 10
            }
        finally:
            await consumer.stop()  # auto-commit on stop
        async with AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group) as again:
            again.assign([TopicPartition(topic, 0)])
            assert await again.committed(TopicPartition(topic, 0)) == 10
        return got

    got = asyncio.run(main())
    assert sorted((r.partition, r.offset) for r in got) == [
        (p, o) for p in (0, 1) for o in range(10)
    ]
    assert {r.value for r in got} == {v.decode() for _p, _k, v, _h in written}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"session_timeout_ms": 1000, "heartbeat_interval_ms": 3000}, "heartbeat_interval_ms"),
        ({"session_timeout_ms": 0}, "session_timeout_ms"),
        ({"max_poll_interval_ms": -1}, "max_poll_interval_ms"),
        ({"partition_assignment_strategy": ["nope"]}, "'nope' is not an assignor"),
        ({"partition_assignment_strategy": []}, "partition_assignment_strategy"),
        ({"group_protocol": "eager"}, "group_protocol"),
        ({"group_instance_id": ""}, "group_instance_id"),
        ({"group_remote_assignor": "uniform"}, "group_remote_assignor needs"),
        (
            {"group_protocol": "consumer", "partition_assignment_strategy": ["range"]},
            "does not apply to group_protocol='consumer'",
        ),
    ],
)
def test_aiokafka_consumer_checks_group_options(options: dict[str, Any], message: str) -> None:
    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    with pytest.raises(KafkaConfigurationError, match=message):
        AIOKafkaConsumer("t", bootstrap_servers="localhost:1", group_id="g", **options)
    with pytest.raises(KafkaConfigurationError, match=message):
        KafkaConsumer(
            "t", bootstrap_servers="localhost:1", group_id="g", api_version=(3, 0), **options
        )


def test_open_consumer_names_an_unknown_option() -> None:
    async def main() -> None:
        async with open_consumer(bootstrap_servers="localhost:1", sesion_timeout_ms=1):
            pass

    with pytest.raises(TypeError, match=r"open_consumer: unknown option\(s\): sesion_timeout_ms"):
        anyio.run(main)


@pytest.mark.parametrize("adapter", ["sync", "trio"])
def test_read_committed_hides_aborted_transactions(kafka_cluster: Any, adapter: str) -> None:
    # The transactions are written by kafka-python (an independent client) until
    # kafkastate's own transactional producer exists.
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}"
    )
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send(topic, f"committed-{i}".encode(), partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(3):
        producer.send(topic, f"aborted-{i}".encode(), partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, b"committed-last", partition=0)
    producer.commit_transaction()
    producer.close()
    expected_committed = [b"committed-0", b"committed-1", b"committed-2", b"committed-last"]

    def read(isolation: str, count: int) -> list[bytes]:
        if adapter == "sync":
            with KafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                auto_offset_reset="earliest",
                isolation_level=isolation,
            ) as c:
                return [r.value for r in _drain_sync(c, count)]

        async def main() -> list[bytes]:
            got: list[bytes] = []
            async with open_consumer(
                topic,
                bootstrap_servers=bootstrap,
                auto_offset_reset="earliest",
                isolation_level=isolation,
            ) as consumer:
                with anyio.move_on_after(20):
                    while len(got) < count:
                        batch = await consumer.getmany(timeout_ms=1000)
                        got.extend(r.value for rs in batch.values() for r in rs)
                batch = await consumer.getmany(timeout_ms=500)
                got.extend(r.value for rs in batch.values() for r in rs)
            return got

        return anyio.run(main, backend="trio")

    assert read("read_committed", 4) == expected_committed
    everything = read("read_uncommitted", 7)
    assert everything == [
        b"committed-0",
        b"committed-1",
        b"committed-2",
        b"aborted-0",
        b"aborted-1",
        b"aborted-2",
        b"committed-last",
    ]


def _replicated_topic(bootstrap: str, count: int) -> tuple[str, Any]:
    """A one-partition topic on 3 replicas (min ISR 2) holding values "0".."count-1",
    written with acks=all by kafka-python; returns it and the still open producer."""
    topic = f"consume3-{uuid.uuid4().hex[:6]}"
    configs = {"min.insync.replicas": "2"}
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics(
            [NewTopic(name=topic, num_partitions=1, replication_factor=3, configs=configs)]
        )
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(count):
        producer.send(topic, str(i).encode(), partition=0)
    producer.flush(30)
    return topic, producer


@pytest.mark.kafka_needs("fault_control")
def test_consumption_resumes_after_the_leader_is_killed(kafka_cluster3: Any) -> None:
    bootstrap = kafka_cluster3.bootstrap
    topic, producer = _replicated_topic(bootstrap, 300)
    tp = TopicPartition(topic, 0)
    got: list[int] = []
    with KafkaConsumer(
        bootstrap_servers=bootstrap, max_poll_records=50, request_timeout_ms=10_000
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        # Watch the KIP-320 check the leader change must cause (a real OffsetForLeaderEpoch
        # round trip): (position, position epoch, end offset the new leader answered).
        machine = consumer._machine.fetcher
        validations: list[tuple[int, int, int]] = []
        complete = machine._complete_validation

        def watch(tp_: Any, p: Any, request: tuple[int, int, int], part: Any) -> None:
            validations.append((request[0], request[1], int(part.end_offset)))
            complete(tp_, p, request, part)

        machine._complete_validation = watch  # type: ignore[method-assign]
        while len(got) < 100:
            got.extend(int(r.value) for r in consumer.poll(timeout_ms=1000).get(tp, []))
        leader = consumer._machine.client.cluster.leader_for(topic, 0)
        assert leader is not None
        victim = kafka_cluster3.broker(int(leader))
        victim.kill()  # SIGKILL: the partition moves to another replica
        try:
            for i in range(300, 400):  # more records, written to the new leader
                producer.send(topic, str(i).encode(), partition=0)
            producer.flush(60)
            deadline = time.monotonic() + 60
            while len(got) < 400 and time.monotonic() < deadline:
                got.extend(int(r.value) for r in consumer.poll(timeout_ms=1000).get(tp, []))
        finally:
            producer.close()
            victim.restart()
    assert got == list(range(400))  # nothing skipped, nothing twice, in order
    # The position was checked against the new leader's log, which holds everything read.
    assert validations, "no OffsetForLeaderEpoch after the leader change"
    position, epoch, end_offset = validations[0]
    assert 100 <= position <= 300 and epoch >= 0 and end_offset >= position


@pytest.mark.kafka_needs("racks")
def test_fetch_from_the_closest_replica(kafka_cluster3: Any) -> None:
    """KIP-392: the leader names the replica in the consumer's rack, and fetching moves there."""
    bootstrap = kafka_cluster3.bootstrap
    topic, producer = _replicated_topic(bootstrap, 200)
    producer.close()
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, max_poll_records=20) as probe:
        probe.partitions_for_topic(topic)
        leader = probe._machine.client.cluster.leader_for(topic, 0)
    assert leader is not None
    follower = next(n for n in (1, 2, 3) if n != int(leader))
    got: list[int] = []
    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_rack=f"rack-{follower}",
        auto_offset_reset="earliest",
        max_poll_records=20,
        max_partition_fetch_bytes=1024,  # many small fetches: most after the redirect
    ) as consumer:
        machine = consumer._machine.fetcher
        served: list[tuple[int, int]] = []  # (node, records bytes) per Fetch answer for tp
        on_response = machine._on_fetch_response

        def watch(node: Any, offsets: Any, response: Any, now: float) -> None:
            for t in response.responses:
                for part in t.partitions:
                    served.append((int(node), len(part.records or b"")))
            on_response(node, offsets, response, now)

        machine._on_fetch_response = watch  # type: ignore[method-assign]
        consumer.assign([tp])
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            got.extend(int(r.value) for r in consumer.poll(timeout_ms=1000).get(tp, []))
    assert got == list(range(200))
    from_follower = sum(size for node, size in served if node == follower)
    from_leader = sum(size for node, size in served if node == int(leader))
    assert from_follower > from_leader, served  # the first fetch only, from the leader


def _compacted_topic(bootstrap: str) -> str:
    """A compacted topic whose first segment the cleaner has compacted: keys k0-k4 written
    10 times each (offsets 0-49), then a record that rolls the segment (offset 50).
    Compaction leaves offsets 45-50."""
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.0001",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "100",
    }
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=1, configs=configs)])
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    for i in range(50):
        producer.send(topic, key=f"k{i % 5}".encode(), value=f"v{i}".encode(), partition=0)
        producer.flush(30)  # one batch per record: compaction can drop whole batches
    time.sleep(0.3)  # past segment.ms: the next append rolls the segment
    producer.send(topic, key=b"tail", value=b"tail", partition=0)
    producer.flush(30)
    producer.close()
    # Wait for the cleaner (a fresh kafka-python reader each time: independent of ours).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reader = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000
        )
        reader.assign([kafka.TopicPartition(topic, 0)])
        offsets = [r.offset for r in reader]
        reader.close()
        if offsets and offsets[0] == 45 and offsets[-1] == 50:
            return topic
        time.sleep(0.5)
    raise AssertionError(f"the log cleaner did not compact {topic} within 60 s: {offsets}")


@pytest.mark.parametrize("adapter", ["sync", "trio", "asyncio"])
def test_a_compacted_topic_reads_across_the_gaps(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _compacted_topic(bootstrap)
    tp = TopicPartition(topic, 0)
    expected = [(45, b"k0", b"v45"), (46, b"k1", b"v46"), (47, b"k2", b"v47")]
    expected += [(48, b"k3", b"v48"), (49, b"k4", b"v49"), (50, b"tail", b"tail")]

    if adapter == "sync":
        with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            c.seek(tp, 3)  # inside the compacted range: the next record is 45
            got = [(r.offset, r.key, r.value) for r in _drain_sync(c, 6)]
            assert c.position(tp) == 51
    elif adapter == "trio":

        async def main() -> list[tuple[int, bytes, bytes]]:
            async with open_consumer(
                bootstrap_servers=bootstrap, auto_offset_reset="earliest"
            ) as c:
                c.assign([tp])
                c.seek(tp, 3)
                out: list[tuple[int, bytes, bytes]] = []
                with anyio.fail_after(20):
                    while len(out) < 6:
                        batch = await c.getmany(timeout_ms=1000)
                        out.extend((r.offset, r.key, r.value) for rs in batch.values() for r in rs)
                    assert await c.position(tp) == 51
                return out

        got = anyio.run(main, backend="trio")
    else:
        from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

        async def aio_main() -> list[tuple[int, bytes, bytes]]:
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
            await c.start()
            try:
                out: list[tuple[int, bytes, bytes]] = []
                with anyio.fail_after(20):
                    while len(out) < 6:
                        r = await c.getone()
                        out.append((r.offset, r.key, r.value))
                return out
            finally:
                await c.stop()

        got = anyio.run(aio_main, backend="asyncio")
    assert got == expected


@pytest.mark.parametrize("adapter", ["sync", "trio"])
def test_deleted_records_reset_by_policy(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 10, partitions=1)
    tp = TopicPartition(topic, 0)
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({kafka.TopicPartition(topic, 0): 6})  # log start is now 6
    finally:
        admin.close()

    if adapter == "sync":
        with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            assert c.beginning_offsets([tp]) == {tp: 6}
            c.seek(tp, 2)  # deleted: OFFSET_OUT_OF_RANGE, reset to the new log start
            got = _drain_sync(c, 4)
            assert [r.offset for r in got] == [6, 7, 8, 9]
        with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="none") as strict:
            strict.assign([tp])
            strict.seek(tp, 2)
            with pytest.raises(OffsetOutOfRangeError, match=f"offset 2 is out of range.*{topic}"):
                for _ in range(20):
                    strict.poll(timeout_ms=500)
        return

    async def main() -> list[int]:
        async with open_consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            c.seek(tp, 2)
            got: list[int] = []
            with anyio.fail_after(20):
                while len(got) < 4:
                    batch = await c.getmany(timeout_ms=1000)
                    got.extend(r.offset for rs in batch.values() for r in rs)
            return got

    assert anyio.run(main, backend="trio") == [6, 7, 8, 9]


@pytest.mark.anyio
@pytest.mark.parametrize("face", ["open_consumer", "AIOKafkaConsumer"])
async def test_getone_and_iteration_yield_once_per_batch_taken(
    kafka_cluster: Any, anyio_backend: str, face: str
) -> None:
    """A record at hand comes without a turn of the event loop; after each batch the
    consumer took from the fetcher (``max_poll_records``) the next getone / iteration step
    yields once, before taking its record: a reader of buffered records lets the other
    tasks (the connection's among them) run."""
    if face == "AIOKafkaConsumer" and anyio_backend != "asyncio":
        pytest.skip("aiokafka's face runs on asyncio")
    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 41, partitions=1)
    tp = TopicPartition(topic, 0)
    options = {"bootstrap_servers": bootstrap, "auto_offset_reset": "earliest"}

    async def read(consumer: Any) -> None:
        with anyio.fail_after(20):
            first = await consumer.getmany(timeout_ms=10_000, max_records=1)
        assert [r.offset for r in first[tp]] == [0]  # the other 40 came with it
        getone_yields, iteration_yields = [0], [0]
        got = [await counting_suspensions(consumer.getone(), getone_yields) for _ in range(20)]
        got += [await counting_suspensions(anext(consumer), iteration_yields) for _ in range(20)]
        assert [r.offset for r in got] == list(range(1, 41))
        # batches of 10 taken at offsets 1, 11, 21 and 31: a yield at 2, 12, 22 and 32
        assert (getone_yields, iteration_yields) == ([2], [2])
        assert await consumer.position(tp) == 41

    if face == "open_consumer":
        async with open_consumer(max_poll_records=10, **options) as consumer:
            consumer.assign([tp])
            await read(consumer)
    else:
        aio = AIOKafkaConsumer(max_poll_records=10, enable_auto_commit=False, **options)
        aio.assign([tp])
        await aio.start()
        try:
            await read(aio)
        finally:
            await aio.stop()


@pytest.mark.anyio
async def test_a_read_of_a_record_at_hand_in_a_cancelled_scope(
    kafka_cluster: Any, anyio_backend: str
) -> None:
    """On trio every read is a cancel point, records at hand or not (before it takes
    anything: the record stays for the next read); on asyncio a read that does not suspend
    is not cancelled (aiokafka's ``getone`` on buffered records), and hands its record out."""
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 10, partitions=1)
    tp = TopicPartition(topic, 0)
    async with open_consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=8
    ) as consumer:
        consumer.assign([tp])
        with anyio.fail_after(20):
            first = await consumer.getmany(timeout_ms=10_000, max_records=1)
        assert [r.offset for r in first[tp]] == [0]
        assert (await consumer.getone()).offset == 1  # took 1-8 from the fetcher
        assert (await consumer.getone()).offset == 2  # (the turn after that batch)

        async def getmany_one() -> Any:
            batch = await consumer.getmany(max_records=1)
            (record,) = batch[tp]
            return record

        offset = 3
        for read in (consumer.getone, lambda: anext(consumer), getmany_one):
            got: list[int] = []
            with anyio.CancelScope() as scope:
                scope.cancel()
                got.append((await read()).offset)
            if anyio_backend == "trio":
                assert scope.cancelled_caught and got == []
            else:
                assert got == [offset]
                offset += 1
            assert (await read()).offset == offset  # nothing lost, nothing skipped
            offset += 1
        assert await consumer.position(tp) == offset


@pytest.mark.trio
async def test_getone_for_one_partition_while_another_is_buffered(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    _produce(bootstrap, topic, 6, partitions=2)

    async def main() -> list[tuple[int, int]]:
        async with open_consumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            with anyio.fail_after(20):
                first = await consumer.getone((topic, 0))
                # the rest of what came with it (both partitions) is buffered; asking for
                # partition 1 must return its records, not spin on partition 0's
                second = await consumer.getone((topic, 1))
                third = await consumer.getone((topic, 1))
        return [(r.partition, r.offset) for r in (first, second, third)]

    assert await main() == [(0, 0), (1, 0), (1, 1)]


@pytest.mark.parametrize("adapter", ["sync", "trio"])
def test_a_record_larger_than_the_fetch_limits_is_still_read(
    kafka_cluster: Any, adapter: str
) -> None:
    """Kafka returns the first batch whole even beyond max_partition_fetch_bytes and
    fetch_max_bytes (KIP-74): the consumer makes progress instead of stalling."""
    bootstrap = kafka_cluster.bootstrap
    topic = f"big-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics(
            [NewTopic(name=topic, num_partitions=1, configs={"max.message.bytes": "3000000"})]
        )
    big = bytes(range(256)) * 8000  # 2 MB, incompressible enough
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, max_request_size=3_000_000)
    producer.send(topic, big, partition=0)
    producer.send(topic, b"small", partition=0)
    producer.flush(30)
    producer.close()
    tp = TopicPartition(topic, 0)
    limits = {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 4096}
    if adapter == "sync":
        with KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", **limits
        ) as c:
            c.assign([tp])
            got = [r.value for r in _drain_sync(c, 2)]
    else:

        async def main() -> list[bytes]:
            async with open_consumer(
                bootstrap_servers=bootstrap, auto_offset_reset="earliest", **limits
            ) as c:
                c.assign([tp])
                out: list[bytes] = []
                with anyio.fail_after(30):
                    while len(out) < 2:
                        batch = await c.getmany(timeout_ms=1000)
                        out.extend(r.value for rs in batch.values() for r in rs)
                return out

        got = anyio.run(main, backend="trio")
    assert got == [big, b"small"]


@pytest.mark.kafka_needs("fault_control")
@pytest.mark.trio
async def test_trio_consumption_resumes_after_the_leader_is_killed(kafka_cluster3: Any) -> None:
    bootstrap = kafka_cluster3.bootstrap
    topic, producer = _replicated_topic(bootstrap, 200)
    tp = TopicPartition(topic, 0)

    async def main() -> list[int]:
        got: list[int] = []
        async with open_consumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", request_timeout_ms=10_000
        ) as c:
            c.assign([tp])
            with anyio.fail_after(30):
                while len(got) < 100:
                    batch = await c.getmany(timeout_ms=1000, max_records=50)
                    got.extend(int(r.value) for r in batch.get(tp, []))
            leader = c.machine.client.cluster.leader_for(topic, 0)
            assert leader is not None
            victim = kafka_cluster3.broker(int(leader))
            victim.kill()
            try:
                for i in range(200, 300):
                    producer.send(topic, str(i).encode(), partition=0)
                await anyio.to_thread.run_sync(producer.flush, 60)
                with anyio.fail_after(60):
                    while len(got) < 300:
                        batch = await c.getmany(timeout_ms=1000)
                        got.extend(int(r.value) for r in batch.get(tp, []))
            finally:
                producer.close()
                await anyio.to_thread.run_sync(victim.restart)
        return got

    assert await main() == list(range(300))
