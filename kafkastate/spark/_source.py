"""The PySpark data source ``kafkastate``: batch and streaming reads and writes of Kafka.

Theory of operation. Spark runs each piece in a different Python process (SPARK.md G4): the
data source's ``reader()``/``streamReader()`` and ``partitions()``/``latestOffset()`` in
planner processes on the driver, ``read()``/``write()`` in executor workers, ``commit()`` of
a writer back on the driver. So the objects here hold parsed options only; clients are
opened where they are used and closed there (G6). The driver resolves offsets into
``[start, end)`` ranges, one Spark input partition each; an executor reads its range with
the blocking consumer and yields Arrow record batches (G8, G9).

Streaming offsets are Spark's Kafka source's JSON, canonical (sorted), so Spark sees "no new
data" as equal strings (G12). The source never lets offsets go backwards silently (G13): a
partition that lost records is data loss, raised or logged per ``failOnDataLoss``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafkastate.errors import KafkaConfigurationError
from kafkastate.spark._kafka import (
    OffsetReader,
    check_sink_columns,
    read_range,
    report_data_loss,
    write_batches,
)
from kafkastate.spark._offsets import (
    OffsetRange,
    PartitionOffsets,
    from_json_offsets,
    rate_limit,
    split_ranges,
    to_json_offsets,
)
from kafkastate.spark._options import (
    SinkOptions,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)

__all__ = [
    "KafkaStateDataSource",
    "KafkaStateReader",
    "KafkaStateStreamReader",
    "KafkaStateStreamWriter",
    "KafkaStateWriter",
    "RangePartition",
    "WriteResult",
    "kafka_schema",
]

log = logging.getLogger("kafkastate.spark")

_HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def kafka_schema(*, include_headers: bool = False) -> StructType:
    """The source's schema, the same as Spark's Kafka source's.

    Args:
        include_headers: add ``headers array<struct<key:string,value:binary>>``.

    Returns:
        ``key binary, value binary, topic string, partition int, offset long,
        timestamp timestamp, timestampType int`` (+ ``headers``).
    """
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS_TYPE))
    return StructType(fields)


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = kafka_schema(include_headers=options.include_headers)
    if schema.simpleString() != expected.simpleString():
        raise KafkaConfigurationError(
            "the kafkastate source has a fixed schema and cannot be given another: "
            f"expected {expected.simpleString()}, got {schema.simpleString()}"
        )


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark input partition: an offset range of one topic partition."""

    range: OffsetRange
    """What to read."""


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    """What one write task sent (every record acknowledged)."""

    records: int
    """Records written."""


def _read(partition: InputPartition | None, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    # Spark turns an empty partition list into one None partition.
    if isinstance(partition, RangePartition):
        yield from read_range(partition.range, options)


class KafkaStateDataSource(DataSource):
    """Kafka as a PySpark data source, on kafkastate's client: ``format("kafkastate")``.

    Options and schema are Spark's own Kafka source's and sink's (docs/spark.md):
    ``kafka.bootstrap.servers`` plus one of ``subscribe``, ``subscribePattern``,
    ``assign`` to read; ``kafka.bootstrap.servers`` plus a ``topic`` option or column to
    write (``.mode("append")``).
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``kafkastate`` (``kafka`` is Spark's own source)."""
        return "kafkastate"

    def schema(self) -> StructType:
        """The fixed schema; with the option ``includeHeaders`` true, with ``headers``."""
        raw = str(self.options.get("includeHeaders", "false")).strip().lower()
        return kafka_schema(include_headers=raw == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader.

        Raises:
            KafkaConfigurationError: a bad option, named; or a user-given schema.
        """
        options = parse_source_options(self.options, streaming=False)
        _check_schema(schema, options)
        return KafkaStateReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch stream reader.

        Raises:
            KafkaConfigurationError: a bad option, named; or a user-given schema.
        """
        options = parse_source_options(self.options, streaming=True)
        _check_schema(schema, options)
        return KafkaStateStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaStateWriter:
        """A batch writer; the save mode must be ``append``.

        Raises:
            KafkaConfigurationError: mode ``overwrite``, or a bad option.
            SinkSchemaError: no ``value`` column, no topic, or a column of the wrong type.
        """
        if overwrite:
            raise KafkaConfigurationError(
                'the kafkastate sink only appends: use .mode("append"), not overwrite'
            )
        options = parse_sink_options(self.options)
        check_sink_columns(_column_types(schema), options)
        return KafkaStateWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStateStreamWriter:
        """A streaming writer (every output mode appends to the topic, as Spark's sink).

        Raises:
            KafkaConfigurationError: a bad option.
            SinkSchemaError: no ``value`` column, no topic, or a column of the wrong type.
        """
        options = parse_sink_options(self.options)
        check_sink_columns(_column_types(schema), options)
        return KafkaStateStreamWriter(options)


def _column_types(schema: StructType) -> dict[str, str]:
    out = {}
    for field in schema.fields:
        kind: DataType = field.dataType
        out[field.name] = kind.simpleString()
    return out


class KafkaStateReader(DataSourceReader):
    """Batch reader: offsets resolved once, at planning (SPARK.md G19)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """One input partition per offset range (more with ``minPartitions`` or
        ``maxRecordsPerPartition``).

        Raises:
            KafkaConfigurationError: starting offsets after the ending ones, or offsets that
                do not match the subscription.
        """
        options = self.options
        with OffsetReader(options) as offsets:
            tps = offsets.topic_partitions()
            start = offsets.resolve(options.starting, tps, which="starting")
            end = offsets.resolve(options.ending, tps, which="ending")
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise KafkaConfigurationError(
                    f"the starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending "
                    f"offset {end[tp]} (options startingOffsets / endingOffsets)"
                )
            ranges.append(OffsetRange(topic=tp[0], partition=tp[1], start=start[tp], end=end[tp]))
        pieces = split_ranges(
            ranges,
            min_partitions=options.min_partitions,
            max_records_per_partition=options.max_records_per_partition,
        )
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor, as Arrow record batches."""
        return _read(partition, self.options)


class KafkaStateStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control (``maxOffsetsPerTrigger``,
    ``minOffsetsPerTrigger``/``maxTriggerDelay``) and ``Trigger.AvailableNow``.

    Spark keeps one instance for the query on the driver; its consumer is opened on first
    use and dropped when pickled.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._offsets: OffsetReader | None = None
        self._target: PartitionOffsets | None = None  # AvailableNow's end
        self._latest: PartitionOffsets | None = None  # for reportLatestOffset
        self._last_batch = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_offsets"] = None
        return state

    @property
    def _reader(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.options)
        return self._offsets

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts (``startingOffsets``, default latest; or a starting
        timestamp). Not persisted by Spark until the first batch commits (SPARK.md G14)."""
        reader = self._reader
        tps = reader.topic_partitions()
        return to_json_offsets(reader.resolve(self.options.starting, tps, which="starting"))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, else ``ReadMinRows(minOffsetsPerTrigger)``,
        else everything available."""
        options = self.options
        if options.max_offsets_per_trigger is not None:
            return ReadMaxRows(options.max_offsets_per_trigger)
        if options.min_offsets_per_trigger is not None:
            return ReadMinRows(options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an ``availableNow`` query: what the partitions hold now."""
        reader = self._reader
        self._target = reader.latest(reader.topic_partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: the latest offsets, cut by ``limit``.

        Partitions found since ``start`` begin at their earliest offset. A partition that
        is gone or whose log now ends before ``start`` is data loss.

        Raises:
            DataLossError: as described, with ``failOnDataLoss`` true.
        """
        options = self.options
        begin = from_json_offsets(start, what="the start offset")
        reader = self._reader
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = reader.latest(reader.topic_partitions())
        self._latest = latest
        for tp in sorted(set(begin) - set(latest)):
            report_data_loss(f"partition {tp[0]}-{tp[1]} is gone", fail=options.fail_on_data_loss)
        new = [tp for tp in latest if tp not in begin]
        begin.update(reader.earliest(new))
        for tp, log_end in latest.items():
            if log_end < begin[tp]:
                report_data_loss(
                    f"{tp[0]}-{tp[1]} now ends at offset {log_end}, before {begin[tp]} "
                    "(offsets went backwards)",
                    fail=options.fail_on_data_loss,
                )
                begin[tp] = log_end
        backlog = sum(max(latest[tp] - begin[tp], 0) for tp in latest)
        minimum = options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            minimum = limit.min_rows
        if (
            minimum is not None
            and self._target is None
            and not isinstance(limit, ReadAllAvailable)
            and backlog < minimum
            and time.monotonic() - self._last_batch < options.max_trigger_delay
        ):
            return to_json_offsets(from_json_offsets(start, what="the start offset"))
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        if backlog:
            self._last_batch = time.monotonic()
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The latest offsets seen by the last :meth:`latestOffset` (query progress)."""
        return None if self._latest is None else to_json_offsets(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The ranges from ``start`` to ``end``; partitions new in ``end`` from earliest.

        Raises:
            DataLossError: a range that ends before it starts, with ``failOnDataLoss``.
        """
        begin = from_json_offsets(start, what="the start offset")
        until = from_json_offsets(end, what="the end offset")
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self._reader.earliest(new))
        ranges = []
        for tp in sorted(until):
            first, last = begin[tp], until[tp]
            if last < first:
                report_data_loss(
                    f"{tp[0]}-{tp[1]}: end offset {last} is before start {first}",
                    fail=self.options.fail_on_data_loss,
                )
                continue
            ranges.append(OffsetRange(topic=tp[0], partition=tp[1], start=first, end=last))
        pieces = split_ranges(
            ranges,
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
        )
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor, as Arrow record batches."""
        return _read(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing: offsets live in Spark's checkpoint, not in a Kafka consumer group."""

    def stop(self) -> None:
        """Close the driver's consumer."""
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


class KafkaStateWriter(DataSourceArrowWriter):
    """Batch sink: each task produces its rows and waits for every acknowledgement
    (at-least-once: a retried task writes its rows again)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        """Produce the task's rows.

        Raises:
            KafkaError: a record failed.
        """
        return WriteResult(write_batches(iterator, self.options))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log how many records were written."""
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("kafkastate sink: %d records written", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: what was acknowledged stays in Kafka."""
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.warning("kafkastate sink: job aborted after %d records were written", total)


class KafkaStateStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: each micro-batch task produces its rows and waits for them."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        """Produce the task's rows.

        Raises:
            KafkaError: a record failed.
        """
        return WriteResult(write_batches(iterator, self.options))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log how many records the micro-batch wrote."""
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("kafkastate sink: batch %d wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo (at-least-once)."""
        log.warning("kafkastate sink: batch %d aborted", batchId)
