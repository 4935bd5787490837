"""Every comparison of docs/performance.md in one run, on one broker: ``./ks bench``.

Against one broker (started here with ``kafkastate.testing.KafkaCluster``, benchmark JIT
settings, or ``--bootstrap``):

1. produce (``bench_producer.py``): kafkastate's awaited ``await send()`` loop and its
   fire-and-forget ``send_nowait()``, aiokafka and confluent-kafka; 100 B, 1 KiB and 10 KiB
   values, unkeyed on 1 partition and keyed on 8, acks=1, ``linger.ms=5``, no compression;
   then the codec cells (below);
2. consume (``bench_consumer.py``): kafkastate's ``getmany``, ``getone``, ``async for`` and
   ``getmany`` with ``read_committed``, aiokafka's ``getmany`` and confluent-kafka's
   ``consume(500)``; 100 B and 1 KiB values, 1 partition; then the codec cells;
3. the ceiling: Kafka's own ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``
   (``org.apache.kafka.tools.ProducerPerformance`` / ``ConsumerPerformance``, the
   ``kafka-tools`` jar fetched with Maven next to the harness's jars) with the same settings
   (``--producer-props compression.type=...`` in the codec cells, whose values come from a
   ``--payload-file`` of the Python clients' values: the tool's own ``--record-size``
   payload is random letters, which compress less than 2x);
4. Spark (``bench_spark.py``): the ``kafkastate`` data source against Spark's JVM Kafka
   connector, batch read and write, 1, 4 and 16 partitions (``--quick``: 4), same session;
   ``--no-spark`` leaves it out, and so does a missing pyspark or connector (said why);
5. memory: every client's peak RSS in the produce and consume runs above, against the
   goals ``buffer_memory`` + 30 MB (producers) and ``fetch_max_bytes`` x brokers + 30 MB
   (consumers), kafkastate's defaults;
6. the cost curves (``bench_curves.py``; part of the full run, about 10-15 minutes; off in
   ``--quick`` unless ``--curves``, off with ``--no-curves``): throughput, produce latency
   and CPU per million records against record size, partitions (1 to 1,000), linger and
   clients per process, kafkastate next to aiokafka and confluent-kafka.

The codec cells (issue 23: "1 KB and 10 KB records, keyed and unkeyed, each codec"): a
codec cell costs about as much as an uncompressed one (four Python clients and the Java
tool), so not the whole size x keys x codec cube. Produce: 1 KiB values on 1 partition,
unkeyed, with each of gzip, snappy, lz4 and zstd (a 16 KiB batch holds ~16 records, so
each client's codec and its per-batch work both show), plus 10 KiB keyed on 8 partitions
with zstd (about one record per batch: the per-batch cost of compressing, next to keyed
partitioning); 100,000 and 20,000 records per client (``CODEC_RECORDS``: a codec costs
1.5-4x the time per record). Consume: 1 KiB on 1 partition with lz4 and zstd, the codecs
producers pick for speed; the topic is filled once per cell by confluent-kafka with the
codec, as the uncompressed one is, so it costs no more to prepare. These seven cells took
568 s of a ``--repeat 1`` run under a load average of 8-9 on 2 shared cores (335 s of it
timed sends), less on a quiet machine. Each codec cell checks that the batches were
compressed (the topic's log, from DescribeLogDirs, holds at most 0.8x the value bytes;
uncompressed it holds more than the values): a worker whose client ignored
``compression_type`` is flagged in its table, the Java tool's figure is left out (said
why). ``--only '*-gzip,*-snappy,*-lz4,*-zstd'`` runs just them.

Clients run in fresh subprocesses, the order rotated run by run (``--repeat``; the best run
counts), so their ratios come from the same minutes of the same machine. Written to
``--out`` (``bench/results``): ``latest.json`` (every row, with date, machine and versions),
``latest.csv``, ``latest.md`` (the tables of docs/performance.md: records/s and the ratios to
aiokafka, confluent-kafka and the Java tools), and the charts ``docs/plots/perf-*.svg``.

    python bench/bench_all.py --quick        # a few minutes: fewer records, one run each
    python bench/bench_all.py --repeat 3     # the figures of docs/performance.md
    python bench/bench_all.py --quick --only 'produce/100B-*' --out /tmp/bench  # a subset
    python bench/bench_all.py --only '*-gzip,*-snappy,*-lz4,*-zstd' --no-spark --no-curves \\
        --out /tmp/bench --plots /tmp/bench/plots   # the codec cells only
"""

# ruff: noqa: PLC0415 -- the harness is imported only when a broker is started here

from __future__ import annotations

import argparse
import csv
import datetime
import fnmatch
import json
import math
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

HERE = pathlib.Path(__file__).resolve()
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT))

from bench_producer import (  # noqa: E402
    BATCH_SIZE,
    CLIENTS,
    LINGER_MS,
    POOL,
    Broker,
    cell_records,
    compression_problem,
    make_values,
    versions,
)

from tools.gen_plots import perf_charts  # noqa: E402

PRODUCE_CLIENTS = ("ks-asyncio", "ks-asyncio-nowait", "aiokafka", "confluent")
PRODUCE_CELLS = (
    "100B-p1-acks1-none",
    "1KiB-p1-acks1-none",
    "10KiB-p1-acks1-none",
    "100B-p8-acks1-keyed-none",
    "1KiB-p8-acks1-keyed-none",
    "10KiB-p8-acks1-keyed-none",
    # the codec cells (the module docstring says why these)
    "1KiB-p1-acks1-gzip",
    "1KiB-p1-acks1-snappy",
    "1KiB-p1-acks1-lz4",
    "1KiB-p1-acks1-zstd",
    "10KiB-p8-acks1-keyed-zstd",
)
CONSUME_CLIENTS = ("ks-asyncio", "ks-getone", "ks-iter", "ks-committed", "aiokafka", "confluent")
CONSUME_CELLS = ("100B-p1-none", "1KiB-p1-none", "1KiB-p1-lz4", "1KiB-p1-zstd")
JAVA = "java"  # the client name of Kafka's perf tools in the results
LABELS = {**CLIENTS, JAVA: "Kafka Java perf tool"}
CONSUMER_RECORDS = {100: (1_000_000, 100_000), 1024: (200_000, 20_000)}


# ---------------------------------------------------------------------------------------------
# the Java perf tools


def java_classpath(kafka_version: str) -> str | None:
    """The broker's jars plus ``kafka-tools`` (fetched once with Maven into the harness's
    cache root); None, with the reason on stderr, where Java or Maven is missing."""
    from kafkastate.testing._maven import cache_root, fetch_kafka_libs

    java, mvn = shutil.which("java"), shutil.which("mvn")
    if java is None:
        print("no java on PATH: the Java perf tools are left out", file=sys.stderr)
        return None
    libs = fetch_kafka_libs(kafka_version)
    tools = cache_root() / f"perf-tools-{kafka_version}"
    jar = tools / f"kafka-tools-{kafka_version}.jar"
    if not jar.exists():
        if mvn is None:
            print("no mvn on PATH to fetch kafka-tools: Java tools left out", file=sys.stderr)
            return None
        tools.mkdir(parents=True, exist_ok=True)
        artifact = f"org.apache.kafka:kafka-tools:{kafka_version}"
        subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "dependency:copy",
                f"-Dartifact={artifact}",
                f"-DoutputDirectory={tools}",
            ],
            check=True,
            timeout=900,
            stdout=subprocess.DEVNULL,
        )
    return f"{libs}/*{os.pathsep}{jar}"


def _java(classpath: str, main: str, args: list[str], timeout: float) -> str:
    argv = ["java", "-Xmx512m", "-cp", classpath, main, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} exit {proc.returncode}: {proc.stderr[-800:]}")
    return proc.stdout


def _perf_produce(
    broker: Broker, classpath: str, topic: str, size: int, records: int, *, compression: str
) -> str:
    """kafka-producer-perf-test: ``records`` values of ``size`` bytes to ``topic`` with the
    Python clients' settings and ``compression``; its output. With a codec the values are
    the Python clients' (a ``--payload-file``, one per line: JSON-like, compressible 2-4x),
    not the tool's random letters; then the log must show the batches compressed."""
    props = [f"bootstrap.servers={broker.bootstrap}", "acks=1", f"linger.ms={LINGER_MS}"]
    props += [f"batch.size={BATCH_SIZE}", f"compression.type={compression}"]
    args = ["--topic", topic, "--num-records", str(records), "--throughput", "-1"]
    main = "org.apache.kafka.tools.ProducerPerformance"
    if compression == "none":
        args += ["--record-size", str(size), "--producer-props", *props]
        return _java(classpath, main, args, timeout=600)
    with tempfile.TemporaryDirectory(prefix="bench-java-") as tmp:
        payloads = pathlib.Path(tmp) / "values.txt"
        payloads.write_bytes(b"\n".join(make_values(POOL, size)))
        args += ["--payload-file", str(payloads), "--producer-props", *props]
        out = _java(classpath, main, args, timeout=600)
    problem = compression_problem(broker, topic, 1, compression, records * size)
    if problem is not None:
        raise RuntimeError(f"kafka-producer-perf-test: {problem}")
    return out


def java_produce(
    broker: Broker, classpath: str, size: int, records: int, compression: str = "none"
) -> float:
    """kafka-producer-perf-test: records/s (its own figure, first send to the last ack).
    Keyed cells get the unkeyed figure (see docs/performance.md)."""
    topic = f"bench-java-{size}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    try:
        out = _perf_produce(broker, classpath, topic, size, records, compression=compression)
        final = [line for line in out.splitlines() if "records sent" in line][-1]
        found = re.search(r"([\d.]+) records/sec", final)
        if found is None:
            raise RuntimeError(f"no records/sec in {final!r}")
        return float(found.group(1))
    finally:
        broker.delete_topic(topic)


def java_consume(
    broker: Broker, classpath: str, size: int, records: int, compression: str = "none"
) -> float:
    """kafka-consumer-perf-test on a topic that ProducerPerformance fills: records/s."""
    topic = f"bench-java-c-{size}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    try:
        _perf_produce(broker, classpath, topic, size, records, compression=compression)
        args = ["--bootstrap-server", broker.bootstrap, "--topic", topic]
        args += ["--num-records", str(records), "--timeout", "60000"]
        out = _java(classpath, "org.apache.kafka.tools.ConsumerPerformance", args, timeout=600)
        lines = [line for line in out.splitlines() if line.strip()]
        header = [h.strip() for h in lines[0].split(",")]
        values = [v.strip() for v in lines[-1].split(",")]
        # fetch.nMsg.sec leaves out the group join and the first metadata round trips;
        # older tools have only nMsg.sec
        column = "fetch.nMsg.sec" if "fetch.nMsg.sec" in header else "nMsg.sec"
        return float(values[header.index(column)])
    finally:
        broker.delete_topic(topic)


def best_java(run: Callable[[], float], repeat: int) -> float | None:
    """The best of ``repeat`` runs of a Java tool; None, with the reason on stdout, if one
    failed (a codec cell whose log is not compressed, a tool error): the cell's Java
    figure is left out and the run goes on."""
    try:
        return max(run() for _ in range(max(repeat, 1)))
    except RuntimeError as exc:
        print(f"‼ Java perf tool left out of this cell: {exc}", flush=True)
        return None


# ---------------------------------------------------------------------------------------------
# running the Python benchmarks


def run_script(script: str, extra: list[str], json_path: pathlib.Path) -> list[dict[str, Any]]:
    """Run one of the end-to-end benchmarks (its tables go to our stdout); its rows."""
    if "--cells" in extra and extra[extra.index("--cells") + 1] == "":
        return []  # --only selected none of its cells
    argv = [sys.executable, str(HERE.parent / script), *extra, "--json", str(json_path)]
    print(f"\n$ {' '.join(argv[1:])}", flush=True)
    subprocess.run(argv, check=False)
    if not json_path.exists():
        return []
    rows: list[dict[str, Any]] = json.loads(json_path.read_text())["rows"]
    return rows


def selected(kind: str, cells: tuple[str, ...], only: str | None) -> tuple[str, ...]:
    """The cells of ``kind`` that ``--only`` (``KIND/CELL`` fnmatch patterns) selects."""
    if only is None:
        return cells
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    return tuple(c for c in cells if any(fnmatch.fnmatch(f"{kind}/{c}", p) for p in patterns))


def size_of(cell: str) -> int:
    head = cell.split("-", 1)[0]
    return int(head[:-3]) * 1024 if head.endswith("KiB") else int(head[:-1])


def codec_of(cell: str) -> str:
    """The compression a cell name ends in (``none``, ``gzip``, ...)."""
    return cell.rsplit("-", 1)[-1]


# ---------------------------------------------------------------------------------------------
# Spark: the kafkastate data source against the JVM connector (bench_spark.py)


def spark_rows(broker: Broker, args: argparse.Namespace, out: pathlib.Path) -> list[dict[str, Any]]:
    """bench_spark.py's rows (read and write, both sources, 1/4/16 partitions); none, with
    the reason on stdout, under ``--no-spark`` or without pyspark."""
    if args.no_spark:
        print("\nSpark: left out (--no-spark)", flush=True)
        return []
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        print("\nSpark: left out (pyspark is not installed: the spark extra)", flush=True)
        return []
    extra = ["--bootstrap", broker.bootstrap, "--connector", args.spark_connector]
    extra += ["--quick"] if args.quick else ["--repeat", str(max(args.repeat, 1))]
    return run_script("bench_spark.py", extra, out / "spark.json")


def spark_skipped(rows: list[dict[str, Any]], args: argparse.Namespace) -> str | None:
    """Why the Spark table is empty or lacks the JVM connector, or None."""
    if args.no_spark:
        return "left out (--no-spark)"
    spark = [r for r in rows if r["kind"] == "spark"]
    if not spark:
        return "left out (no pyspark, or the Spark run failed: see the log)"
    if not any(r["client"] == SPARK_JVM for r in spark):
        return "the JVM connector was left out (no jars: see the log)"
    return None


SPARK_KS, SPARK_JVM, SPARK_ONE = "ks-spark", "jvm-spark", "ks-sync"
SPARK_GOALS = {"read": 2.0, "write": 1.0}  # kafkastate / JVM connector, issue 23


def spark_table(rows: list[dict[str, Any]], *, skipped: str | None) -> list[str]:
    """Markdown: per read/write and partition count, both sources and their ratio."""
    rate = {(r["cell"], r["client"]): r["rate"] for r in rows if r["kind"] == "spark"}
    cells = list(dict.fromkeys(r["cell"] for r in rows if r["kind"] == "spark"))
    out = [f"Spark: {skipped}.", ""] if skipped else []
    if not cells:
        return out
    out += [
        '| cell | format("kafkastate") | format("kafka") (JVM) | kafkastate / JVM | goal '
        "| kafkastate.sync consumer |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for cell in cells:
        ks, jvm, one = (rate.get((cell, c)) for c in (SPARK_KS, SPARK_JVM, SPARK_ONE))
        goal = SPARK_GOALS[cell.split("-", 1)[0]]
        line = [f"`{cell}`", *("—" if v is None else f"{v:,.0f}" for v in (ks, jvm))]
        line += [ratio(ks, jvm), f"≥ {goal:.1f}", "—" if one is None else f"{one:,.0f}"]
        out.append("| " + " | ".join(line) + " |")
    return out


# ---------------------------------------------------------------------------------------------
# memory: peak RSS at full speed against the goals

MIB = 1024 * 1024
BUFFER_MEMORY = 32 * MIB  # kafkastate's (and Java's) buffer_memory default
FETCH_MAX_BYTES = 52_428_800  # fetch_max_bytes default
BROKERS = 1  # the benchmark's cluster
MEMORY_GOALS = {
    "producer": (BUFFER_MEMORY + 30 * MIB) / MIB,
    "consumer": (FETCH_MAX_BYTES * BROKERS + 30 * MIB) / MIB,
}


def memory_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown: per kind and client, the highest peak RSS over the cells (the cell named),
    the growth over the RSS after imports, and the goal (kafkastate's defaults)."""
    out = [
        "| kind | client | peak RSS | cell | over the RSS after imports | goal | within |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for kind, goal in MEMORY_GOALS.items():
        measured = [r for r in rows if r["kind"] == kind and r.get("rss_mb") is not None]
        for client in dict.fromkeys(r["client"] for r in measured):
            top = max((r for r in measured if r["client"] == client), key=lambda r: r["rss_mb"])
            base = top.get("rss_import_mb")
            grew = "—" if base is None else f"{top['rss_mb'] - base:,.0f}"
            within = "yes" if top["rss_mb"] <= goal else f"no (+{top['rss_mb'] - goal:,.0f})"
            out.append(
                f"| {kind} | {LABELS.get(client, client)} | {top['rss_mb']:,.0f} "
                f"| `{top['cell']}` | {grew} | {goal:,.0f} | {within} |"
            )
    return out


# ---------------------------------------------------------------------------------------------
# cost curves (bench_curves.py, --curves)


def curve_rows(broker: Broker, args: argparse.Namespace, out: pathlib.Path) -> list[dict[str, Any]]:
    """bench_curves.py's rows (kind ``curve``); its charts go to ``--plots``."""
    extra = ["--bootstrap", broker.bootstrap, "--plots", args.plots]
    extra += ["--records", "20000"] if args.quick else []
    return run_script("bench_curves.py", extra, out / "curves.json")


def curve_summary(rows: list[dict[str, Any]]) -> list[str]:
    """A line naming the curves' charts, when they ran."""
    if not any(r["kind"] == "curve" for r in rows):
        return []
    return ["", "Cost curves: `docs/plots/curve-*.svg` (docs/performance.md)."]


# ---------------------------------------------------------------------------------------------
# report


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or not b else f"{a / b:.2f}"


def table(rows: list[dict[str, Any]], kind: str, clients: tuple[str, ...]) -> list[str]:
    """Markdown: one line per cell, records/s per client, then kafkastate's ratios."""
    cells = list(dict.fromkeys(r["cell"] for r in rows if r["kind"] == kind))
    rate = {(r["cell"], r["client"]): r["rate"] for r in rows if r["kind"] == kind}
    ks = [c for c in clients if c.startswith("ks-")]
    heads = ["cell", *(LABELS[c] for c in clients), LABELS[JAVA]]
    for c in ks:
        heads += [f"{LABELS[c]} / aiokafka", "/ confluent", "/ Java"]
    out = ["| " + " | ".join(heads) + " |", "|---|" + "---:|" * (len(heads) - 1)]
    for cell in cells:
        line = [f"`{cell}`"]
        for c in (*clients, JAVA):
            v = rate.get((cell, c))
            line.append("—" if v is None else f"{v:,.0f}")
        for c in ks:
            mine = rate.get((cell, c))
            line += [
                ratio(mine, rate.get((cell, "aiokafka"))),
                ratio(mine, rate.get((cell, "confluent"))),
                ratio(mine, rate.get((cell, JAVA))),
            ]
        out.append("| " + " | ".join(line) + " |")
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return f"{os.cpu_count()} CPUs ({cpu}), load average {load:.1f} at the start"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, a smoke run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per client and cell; best")
    parser.add_argument("--bootstrap", default=None, help="HOST:PORT of a running broker")
    parser.add_argument("--out", default=str(HERE.parent / "results"), help="results directory")
    parser.add_argument("--plots", default=str(ROOT / "docs" / "plots"), help="chart directory")
    parser.add_argument("--no-java", action="store_true", help="leave Kafka's perf tools out")
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated fnmatch patterns of KIND/CELL to run, e.g. 'produce/*' or "
        "'produce/100B-*,consume/100B-*' (default: everything)",
    )
    parser.add_argument("--no-spark", action="store_true", help="leave the Spark comparison out")
    parser.add_argument(
        "--spark-connector", default="auto", help="JVM connector version (auto, none, X.Y.Z)"
    )
    parser.add_argument("--curves", action="store_true", help="the cost curves even in --quick")
    parser.add_argument("--no-curves", action="store_true", help="leave the cost curves out")
    args = parser.parse_args()
    produce_cells = selected("produce", PRODUCE_CELLS, args.only)
    consume_cells = selected("consume", CONSUME_CELLS, args.only)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = machine()
    broker = Broker(args.bootstrap)
    rows: list[dict[str, Any]] = []
    try:
        common = ["--bootstrap", broker.bootstrap, "--repeat", str(args.repeat)]
        common += ["--quick"] if args.quick else []
        rows += run_script(
            "bench_producer.py",
            [
                *common,
                "--clients",
                ",".join(PRODUCE_CLIENTS),
                "--cells",
                ",".join(produce_cells),
                "--svg",
                str(out / "bench-producer.svg"),
            ],
            out / "producer.json",
        )
        rows += run_script(
            "bench_consumer.py",
            [
                *common,
                "--clients",
                ",".join(CONSUME_CLIENTS),
                "--cells",
                ",".join(consume_cells),
                "--svg",
                str(out / "bench-consumer.svg"),
            ],
            out / "consumer.json",
        )
        kafka_version = getattr(broker.cluster, "kafka_version", None)
        if kafka_version is None:
            from kafkastate.testing._cluster import default_kafka_version

            kafka_version = default_kafka_version()
        classpath = None if args.no_java else java_classpath(kafka_version)
        if classpath is not None:
            # keyed cells get the unkeyed figure: one per size and codec
            by_size: dict[tuple[int, str], float] = {}
            for cell in produce_cells:
                size, codec = size_of(cell), codec_of(cell)
                n = cell_records(size, codec, args.quick)
                if (size, codec) not in by_size:
                    by_size[size, codec] = best_java(
                        partial(java_produce, broker, classpath, size, n, codec), args.repeat
                    )
                best = by_size[size, codec]
                if best is None:
                    continue
                rows.append({"kind": "producer", "cell": cell, "client": JAVA, "rate": best})
                print(f"java producer {cell}: {best:,.0f} records/s", flush=True)
            for cell in consume_cells:
                size = size_of(cell)
                n = CONSUMER_RECORDS[size][1 if args.quick else 0]
                codec = codec_of(cell)
                best = best_java(
                    partial(java_consume, broker, classpath, size, n, codec), args.repeat
                )
                if best is None:
                    continue
                rows.append({"kind": "consumer", "cell": cell, "client": JAVA, "rate": best})
                print(f"java consumer {cell}: {best:,.0f} records/s", flush=True)
        rows += spark_rows(broker, args, out)
        if (args.curves or not args.quick) and not args.no_curves:
            rows += curve_rows(broker, args, out)
    finally:
        broker.stop()
    meta = {
        "date": started,
        "machine": where,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "versions": versions(),
        "kafka": str(kafka_version),
        "quick": args.quick,
        "repeat": args.repeat,
        "settings": f"linger.ms={LINGER_MS}, batch.size={BATCH_SIZE}, acks=1",
    }
    (out / "latest.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    with open(out / "latest.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["kind", "cell", "client", "records_per_s", "cpu_us_per_record"])
        for r in rows:
            cpu = r.get("cpu")
            per = None if cpu is None or not r.get("records") else cpu / r["records"] * 1e6
            writer.writerow(
                [
                    r["kind"],
                    r["cell"],
                    r["client"],
                    r["rate"],
                    None if per is None else f"{per:.2f}",
                ]
            )
    lines = [
        f"Run of {started}: {where}; {meta['python']}; Apache Kafka {kafka_version} (one local "
        f"broker); {meta['versions']}; {meta['settings']}; best of {args.repeat}"
        + (" (--quick)" if args.quick else "")
        + ".",
        "",
        "### Produce (records/s)",
        "",
        *table(rows, "producer", PRODUCE_CLIENTS),
        "",
        "### Consume (records/s)",
        "",
        *table(rows, "consumer", CONSUME_CLIENTS),
        "",
        "### Memory (peak RSS, MiB)",
        "",
        *memory_table(rows),
        "",
        "### Spark (records/s)",
        "",
        *spark_table(rows, skipped=spark_skipped(rows, args)),
        *curve_summary(rows),
    ]
    (out / "latest.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    plots = pathlib.Path(args.plots)
    plots.mkdir(parents=True, exist_ok=True)
    for name, svg in perf_charts({**meta, "rows": rows}).items():
        (plots / name).write_text(svg)
        print(f"chart: {plots / name}")
    print(f"\nresults: {out}/latest.{{json,csv,md}}; total {time.monotonic() - began:,.0f} s")


if __name__ == "__main__":
    main()
