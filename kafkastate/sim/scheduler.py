"""The simulator's scheduler: virtual time, the event heap and the trace (D1).

One discrete-event loop over a heap of ``(time ms, tiebreak, sequence, kind, args)``.
Virtual time jumps from event to event; an event of kind ``k`` runs the world's ``_on_k``
method, then the world's safety invariants (``_check_safety``). An event due before the
current time fails the run as ``TIME`` (the harness's own check: virtual time never runs
backwards). An event a later decision made pointless -- a timer an earlier deadline
replaced, an application's poll timeout when records woke it first -- is taken off the
schedule (:meth:`Scheduler._cancel`): it never runs, so it costs no safety check and writes
no trace line. Same-time tie-breaks are
:class:`~kafkastate.sim.entropy.Entropy` draws (only in runs with faults), so a run is a
function of the seed (or the tape) and the code: the :attr:`Scheduler.trace` lines and their
hash (:meth:`Scheduler.trace_hash`) are identical on every replay.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Callable
from typing import Any, Protocol

from kafkastate.sim.entropy import Entropy

__all__ = ["InvariantViolation", "Scheduler", "WorldConfig"]


class InvariantViolation(AssertionError):
    """A safety or liveness invariant failed; ``invariant`` is its id (G3, C2...)."""

    def __init__(self, invariant: str, message: str, *, at: int) -> None:
        super().__init__(f"{invariant} at t={at} ms: {message}")
        self.invariant = invariant
        self.at = at


class WorldConfig(Protocol):
    """What the shared layers read of a run's options."""

    @property
    def faults(self) -> tuple[str, ...]: ...

    @property
    def latency_ms(self) -> int: ...


class Scheduler:
    """The event loop of one run: ``_at`` schedules, ``_run_until`` runs."""

    config: WorldConfig

    def __init__(self, entropy: Entropy, config: WorldConfig) -> None:
        self.entropy = entropy
        self.config = config
        self.now = 0
        self.trace: list[str] = []
        self.events = 0
        """How many events ran (the length a shrunk failure reports)."""
        self._heap: list[tuple[int, int, int, str, tuple[Any, ...]]] = []
        self._seq = 0
        self._handlers: dict[str, Callable[..., None]] = {}
        self._cancelled: set[int] = set()  # sequence numbers of events taken off

    def run_for(self, ms: int) -> None:
        """Advance virtual time by ``ms``, checking the safety invariants after each event."""
        self._run_until(self.now + ms)

    def trace_hash(self) -> str:
        """sha256 of the trace: equal for equal (seed, config, code) -- D1."""
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()

    def _run_until(self, until: int) -> None:
        cancelled = self._cancelled
        while self._heap and self._heap[0][0] <= until:
            t, _tb, seq, kind, args = heapq.heappop(self._heap)
            if cancelled and seq in cancelled:
                cancelled.discard(seq)
                continue
            if t < self.now:  # the harness checks itself: virtual time never runs back
                raise InvariantViolation(
                    "TIME", f"a {kind} event due at {t} ms ran after {self.now} ms", at=self.now
                )
            self.now = t
            self.events += 1
            handler = self._handlers.get(kind)
            if handler is None:  # the world's ``_on_<kind>``, looked up once per kind
                handler = self._handlers[kind] = getattr(self, f"_on_{kind}")
            try:
                handler(*args)
            except InvariantViolation:
                raise
            except AssertionError as exc:  # the coordinator model's own transition check
                raise InvariantViolation("G0", str(exc), at=self.now) from exc
            self._check_safety(kind)
        self.now = max(self.now, until)

    def _at(self, t: int, kind: str, args: tuple[Any, ...]) -> int:
        """Schedule an event of ``kind`` at ``t`` (not before now); returns its sequence
        number, which :meth:`_cancel` takes."""
        tiebreak = self.entropy.below(4, "tiebreak") if self.config.faults else 0
        self._seq += 1
        heapq.heappush(self._heap, (max(t, self.now), tiebreak, self._seq, kind, args))
        return self._seq

    def _cancel(self, seq: int) -> None:
        """Take a scheduled event off the schedule: it never runs, is not counted and
        writes no trace line (as if it had not been scheduled; its tie-break was drawn)."""
        self._cancelled.add(seq)

    def _line(self, text: str) -> None:
        self.trace.append(f"{self.now} {text}")

    def _s(self) -> float:
        return self.now / 1000

    def _check_safety(self, kind: str) -> None:
        """The world's safety invariants, after every event (it also appends the event's
        trace line)."""
        raise NotImplementedError


def _ms_at(seconds: float) -> int:
    """The first virtual millisecond at which a machine's deadline ``seconds`` is due."""
    t = math.ceil(seconds * 1000)
    while t / 1000 < seconds:
        t += 1
    return t
