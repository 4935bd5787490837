"""Shrinking a failing run (../shared/DST.md A3.8, seed sweeps): from its entropy tape to
a smaller tape that still fails with the same invariant.

Theory of operation
-------------------
A run is a function of its tape (every decision is a draw; :class:`TapeEntropy` replays
one and answers 0 past its end), and every draw's zero is the benign choice: no fault,
the shortest delay, first-in-first-out. So a candidate is a copy of the tape with some
draws set to 0 (or halved); it is kept when a run from it fails with the *same invariant
id*, no more faults and -- as many faults -- no more events than the best so far, and
the tape that run consumed becomes the new starting point (a run that fails
earlier consumes fewer draws). In order, within a budget of runs:

1. **fault kinds** -- each fault kind the configuration switched on (the ``fault KIND``
   draws made before the run starts) is switched off, one at a time;
2. **fault ticks** (ddmin) -- the ``fault kind`` draws of the chaos phase's ticks are set
   to 0, a quiet tick, in halves, then quarters..., down to single faults;
3. **zero chunks** (ddmin) -- the non-zero draws are set to 0 in halves, then quarters,
   and so on: faults disappear, delays shrink to the minimum, tie-breaks become FIFO;
4. **halve** -- what is left non-zero is halved, a chunk at a time (shorter stalls and
   holds, smaller picks).

The result reports the fault schedule (fault ticks drawn) and the events run before the
failure, before and after; :func:`shrink` is what ``python -m kafkastate.sim run SEED
--shrink`` and ``sweep --shrink`` call, and they write the shrunk tape as a replay file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from kafkastate.sim.entropy import Entropy, TapeEntropy
from kafkastate.sim.scheduler import InvariantViolation

__all__ = ["Shrunk", "shrink"]

# the draws that pick a fault tick's target, not whether a kind is on
_NOT_KINDS = frozenset({"fault kind", "fault host", "fault node", "fault pipe", "fault conn"})


class _Run(Protocol):
    entropy: Entropy
    events: int
    fault_log: list[tuple[int, str]]

    def run(self) -> None: ...


@attrs.frozen(kw_only=True)
class Shrunk:
    """A shrunk failure."""

    tape: list[int]
    """The shrunk tape (replay it with :class:`TapeEntropy`)."""
    sim: Any
    """The run of the shrunk tape, failed."""
    failure: InvariantViolation
    """Its failure: the same invariant id as the original's."""
    runs: int
    """How many candidate runs the shrinker tried."""
    faults: tuple[int, int]
    """Fault ticks drawn before the failure: originally, shrunk."""
    events: tuple[int, int]
    """Events run up to the failure: originally, shrunk."""
    draws: tuple[int, int]
    """Non-zero draws in the tape: originally, shrunk."""

    def summary(self) -> str:
        """One line: what shrank by how much."""
        kinds = sorted({kind for _t, kind in self.sim.fault_log})
        return (
            f"shrunk {self.failure.invariant} in {self.runs} runs: "
            f"faults {self.faults[0]} -> {self.faults[1]} ({', '.join(kinds) or 'none'}), "
            f"events {self.events[0]} -> {self.events[1]}, "
            f"non-zero draws {self.draws[0]} -> {self.draws[1]}"
        )


def _nonzero(tape: list[int]) -> list[int]:
    return [i for i, v in enumerate(tape) if v]


def shrink(
    make: Callable[[Entropy], _Run],
    tape: list[int],
    invariant: str,
    *,
    max_runs: int = 120,
) -> Shrunk:
    """Shrink a failing tape.

    Args:
        make: builds the run (same workload, planted bug and options) from an entropy.
        tape: the failing run's tape.
        invariant: the id it failed with; every kept candidate fails with it too.
        max_runs: the budget of candidate runs.

    Returns:
        The smallest failing tape found, with its run and the before/after lengths.

    Raises:
        ValueError: ``tape`` does not fail with ``invariant``.
    """
    runs = 0

    def attempt(candidate: list[int]) -> tuple[_Run, InvariantViolation] | None:
        nonlocal runs
        runs += 1
        sim = make(TapeEntropy(candidate))
        try:
            sim.run()
        except InvariantViolation as exc:
            if exc.invariant == invariant:
                return sim, exc
        return None

    first = attempt(tape)
    if first is None:
        raise ValueError(f"the tape does not fail with {invariant}")
    best_sim, best_failure = first
    best = _trimmed(best_sim.entropy.tape)
    original = (len(best_sim.fault_log), best_sim.events, len(_nonzero(best)))

    def keep(candidate: list[int]) -> list[int] | None:
        nonlocal best, best_sim, best_failure
        if runs >= max_runs:
            raise _OutOfRuns
        if _trimmed(candidate) == best:
            return None
        found = attempt(candidate)
        if found is None:
            return None
        sim, failure = found
        faults, events = len(sim.fault_log), sim.events
        fewer = faults < len(best_sim.fault_log)
        if faults > len(best_sim.fault_log) or (not fewer and events > best_sim.events):
            return None  # the schedule, then the event count, never grow
        best_sim, best_failure = sim, failure
        best = _trimmed(best_sim.entropy.tape)
        return best

    labels = list(best_sim.entropy.labels)  # type: ignore[attr-defined]
    try:
        # 1. fault kinds off, one at a time (drawn before the run starts: nothing shifts)
        for i, label in enumerate(labels):
            kind = label.startswith("fault ") and label not in _NOT_KINDS
            if kind and i < len(best) and best[i]:
                keep([0 if j == i else v for j, v in enumerate(best)])
        # 2. ddmin over the fault ticks: each tick's zero draw is a quiet one
        ticks = [i for i, label in enumerate(labels) if label == "fault kind"]
        _chunks(
            best,
            keep,
            lambda tape, chunk: [0 if j in chunk else v for j, v in enumerate(tape)],
            among=lambda tape: [i for i in ticks if i < len(tape) and tape[i]],
        )
        # 3. ddmin: zero chunks of the non-zero draws, halving the chunk size
        _chunks(
            best, keep, lambda tape, chunk: [0 if j in chunk else v for j, v in enumerate(tape)]
        )
        # 4. halve what is left
        _chunks(
            best,
            keep,
            lambda tape, chunk: [v // 2 if j in chunk else v for j, v in enumerate(tape)],
        )
    except _OutOfRuns:
        pass
    return Shrunk(
        tape=best,
        sim=best_sim,
        failure=best_failure,
        runs=runs,
        faults=(original[0], len(best_sim.fault_log)),
        events=(original[1], best_sim.events),
        draws=(original[2], len(_nonzero(best))),
    )


class _OutOfRuns(Exception):
    """The budget of candidate runs is spent."""


def _chunks(
    start: list[int],
    keep: Callable[[list[int]], list[int] | None],
    change: Callable[[list[int], set[int]], list[int]],
    among: Callable[[list[int]], list[int]] = _nonzero,
) -> None:
    """Apply ``change`` to chunks of the draws ``among`` picks (the non-zero ones),
    largest chunks first; a kept candidate's consumed tape (what ``keep`` returns) is the
    one the next chunks are cut from."""
    tape = start
    size = max(len(among(tape)) // 2, 1)
    while True:
        positions = among(tape)
        i = 0
        while i < len(positions):
            kept = keep(change(tape, set(positions[i : i + size])))
            if kept is not None:
                tape = kept
                positions = among(tape)
            else:
                i += size
        if size == 1:
            return
        size //= 2


def _trimmed(tape: list[int]) -> list[int]:
    """Without trailing zeros (a tape answers 0 past its end anyway)."""
    end = len(tape)
    while end and not tape[end - 1]:
        end -= 1
    return list(tape[:end])
