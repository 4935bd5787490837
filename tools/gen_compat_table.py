"""Redraw the brokers x features table of docs/compatibility.md from the compat results.

``nox -s compat`` runs tests/compat against each broker version with
``KAFKASTATE_COMPAT_RESULTS=docs/compat-results``; every run leaves
``docs/compat-results/kafka-<version>.json`` (schema: tests/compat/results.py). This script
puts the table between the ``<!-- compat-table -->`` markers of docs/compatibility.md.

Run: python tools/gen_compat_table.py            (rewrite the page)
     python tools/gen_compat_table.py --check    (exit 1 if the page is stale)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "compat-results"
PAGE = ROOT / "docs" / "compatibility.md"
START, END = "<!-- compat-table -->", "<!-- /compat-table -->"

FOOTNOTES = {
    "consumer-group-heartbeat": "¹",
    "kip848-preview-off": "²",
    "transaction-timeout-recovery": "³",
    "describe-transactions": "⁴",
    "describe-topic-partitions": "⁵",
    "list-transactions-filter": "⁶",
}
"""What a broker lacks (``record_property("broker_lacks", KEY)`` in tests/compat) -> the
footnote of docs/compatibility.md that explains the client's error."""

CELLS = {"ok": "✓", "failed": "✗ failed", "skipped": "not run"}


def _version_key(data: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(part) for part in str(data["kafka_version"]).split("-")[0].split("."))


def load(directory: Path = RESULTS) -> list[dict[str, Any]]:
    """Every results file, oldest broker first."""
    runs = [json.loads(path.read_text()) for path in sorted(directory.glob("kafka-*.json"))]
    return sorted(runs, key=_version_key)


def _cell(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "not in this run"
    if entry["outcome"] == "lacks":
        return f"clear error{FOOTNOTES[entry['lacks']]}"
    return CELLS[entry["outcome"]]


def render(runs: list[dict[str, Any]]) -> str:
    """The table (markdown) and the line saying where and when it was recorded."""
    if not runs:
        return "No results recorded yet: run `nox -s compat`.\n"
    rows: list[str] = []
    for run in runs:
        rows += [entry["row"] for entry in run["rows"] if entry["row"] not in rows]
    head = [f"{run['kafka_version']} ({run['mode']})" for run in runs]
    lines = [
        "| feature | " + " | ".join(head) + " |",
        "| --- |" + " --- |" * len(runs),
    ]
    for row in rows:
        cells = [_cell(next((e for e in run["rows"] if e["row"] == row), None)) for run in runs]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    totals = []
    for run in runs:
        outcomes = list(run["cases"].values())
        passed = sum(outcome in ("ok", "lacks") for outcome in outcomes)
        totals.append(f"{passed}/{len(outcomes)}" + ("" if run["full"] else " (short set)"))
    lines.append("| compat cases passed | " + " | ".join(totals) + " |")
    pythons = sorted({run["python"] for run in runs})
    dates = sorted({run["date"] for run in runs})
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    lines += ["", f"Recorded {span} on {', '.join(pythons)}."]
    return "\n".join(lines) + "\n"


def splice(page: str, table: str) -> str:
    """``page`` with the text between the markers replaced by ``table``."""
    before, start, rest = page.partition(START)
    _, end, after = rest.partition(END)
    if not start or not end:
        raise SystemExit(f"{PAGE}: the {START} ... {END} markers are missing")
    return f"{before}{START}\n{table}{END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    fresh = splice(page, render(load()))
    if args.check:
        if fresh != page:
            print(f"{PAGE} is stale: python tools/gen_compat_table.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
