"""The Kafka side of the data source: offset queries on the driver, reading an offset range
into Arrow record batches and writing Arrow record batches on the executors.

Everything here opens its own :mod:`kafkastate.sync` client and closes it when done: the
objects Spark pickles carry options only (SPARK.md G6), and nothing is shared between tasks
(Python data sources have no locality to keep a cached consumer useful, G18).
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, Self

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
from kafkastate.sync import KafkaConsumer, KafkaProducer

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
    arrays = [
        pa.array(list(map(_KEY, records)), pa.binary()),
        pa.array(list(map(_VALUE, records)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(list(map(_OFFSET, records)), pa.int64()),
        pa.array(list(map(_TIMESTAMP_MS, records)), pa.int64())
        .cast(pa.timestamp("ms", tz="UTC"))
        .cast(_TIMESTAMP),
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


def _as_binary(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    values: list[Any] = column.to_pylist()
    return values


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    values: list[Any] = batch.column(index).to_pylist()
    return values


def write_batches(batches: Iterator[pa.RecordBatch], options: SinkOptions) -> int:
    """Produce every row of ``batches`` and wait until each is acknowledged.

    Returns:
        Rows written.

    Raises:
        SinkSchemaError: a row with a null topic and no topic option.
        KafkaError: a record failed (the first failure; the others are logged).
    """
    failures: list[BaseException] = []
    count = 0
    with KafkaProducer(**{"client_id": "kafkastate-spark", **options.kafka}) as producer:
        send = producer.send
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            values = _as_binary(batch, "value")
            assert values is not None  # checked on the driver
            keys = _as_binary(batch, "key") or [None] * n
            topics = [options.topic] * n if options.topic else _column(batch, "topic")
            assert topics is not None
            partitions = _column(batch, "partition") or [None] * n
            raw_headers = _column(batch, "headers")
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise SinkSchemaError(f"row {count + i} has a null topic and no topic option")
                headers = None
                if raw_headers is not None and raw_headers[i]:
                    headers = [(h["key"], h["value"]) for h in raw_headers[i]]
                future = send(
                    topic,
                    value=values[i],
                    key=keys[i],
                    headers=headers,
                    partition=partitions[i],
                )
                if future.is_done:
                    if future.exception is not None:
                        failures.append(future.exception)
                else:
                    future.add_errback(failures.append)
            count += n
            if failures:
                break
        producer.flush()
    if failures:
        for extra in failures[1:]:
            log.error("another record failed: %r", extra)
        error = failures[0]
        if isinstance(error, KafkaError):
            raise error
        raise KafkaError(f"a record failed: {error!r}") from error
    return count
