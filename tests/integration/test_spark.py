"""The ``kafkastate`` PySpark data source on a real Spark session (local[2]) against the real
broker: batch read, streaming with a restart from the checkpoint, batch and streaming
writes. One shared session for the module (a JVM start costs ~15 s); everything the source
needs reaches the Python workers as options (SPARK.md G4). Records are produced with
kafka-python, an independent client."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.requests import NewTopic

if shutil.which("java") is None:
    pytest.skip(
        "the Spark tests need a JVM: java not found on PATH (install openjdk-17-jre-headless)",
        allow_module_level=True,
    )

kafka = pytest.importorskip("kafka")

from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.utils import CapturedException  # noqa: E402

from kafkastate.spark import register  # noqa: E402

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark(kafka_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # The workers must run this interpreter (G1) and import kafkastate (G3); the JVM and its
    # workers take the environment as it is when the session starts (G4).
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    try:
        session = (
            SparkSession.builder.master("local[2]")
            .appName("kafkastate-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
            .getOrCreate()
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def _produce(
    bootstrap: str, topic: str, count: int, *, partitions: int, first: int = 0
) -> set[tuple[int, bytes, bytes]]:
    """Write records ``first..first+count-1`` round-robin; every third has a header."""
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    written = set()
    for i in range(first, first + count):
        key, value = f"k{i}".encode(), f"value-{i}".encode()
        headers = [("n", str(i).encode())] if i % 3 == 0 else []
        producer.send(topic, value=value, key=key, headers=headers, partition=i % partitions)
        written.add((i % partitions, key, value))
    producer.flush(30)
    producer.close()
    return written


def test_batch_read_equals_what_was_produced(spark: SparkSession, kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 3)
    written = _produce(bootstrap, topic, 600, partitions=3)
    df = (
        spark.read.format("kafkastate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("minPartitions", 6)
        .load()
    )
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert df.rdd.getNumPartitions() == 6
    rows = df.collect()
    assert len(rows) == 600
    assert {(r.partition, r.key, r.value) for r in rows} == written
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}
    for partition in range(3):
        offsets = sorted(r.offset for r in rows if r.partition == partition)
        assert offsets == list(range(200))
    for r in rows:
        n = int(r.key[1:])
        if n % 3 == 0:
            assert [(h.key, h.value) for h in r.headers] == [("n", str(n).encode())]
        else:
            assert r.headers is None

    # explicit offsets: -1 is latest; partition 2 from a timestamp-free JSON range
    ranged = (
        spark.read.format("kafkastate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", f'{{"{topic}": [0, 2]}}')
        .option("startingOffsets", f'{{"{topic}": {{"0": 190, "2": -2}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"0": -1, "2": 5}}}}')
        .load()
        .select("partition", "offset")
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in ranged) == [
        *((0, o) for o in range(190, 200)),
        *((2, o) for o in range(5)),
    ]


def test_stream_available_now_restarts_exactly_once(
    spark: SparkSession, kafka_cluster: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 2)
    written = _produce(bootstrap, topic, 250, partitions=2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> list[int]:
        query = (
            spark.readStream.format("kafkastate")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 100)
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert run() == [100, 100, 50]  # the limit shared by backlog, then the rest
    written |= _produce(bootstrap, topic, 30, partitions=2, first=250)
    assert run() == [30]  # from the checkpoint: only what is new
    assert run() == []
    rows = spark.read.parquet(str(out)).select("partition", "offset", "key", "value").collect()
    assert len(rows) == 280
    assert {(r.partition, r.key, r.value) for r in rows} == written
    assert len({(r.partition, r.offset) for r in rows}) == 280


def test_write_then_read_back(spark: SparkSession, kafka_cluster: Any, tmp_path: Path) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 2)
    data = [(f"k{i}", f"v{i}".encode(), i % 2, [(f"h{i}", b"x")]) for i in range(300)]
    df = spark.createDataFrame(
        data,
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        df.write.format("kafkastate")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .save()
    )
    back = (
        spark.read.format("kafkastate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    got = {(r.key.decode(), r.value, r.partition, r.headers[0].key) for r in back}
    assert got == {(k, v, p, h[0][0]) for k, v, p, h in data}
    assert len(back) == 300

    # a streaming copy of the topic, rows routed by a topic column
    copy = _topic(bootstrap, 1)
    query = (
        spark.readStream.format("kafkastate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", f"'{copy}' AS topic")
        .writeStream.format("kafkastate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    copied = (
        spark.read.format("kafkastate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", copy)
        .load()
        .collect()
    )
    assert sorted((r.key, r.value) for r in copied) == sorted((r.key, r.value) for r in back)


def test_write_errors_are_typed_and_named(spark: SparkSession, kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    no_value = spark.createDataFrame([("k",)], "key string")
    writer = (
        no_value.write.format("kafkastate")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "t")
    )
    with pytest.raises((PySparkException, CapturedException), match="needs a value column"):
        writer.save()
    bad_key = spark.createDataFrame([(1, "v")], "key int, value string")
    with pytest.raises((PySparkException, CapturedException), match="column key must be"):
        (
            bad_key.write.format("kafkastate")
            .mode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", "t")
            .save()
        )
    # Python data sources refuse Spark's default mode, ErrorIfExists (SPARK.md G11)
    ok = spark.createDataFrame([("v",)], "value string")
    with pytest.raises((PySparkException, CapturedException), match="SAVE_MODE"):
        ok.write.format("kafkastate").option("kafka.bootstrap.servers", bootstrap).save()
