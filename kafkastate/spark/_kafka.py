"""The Kafka side of the data source: offset queries on the driver, reading an offset range
into Arrow record batches and writing Arrow record batches on the executors.

Everything here opens its own :mod:`kafkastate.sync` client and closes it when done: the
objects Spark pickles carry options only (SPARK.md G6), and nothing is shared between tasks
(Python data sources have no locality to keep a cached consumer useful, G18).
"""

from __future__ import annotations

import logging
import operator
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

import pyarrow as pa

from kafkastate.errors import (
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
)
from kafkastate.spark._offsets import (
    EARLIEST,
    LATEST,
    DataLossError,
    OffsetRange,
    PartitionOffsets,
)
from kafkastate.spark._options import OffsetSpec, SinkOptions, SourceOptions

if TYPE_CHECKING:
    # Imported where used: a reading worker never imports the producer, a writing one
    # never the consumer (each Spark task's Python worker pays for what it imports).
    from kafkastate.adapters.blocking.consumer import KafkaConsumer
    from kafkastate.adapters.blocking.producer import FutureRecordMetadata, KafkaProducer

__all__ = [
    "ARROW_SCHEMA",
    "ARROW_SCHEMA_WITH_HEADERS",
    "OffsetReader",
    "SinkSchemaError",
    "check_sink_columns",
    "read_range",
    "report_data_loss",
    "to_record_batch",
    "write_batches",
]

log = logging.getLogger("kafkastate.spark")

_HEADER: Final = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADERS: Final = pa.list_(pa.field("element", _HEADER))
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
_TIMESTAMP_MS_TYPE: Final = pa.timestamp("ms", tz="UTC")  # Kafka's, cast to Spark's once
ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
)
"""The Arrow form of the source's schema: exactly what Spark expects of ``read()``
(``to_arrow_schema(schema, timezone="UTC")``, SPARK.md G8)."""
ARROW_SCHEMA_WITH_HEADERS: Final = ARROW_SCHEMA.append(pa.field("headers", _HEADERS))
""":data:`ARROW_SCHEMA` with ``includeHeaders``."""

# ConsumerRecord fields, by position
_OFFSET, _TIMESTAMP_MS, _TIMESTAMP_TYPE, _KEY, _VALUE, _HEADERS_OF = (
    operator.itemgetter(i) for i in (3, 4, 5, 6, 7, 8)
)
_MAX_POLL_RECORDS: Final = 10_000  # records per poll, and so per Arrow batch at most


class SinkSchemaError(KafkaConfigurationError):
    """The DataFrame written has no ``value`` column, a column of the wrong type, or no
    topic (neither a ``topic`` option nor a ``topic`` column); the message names it."""


def report_data_loss(message: str, *, fail: bool) -> None:
    """Raise :class:`DataLossError` (``failOnDataLoss`` true) or log a warning.

    Raises:
        DataLossError: when ``fail``.
    """
    if fail:
        raise DataLossError(
            message + ". Some data may have been lost: deleted by retention, or a topic or "
            "partition was deleted or recreated. If this is expected, set the option "
            "failOnDataLoss to false."
        )
    log.warning("%s; going on (failOnDataLoss is false)", message)


def _consumer(kafka: dict[str, Any], **defaults: Any) -> KafkaConsumer:
    from kafkastate.adapters.blocking.consumer import KafkaConsumer  # noqa: PLC0415

    # Asking for a deleted topic's metadata must not create it again.
    kwargs = {
        "client_id": "kafkastate-spark",
        "allow_auto_create_topics": False,
        **defaults,
        **kafka,
    }
    kwargs["enable_auto_commit"] = False
    kwargs["auto_offset_reset"] = "none"
    return KafkaConsumer(**kwargs)


class OffsetReader:
    """The driver's view of the subscribed partitions and their offsets (one consumer,
    opened on first use; close it, or use ``with``)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._client: KafkaConsumer | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the consumer, if open."""
        if self._client is not None:
            client, self._client = self._client, None
            client.close(autocommit=False)

    @property
    def client(self) -> KafkaConsumer:
        """The consumer, opened on first use."""
        if self._client is None:
            self._client = _consumer(self._options.kafka)
        return self._client

    def topic_partitions(self) -> list[tuple[str, int]]:
        """The partitions the subscription covers now, sorted.

        Raises:
            KafkaConfigurationError: an ``assign``ed partition does not exist.
        """
        sub = self._options.subscription
        client = self.client
        existing = client.topics()
        out: list[tuple[str, int]] = []
        for topic in sub.wanted_topics(existing):
            if topic not in existing:
                continue
            found = client.partitions_for_topic(topic) or set()
            if sub.partitions:
                missing = {p for t, p in sub.partitions if t == topic} - found
                if missing:
                    raise KafkaConfigurationError(
                        f"option assign: {topic} has no partition {sorted(missing)}"
                    )
                out.extend((t, p) for t, p in sub.partitions if t == topic)
            else:
                out.extend((topic, p) for p in found)
        if sub.partitions:
            absent = sorted({t for t, _ in sub.partitions} - existing)
            if absent:
                raise KafkaConfigurationError(f"option assign: no topic {absent}")
        return sorted(out)

    def earliest(self, tps: Iterable[tuple[str, int]]) -> PartitionOffsets:
        """Log start offsets."""
        wanted = list(tps)
        if not wanted:
            return {}
        found = self.client.beginning_offsets(wanted)
        return {(tp[0], tp[1]): o for tp, o in found.items()}

    def latest(self, tps: Iterable[tuple[str, int]]) -> PartitionOffsets:
        """Log end offsets (the last stable offset under ``read_committed``)."""
        wanted = list(tps)
        if not wanted:
            return {}
        found = self.client.end_offsets(wanted)
        return {(tp[0], tp[1]): o for tp, o in found.items()}

    def resolve(
        self, spec: OffsetSpec, tps: Sequence[tuple[str, int]], *, which: str
    ) -> PartitionOffsets:
        """Concrete offsets of ``tps`` for a starting or ending spec.

        Args:
            spec: the parsed option.
            tps: the subscribed partitions.
            which: ``"starting"`` or ``"ending"``, for errors and for what a timestamp with
                no record after it means (an error or latest for starting, per
                ``startingOffsetsByTimestampStrategy``; always latest for ending).

        Raises:
            KafkaConfigurationError: JSON offsets or timestamps that do not name exactly the
                subscribed partitions, or (starting, strategy ``error``) a timestamp after
                every record of a partition.
        """
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind in ("offsets", "timestamps"):
            option = f"{which}Offsets" if spec.kind == "offsets" else f"{which}OffsetsByTimestamp"
            given, subscribed = set(spec.offsets), set(tps)
            if given != subscribed:
                raise KafkaConfigurationError(
                    f"option {option} must name every subscribed partition and no other: "
                    f"missing {sorted(subscribed - given)}, unknown {sorted(given - subscribed)}"
                )
        if spec.kind == "offsets":
            out = dict(spec.offsets)
            earliest = self.earliest(tp for tp, o in out.items() if o == EARLIEST)
            latest = self.latest(tp for tp, o in out.items() if o == LATEST)
            out.update(earliest)
            out.update(latest)
            return {tp: out[tp] for tp in tps}
        if spec.kind == "timestamp":
            assert spec.timestamp is not None
            stamps = dict.fromkeys(tps, spec.timestamp)
            option = f"{which}Timestamp"
        else:
            stamps = {tp: spec.offsets[tp] for tp in tps}
        if not stamps:
            return {}
        found = self.client.offsets_for_times(stamps)
        out = {}
        past_end = []
        for tp in tps:
            hit = found.get(tp)  # type: ignore[call-overload]
            if hit is None:
                past_end.append(tp)
            else:
                out[tp] = hit.offset
        if past_end and which == "starting" and self._options.timestamp_strategy == "error":
            raise KafkaConfigurationError(
                f"option {option}: no record at or after the timestamp in {sorted(past_end)}; "
                "set startingOffsetsByTimestampStrategy to latest to start at the end there"
            )
        out.update(self.latest(past_end))
        return out


def to_record_batch(
    records: Sequence[Sequence[Any]], topic: str, partition: int, *, include_headers: bool
) -> pa.RecordBatch:
    """Consumer records (:class:`kafkastate.structs.ConsumerRecord` layout) as an Arrow
    batch of the source's schema."""
    n = len(records)
    # One pass per column (zip(*records) over thousands of records is several times slower).
    keys = list(map(_KEY, records))
    arrays = [
        pa.nulls(n, pa.binary()) if keys.count(None) == n else pa.array(keys, pa.binary()),
        pa.array(list(map(_VALUE, records)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(list(map(_OFFSET, records)), pa.int64()),
        pa.array(list(map(_TIMESTAMP_MS, records)), _TIMESTAMP_MS_TYPE).cast(_TIMESTAMP),
        pa.array(list(map(_TIMESTAMP_TYPE, records)), pa.int32()),
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    headers = [
        [{"key": k, "value": v} for k, v in h] if h else None for h in map(_HEADERS_OF, records)
    ]
    arrays.append(pa.array(headers, _HEADERS))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA_WITH_HEADERS)


def read_range(r: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """Read offsets ``[r.start, r.end)`` of one partition as Arrow record batches.

    Offsets the log no longer holds (below its start, or a log that now ends before
    ``r.end``) are data loss, per ``failOnDataLoss``. Gaps inside the log (compaction,
    transaction markers) are not.

    Raises:
        DataLossError: records are gone and ``failOnDataLoss`` is true.
        KafkaTimeoutError: no progress for ``kafkaConsumer.pollTimeoutMs``.
        KafkaError: the consumer failed otherwise.
    """
    if r.size <= 0:
        return
    tp = (r.topic, r.partition)
    where = f"{r.topic}-{r.partition}"
    fail = options.fail_on_data_loss
    consumer = _consumer(options.kafka, max_poll_records=_MAX_POLL_RECORDS)
    try:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        position = r.start
        deadline = time.monotonic() + options.poll_timeout
        while position < r.end:
            try:
                got = consumer.poll(timeout_ms=min(options.poll_timeout, 1.0) * 1000)
                after = consumer.position(tp)  # past the records, and any control records
            except OffsetOutOfRangeError:
                report_data_loss(
                    f"offset {position} of {where} is no longer in the log (reading up to {r.end})",
                    fail=fail,
                )
                consumer.seek_to_beginning(tp)
                position = consumer.position(tp)
                continue
            records: list[Any] = got.get(tp, [])  # type: ignore[call-overload]
            if records:
                if records[-1].offset >= r.end:
                    records = [x for x in records if x.offset < r.end]
                if records:
                    yield to_record_batch(
                        records, r.topic, r.partition, include_headers=options.include_headers
                    )
                deadline = time.monotonic() + options.poll_timeout
            position = after
            if records:
                continue
            highwater = consumer.highwater(tp)
            if highwater is not None and position >= highwater and highwater < r.end:
                report_data_loss(
                    f"{where} ends at offset {highwater}, before the {r.end} to read up to",
                    fail=fail,
                )
                return
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"no records from {where} at offset {position} (reading up to {r.end}) "
                    f"within {options.poll_timeout:g} s (kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        consumer.close(autocommit=False)


# ------------------------------------------------------------------------------ writing

_TEXT: Final = ("string", "binary")


def check_sink_columns(columns: dict[str, str], options: SinkOptions) -> None:
    """Check the DataFrame's columns against what the sink writes.

    Args:
        columns: column name -> Spark simple type name (``"string"``, ``"binary"``,
            ``"int"``, ``"array<struct<key:string,value:binary>>"``...).
        options: the sink's options.

    Raises:
        SinkSchemaError: no ``value`` column, no topic, or a column of the wrong type.
    """
    if "value" not in columns:
        raise SinkSchemaError(
            f"the DataFrame written to Kafka needs a value column (string or binary); "
            f"it has {sorted(columns)}"
        )
    wanted = {
        "value": _TEXT,
        "key": _TEXT,
        "topic": ("string",),
        "partition": ("int",),
        "headers": ("array<struct<key:string,value:binary>>",),
    }
    for name, types in wanted.items():
        if name in columns and columns[name] not in types:
            raise SinkSchemaError(
                f"column {name} must be of type {' or '.join(types)}, got {columns[name]}"
            )
    if options.topic is None and "topic" not in columns:
        raise SinkSchemaError("no topic: set the option topic, or add a topic column")


def _binary(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """A string or binary column as a list of bytes (None for null), or None if absent."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if column.null_count == len(column):
        return None
    if not pa.types.is_binary(column.type):
        column = column.cast(pa.binary())
    values: list[Any] = column.to_pylist()
    return values


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """A column as a list, or None if absent or all null."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if column.null_count == len(column):
        return None
    values: list[Any] = column.to_pylist()
    return values


_CHUNK_BYTES: Final = 256 * 1024  # a record batch's target size, unless kafka.batch.size
_RECORD_OVERHEAD: Final = 24  # a small record's framing, upper bound (record_size)
_REQUEST_MARGIN: Final = 1024  # a Produce request's own bytes around its batch


class _Outcome:
    """The acknowledgements of one task's batches, counted on the producer's IO thread."""

    def __init__(self) -> None:
        self.pending: list[tuple[FutureRecordMetadata, int]] = []
        self.failures: list[BaseException] = []

    def sent(self, future: FutureRecordMetadata, rows: int) -> None:
        self.pending.append((future, rows))
        future.add_errback(self.failures.append)

    def acknowledged(self) -> int:
        """Rows acknowledged (every future done: after a flush).

        Raises:
            KafkaError: the first failure (the others are logged), or a batch with no
                outcome.
        """
        if self.failures:
            for extra in self.failures[1:]:
                log.error("another record batch failed: %r", extra)
            error = self.failures[0]
            if isinstance(error, KafkaError):
                raise error
            raise KafkaError(f"a record batch failed: {error!r}") from error
        if not all(f.succeeded() for f, _ in self.pending):
            raise KafkaError("a record batch has no acknowledgement after the flush")
        return sum(rows for _, rows in self.pending)


class _BatchWriter:
    """Turns the task's Arrow record batches into Kafka record batches: rows grouped by
    topic and partition (an explicit ``partition``; else the Java default partitioner's
    ``murmur2(key)`` for a keyed row; else, for keyless rows, one record batch per
    partition in turn, as the uniform sticky partitioner does a batch at a time), cut at
    ``kafka.batch.size`` bytes (256 KiB by default), each sent with one
    :meth:`KafkaProducer.send_batch`."""

    def __init__(self, producer: KafkaProducer, options: SinkOptions, outcome: _Outcome) -> None:
        from kafkastate.core.producer.partitioner import default_partition  # noqa: PLC0415

        self._partition_of = default_partition
        self._producer = producer
        self._topic = options.topic
        self._outcome = outcome
        kafka = options.kafka
        request = int(kafka.get("max_request_size", 1048576)) - _REQUEST_MARGIN
        self._limit = max(1, min(int(kafka.get("batch_size", _CHUNK_BYTES)), request))
        self._counts: dict[str, int] = {}
        self._next: dict[str, int] = {}
        self.rows = 0

    def _partition_count(self, topic: str) -> int:
        n = self._counts.get(topic)
        if n is None:
            n = self._counts[topic] = len(self._producer.partitions_for(topic))
            self._next[topic] = random.randrange(n)  # spreading the first batch, not secrecy
        return n

    def write(self, batch: pa.RecordBatch) -> None:
        """Send every row of ``batch`` (waiting only for metadata or buffer memory).

        Raises:
            SinkSchemaError: a row with a null topic and no topic option.
            KafkaError: a batch was refused.
        """
        n = batch.num_rows
        if not n:
            return
        values = _binary(batch, "value") or [None] * n
        keys = _binary(batch, "key")
        raw_headers = _column(batch, "headers")
        headers = None
        if raw_headers is not None:
            headers = [
                [(h["key"], h["value"]) for h in row] if row else None for row in raw_headers
            ]
        topics = None if self._topic else _column(batch, "topic")
        if topics is None and not self._topic:
            raise SinkSchemaError(f"row {self.rows} has a null topic and no topic option")
        partitions = _column(batch, "partition")
        sizes = self._sizes(batch, n)
        if self._topic and partitions is None and keys is None:
            # every row keyless, to one topic: no per-row grouping
            rows = list(zip(repeat(None), values, headers or repeat(None)))
            self._send_keyless(self._topic, rows, sizes)
        else:
            self._send_grouped(n, values, keys, headers, topics, partitions, sizes)
        self.rows += n

    def _sizes(self, batch: pa.RecordBatch, n: int) -> list[int]:
        """Each row's encoded size, near enough to cut batches (an upper bound for
        small records; headers not counted)."""
        # imported here, not with the module: pyarrow.compute costs every Python worker
        # that imports the source (planners, readers, the streaming runner) ~0.3-0.7 s
        import pyarrow.compute as pc  # noqa: PLC0415

        total = None
        for name in ("key", "value"):
            index = batch.schema.get_field_index(name)
            if index < 0:
                continue
            column = batch.column(index)
            if not pa.types.is_binary(column.type):
                column = column.cast(pa.binary())
            lengths = pc.fill_null(pc.binary_length(column), 0)
            total = lengths if total is None else pc.add(total, lengths)
        if total is None:
            return [_RECORD_OVERHEAD] * n
        sizes: list[int] = pc.add(total, _RECORD_OVERHEAD).to_pylist()
        return sizes

    def _send_grouped(  # noqa: PLR0917 -- internal
        self,
        n: int,
        values: list[Any],
        keys: list[Any] | None,
        headers: list[Any] | None,
        topics: list[Any] | None,
        partitions: list[Any] | None,
        sizes: list[int],
    ) -> None:
        """Rows of several topics, explicit partitions or keys: grouped per (topic,
        partition), keyless rows per topic, in row order."""
        fixed = self._topic
        keyed: dict[tuple[str, int], tuple[list[Any], list[int]]] = {}
        keyless: dict[str, tuple[list[Any], list[int]]] = {}
        for i in range(n):
            topic = fixed or (topics[i] if topics is not None else None)
            if topic is None:
                raise SinkSchemaError(f"row {self.rows + i} has a null topic and no topic option")
            key = None if keys is None else keys[i]
            row = (key, values[i], None if headers is None else headers[i])
            partition = None if partitions is None else partitions[i]
            if partition is None and key is not None:
                partition = self._partition_of(key, self._partition_count(topic))
            if partition is None:
                group = keyless.get(topic)
                if group is None:
                    group = keyless[topic] = ([], [])
            else:
                group = keyed.get((topic, partition))
                if group is None:
                    group = keyed[(topic, partition)] = ([], [])
            group[0].append(row)
            group[1].append(sizes[i])
        for (topic, partition), (rows, row_sizes) in keyed.items():
            for start, end in self._cuts(row_sizes):
                self._send(topic, partition, rows[start:end])
        for topic, (rows, row_sizes) in keyless.items():
            self._send_keyless(topic, rows, row_sizes)

    def _send_keyless(self, topic: str, rows: list[Any], sizes: list[int]) -> None:
        count = self._partition_count(topic)
        for start, end in self._cuts(sizes):
            partition = self._next[topic]
            self._next[topic] = (partition + 1) % count
            self._send(topic, partition, rows[start:end])

    def _cuts(self, sizes: list[int]) -> Iterator[tuple[int, int]]:
        """``[start, end)`` row ranges of at most the batch limit's bytes (at least one
        row each)."""
        limit = self._limit
        start = total = 0
        for i, size in enumerate(sizes):
            if total + size > limit and i > start:
                yield start, i
                start, total = i, 0
            total += size
        if start < len(sizes):
            yield start, len(sizes)

    def _send(self, topic: str, partition: int, rows: list[Any]) -> None:
        future = self._producer.send_batch(topic, rows, partition=partition)
        self._outcome.sent(future, len(rows))


def write_batches(batches: Iterator[pa.RecordBatch], options: SinkOptions) -> int:
    """Produce every row of ``batches`` and wait until each is acknowledged.

    Returns:
        Rows written.

    Raises:
        SinkSchemaError: a row with a null topic and no topic option.
        KafkaError: a record batch failed (the first failure; the others are logged), or
            was refused (a row with neither key nor value, too large...).
    """
    from kafkastate.adapters.blocking.producer import KafkaProducer  # noqa: PLC0415

    outcome = _Outcome()
    with KafkaProducer(**{"client_id": "kafkastate-spark", **options.kafka}) as producer:
        writer = _BatchWriter(producer, options, outcome)
        for batch in batches:
            writer.write(batch)
            if outcome.failures:
                break
        producer.flush()
    return outcome.acknowledged()
