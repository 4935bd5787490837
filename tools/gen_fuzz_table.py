"""Write the fuzzing figures of docs/reliability.md from a campaign's report file.

``nox -s fuzz`` (``KAFKASTATE_FUZZ_REPORT=docs/fuzz-results/campaign.jsonl``) appends one
JSON line per mutation loop run (tests/_support/fuzzing.py ``FuzzRun``). This tool sums
each loop's runs of its current definition over their distinct input streams
(tests/_support/campaign.py ``tally``: every run counts the inputs it did, interrupted or
not), sums a response API's versions into one row, lists every decoder of the fuzz suite
(a decoder with no run yet as such), measures what is left to the campaign's target, and
replaces the text between the ``fuzz-table`` markers of docs/reliability.md.

    python tools/gen_fuzz_table.py [--report PATH] [--target N] [--check]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkastate.core.protocol.versions import CLIENT_VERSIONS, api_name  # noqa: E402
from tests._support import campaign  # noqa: E402

REPORT = ROOT / "docs" / "fuzz-results" / "campaign.jsonl"
DOC = ROOT / "docs" / "reliability.md"
START = "<!-- fuzz-table:start (tools/gen_fuzz_table.py) -->"
END = "<!-- fuzz-table:end -->"

GROUPS = (
    ("frame", "Framing, response headers, handshake"),
    ("header", "Framing, response headers, handshake"),
    ("connection", "Framing, response headers, handshake"),
    ("response", "Response bodies (per API key, all versions the client speaks)"),
    ("records-c", "Record batches, control records (C codec)"),
    ("records-python", "Record batches, control records (pure-Python codec)"),
    ("scram", "SASL and OAuth"),
    ("oauth", "SASL and OAuth"),
    ("gssapi", "SASL and OAuth"),
    ("aws", "SASL and OAuth"),
    ("jwt", "SASL and OAuth"),
    ("subscription", "Group protocol"),
    ("assignment", "Group protocol"),
    ("sticky", "Group protocol"),
    ("kip848", "Group protocol"),
    ("admin-parse", "Admin responses, as each operation reads them"),
)

PLAIN_DECODERS = (
    "frame-decoder",
    "header-v0",
    "header-v1",
    "connection-api-versions",
    "scram-first",
    "scram-final",
    "oauth-status",
    "gssapi-offer",
    "aws-msk-iam",
    "oauth-token-endpoint",
    "jwt-claims",
    "subscription",
    "assignment",
    "sticky",
    "kip848-heartbeat-joining",
    "kip848-heartbeat-stable",
)
"""The loops named by a literal ``seed=`` in the fuzz tests (tests/tools checks them)."""


def expected() -> dict[str, list[str]]:
    """Every row of the table and the loops (``decoder`` names) it sums: what the fuzz
    suite runs, whether or not the report has a line of it yet."""
    from tests.core.admin.test_admin_parse_fuzz import OPERATIONS  # noqa: PLC0415
    from tests.core.protocol.test_records_fuzz import CORPUS  # noqa: PLC0415

    rows: dict[str, list[str]] = {name: [name] for name in PLAIN_DECODERS}
    for key, (lo, hi) in sorted(CLIENT_VERSIONS.items()):
        name = f"response-{api_name(key)}"
        rows[name] = [f"{name}-v{version}" for version in range(lo, hi + 1)]
    for implementation in ("c", "python"):
        for corpus_name, _ in CORPUS:
            rows[f"records-{implementation}-{corpus_name}"] = [
                f"records-{implementation}-{corpus_name}"
            ]
    for operation in OPERATIONS:
        rows[f"admin-parse-{operation}"] = [f"admin-parse-{operation}"]
    return rows


def group_of(name: str) -> str:
    return next((label for prefix, label in GROUPS if name.startswith(prefix)), "Other")


@dataclass
class Row:
    """One decoder: its loops' tallies (a response API's versions), against the target."""

    name: str
    loops: list[str]
    target: int
    tallies: dict[str, campaign.Tally] = field(default_factory=dict)
    crashers: int = 0
    superseded: int = 0
    """Inputs of lines of an earlier definition (not counted)."""

    def loop_target(self) -> int:
        return campaign.share(self.target, len(self.loops)) if len(self.loops) > 1 else self.target

    def _sum(self, attribute: str) -> Any:
        return sum(getattr(t, attribute) for t in self.tallies.values())

    @property
    def inputs(self) -> int:
        return int(self._sum("inputs"))

    @property
    def cpu_seconds(self) -> float:
        return float(self._sum("cpu_seconds"))

    @property
    def to_go(self) -> int:
        each = self.loop_target()
        done = {name: t.inputs for name, t in self.tallies.items()}
        return sum(max(0, each - done.get(name, 0)) for name in self.loops)

    @property
    def failing(self) -> bool:
        return any(t.failing for t in self.tallies.values())

    def rate(self) -> float | None:
        return self.inputs / self.cpu_seconds if self.cpu_seconds else None

    def result(self) -> str:
        if self.failing:
            return "**crasher, not yet fixed**"
        if not self.tallies:
            return "not run"
        if self.to_go:
            return "pass so far"
        return "pass"

    def cells(self) -> list[str]:
        t = list(self.tallies.values())
        rate = self.rate()
        split = f"{self._sum('ok'):,} / {sum(x.error_total for x in t):,}"
        distinct = f"{self._sum('distinct'):,}"
        if not all(x.outcomes_counted for x in t):
            split = distinct = "not counted¹"
        dates = sorted(set().union(*(x.dates for x in t)))
        return [
            self.name,
            f"{self.inputs:,}",
            f"{self.to_go:,}",
            str(self._sum("runs")),
            f"{rate:,.0f}" if rate else "—",
            split if t else "—",
            distinct if t else "—",
            f"{max((x.rss_growth for x in t), default=0) / 2**20:.0f} MiB" if t else "—",
            str(self.crashers),
            self.result(),
            " to ".join(dict.fromkeys((dates[0], dates[-1]))) if dates else "—",
        ]


def rows(lines: Iterable[str], target: int = campaign.CAMPAIGN_TARGET) -> dict[str, list[Row]]:
    """Every decoder by group, its loops' lines summed (tests/_support/campaign.py)."""
    loops = campaign.by_loop(campaign.parse(lines))
    table = {name: Row(name, names, target) for name, names in expected().items()}
    for decoder, runs in loops.items():
        name = next((n for n, r in table.items() if decoder in r.loops), decoder)
        row = table.setdefault(name, Row(name, [decoder], target))
        mine = campaign.current(runs)
        counted = {id(run) for run in mine}
        row.tallies[decoder] = campaign.tally(mine)
        row.crashers += sum(campaign.is_crasher(run) for run in runs)
        row.superseded += sum(int(run["inputs"]) for run in runs if id(run) not in counted)
    grouped: dict[str, list[Row]] = {}
    for row in table.values():
        grouped.setdefault(group_of(row.name), []).append(row)
    order = [*dict.fromkeys(label for _, label in GROUPS), "Other"]
    return {g: grouped[g] for g in order if g in grouped}


def cpu_hours_to_go(groups: Mapping[str, list[Row]]) -> float:
    """What the rows still lack, at each row's measured rate (a row not run yet: the
    median rate of its group's, or of all rows)."""
    every = [r for g in groups.values() for r in g if r.rate()]
    overall = statistics.median(r.rate() or 0.0 for r in every) if every else 0.0
    seconds = 0.0
    for group_rows in groups.values():
        rates = [r.rate() or 0.0 for r in group_rows if r.rate()]
        fallback = statistics.median(rates) if rates else overall
        for row in group_rows:
            rate = row.rate() or fallback
            seconds += row.to_go / rate if rate else 0.0
    return seconds / 3600


HEADER = (
    "| Decoder | Inputs | To go | Runs | Inputs per CPU s | Valid / KafkaError"
    " | Distinct outcomes | Peak RSS growth | Crashers | Result | Dates |"
)


def table(lines: Iterable[str], target: int = campaign.CAMPAIGN_TARGET) -> str:
    groups = rows(lines, target)
    every = [r for g in groups.values() for r in g]
    machines = sorted({m for r in every for t in r.tallies.values() for m in t.machines})
    out = [
        f"Measured on: {'; '.join(machines)}. Every run of a loop drew its own stream of"
        " inputs; *Inputs* sums them (tests/_support/campaign.py: the runs of the loop's"
        f" current definition, interrupted ones included), *To go* is what is left to"
        f" {target:,} per decoder (per API key for the responses, shared over its"
        " versions), *Runs* the runs counted (one per stream; a response API's over all its"
        " versions). Inputs per CPU second is the loop's own"
        " CPU time (the machine was shared, so wall time says little). *Distinct"
        " outcomes*: the valid result plus each KafkaError message shape (digits folded)"
        " the inputs reached, the most one run reached, summed over a response API's"
        " versions.",
        "",
    ]
    for group, group_rows in groups.items():
        out += [f"**{group}**", "", HEADER, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for row in sorted(group_rows, key=lambda r: (-r.inputs, r.name)):
            out.append(f"| {' | '.join(row.cells())} |")
        out.append("")
    total = sum(r.inputs for r in every)
    ran = sum(bool(r.tallies) for r in every)
    reached = sum(bool(r.tallies) and not r.to_go and not r.failing for r in every)
    out.append(
        f"Total: {total:,} inputs over {ran} of {len(every)} decoders; {reached} decoders"
        f" reached {target:,}. Left: {sum(r.to_go for r in every):,} inputs, about"
        f" {cpu_hours_to_go(groups):.1f} CPU hours at the measured rates (a decoder not"
        " run yet at its group's median rate)."
    )
    superseded = [r for r in every if r.superseded]
    if superseded:
        listed = ", ".join(f"{r.name} ({r.superseded:,})" for r in superseded)
        out += ["", f"Not counted, run on an earlier definition of the loop: {listed}."]
    if any(not t.outcomes_counted for r in every for t in r.tallies.values()):
        out += [
            "",
            "¹ run before the record-batch loop let the decoder's errors reach the counter"
            " (every input counted as valid): inputs, rate and crashers stand, the outcome"
            " columns do not.",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--target", type=int, default=campaign.CAMPAIGN_TARGET)
    parser.add_argument("--check", action="store_true", help="fail if the doc is stale")
    args = parser.parse_args(argv)
    lines = args.report.read_text(encoding="utf-8").splitlines()
    doc = DOC.read_text(encoding="utf-8")
    head, sep, rest = doc.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        print(f"{DOC}: no {START} ... {END} markers", file=sys.stderr)
        return 1
    new = f"{head}{START}\n{table(lines, args.target)}\n{END}{tail}"
    if args.check:
        return 0 if new == doc else 1
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
