"""Spark batch-read benchmark: the ``kafkastate`` PySpark data source on ``local[2]`` against
kafkastate's blocking consumer reading the same topic in one process.

One topic (default 1,000,000 x 100 B JSON-like values, null keys, 4 partitions, no
compression) is filled once with confluent-kafka's producer (the consumer benchmark's
batches), then read:

* ``consumer``: ``kafkastate.sync.KafkaConsumer`` in this process, every partition assigned
  from the beginning, ``poll(max_records=10000)`` until it has every record, touching each
  value (``len``); the time runs from the consumer's construction to the last record.
* ``spark``: ``spark.read.format("kafkastate")`` on a ``local[2]`` session, one input
  partition per topic partition, ``selectExpr("count(*)", "sum(length(value))")``. The time
  runs from ``load()`` to the collected result: planning (offset lookups) included, the
  session start and the first-action warm-up (a small read before) not. Every record crosses
  into the JVM as Arrow (PySpark reads no less: Python sources get no column pruning).

Both check they saw exactly N records and N x size value bytes. Best of ``--repeat`` runs.

    python bench/bench_spark.py --quick                # 100k records, a smoke run
    python bench/bench_spark.py                        # 1M x 100 B (``nox -s bench_spark``)
    python bench/bench_spark.py --bootstrap 127.0.0.1:9092 --records 200000 --repeat 1

Without ``--bootstrap`` a broker is started with ``kafkastate.testing.KafkaCluster`` and
stopped at the end.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from bench_consumer import fill_topic  # noqa: E402
from bench_producer import Broker  # noqa: E402


class Cell:
    """What :func:`bench_consumer.fill_topic` needs to know of the topic."""

    def __init__(self, size: int, partitions: int) -> None:
        self.name = f"{size}B-p{partitions}-spark"
        self.size = size
        self.partitions = partitions
        self.compression = "none"


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


SIZE = 100


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kafkastate.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafkastate-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kafkastate.spark.register(spark)
    return spark


def read_with_spark(spark: Any, bootstrap: str, topic: str, records: int, **options: str) -> float:
    """Seconds for a Spark batch read of the whole topic (plan + read + aggregate)."""
    start = time.perf_counter()
    reader = (
        spark.read.format("kafkastate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    row = reader.load().selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    elapsed = time.perf_counter() - start
    check("spark", row.n, row.b, records)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100k records, one run each")
    args = parser.parse_args()
    if args.quick:
        args.records, args.repeat = 100_000, 1
    broker = Broker(args.bootstrap)
    try:
        print(f"broker: {broker.description}", file=sys.stderr)
        topic, fill_s = fill_topic(broker, Cell(SIZE, args.partitions), args.records)
        print(f"filled {topic} with {args.records:,} records in {fill_s:.1f} s", file=sys.stderr)
        consumer_s = min(
            read_with_consumer(broker.bootstrap, topic, args.partitions, args.records)
            for _ in range(args.repeat)
        )
        t = time.perf_counter()
        spark = spark_session()
        session_s = time.perf_counter() - t
        t = time.perf_counter()
        warm = spark.range(10).selectExpr("sum(id)").collect()
        assert warm[0][0] == 45
        small = min(args.records, 1000)
        read_with_spark(
            spark, broker.bootstrap, topic, small, endingOffsets=_first(topic, args, small)
        )
        warmup_s = time.perf_counter() - t
        spark_s = min(
            read_with_spark(spark, broker.bootstrap, topic, args.records)
            for _ in range(args.repeat)
        )
        spark.stop()
        broker.delete_topic(topic)
    finally:
        broker.stop()
    n = args.records
    print()
    print(
        f"{n:,} x {SIZE} B, {args.partitions} partitions, best of {args.repeat}; "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs; Spark session start {session_s:.1f} s, "
        f"warm-up {warmup_s:.1f} s (not counted)"
    )
    print()
    print("| reader | seconds | records/s | MB/s |")
    print("|---|---:|---:|---:|")
    for name, secs in (
        ("kafkastate.sync.KafkaConsumer, one process", consumer_s),
        ('Spark local[2], format("kafkastate")', spark_s),
    ):
        print(f"| {name} | {secs:.2f} | {n / secs:,.0f} | {n * SIZE / secs / 1e6:.1f} |")
    print()
    print(f"Spark / consumer: {consumer_s / spark_s:.2f}x")


def _first(topic: str, args: argparse.Namespace, small: int) -> str:
    """endingOffsets JSON that reads ``small`` records in all (the warm-up read)."""
    import json

    per = [small // args.partitions] * args.partitions
    per[0] += small - sum(per)
    return json.dumps({topic: {str(p): n for p, n in enumerate(per)}})


if __name__ == "__main__":
    main()
