"""The Spark data source's driver and executor code against the real broker, without a
JVM: offset resolution (timestamps, JSON), admission control, Trigger.AvailableNow, new
partitions, data loss. The same objects Spark would call, called directly (Spark's own
processes are covered by test_spark.py). Records are written with kafka-python."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import KafkaConfigurationError
from kafkastate.spark import (
    DataLossError,
    KafkaStateDataSource,
    KafkaStateStreamReader,
    RangePartition,
)
from kafkastate.spark._kafka import read_range
from kafkastate.spark._offsets import OffsetRange
from kafkastate.spark._options import parse_source_options

kafka = pytest.importorskip("kafka")

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000


def _topic(bootstrap: str, partitions: int, name: str | None = None) -> str:
    name = name or f"sparkdrv-{uuid.uuid4().hex[:10]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def _produce(bootstrap: str, topic: str, per_partition: dict[int, int], first: int = 0) -> None:
    """``n`` records to each partition; record i of a partition has timestamp T0 + i s."""
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    for partition, n in per_partition.items():
        for i in range(first, first + n):
            producer.send(topic, value=b"v%d" % i, partition=partition, timestamp_ms=T0 + i * 1000)
    producer.flush(30)
    producer.close()


def _source(bootstrap: str, **options: str) -> KafkaStateDataSource:
    return KafkaStateDataSource(
        CaseInsensitiveDict({"kafka.bootstrap.servers": bootstrap, **options})
    )


def _ranges(bootstrap: str, **options: str) -> list[tuple[int, int, int]]:
    ds = _source(bootstrap, **options)
    parts = ds.reader(ds.schema()).partitions()
    return [(p.range.partition, p.range.start, p.range.end) for p in parts]


def _stream(bootstrap: str, **options: str) -> KafkaStateStreamReader:
    ds = _source(bootstrap, **options)
    reader = ds.streamReader(ds.schema())
    assert isinstance(reader, KafkaStateStreamReader)
    return reader


def _canonical(offsets: dict[str, Any]) -> str:
    return json.dumps(offsets)


def test_batch_offsets_from_timestamps_and_json(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 2)
    _produce(bootstrap, topic, {0: 10, 1: 4})
    assert _ranges(bootstrap, subscribe=topic) == [(0, 0, 10), (1, 0, 4)]
    # the earliest offset with a timestamp >= T: 5 s in is offset 5
    assert _ranges(
        bootstrap,
        subscribe=topic,
        startingTimestamp=str(T0 + 2000),
        endingTimestamp=str(T0 + 5000),
    ) == [(0, 2, 5), (1, 2, 4)]  # partition 1 has nothing at 5 s: it ends at latest
    assert _ranges(
        bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": T0 + 7000, "1": T0}}),
        endingOffsets=json.dumps({topic: {"0": -1, "1": 2}}),
    ) == [(0, 7, 10), (1, 0, 2)]
    # a starting timestamp after every record: an error, or latest by strategy
    late = str(T0 + 8000)
    with pytest.raises(KafkaConfigurationError, match=r"startingTimestamp: no record .*, 1\)"):
        _ranges(bootstrap, subscribe=topic, startingTimestamp=late)
    assert _ranges(
        bootstrap,
        subscribe=topic,
        startingTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    ) == [(0, 8, 10)]
    with pytest.raises(KafkaConfigurationError, match="must name every subscribed partition"):
        _ranges(bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 1}}))
    with pytest.raises(KafkaConfigurationError, match="is after its ending offset"):
        _ranges(
            bootstrap,
            subscribe=topic,
            startingOffsets=json.dumps({topic: {"0": 9, "1": 0}}),
            endingOffsets=json.dumps({topic: {"0": 3, "1": 0}}),
        )


def test_batch_subscriptions(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    prefix = f"sparkpat{uuid.uuid4().hex[:6]}"
    a = _topic(bootstrap, 1, f"{prefix}-a")
    b = _topic(bootstrap, 2, f"{prefix}-b")
    _produce(bootstrap, a, {0: 3})
    _produce(bootstrap, b, {0: 1, 1: 2})
    ds = _source(bootstrap, subscribePattern=f"{prefix}-.*")
    parts = ds.reader(ds.schema()).partitions()
    assert [(p.range.topic, p.range.partition, p.range.end) for p in parts] == [
        (a, 0, 3),
        (b, 0, 1),
        (b, 1, 2),
    ]
    assert _ranges(bootstrap, subscribe=f"{a},{prefix}-missing") == [(0, 0, 3)]
    assert _ranges(bootstrap, assign=json.dumps({b: [1]})) == [(1, 0, 2)]
    with pytest.raises(KafkaConfigurationError, match=r"option assign: .* has no partition \[7\]"):
        _ranges(bootstrap, assign=json.dumps({b: [7]}))
    with pytest.raises(KafkaConfigurationError, match="option assign: no topic"):
        _ranges(bootstrap, assign=json.dumps({f"{prefix}-missing": [0]}))


def test_stream_admission_control(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 2)
    _produce(bootstrap, topic, {0: 90, 1: 10})
    reader = _stream(bootstrap, subscribe=topic, startingOffsets="earliest")
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    assert reader.latestOffset(start, ReadMaxRows(20)) == {topic: {"0": 18, "1": 2}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 90, "1": 10}}
    end = reader.latestOffset(start, ReadMaxRows(1000))
    assert _canonical(reader.latestOffset(end, ReadMaxRows(1000))) == _canonical(end)
    assert reader.reportLatestOffset() == {topic: {"0": 90, "1": 10}}
    parts = reader.partitions(start, {topic: {"0": 18, "1": 2}})
    assert [p.range for p in parts] == [  # type: ignore[attr-defined]
        OffsetRange(topic=topic, partition=0, start=0, end=18),
        OffsetRange(topic=topic, partition=1, start=0, end=2),
    ]
    assert reader.partitions(end, end) == []
    # minOffsetsPerTrigger: too little new data waits, until maxTriggerDelay has passed
    waiting = _stream(bootstrap, subscribe=topic, minOffsetsPerTrigger="150")
    assert waiting.getDefaultReadLimit() == ReadMinRows(150)
    assert waiting.latestOffset(start, ReadMinRows(150)) == start
    assert waiting.latestOffset(start, ReadMinRows(50)) == end
    prompt = _stream(bootstrap, subscribe=topic, minOffsetsPerTrigger="150", maxTriggerDelay="0s")
    assert prompt.latestOffset(start, ReadMinRows(150)) == end
    reader.stop()


def test_stream_available_now_and_new_partitions(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, {0: 5})
    reader = _stream(bootstrap, subscribe=topic, startingOffsets="earliest")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    _produce(bootstrap, topic, {0: 5}, first=5)
    # the target was fixed before the new records: never beyond it
    assert reader.latestOffset(start, ReadMaxRows(3)) == {topic: {"0": 3}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 5}}
    assert reader.latestOffset({topic: {"0": 5}}, ReadAllAvailable()) == {topic: {"0": 5}}

    # a partition added later is read from its beginning
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_partitions({topic: 2})
    finally:
        admin.close()
    _produce(bootstrap, topic, {1: 4})
    fresh = _stream(bootstrap, subscribe=topic)
    deadline = time.monotonic() + 30
    while True:
        end = fresh.latestOffset({topic: {"0": 10}}, ReadAllAvailable())
        if "1" in end[topic] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert end == {topic: {"0": 10, "1": 4}}
    parts = fresh.partitions({topic: {"0": 10}}, end)
    assert [(p.range.partition, p.range.start, p.range.end) for p in parts] == [(1, 0, 4)]  # type: ignore[attr-defined]


def test_stream_data_loss_when_offsets_go_backwards(
    kafka_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, {0: 3})
    checkpointed = {topic: {"0": 50}}  # beyond what the log holds: it was recreated
    strict = _stream(bootstrap, subscribe=topic)
    with pytest.raises(DataLossError, match=r"now ends at offset 3, before 50.*failOnDataLoss"):
        strict.latestOffset(checkpointed, ReadAllAvailable())
    with pytest.raises(DataLossError, match="end offset 3 is before start 50"):
        strict.partitions(checkpointed, {topic: {"0": 3}})
    with pytest.raises(DataLossError, match=r"partition .*-1 is gone"):
        strict.latestOffset({topic: {"0": 3, "1": 0}}, ReadAllAvailable())
    lenient = _stream(bootstrap, subscribe=topic, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="kafkastate.spark"):
        end = lenient.latestOffset(checkpointed, ReadAllAvailable())
        assert end == {topic: {"0": 3}}
        assert lenient.partitions(checkpointed, end) == []
    assert "offsets went backwards" in caplog.text


def test_executor_read_and_data_loss(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, {0: 100})
    strict = parse_source_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "kafkaConsumer.pollTimeoutMs": "5000",
        },
        streaming=False,
    )
    lenient = parse_source_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "failOnDataLoss": "false",
            "kafkaConsumer.pollTimeoutMs": "5000",
        },
        streaming=False,
    )

    def offsets(r: OffsetRange, options: Any) -> list[int]:
        return [o for b in read_range(r, options) for o in b.column("offset").to_pylist()]

    whole = OffsetRange(topic=topic, partition=0, start=0, end=100)
    assert offsets(OffsetRange(topic=topic, partition=0, start=10, end=20), strict) == list(
        range(10, 20)
    )
    # records deleted below offset 40 (retention): data loss
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({kafka.TopicPartition(topic, 0): 40})
    finally:
        admin.close()
    with pytest.raises(DataLossError, match=r"offset 0 of .* is no longer in the log"):
        offsets(whole, strict)
    assert offsets(whole, lenient) == list(range(40, 100))
    # a range past the end of the log (the topic shrank): data loss, not a hang
    beyond = OffsetRange(topic=topic, partition=0, start=90, end=150)
    with pytest.raises(DataLossError, match="ends at offset 100, before the 150"):
        offsets(beyond, strict)
    assert offsets(beyond, lenient) == list(range(90, 100))
    ds = _source(bootstrap, subscribe=topic)
    reader = ds.reader(ds.schema())
    batches = list(
        reader.read(RangePartition(OffsetRange(topic=topic, partition=0, start=95, end=99)))
    )
    assert [b.num_rows for b in batches] == [4]


def test_sink_writes_arrow_batches(kafka_cluster: Any) -> None:
    import pyarrow as pa  # noqa: PLC0415

    from kafkastate.spark import SinkSchemaError  # noqa: PLC0415
    from kafkastate.spark._kafka import write_batches  # noqa: PLC0415
    from kafkastate.spark._options import parse_sink_options  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    a, b = _topic(bootstrap, 2), _topic(bootstrap, 1)
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array(["k0", None, "k2"], pa.string()),
            "value": pa.array(["v0", "v1", None], pa.string()),
            "topic": pa.array([a, b, a], pa.string()),
            "partition": pa.array([1, None, 0], pa.int32()),
            "headers": pa.array([[{"key": "h", "value": b"x"}], None, []], pa.list_(header)),
            "ignored": pa.array([1, 2, 3], pa.int64()),
        }
    )
    options = parse_sink_options({"kafka.bootstrap.servers": bootstrap})
    assert write_batches(iter([batch, batch.slice(0, 0)]), options) == 3
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign(
        [kafka.TopicPartition(a, 0), kafka.TopicPartition(a, 1), kafka.TopicPartition(b, 0)]
    )
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    consumer.close()
    assert sorted((r.topic == a, r.partition, r.key, r.value, list(r.headers)) for r in got) == [
        (False, 0, None, b"v1", []),
        (True, 0, b"k2", None, []),  # a tombstone
        (True, 1, b"k0", b"v0", [("h", b"x")]),
    ]
    # the topic option wins over the column; a row without a topic fails
    named = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": b})
    assert write_batches(iter([batch.select(["key", "value"])]), named) == 3
    no_topic = pa.RecordBatch.from_pydict(
        {"value": pa.array([b"v"]), "topic": pa.array([None], pa.string())}
    )
    with pytest.raises(SinkSchemaError, match="row 0 has a null topic"):
        write_batches(iter([no_topic]), options)


def test_sink_partitions_as_java_and_cuts_record_batches(kafka_cluster: Any) -> None:
    import pyarrow as pa  # noqa: PLC0415

    from kafkastate.core.producer import default_partition  # noqa: PLC0415
    from kafkastate.spark._kafka import write_batches  # noqa: PLC0415
    from kafkastate.spark._options import parse_sink_options  # noqa: PLC0415
    from tests._support.readback import consume  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 4)
    n = 2000
    keyed = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([f"k{i % 50}" for i in range(n)], pa.string()),
            "value": pa.array([f"v{i}".encode() for i in range(n)], pa.binary()),
        }
    )
    keyless = pa.RecordBatch.from_pydict(
        {"value": pa.array([f"u{i}" for i in range(n)], pa.string())}
    )
    options = parse_sink_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "kafka.batch.size": "4096"}
    )
    assert write_batches(iter([keyed, keyless, keyless.slice(0, 0)]), options) == 2 * n
    records = sorted(consume(bootstrap, topic, 2 * n), key=lambda r: (r.partition, r.offset))
    assert len(records) == 2 * n
    by_key: dict[bytes, list[int]] = {}
    spread: dict[int, list[int]] = {}
    for r in records:
        if r.key is None:
            spread.setdefault(r.partition, []).append(int(r.value[1:]))
        else:
            # the Java default partitioner's choice, and each key's rows in order
            assert r.partition == default_partition(r.key, 4)
            by_key.setdefault(r.key, []).append(int(r.value[1:]))
    assert all(v == sorted(v) for v in by_key.values())
    assert sorted(i for v in by_key.values() for i in v) == list(range(n))
    # ~30 KB of keyless rows in batches of <= 4 KiB, one partition after the other
    assert set(spread) == {0, 1, 2, 3}
    assert all(v == sorted(v) for v in spread.values())
    assert sorted(i for v in spread.values() for i in v) == list(range(n))


def test_sink_failures_are_typed(kafka_cluster: Any) -> None:
    import pyarrow as pa  # noqa: PLC0415

    from kafkastate.errors import KafkaTimeoutError, MessageTooLargeError  # noqa: PLC0415
    from kafkastate.spark._kafka import write_batches  # noqa: PLC0415
    from kafkastate.spark._options import parse_sink_options  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 1)
    options = parse_sink_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic,
            "kafka.max.block.ms": "300",
            "kafka.max.request.size": "2000",
        }
    )
    too_large = pa.RecordBatch.from_pydict({"value": pa.array([b"x" * 5000])})
    with pytest.raises(MessageTooLargeError):
        write_batches(iter([too_large]), options)
    no_such_partition = pa.RecordBatch.from_pydict(
        {"value": pa.array([b"x"]), "partition": pa.array([9], pa.int32())}
    )
    with pytest.raises(KafkaTimeoutError):
        write_batches(iter([no_such_partition]), options)
    neither = pa.RecordBatch.from_pydict(
        {"key": pa.array([None], pa.binary()), "value": pa.array([None], pa.binary())}
    )
    with pytest.raises(KafkaConfigurationError, match="key or a value"):
        write_batches(iter([neither]), options)


@pytest.mark.kafka_needs("sasl:SCRAM-SHA-512")
def test_kafka_options_reach_the_client_sasl_scram(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, {0: 7})
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{kafka_cluster.sasl.username}" password="{kafka_cluster.sasl.password}";'
    )
    secured = {
        "kafka.bootstrap.servers": kafka_cluster.sasl_bootstrap,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas,
        "subscribe": topic,
    }
    ds = KafkaStateDataSource(CaseInsensitiveDict(secured))
    reader = ds.reader(ds.schema())
    (part,) = reader.partitions()
    assert [b.num_rows for b in reader.read(part)] == [7]
