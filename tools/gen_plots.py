"""Draw docs/plots/*.svg from the benchmark results stored in docs/benchmarks.md and in
bench/results/latest.json (``./ks bench``'s last recorded run: the perf-*.svg charts).

The benchmarks (bench/) print their results as markdown tables, and docs/benchmarks.md keeps
the tables of the runs it reports: those tables are the stored results. This reads them
back and draws one chart per table, so a chart never disagrees with its table.

Run: python tools/gen_plots.py            (writes docs/plots/)
     python tools/gen_plots.py --check    (exit 1 when a chart is stale)
(``./ks plots``; tests/test_docsite.py fails when the charts and the tables disagree.)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: tools/ is on the path, not the root
    sys.path.insert(0, str(ROOT))

from tools.svg_diagrams import bar_chart_svg  # noqa: E402

RESULTS = ROOT / "docs" / "benchmarks.md"
PERF_RESULTS = ROOT / "bench" / "results" / "latest.json"
OUT = ROOT / "docs" / "plots"
PERF_CLIENTS = {
    # client -> (label, colour), in the charts' order; the Java perf tools last
    "ks-asyncio": ("kafkastate asyncio", "#1f6feb"),
    "ks-asyncio-nowait": ("kafkastate asyncio send_nowait", "#8250df"),
    "ks-getone": ("kafkastate asyncio getone", "#58a6ff"),
    "ks-iter": ("kafkastate asyncio async for", "#0a3069"),
    "ks-committed": ("kafkastate asyncio read_committed", "#bf8700"),
    "aiokafka": ("aiokafka", "#d97706"),
    "confluent": ("confluent-kafka", "#16a34a"),
    "java": ("Kafka Java perf tool", "#6b7280"),
    # the Spark comparison (bench/bench_spark.py)
    "ks-spark": ('Spark format("kafkastate")', "#1f6feb"),
    "jvm-spark": ('Spark format("kafka"), JVM connector', "#6b7280"),
    "ks-sync": ("kafkastate.sync consumer, one process", "#0a3069"),
}


class MissingTable(LookupError):
    """docs/benchmarks.md has no table with the header a chart reads."""


def table(text: str, header_start: str, *, after: str = "") -> list[list[str]]:
    """The rows (cells stripped, header and rule dropped) of the first markdown table whose
    header row starts with ``| header_start`` and that comes after the line ``after``."""
    lines = text.splitlines()
    start = lines.index(after) if after else 0
    for i in range(start, len(lines)):
        if lines[i].startswith(f"| {header_start}"):
            rows = []
            for line in lines[i + 2 :]:
                if not line.startswith("|"):
                    break
                rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            return [lines[i].strip().strip("|").split("|"), *rows]
    raise MissingTable(f"no table starting {header_start!r} after {after!r} in {RESULTS}")


def number(cell: str) -> float | None:
    cell = cell.replace(",", "").replace("†", "").replace("‼", "").strip()
    try:
        return float(cell)
    except ValueError:
        return None


def by_client(rows: list[list[str]], keep: Callable[[str], bool]) -> tuple[list[str], list]:
    """A summary table (first column the cell, one column per client) as chart groups and
    series."""
    header = [h.strip() for h in rows[0]]
    body = [row for row in rows[1:] if keep(row[0])]
    groups = [row[0] for row in body]
    series = [(client, [number(row[c]) for row in body]) for c, client in enumerate(header) if c]
    return groups, series


def charts(text: str) -> dict[str, str]:
    """File name -> SVG text, one per stored table."""
    out = {}
    producer = table(text, "cell | kafkastate asyncio", after="## Producer, end to end")
    groups, series = by_client(producer, lambda cell: cell.startswith("100B"))
    out["producer-throughput.svg"] = bar_chart_svg(
        "Producer throughput, 100 B values",
        groups,
        series,
        unit="records/s, higher is better",
        footer="docs/benchmarks.md, Producer end to end: the summary table",
    )
    consumer = table(text, "cell | kafkastate asyncio", after="## Consumer, end to end")
    groups, series = by_client(consumer, lambda cell: True)
    out["consumer-throughput.svg"] = bar_chart_svg(
        "Consumer throughput",
        groups,
        series,
        unit="records/s, higher is better",
        footer="docs/benchmarks.md, Consumer end to end: the summary table",
    )
    codec = table(text, "value | codec | op")
    header = [h.strip() for h in codec[0]]
    columns = [header.index("ratio C/aio"), header.index("ratio Python/aio")]
    out["codec-ratio.svg"] = bar_chart_svg(
        "Record batch codec vs aiokafka",
        [f"{r[0]} {r[1]} {r[2]}" for r in codec[1:]],
        [
            ("C accelerator / aiokafka", [number(r[columns[0]]) for r in codec[1:]]),
            ("pure Python / aiokafka", [number(r[columns[1]]) for r in codec[1:]]),
        ],
        unit="ratio of records/s, above 1 is faster",
        footer="docs/benchmarks.md, Record batches, core only",
    )
    latency = table(text, "client | records | rec/s", after="## Producer, end to end")
    header = [h.strip() for h in latency[0]]
    p50, p99 = header.index("p50 ms"), header.index("p99 ms")
    out["producer-latency.svg"] = bar_chart_svg(
        "Producer latency, 100 B, 1 partition, acks=1",
        [r[0] for r in latency[1:]],
        [
            ("p50", [number(r[p50]) for r in latency[1:]]),
            ("p99", [number(r[p99]) for r in latency[1:]]),
        ],
        unit="ms, lower is better",
        footer="docs/benchmarks.md, Producer end to end: the headline cell",
    )
    return out


def perf_charts(results: dict[str, Any]) -> dict[str, str]:
    """``perf-producer.svg``, ``perf-consumer.svg`` and ``perf-spark.svg`` (when Spark ran):
    records/s per cell and client of a ``bench/bench_all.py`` run (its ``latest.json``)."""
    out = {}
    for kind in ("producer", "consumer", "spark"):
        rows = [r for r in results["rows"] if r["kind"] == kind]
        cells = list(dict.fromkeys(r["cell"] for r in rows))
        if not cells:
            continue
        present = {r["client"] for r in rows}
        clients = [c for c in PERF_CLIENTS if c in present]
        rate = {(r["cell"], r["client"]): r["rate"] for r in rows}
        out[f"perf-{kind}.svg"] = bar_chart_svg(
            f"{kind.capitalize()} throughput",
            cells,
            [(PERF_CLIENTS[c][0], [rate.get((cell, c)) for cell in cells]) for c in clients],
            unit="records/s, higher is better",
            footer=f"./ks bench, {results['date']}, one local broker; docs/performance.md",
            colours=[PERF_CLIENTS[c][1] for c in clients],
            bar_labels=True,
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    drawn = charts(RESULTS.read_text())
    if PERF_RESULTS.exists():
        drawn.update(perf_charts(json.loads(PERF_RESULTS.read_text())))
    for name, svg in drawn.items():
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_text() != svg:
                stale.append(name)
            continue
        OUT.mkdir(exist_ok=True)
        path.write_text(svg)
        print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"stale: {', '.join(stale)} (python tools/gen_plots.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
