"""OpenTelemetry tracing for producers and consumers (the ``otel`` extra:
``pip install kafkastate[otel]``), following the OpenTelemetry messaging semantic
conventions.

Off by default (option ``tracing=False``): the clients then hold no :class:`Tracing` and
pay one ``is None`` test per send and per read. With ``tracing=True`` (the global tracer
provider) or ``tracing=<a TracerProvider>``:

* every ``send`` makes a PRODUCER span ``send <topic>`` and injects its W3C trace context
  (``traceparent``, ``tracestate``) into the record's headers, so that whoever reads the
  record can join the trace. The span starts at the send call, a child of the caller's
  current span, and ends with the record's outcome: when the broker acknowledges it
  (partition and offset set on the span) or when it fails (the error recorded as an
  exception event, status ERROR) -- a send refused at once ends its span at once;
* every record handed to the application makes a CONSUMER span ``process <topic>`` linked
  to the context found in its headers (the producer's span), as the conventions ask for
  a message's creation context.

Attributes: ``messaging.system`` = ``kafka``, ``messaging.operation.name`` /
``messaging.operation.type``, ``messaging.destination.name`` (topic),
``messaging.destination.partition.id``, ``messaging.kafka.offset`` (consumer),
``messaging.consumer.group.name`` (consumer with a group), ``messaging.kafka.message.key``
(when the key is set; text if it decodes as UTF-8), ``messaging.client.id``.

This module is IO-side (it calls the tracing library, which reads clocks); the core knows
nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafkastate._version import __version__
from kafkastate.errors import KafkaConfigurationError

__all__ = ["SendSpan", "Tracing", "client_labels", "tracing_of", "wanted_provider"]

_HEADERS = ("traceparent", "tracestate")


def _key_text(key: bytes | bytearray | memoryview | None) -> str | None:
    if key is None:
        return None
    try:
        return bytes(key).decode()
    except UnicodeDecodeError:
        return bytes(key).hex()


class SendSpan:
    """The PRODUCER span of one record, open until the record's outcome is known.

    The adapter calls :meth:`acknowledged` or :meth:`failed` once the outcome is known;
    either ends the span, and later calls do nothing (a record's outcome can reach the
    adapter by two roads, e.g. a refused send both raises and fails its future).
    """

    __slots__ = ("_span", "_trace")

    def __init__(self, span: Any, trace: Any) -> None:
        self._span: Any = span
        self._trace = trace  # the opentelemetry.trace module

    def acknowledged(self, partition: int, offset: int) -> None:
        """The broker acknowledged the record at ``partition``/``offset`` (-1: acks=0)."""
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attribute("messaging.destination.partition.id", str(partition))
        if offset >= 0:
            span.set_attribute("messaging.kafka.offset", offset)
        span.end()

    def failed(self, error: BaseException) -> None:
        """The record failed (or its send was refused, or given up) with ``error``."""
        span, self._span = self._span, None
        if span is None:
            return
        span.record_exception(error)
        span.set_attribute("error.type", type(error).__qualname__)
        trace = self._trace
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or None))
        span.end()


class Tracing:
    """Spans for one client.

    Args:
        provider: an OpenTelemetry ``TracerProvider``, or None for the global one.
        client_id: the client's ``client_id``.
        group_id: the consumer group, if any.

    Raises:
        KafkaConfigurationError: opentelemetry-api is not installed.
    """

    def __init__(self, provider: Any, *, client_id: str, group_id: str | None = None) -> None:
        try:
            from opentelemetry import context, propagate, trace  # noqa: PLC0415 -- optional
        except ImportError as exc:
            raise KafkaConfigurationError(
                "tracing needs opentelemetry-api: pip install kafkastate[otel]"
            ) from exc
        self._trace = trace
        self._propagate = propagate
        self._context = context
        if provider is None:
            provider = trace.get_tracer_provider()
        self._tracer = provider.get_tracer("kafkastate", __version__)
        self._client_id = client_id
        self._group_id = group_id

    def _attributes(self, operation: str, kind: str, topic: str, partition: int | None) -> Any:
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.name": operation,
            "messaging.operation.type": kind,
            "messaging.destination.name": topic,
            "messaging.client.id": self._client_id,
        }
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        return attributes

    def send(
        self,
        topic: str,
        partition: int | None,
        key: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str, Any]],
    ) -> tuple[list[tuple[str, Any]], SendSpan]:
        """Start the PRODUCER span of one send and inject its context.

        Returns:
            The headers to send -- ``headers`` plus ``traceparent``/``tracestate`` (an
            existing ``traceparent`` header is replaced) -- and the open span, which the
            adapter ends with the record's outcome.
        """
        attributes = self._attributes("send", "send", topic, partition)
        text = _key_text(key)
        if text is not None:
            attributes["messaging.kafka.message.key"] = text
        span = self._tracer.start_span(
            f"send {topic}", kind=self._trace.SpanKind.PRODUCER, attributes=attributes
        )
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier, context=self._trace.set_span_in_context(span))
        out = [(k, v) for k, v in headers if k not in carrier]
        out.extend((k, v.encode()) for k, v in carrier.items())
        return out, SendSpan(span, self._trace)

    def received(self, records: Iterable[Any]) -> None:
        """One CONSUMER span per record handed out, linked to the producer's context."""
        trace = self._trace
        for record in records:
            carrier = {
                k: v.decode("latin-1")
                for k, v in record.headers
                if k in _HEADERS and isinstance(v, bytes | bytearray)
            }
            links = []
            if carrier:
                linked = trace.get_current_span(self._propagate.extract(carrier))
                span_context = linked.get_span_context()
                if span_context.is_valid:
                    links.append(trace.Link(span_context))
            attributes = self._attributes("process", "process", record.topic, record.partition)
            attributes["messaging.kafka.offset"] = record.offset
            if self._group_id is not None:
                attributes["messaging.consumer.group.name"] = self._group_id
            key = record.key
            text = _key_text(key) if key is None or isinstance(key, bytes) else None
            if text is not None:
                attributes["messaging.kafka.message.key"] = text
            span = self._tracer.start_span(
                f"process {record.topic}",
                kind=trace.SpanKind.CONSUMER,
                attributes=attributes,
                links=links,
            )
            span.end()


_OFF: Any = object()


def wanted_provider(options: Mapping[str, Any], name: str) -> Any:
    """What an OpenTelemetry option (``tracing``, ``otel_metrics``) asks for: the provider
    it names, None for the global one (``True``), or ``_OFF``."""
    wanted = options.get(name, False)
    if wanted is False or wanted is None:
        return _OFF
    return None if wanted is True else wanted


def client_labels(options: Mapping[str, Any]) -> dict[str, Any]:
    """``client_id`` and ``group_id`` of resolved options, as the OpenTelemetry helpers
    take them."""
    return {"client_id": str(options.get("client_id") or ""), "group_id": options.get("group_id")}


def tracing_of(options: Mapping[str, Any]) -> Tracing | None:
    """The :class:`Tracing` resolved options ask for (``tracing``), or None when off.

    Raises:
        KafkaConfigurationError: tracing is on and opentelemetry-api is missing.
    """
    provider = wanted_provider(options, "tracing")
    return None if provider is _OFF else Tracing(provider, **client_labels(options))
