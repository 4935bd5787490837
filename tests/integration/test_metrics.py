"""metrics() and health() after a real produce/consume run, on every runtime: every name
of :data:`kafkastate.core.report.METRIC_NAMES` is there, with plausible values (the
producer's counts equal the records sent, the consumer's the records read, lag 0 at the
end)."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.anyio import open_admin, open_consumer, open_producer
from kafkastate.asyncio import AIOKafkaAdminClient, AIOKafkaConsumer, AIOKafkaProducer
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.core.report import METRIC_NAMES
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer

pytestmark = pytest.mark.integration

N = 40
PARTITIONS = 2


def _topic(bootstrap: str) -> str:
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=PARTITIONS)])
    return name


def _nodes(report: dict[str, dict[str, float]], prefix: str) -> list[dict[str, float]]:
    groups = [g for name, g in report.items() if name.startswith(f"{prefix}-node-metrics.node-")]
    for group in groups:
        assert set(group) == set(METRIC_NAMES[f"{prefix}-node-metrics.node-<id>"])
    return groups


def check_network(group: dict[str, float]) -> None:
    assert group["request-total"] > 0 and group["response-total"] > 0
    assert group["request-rate"] > 0 and group["response-rate"] > 0
    assert 0 < group["request-latency-avg"] <= group["request-latency-max"] < 60_000
    assert group["outgoing-byte-total"] > 0 and group["incoming-byte-total"] > 0
    assert group["connection-creation-total"] >= 1


def check_producer(report: dict[str, dict[str, float]], sent: int) -> None:
    group = report["producer-metrics"]
    assert set(METRIC_NAMES["producer-metrics"]) <= set(group)
    check_network(group)
    assert group["connection-count"] >= 1
    # a retry writes its records again (Java counts them again): a topic just created may
    # answer NOT_LEADER_OR_FOLLOWER first
    assert group["record-send-total"] == sent + group["record-retry-total"]
    assert group["record-ack-total"] == sent
    assert group["record-send-rate"] > 0
    assert group["record-error-total"] == group["record-error-rate"] == 0
    assert 0 < group["batch-size-avg"] <= group["batch-size-max"]
    assert group["records-per-request-avg"] >= 1
    assert group["record-queue-time-max"] >= group["record-queue-time-avg"] >= 0
    assert group["buffer-available-bytes"] == group["buffer-total-bytes"] > 0
    assert group["buffer-used-bytes"] == group["records-outstanding"] == 0
    assert group["bufferpool-wait-time-ns-total"] == 0
    assert group["requests-in-flight"] == group["batches-in-flight"] == 0
    assert group["produce-throttle-time-max"] == 0
    nodes = _nodes(report, "producer")
    assert nodes and sum(n["response-total"] for n in nodes) == group["response-total"]


def check_consumer(report: dict[str, dict[str, float]], consumed: int) -> None:
    check_network(report["consumer-metrics"])
    assert _nodes(report, "consumer")
    fetch = report["consumer-fetch-manager-metrics"]
    assert set(fetch) == set(METRIC_NAMES["consumer-fetch-manager-metrics"])
    assert fetch["records-consumed-total"] == consumed
    assert fetch["records-consumed-rate"] > 0
    assert fetch["records-lag-max"] == 0
    assert fetch["fetch-total"] >= 1 and fetch["fetch-rate"] > 0
    assert 0 < fetch["fetch-latency-max"] < 60_000
    assert fetch["bytes-consumed-total"] > consumed  # at least a byte per record
    assert fetch["bytes-consumed-rate"] > 0 and fetch["fetch-size-max"] > 0
    assert fetch["assigned-partitions"] == PARTITIONS
    assert fetch["paused-partitions"] == 0
    group = report["consumer-coordinator-metrics"]
    assert set(group) == set(METRIC_NAMES["consumer-coordinator-metrics"])
    assert group["assigned-partitions"] == PARTITIONS
    assert group["rebalance-total"] >= 1 and group["rebalance-rate-per-hour"] > 0
    assert group["last-rebalance-seconds-ago"] >= 0
    assert group["join-total"] >= 1 and group["sync-total"] >= 1
    assert group["join-time-max"] >= group["join-time-avg"] > 0
    assert group["commit-total"] >= 1 and group["commit-rate"] > 0
    assert 0 < group["commit-latency-avg"] <= group["commit-latency-max"]
    assert group["failed-rebalance-total"] == 0


def check_health(snapshot: dict[str, Any], kind: str) -> None:
    assert snapshot["kind"] == kind
    assert snapshot["healthy"] is True and snapshot["error"] is None
    assert snapshot["brokers"]
    if kind == "consumer":
        assert snapshot["coordinator"] is not None
        assert len(snapshot["assignment"]) == PARTITIONS
        assert 0 <= snapshot["last_fetch_seconds_ago"] < 60
    if kind == "producer":
        assert 0 <= snapshot["last_ack_seconds_ago"] < 60


def _group() -> str:
    return f"metrics-{uuid.uuid4().hex[:8]}"


async def _read(consumer: Any, count: int) -> None:
    """getmany until ``count`` records came (a minute at most)."""
    got = 0
    with anyio.fail_after(60):
        while got < count:
            batch = await consumer.getmany(timeout_ms=1000)
            got += sum(len(rs) for rs in batch.values())


@pytest.mark.anyio
async def test_anyio_faces(bootstrap: str, anyio_backend: str) -> None:
    topic = _topic(bootstrap)
    async with open_producer(bootstrap) as producer:
        deliveries = [await producer.enqueue(topic, b"v%d" % i) for i in range(N)]
        for delivery in deliveries:
            await delivery.wait()
        check_producer(producer.metrics(), N)
        check_health(producer.health(), "producer")
    after = producer.metrics()["producer-metrics"]  # after close: the final counts
    assert after["record-send-total"] == N and after["connection-count"] == 0
    async with open_consumer(
        topic, bootstrap_servers=bootstrap, group_id=_group(), auto_offset_reset="earliest"
    ) as consumer:
        await _read(consumer, N)
        await consumer.commit()
        check_consumer(consumer.metrics(), N)
        check_health(consumer.health(), "consumer")
    async with open_admin(bootstrap) as admin:
        await admin.list_topics()
        check_network(admin.metrics()["admin-client-metrics"])
        check_health(admin.health(), "admin")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiokafka_faces(bootstrap: str, anyio_backend: str) -> None:
    topic = _topic(bootstrap)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    assert producer.metrics() == {}
    async with producer:
        futures = [await producer.send(topic, b"v%d" % i) for i in range(N)]
        for future in futures:
            await future
        check_producer(producer.metrics(), N)
        check_health(producer.health(), "producer")
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=_group(), auto_offset_reset="earliest"
    )
    async with consumer:
        await _read(consumer, N)
        await consumer.commit()
        check_consumer(consumer.metrics(), N)
        check_health(consumer.health(), "consumer")
    async with AIOKafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        await admin.list_topics()
        check_network(admin.metrics()["admin-client-metrics"])
        check_health(admin.health(), "admin")


def test_blocking_faces(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    with KafkaProducer(bootstrap_servers=bootstrap) as producer:
        futures = [producer.send(topic, b"v%d" % i) for i in range(N)]
        for future in futures:
            future.get(timeout=30)
        check_producer(producer.metrics(), N)
        check_health(producer.health(), "producer")
    with KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=_group(), auto_offset_reset="earliest"
    ) as consumer:
        got = 0
        for _ in range(60):
            got += sum(len(rs) for rs in consumer.poll(timeout_ms=1000).values())
            if got >= N:
                break
        assert got == N
        consumer.commit()
        check_consumer(consumer.metrics(), N)
        check_health(consumer.health(), "consumer")
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.list_topics()
        check_network(admin.metrics()["admin-client-metrics"])
        check_health(admin.health(), "admin")


# ------------------------------------------------------------------- stats_cb


def _check_stats(reports: list[dict[str, Any]], kind: str) -> None:
    assert len(reports) >= 2
    for stats in reports:
        assert json.loads(json.dumps(stats)) == stats
        assert stats["type"] == kind and stats["health"]["kind"] == kind
    assert [s["time"] for s in reports] == sorted(s["time"] for s in reports)


def _raising(stats: dict[str, Any]) -> None:
    raise RuntimeError("a broken stats_cb")


@pytest.mark.anyio
async def test_stats_cb_async(
    bootstrap: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _topic(bootstrap)
    reports: list[dict[str, Any]] = []
    async with open_producer(
        bootstrap, stats_cb=reports.append, statistics_interval_ms=50
    ) as producer:
        with anyio.fail_after(30):
            while len(reports) < 2:
                await producer.send(topic, b"x")
            # two reports can come before the first acknowledgement (the topic is new):
            # flush, then wait for a report made after it
            await producer.flush()
            flushed = len(reports)
            while len(reports) == flushed:
                await anyio.sleep(0.01)
    _check_stats(reports, "producer")
    assert reports[-1]["metrics"]["producer-metrics"]["record-ack-total"] >= 1
    with caplog.at_level(logging.ERROR, logger="kafkastate.stats"):
        async with open_producer(
            bootstrap, stats_cb=_raising, statistics_interval_ms=20
        ) as producer:
            with anyio.fail_after(30):
                while not any("stats_cb raised" in r.message for r in caplog.records):
                    await producer.send(topic, b"y")
            await producer.send(topic, b"after")  # the producer goes on
    consumed: list[dict[str, Any]] = []
    async with open_consumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        stats_cb=consumed.append,
        statistics_interval_ms=50,
    ) as consumer:
        with anyio.fail_after(30):
            while len(consumed) < 2:
                await consumer.getmany(timeout_ms=100)
    _check_stats(consumed, "consumer")


def test_stats_cb_blocking(bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic(bootstrap)
    reports: list[dict[str, Any]] = []
    with KafkaProducer(
        bootstrap_servers=bootstrap, stats_cb=reports.append, statistics_interval_ms=50
    ) as producer:
        for _ in range(600):
            producer.send(topic, b"x").get(timeout=30)
            if len(reports) >= 2:
                break
    _check_stats(reports, "producer")
    consumed: list[dict[str, Any]] = []
    with caplog.at_level(logging.ERROR, logger="kafkastate.stats"):
        with KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            stats_cb=lambda s: (consumed.append(s), _raising(s)),
            statistics_interval_ms=50,
        ) as consumer:
            got = 0
            for _ in range(600):
                got += sum(len(rs) for rs in consumer.poll(timeout_ms=100).values())
                if len(consumed) >= 2 and got:
                    break
        assert got >= 1  # a raising stats_cb does not stop the consumer
    _check_stats(consumed, "consumer")
    assert all(lag >= 0 for lag in consumed[-1]["lag"].values())
    assert any("stats_cb raised" in r.message for r in caplog.records)


# ------------------------------------------------------------------- logging


def test_lifecycle_logs(bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic(bootstrap)
    group = _group()
    with caplog.at_level(logging.DEBUG, logger="kafkastate"):
        with KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True) as producer:
            producer.send(topic, b"x").get(timeout=30)
        with KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest"
        ) as consumer:
            for _ in range(60):
                if consumer.poll(timeout_ms=500):
                    break
    lines = {(r.name, r.levelno, r.getMessage()) for r in caplog.records}

    def logged(name: str, level: int, text: str) -> bool:
        return any(n == name and lv == level and text in m for n, lv, m in lines)

    assert logged("kafkastate.connection", logging.INFO, "connected to node")
    assert logged("kafkastate.connection", logging.DEBUG, "sent PRODUCE v")
    assert logged("kafkastate.producer", logging.INFO, "producer id ")
    assert logged("kafkastate.producer", logging.INFO, "producer closed")
    assert logged("kafkastate.consumer", logging.INFO, f"subscribed to {topic}")
    assert logged("kafkastate.group", logging.INFO, f"group {group}: joined generation")
    assert logged("kafkastate.group", logging.INFO, f"{topic}-0")
    assert logged("kafkastate.group", logging.INFO, f"group {group}: left")
