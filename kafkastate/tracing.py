"""OpenTelemetry tracing for producers and consumers (the ``otel`` extra:
``pip install kafkastate[otel]``), following the OpenTelemetry messaging semantic
conventions.

Off by default (option ``tracing=False``): the clients then hold no :class:`Tracing` and
pay one ``is None`` test per send and per read. With ``tracing=True`` (the global tracer
provider) or ``tracing=<a TracerProvider>``:

* every ``send`` makes a PRODUCER span ``send <topic>`` and injects its W3C trace context
  (``traceparent``, ``tracestate``) into the record's headers, so that whoever reads the
  record can join the trace. The span marks the send call, a child of the caller's current
  span; the record's delivery is reported by its future;
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

__all__ = ["Tracing", "tracing_of"]

_HEADERS = ("traceparent", "tracestate")


def _key_text(key: bytes | bytearray | memoryview | None) -> str | None:
    if key is None:
        return None
    try:
        return bytes(key).decode()
    except UnicodeDecodeError:
        return bytes(key).hex()


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
    ) -> list[tuple[str, Any]]:
        """The PRODUCER span of one send, with its context injected.

        Returns:
            The headers to send: ``headers`` plus ``traceparent``/``tracestate`` (an
            existing ``traceparent`` header is replaced).
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
        span.end()
        out = [(k, v) for k, v in headers if k not in carrier]
        out.extend((k, v.encode()) for k, v in carrier.items())
        return out

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


def tracing_of(options: Mapping[str, Any]) -> Tracing | None:
    """The :class:`Tracing` resolved options ask for (``tracing``), or None when off.

    Raises:
        KafkaConfigurationError: tracing is on and opentelemetry-api is missing.
    """
    wanted = options.get("tracing", False)
    if wanted is False or wanted is None:
        return None
    return Tracing(
        None if wanted is True else wanted,
        client_id=str(options.get("client_id") or ""),
        group_id=options.get("group_id"),
    )
