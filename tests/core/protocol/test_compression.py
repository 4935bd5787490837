"""Unit tests for kafkastate.core.protocol.compression."""

from __future__ import annotations

import contextlib
import gzip
import random
import struct
import warnings
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastate.core.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    compress,
    decompress,
    xxh32,
)
from kafkastate.errors import CorruptRecordError, KafkaConfigurationError, UnsupportedCodecError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.codec import snappy_encode  # kafka-python: an independent xerial writer

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]
SAMPLES = [
    b"",
    b"x",
    b"hello kafka " * 10,
    bytes(random.Random(7).randbytes(5000)),
    (bytes(range(256)) * 400)[:100_000],  # > 32 KiB: several xerial blocks, two lz4 blocks
]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_round_trip(codec: Compression, data: bytes) -> None:
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_accepts_any_buffer(codec: Compression) -> None:
    data = b"abc" * 1000
    packed = compress(codec, bytearray(data))
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


@given(st.binary(max_size=3000), st.sampled_from(CODECS))
@settings(max_examples=60, deadline=None)
def test_round_trip_property(data: bytes, codec: Compression) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize(
    ("codec", "level"),
    [
        (Compression.GZIP, 1),
        (Compression.GZIP, 9),
        (Compression.LZ4, 1),
        (Compression.LZ4, 12),
        (Compression.ZSTD, -5),
        (Compression.ZSTD, 19),
        (Compression.SNAPPY, 5),
    ],
)
def test_levels(codec: Compression, level: int) -> None:
    data = b"level " * 2000
    assert decompress(codec, compress(codec, data, level=level)) == data


@pytest.mark.parametrize(("codec", "level"), [(Compression.GZIP, 42), (Compression.ZSTD, 99)])
def test_bad_level(codec: Compression, level: int) -> None:
    with pytest.raises(KafkaConfigurationError):
        compress(codec, b"data", level=level)


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCodecError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCodecError):
        decompress(codec, b"x")


def test_enum_values_match_protocol() -> None:
    assert [int(c) for c in Compression] == [0, 1, 2, 3, 4]


# -- gzip ----------------------------------------------------------------------------------


def test_gzip_is_a_standard_gzip_stream() -> None:
    data = b"gzip me " * 100
    packed = compress(Compression.GZIP, data)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == data
    assert decompress(Compression.GZIP, gzip.compress(data, mtime=0)) == data


def test_gzip_concatenated_members() -> None:
    packed = gzip.compress(b"one ") + gzip.compress(b"two")
    assert decompress(Compression.GZIP, packed) == b"one two"


def test_gzip_trailing_garbage_is_ignored_like_gzipinputstream() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"abc") + b"\x00\x00") == b"abc"


def test_gzip_truncated() -> None:
    packed = compress(Compression.GZIP, bytes(random.Random(1).randbytes(2000)))
    with pytest.raises(CorruptRecordError, match="gzip"):
        decompress(Compression.GZIP, packed[:-12])


def test_gzip_zlib_stream_is_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="gzip"):
        decompress(Compression.GZIP, zlib.compress(b"not gzip"))


# -- snappy --------------------------------------------------------------------------------


def test_snappy_writes_xerial_framing() -> None:
    data = (bytes(range(256)) * 400)[:100_000]
    packed = compress(Compression.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 1696]  # SnappyOutputStream blocks
    assert b"".join(blocks) == data


def test_snappy_reads_raw_block() -> None:
    data = b"raw snappy " * 50
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw) == data


def test_snappy_reads_concatenated_xerial_streams() -> None:
    a = compress(Compression.SNAPPY, b"first ")
    b = compress(Compression.SNAPPY, b"second")
    assert decompress(Compression.SNAPPY, a + b) == b"first second"


def test_snappy_reads_kafka_python_xerial() -> None:
    data = bytes(random.Random(3).randbytes(70_000))
    assert decompress(Compression.SNAPPY, snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(Compression.SNAPPY, snappy_encode(data, xerial_compatible=False)) == data


@pytest.mark.parametrize(
    "bad",
    [
        b"\x82SNAPPY\x00\x00\x00\x00\x01",  # cut header
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00",  # cut block length
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09abc",  # block too long
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff",  # negative length
        b"\xff\xff\xff\xff\xff\xff",  # raw: bad length varint
        b"\x0aabc",  # raw: says 10 bytes, has 3 literal bytes without a tag
    ],
)
def test_snappy_corrupt(bad: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="snappy"):
        decompress(Compression.SNAPPY, bad)


# -- lz4 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0x02CC5D05),
        (b"abc", 0x32D153FF),
        (b"Nobody inspects the spammish repetition", 0xE2293B2F),
    ],
)
def test_xxh32_vectors(data: bytes, expected: int) -> None:
    assert xxh32(data) == expected


@pytest.mark.parametrize("store_size", [False, True])
def test_xxh32_matches_lz4_header_checksum(store_size: bool) -> None:
    frame = lz4.frame.compress(b"abc" * 10, store_size=store_size)
    hc_pos = 14 if store_size else 6
    assert frame[hc_pos] == (xxh32(frame[4:hc_pos]) >> 8) & 0xFF


def test_lz4_frame_matches_kafka_lz4_block_output_stream() -> None:
    packed = compress(Compression.LZ4, b"q" * 200_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks (KIP-57)
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert bd == 0x40  # 64 KiB max block size


@pytest.mark.parametrize(
    "kwargs",
    [
        {"store_size": True},
        {"content_checksum": True},
        {"block_linked": True},
        {"block_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
)
def test_lz4_reads_other_frame_options(kwargs: dict[str, object]) -> None:
    data = bytes(random.Random(5).randbytes(3000)) * 40
    assert decompress(Compression.LZ4, lz4.frame.compress(data, **kwargs)) == data


def test_lz4_concatenated_frames() -> None:
    packed = lz4.frame.compress(b"a" * 10) + lz4.frame.compress(b"b" * 10)
    assert decompress(Compression.LZ4, packed) == b"a" * 10 + b"b" * 10


def _kafka3160(frame: bytes) -> bytes:
    """Rewrite a frame's header checksum the way Kafka 0.8/0.9 computed it."""
    broken = bytearray(frame)
    broken[6] = (xxh32(bytes(broken[0:6])) >> 8) & 0xFF
    assert broken[6] != frame[6]
    return bytes(broken)


def test_lz4_kafka3160_broken_header_checksum() -> None:
    data = b"legacy lz4 " * 300
    broken = _kafka3160(compress(Compression.LZ4, data))
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(Compression.LZ4, broken)
    assert decompress(Compression.LZ4, broken, lz4_broken_header_checksum=True) == data
    # a correct checksum is accepted from magic 0 too (newer clients writing magic 0)
    good = compress(Compression.LZ4, data)
    assert decompress(Compression.LZ4, good, lz4_broken_header_checksum=True) == data


@pytest.mark.parametrize(
    "bad",
    [b"", b"\x04\x22\x4d", b"\x04\x22\x4d\x18\x60", b"nope nope nope", b"\x04\x22\x4d\x18\x68\x40"],
)
def test_lz4_corrupt_header(bad: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(Compression.LZ4, bad)
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(Compression.LZ4, bad, lz4_broken_header_checksum=True)


@pytest.mark.parametrize("max_size", [DEFAULT_MAX_DECOMPRESSED_SIZE, 100_000])
def test_lz4_truncated_and_trailing_garbage(max_size: int) -> None:
    # The small max_size forces the bounded (frame by frame) path.
    packed = compress(Compression.LZ4, bytes(random.Random(2).randbytes(20_000)))
    for bad in (packed[:-3], packed[: len(packed) // 2], packed + b"xyz"):
        with pytest.raises(CorruptRecordError, match="lz4"):
            decompress(Compression.LZ4, bad, max_size=max_size)


def test_lz4_size_limit_error_keeps_its_own_message() -> None:
    # (CorruptRecordError is a RuntimeError too: it must not be re-wrapped as lz4's own)
    packed = compress(Compression.LZ4, bytes(200_000))
    with pytest.raises(CorruptRecordError, match=r"^lz4: decompressed size exceeds the limit"):
        decompress(Compression.LZ4, packed, max_size=100_000)


def test_lz4_bounded_path_round_trip() -> None:
    data = bytes(random.Random(2).randbytes(20_000)) * 3
    packed = compress(Compression.LZ4, data) + compress(Compression.LZ4, b"tail")
    assert decompress(Compression.LZ4, packed, max_size=len(data) + 4) == data + b"tail"


# -- zstd ----------------------------------------------------------------------------------


def test_zstd_streamed_frame_without_content_size() -> None:
    data = bytes(range(256)) * 4000
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    packed = cobj.compress(data) + cobj.flush()
    assert zstandard.frame_content_size(packed) == -1
    assert decompress(Compression.ZSTD, packed) == data


def test_zstd_multiple_and_skippable_frames() -> None:
    cctx = zstandard.ZstdCompressor(write_checksum=True)
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    packed = cctx.compress(b"one ") + skippable + cctx.compress(b"two")
    assert decompress(Compression.ZSTD, packed) == b"one two"


def test_zstd_reads_cramjam() -> None:
    data = b"cramjam zstd " * 500
    assert decompress(Compression.ZSTD, bytes(cramjam.zstd.compress(data))) == data


@pytest.mark.parametrize("cut", [1, 3, 5, 10, -1, -4])
def test_zstd_truncated(cut: int) -> None:
    cobj = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    packed = cobj.compress(bytes(random.Random(4).randbytes(5000))) + cobj.flush()
    with pytest.raises(CorruptRecordError, match="zstd"):
        decompress(Compression.ZSTD, packed[:cut])


def test_zstd_trailing_garbage_and_bad_magic() -> None:
    packed = compress(Compression.ZSTD, b"zzz")
    for bad in (packed + b"x", packed + b"\x00\x00\x00\x00\x00", b"\x00" * 20, b""):
        with pytest.raises(CorruptRecordError, match="zstd"):
            decompress(Compression.ZSTD, bad)


# -- decompression bombs -------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_max_size_is_enforced(codec: Compression) -> None:
    data = bytes(2_000_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=2_000_000) == data
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(codec, packed, max_size=1_999_999)


def test_zstd_declared_size_bomb_is_refused_before_allocating() -> None:
    # A frame header claiming 2**40 bytes of content.
    header = struct.pack("<I", 0xFD2FB528) + bytes([0xE0]) + struct.pack("<Q", 1 << 40)
    block = bytes([0x01, 0x00, 0x00])  # last, raw, size 0
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.ZSTD, header + block)


def test_zstd_sizeless_rle_bomb() -> None:
    # One RLE block regenerating 100 KiB from one byte, no content size in the header.
    header = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x58])  # window ~ 2 MiB
    size = 100 * 1024
    block = ((size << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"A"
    assert decompress(Compression.ZSTD, header + block) == b"A" * size
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.ZSTD, header + block, max_size=size - 1)


def test_lz4_declared_size_bomb() -> None:
    packed = lz4.frame.compress(b"x" * 1000, store_size=True)
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.LZ4, packed, max_size=999)


def test_snappy_declared_size_bomb() -> None:
    raw = bytes(cramjam.snappy.compress_raw(b"y" * 1000))
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.SNAPPY, raw, max_size=999)
    framed = compress(Compression.SNAPPY, b"y" * 70_000)
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.SNAPPY, framed, max_size=69_999)


# -- garbage never leaks a library exception -----------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_random_garbage_only_raises_corrupt_record_error(codec: Compression) -> None:
    rng = random.Random(int(codec))
    valid = compress(codec, bytes(rng.randbytes(3000)) * 3)
    for _ in range(300):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            if op == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == 1:
                del data[rng.randrange(len(data) + 1) :]
            else:
                data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randint(1, 8))
        with contextlib.suppress(CorruptRecordError):
            decompress(codec, bytes(data), max_size=1 << 20)
        with contextlib.suppress(CorruptRecordError):
            decompress(codec, bytes(data), max_size=1 << 20, lz4_broken_header_checksum=True)


@given(st.binary(max_size=200), st.sampled_from(COMPRESSED))
@settings(max_examples=100, deadline=None)
def test_arbitrary_bytes_only_raise_corrupt_record_error(data: bytes, codec: Compression) -> None:
    with contextlib.suppress(CorruptRecordError):
        decompress(codec, data, max_size=1 << 20)
