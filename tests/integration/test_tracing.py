"""OpenTelemetry across real Kafka: the producer's span context travels in the record's
headers and the consumer's span links to it (asyncio, trio, blocking)."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.anyio import open_consumer, open_producer
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import KafkaConfigurationError, KafkaError, MessageSizeTooLargeError
from kafkastate.sync import KafkaConsumer, KafkaProducer

sdk_trace = pytest.importorskip(
    "opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (pip install kafkastate[otel])"
)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

pytestmark = pytest.mark.integration


def _topic(bootstrap: str, **configs: str) -> str:
    name = f"tracing-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=1, topic_configs=configs)])
    return name


# A topic whose broker refuses records over 200 bytes: the client's own limit
# (max_request_size) lets them through, so the failure comes back from the broker, after
# send() returned.
_SMALL = {"max.message.bytes": "200"}
_BIG = b"x" * 1000


def _provider() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def check_joined(exporter: InMemorySpanExporter, record: Any, topic: str, group: str) -> None:
    spans = exporter.get_finished_spans()
    (sent,) = [s for s in spans if s.kind is SpanKind.PRODUCER]
    (processed,) = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert sent.name == f"send {topic}"
    assert sent.attributes["messaging.system"] == "kafka"
    assert sent.attributes["messaging.destination.name"] == topic
    assert sent.attributes["messaging.kafka.message.key"] == "k1"
    headers = dict(record.headers)
    assert headers["traceparent"].decode().split("-")[1] == f"{sent.context.trace_id:032x}"
    assert headers["app"] == b"1"  # the application's headers stay
    assert processed.name == f"process {topic}"
    (link,) = processed.links
    assert link.context.trace_id == sent.context.trace_id
    assert link.context.span_id == sent.context.span_id
    attrs = processed.attributes
    assert attrs["messaging.system"] == "kafka"
    assert attrs["messaging.destination.name"] == topic
    assert attrs["messaging.destination.partition.id"] == "0"
    assert attrs["messaging.kafka.offset"] == record.offset
    assert attrs["messaging.consumer.group.name"] == group
    assert attrs["messaging.kafka.message.key"] == "k1"
    assert attrs["messaging.operation.type"] == "process"


@pytest.mark.anyio
async def test_trace_joins_producer_and_consumer_async(bootstrap: str, anyio_backend: str) -> None:
    topic, group = _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    provider, exporter = _provider()
    async with open_producer(bootstrap, tracing=provider) as producer:
        await producer.send(topic, b"v", b"k1", headers=[("app", b"1")])
    async with open_consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        tracing=provider,
    ) as consumer:
        with anyio.fail_after(30):
            record = await consumer.getone()
    check_joined(exporter, record, topic, group)


def test_trace_joins_producer_and_consumer_blocking(bootstrap: str) -> None:
    topic, group = _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    provider, exporter = _provider()
    with KafkaProducer(bootstrap_servers=bootstrap, tracing=provider) as producer:
        producer.send(topic, b"v", key=b"k1", headers=[("app", b"1")]).get(timeout=30)
    with KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        tracing=provider,
        consumer_timeout_ms=30_000,
    ) as consumer:
        record = next(consumer)
    check_joined(exporter, record, topic, group)


def test_tracing_off_adds_nothing(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    with KafkaProducer(bootstrap_servers=bootstrap) as producer:
        producer.send(topic, b"v", headers=[("app", b"1")]).get(timeout=30)
    with KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=30_000
    ) as consumer:
        record = next(consumer)
    assert list(record.headers) == [("app", b"1")]


def test_tracing_option_is_checked() -> None:
    with pytest.raises(KafkaConfigurationError, match="tracing"):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version=(4, 0), tracing="yes")


def check_acknowledged(exporter: InMemorySpanExporter, offset: int) -> None:
    (sent,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert sent.status.status_code is StatusCode.UNSET
    assert sent.attributes["messaging.kafka.offset"] == offset
    assert sent.attributes["messaging.destination.partition.id"] == "0"
    assert not sent.events


def check_failed(exporter: InMemorySpanExporter, error: type[BaseException]) -> None:
    (sent,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert sent.status.status_code is StatusCode.ERROR
    assert sent.attributes["error.type"] == error.__qualname__
    assert "messaging.kafka.offset" not in sent.attributes
    (event,) = sent.events
    assert event.name == "exception"
    assert event.attributes["exception.type"].endswith(error.__name__)


@pytest.mark.anyio
async def test_producer_span_ends_with_the_outcome_async(
    bootstrap: str, anyio_backend: str
) -> None:
    topic = _topic(bootstrap, **_SMALL)
    provider, exporter = _provider()
    async with open_producer(bootstrap, tracing=provider) as producer:
        delivery = await producer.enqueue(topic, b"v")
        # appended, not yet acknowledged: the span is still open
        assert delivery.done() or not exporter.get_finished_spans()
        metadata = await delivery
        check_acknowledged(exporter, metadata.offset)
        exporter.clear()
        delivery = await producer.enqueue(topic, _BIG)
        assert delivery.done() or not exporter.get_finished_spans()
        with pytest.raises(MessageSizeTooLargeError):
            await delivery
        check_failed(exporter, MessageSizeTooLargeError)
        exporter.clear()
        # refused at once (over max_request_size): the span ends at once, with the error
        with pytest.raises(KafkaError) as refused:
            await producer.send(topic, b"y" * 2_000_000)
        check_failed(exporter, type(refused.value))


def test_producer_span_ends_with_the_outcome_blocking(bootstrap: str) -> None:
    topic = _topic(bootstrap, **_SMALL)
    provider, exporter = _provider()
    with KafkaProducer(bootstrap_servers=bootstrap, tracing=provider) as producer:
        metadata = producer.send(topic, b"v").get(timeout=30)
        check_acknowledged(exporter, metadata.offset)
        exporter.clear()
        future = producer.send(topic, _BIG)
        with pytest.raises(MessageSizeTooLargeError):
            future.get(timeout=30)
        check_failed(exporter, MessageSizeTooLargeError)
        exporter.clear()
        with pytest.raises(KafkaError) as refused:
            producer.send(topic, b"y" * 2_000_000).get(timeout=30)
        check_failed(exporter, type(refused.value))
