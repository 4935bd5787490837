"""Record batches: encode magic 2, decode magic 2 and legacy magic 0/1 message sets.

Theory of operation
-------------------
A Produce request's and a Fetch response's ``records`` field is a run of entries that all start
``baseOffset int64, length int32`` and keep their magic byte at offset 16 (protocol guide,
"Record Batch" and "Legacy Message Sets"), so one loop walks both layouts:

* magic 2 (KIP-98): a 61-byte header, then ``recordCount`` records, compressed or not as one
  block. The header's CRC32C covers ``attributes`` to the end; ``baseOffset``,
  ``length`` and ``partitionLeaderEpoch`` sit outside it so brokers can rewrite them.
* magic 0/1: one message per entry; a compressed *wrapper* message carries an inner message set
  in its value. Magic 1 inner offsets are relative to the wrapper (KIP-31), and a
  LOG_APPEND_TIME wrapper overrides the inner timestamps (KIP-32).

Decoding (:func:`iter_batches`) parses and checks each batch header eagerly (lengths, magic,
CRC) and the records only when asked (:meth:`RecordBatch.records`), in one tight loop over a
``bytes`` buffer: varints take an inline fast path for one- and two-byte values, each key and
value is sliced once as ``bytes`` and each :class:`Record` is a named tuple built with
``tuple.__new__`` (measured: docs/benchmarks.md; a ``memoryview`` slice is no cheaper at 100 B,
costs more once decoded to ``str``, is refused by ``json.loads`` and pins the whole buffer). A
final entry cut short is the broker stopping at the fetch size, not corruption: it is skipped
(as the Java ``ByteBufferLogInputStream`` does). Anything else malformed raises
:class:`~kafkastate.errors.CorruptRecordError` naming the problem and the batch's base offset;
Python's own ``IndexError``/``struct.error`` never reach the caller.

Encoding (:class:`RecordBatchBuilder`) collects each record's pieces in a list, with zigzag
varints of small numbers taken from a precomputed table, and joins, compresses and checksums
once in :meth:`RecordBatchBuilder.build`.

Both per-record loops have a C twin in the optional extension ``_speedups`` (built where a
compiler exists), used by default; this module stays the reference and the fallback, and
:func:`set_speedups` switches between the two (measured: docs/benchmarks.md).

Pure: no IO, no clock, no randomness.
"""

from __future__ import annotations

import enum
import itertools
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple, TypeVar

import crc32c as _crc32c

from kafkastate.core.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    compress,
    decompress,
    xxh32,
)
from kafkastate.errors import CorruptRecordError, KafkaConfigurationError, UnsupportedCodecError

_T = TypeVar("_T")

__all__ = [
    "RECORD_BATCH_OVERHEAD",
    "SPEEDUPS_AVAILABLE",
    "Batch",
    "Compression",
    "ControlRecordType",
    "EndTransactionMarker",
    "Header",
    "LegacyBatch",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "TimestampType",
    "build_control_batch",
    "build_legacy_message_set",
    "consumer_tuples",
    "estimate_batch_size_upper_bound",
    "estimate_record_size_upper_bound",
    "iter_batches",
    "record_size",
    "set_speedups",
    "speedups_enabled",
]

_crc32c_fn = _crc32c.crc32c

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]
"""One record header: a UTF-8 key and a value that may be null."""
_HeadersIn = Sequence[tuple[str, Buffer | None]]


class TimestampType(enum.IntEnum):
    """What a record's timestamp means (attribute bit 3; KIP-32)."""

    NO_TIMESTAMP_TYPE = -1  # magic 0: no timestamps at all
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(enum.IntEnum):
    """The ``type`` in a control record's key (KIP-98; KIP-595 and KIP-853 added KRaft types)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class Record(NamedTuple):
    """One decoded record."""

    offset: int
    """Absolute offset in the partition."""
    timestamp: int
    """Milliseconds since the epoch; -1 for magic 0 messages (no timestamp)."""
    timestamp_type: TimestampType
    """CREATE_TIME, LOG_APPEND_TIME (then ``timestamp`` is the broker's), or NO_TIMESTAMP_TYPE."""
    key: bytes | None
    """The key, ``None`` if null."""
    value: bytes | None
    """The value, ``None`` if null (a tombstone)."""
    headers: tuple[Header, ...]
    """Headers in wire order (always empty before magic 2)."""


class EndTransactionMarker(NamedTuple):
    """The marker a COMMIT or ABORT control batch carries (KIP-98)."""

    type: ControlRecordType
    """COMMIT or ABORT."""
    coordinator_epoch: int
    """The epoch of the transaction coordinator that wrote the marker."""


# ---------------------------------------------------------------------------------------------
# wire constants (protocol guide, "Record Batch")

RECORD_BATCH_OVERHEAD: Final = 61
"""Size of a magic 2 batch header, records excluded."""

_LOG_OVERHEAD: Final = 12  # baseOffset int64 + length int32, common to every magic
_MAGIC_OFFSET: Final = 16
_HEADER_SIZE_UP_TO_MAGIC: Final = 17
_CRC_START: Final = 21  # the CRC32C covers attributes .. end of batch
_V2_MIN_LENGTH: Final = RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD  # 49
_LEGACY_MIN_LENGTH: Final = 14  # crc 4 + magic 1 + attributes 1 + key len 4 + value len 4

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_V2_HEADER: Final = struct.Struct(">qiibIHiqqqhii")
_V2_HEAD: Final = struct.Struct(">qiibI")  # up to and including the CRC
_V2_TAIL: Final = struct.Struct(">Hiqqqhii")  # attributes .. recordCount (CRC-covered)
_LOG_ENTRY: Final = struct.Struct(">qi")
_LEGACY_V0: Final = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_V1: Final = struct.Struct(">qiIbbq")  # ... + timestamp
_INT32: Final = struct.Struct(">i")
_CONTROL_KEY: Final = struct.Struct(">hh")  # version, type
_END_TXN_VALUE: Final = struct.Struct(">hi")  # version, coordinator epoch

_ATTR_CODEC: Final = 0x07
_ATTR_TIMESTAMP_TYPE: Final = 0x08
_ATTR_TRANSACTIONAL: Final = 0x10
_ATTR_CONTROL: Final = 0x20
_ATTR_DELETE_HORIZON: Final = 0x40  # KIP-534

_NO_HEADERS: Final[tuple[Header, ...]] = ()
_CREATE: Final = TimestampType.CREATE_TIME
_APPEND: Final = TimestampType.LOG_APPEND_TIME
_NO_TS_TYPE: Final = TimestampType.NO_TIMESTAMP_TYPE


class _Malformed(Exception):
    """Internal: raised inside record parsing, re-raised as CorruptRecordError with context."""


# ---------------------------------------------------------------------------------------------
# optional C accelerator (_speedups.c): the per-record loops of decoding (_parse_records) and
# encoding (RecordBatchBuilder.append), compiled. Built by setup.py where a compiler exists,
# absent otherwise; the Python code stays the reference and the fallback, and
# set_speedups(False) selects it (tests and the benchmark compare the two).

try:
    from kafkastate.core.protocol import _speedups
except ImportError:  # built without a compiler: pure Python
    _speedups = None  # type: ignore[assignment]
else:
    _speedups.setup(Record, _Malformed)

SPEEDUPS_AVAILABLE: Final = _speedups is not None
"""True if the C accelerator ``kafkastate.core.protocol._speedups`` was built and imports."""

_ParseRecords = Callable[..., list[Any]]  # 8 arguments (Records) or 12 (consumer records)
_AppendRecord = Callable[
    [list[bytes | Buffer], int, int, Buffer | None, Buffer | None, _HeadersIn], int | None
]
_AppendRecords = Callable[
    [list[bytes | Buffer], int, int, int, list[Any], int], tuple[int, int, int]
]
_ConsumerTuples = Callable[[type[Any], list[Record], str, int, int], list[Any]]
# The switch (set_speedups): None selects the Python code.
_c_parse_records: _ParseRecords | None = None if _speedups is None else _speedups.parse_records
_c_append_record: _AppendRecord | None = None if _speedups is None else _speedups.append_record
# (getattr: an extension built from an older _speedups.c lacks it; the loop then stays Python)
_c_append_records: _AppendRecords | None = getattr(_speedups, "append_records", None)
_c_consumer_tuples: _ConsumerTuples | None = (
    None if _speedups is None else _speedups.consumer_records
)
# the keyed producer's hash (partitioner.murmur2), compiled; switched with the codec
_c_murmur2: Callable[[Buffer], int] | None = None if _speedups is None else _speedups.murmur2
# the accumulator's per-record hot paths (Accumulator.append_sticky / append_keyed),
# compiled; switched with the codec (the accumulator registers its classes with the module)
_c_lane_sticky: Callable[..., Any] | None = None if _speedups is None else _speedups.lane_sticky
_c_lane_keyed: Callable[..., Any] | None = None if _speedups is None else _speedups.lane_keyed
_c_lane_hashed: Callable[..., Any] | None = None if _speedups is None else _speedups.lane_hashed


def register_lane_classes(
    accumulator: type, batch: type, builder: type, sticky: type, partitioner: type
) -> None:
    """Tell the C accelerator (if built) the classes whose ``__slots__`` its compiled
    producer hot paths read and write (``Accumulator``, ``ProducerBatch``,
    :class:`RecordBatchBuilder`, the partitioner's sticky state, ``Partitioner``); the
    accumulator calls this once, when it is imported.

    Raises:
        TypeError: a name the hot paths need is not a slot of its class.
    """
    if _speedups is not None:
        _speedups.setup_lanes(accumulator, batch, builder, sticky, partitioner)


def set_speedups(enabled: bool) -> bool:
    """Choose between the C record codec and the pure-Python one (process-wide).

    The C accelerator decodes records (:meth:`RecordBatch.records`), encodes them
    (:meth:`RecordBatchBuilder.append`), hashes the producer's keys
    (:func:`kafkastate.core.producer.partitioner.murmur2`) and runs the accumulator's
    per-record hot paths (``Accumulator.append_sticky`` and ``append_keyed``); it is used by
    default when it was built. Both give
    the same records, bytes and error types. Meant for tests and benchmarks.

    Args:
        enabled: use the C accelerator (True) or the pure-Python reference (False).

    Returns:
        Whether the C accelerator was in use before the call, to restore it afterwards.

    Raises:
        KafkaConfigurationError: ``enabled`` is true but the C accelerator is not built.
    """
    global _c_parse_records, _c_append_record, _c_append_records  # noqa: PLW0603
    global _c_consumer_tuples, _c_murmur2  # noqa: PLW0603
    global _c_lane_sticky, _c_lane_keyed, _c_lane_hashed  # noqa: PLW0603
    previous = _c_parse_records is not None
    if not enabled:
        _c_parse_records = _c_append_record = _c_consumer_tuples = _c_murmur2 = None
        _c_append_records = None
        _c_lane_sticky = _c_lane_keyed = _c_lane_hashed = None
    elif _speedups is None:
        raise KafkaConfigurationError(
            "the C accelerator kafkastate.core.protocol._speedups is not built"
        )
    else:
        _c_parse_records = _speedups.parse_records
        _c_append_record = _speedups.append_record
        _c_append_records = getattr(_speedups, "append_records", None)
        _c_consumer_tuples = _speedups.consumer_records
        _c_murmur2 = _speedups.murmur2
        _c_lane_sticky = _speedups.lane_sticky
        _c_lane_keyed = _speedups.lane_keyed
        _c_lane_hashed = _speedups.lane_hashed
    return previous


def consumer_tuples(
    cls: type[_T], records: list[Record], topic: str, partition: int, leader_epoch: int
) -> list[_T]:
    """Records as ``cls`` tuples of the consumer-record layout (one call per run of records
    of one partition; the adapters' hot path, in C where it was built).

    The 13 fields, in order: topic, partition, leader_epoch, offset, timestamp,
    ``int(timestamp_type)``, key, value, headers (the record's tuple), None (no per-record
    checksum in v2), key size, value size, header size (the sum of ``len(key) + len(value)``
    over the headers); a size is -1 for a null key or value and for no headers.

    Args:
        cls: a tuple subclass with those 13 fields
            (:class:`kafkastate.structs.ConsumerRecord`).
        records: decoded records of one partition.
        topic: their topic.
        partition: their partition.
        leader_epoch: the leader epoch of the batch they came in.

    Returns:
        One ``cls`` per record, in order.
    """
    c_tuples = _c_consumer_tuples
    if c_tuples is not None:
        return c_tuples(cls, records, topic, partition, leader_epoch)
    new: Any = tuple.__new__
    return [
        new(
            cls,
            (
                topic,
                partition,
                leader_epoch,
                r.offset,
                r.timestamp,
                int(r.timestamp_type),
                r.key,
                r.value,
                r.headers,
                None,
                -1 if r.key is None else len(r.key),
                -1 if r.value is None else len(r.value),
                sum(len(k) + (0 if v is None else len(v)) for k, v in r.headers)
                if r.headers
                else -1,
            ),
        )
        for r in records
    ]


def speedups_enabled() -> bool:
    """Tell whether records are encoded and decoded by the C accelerator.

    Returns:
        True if ``_speedups`` is in use, False for pure Python.
    """
    return _c_parse_records is not None


# ---------------------------------------------------------------------------------------------
# varints (protocol guide, "Record": zigzag-encoded, as in protobuf)


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_ZZ_N: Final = 8192
_ZZ: Final[list[bytes]] = [_zigzag_varint(i) for i in range(_ZZ_N)]
"""Zigzag varints of 0 .. _ZZ_N-1: offset deltas, small timestamp deltas and lengths."""
_NULL_LEN: Final = _zigzag_varint(-1)
_UNZIGZAG: Final = tuple((i >> 1) ^ -(i & 1) for i in range(0x80))
"""Values of the one-byte zigzag varints."""


def _varint_size(n: int) -> int:
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def _read_uvarint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Slow path: the raw (still zigzagged) varint at ``pos`` and the position after it."""
    result = 0
    shift = 0
    limit = pos + max_bytes
    while True:
        if pos >= limit:
            raise _Malformed(f"varint longer than {max_bytes} bytes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _read_varint(buf: bytes, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    raw, pos = _read_uvarint(buf, pos, max_bytes)
    return (raw >> 1) ^ -(raw & 1), pos


# ---------------------------------------------------------------------------------------------
# sizes


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: Buffer | None,
    value: Buffer | None,
    headers: _HeadersIn = (),
) -> int:
    """Return the exact encoded size of one magic 2 record, its length prefix included.

    Args:
        offset_delta: the record's offset minus the batch's base offset.
        timestamp_delta: the record's timestamp minus the batch's base timestamp.
        key: the key, or ``None``.
        value: the value, or ``None``.
        headers: ``(key, value)`` pairs.

    Returns:
        The number of bytes the record takes in a batch's records section.
    """
    body = 1 + _varint_size(timestamp_delta) + _varint_size(offset_delta)
    body += _bytes_field_size(key) + _bytes_field_size(value) + _headers_size(headers)
    return _varint_size(body) + body


def _bytes_field_size(data: Buffer | None) -> int:
    if data is None:
        return 1
    n = len(data)
    return _varint_size(n) + n


def _headers_size(headers: _HeadersIn) -> int:
    size = _varint_size(len(headers))
    for hkey, hvalue in headers:
        k = len(hkey.encode())
        size += _varint_size(k) + k + _bytes_field_size(hvalue)
    return size


def estimate_record_size_upper_bound(
    key: Buffer | None, value: Buffer | None, headers: _HeadersIn = ()
) -> int:
    """Bound a record's encoded size without knowing its offset or timestamp delta.

    Takes the widest offset delta (5-byte varint) and timestamp delta (10-byte varlong), like
    the Java ``DefaultRecord.recordSizeUpperBound``.

    Args:
        key: the key, or ``None``.
        value: the value, or ``None``.
        headers: ``(key, value)`` pairs.

    Returns:
        An upper bound on :func:`record_size` for any deltas.
    """
    body = 1 + 10 + 5 + _bytes_field_size(key) + _bytes_field_size(value)
    body += _headers_size(headers) if headers else 1
    return _varint_size(body) + body


def estimate_batch_size_upper_bound(
    key: Buffer | None, value: Buffer | None, headers: _HeadersIn = ()
) -> int:
    """Bound the size of an uncompressed batch holding just this record.

    The producer's accumulator uses it to size a new batch for a record larger than
    ``batch.size`` (Java ``AbstractRecords.estimateSizeInBytesUpperBound``).

    Args:
        key: the key, or ``None``.
        value: the value, or ``None``.
        headers: ``(key, value)`` pairs.

    Returns:
        ``RECORD_BATCH_OVERHEAD`` plus :func:`estimate_record_size_upper_bound`.
    """
    return RECORD_BATCH_OVERHEAD + estimate_record_size_upper_bound(key, value, headers)


# ---------------------------------------------------------------------------------------------
# encoding


def _encode_headers(headers: _HeadersIn) -> bytes:
    parts = [_zigzag_varint(len(headers))]
    for hkey, hvalue in headers:
        if not isinstance(hkey, str):
            raise KafkaConfigurationError(f"header key must be str, not {type(hkey).__name__}")
        kb = hkey.encode()
        parts.append(_zigzag_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(_NULL_LEN)
        else:
            parts.append(_zigzag_varint(len(hvalue)))
            parts.append(bytes(hvalue))
    return b"".join(parts)


class RecordBatchBuilder:
    """Accumulates records and encodes them as one magic 2 record batch.

    Typical use: ``append`` until :meth:`size_in_bytes` reaches ``batch.size``, then
    :meth:`build`. Offsets are ``base_offset + offset_delta``; a producer leaves
    ``base_offset`` at 0 and the broker assigns the real one.
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_ts",
        "_compression",
        "_level",
        "_max_ts",
        "_next_delta",
        "_partition_leader_epoch",
        "_parts",
        "_producer_epoch",
        "_producer_id",
        "_size",
    )

    def __init__(
        self,
        *,
        magic: int = 2,
        compression: Compression = Compression.NONE,
        compression_level: int | None = None,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        base_offset: int = 0,
    ) -> None:
        """Start an empty batch.

        Args:
            magic: must be 2; kafkastate writes no older format (Kafka 4 accepts no other).
            compression: codec for the records section.
            compression_level: KIP-390 level, ``None`` for the codec's default.
            timestamp_type: CREATE_TIME for producers; LOG_APPEND_TIME as a broker writes it.
            producer_id: idempotent/transactional producer id (KIP-98), -1 if none.
            producer_epoch: its epoch, -1 if none.
            base_sequence: sequence number of the first record, -1 if not idempotent.
            is_transactional: set attribute bit 4.
            is_control: set attribute bit 5 (see :func:`build_control_batch`).
            partition_leader_epoch: -1 from producers; brokers stamp it (KIP-101).
            base_offset: offset of the first record; 0 from producers.

        Raises:
            KafkaConfigurationError: ``magic`` is not 2, or ``compression`` or
                ``timestamp_type`` is not a valid value.
        """
        if magic != 2:
            raise KafkaConfigurationError(f"only magic 2 batches can be written, not {magic}")
        try:
            codec = Compression(compression)
            ts_type = TimestampType(timestamp_type)
        except ValueError as exc:
            raise KafkaConfigurationError(str(exc)) from None
        if ts_type is _NO_TS_TYPE:
            raise KafkaConfigurationError("magic 2 batches always have a timestamp type")
        self._compression = codec
        self._level = compression_level
        self._attributes = (
            codec
            | (_ATTR_TIMESTAMP_TYPE if ts_type is _APPEND else 0)
            | (_ATTR_TRANSACTIONAL if is_transactional else 0)
            | (_ATTR_CONTROL if is_control else 0)
        )
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._base_offset = base_offset
        self._parts: list[bytes | Buffer] = []
        self._size = 0
        self._next_delta = 0
        self._base_ts: int | None = None
        self._max_ts = -1

    @property
    def record_count(self) -> int:
        """Number of records appended so far."""
        return len(self._parts) >> 2

    @property
    def compression(self) -> Compression:
        """The codec :meth:`build` will apply."""
        return self._compression

    def size_in_bytes(self) -> int:
        """Return the batch's size if built now without compression.

        For a compressed batch this is the uncompressed size, an upper bound in practice (the
        Java producer also estimates from the uncompressed size until it has a ratio).

        Returns:
            ``RECORD_BATCH_OVERHEAD`` plus the encoded size of the records so far.
        """
        return RECORD_BATCH_OVERHEAD + self._size

    def has_room_for(
        self,
        timestamp_ms: int,
        key: Buffer | None,
        value: Buffer | None,
        headers: _HeadersIn = (),
        *,
        limit: int,
    ) -> bool:
        """Tell whether appending this record keeps the batch within ``limit`` bytes.

        An empty builder always has room, so one record larger than ``limit`` still gets a batch
        of its own (Java ``MemoryRecordsBuilder.hasRoomFor``).

        Args:
            timestamp_ms: the record's timestamp.
            key: the key, or ``None``.
            value: the value, or ``None``.
            headers: ``(key, value)`` pairs.
            limit: the batch size limit in bytes (``batch.size``).

        Returns:
            True if the record fits (or the batch is empty).
        """
        if not self._parts:
            return True
        base_ts = self._base_ts if self._base_ts is not None else timestamp_ms
        size = record_size(self._next_delta, timestamp_ms - base_ts, key, value, headers)
        return RECORD_BATCH_OVERHEAD + self._size + size <= limit

    def append(
        self,
        timestamp_ms: int,
        key: Buffer | None,
        value: Buffer | None,
        headers: _HeadersIn = (),
    ) -> int:
        """Append a record at the next offset.

        Args:
            timestamp_ms: milliseconds since the epoch (the first record's becomes the batch's
                base timestamp; deltas may be negative).
            key: the key, or ``None``.
            value: the value, or ``None``. Bytes-like values are referenced, not copied, until
                :meth:`build`: do not mutate them in between.
            headers: ``(key, value)`` pairs; keys are encoded as UTF-8.

        Returns:
            The record's offset delta (its index in the batch).

        Raises:
            KafkaConfigurationError: an argument has the wrong type (a ``float`` timestamp, a
                ``str`` key, a header key that is not a ``str``…); the builder is unchanged.
        """
        # Protocol guide, "Record": length varint, attributes int8 (unused, 0), timestampDelta
        # varlong, offsetDelta varint, keyLength varint, key, valueLength varint, value,
        # header count varint, headers. The C accelerator encodes the same four parts (it
        # returns None for rare input shapes it leaves to Python); the Python body is inlined
        # (no helper call): this is the producer's per-record cost. State changes only after
        # encoding succeeded.
        od = self._next_delta
        base_ts = self._base_ts
        try:
            tsd = 0 if base_ts is None else timestamp_ms - base_ts
            c_append = _c_append_record
            size = None if c_append is None else c_append(self._parts, od, tsd, key, value, headers)
            if size is None:
                zz = _ZZ
                head = b"\x00" + (zz[tsd] if 0 <= tsd < _ZZ_N else _zigzag_varint(tsd))
                head += zz[od] if od < _ZZ_N else _zigzag_varint(od)
                if key is None:
                    head += _NULL_LEN
                else:
                    klen = len(key)
                    head += (zz[klen] if klen < _ZZ_N else _zigzag_varint(klen)) + key
                if value is None:
                    head += _NULL_LEN
                    value = b""
                    vlen = 0
                else:
                    vlen = len(value)
                    head += zz[vlen] if vlen < _ZZ_N else _zigzag_varint(vlen)
                tail = _encode_headers(headers) if headers else b"\x00"
                body = len(head) + vlen + len(tail)
                prefix = zz[body] if body < _ZZ_N else _zigzag_varint(body)
                # Always four parts per record: record_count is len(_parts) // 4.
                self._parts += (prefix, head, value, tail)
                size = len(prefix) + body
        except (TypeError, ValueError, BufferError) as exc:
            # a float timestamp, a str key, a non-bytes header value, a header that is not a
            # pair, a header key that is not valid Unicode (UnicodeEncodeError), a key that is
            # a non-contiguous memoryview (BufferError)...
            raise KafkaConfigurationError(f"invalid record argument: {exc}") from None
        if base_ts is None:
            self._base_ts = self._max_ts = timestamp_ms
        elif timestamp_ms > self._max_ts:
            self._max_ts = timestamp_ms
        self._next_delta = od + 1
        self._size += size
        return od

    def append_value(self, timestamp_ms: int, value: bytes, key: bytes | None = None) -> int:
        """:meth:`append` of a record without headers, for the producer's hot paths (one
        call per record instead of :meth:`append` and :meth:`size_in_bytes`).

        Args:
            timestamp_ms: milliseconds since the epoch (an ``int``).
            value: the value (``bytes``; referenced, not copied, until :meth:`build`).
            key: the key (``bytes``), or None.

        Returns:
            :meth:`size_in_bytes` after the append.

        Raises:
            KafkaConfigurationError: an argument has the wrong type; the builder is
                unchanged.
        """
        base_ts = self._base_ts
        c_append = _c_append_record
        size = None
        if c_append is not None and base_ts is not None:
            # a later record of the batch, with the accelerator: the common case, inlined
            od = self._next_delta
            try:
                size = c_append(self._parts, od, timestamp_ms - base_ts, key, value, ())
            except (TypeError, ValueError, BufferError) as exc:
                raise KafkaConfigurationError(f"invalid record argument: {exc}") from None
        if size is None:  # the first record, no accelerator, or a delta beyond int64
            self.append(timestamp_ms, key, value)
            return RECORD_BATCH_OVERHEAD + self._size
        if timestamp_ms > self._max_ts:  # noqa: PLR1730 -- the hot path: no max() call
            self._max_ts = timestamp_ms
        self._next_delta = od + 1
        size += self._size
        self._size = size
        return RECORD_BATCH_OVERHEAD + size

    def append_run(self, records: list[Any], start: int = 0) -> int:
        """:meth:`append` of ``records[start:]`` in one compiled loop, up to the first record
        the loop leaves to :meth:`append` (the bulk appends' hot path: a producer's
        ``send_batch``).

        The loop takes a record exactly when :meth:`append` would encode it in C and every
        argument is valid: a ``(timestamp_ms, key, value, headers)`` tuple of an ``int``
        timestamp in 0..2**63-1, ``bytes`` or None key and value, and no headers or a list
        or tuple of ``(str, bytes-like or None)`` pairs. It never takes the batch's first
        record (which sets the base timestamp), and takes none without the C accelerator.

        Args:
            records: the records (a ``list``).
            start: the index of the first one to append.

        Returns:
            The index of the first record not appended (``len(records)`` when all were);
            call :meth:`append` for it, then this again.

        Raises:
            KafkaConfigurationError: a header key that is not a ``str`` (or not valid
                Unicode); the builder is unchanged.
        """
        c_run = _c_append_records
        base_ts = self._base_ts
        if c_run is None or base_ts is None or base_ts < 0 or type(records) is not list:
            return start
        try:
            stop, added, max_ts = c_run(
                self._parts, self._next_delta, base_ts, self._max_ts, records, start
            )
        except (TypeError, ValueError, BufferError) as exc:
            raise KafkaConfigurationError(f"invalid record argument: {exc}") from None
        self._next_delta += stop - start
        self._size += added
        self._max_ts = max_ts
        return stop

    def append_with_offset_delta(
        self,
        offset_delta: int,
        timestamp_ms: int,
        key: Buffer | None,
        value: Buffer | None,
        headers: _HeadersIn = (),
    ) -> None:
        """Append a record at an explicit offset delta (offset gaps, as after compaction).

        For brokers, simulators and tests; a producer uses :meth:`append`.

        Args:
            offset_delta: greater than every delta appended so far.
            timestamp_ms: milliseconds since the epoch.
            key: the key, or ``None``.
            value: the value, or ``None``.
            headers: ``(key, value)`` pairs.

        Raises:
            KafkaConfigurationError: ``offset_delta`` does not increase, or a header key is not
                a ``str``.
        """
        if offset_delta < self._next_delta:
            raise KafkaConfigurationError(
                f"offset delta {offset_delta} must exceed the last one, {self._next_delta - 1}"
            )
        self._next_delta = offset_delta
        self.append(timestamp_ms, key, value, headers)

    def stamp(self, producer_id: int, epoch: int, base_sequence: int, transactional: bool) -> None:
        """Stamp the idempotence/transaction fields after the records were appended.

        They live in the batch header only, so the records encoded so far stay as they
        are (a producer learns its sequence numbers when a batch is drained, after its
        records were appended).

        Args:
            producer_id: the producer id (KIP-98), -1 if none.
            epoch: its epoch, -1 if none.
            base_sequence: the first record's sequence number, -1 if none.
            transactional: set or clear attribute bit 4.
        """
        self._producer_id = producer_id
        self._producer_epoch = epoch
        self._base_sequence = base_sequence
        if transactional:
            self._attributes |= _ATTR_TRANSACTIONAL
        else:
            self._attributes &= ~_ATTR_TRANSACTIONAL

    def build(self) -> bytes:
        """Encode the batch: join, compress, checksum.

        Returns:
            The batch's bytes, ready for a Produce request's ``records`` field; ``b""`` if no
            record was appended (like the Java builder, an empty builder yields no batch).

        Raises:
            KafkaConfigurationError: a field is out of range for its wire type (for example a
                timestamp beyond int64), a value is not bytes-like, or the compression level
                is invalid.
        """
        if not self._parts:
            return b""
        try:
            body: bytes = b"".join(self._parts)
        except (TypeError, BufferError):  # a str value, a non-contiguous memoryview...
            raise KafkaConfigurationError("a record value is not bytes-like") from None
        if self._compression:
            body = compress(self._compression, body, level=self._level)
        base_ts = self._base_ts if self._base_ts is not None else -1
        try:
            tail = _V2_TAIL.pack(
                self._attributes,
                self._next_delta - 1,
                base_ts,
                self._max_ts,
                self._producer_id,
                self._producer_epoch,
                self._base_sequence,
                len(self._parts) >> 2,
            )
            crc = _crc32c_fn(body, _crc32c_fn(tail))
            head = _V2_HEAD.pack(
                self._base_offset,
                _V2_MIN_LENGTH + len(body),
                self._partition_leader_epoch,
                2,
                crc,
            )
        except struct.error as exc:
            raise KafkaConfigurationError(f"record batch field out of range: {exc}") from None
        return b"".join((head, tail, body))


def build_control_batch(
    marker: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode a transaction marker batch (KIP-98), as a transaction coordinator has one written.

    The batch is transactional and control, with one record whose key is
    ``version 0, type`` and whose value is ``version 0, coordinator_epoch``.

    Args:
        marker: ``ControlRecordType.COMMIT`` or ``ControlRecordType.ABORT``.
        producer_id: the transactional producer's id.
        producer_epoch: its epoch.
        coordinator_epoch: the coordinator's epoch.
        timestamp_ms: the marker's timestamp.
        base_offset: the marker's offset.
        partition_leader_epoch: the leader epoch to stamp.

    Returns:
        The control batch's bytes.

    Raises:
        KafkaConfigurationError: ``marker`` is not COMMIT or ABORT.
    """
    if marker not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise KafkaConfigurationError(f"an end-transaction marker is COMMIT or ABORT, not {marker}")
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
        base_offset=base_offset,
    )
    builder.append(
        timestamp_ms,
        _CONTROL_KEY.pack(0, marker),
        _END_TXN_VALUE.pack(0, coordinator_epoch),
    )
    return builder.build()


# ---------------------------------------------------------------------------------------------
# decoding: magic 2


def _parse_headers(buf: bytes, pos: int, count: int) -> tuple[tuple[Header, ...], int]:
    if count < 0:
        raise _Malformed(f"negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        klen, pos = _read_varint(buf, pos)
        if klen < 0:
            raise _Malformed(f"negative header key length {klen}")
        hkey = buf[pos : pos + klen].decode()
        pos += klen
        vlen, pos = _read_varint(buf, pos)
        if vlen >= 0:
            hvalue: bytes | None = buf[pos : pos + vlen]
            pos += vlen
        elif vlen == -1:
            hvalue = None
        else:
            raise _Malformed(f"negative header value length {vlen}")
        headers.append((hkey, hvalue))
    return tuple(headers), pos


def _parse_records(
    buf: bytes,
    *,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    ts_type: TimestampType,
    append_ts: int | None,
    consumer: tuple[type[Any], str, int, int] | None = None,
) -> list[Any]:
    # With ``consumer`` (cls, topic, partition, leader epoch) each record is built straight
    # as a consumer-record tuple (consumer_tuples' layout): one object per record.
    # The hot loop (protocol guide, "Record"). Varints take an inline path for 1 and 2 byte
    # encodings (one-byte zigzag values come from a table). No per-field bounds checks: a read
    # past the buffer raises IndexError, a record whose fields do not add up to its length
    # fails the `rec_len` check, and overrunning the batch fails the final `pos != end` check
    # (the caller maps all three to CorruptRecordError and discards the partial list).
    out: list[Record] = []
    add = out.append
    new = tuple.__new__
    cls = Record
    no_headers = _NO_HEADERS
    read_uvarint = _read_uvarint
    unzz = _UNZIGZAG
    if consumer is not None:
        ccls, topic, partition, epoch = consumer
        ts_int = int(ts_type)
    for _ in range(count):
        # length, kept zigzagged: compared doubled against the bytes consumed at the end
        b = buf[pos]
        if b < 0x80:
            rec_len = b
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                rec_len = (b & 0x7F) | (c << 7)
                pos += 2
            else:
                rec_len, pos = read_uvarint(buf, pos, 5)
        start = pos
        # attributes (unused, skipped), timestampDelta (varlong)
        b = buf[pos + 1]
        if b < 0x80:
            ts = base_ts + unzz[b]
            pos += 2
        else:
            n, pos = read_uvarint(buf, pos + 1, 10)
            ts = base_ts + ((n >> 1) ^ -(n & 1))
        # offsetDelta
        b = buf[pos]
        if b < 0x80:
            offset = base_offset + unzz[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                n = (b & 0x7F) | (c << 7)
                pos += 2
            else:
                n, pos = read_uvarint(buf, pos, 5)
            offset = base_offset + ((n >> 1) ^ -(n & 1))
        # key: -1 (zigzag 1) is null, the common case
        b = buf[pos]
        if b == 1:
            key = None
            pos += 1
        else:
            if b < 0x80:
                n = b
                pos += 1
            else:
                n, pos = read_uvarint(buf, pos, 5)
            if n & 1:
                if n != 1:  # 1 here is -1 written in more bytes than needed: still null
                    raise _Malformed(f"negative key length {(n >> 1) ^ -1}")
                key = None
            else:
                n >>= 1
                key = buf[pos : pos + n]
                pos += n
        # value
        b = buf[pos]
        if b < 0x80:
            n = b
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                n = (b & 0x7F) | (c << 7)
                pos += 2
            else:
                n, pos = read_uvarint(buf, pos, 5)
        if n & 1:
            if n != 1:
                raise _Malformed(f"negative value length {(n >> 1) ^ -1}")
            value = None
        else:
            n >>= 1
            value = buf[pos : pos + n]
            pos += n
        # headers
        if buf[pos] == 0:
            headers = no_headers
            pos += 1
        else:
            n, pos = _read_varint(buf, pos)
            headers, pos = _parse_headers(buf, pos, n)
        if (pos - start) << 1 != rec_len:
            raise _Malformed(f"record at offset {offset} does not match its length")
        if append_ts is not None:
            ts = append_ts
        if consumer is None:
            add(new(cls, (offset, ts, ts_type, key, value, headers)))
        else:
            add(
                new(
                    ccls,
                    (
                        topic,
                        partition,
                        epoch,
                        offset,
                        ts,
                        ts_int,
                        key,
                        value,
                        headers,
                        None,
                        -1 if key is None else len(key),
                        -1 if value is None else len(value),
                        sum(len(k) + (0 if v is None else len(v)) for k, v in headers)
                        if headers
                        else -1,
                    ),
                )
            )
    if pos != end:
        raise _Malformed(f"the declared {count} records do not end where the batch does")
    return out


class RecordBatch:
    """A magic 2 record batch whose header has been read and checked.

    Attributes are the header's fields. Records are decoded (and decompressed) by
    :meth:`records` or iteration, each time they are asked for.
    """

    __slots__ = (
        "_buf",
        "_end",
        "_max_decompressed_size",
        "_start",
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "crc",
        "last_offset_delta",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    magic: Final = 2

    base_offset: int
    """Offset of the first record (the batch's first offset, even if compacted away)."""
    partition_leader_epoch: int
    """Leader epoch stamped by the broker that appended the batch (KIP-101), or -1."""
    crc: int
    """The CRC32C stored in the header."""
    attributes: int
    """The raw attributes; see the properties for the decoded bits."""
    last_offset_delta: int
    """``last_offset - base_offset``."""
    base_timestamp: int
    """First record's timestamp (or the delete horizon, KIP-534)."""
    max_timestamp: int
    """Largest record timestamp, or the log append time for LOG_APPEND_TIME batches."""
    producer_id: int
    """Idempotent/transactional producer id (KIP-98), -1 if none."""
    producer_epoch: int
    """Producer epoch, -1 if none."""
    base_sequence: int
    """Sequence number of the first record, -1 if none."""
    record_count: int
    """Number of records the header declares."""

    def __init__(
        self, buf: bytes, start: int, end: int, *, check_crc: bool, max_decompressed_size: int
    ) -> None:
        """Read the header of the batch occupying ``buf[start:end]``.

        Args:
            buf: the buffer holding the batch.
            start: where the batch starts.
            end: where it ends (``start + 12 + batchLength``).
            check_crc: verify the CRC32C.
            max_decompressed_size: cap on the records section once decompressed.

        Raises:
            CorruptRecordError: the header is invalid or the CRC does not match.
            UnsupportedCodecError: the compression codec id is not 0-4.
        """
        (
            self.base_offset,
            _length,
            self.partition_leader_epoch,
            _magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = _V2_HEADER.unpack_from(buf, start)
        self._buf = buf
        self._start = start
        self._end = end
        self._max_decompressed_size = max_decompressed_size
        if check_crc:
            actual = _crc32c_fn(memoryview(buf)[start + _CRC_START : end])
            if actual != self.crc:
                raise CorruptRecordError(
                    f"record batch at offset {self.base_offset}: CRC32C mismatch "
                    f"(header says 0x{self.crc:08x}, data has 0x{actual:08x})"
                )
        if self.record_count < 0:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset}: negative record count "
                f"{self.record_count}"
            )
        codec = self.attributes & _ATTR_CODEC
        if codec > Compression.ZSTD:
            raise UnsupportedCodecError(
                f"record batch at offset {self.base_offset}: unknown compression codec id {codec}"
            )

    # -- header-derived properties

    @property
    def compression(self) -> Compression:
        """The codec of the records section."""
        return Compression(self.attributes & _ATTR_CODEC)

    @property
    def timestamp_type(self) -> TimestampType:
        """CREATE_TIME or LOG_APPEND_TIME (attribute bit 3)."""
        return _APPEND if self.attributes & _ATTR_TIMESTAMP_TYPE else _CREATE

    @property
    def is_transactional(self) -> bool:
        """Attribute bit 4 (KIP-98)."""
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """Attribute bit 5: the batch holds control records, not user data (KIP-98)."""
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The log cleaner's delete horizon (attribute bit 6, KIP-534), else ``None``.

        When set, ``base_timestamp`` holds it.
        """
        return self.base_timestamp if self.attributes & _ATTR_DELETE_HORIZON else None

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record (kept even if compaction removed that record)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset a consumer moves to after this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        """The batch's size on the wire."""
        return self._end - self._start

    # -- records

    def records(self) -> list[Record]:
        """Decode the records (decompressing first if needed).

        Returns:
            The records in offset order. For LOG_APPEND_TIME batches every record carries
            the batch's ``max_timestamp`` (the broker's append time).

        Raises:
            CorruptRecordError: the records section is malformed, does not hold exactly
                ``record_count`` records, or does not decompress.
        """
        return self._decode(None)

    def consumer_records(self, cls: type[_T], topic: str, partition: int) -> list[_T]:
        """Decode the records straight into ``cls`` tuples of the consumer-record layout
        (see :func:`consumer_tuples`; leader epoch: the batch's), one object per record
        where the C accelerator is in use (the consumer's hot path).

        Args:
            cls: a tuple subclass with those 13 fields
                (:class:`kafkastate.structs.ConsumerRecord`).
            topic: the batch's topic.
            partition: the batch's partition.

        Returns:
            One ``cls`` per record, in offset order; equal to
            ``consumer_tuples(cls, self.records(), topic, partition, epoch)``.

        Raises:
            CorruptRecordError: as :meth:`records`.
        """
        made: list[_T] = self._decode((cls, topic, partition))
        return made

    def _decode(self, consumer: tuple[type[Any], str, int] | None) -> list[Any]:
        codec = self.attributes & _ATTR_CODEC
        buf = self._buf
        pos = self._start + RECORD_BATCH_OVERHEAD
        end = self._end
        if codec:
            try:
                buf = decompress(
                    codec, memoryview(buf)[pos:end], max_size=self._max_decompressed_size
                )
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"record batch at offset {self.base_offset}: {exc}"
                ) from None
            pos = 0
            end = len(buf)
        if self.attributes & _ATTR_TIMESTAMP_TYPE:
            ts_type, append_ts = _APPEND, self.max_timestamp
        else:
            ts_type, append_ts = _CREATE, None
        try:
            c_parse = _c_parse_records
            if c_parse is not None:
                head = (
                    buf,
                    pos,
                    end,
                    self.record_count,
                    self.base_offset,
                    self.base_timestamp,
                    ts_type,
                    append_ts,
                )
                if consumer is None:
                    return c_parse(*head)
                cls, topic, partition = consumer
                return c_parse(*head, cls, topic, partition, self.partition_leader_epoch)
            return _parse_records(
                buf,
                pos=pos,
                end=end,
                count=self.record_count,
                base_offset=self.base_offset,
                base_ts=self.base_timestamp,
                ts_type=ts_type,
                append_ts=append_ts,
                consumer=None if consumer is None else (*consumer, self.partition_leader_epoch),
            )
        except (_Malformed, IndexError, ValueError) as exc:
            # ValueError: UnicodeDecodeError in a header key.
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset}: {_describe(exc)}"
            ) from None

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    # -- control batches (KIP-98)

    @property
    def control_type(self) -> ControlRecordType | int | None:
        """The type in the control record's key, ``None`` for a data batch.

        Unknown types (from newer brokers) are returned as plain ints.

        Raises:
            CorruptRecordError: the control record is malformed.
        """
        if not self.attributes & _ATTR_CONTROL:
            return None
        record = self._control_record()
        if record.key is None or len(record.key) < _CONTROL_KEY.size:
            raise CorruptRecordError(
                f"control batch at offset {self.base_offset}: control record key too short"
            )
        version, ctype = _CONTROL_KEY.unpack_from(record.key)
        if version < 0:
            raise CorruptRecordError(
                f"control batch at offset {self.base_offset}: negative key version {version}"
            )
        try:
            return ControlRecordType(ctype)
        except ValueError:
            return int(ctype)

    @property
    def marker(self) -> EndTransactionMarker | None:
        """The COMMIT/ABORT marker of a transaction control batch, else ``None``.

        Raises:
            CorruptRecordError: the control record is malformed.
        """
        ctype = self.control_type
        if ctype is not ControlRecordType.COMMIT and ctype is not ControlRecordType.ABORT:
            return None
        value = self._control_record().value
        if value is None or len(value) < _END_TXN_VALUE.size:
            raise CorruptRecordError(
                f"control batch at offset {self.base_offset}: end-transaction marker too short"
            )
        version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
        if version < 0:
            raise CorruptRecordError(
                f"control batch at offset {self.base_offset}: negative marker version {version}"
            )
        return EndTransactionMarker(ctype, coordinator_epoch)

    def _control_record(self) -> Record:
        records = self.records()
        if not records:
            raise CorruptRecordError(f"control batch at offset {self.base_offset} has no record")
        return records[0]

    def __repr__(self) -> str:
        return (
            f"<RecordBatch magic=2 offsets={self.base_offset}..{self.last_offset} "
            f"records={self.record_count} compression={self.compression.name} "
            f"transactional={self.is_transactional} control={self.is_control}>"
        )


def _describe(exc: Exception) -> str:
    if isinstance(exc, IndexError):
        return "data ends inside a record"
    if isinstance(exc, UnicodeDecodeError):
        return "header key is not valid UTF-8"
    return str(exc)


# ---------------------------------------------------------------------------------------------
# decoding: legacy magic 0/1 (protocol guide, "Legacy Message Sets"; KIP-31, KIP-32)


class LegacyBatch:
    """One top-level magic 0/1 message: a single record, or a compressed wrapper's contents.

    Exposes the same attributes as :class:`RecordBatch` (fields magic 0/1 lacks take the
    "none" values: producer id -1, not transactional, not control). Records are decoded when
    the batch is read.
    """

    __slots__ = (
        "_records",
        "attributes",
        "base_offset",
        "crc",
        "last_offset",
        "magic",
        "max_timestamp",
        "size_in_bytes",
    )

    magic: int
    """0 or 1."""
    attributes: int
    """The (outer) message's raw attributes."""
    crc: int
    """The (outer) message's CRC32."""
    base_offset: int
    """Offset of the first record."""
    last_offset: int
    """Offset of the outer message: the last record's."""
    max_timestamp: int
    """The outer message's timestamp (-1 for magic 0)."""
    size_in_bytes: int
    """The outer message's size on the wire."""

    partition_leader_epoch: Final = -1
    producer_id: Final = -1
    producer_epoch: Final = -1
    base_sequence: Final = -1
    is_transactional: Final = False
    is_control: Final = False
    delete_horizon_ms: Final = None
    control_type: Final = None
    marker: Final = None

    def __init__(
        self,
        *,
        magic: int,
        attributes: int,
        crc: int,
        records: list[Record],
        last_offset: int,
        max_timestamp: int,
        size_in_bytes: int,
    ) -> None:
        """Wrap already-decoded legacy records (built by :func:`iter_batches`).

        Args:
            magic: 0 or 1.
            attributes: the (outer) message's attributes.
            crc: the (outer) message's CRC32.
            records: the records, in offset order.
            last_offset: the outer message's offset.
            max_timestamp: the outer message's timestamp (-1 for magic 0).
            size_in_bytes: the outer message's size including the log overhead.
        """
        self.magic = magic
        self.attributes = attributes
        self.crc = crc
        self._records = records
        self.base_offset = records[0].offset if records else last_offset
        self.last_offset = last_offset
        self.max_timestamp = max_timestamp
        self.size_in_bytes = size_in_bytes

    @property
    def compression(self) -> Compression:
        """The codec of the wrapper message (NONE for a plain message)."""
        return Compression(self.attributes & _ATTR_CODEC)

    @property
    def timestamp_type(self) -> TimestampType:
        """NO_TIMESTAMP_TYPE for magic 0, else attribute bit 3."""
        if self.magic == 0:
            return _NO_TS_TYPE
        return _APPEND if self.attributes & _ATTR_TIMESTAMP_TYPE else _CREATE

    @property
    def base_timestamp(self) -> int:
        """The first record's timestamp (-1 for magic 0)."""
        return self._records[0].timestamp if self._records else -1

    @property
    def record_count(self) -> int:
        """Number of records."""
        return len(self._records)

    @property
    def next_offset(self) -> int:
        """The offset a consumer moves to after this batch."""
        return self.last_offset + 1

    def records(self) -> list[Record]:
        """Return the records.

        Returns:
            The records in offset order (a new list each call).
        """
        return list(self._records)

    def consumer_records(self, cls: type[_T], topic: str, partition: int) -> list[_T]:
        """The records as ``cls`` consumer-record tuples (see
        :meth:`RecordBatch.consumer_records`; leader epoch -1: magic 0/1 has none)."""
        return consumer_tuples(cls, list(self._records), topic, partition, -1)

    def __iter__(self) -> Iterator[Record]:
        return iter(self._records)

    def __repr__(self) -> str:
        return (
            f"<LegacyBatch magic={self.magic} offsets={self.base_offset}..{self.last_offset} "
            f"records={self.record_count} compression={self.compression.name}>"
        )


Batch = RecordBatch | LegacyBatch
"""What :func:`iter_batches` yields."""


def _legacy_bytes(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise _Malformed(f"message ends inside its {what} length")
    (n,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise _Malformed(f"{what} length {n} does not fit the message")
    return buf[pos : pos + n], pos + n


def _read_legacy_message(
    buf: bytes, pos: int, end: int, check_crc: bool
) -> tuple[int, int, int, int, int, bytes | None, bytes | None]:
    """Parse the message in ``buf[pos:end]`` (offset and size included; sizes already checked).

    Returns ``(offset, magic, attributes, crc, timestamp, key, value)``.
    """
    magic = buf[pos + _MAGIC_OFFSET]
    if magic == 0:
        offset, _size, crc, magic, attributes = _LEGACY_V0.unpack_from(buf, pos)
        timestamp = -1
        body = pos + _LEGACY_V0.size
    else:
        if end - pos < _LEGACY_V1.size + 8:
            raise _Malformed("magic 1 message too short")
        offset, _size, crc, magic, attributes, timestamp = _LEGACY_V1.unpack_from(buf, pos)
        body = pos + _LEGACY_V1.size
    if check_crc:
        actual = zlib.crc32(memoryview(buf)[pos + _MAGIC_OFFSET : end])
        if actual != crc:
            raise _Malformed(f"CRC32 mismatch (message says 0x{crc:08x}, data has 0x{actual:08x})")
    key, body = _legacy_bytes(buf, body, end, "key")
    value, body = _legacy_bytes(buf, body, end, "value")
    if body != end:
        raise _Malformed(f"{end - body} bytes left after the value")
    return offset, magic, attributes, crc, timestamp, key, value


def _legacy_entries(buf: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each complete message in an inner message set; a cut tail is an error."""
    pos = 0
    n = len(buf)
    while pos < n:
        if n - pos < _LOG_OVERHEAD:
            raise _Malformed("inner message set ends inside a message header")
        (_offset, size) = _LOG_ENTRY.unpack_from(buf, pos)
        end = pos + _LOG_OVERHEAD + size
        if size < _LEGACY_MIN_LENGTH or end > n:
            raise _Malformed(f"inner message size {size} does not fit the message set")
        yield pos, end
        pos = end


def _legacy_batch(
    buf: bytes, start: int, end: int, check_crc: bool, max_decompressed_size: int
) -> LegacyBatch:
    offset, magic, attributes, crc, timestamp, key, value = _read_legacy_message(
        buf, start, end, check_crc
    )
    codec = attributes & _ATTR_CODEC
    ts_type = (
        _NO_TS_TYPE if magic == 0 else (_APPEND if attributes & _ATTR_TIMESTAMP_TYPE else _CREATE)
    )
    if codec == 0:
        record = Record(offset, timestamp, ts_type, key, value, _NO_HEADERS)
        return LegacyBatch(
            magic=magic,
            attributes=attributes,
            crc=crc,
            records=[record],
            last_offset=offset,
            max_timestamp=timestamp,
            size_in_bytes=end - start,
        )
    if codec > Compression.ZSTD:
        raise UnsupportedCodecError(f"unknown compression codec id {codec}")
    if value is None:
        raise _Malformed("compressed wrapper message has a null value")
    try:
        inner = decompress(
            codec,
            value,
            max_size=max_decompressed_size,
            lz4_broken_header_checksum=magic == 0,  # KAFKA-3160
        )
    except CorruptRecordError as exc:
        raise _Malformed(str(exc)) from None
    raw: list[tuple[int, int, bytes | None, bytes | None]] = []
    for istart, iend in _legacy_entries(inner):
        ioffset, imagic, iattrs, _icrc, its, ikey, ivalue = _read_legacy_message(
            inner, istart, iend, check_crc
        )
        if imagic != magic:
            raise _Malformed(f"inner message magic {imagic} differs from the wrapper's {magic}")
        if iattrs & _ATTR_CODEC:
            raise _Malformed("compressed message inside a compressed wrapper")
        raw.append((ioffset, its, ikey, ivalue))
    if not raw:
        raise _Malformed("compressed wrapper message holds no message")
    records: list[Record] = []
    if magic == 0:
        for ioffset, _its, ikey, ivalue in raw:
            records.append(Record(ioffset, -1, _NO_TS_TYPE, ikey, ivalue, _NO_HEADERS))
    else:
        # KIP-31: inner offsets are relative; the wrapper carries the last inner's absolute
        # offset. KIP-32: a LOG_APPEND_TIME wrapper's timestamp overrides the inner ones.
        # A negative base means producer-side data (wrapper offset not yet assigned): keep the
        # relative offsets, as Java's AbstractLegacyRecordBatch does.
        base = offset - raw[-1][0]
        base = max(base, 0)
        for ioffset, its, ikey, ivalue in raw:
            ts = timestamp if ts_type is _APPEND else its
            records.append(Record(base + ioffset, ts, ts_type, ikey, ivalue, _NO_HEADERS))
    for prev, rec in itertools.pairwise(records):
        if rec.offset <= prev.offset:
            raise _Malformed("inner message offsets do not increase")
    return LegacyBatch(
        magic=magic,
        attributes=attributes,
        crc=crc,
        records=records,
        last_offset=offset,
        max_timestamp=timestamp,
        size_in_bytes=end - start,
    )


# ---------------------------------------------------------------------------------------------
# decoding: entry point


def iter_batches(
    data: Buffer,
    *,
    check_crcs: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Batch]:
    """Iterate the batches in a Fetch response's ``records`` field (or any record set).

    Magic 2 batches and legacy magic 0/1 messages may be mixed. A final entry cut short (the
    broker stops at the fetch size) ends the iteration silently.

    Args:
        data: concatenated batches. ``bytes`` is read in place; a ``bytearray`` or
            ``memoryview`` is copied once so the records can be sliced as ``bytes``.
        check_crcs: verify CRC32C (magic 2) and CRC32 (magic 0/1) checksums (``check.crcs``).
        max_decompressed_size: refuse a batch whose records decompress to more bytes.

    Yields:
        :class:`RecordBatch` for magic 2, :class:`LegacyBatch` for magic 0/1, in order.

    Raises:
        CorruptRecordError: an entry is malformed (impossible length, bad magic, CRC
            mismatch, bad compression…); the message names the problem and the offset.
        UnsupportedCodecError: an entry names an unknown compression codec.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    pos = 0
    n = len(buf)
    while n - pos >= _LOG_OVERHEAD:
        base_offset, length = _LOG_ENTRY.unpack_from(buf, pos)
        # Java ByteBufferLogInputStream.nextBatch: a length below the smallest message is
        # corruption; an entry longer than the data is the fetch cut, so stop.
        if length < _LEGACY_MIN_LENGTH:
            raise CorruptRecordError(
                f"entry at offset {base_offset}: length {length} is below the minimum "
                f"{_LEGACY_MIN_LENGTH}"
            )
        end = pos + _LOG_OVERHEAD + length
        if n - pos < _HEADER_SIZE_UP_TO_MAGIC:
            return
        magic = buf[pos + _MAGIC_OFFSET]
        if magic > 2 or magic < 0:
            raise CorruptRecordError(f"entry at offset {base_offset}: unknown magic byte {magic}")
        if end > n:
            return
        if magic == 2:
            if length < _V2_MIN_LENGTH:
                raise CorruptRecordError(
                    f"record batch at offset {base_offset}: length {length} is below the "
                    f"minimum {_V2_MIN_LENGTH}"
                )
            yield RecordBatch(
                buf,
                pos,
                end,
                check_crc=check_crcs,
                max_decompressed_size=max_decompressed_size,
            )
        else:
            try:
                yield _legacy_batch(buf, pos, end, check_crcs, max_decompressed_size)
            except (_Malformed, IndexError, struct.error) as exc:
                raise CorruptRecordError(
                    f"magic {magic} message at offset {base_offset}: {_describe(exc)}"
                ) from None
        pos = end


# ---------------------------------------------------------------------------------------------
# legacy encoding, for tests and the simulator (kafkastate never produces magic 0/1)


def _legacy_message(
    *,
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    body = bytearray()
    body.append(magic)
    body.append(attributes & 0xFF)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        if field is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(field)) + field
    crc = zlib.crc32(body)
    return _LOG_ENTRY.pack(offset, 4 + len(body)) + struct.pack(">I", crc) + bytes(body)


def build_legacy_message_set(
    messages: Sequence[tuple[int, bytes | None, bytes | None]],
    *,
    magic: int,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    wrapper_timestamp: int | None = None,
) -> bytes:
    """Encode a magic 0/1 message set, for tests and the simulator.

    Args:
        messages: ``(timestamp_ms, key, value)`` per message (timestamps ignored for magic 0).
        magic: 0 or 1.
        base_offset: offset of the first message.
        compression: NONE writes one message per record; a codec writes one wrapper holding
            them all (relative inner offsets for magic 1, absolute for magic 0).
        timestamp_type: for magic 1 wrappers, LOG_APPEND_TIME sets attribute bit 3 and makes
            ``wrapper_timestamp`` the records' timestamp.
        wrapper_timestamp: the wrapper's timestamp (default: the largest inner timestamp).

    Returns:
        The message set's bytes.

    Raises:
        KafkaConfigurationError: ``magic`` is not 0 or 1, or zstd is asked for (magic 2 only).
    """
    if magic not in (0, 1):
        raise KafkaConfigurationError(f"legacy message sets have magic 0 or 1, not {magic}")
    if compression == Compression.ZSTD:
        raise KafkaConfigurationError("zstd needs magic 2 (KIP-110)")
    ts_bit = _ATTR_TIMESTAMP_TYPE if magic == 1 and timestamp_type is _APPEND else 0
    if compression == Compression.NONE:
        return b"".join(
            _legacy_message(
                offset=base_offset + i,
                magic=magic,
                attributes=ts_bit,
                timestamp=ts,
                key=key,
                value=value,
            )
            for i, (ts, key, value) in enumerate(messages)
        )
    inner = b"".join(
        _legacy_message(
            offset=i if magic == 1 else base_offset + i,
            magic=magic,
            attributes=0,
            timestamp=ts,
            key=key,
            value=value,
        )
        for i, (ts, key, value) in enumerate(messages)
    )
    wrapped = compress(compression, inner)
    if compression == Compression.LZ4 and magic == 0:
        # KAFKA-3160: 0.8/0.9 clients hashed the magic number into the descriptor checksum.
        fixed = bytearray(wrapped)
        fixed[6] = (xxh32(bytes(fixed[0:6])) >> 8) & 0xFF
        wrapped = bytes(fixed)
    if wrapper_timestamp is None:
        wrapper_timestamp = max((ts for ts, _k, _v in messages), default=-1)
    return _legacy_message(
        offset=base_offset + len(messages) - 1,
        magic=magic,
        attributes=compression | ts_bit,
        timestamp=wrapper_timestamp,
        key=None,
        value=wrapped,
    )
