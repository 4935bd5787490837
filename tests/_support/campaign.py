"""The fuzz campaign's ledger: what ``docs/fuzz-results/campaign.jsonl`` adds up to.

Every mutation loop (:func:`tests._support.fuzzing.run_mutations`) appends one JSON line
when it ends (finished, failed or interrupted). A line names its loop (``decoder``), the
*definition* of its inputs (a hash of the seed encodings and the input generator) and the
*stream* its inputs were drawn from; a loop's inputs are a pure function of
(decoder, definition, stream, index). So the campaign adds up:

* lines of one stream replay the same inputs from index 0: only the longest counts;
* lines of distinct streams are distinct inputs: they sum;
* only lines of the loop's current definition count (new seeds or a new generator make
  new inputs; the old figures describe inputs the loop no longer draws).

:func:`tally` sums a loop's lines, :func:`plan` decides what a loop's next run draws
(``nox -s fuzz -- --resume``: only the inputs the loop still lacks), :func:`share` is how
a response API's budget splits over its versions. Used by the loop and by
tools/gen_fuzz_table.py, so both count the same way.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

CAMPAIGN_TARGET = 1_000_000
"""Inputs per decoder that ``nox -s fuzz`` aims at (``KAFKASTATE_FUZZ_EXAMPLES``)."""

LEGACY_STREAM = 0
"""The stream of a line that names none: the loop's generator seeded by the decoder's name
alone (what every run did before streams; the default suite's short run still does)."""


def share(total: int, parts: int) -> int:
    """One version's part of a response API's budget (at least 5 inputs)."""
    return max(5, total // parts)


def read(path: Path) -> list[dict[str, Any]]:
    """The report's lines, oldest first (none if the file does not exist)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return parse(text.splitlines())


def parse(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def by_loop(runs: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The lines of each loop, oldest first, loops in order of first appearance."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        out.setdefault(str(run["decoder"]), []).append(run)
    return out


def stream_of(run: Mapping[str, Any]) -> int:
    return int(run.get("stream", LEGACY_STREAM))


def is_crasher(run: Mapping[str, Any]) -> bool:
    return run.get("failure") not in (None, "interrupted")


@dataclasses.dataclass
class Tally:
    """A loop's lines of one definition, summed (one line per stream: its longest)."""

    inputs: int = 0
    runs: int = 0
    cpu_seconds: float = 0.0
    ok: int = 0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)
    distinct: int = 0
    """The most distinct outcomes one run reached (shapes are not recorded, so runs'
    sets cannot be merged)."""
    rss_growth: int = 0
    outcomes_counted: bool = True
    failing: bool = False
    """The loop's latest line failed (a crasher the loop has not passed since)."""
    streams: dict[int, int] = dataclasses.field(default_factory=dict)
    """Inputs counted per stream."""
    dates: set[str] = dataclasses.field(default_factory=set)
    machines: set[str] = dataclasses.field(default_factory=set)

    @property
    def error_total(self) -> int:
        return sum(self.errors.values())


def tally(runs: Sequence[Mapping[str, Any]]) -> Tally:
    """Sum ``runs`` (one loop, one definition, oldest first): distinct streams add up,
    lines of one stream count once (the one with the most inputs)."""
    longest: dict[int, Mapping[str, Any]] = {}
    for run in runs:
        stream = stream_of(run)
        if stream not in longest or int(run["inputs"]) > int(longest[stream]["inputs"]):
            longest[stream] = run
    out = Tally(failing=bool(runs) and is_crasher(runs[-1]))
    for stream, run in longest.items():
        out.streams[stream] = int(run["inputs"])
        out.inputs += int(run["inputs"])
        out.runs += 1
        out.cpu_seconds += float(run.get("cpu_seconds") or 0.0)
        out.ok += int(run["ok"])
        for kind, n in run["errors"].items():
            out.errors[kind] = out.errors.get(kind, 0) + int(n)
        out.distinct = max(out.distinct, int(run["distinct_outcomes"]))
        out.rss_growth = max(out.rss_growth, int(run["rss_growth"]))
        out.outcomes_counted &= bool(run.get("outcomes_counted", True))
        out.dates.add(str(run["date"]))
        out.machines.add(str(run["machine"]))
    return out


def current(runs: Sequence[Mapping[str, Any]], definition: str | None = None) -> list[Any]:
    """The lines of ``definition`` (default: the definition of the loop's latest line)."""
    if not runs:
        return []
    wanted = runs[-1].get("definition") if definition is None else definition
    return [run for run in runs if run.get("definition") == wanted]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run of a loop draws."""

    stream: int
    count: int
    """Inputs to run now (0: the loop already has its target)."""
    target: int
    done: int
    """Inputs of this definition already counted (streams other than ``stream``)."""


def fresh_stream(used: Iterable[int], draw: random.Random) -> int:
    """A stream no recorded run used (random, so two sessions that append to copies of
    the report do not pick the same one)."""
    taken = set(used) | {LEGACY_STREAM}
    while (stream := draw.getrandbits(52)) in taken:
        pass
    return stream


def plan(
    runs: Sequence[Mapping[str, Any]],
    *,
    definition: str,
    target: int,
    resume: bool,
    draw: random.Random,
    stream: int | None = None,
) -> Plan:
    """The next run of a loop whose recorded lines are ``runs``.

    Args:
        runs: the loop's lines in the report, oldest first.
        definition: the loop's definition now; lines of another do not count.
        target: the inputs the loop is asked for.
        resume: run only what the loop lacks to reach ``target``.
        draw: where a fresh stream comes from.
        stream: a stream to replay (``KAFKASTATE_FUZZ_STREAM``): no fresh one is drawn.

    Returns:
        A fresh stream and the whole ``target``; when resuming, the inputs still lacking,
        on the stream of the loop's latest line if that line failed (the rerun replays the
        crasher first, and passes it once the decoder is fixed).
    """
    mine = current(runs, definition)
    counted = tally(mine)
    if stream is None and resume and counted.failing:
        stream = stream_of(mine[-1])
    if stream is None:
        stream = fresh_stream((stream_of(run) for run in runs), draw)
    done = counted.inputs - counted.streams.get(stream, 0)
    count = max(0, target - done) if resume else target
    return Plan(stream=stream, count=count, target=target, done=done)
