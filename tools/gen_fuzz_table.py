"""Write the fuzzing figures of docs/reliability.md from a campaign's report file.

``nox -s fuzz`` (``KAFKASTATE_FUZZ_REPORT=docs/fuzz-results/campaign.jsonl``) appends one
JSON line per mutation loop (tests/_support/fuzzing.py ``FuzzRun``); this tool keeps the
latest line of each loop, sums a response API's versions into one row, and replaces the
text between the ``fuzz-table`` markers of docs/reliability.md.

    python tools/gen_fuzz_table.py [--report PATH] [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkastate.core.protocol.versions import CLIENT_VERSIONS, api_name  # noqa: E402

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


@dataclass
class Row:
    """One decoder: the sum of its loops (a response API's versions)."""

    name: str
    inputs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    ok: int = 0
    errors: int = 0
    distinct: int = 0
    rss_growth: int = 0
    crashers: int = 0
    interrupted: bool = False
    failing: bool = False
    outcomes_counted: bool = True
    versions: int = 0
    dates: set[str] = field(default_factory=set)
    machines: set[str] = field(default_factory=set)

    def add(self, run: dict[str, Any]) -> None:
        self.inputs += int(run["inputs"])
        self.seconds += float(run["seconds"])
        self.cpu_seconds += float(run.get("cpu_seconds") or 0.0)
        self.ok += int(run["ok"])
        self.errors += sum(run["errors"].values())
        self.distinct += int(run["distinct_outcomes"])
        self.rss_growth = max(self.rss_growth, int(run["rss_growth"]))
        self.interrupted |= run.get("failure") == "interrupted"
        self.outcomes_counted &= run.get("outcomes_counted", True)
        self.versions += 1
        self.dates.add(str(run["date"]))

    def result(self) -> str:
        if self.failing:
            return "**crasher, not yet fixed**"
        missing = _versions_of(self.name) - self.versions
        if self.interrupted or missing > 0:
            left = f": {missing} of its versions not run" if missing > 0 else ""
            return f"stopped at the deadline{left}, pass so far"
        return "pass"


def _versions_of(name: str) -> int:
    """How many versions of a response API the client speaks (0: not a response row)."""
    if not name.startswith("response-"):
        return 0
    for key, (lo, hi) in CLIENT_VERSIONS.items():
        if api_name(key) == name.removeprefix("response-"):
            return hi - lo + 1
    return 0


def _key(decoder: str) -> str:
    return re.sub(r"^response-(.+)-v\d+$", r"response-\1", decoder)


def _is_crasher(run: dict[str, Any]) -> bool:
    return run.get("failure") not in (None, "interrupted")


def rows(lines: Iterable[str]) -> dict[str, list[Row]]:
    """The decoders by group: the latest run of each loop (a rerun after a fix replaces
    the failed one), every failed run counted as a crasher."""
    runs: dict[str, dict[str, Any]] = {}
    crashers: dict[str, int] = {}
    for line in lines:
        if line.strip():
            run = json.loads(line)
            runs[run["decoder"]] = run
            if _is_crasher(run):
                crashers[_key(run["decoder"])] = crashers.get(_key(run["decoder"]), 0) + 1
    grouped: dict[str, dict[str, Row]] = {}
    for name, run in runs.items():
        label = next((g for prefix, g in GROUPS if name.startswith(prefix)), "Other")
        row = grouped.setdefault(label, {}).setdefault(_key(name), Row(_key(name)))
        row.crashers = crashers.get(row.name, 0)
        row.failing |= _is_crasher(run)
        row.machines.add(str(run["machine"]))
        row.add(run)
    order = [*dict.fromkeys(g for _, g in GROUPS), "Other"]
    return {g: list(grouped[g].values()) for g in order if g in grouped}


def table(lines: Iterable[str]) -> str:
    groups = rows(lines)
    machines = sorted({m for g in groups.values() for r in g for m in r.machines})
    out = [
        f"Measured on: {'; '.join(machines)}. Inputs per CPU second is the loop's own CPU"
        " time (the machine was shared, so wall time says little). *Distinct outcomes*: the"
        " valid result plus each KafkaError message shape (digits folded) the inputs"
        " reached, summed over a response API's versions.",
        "",
    ]
    total = loops = 0
    for group, group_rows in groups.items():
        out += [
            f"**{group}**",
            "",
            "| Decoder | Inputs | Inputs per CPU s | Valid / KafkaError | Distinct outcomes"
            " | Peak RSS growth | Crashers | Result | Date |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for row in sorted(group_rows, key=lambda r: -r.inputs):
            total += row.inputs
            loops += 1
            rate = f"{row.inputs / row.cpu_seconds:,.0f}" if row.cpu_seconds else "—"
            split, distinct = f"{row.ok:,} / {row.errors:,}", f"{row.distinct:,}"
            if not row.outcomes_counted:
                split = distinct = "not counted¹"
            out.append(
                f"| {row.name} | {row.inputs:,} | {rate} | {split} | {distinct}"
                f" | {row.rss_growth / 2**20:.0f} MiB | {row.crashers} | {row.result()}"
                f" | {', '.join(sorted(row.dates))} |"
            )
        out.append("")
    out.append(f"Total: {total:,} inputs over {loops} decoders.")
    if any(not r.outcomes_counted for g in groups.values() for r in g):
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
    parser.add_argument("--check", action="store_true", help="fail if the doc is stale")
    args = parser.parse_args(argv)
    lines = args.report.read_text(encoding="utf-8").splitlines()
    doc = DOC.read_text(encoding="utf-8")
    head, sep, rest = doc.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        print(f"{DOC}: no {START} ... {END} markers", file=sys.stderr)
        return 1
    new = f"{head}{START}\n{table(lines)}\n{END}{tail}"
    if args.check:
        return 0 if new == doc else 1
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
