"""The clients' metrics through OpenTelemetry metrics, read with the SDK's in-memory
reader after a real produce/consume run (asyncio, trio, blocking)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.anyio import open_admin, open_consumer, open_producer
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.core.report import METRIC_NAMES
from kafkastate.errors import KafkaConfigurationError
from kafkastate.otel_metrics import INSTRUMENTS, instrument_name, metrics_export_of
from kafkastate.sync import KafkaConsumer, KafkaProducer

sdk_metrics = pytest.importorskip(
    "opentelemetry.sdk.metrics", reason="needs opentelemetry-sdk (pip install kafkastate[otel])"
)
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

pytestmark = pytest.mark.integration

N = 25

Point = tuple[str, dict[str, Any], float]


def _topic(bootstrap: str) -> str:
    name = f"otel-metrics-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=2)])
    return name


def _provider() -> tuple[Any, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return sdk_metrics.MeterProvider(metric_readers=[reader]), reader


def points(reader: InMemoryMetricReader) -> list[Point]:
    data = reader.get_metrics_data()
    out: list[Point] = []
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.extend(
                    (metric.name, dict(p.attributes or {}), p.value)
                    for p in metric.data.data_points
                )
    return out


def value(found: list[Point], name: str, **attributes: Any) -> float:
    """The one point of ``name`` whose attributes include ``attributes``."""
    (v,) = [
        v
        for n, attrs, v in found
        if n == name and all(attrs.get(k) == a for k, a in attributes.items())
    ]
    return v


def check_producer(found: list[Point], client_id: str) -> None:
    mine = [(n, a, v) for n, a, v in found if a.get("messaging.client.id") == client_id]
    names = {n for n, _, _ in mine}
    # every producer metric is exported under its KIP-714 name
    for name in METRIC_NAMES["producer-metrics"]:
        assert instrument_name("producer-metrics", name) in names, name
    sent = "messaging.client.sent.messages"
    ok = [v for n, a, v in mine if n == sent and "error.type" not in a]
    assert all(a["messaging.system"] == "kafka" for _, a, _ in mine)
    assert ok == [N]
    assert value(mine, sent, **{"error.type": "_OTHER"}) == 0
    assert value(mine, "org.apache.kafka.producer.record.send.total") >= N
    assert value(mine, "org.apache.kafka.producer.record.ack.total") == N
    assert value(mine, "org.apache.kafka.producer.request.latency.avg") > 0
    assert value(mine, "org.apache.kafka.producer.connection.count") >= 1
    node = "org.apache.kafka.producer.node.response.total"
    # per-node metrics carry the broker (and -1, the bootstrap connection)
    assert any(int(a["node.id"]) >= 0 and v >= 1 for n, a, v in mine if n == node)


def check_consumer(found: list[Point], client_id: str, group: str) -> None:
    mine = [(n, a, v) for n, a, v in found if a.get("messaging.client.id") == client_id]
    names = {n for n, _, _ in mine}
    for g in ("consumer-fetch-manager-metrics", "consumer-coordinator-metrics"):
        for name in METRIC_NAMES[g]:
            assert instrument_name(g, name) in names, name
    consumed = value(mine, "messaging.client.consumed.messages")
    assert consumed == N
    assert all(a["messaging.consumer.group.name"] == group for _, a, _ in mine)
    fetch = "org.apache.kafka.consumer.fetch.manager."
    assert value(mine, fetch + "records.consumed.total") == N
    assert value(mine, fetch + "fetch.total") >= 1
    assert value(mine, fetch + "records.lag.max") == 0
    assert value(mine, fetch + "assigned.partitions") == 2
    assert value(mine, "org.apache.kafka.consumer.coordinator.rebalance.total") >= 1


def _consumer_options(bootstrap: str, provider: Any) -> tuple[str, str, dict[str, Any]]:
    """A client id, a group, and the options of a consumer with both, exporting."""
    cid, group = f"c-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:8]}"
    options = {"bootstrap_servers": bootstrap, "client_id": cid, "group_id": group,
               "auto_offset_reset": "earliest", "otel_metrics": provider}  # fmt: skip
    return cid, group, options


def gone(reader: InMemoryMetricReader, client_id: str) -> bool:
    return all(a.get("messaging.client.id") != client_id for _, a, _ in points(reader))


@pytest.mark.anyio
async def test_metrics_exported_async(bootstrap: str, anyio_backend: str) -> None:
    topic, (provider, reader) = _topic(bootstrap), _provider()
    pid = f"p-{uuid.uuid4().hex[:6]}"
    cid, group, options = _consumer_options(bootstrap, provider)
    async with open_producer(bootstrap, client_id=pid, otel_metrics=provider) as producer:
        for i in range(N):
            await producer.enqueue(topic, b"v%d" % i, b"k%d" % i)
        await producer.flush()
        check_producer(points(reader), pid)
    assert gone(reader, pid)
    async with open_consumer(topic, **options) as consumer:
        seen = 0
        with anyio.fail_after(30):
            while seen < N:
                batches = await consumer.getmany(timeout_ms=1000)
                seen += sum(len(rs) for rs in batches.values())
        check_consumer(points(reader), cid, group)
    assert gone(reader, cid)
    async with open_admin(bootstrap, client_id="a-" + cid, otel_metrics=provider):
        found = points(reader)
    assert value(found, "org.apache.kafka.admin.client.request.total") >= 1


def test_metrics_exported_blocking(bootstrap: str) -> None:
    topic, (provider, reader) = _topic(bootstrap), _provider()
    pid = f"p-{uuid.uuid4().hex[:6]}"
    cid, group, options = _consumer_options(bootstrap, provider)
    with KafkaProducer(bootstrap_servers=bootstrap, client_id=pid, otel_metrics=provider) as p:
        for i in range(N):
            p.send(topic, b"v%d" % i, key=b"k%d" % i)
        p.flush()
        check_producer(points(reader), pid)
    assert gone(reader, pid)
    with KafkaConsumer(topic, consumer_timeout_ms=30_000, **options) as consumer:
        assert len([record for _, record in zip(range(N), consumer, strict=False)]) == N
        check_consumer(points(reader), cid, group)
    assert gone(reader, cid)


def test_off_by_default() -> None:
    assert metrics_export_of({}, dict) is None
    assert metrics_export_of({"otel_metrics": False}, dict) is None


def test_option_is_checked() -> None:
    with pytest.raises(KafkaConfigurationError, match="otel_metrics"):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version=(4, 0), otel_metrics="yes")


def _names() -> Iterator[str]:
    for group, names in METRIC_NAMES.items():
        for name in names:
            yield instrument_name(group, name)


def test_instrument_names_follow_kip_714() -> None:
    assert instrument_name("producer-metrics", "record-send-rate") == (
        "org.apache.kafka.producer.record.send.rate"
    )
    assert instrument_name("consumer-fetch-manager-metrics", "records-lag-max") == (
        "org.apache.kafka.consumer.fetch.manager.records.lag.max"
    )
    assert instrument_name("producer-node-metrics.node-<id>", "request-latency-avg") == (
        "org.apache.kafka.producer.node.request.latency.avg"
    )
    # one instrument per (group, name): no two Java metrics share an OTel name
    assert len(set(_names())) == len(list(_names())) == len(INSTRUMENTS)
