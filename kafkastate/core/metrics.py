"""Counters and windowed statistics: what the machines count, and the one place where
rates, averages and maxima are computed from it.

Theory of operation
-------------------
Each machine owns a counter set (:class:`ClientCounters`, :class:`ProducerCounters`,
:class:`FetchCounters`, :class:`GroupCounters`) and updates it on the events it already
handles -- a batch drained, a response read, a poll handing out records -- with the
``now`` that came with the event. Nothing here reads a clock: a report is computed for the
``now`` its caller hands in (the adapter's loop clock, or the simulator's).

A :class:`Stat` keeps a cumulative total and count plus Java's sampled window: ``samples``
samples of ``window`` seconds each (Java's ``metrics.num.samples`` = 2 and
``metrics.sample.window.ms`` = 30 s). Recording is a handful of float operations: the
machines record per batch, per request and per poll, never per record. Reading follows
Java's ``SampledStat``: samples older than ``samples * window`` are ignored; a rate divides
by the time since the oldest live sample began, but by at least ``samples - 1`` full
windows (Java ``Rate.windowSize``), so a young client does not report inflated rates.
An average or a maximum with no live sample reads 0.0 (Java: NaN), which keeps every
report JSON-able.

The metric names and groups built from these counters are in
:mod:`kafkastate.core.report`.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "DEFAULT_SAMPLES",
    "DEFAULT_WINDOW",
    "ClientCounters",
    "FetchCounters",
    "GroupCounters",
    "ProducerCounters",
    "Stat",
    "throttle_seconds",
]

DEFAULT_SAMPLES: Final = 2
"""Java's ``metrics.num.samples``."""
DEFAULT_WINDOW: Final = 30.0
"""Java's ``metrics.sample.window.ms``, in seconds."""

_NEVER: Final = float("-inf")


class Stat:
    """A recorded quantity: cumulative total and count, and a sampled window for rates,
    averages and maxima.

    Args:
        samples: how many windows are kept (at least 1).
        window: each window's length in seconds (positive).

    Raises:
        ValueError: ``samples`` below 1 or ``window`` not positive.
    """

    __slots__ = (
        "_counts",
        "_current",
        "_maxes",
        "_starts",
        "_sums",
        "count",
        "samples",
        "total",
        "window",
    )

    def __init__(self, samples: int = DEFAULT_SAMPLES, window: float = DEFAULT_WINDOW) -> None:
        if samples < 1 or not window > 0:
            raise ValueError(f"a Stat needs samples >= 1 and window > 0, got {samples}, {window}")
        self.samples = samples
        """How many windows are kept."""
        self.window = window
        """Each window's length, seconds."""
        self.total = 0.0
        """Sum of every recorded value since creation."""
        self.count = 0
        """How many values were recorded since creation."""
        self._starts = [_NEVER] * samples
        self._sums = [0.0] * samples
        self._counts = [0] * samples
        self._maxes = [0.0] * samples
        self._current = 0

    def record(self, value: float, now: float) -> None:
        """Record ``value`` at time ``now`` (the driver's clock, seconds)."""
        self.total += value
        self.count += 1
        i = self._current
        if now >= self._starts[i] + self.window:
            i = (i + 1) % self.samples
            self._current = i
            self._starts[i] = now
            self._sums[i] = value
            self._counts[i] = 1
            self._maxes[i] = value
            return
        self._sums[i] += value
        self._counts[i] += 1
        maxes = self._maxes
        if value > maxes[i]:  # noqa: PLR1730 -- runs for every request sent and answered: no max()
            maxes[i] = value

    def _live(self, now: float) -> list[int]:
        oldest = now - self.samples * self.window
        return [i for i, start in enumerate(self._starts) if start > oldest and self._counts[i]]

    def _elapsed(self, live: list[int], now: float) -> float:
        start = min((self._starts[i] for i in live), default=now)
        elapsed = now - start
        full = int(elapsed // self.window)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window
        return elapsed

    def rate(self, now: float) -> float:
        """Recorded values per second over the window (Java ``Rate``)."""
        live = self._live(now)
        elapsed = self._elapsed(live, now)
        if elapsed <= 0:
            return 0.0
        return sum(self._sums[i] for i in live) / elapsed

    def event_rate(self, now: float) -> float:
        """Recordings per second over the window (Java ``Rate(WindowedCount)``)."""
        live = self._live(now)
        elapsed = self._elapsed(live, now)
        if elapsed <= 0:
            return 0.0
        return sum(self._counts[i] for i in live) / elapsed

    def avg(self, now: float) -> float:
        """Mean of the values recorded in the window; 0.0 if none."""
        live = self._live(now)
        n = sum(self._counts[i] for i in live)
        return sum(self._sums[i] for i in live) / n if n else 0.0

    def max(self, now: float) -> float:
        """Largest value recorded in the window; 0.0 if none."""
        live = self._live(now)
        return max((self._maxes[i] for i in live), default=0.0)


def throttle_seconds(response: Any) -> float:
    """A kio response's ``throttle_time`` in seconds (0.0 when it has none)."""
    throttle = getattr(response, "throttle_time", None)
    if throttle is None:
        return 0.0
    seconds: float = throttle.total_seconds()
    return seconds


class ClientCounters:
    """What a :class:`~kafkastate.core.client.Client` counts: requests (with the time
    from writing each to its response), bytes each way, connections opened and closed."""

    __slots__ = (
        "closed",
        "created",
        "errors",
        "incoming",
        "latency",
        "node_latency",
        "outgoing",
        "samples",
        "sent",
        "window",
    )

    def __init__(self, samples: int = DEFAULT_SAMPLES, window: float = DEFAULT_WINDOW) -> None:
        self.samples = samples
        """Samples per Stat (``metrics.num.samples``)."""
        self.window = window
        """Seconds per sample (``metrics.sample.window.ms``)."""
        self.sent = Stat(samples, window)
        """One recording (value 1) per request written to a connection."""
        self.latency = Stat(samples, window)
        """Seconds from writing a request to reading its response, per response."""
        self.node_latency: dict[int, Stat] = {}
        """:attr:`latency` per node id."""
        self.outgoing = Stat(samples, window)
        """Bytes handed to the adapter to write, per batch of bytes."""
        self.incoming = Stat(samples, window)
        """Bytes read, per read."""
        self.created = Stat(samples, window)
        """One recording per connection that became ready."""
        self.closed = Stat(samples, window)
        """One recording per connection that ended."""
        self.errors = 0
        """Requests that failed without a response (timeouts, lost connections...)."""


class ProducerCounters:
    """What the producer counts: per batch drained, acknowledged, retried or failed."""

    __slots__ = (
        "acked",
        "batch_bytes",
        "buffer_wait",
        "error_codes",
        "errors",
        "last_ack",
        "queue_time",
        "records_per_request",
        "retries",
        "samples",
        "sent",
        "throttle",
        "window",
    )

    def __init__(self, samples: int = DEFAULT_SAMPLES, window: float = DEFAULT_WINDOW) -> None:
        self.samples = samples
        """Samples per Stat (``metrics.num.samples``)."""
        self.window = window
        """Seconds per sample (``metrics.sample.window.ms``)."""
        self.sent = Stat(samples, window)
        """Records per batch written in a Produce request (retries included, as Java)."""
        self.batch_bytes = Stat(samples, window)
        """Encoded bytes per batch written."""
        self.records_per_request = Stat(samples, window)
        """Records per Produce request."""
        self.queue_time = Stat(samples, window)
        """Seconds from a batch's creation to its drain, per batch."""
        self.retries = Stat(samples, window)
        """Records per batch put back for a retry."""
        self.errors = Stat(samples, window)
        """Records per batch that failed for good."""
        self.acked = 0
        """Records acknowledged by the broker."""
        self.last_ack: float | None = None
        """When the broker last acknowledged a batch (driver's clock)."""
        self.throttle = Stat(samples, window)
        """Seconds of throttle time per Produce response."""
        self.buffer_wait = Stat(samples, window)
        """Seconds a send waited for ``buffer.memory``, per send admitted after waiting."""
        self.error_codes: dict[int, int] = {}
        """Partition error code -> how many times a Produce response carried it."""


class FetchCounters:
    """What the fetcher counts: per Fetch response and per poll."""

    __slots__ = ("bytes", "consumed", "fetches", "last_fetch", "samples", "throttle", "window")

    def __init__(self, samples: int = DEFAULT_SAMPLES, window: float = DEFAULT_WINDOW) -> None:
        self.samples = samples
        """Samples per Stat (``metrics.num.samples``)."""
        self.window = window
        """Seconds per sample (``metrics.sample.window.ms``)."""
        self.fetches = Stat(samples, window)
        """Seconds from writing a Fetch request to its response, per response."""
        self.bytes = Stat(samples, window)
        """Record bytes per Fetch response."""
        self.consumed = Stat(samples, window)
        """Records handed to the application, per poll that handed some out."""
        self.throttle = Stat(samples, window)
        """Seconds of throttle time per Fetch response."""
        self.last_fetch: float | None = None
        """When the last Fetch response arrived (driver's clock)."""


class GroupCounters:
    """What the group member's requests and decisions count (coordinator metrics)."""

    __slots__ = (
        "commits",
        "failed_rebalances",
        "heartbeats",
        "joins",
        "last_heartbeat",
        "last_rebalance",
        "rebalances",
        "samples",
        "syncs",
        "window",
    )

    def __init__(self, samples: int = DEFAULT_SAMPLES, window: float = DEFAULT_WINDOW) -> None:
        self.samples = samples
        """Samples per Stat (``metrics.num.samples``)."""
        self.window = window
        """Seconds per sample (``metrics.sample.window.ms``)."""
        self.commits = Stat(samples, window)
        """Seconds from ``commit`` to its answer, per OffsetCommit query."""
        self.joins = Stat(samples, window)
        """JoinGroup response times (seconds)."""
        self.syncs = Stat(samples, window)
        """SyncGroup response times (seconds)."""
        self.heartbeats = Stat(samples, window)
        """Heartbeat response times (seconds)."""
        self.rebalances = Stat(samples, window)
        """One recording per assignment received (a completed rebalance)."""
        self.failed_rebalances = 0
        """Group failures (the member cannot go on)."""
        self.last_heartbeat: float | None = None
        """When the last heartbeat response arrived."""
        self.last_rebalance: float | None = None
        """When the last assignment arrived."""
