"""Spark benchmark: the ``kafkastate`` PySpark data source against Spark's JVM Kafka
connector (``format("kafka")``, ``spark-sql-kafka-0-10``), read and write, on the same
topics, in the same ``local[2]`` session (same Spark, same executors), at 1, 4 and 16
partitions; plus kafkastate's blocking consumer reading the same topic in one process.

Per partition count P, with N values of 100 B (null keys, no compression):

* ``read``: one topic of P partitions filled once with confluent-kafka's producer (the
  consumer benchmark's batches), then read whole by each reader, alternating
  (``selectExpr("count(*)", "sum(length(value))")``, one input partition per topic
  partition). The time runs from ``load()`` to the collected result: planning (offset
  lookups) included, the session start and the first-action warm-up (a small read of each
  source before) not. Every record crosses into the JVM (kafkastate: as Arrow).
* ``write``: a cached DataFrame of the same N values in P Spark partitions is written by
  each sink, alternating, to a fresh topic of P partitions each time (kafkastate:
  ``.mode("append")``, its Arrow writer; the JVM sink: its producer defaults). The time
  runs from ``save()`` to its return (every record acknowledged); the topic's end offsets
  are checked to sum to N.
* ``consumer``: ``kafkastate.sync.KafkaConsumer`` in this process, every partition assigned
  from the beginning, ``poll(max_records=10000)``, touching each value.

Every reader checks it saw exactly N records and N x 100 value bytes. Best of ``--repeat``.

The JVM connector's jars (``spark-sql-kafka-0-10_2.13`` and what it needs beyond PySpark's
own jars) are fetched once with Maven into the harness cache (``--connector auto``: the
installed PySpark's version, else the newest one known to resolve); ``--connector none``
(or no java/mvn, or a failed fetch) leaves the JVM rows out and says why.

    python bench/bench_spark.py --quick                  # 100k records, 4 partitions
    python bench/bench_spark.py                          # 500k records, 1/4/16 partitions
    python bench/bench_spark.py --bootstrap 127.0.0.1:9092 --partitions 4 --repeat 1

Without ``--bootstrap`` a broker is started with ``kafkastate.testing.KafkaCluster`` and
stopped at the end. ``--json PATH`` writes the rows ``bench/bench_all.py`` gathers.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time
import uuid
from typing import Any

HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from bench_consumer import fill_topic  # noqa: E402
from bench_producer import Broker  # noqa: E402

SIZE = 100
PARTITIONS = (1, 4, 16)
RECORDS = (500_000, 100_000)  # full, --quick
# The newest spark-sql-kafka-0-10 known to resolve from Maven Central when the installed
# PySpark's own version is not served (PySpark 4.3.0 on 2026-11-26).
CONNECTOR_FALLBACK = "4.2.0"
# What the connector needs beyond the jars PySpark ships (Scala, Hadoop, lz4, snappy, slf4j).
CONNECTOR_JARS = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "commons-pool2-",
)
KS, JVM, CONSUMER = "ks-spark", "jvm-spark", "ks-sync"
LABELS = {
    KS: 'Spark local[2], format("kafkastate")',
    JVM: 'Spark local[2], format("kafka") (JVM connector)',
    CONSUMER: "kafkastate.sync.KafkaConsumer, one process",
}


class Cell:
    """What :func:`bench_consumer.fill_topic` needs to know of the topic."""

    def __init__(self, size: int, partitions: int) -> None:
        self.name = f"{size}B-p{partitions}-spark"
        self.size = size
        self.partitions = partitions
        self.compression = "none"


# ---------------------------------------------------------------------------------------------
# the JVM connector's jars


def connector_jars(version: str) -> tuple[list[str], str]:
    """The JVM connector's jars for ``version`` (``auto``: PySpark's, else the fallback),
    fetched once with Maven into the harness cache; ``([], reason)`` when they cannot be
    had, else ``(jars, description)``."""
    if version == "none":
        return [], "left out (--connector none)"
    if shutil.which("java") is None or shutil.which("mvn") is None:
        return [], "left out: no java or mvn on PATH to fetch spark-sql-kafka-0-10"
    import pyspark

    from kafkastate.testing._maven import cache_root

    tried = [pyspark.__version__, CONNECTOR_FALLBACK] if version == "auto" else [version]
    failures = []
    for v in dict.fromkeys(tried):
        libs = cache_root() / f"spark-sql-kafka-{v}"
        done = libs / ".complete"
        if not done.exists():
            problem = _fetch_connector(v, libs)
            if problem:
                failures.append(f"{v}: {problem}")
                continue
            done.touch()
        jars = sorted(str(j) for j in libs.glob("*.jar") if j.name.startswith(CONNECTOR_JARS))
        return jars, f"spark-sql-kafka-0-10_2.13 {v} on PySpark {pyspark.__version__}"
    return [], "left out: the connector could not be fetched (" + "; ".join(failures) + ")"


def _fetch_connector(version: str, libs: pathlib.Path) -> str | None:
    """``mvn dependency:copy-dependencies`` of the connector into ``libs``; an error or None."""
    libs.mkdir(parents=True, exist_ok=True)
    pom = libs / "pom.xml"
    pom.write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>kafkastate.bench</groupId><artifactId>spark-kafka</artifactId>"
        "<version>1</version><dependencies><dependency><groupId>org.apache.spark</groupId>"
        "<artifactId>spark-sql-kafka-0-10_2.13</artifactId>"
        f"<version>{version}</version></dependency></dependencies></project>"
    )
    argv = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies"]
    argv += ["-DincludeScope=runtime", f"-DoutputDirectory={libs}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        lines = [line for line in proc.stdout.splitlines() if "ERROR" in line]
        return (lines[0] if lines else f"mvn exit {proc.returncode}")[:300]
    return None


# ---------------------------------------------------------------------------------------------
# readers and writers


def read_with_consumer(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Seconds for kafkastate's blocking consumer to read every record once."""
    from kafkastate.sync import KafkaConsumer

    start = time.perf_counter()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=10_000
    )
    consumer.assign([(topic, p) for p in range(partitions)])
    count = nbytes = 0
    try:
        while count < records:
            for batch in consumer.poll(timeout_ms=1000).values():
                count += len(batch)
                nbytes += sum(len(r.value) for r in batch)
    finally:
        consumer.close(autocommit=False)
    elapsed = time.perf_counter() - start
    check("consumer", count, nbytes, records)
    return elapsed


def check(who: str, count: int, nbytes: int, records: int) -> None:
    expected = records * SIZE
    if count != records or nbytes != expected:
        raise SystemExit(f"{who}: {count} records / {nbytes} B, expected {records} / {expected}")


def spark_session(jars: list[str]) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kafkastate.spark

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("kafkastate-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafkastate.spark.register(spark)
    return spark


FORMATS = {KS: "kafkastate", JVM: "kafka"}


def read_with_spark(
    spark: Any, who: str, bootstrap: str, topic: str, records: int, **options: str
) -> float:
    """Seconds for a Spark batch read of the whole topic (plan + read + aggregate)."""
    start = time.perf_counter()
    reader = (
        spark.read.format(FORMATS[who])
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    row = reader.load().selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    elapsed = time.perf_counter() - start
    check(who, row.n, row.b, records)
    return elapsed


def values_frame(spark: Any, records: int, partitions: int) -> Any:
    """N distinct 100-byte values in ``partitions`` Spark partitions, cached and counted."""
    frame = spark.range(0, records, 1, partitions).selectExpr(
        f"cast(concat(lpad(cast(id AS string), 12, '0'), repeat('x', {SIZE - 12})) AS binary)"
        " AS value"
    )
    frame = frame.cache()
    if frame.count() != records:
        raise SystemExit("the cached values frame lost rows")
    return frame


def write_with_spark(
    spark: Any, who: str, broker: Broker, frame: Any, *, partitions: int, records: int
) -> float:
    """Seconds for a Spark batch write of ``frame`` to a fresh topic (checked, deleted)."""
    topic = f"bench-spark-w-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    try:
        start = time.perf_counter()
        (
            frame.write.format(FORMATS[who])
            .mode("append")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .save()
        )
        elapsed = time.perf_counter() - start
        written = broker.count(topic, partitions)
        if written != records:
            raise SystemExit(f"{who} wrote {written} records, expected {records}")
        return elapsed
    finally:
        broker.delete_topic(topic)


def _first(topic: str, partitions: int, small: int) -> str:
    """endingOffsets JSON that reads ``small`` records in all (the warm-up read)."""
    per = [small // partitions] * partitions
    per[0] += small - sum(per)
    return json.dumps({topic: {str(p): n for p, n in enumerate(per)}})


# ---------------------------------------------------------------------------------------------
# the run


def run_partitions(
    spark: Any, broker: Broker, who: list[str], partitions: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every reader and writer at ``partitions``, alternating; rows (best of repeat)."""
    n = args.records
    rows: list[dict[str, Any]] = []
    topic, fill_s = fill_topic(broker, Cell(SIZE, partitions), n)
    print(f"p{partitions}: filled {topic} with {n:,} records in {fill_s:.1f} s", file=sys.stderr)
    try:
        for w in who:  # warm-up: the first action of each source
            read_with_spark(
                spark,
                w,
                broker.bootstrap,
                topic,
                1000,
                endingOffsets=_first(topic, partitions, 1000),
            )
        reads: dict[str, list[float]] = {w: [] for w in (*who, CONSUMER)}
        for i in range(args.repeat):
            order = who if i % 2 == 0 else who[::-1]
            for w in order:
                _attempt(
                    reads[w],
                    f"read-p{partitions} {w}",
                    read_with_spark,
                    spark,
                    w,
                    broker.bootstrap,
                    topic,
                    n,
                )
            _attempt(
                reads[CONSUMER],
                f"read-p{partitions} {CONSUMER}",
                read_with_consumer,
                broker.bootstrap,
                topic,
                partitions,
                n,
            )
    finally:
        broker.delete_topic(topic)
    rows += [_row("read", partitions, w, n, times) for w, times in reads.items() if times]
    if not args.no_write:
        frame = values_frame(spark, n, partitions)
        writes: dict[str, list[float]] = {w: [] for w in who}
        for i in range(args.repeat):
            for w in who if i % 2 == 0 else who[::-1]:
                _attempt(
                    writes[w],
                    f"write-p{partitions} {w}",
                    write_with_spark,
                    spark,
                    w,
                    broker,
                    frame,
                    partitions=partitions,
                    records=n,
                )
        frame.unpersist()
        rows += [_row("write", partitions, w, n, times) for w, times in writes.items() if times]
    for row in rows:
        print(
            f"  {row['cell']:>10} {LABELS[row['client']]:<48} {row['rate']:>12,.0f} records/s",
            file=sys.stderr,
        )
    return rows


def _attempt(times: list[float], what: str, run: Any, *args: Any, **kwargs: Any) -> None:
    """One measurement into ``times``; a failed one (the JVM connector once timed out
    writing 16 partitions) is reported and left out, so the other cells still count: a
    cell with no successful run gets no row (a dash in the tables)."""
    try:
        times.append(run(*args, **kwargs))
    except Exception as exc:  # any failure of one run: reported, the others go on
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"  {what}: FAILED ({type(exc).__name__}: {first[:300]})", file=sys.stderr)


def _row(what: str, partitions: int, who: str, n: int, times: list[float]) -> dict[str, Any]:
    best = min(times)
    return {
        "kind": "spark",
        "cell": f"{what}-p{partitions}",
        "client": who,
        "records": n,
        "elapsed": best,
        "rate": n / best,
        "runs": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--partitions", default=None, help="comma list (default 1,4,16)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100k records, 4 partitions, once")
    parser.add_argument("--connector", default="auto", help="JVM connector version, auto, none")
    parser.add_argument("--no-write", action="store_true", help="reads only")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    if args.records is None:
        args.records = RECORDS[1 if args.quick else 0]
    if args.partitions is None:
        args.partitions = "4" if args.quick else ",".join(map(str, PARTITIONS))
    if args.quick:
        args.repeat = 1
    counts = [int(x) for x in args.partitions.split(",")]
    jars, connector = connector_jars(args.connector)
    print(f"JVM connector: {connector}", file=sys.stderr)
    who = [KS, JVM] if jars else [KS]
    broker = Broker(args.bootstrap)
    rows: list[dict[str, Any]] = []
    try:
        print(f"broker: {broker.description}", file=sys.stderr)
        t = time.perf_counter()
        spark = spark_session(jars)
        session_s = time.perf_counter() - t
        try:
            for partitions in counts:
                rows += run_partitions(spark, broker, who, partitions, args)
        finally:
            spark.stop()
    finally:
        broker.stop()
    meta = {
        "records": args.records,
        "size": SIZE,
        "repeat": args.repeat,
        "connector": connector,
        "session_s": session_s,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }
    print()
    print(
        f"{args.records:,} x {SIZE} B, best of {args.repeat}; {meta['python']}, "
        f"{os.cpu_count()} CPUs; Spark session start {session_s:.1f} s (not counted); "
        f"JVM connector: {connector}"
    )
    print()
    print(table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per cell, records/s per client, kafkastate / JVM."""
    rate = {(r["cell"], r["client"]): r["rate"] for r in rows}
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    out = [
        f"| cell | {LABELS[KS]} | {LABELS[JVM]} | {LABELS[CONSUMER]} | kafkastate / JVM |",
        "|---|---:|---:|---:|---:|",
    ]
    for cell in cells:
        ks, jvm, one = (rate.get((cell, c)) for c in (KS, JVM, CONSUMER))
        line = [f"`{cell}`", *("—" if v is None else f"{v:,.0f}" for v in (ks, jvm, one))]
        line.append("—" if ks is None or not jvm else f"{ks / jvm:.2f}")
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
