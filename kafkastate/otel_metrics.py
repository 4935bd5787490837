"""The clients' metrics through the OpenTelemetry metrics API (the ``otel`` extra:
``pip install kafkastate[otel]``).

Off by default (option ``otel_metrics=False``): nothing is registered and nothing runs.
With ``otel_metrics=True`` (the global meter provider) or ``otel_metrics=<a MeterProvider>``
each producer, consumer and admin client registers with its provider's instruments for as
long as it is open; the instruments are observable, so a metric reader's collection reads
the client's ``metrics()`` -- the core's counters (:mod:`kafkastate.core.report`) -- and
nothing is recorded on the hot path.

Names
-----
* The OpenTelemetry messaging semantic conventions where they name one of our counts:
  ``messaging.client.sent.messages`` (records the broker acknowledged; records failed for
  good with ``error.type`` = ``_OTHER``) and ``messaging.client.consumed.messages``
  (records handed to the application). Their duration histograms
  (``messaging.client.operation.duration``, ``messaging.process.duration``) are not
  exported: the core keeps windowed averages and maxima, not histograms.
* Every metric of :data:`kafkastate.core.report.METRIC_NAMES` under the name KIP-714 gives
  the Java client's metrics: ``org.apache.kafka.`` + the group without ``-metrics`` +
  the metric name, dashes turned into dots -- ``producer-metrics`` / ``record-send-rate``
  is ``org.apache.kafka.producer.record.send.rate``,
  ``consumer-fetch-manager-metrics`` / ``records-lag-max`` is
  ``org.apache.kafka.consumer.fetch.manager.records.lag.max``. A per-node group's metrics
  carry the broker as ``node.id``. :data:`INSTRUMENTS` is the mapping.

Every observation carries ``messaging.system`` = ``kafka`` and ``messaging.client.id``,
and a consumer's ``messaging.consumer.group.name`` when it has a group. ``-total`` metrics
are observable counters (cumulative), the others observable gauges.

This module is IO-side (a metric reader collects from its own thread and the SDK reads
clocks); the core knows nothing of it.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from kafkastate._version import __version__
from kafkastate.core.report import METRIC_NAMES, Report
from kafkastate.errors import KafkaConfigurationError
from kafkastate.tracing import _OFF, client_labels, wanted_provider

__all__ = ["INSTRUMENTS", "MetricsExport", "instrument_name", "metrics_export_of"]

log = logging.getLogger("kafkastate.stats")

_NODE_SUFFIX: Final = ".node-<id>"
_PREFIX: Final = "org.apache.kafka."
_FRESH: Final = 0.5
"""Seconds a client's report serves the instruments of one collection."""


def instrument_name(group: str, name: str) -> str:
    """The KIP-714 name of the Java metric ``name`` in ``group`` (``producer-metrics``,
    ``consumer-node-metrics.node-<id>``...)."""
    group = group.removesuffix(_NODE_SUFFIX).removesuffix("-metrics")
    return _PREFIX + f"{group}-{name}".replace("-", ".")


INSTRUMENTS: Final[Mapping[str, tuple[str, str]]] = {
    instrument_name(group, name): (group, name)
    for group, names in METRIC_NAMES.items()
    for name in names
}
"""OpenTelemetry instrument name -> (Java metric group, Java metric name)."""

_SENT: Final = "messaging.client.sent.messages"
_CONSUMED: Final = "messaging.client.consumed.messages"


def _unit(name: str) -> str:
    if name.endswith("-rate") or name.endswith("-rate-per-hour"):
        return "{event}/s" if name.endswith("-rate") else "{event}/h"
    if "latency" in name or ("time" in name and name.endswith(("-avg", "-max"))):
        return "ms"
    if "byte" in name or name.startswith(("batch-size", "fetch-size")):
        return "By"
    return "1"


class _Client:
    """One registered client: where its report comes from, and the last one read."""

    __slots__ = ("__weakref__", "attributes", "read", "report", "taken")

    def __init__(self, read: Callable[[], Report], attributes: dict[str, Any]) -> None:
        self.read = read
        self.attributes = attributes
        self.report: Report = {}
        self.taken = float("-inf")


class _Instruments:
    """The instruments of one meter provider, shared by every client that exports to it
    (an SDK meter keeps the first of two instruments of one name, so each client cannot
    register its own)."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.metrics import Observation  # noqa: PLC0415 -- optional

        self._observation = Observation
        self._clients: weakref.WeakSet[_Client] = weakref.WeakSet()
        self._lock = threading.Lock()
        meter = provider.get_meter("kafkastate", __version__)
        meter.create_observable_counter(
            _SENT,
            callbacks=[self._sent],
            unit="{message}",
            description="Records the broker acknowledged, or that failed for good.",
        )
        meter.create_observable_counter(
            _CONSUMED,
            callbacks=[self._consumed],
            unit="{message}",
            description="Records handed to the application.",
        )
        for otel_name, (group, name) in INSTRUMENTS.items():
            make = (
                meter.create_observable_counter
                if name.endswith("-total")
                else meter.create_observable_gauge
            )
            make(
                otel_name,
                callbacks=[self._callback(group, name)],
                unit=_unit(name),
                description=METRIC_NAMES[group][name],
            )

    def add(self, client: _Client) -> None:
        with self._lock:
            self._clients.add(client)

    def discard(self, client: _Client) -> None:
        with self._lock:
            self._clients.discard(client)

    def _reports(self) -> Iterator[tuple[_Client, Report]]:
        """Each client's report, read once per collection (at most every ``_FRESH`` s)."""
        with self._lock:
            clients = list(self._clients)
        now = time.monotonic()
        for client in clients:
            if now - client.taken > _FRESH:
                try:
                    client.report = client.read()
                except Exception:  # a client closing or read mid-update: next time
                    log.debug("metrics of %s not read", client.attributes, exc_info=True)
                    continue
                client.taken = now
            yield client, client.report

    def _sent(self, options: Any) -> Iterator[Any]:
        del options
        for client, report in self._reports():
            group = report.get("producer-metrics")
            if group is not None:
                attributes = {**client.attributes, "messaging.operation.name": "send"}
                yield self._observation(group["record-ack-total"], attributes)
                failed = {**attributes, "error.type": "_OTHER"}
                yield self._observation(group["record-error-total"], failed)

    def _consumed(self, options: Any) -> Iterator[Any]:
        del options
        for client, report in self._reports():
            group = report.get("consumer-fetch-manager-metrics")
            if group is not None:
                attributes = {**client.attributes, "messaging.operation.name": "poll"}
                yield self._observation(group["records-consumed-total"], attributes)

    def _callback(self, group: str, name: str) -> Callable[[Any], Iterator[Any]]:
        observation = self._observation
        if not group.endswith(_NODE_SUFFIX):

            def observe(options: Any) -> Iterator[Any]:
                del options
                for client, report in self._reports():
                    values = report.get(group)
                    if values is not None and name in values:
                        yield observation(values[name], client.attributes)

            return observe
        prefix = group.removesuffix("<id>")

        def observe_nodes(options: Any) -> Iterator[Any]:
            del options
            for client, report in self._reports():
                for key, values in report.items():
                    if key.startswith(prefix) and name in values:
                        node = key.removeprefix(prefix)
                        yield observation(values[name], {**client.attributes, "node.id": node})

        return observe_nodes


# one set of instruments per meter provider, for as long as the provider lives
_BY_PROVIDER: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()
_BY_PROVIDER_LOCK: Final = threading.Lock()


class MetricsExport:
    """One client's registration with a meter provider's instruments.

    Args:
        provider: an OpenTelemetry ``MeterProvider``, or None for the global one.
        read: the client's ``metrics()`` (safe to call from the reader's thread).
        client_id: the client's ``client_id``.
        group_id: the consumer group, if any.

    Raises:
        KafkaConfigurationError: opentelemetry-api is not installed.
    """

    def __init__(
        self,
        provider: Any,
        read: Callable[[], Report],
        *,
        client_id: str,
        group_id: str | None = None,
    ) -> None:
        try:
            from opentelemetry import metrics  # noqa: PLC0415 -- optional dependency
        except ImportError as exc:
            raise KafkaConfigurationError(
                "otel_metrics needs opentelemetry-api: pip install kafkastate[otel]"
            ) from exc
        if provider is None:
            provider = metrics.get_meter_provider()
        with _BY_PROVIDER_LOCK:
            instruments = _BY_PROVIDER.get(provider)
            if instruments is None:
                instruments = _BY_PROVIDER[provider] = _Instruments(provider)
        attributes: dict[str, Any] = {"messaging.system": "kafka", "messaging.client.id": client_id}
        if group_id is not None:
            attributes["messaging.consumer.group.name"] = group_id
        self._client = _Client(read, attributes)
        self._instruments = instruments
        instruments.add(self._client)

    def close(self) -> None:
        """Stop exporting this client (idempotent)."""
        self._instruments.discard(self._client)


def metrics_export_of(
    options: Mapping[str, Any], read: Callable[[], Report]
) -> MetricsExport | None:
    """The :class:`MetricsExport` resolved options ask for (``otel_metrics``), reading
    ``read``, or None when off.

    Raises:
        KafkaConfigurationError: export is on and opentelemetry-api is missing.
    """
    provider = wanted_provider(options, "otel_metrics")
    if provider is _OFF:
        return None
    return MetricsExport(provider, read, **client_labels(options))
