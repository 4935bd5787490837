"""``metrics()`` and ``health()`` of the async adapter's producer, consumer and admin:
the core's reports (:mod:`kafkastate.core.report`) at the event loop's time."""

from __future__ import annotations

from typing import Any

from kafkastate.adapters.anyio.driver import AsyncDriver
from kafkastate.core import report

__all__ = ["Observed"]


class Observed:
    """Mixin: ``machine`` and ``_driver`` are the class's own."""

    _driver: AsyncDriver | None

    def _observed_machine(self) -> Any:
        return self.machine  # type: ignore[attr-defined]  # each class has its own kind

    def _report_time(self) -> float | None:
        """The loop's clock while running; else None (the machine's latest time)."""
        driver = self._driver
        if driver is None:
            return None
        try:
            return driver.now()
        except RuntimeError:  # called from outside the event loop
            return None

    def metrics(self, raw: bool = False) -> report.Report:
        """Counters, rates and latencies, grouped as kafka-python's ``metrics()``
        (``{group: {name: value}}``, Java's names); docs/observability.md lists them.

        Args:
            raw: accepted for kafka-python compatibility; ignored.
        """
        return report.metrics(self._observed_machine(), self._report_time())

    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot for liveness probes (:func:`kafkastate.core.report.health`):
        connected brokers, coordinator, assignment, last successful produce/fetch, error
        state."""
        return report.health(self._observed_machine(), self._report_time())
