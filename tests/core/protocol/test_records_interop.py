"""Interop: batches we write are read by independent implementations, and vice versa.

aiokafka 0.14 (its Cython record code *and* its pure-Python fallback) and kafka-python 3.0
are test-only dependencies. Every codec is covered both ways where the other library
supports it: magic 2 with none/gzip/snappy/lz4/zstd; legacy magic 0/1 with none/gzip/snappy,
and lz4 for magic 1 (both libraries need the ``xxhash`` package for magic 0 lz4).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from kafkastate.core.protocol.compression import Compression
from kafkastate.core.protocol.records import (
    ControlRecordType,
    LegacyBatch,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    build_legacy_message_set,
    iter_batches,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import aiokafka.record.default_records as aio_default
    import aiokafka.record.legacy_records as aio_legacy
    import aiokafka.record.memory_records as aio_memory
    import kafka.record.default_records as kp_default
    import kafka.record.legacy_records as kp_legacy
    import kafka.record.memory_records as kp_memory

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TS = 1_700_000_000_000
V2_CODECS = list(Compression)
LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
# magic 0 lz4 (KAFKA-3160 framing) needs the xxhash package in both libraries: left out here,
# covered by tests/core/protocol/test_records.py and test_compression.py.
LEGACY_CASES = [(m, c) for m in (0, 1) for c in LEGACY_CODECS if (m, c) != (0, Compression.LZ4)]

# (name, reader batch class, builder class) for each independent magic 2 implementation
V2_IMPLS: list[tuple[str, Any, Any]] = [
    ("aiokafka-c", aio_default.DefaultRecordBatch, aio_default.DefaultRecordBatchBuilder),
    (
        "aiokafka-py",
        aio_default._DefaultRecordBatchPy,
        aio_default._DefaultRecordBatchBuilderPy,
    ),
    ("kafka-python", kp_default.DefaultRecordBatch, kp_default.DefaultRecordBatchBuilder),
]
LEGACY_IMPLS: list[tuple[str, Any, Any]] = [
    ("aiokafka-c", aio_legacy.LegacyRecordBatch, aio_legacy.LegacyRecordBatchBuilder),
    ("aiokafka-py", aio_legacy._LegacyRecordBatchPy, aio_legacy._LegacyRecordBatchBuilderPy),
    ("kafka-python", kp_legacy.LegacyRecordBatch, kp_legacy.LegacyRecordBatchBuilder),
]


def test_aiokafka_uses_its_c_extension() -> None:
    # The interop matrix covers both; this pins which one "aiokafka-c" is.
    assert "_crecords" in aio_default.DefaultRecordBatch.__module__


def sample_records(n: int = 50) -> list[tuple[int, bytes | None, bytes | None, list[Any]]]:
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else b"value-%d-" % i * (i % 5 + 1)
        headers = [(f"h{j}", None if j == 1 else b"hv%d" % j) for j in range(i % 3)]
        out.append((TS + i * 3 - 20, key, value, headers))
    return out


def norm_headers(headers: Any) -> list[tuple[str, bytes | None]]:
    return [(k, None if v is None else bytes(v)) for k, v in (headers or [])]


# -- kafkastate writes, others read ----------------------------------------------------------


@pytest.mark.parametrize("codec", V2_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize(("impl", "reader", "_builder"), V2_IMPLS, ids=[i[0] for i in V2_IMPLS])
def test_v2_we_write_they_read(impl: str, reader: Any, _builder: Any, codec: Compression) -> None:
    records = sample_records()
    b = RecordBatchBuilder(
        compression=codec,
        producer_id=123,
        producer_epoch=4,
        base_sequence=56,
        is_transactional=True,
        base_offset=1000,
    )
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    batch = reader(b.build())
    assert batch.validate_crc()
    assert batch.base_offset == 1000
    assert batch.compression_type == codec
    assert batch.is_transactional
    assert not batch.is_control_batch
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123, 4, 56)
    assert batch.next_offset == 1000 + len(records)
    got = list(batch)
    assert len(got) == len(records)
    for i, (rec, (ts, key, value, headers)) in enumerate(zip(got, records, strict=True)):
        assert rec.offset == 1000 + i
        assert rec.timestamp == ts
        assert rec.timestamp_type == 0
        assert rec.key == key
        assert rec.value == value
        assert norm_headers(rec.headers) == headers


@pytest.mark.parametrize("memory_records", [aio_memory.MemoryRecords, kp_memory.MemoryRecords])
def test_several_batches_through_memory_records(memory_records: Any) -> None:
    data = b""
    for i, codec in enumerate(V2_CODECS):
        b = RecordBatchBuilder(compression=codec, base_offset=i * 10)
        for j in range(3):
            b.append(TS, None, b"%d/%d" % (i, j))
        data += b.build()
    records = memory_records(data + data[:30])  # a cut tail, as in a fetch response
    values = []
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        values += [r.value for r in batch]
    assert values == [b"%d/%d" % (i, j) for i in range(5) for j in range(3)]


@pytest.mark.parametrize("marker", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batch_read_by_others(marker: ControlRecordType) -> None:
    data = build_control_batch(
        marker, producer_id=9, producer_epoch=1, coordinator_epoch=7, timestamp_ms=TS
    )
    aio = aio_default.DefaultRecordBatch(data)
    assert aio.is_control_batch and aio.is_transactional and aio.validate_crc()
    kp = kp_default.DefaultRecordBatch(data)
    assert kp.is_control_batch and kp.validate_crc()
    (record,) = list(kp)
    assert record.abort is (marker is ControlRecordType.ABORT)
    assert record.commit is (marker is ControlRecordType.COMMIT)


@pytest.mark.parametrize(("magic", "codec"), LEGACY_CASES, ids=lambda v: str(getattr(v, "name", v)))
@pytest.mark.parametrize(
    ("impl", "reader", "_builder"), LEGACY_IMPLS, ids=[i[0] for i in LEGACY_IMPLS]
)
def test_our_legacy_test_encoder_is_faithful(
    impl: str, reader: Any, _builder: Any, magic: int, codec: Compression
) -> None:
    # build_legacy_message_set only produces test inputs; check it against the others.
    messages = [(TS + i, b"k%d" % i if i % 2 else None, b"v%d" % i) for i in range(4)]
    data = build_legacy_message_set(messages, magic=magic, base_offset=70, compression=codec)
    got = []
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big")
        batch = reader(data[pos : pos + 12 + size], magic)
        assert batch.validate_crc()
        got += list(batch)
        pos += 12 + size
    assert [r.offset for r in got] == [70, 71, 72, 73]
    assert [(r.key, r.value) for r in got] == [(k, v) for _, k, v in messages]
    if magic == 1:
        assert [r.timestamp for r in got] == [t for t, _, _ in messages]


# -- others write, kafkastate reads ----------------------------------------------------------


@pytest.mark.parametrize("codec", V2_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize(("impl", "_reader", "builder"), V2_IMPLS, ids=[i[0] for i in V2_IMPLS])
def test_v2_they_write_we_read(impl: str, _reader: Any, builder: Any, codec: Compression) -> None:
    records = sample_records()
    b = builder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=77,
        producer_epoch=2,
        base_sequence=10,
        batch_size=1 << 30,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    data = bytes(b.build())
    (batch,) = iter_batches(data)
    assert isinstance(batch, RecordBatch)
    assert batch.compression is codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, 10)
    assert not batch.is_transactional and not batch.is_control
    assert batch.last_offset == len(records) - 1
    got = batch.records()
    for i, (rec, (ts, key, value, headers)) in enumerate(zip(got, records, strict=True)):
        assert rec.offset == i
        assert rec.timestamp == ts
        assert rec.timestamp_type is TimestampType.CREATE_TIME
        assert (rec.key, rec.value, list(rec.headers)) == (key, value, headers)


@pytest.mark.parametrize(("magic", "codec"), LEGACY_CASES, ids=lambda v: str(getattr(v, "name", v)))
@pytest.mark.parametrize(
    ("impl", "_reader", "builder"), LEGACY_IMPLS, ids=[i[0] for i in LEGACY_IMPLS]
)
def test_legacy_they_write_we_read(
    impl: str, _reader: Any, builder: Any, magic: int, codec: Compression
) -> None:
    messages = [(TS + i, b"k%d" % i if i % 2 else None, b"v%d" % i * 20) for i in range(6)]
    b = builder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (ts, key, value) in enumerate(messages):
        b.append(i, timestamp=ts, key=key, value=value)
    data = bytes(b.build())
    batches = list(iter_batches(data))
    assert all(isinstance(bt, LegacyBatch) and bt.magic == magic for bt in batches)
    assert len(batches) == (6 if codec is Compression.NONE else 1)
    records = [r for bt in batches for r in bt]
    # Compressed: inner offsets 0..5; the builders write the wrapper at the last one.
    assert [r.offset for r in records] == list(range(6))
    assert [(r.key, r.value) for r in records] == [(k, v) for _, k, v in messages]
    if magic == 1:
        assert [r.timestamp for r in records] == [t for t, _, _ in messages]
        assert {r.timestamp_type for r in records} == {TimestampType.CREATE_TIME}
    else:
        assert {r.timestamp for r in records} == {-1}
    if codec is not Compression.NONE:
        # Once the broker assigns offsets 100..105 it stamps the wrapper with the last one
        # (outside the CRC); magic 1 inner offsets stay relative (KIP-31).
        assigned = (105).to_bytes(8, "big") + data[8:]
        if magic == 0:
            assert [r.offset for r in next(iter_batches(assigned))] == list(range(6))
        else:
            assert [r.offset for r in next(iter_batches(assigned))] == list(range(100, 106))


def test_mixed_legacy_and_v2_written_by_aiokafka() -> None:
    legacy = aio_legacy.LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for i in range(3):
        legacy.append(i, timestamp=TS, key=None, value=b"old%d" % i)
    v2 = aio_default.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=4,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(3):
        v2.append(i, timestamp=TS, key=None, value=b"new%d" % i, headers=[])
    v2_bytes = bytearray(v2.build())
    v2_bytes[0:8] = (3).to_bytes(8, "big")  # the broker assigns the base offset
    data = bytes(legacy.build()) + bytes(v2_bytes)
    records = [r for batch in iter_batches(data) for r in batch]
    assert [(r.offset, r.value) for r in records] == [
        (0, b"old0"),
        (1, b"old1"),
        (2, b"old2"),
        (3, b"new0"),
        (4, b"new1"),
        (5, b"new2"),
    ]
