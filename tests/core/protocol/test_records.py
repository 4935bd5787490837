"""Unit and property tests for kafkastate.core.protocol.records."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastate.core.protocol.compression import Compression, compress
from kafkastate.core.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    EndTransactionMarker,
    LegacyBatch,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    build_legacy_message_set,
    estimate_batch_size_upper_bound,
    estimate_record_size_upper_bound,
    iter_batches,
    record_size,
)
from kafkastate.errors import CorruptRecordError, KafkaConfigurationError, UnsupportedCodecError

# Every test runs twice: on the pure-Python record codec, then on the C accelerator.
pytestmark = pytest.mark.usefixtures("implementation")

HEADER = struct.Struct(">qiibIHiqqqhii")
TS = 1_700_000_000_000


def zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def raw_record(
    offset_delta: int = 0,
    timestamp_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: bytes = b"\x00",
    *,
    length_adjust: int = 0,
) -> bytes:
    """Hand-encode one record (independently of the builder)."""
    body = b"\x00" + zigzag(timestamp_delta) + zigzag(offset_delta)
    body += zigzag(-1) if key is None else zigzag(len(key)) + key
    body += zigzag(-1) if value is None else zigzag(len(value)) + value
    body += headers
    return zigzag(len(body) + length_adjust) + body


def raw_batch(
    records: bytes,
    count: int,
    *,
    attributes: int = 0,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = TS,
    max_timestamp: int = TS,
    compression: Compression = Compression.NONE,
    magic: int = 2,
    crc: int | None = None,
) -> bytes:
    """Hand-assemble a v2 batch around an arbitrary records section, with a valid CRC."""
    if compression:
        records = compress(compression, records)
        attributes |= compression
    tail = struct.pack(
        ">Hiqqqhii",
        attributes,
        count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        max_timestamp,
        -1,
        -1,
        -1,
        count,
    )
    if crc is None:
        crc = crc32c.crc32c(tail + records)
    return struct.pack(">qiibI", base_offset, 49 + len(records), -1, magic, crc) + tail + records


def one_batch(data: bytes, **kwargs: object) -> RecordBatch:
    batches = list(iter_batches(data, **kwargs))  # type: ignore[arg-type]
    assert len(batches) == 1
    batch = batches[0]
    assert isinstance(batch, RecordBatch)
    return batch


# -- builder ---------------------------------------------------------------------------------


def test_builder_header_fields() -> None:
    b = RecordBatchBuilder(
        producer_id=77,
        producer_epoch=3,
        base_sequence=12,
        is_transactional=True,
        partition_leader_epoch=9,
        base_offset=1000,
    )
    assert b.append(TS, b"k", b"v") == 0
    assert b.append(TS + 5, None, b"w", [("h", b"1")]) == 1
    assert b.append(TS - 3, b"k2", None) == 2
    assert b.record_count == 3
    data = b.build()
    assert len(data) == b.size_in_bytes()
    (
        base_offset,
        length,
        ple,
        magic,
        crc,
        attrs,
        last_delta,
        base_ts,
        max_ts,
        pid,
        epoch,
        seq,
        count,
    ) = HEADER.unpack_from(data)
    assert (base_offset, length, ple, magic) == (1000, len(data) - 12, 9, 2)
    assert crc == crc32c.crc32c(data[21:])
    assert attrs == 0x10  # transactional, create time, no compression
    assert (last_delta, base_ts, max_ts) == (2, TS, TS + 5)
    assert (pid, epoch, seq, count) == (77, 3, 12, 3)


@pytest.mark.parametrize("transactional", [True, False])
def test_producer_state_stamped_after_the_records(transactional: bool) -> None:
    """A producer learns its sequence numbers when a batch is drained: stamping them on a
    filled builder gives the bytes of a builder constructed with them."""
    fields = {"producer_id": 77, "producer_epoch": 3, "base_sequence": 12}
    made = RecordBatchBuilder(compression=Compression.GZIP, is_transactional=not transactional)
    direct = RecordBatchBuilder(
        compression=Compression.GZIP, is_transactional=transactional, **fields
    )
    for b in (made, direct):
        b.append(TS, b"k", b"v")
        b.append(TS + 5, None, b"w", [("h", b"1")])
    made.stamp(77, 3, 12, transactional)
    assert made.build() == direct.build()
    batch = one_batch(made.build())
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 12)
    assert batch.is_transactional is transactional
    assert [r.value for r in batch.records()] == [b"v", b"w"]


def test_builder_record_bytes_match_the_spec() -> None:
    b = RecordBatchBuilder()
    b.append(TS, b"key", b"value", [("a", b"b"), ("n", None)])
    b.append(TS + 1, None, None)
    headers = zigzag(2) + zigzag(1) + b"a" + zigzag(1) + b"b" + zigzag(1) + b"n" + zigzag(-1)
    expected = raw_record(0, 0, b"key", b"value", headers) + raw_record(1, 1, None, None)
    assert b.build()[RECORD_BATCH_OVERHEAD:] == expected


def test_empty_builder_builds_nothing() -> None:
    b = RecordBatchBuilder()
    assert b.build() == b""
    assert b.size_in_bytes() == RECORD_BATCH_OVERHEAD
    assert b.has_room_for(TS, None, b"x" * 10_000, limit=100)


def test_builder_large_varints() -> None:
    b = RecordBatchBuilder()
    big = b"x" * 20_000  # lengths beyond the varint table
    for i in range(9000):  # offset deltas beyond the table
        b.append(TS + i * 1_000_000, big if i == 8999 else None, b"v")
    b.append(TS - 10**12, None, big)  # large negative timestamp delta
    records = one_batch(b.build()).records()
    assert len(records) == 9001
    assert records[8999].offset == 8999 and records[8999].key == big
    assert records[9000].timestamp == TS - 10**12 and records[9000].value == big


def test_append_with_offset_delta() -> None:
    b = RecordBatchBuilder(base_offset=100)
    b.append_with_offset_delta(0, TS, None, b"a")
    b.append_with_offset_delta(5, TS, None, b"b")
    with pytest.raises(KafkaConfigurationError):
        b.append_with_offset_delta(5, TS, None, b"c")
    assert b.append(TS, None, b"c") == 6
    batch = one_batch(b.build())
    assert [r.offset for r in batch] == [100, 105, 106]
    assert batch.last_offset == 106 and batch.next_offset == 107


@pytest.mark.parametrize(
    "kwargs",
    [
        {"magic": 1},
        {"compression": 9},
        {"timestamp_type": 7},
        {"timestamp_type": TimestampType.NO_TIMESTAMP_TYPE},
    ],
)
def test_builder_rejects_bad_config(kwargs: dict[str, object]) -> None:
    with pytest.raises(KafkaConfigurationError):
        RecordBatchBuilder(**kwargs)  # type: ignore[arg-type]


def test_builder_rejects_bad_header_key_and_out_of_range_fields() -> None:
    with pytest.raises(KafkaConfigurationError):
        RecordBatchBuilder().append(TS, None, b"v", [(b"bytes-key", b"v")])  # type: ignore[list-item]
    b = RecordBatchBuilder(producer_id=1 << 70)
    b.append(TS, None, b"v")
    with pytest.raises(KafkaConfigurationError, match="out of range"):
        b.build()


@pytest.mark.parametrize(
    "args",
    [
        (1.7e12, None, b"v", ()),
        (TS, "str key", b"v", ()),
        (TS, None, b"v", [("h", "str value")]),
        (TS, None, b"v", [(1, b"x")]),
    ],
)
def test_append_rejects_bad_types_and_leaves_the_builder_unchanged(args: tuple[Any, ...]) -> None:
    b = RecordBatchBuilder()
    b.append(TS, None, b"first")
    with pytest.raises(KafkaConfigurationError):
        b.append(*args)
    assert b.record_count == 1
    assert b.append(TS + 1, None, b"second") == 1
    assert [r.value for r in one_batch(b.build())] == [b"first", b"second"]


def test_build_rejects_non_bytes_value() -> None:
    b = RecordBatchBuilder()
    b.append(TS, None, "text")  # type: ignore[arg-type]
    with pytest.raises(KafkaConfigurationError, match="bytes-like"):
        b.build()


def test_builder_accepts_bytes_like() -> None:
    b = RecordBatchBuilder()
    b.append(TS, bytearray(b"k"), memoryview(b"value"), [("h", bytearray(b"x"))])
    (record,) = one_batch(b.build()).records()
    assert (record.key, record.value, record.headers) == (b"k", b"value", (("h", b"x"),))


@pytest.mark.parametrize(
    ("key", "value", "headers"),
    [
        (None, None, []),
        (b"k", b"v" * 100, []),
        (b"k" * 300, b"v" * 70_000, [("a", b"b"), ("ü" * 70, None)]),
    ],
)
@pytest.mark.parametrize(
    ("od", "tsd"), [(0, 0), (63, -64), (64, 64), (9000, 10**9), (0, -(10**12))]
)
def test_sizes(
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    od: int,
    tsd: int,
) -> None:
    b = RecordBatchBuilder()
    b.append(TS, None, None)
    before = b.size_in_bytes()
    if od:
        b.append_with_offset_delta(od, TS + tsd, key, value, headers)
    else:
        b = RecordBatchBuilder()
        b.append(TS, None, None)
        b.append_with_offset_delta(1, TS + tsd, key, value, headers)
        od = 1
    exact = b.size_in_bytes() - before
    assert record_size(od, tsd, key, value, headers) == exact
    assert estimate_record_size_upper_bound(key, value, headers) >= exact
    assert estimate_batch_size_upper_bound(key, value, headers) >= RECORD_BATCH_OVERHEAD + exact
    assert len(b.build()) == b.size_in_bytes()


def test_has_room_for() -> None:
    b = RecordBatchBuilder()
    b.append(TS, None, b"x" * 100)
    size = b.size_in_bytes()
    nxt = record_size(1, 0, None, b"y" * 50)
    assert b.has_room_for(TS, None, b"y" * 50, limit=size + nxt)
    assert not b.has_room_for(TS, None, b"y" * 50, limit=size + nxt - 1)


# -- decoding --------------------------------------------------------------------------------


def test_decode_fields_and_records() -> None:
    b = RecordBatchBuilder(
        base_offset=42,
        partition_leader_epoch=4,
        producer_id=5,
        producer_epoch=6,
        base_sequence=7,
        is_transactional=True,
    )
    b.append(TS, b"k1", b"v1", [("h", b"x")])
    b.append(TS + 10, None, None)
    batch = one_batch(b.build())
    assert batch.magic == 2
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (42, 43, 4)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 6, 7)
    assert (batch.base_timestamp, batch.max_timestamp, batch.record_count) == (TS, TS + 10, 2)
    assert batch.is_transactional and not batch.is_control
    assert batch.compression is Compression.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.delete_horizon_ms is None
    assert batch.control_type is None and batch.marker is None
    assert batch.size_in_bytes == len(b.build())
    assert batch.records() == [
        Record(42, TS, TimestampType.CREATE_TIME, b"k1", b"v1", (("h", b"x"),)),
        Record(43, TS + 10, TimestampType.CREATE_TIME, None, None, ()),
    ]
    assert list(batch) == batch.records()
    assert "RecordBatch" in repr(batch)
    record = batch.records()[0]
    assert type(record.key) is bytes and type(record.value) is bytes


def test_log_append_time_overrides_record_timestamps() -> None:
    b = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    b.append(TS, None, b"a")
    b.append(TS + 7, None, b"b")
    data = bytearray(b.build())
    # the broker stamps maxTimestamp with its append time and recomputes the CRC
    struct.pack_into(">q", data, 35, TS + 999)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    batch = one_batch(bytes(data))
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [(r.timestamp, r.timestamp_type) for r in batch] == [
        (TS + 999, TimestampType.LOG_APPEND_TIME)
    ] * 2


def test_delete_horizon_attribute() -> None:
    data = raw_batch(raw_record(), 1, attributes=0x40, base_timestamp=555)
    batch = one_batch(data)
    assert batch.delete_horizon_ms == 555
    assert batch.records()[0].timestamp == 555


def test_headers_decode() -> None:
    headers = zigzag(3) + zigzag(0) + zigzag(0)  # "" -> b""
    headers += zigzag(2) + "é".encode() + zigzag(-1)  # "é" -> None
    headers += zigzag(1) + b"k" + zigzag(3) + b"val"
    (record,) = one_batch(raw_batch(raw_record(headers=headers), 1)).records()
    assert record.headers == (("", b""), ("é", None), ("k", b"val"))


def test_multiple_batches_and_memoryview_input() -> None:
    parts = []
    for i in range(3):
        b = RecordBatchBuilder(base_offset=i * 10)
        for j in range(i + 1):
            b.append(TS, None, b"%d-%d" % (i, j))
        parts.append(b.build())
    data = b"".join(parts)
    for view in (data, bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        batches = list(iter_batches(view))
        assert [bt.base_offset for bt in batches] == [0, 10, 20]
        assert [len(bt.records()) for bt in batches] == [1, 2, 3]


def test_bytes_subclass_input() -> None:
    class Records(bytes):
        pass

    b = RecordBatchBuilder()
    b.append(TS, None, b"x")
    (record,) = one_batch(Records(b.build())).records()
    assert type(record.value) is bytes


def test_truncated_final_batch_is_skipped_at_every_cut() -> None:
    first = RecordBatchBuilder()
    first.append(TS, None, b"complete")
    second = RecordBatchBuilder(base_offset=1)
    second.append(TS, b"k", b"cut short" * 5)
    a, b = first.build(), second.build()
    for cut in range(len(b)):
        batches = list(iter_batches(a + b[:cut]))
        assert [bt.base_offset for bt in batches] == [0], cut
    assert list(iter_batches(b"")) == []


def test_check_crcs() -> None:
    b = RecordBatchBuilder(base_offset=31)
    b.append(TS, None, b"payload")
    data = bytearray(b.build())
    data[-2] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"offset 31.*CRC32C"):
        list(iter_batches(bytes(data)))
    (batch,) = iter_batches(bytes(data), check_crcs=False)
    assert batch.records()[0].value != b"payload"


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.name)
def test_compressed_batches(compression: Compression) -> None:
    b = RecordBatchBuilder(compression=compression)
    for i in range(500):
        b.append(TS + i, b"key-%d" % i, b"value-%d" % i * 10, [("i", b"%d" % i)])
    data = b.build()
    if compression:
        assert len(data) < b.size_in_bytes()
    batch = one_batch(data)
    assert batch.compression is compression
    records = batch.records()
    assert len(records) == 500
    assert records[499] == Record(
        499, TS + 499, TimestampType.CREATE_TIME, b"key-499", b"value-499" * 10, (("i", b"499"),)
    )


def test_max_decompressed_size() -> None:
    b = RecordBatchBuilder(compression=Compression.ZSTD, base_offset=8)
    b.append(TS, None, bytes(100_000))
    (batch,) = iter_batches(b.build(), max_decompressed_size=50_000)
    with pytest.raises(CorruptRecordError, match=r"offset 8.*limit"):
        batch.records()


# -- control batches -------------------------------------------------------------------------


@pytest.mark.parametrize("marker", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batch(marker: ControlRecordType) -> None:
    data = build_control_batch(
        marker,
        producer_id=11,
        producer_epoch=2,
        coordinator_epoch=17,
        timestamp_ms=TS,
        base_offset=99,
        partition_leader_epoch=3,
    )
    batch = one_batch(data)
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_offset) == (11, 2, 99)
    assert batch.partition_leader_epoch == 3
    assert batch.control_type is marker
    assert batch.marker == EndTransactionMarker(marker, 17)
    (record,) = batch.records()
    assert record.key == struct.pack(">hh", 0, marker)
    assert record.value == struct.pack(">hi", 0, 17)


def test_build_control_batch_rejects_other_types() -> None:
    with pytest.raises(KafkaConfigurationError):
        build_control_batch(
            ControlRecordType.LEADER_CHANGE,
            producer_id=1,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=TS,
        )


def test_other_control_types() -> None:
    for ctype, expected in ((2, ControlRecordType.LEADER_CHANGE), (99, 99)):
        rec = raw_record(key=struct.pack(">hh", 0, ctype), value=b"\x00\x00whatever")
        batch = one_batch(raw_batch(rec, 1, attributes=0x30))
        assert batch.control_type == expected
        assert batch.marker is None


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"\x00", b"\x00\x00\x00\x00\x00\x01", "key too short"),
        (None, b"\x00\x00\x00\x00\x00\x01", "key too short"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01", "negative key version"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00", "marker too short"),
        (b"\x00\x00\x00\x01", None, "marker too short"),
        (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01", "negative marker version"),
    ],
)
def test_malformed_control_records(key: bytes | None, value: bytes | None, match: str) -> None:
    batch = one_batch(raw_batch(raw_record(key=key, value=value), 1, attributes=0x30))
    with pytest.raises(CorruptRecordError, match=match):
        _ = batch.marker


def test_control_batch_without_records() -> None:
    batch = one_batch(raw_batch(b"", 0, attributes=0x30, last_offset_delta=0))
    with pytest.raises(CorruptRecordError, match="no record"):
        _ = batch.control_type


def test_empty_batch_after_compaction() -> None:
    # Compaction can leave a batch with no records; its last offset still counts.
    batch = one_batch(raw_batch(b"", 0, base_offset=10, last_offset_delta=4))
    assert batch.records() == []
    assert batch.next_offset == 15


# -- corruption ------------------------------------------------------------------------------


def corrupt(data: bytes, match: str, **kwargs: object) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        for batch in iter_batches(data, **kwargs):  # type: ignore[arg-type]
            batch.records()


def test_entry_length_below_minimum() -> None:
    corrupt(struct.pack(">qi", 5, 13) + bytes(20), r"offset 5: length 13")


def test_v2_length_below_minimum() -> None:
    entry = struct.pack(">qiib", 6, 30, -1, 2) + bytes(30)
    corrupt(entry, r"offset 6: length 30")


@pytest.mark.parametrize("magic", [3, -1, 127])
def test_unknown_magic(magic: int) -> None:
    entry = struct.pack(">qiib", 7, 60, -1, magic) + bytes(60)
    corrupt(entry, "unknown magic")
    corrupt(entry[:20], "unknown magic")  # even when the entry is cut, as Java does


def test_unknown_codec() -> None:
    data = raw_batch(raw_record(), 1, attributes=5)
    with pytest.raises(UnsupportedCodecError):
        list(iter_batches(data))


def test_negative_record_count() -> None:
    corrupt(raw_batch(b"", -1), "negative record count")


@pytest.mark.parametrize(
    ("records", "count", "match"),
    [
        (raw_record() * 2, 1, "do not end where the batch does"),
        (raw_record(), 2, "data ends inside a record"),
        (raw_record(length_adjust=1), 1, "does not match its length"),
        (raw_record(length_adjust=-1), 1, "does not match its length"),
        (raw_record(length_adjust=-200), 1, "does not match its length"),
        (raw_record(key=b"k")[:4] + zigzag(-2) + raw_record(key=b"k")[5:], 1, "negative key"),
        (raw_record(value=b"")[:5] + zigzag(-3) + b"\x00", 1, "negative value"),
        (raw_record(headers=zigzag(-1)), 1, "negative header count"),
        (raw_record(headers=zigzag(1) + zigzag(-1)), 1, "negative header key length"),
        (raw_record(headers=zigzag(1) + zigzag(0) + zigzag(-4)), 1, "negative header value"),
        (raw_record(headers=zigzag(1) + zigzag(1) + b"\xff" + zigzag(-1)), 1, "UTF-8"),
        (b"\xff" * 12, 1, "varint longer than"),
        (b"\x0e\x00" + b"\xff" * 11 + b"\x00", 1, "varint longer than"),
    ],
)
def test_corrupt_records(records: bytes, count: int, match: str) -> None:
    corrupt(raw_batch(records, count, base_offset=321), rf"offset 321: .*{match}")


def test_corrupt_compressed_payload() -> None:
    tail = struct.pack(">Hiqqqhii", 1, 0, TS, TS, -1, -1, -1, 1)
    body = b"not gzip at all"
    data = struct.pack(">qiibI", 12, 49 + len(body), -1, 2, crc32c.crc32c(tail + body))
    corrupt(data + tail + body, r"offset 12: gzip")


@pytest.mark.parametrize("compression", [c for c in Compression if c], ids=lambda c: c.name)
def test_corrupt_records_inside_compression(compression: Compression) -> None:
    corrupt(
        raw_batch(raw_record(length_adjust=3), 1, compression=compression, base_offset=4),
        r"offset 4: .*does not match its length",
    )


# -- legacy magic 0/1 ------------------------------------------------------------------------


def legacy(data: bytes) -> list[LegacyBatch]:
    batches = list(iter_batches(data))
    assert all(isinstance(b, LegacyBatch) for b in batches)
    return batches  # type: ignore[return-value]


MESSAGES = [(TS + i, b"k%d" % i if i % 2 else None, b"v%d" % i) for i in range(5)]


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_plain(magic: int) -> None:
    batches = legacy(build_legacy_message_set(MESSAGES, magic=magic, base_offset=100))
    assert len(batches) == 5
    for i, batch in enumerate(batches):
        assert batch.magic == magic
        assert batch.base_offset == batch.last_offset == 100 + i
        assert batch.record_count == 1 and batch.compression is Compression.NONE
        assert not batch.is_transactional and not batch.is_control and batch.producer_id == -1
        (record,) = batch.records()
        ts = TS + i if magic else -1
        ts_type = TimestampType.CREATE_TIME if magic else TimestampType.NO_TIMESTAMP_TYPE
        assert record == Record(100 + i, ts, ts_type, MESSAGES[i][1], MESSAGES[i][2], ())
        assert batch.timestamp_type is ts_type
    assert "LegacyBatch" in repr(batches[0])


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(
    "compression",
    [Compression.GZIP, Compression.SNAPPY, Compression.LZ4],
    ids=lambda c: c.name,
)
def test_legacy_compressed(magic: int, compression: Compression) -> None:
    data = build_legacy_message_set(MESSAGES, magic=magic, base_offset=200, compression=compression)
    (batch,) = legacy(data)
    assert batch.compression is compression
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (200, 204, 205)
    assert batch.record_count == 5
    assert batch.max_timestamp == (TS + 4 if magic else -1)
    assert batch.base_timestamp == (TS if magic else -1)
    assert [r.offset for r in batch] == [200, 201, 202, 203, 204]
    assert [r.value for r in batch] == [m[2] for m in MESSAGES]
    assert [r.key for r in batch] == [m[1] for m in MESSAGES]
    if magic:
        assert [r.timestamp for r in batch] == [m[0] for m in MESSAGES]


def test_legacy_magic0_lz4_uses_kafka3160_checksum() -> None:
    data = build_legacy_message_set(MESSAGES, magic=0, compression=Compression.LZ4)
    (batch,) = legacy(data)
    assert len(batch.records()) == 5


def legacy_message(
    offset: int,
    magic: int,
    attributes: int,
    key: bytes | None,
    value: bytes | None,
    *,
    timestamp: int = TS,
    crc_xor: int = 0,
) -> bytes:
    """Hand-encode one legacy message (independently of build_legacy_message_set)."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    crc = zlib.crc32(body) ^ crc_xor
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


def test_legacy_magic1_relative_offsets_with_gaps() -> None:
    # A compacted magic 1 wrapper: inner relative offsets 0, 2, 5; the wrapper holds the last
    # absolute offset, so base = 1005 - 5 (KIP-31, as Java's lastInnerOffset logic).
    inner = b"".join(legacy_message(rel, 1, 0, None, b"r%d" % rel) for rel in (0, 2, 5))
    wrapper = legacy_message(1005, 1, Compression.GZIP, None, compress(Compression.GZIP, inner))
    (batch,) = legacy(wrapper)
    assert [r.offset for r in batch] == [1000, 1002, 1005]
    assert (batch.base_offset, batch.last_offset) == (1000, 1005)


def test_legacy_magic1_producer_side_wrapper_keeps_relative_offsets() -> None:
    # Before the broker assigns offsets a producer's wrapper sits at offset 0; like Java we
    # do not produce negative offsets from it.
    inner = b"".join(legacy_message(rel, 1, 0, None, b"r") for rel in range(3))
    wrapper = legacy_message(0, 1, Compression.GZIP, None, compress(Compression.GZIP, inner))
    (batch,) = iter_batches(wrapper)
    assert [r.offset for r in batch] == [0, 1, 2]


def test_legacy_magic0_inner_offsets_are_absolute() -> None:
    inner = b"".join(legacy_message(off, 0, 0, None, b"x") for off in (70, 71, 75))
    wrapper = legacy_message(75, 0, Compression.SNAPPY, None, compress(Compression.SNAPPY, inner))
    (batch,) = legacy(wrapper)
    assert [r.offset for r in batch] == [70, 71, 75]
    assert all(r.timestamp == -1 for r in batch)


def test_legacy_log_append_time_wrapper_overrides_inner_timestamps() -> None:
    data = build_legacy_message_set(
        MESSAGES,
        magic=1,
        compression=Compression.GZIP,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        wrapper_timestamp=TS + 12345,
    )
    (batch,) = legacy(data)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {(r.timestamp, r.timestamp_type) for r in batch} == {
        (TS + 12345, TimestampType.LOG_APPEND_TIME)
    }


def test_legacy_plain_log_append_time() -> None:
    msg = legacy_message(3, 1, 0x08, None, b"v", timestamp=99)
    (batch,) = legacy(msg)
    assert batch.records()[0][1:3] == (99, TimestampType.LOG_APPEND_TIME)


def test_legacy_crc() -> None:
    msg = legacy_message(3, 1, 0, b"k", b"v", crc_xor=1)
    corrupt(msg, r"magic 1 message at offset 3: CRC32 mismatch")
    (batch,) = iter_batches(msg, check_crcs=False)
    assert batch.records()[0].value == b"v"


def test_legacy_inner_crc() -> None:
    inner = legacy_message(0, 1, 0, None, b"x", crc_xor=4)
    wrapper = legacy_message(0, 1, Compression.GZIP, None, compress(Compression.GZIP, inner))
    corrupt(wrapper, "CRC32 mismatch")
    assert len(list(iter_batches(wrapper, check_crcs=False))) == 1


def gz(data: bytes) -> bytes:
    return compress(Compression.GZIP, data)


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (legacy_message(1, 1, Compression.GZIP, None, None), "null value"),
        (legacy_message(1, 1, Compression.GZIP, None, b"junk"), "gzip"),
        (legacy_message(1, 1, Compression.GZIP, None, gz(b"")), "holds no message"),
        (
            legacy_message(1, 1, 1, None, gz(legacy_message(0, 1, 1, None, gz(b"")))),
            "inside a compressed wrapper",
        ),
        (legacy_message(1, 1, 1, None, gz(legacy_message(0, 0, 0, None, b"x"))), "differs"),
        (legacy_message(1, 1, 1, None, gz(legacy_message(0, 1, 0, None, b"x")[:-1])), "inner"),
        (legacy_message(1, 1, 1, None, gz(b"\x00" * 11)), "inner message set ends"),
        (
            legacy_message(
                1,
                1,
                1,
                None,
                gz(legacy_message(1, 1, 0, None, b"") + legacy_message(0, 1, 0, None, b"")),
            ),
            "do not increase",
        ),
        (legacy_message(1, 0, 0, None, b"v") + b"\x00", "left after the value"),
    ],
)
def test_legacy_corrupt(message: bytes, match: str) -> None:
    if match == "left after the value":
        # grow the declared size to swallow the extra byte and fix up the CRC
        body = message[12:]
        crc = struct.pack(">I", zlib.crc32(body[4:]))
        message = message[:8] + struct.pack(">i", len(body)) + crc + body[4:]
    corrupt(message, rf"message at offset 1: .*{match}")


@pytest.mark.parametrize(("magic", "field_len"), [(0, 1000), (1, -7)])
def test_legacy_bad_field_lengths(magic: int, field_len: int) -> None:
    msg = bytearray(legacy_message(2, magic, 0, b"key", b"v"))
    key_pos = 12 + 4 + 2 + (8 if magic else 0)
    struct.pack_into(">i", msg, key_pos, field_len)
    corrupt(bytes(msg), "key length", check_crcs=False)


def test_legacy_unknown_codec() -> None:
    with pytest.raises(UnsupportedCodecError):
        list(iter_batches(legacy_message(1, 1, 6, None, b"x")))


def test_legacy_builder_rejects_bad_arguments() -> None:
    with pytest.raises(KafkaConfigurationError):
        build_legacy_message_set(MESSAGES, magic=2)
    with pytest.raises(KafkaConfigurationError):
        build_legacy_message_set(MESSAGES, magic=1, compression=Compression.ZSTD)


def test_mixed_legacy_and_v2() -> None:
    b = RecordBatchBuilder(base_offset=10)
    b.append(TS, None, b"v2")
    data = (
        build_legacy_message_set(MESSAGES[:2], magic=0, base_offset=0)
        + build_legacy_message_set(MESSAGES, magic=1, base_offset=5, compression=Compression.GZIP)
        + b.build()
        + build_legacy_message_set(MESSAGES[:1], magic=1, base_offset=11)
    )
    batches = list(iter_batches(data + b.build()[:40]))
    assert [(bt.magic, bt.base_offset) for bt in batches] == [
        (0, 0),
        (0, 1),
        (1, 5),
        (2, 10),
        (1, 11),
    ]
    offsets = [r.offset for bt in batches for r in bt]
    assert offsets == [0, 1, 5, 6, 7, 8, 9, 10, 11]


# -- property-based round trip ---------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=300)
headers_st = st.lists(st.tuples(st.text(max_size=20), maybe_bytes), max_size=4)
record_st = st.tuples(
    st.integers(min_value=-(2**40), max_value=2**40),  # timestamp delta from TS
    maybe_bytes,
    maybe_bytes,
    headers_st,
)


@given(
    records=st.lists(record_st, min_size=1, max_size=40),
    compression=st.sampled_from(list(Compression)),
    timestamp_type=st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
    transactional=st.booleans(),
    control=st.booleans(),
    producer=st.tuples(
        st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)
    ),
    base_offset=st.integers(0, 2**62),
    leader_epoch=st.integers(-1, 2**31 - 1),
    gaps=st.lists(st.integers(1, 3000), min_size=40, max_size=40),
)
@settings(max_examples=150, deadline=None)
def test_round_trip(  # noqa: PLR0917 (one argument per Hypothesis strategy)
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    compression: Compression,
    timestamp_type: TimestampType,
    transactional: bool,
    control: bool,
    producer: tuple[int, int, int],
    base_offset: int,
    leader_epoch: int,
    gaps: list[int],
) -> None:
    b = RecordBatchBuilder(
        compression=compression,
        timestamp_type=timestamp_type,
        is_transactional=transactional,
        is_control=control,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
    )
    deltas = []
    delta = -1
    for (tsd, key, value, headers), gap in zip(records, gaps, strict=False):
        delta += gap
        b.append_with_offset_delta(delta, TS + tsd, key, value, headers)
        deltas.append(delta)
    data = b.build()
    if not compression:
        assert len(data) == b.size_in_bytes()
    batch = one_batch(data)
    assert batch.compression is compression
    assert batch.timestamp_type is timestamp_type
    assert (batch.is_transactional, batch.is_control) == (transactional, control)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert (batch.base_offset, batch.partition_leader_epoch) == (base_offset, leader_epoch)
    assert batch.last_offset == base_offset + deltas[-1]
    assert batch.base_timestamp == TS + records[0][0]
    assert batch.max_timestamp == TS + max(r[0] for r in records)
    decoded = batch.records()
    assert len(decoded) == batch.record_count == len(records)
    for rec, (tsd, key, value, headers), d in zip(decoded, records, deltas, strict=True):
        assert rec.offset == base_offset + d
        if timestamp_type is TimestampType.LOG_APPEND_TIME:
            assert rec.timestamp == batch.max_timestamp
        else:
            assert rec.timestamp == TS + tsd
        assert rec.timestamp_type is timestamp_type
        assert (rec.key, rec.value, rec.headers) == (key, value, tuple(headers))
    # a second decode gives the same records; the truncated copy yields nothing
    assert batch.records() == decoded
    assert list(iter_batches(data[:-1])) == []


@given(
    st.lists(st.tuples(st.integers(0, 2**40), maybe_bytes, maybe_bytes), min_size=1, max_size=20),
    st.sampled_from([0, 1]),
    st.sampled_from([Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]),
    st.integers(0, 2**40),
)
@settings(max_examples=80, deadline=None)
def test_legacy_round_trip(
    messages: list[tuple[int, bytes | None, bytes | None]],
    magic: int,
    compression: Compression,
    base_offset: int,
) -> None:
    data = build_legacy_message_set(
        messages, magic=magic, base_offset=base_offset, compression=compression
    )
    records = [r for batch in iter_batches(data) for r in batch]
    assert [r.offset for r in records] == [base_offset + i for i in range(len(messages))]
    assert [(r.key, r.value) for r in records] == [(k, v) for _, k, v in messages]
    if magic == 1:
        assert [r.timestamp for r in records] == [t for t, _, _ in messages]
