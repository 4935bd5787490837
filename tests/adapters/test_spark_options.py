"""The Spark data source's logic without a JVM or a broker: option parsing, the offset JSON,
range splitting, rate limits, the Arrow schema, sink column checks, pickling."""

from __future__ import annotations

import itertools
import json
import pickle

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.pandas.types import to_arrow_schema

from kafkastate.errors import KafkaConfigurationError
from kafkastate.spark import (
    KafkaStateDataSource,
    KafkaStateStreamReader,
    RangePartition,
    SinkSchemaError,
    WriteResult,
    kafka_schema,
)
from kafkastate.spark._kafka import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    check_sink_columns,
    to_record_batch,
)
from kafkastate.spark._offsets import (
    OffsetRange,
    from_json_offsets,
    rate_limit,
    split_ranges,
    to_json_offsets,
)
from kafkastate.spark._options import parse_sink_options, parse_source_options
from kafkastate.structs import ConsumerRecord

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def source(streaming: bool = False, **options: object) -> object:
    return parse_source_options({**BOOT, **options}, streaming=streaming)


# ---------------------------------------------------------------------------- options


def test_subscription_forms() -> None:
    opts = parse_source_options({**BOOT, "subscribe": "b, a,b"}, streaming=False)
    assert opts.subscription.topics == ("b", "a")
    assert opts.subscription.wanted_topics({"a", "b", "c"}) == ["a", "b"]
    opts = parse_source_options({**BOOT, "subscribePattern": "ev.*"}, streaming=False)
    assert opts.subscription.wanted_topics({"events", "xevents", "ev"}) == ["ev", "events"]
    opts = parse_source_options({**BOOT, "assign": '{"t": [1, 0], "u": [3]}'}, streaming=False)
    assert opts.subscription.partitions == (("t", 0), ("t", 1), ("u", 3))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, "exactly one of the options subscribe, subscribePattern, assign"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one"),
        ({"subscribe": " , "}, "subscribe names no topic"),
        ({"subscribePattern": "("}, "subscribePattern"),
        ({"assign": "[0]"}, "option assign must be JSON"),
        ({"assign": '{"t": [-1]}'}, "option assign"),
        ({"assign": "{not json"}, "option assign is not valid JSON"),
    ],
)
def test_subscription_errors(options: dict[str, str], match: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=match):
        parse_source_options({**BOOT, **options}, streaming=False)


def test_offset_defaults_and_precedence() -> None:
    batch = parse_source_options({**BOOT, "subscribe": "t"}, streaming=False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    stream = parse_source_options({**BOOT, "subscribe": "t"}, streaming=True)
    assert stream.starting.kind == "latest"
    # a global timestamp wins over per-partition timestamps, which win over offsets
    opts = parse_source_options(
        {
            **BOOT,
            "subscribe": "t",
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
            "startingTimestamp": "1000",
        },
        streaming=False,
    )
    assert (opts.starting.kind, opts.starting.timestamp) == ("timestamp", 1000)
    opts = parse_source_options(
        {**BOOT, "subscribe": "t", "endingOffsetsByTimestamp": '{"t": {"0": 5}}'},
        streaming=False,
    )
    assert (opts.ending.kind, opts.ending.offsets) == ("timestamps", {("t", 0): 5})
    opts = parse_source_options(
        {**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": 3, "1": -2}}'},
        streaming=False,
    )
    assert opts.starting.offsets == {("t", 0): 3, ("t", 1): -2}


@pytest.mark.parametrize(
    ("options", "streaming", "match"),
    [
        ({"startingOffsets": "latest"}, False, "startingOffsets: latest"),
        ({"startingOffsets": '{"t": {"0": -1}}'}, False, "startingOffsets: latest"),
        ({"endingOffsets": "earliest"}, False, "endingOffsets: earliest"),
        ({"endingOffsets": '{"t": {"0": -2}}'}, False, "endingOffsets: earliest"),
        ({"endingOffsets": "latest"}, True, "endingOffsets is for batch reads only"),
        ({"endingTimestamp": "5"}, True, "endingTimestamp is for batch reads only"),
        ({"startingOffsets": '{"t": {"0": -3}}'}, False, "must be >= 0, or -2"),
        ({"startingOffsets": '{"t": {"x": 1}}'}, False, "partition t/'x'"),
        ({"startingOffsets": '{"t": [1]}'}, False, "startingOffsets"),
        ({"startingOffsets": "soon"}, False, "startingOffsets is not valid JSON"),
        ({"startingTimestamp": "-1"}, False, "startingTimestamp must be an integer >= 0"),
        ({"startingOffsetsByTimestamp": '{"t": {"0": -5}}'}, False, "must be ms >= 0"),
        ({"startingOffsetsByTimestampStrategy": "skip"}, False, "error or latest"),
        ({"minPartitions": "0"}, False, "minPartitions must be an integer >= 1"),
        ({"maxOffsetsPerTrigger": "many"}, True, "maxOffsetsPerTrigger"),
        ({"maxRecordsPerPartition": "0"}, False, "maxRecordsPerPartition"),
        ({"includeHeaders": "yes"}, False, "includeHeaders must be true or false"),
        ({"failOnDataLoss": "1"}, False, "failOnDataLoss must be true or false"),
        ({"maxTriggerDelay": "soon"}, True, "maxTriggerDelay must be a duration"),
        ({"kafkaConsumer.pollTimeoutMs": "0"}, False, "kafkaConsumer.pollTimeoutMs"),
    ],
)
def test_offset_and_value_errors_name_the_option(
    options: dict[str, str], streaming: bool, match: str
) -> None:
    with pytest.raises(KafkaConfigurationError, match=match):
        parse_source_options({**BOOT, "subscribe": "t", **options}, streaming=streaming)


def test_options_are_case_insensitive_strings() -> None:
    # Spark lowercases keys (CaseInsensitiveDict) and stringifies values (SPARK.md G17)
    given = CaseInsensitiveDict(
        {
            "Kafka.Bootstrap.Servers": "h1:9092,h2:9092",
            "SUBSCRIBE": "t",
            "includeheaders": "TRUE",
            "maxOffsetsPerTrigger": 10,
            "minOffsetsPerTrigger": "5",
            "maxTriggerDelay": "2m",
            "failOnDataLoss": "false",
            "kafkaConsumer.pollTimeoutMs": "1500",
        }
    )
    opts = parse_source_options(given, streaming=True)
    assert opts.kafka["bootstrap_servers"] == ["h1:9092", "h2:9092"]
    assert opts.include_headers is True
    assert opts.max_offsets_per_trigger == 10
    assert opts.min_offsets_per_trigger == 5
    assert opts.max_trigger_delay == 120.0
    assert opts.fail_on_data_loss is False
    assert opts.poll_timeout == 1.5


def test_kafka_options_become_typed_client_keywords() -> None:
    opts = parse_source_options(
        {
            **BOOT,
            "subscribe": "t",
            "kafka.max.poll.records": "77",
            "kafka.fetch.max.wait.ms": "250",
            "kafka.check.crcs": "false",
            "kafka.isolation.level": "read_committed",
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="alice" password="s3\\"cret";',
        },
        streaming=False,
    )
    assert opts.kafka == {
        "bootstrap_servers": ["127.0.0.1:9"],
        "max_poll_records": 77,
        "fetch_max_wait_ms": 250.0,
        "check_crcs": False,
        "isolation_level": "read_committed",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": 's3\\"cret',
    }
    sink = parse_sink_options(
        {**BOOT, "topic": "t", "kafka.acks": "all", "kafka.linger.ms": "5", "kafka.retries": "3"}
    )
    assert sink.kafka == {
        "bootstrap_servers": ["127.0.0.1:9"],
        "acks": "all",
        "linger_ms": 5.0,
        "retries": 3.0,
    }
    assert parse_sink_options({**BOOT, "kafka.acks": "1"}).kafka["acks"] == 1


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset is not supported"),
        ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit is not supported"),
        ({"kafka.key.deserializer": "x"}, "kafka.key.deserializer is not supported"),
        ({"kafka.no.such.thing": "1"}, "kafka.no.such.thing is not a Kafka client property"),
        ({"kafka.max.poll.records": "lots"}, "kafka.max.poll.records must be a number"),
        ({"kafka.check.crcs": "maybe"}, "kafka.check.crcs must be true or false"),
        ({"kafka.sasl.jaas.config": "x required;"}, 'username="..." and password'),
    ],
)
def test_kafka_option_errors(options: dict[str, str], match: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=match):
        parse_source_options({**BOOT, "subscribe": "t", **options}, streaming=False)


def test_bootstrap_servers_required() -> None:
    with pytest.raises(KafkaConfigurationError, match=r"kafka\.bootstrap\.servers is required"):
        parse_source_options({"subscribe": "t"}, streaming=False)
    with pytest.raises(KafkaConfigurationError, match=r"kafka\.bootstrap\.servers is required"):
        parse_sink_options({"topic": "t"})
    with pytest.raises(KafkaConfigurationError, match=r"kafka\.value\.serializer"):
        parse_sink_options({**BOOT, "kafka.value.serializer": "x"})
    with pytest.raises(KafkaConfigurationError, match="option topic is empty"):
        parse_sink_options({**BOOT, "topic": " "})


# ---------------------------------------------------------------------------- offsets


def test_offset_json_is_canonical() -> None:
    offsets = {("b", 10): 5, ("b", 2): 7, ("a", 0): 1}
    as_json = json.dumps(to_json_offsets(offsets))
    # sorted topics, partitions in numeric order: one string for the same offsets (G12)
    assert as_json == '{"a": {"0": 1}, "b": {"2": 7, "10": 5}}'
    assert json.dumps(to_json_offsets(dict(reversed(offsets.items())))) == as_json
    assert from_json_offsets(json.loads(as_json), what="x") == offsets


@pytest.mark.parametrize(
    "value",
    [[], {"t": [0]}, {"t": {"0": "1"}}, {"t": {"-1": 1}}, {"": {"0": 1}}, {"t": {"0": True}}],
)
def test_offset_json_errors(value: object) -> None:
    with pytest.raises(KafkaConfigurationError, match="checkpoint"):
        from_json_offsets(value, what="checkpoint")


def r(partition: int, start: int, end: int, topic: str = "t") -> OffsetRange:
    return OffsetRange(topic=topic, partition=partition, start=start, end=end)


def test_split_one_range_per_partition_by_default() -> None:
    ranges = [r(0, 0, 10), r(1, 5, 5), r(2, 7, 3), r(3, 0, 1)]
    # empty and negative ranges are dropped
    assert split_ranges(ranges) == [r(0, 0, 10), r(3, 0, 1)]
    assert split_ranges(ranges, min_partitions=2) == [r(0, 0, 10), r(3, 0, 1)]
    assert split_ranges([]) == []
    assert split_ranges([r(0, 3, 3)], min_partitions=4) == []


def test_split_large_ranges_for_min_partitions() -> None:
    # 1000 + 100 + 10 offsets over 10 tasks: the small ranges stay whole, the big one
    # takes the remaining 8 pieces; pieces are contiguous and cover the range exactly
    ranges = [r(0, 0, 1000), r(1, 0, 100), r(2, 50, 60)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert pieces[8:] == [r(1, 0, 100), r(2, 50, 60)]
    big = pieces[:8]
    assert [p.start for p in big] == [0, 125, 250, 375, 500, 625, 750, 875]
    assert big[-1].end == 1000
    assert all(a.end == b.start for a, b in itertools.pairwise(big))
    # uneven: the last piece takes the remainder
    assert split_ranges([r(0, 0, 10)], min_partitions=3) == [r(0, 0, 3), r(0, 3, 6), r(0, 6, 10)]
    # more pieces wanted than offsets: one offset each
    assert split_ranges([r(0, 0, 2)], min_partitions=5) == [r(0, 0, 1), r(0, 1, 2)]


def test_split_caps_records_per_partition() -> None:
    pieces = split_ranges([r(0, 0, 10), r(1, 0, 3)], max_records_per_partition=4)
    assert pieces == [r(0, 0, 3), r(0, 3, 6), r(0, 6, 10), r(1, 0, 3)]
    assert max(p.size for p in split_ranges([r(0, 0, 1001)], max_records_per_partition=100)) <= 100


def test_rate_limit_shares_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 900, ("t", 1): 190, ("t", 2): 15}
    end = rate_limit(start, latest, 100)
    # backlog 900/90/10 of 1000: 90, 9 and 1 offsets
    assert end == {("t", 0): 90, ("t", 1): 109, ("t", 2): 6}
    # a partition with a tiny share still moves (ceil below one)
    end = rate_limit({("a", 0): 0, ("b", 0): 0}, {("a", 0): 10_000, ("b", 0): 1}, 100)
    assert end == {("a", 0): 99, ("b", 0): 1}
    # everything fits: the latest offsets
    assert rate_limit(start, latest, 1000) == latest
    # nothing new: unchanged
    assert rate_limit(latest, latest, 10) == latest


# --------------------------------------------------------------------- Arrow, schema


@pytest.mark.parametrize("headers", [False, True])
def test_arrow_schema_is_what_spark_checks(headers: bool) -> None:
    expected = to_arrow_schema(kafka_schema(include_headers=headers), timezone="UTC")
    ours = ARROW_SCHEMA_WITH_HEADERS if headers else ARROW_SCHEMA
    assert expected.equals(ours)


def _record(offset: int, headers: tuple[tuple[str, bytes | None], ...] = ()) -> ConsumerRecord:
    return ConsumerRecord(
        "t", 3, 0, offset, 1_700_000_000_123, 1, b"k", b"v%d" % offset, headers, None, 1, 2, -1
    )


def test_records_to_arrow_batch() -> None:
    records = [_record(7, (("h", b"x"), ("n", None))), _record(8)]
    batch = to_record_batch(records, "t", 3, include_headers=True)
    assert batch.schema.equals(ARROW_SCHEMA_WITH_HEADERS)
    rows = batch.to_pylist()
    assert [row["offset"] for row in rows] == [7, 8]
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] is None  # Spark's source gives null, not [], without headers
    assert rows[0]["timestamp"].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert (rows[0]["timestampType"], rows[0]["partition"], rows[0]["topic"]) == (1, 3, "t")
    plain = to_record_batch(records, "t", 3, include_headers=False)
    assert plain.schema.equals(ARROW_SCHEMA)
    assert to_record_batch([], "t", 3, include_headers=False).num_rows == 0


def test_source_schema_and_fixed_schema() -> None:
    ds = KafkaStateDataSource(CaseInsensitiveDict({**BOOT, "subscribe": "t"}))
    assert KafkaStateDataSource.name() == "kafkastate"
    assert ds.schema().fieldNames() == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    with_headers = KafkaStateDataSource(CaseInsensitiveDict({"includeHeaders": "true"}))
    assert with_headers.schema().fieldNames()[-1] == "headers"
    with pytest.raises(KafkaConfigurationError, match="fixed schema"):
        ds.reader(kafka_schema(include_headers=True))
    assert ds.reader(ds.schema()) is not None


def test_no_filter_pushdown_on_the_reader() -> None:
    # implementing pushFilters breaks planning unless a conf is set (SPARK.md G15)
    ds = KafkaStateDataSource(CaseInsensitiveDict({**BOOT, "subscribe": "t"}))
    reader = ds.reader(ds.schema())
    assert "pushFilters" not in type(reader).__dict__


def test_static_registration_module() -> None:
    import pyspark_kafkastate  # noqa: PLC0415

    assert pyspark_kafkastate.DefaultSource is KafkaStateDataSource
    assert pyspark_kafkastate.DefaultSource.name() == "kafkastate"


# ----------------------------------------------------------------------------- sink


def test_sink_column_checks() -> None:
    named = parse_sink_options({**BOOT, "topic": "t"})
    check_sink_columns({"value": "string"}, named)
    check_sink_columns({"value": "binary", "key": "string", "partition": "int"}, named)
    with pytest.raises(SinkSchemaError, match="needs a value column"):
        check_sink_columns({"key": "binary"}, named)
    with pytest.raises(SinkSchemaError, match="column value must be of type string or binary"):
        check_sink_columns({"value": "int"}, named)
    with pytest.raises(SinkSchemaError, match="column partition must be of type int"):
        check_sink_columns({"value": "string", "partition": "bigint"}, named)
    unnamed = parse_sink_options(BOOT)
    with pytest.raises(SinkSchemaError, match="set the option topic, or add a topic column"):
        check_sink_columns({"value": "string"}, unnamed)
    check_sink_columns({"value": "string", "topic": "string"}, unnamed)
    # a headers column is written whatever includeHeaders says, as Spark's sink does
    with pytest.raises(SinkSchemaError, match="column headers"):
        check_sink_columns({"value": "string", "headers": "array<string>"}, named)
    check_sink_columns(
        {"value": "string", "headers": "array<struct<key:string,value:binary>>"}, named
    )
    assert issubclass(SinkSchemaError, ValueError)


def test_writer_refuses_overwrite() -> None:
    ds = KafkaStateDataSource(CaseInsensitiveDict({**BOOT, "topic": "t"}))
    schema = kafka_schema()
    with pytest.raises(KafkaConfigurationError, match='mode\\("append"\\)'):
        ds.writer(schema, True)
    assert ds.writer(schema, False) is not None
    assert ds.streamWriter(schema, True) is not None  # complete/update output modes append


# --------------------------------------------------------------------------- pickling


def test_readers_writers_and_partitions_pickle() -> None:
    ds = KafkaStateDataSource(CaseInsensitiveDict({**BOOT, "subscribe": "t"}))
    for obj in (
        ds,
        ds.reader(ds.schema()),
        ds.streamReader(ds.schema()),
        KafkaStateDataSource(CaseInsensitiveDict({**BOOT, "topic": "t"})).writer(
            kafka_schema(), False
        ),
        RangePartition(r(0, 1, 2)),
        WriteResult(3),
    ):
        copy = pickle.loads(pickle.dumps(obj))
        assert type(copy) is type(obj)
    assert pickle.loads(pickle.dumps(RangePartition(r(0, 1, 2)))).range == r(0, 1, 2)


def test_stream_reader_read_limits() -> None:
    from pyspark.sql.streaming.datasource import (  # noqa: PLC0415
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
    )

    def limit(**options: str) -> object:
        reader = KafkaStateStreamReader(source(True, subscribe="t", **options))  # type: ignore[arg-type]
        return reader.getDefaultReadLimit()

    assert limit() == ReadAllAvailable()
    assert limit(maxOffsetsPerTrigger="7") == ReadMaxRows(7)
    assert limit(minOffsetsPerTrigger="3") == ReadMinRows(3)
    assert limit(maxOffsetsPerTrigger="7", minOffsetsPerTrigger="3") == ReadMaxRows(7)


def test_empty_partition_reads_nothing() -> None:
    # Spark turns an empty partition list into one None partition
    ds = KafkaStateDataSource(CaseInsensitiveDict({**BOOT, "subscribe": "t"}))
    assert list(ds.reader(ds.schema()).read(None)) == []
    assert list(ds.reader(ds.schema()).read(RangePartition(r(0, 5, 5)))) == []
    assert isinstance(pa.RecordBatch, type)
