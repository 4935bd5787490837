"""Record-batch compression codecs: gzip, snappy, lz4 and zstd.

Theory of operation
-------------------
Kafka compresses the *records section* of a batch (magic 2) or the value of a legacy wrapper
message (magic 0/1) with the codec named by attribute bits 0-2 (protocol guide, "Record
Batch"; KIP-110 added zstd). This module turns those ids into bytes in / bytes out, in the
exact framings the Java client writes and reads:

* gzip (1): an RFC 1952 stream (``java.util.zip.GZIPOutputStream``); concatenated members are
  read like ``GZIPInputStream`` does.
* snappy (2): written in the xerial framing of snappy-java's ``SnappyOutputStream`` (16-byte
  header ``\\x82SNAPPY\\x00`` + version 1 + compatible version 1, then ``[int32 BE length,
  raw snappy block]*`` of at most 32 KiB of input each). Read: that framing (including
  streams concatenated header and all, as ``SnappyInputStream`` accepts) or a bare raw snappy
  block, as some non-Java clients write.
* lz4 (3): the LZ4 *frame* format with independent 64 KiB blocks and no content checksum, as
  ``KafkaLZ4BlockOutputStream`` writes (KIP-57). Magic 0 producers computed the frame
  descriptor's header checksum over the magic number too (KAFKA-3160); for those messages the
  checksum byte is recomputed before decoding, as the Java and librdkafka readers do.
* zstd (4): a zstd frame (level 3 by default, as the broker's KIP-390 default).

Every failure of a codec library becomes :class:`~kafkastate.errors.CorruptRecordError`; a
codec id outside 0-4 raises :class:`~kafkastate.errors.UnsupportedCodecError`. Output is capped
at ``max_size`` bytes so a small hostile batch cannot expand into gigabytes (a "decompression
bomb"). This module is pure: no IO, no clock, no randomness.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import TYPE_CHECKING, Final

from kafkastate.errors import CorruptRecordError, KafkaConfigurationError, UnsupportedCodecError

if TYPE_CHECKING:
    import zstandard

# The codec libraries (cramjam, lz4, zstandard) are imported by the functions that use
# them: a client that never meets a compressed batch never imports them (import time).

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "Compression",
    "compress",
    "decompress",
    "xxh32",
]

Buffer = bytes | bytearray | memoryview

DEFAULT_MAX_DECOMPRESSED_SIZE: Final = 256 * 1024 * 1024
"""Default cap on one batch's decompressed size (256 MiB)."""


class Compression(enum.IntEnum):
    """Compression codec ids, attribute bits 0-2 of a batch or legacy message."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4  # KIP-110; only valid in magic 2 batches


_CODEC_MASK: Final = 0x07

# ---------------------------------------------------------------------------------------------
# snappy (xerial framing, snappy-java SnappyCodec/SnappyOutputStream)

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible 1
_XERIAL_HEADER_LEN: Final = 16
_XERIAL_BLOCK: Final = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE
_INT32_BE: Final = struct.Struct(">i")


def _snappy_compress(data: Buffer) -> bytes:
    import cramjam  # noqa: PLC0415 -- see the top

    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    pack = _INT32_BE.pack
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = compress_raw(view[start : start + _XERIAL_BLOCK])
        parts.append(pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _snappy_raw(block: Buffer, budget: int) -> bytes:
    import cramjam  # noqa: PLC0415 -- see the top

    # The raw format starts with the uncompressed length (a varint): check it before
    # allocating anything.
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise CorruptRecordError(f"snappy: invalid block header ({exc})") from None
    if size > budget:
        raise CorruptRecordError(
            f"snappy: decompressed size {size} exceeds the limit of {budget} bytes"
        )
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as exc:
        raise CorruptRecordError(f"snappy: corrupt block ({exc})") from None


def _snappy_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return _snappy_raw(view, max_size)
    parts: list[bytes] = []
    total = 0
    pos = 0
    end = len(view)
    while pos < end:
        if bytes(view[pos : pos + 8]) == _XERIAL_MAGIC:
            # A (possibly concatenated) stream header. Version and compatible version are
            # informational; snappy-java only requires compatible >= 1.
            if end - pos < _XERIAL_HEADER_LEN:
                raise CorruptRecordError("snappy: truncated xerial stream header")
            pos += _XERIAL_HEADER_LEN
            continue
        if end - pos < 4:
            raise CorruptRecordError("snappy: truncated xerial block length")
        (length,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(
                f"snappy: xerial block length {length} runs past the end of the data"
            )
        block = _snappy_raw(view[pos : pos + length], max_size - total)
        pos += length
        total += len(block)
        parts.append(block)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# gzip

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS  # gzip header and trailer, no zlib auto-detection


def _gzip_compress(data: Buffer, level: int | None) -> bytes:
    try:
        comp = zlib.compressobj(
            -1 if level is None else level, zlib.DEFLATED, _GZIP_WBITS, 8, zlib.Z_DEFAULT_STRATEGY
        )
    except (ValueError, zlib.error) as exc:
        raise KafkaConfigurationError(f"invalid gzip compression level {level!r}: {exc}") from None
    return comp.compress(data) + comp.flush()


def _gzip_decompress(data: Buffer, max_size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest: Buffer = data
    try:
        while True:
            d = zlib.decompressobj(_GZIP_WBITS)
            out = d.decompress(rest, max_size - total + 1)
            total += len(out)
            if total > max_size or d.unconsumed_tail:
                raise CorruptRecordError(
                    f"gzip: decompressed size exceeds the limit of {max_size} bytes"
                )
            out += d.flush()
            if not d.eof:
                raise CorruptRecordError("gzip: truncated stream")
            parts.append(out)
            rest = d.unused_data
            # GZIPInputStream reads concatenated members; trailing zero padding is tolerated
            # the same way it is (it stops at the first non-member bytes).
            if not rest or rest[:2] != b"\x1f\x8b":
                break
    except zlib.error as exc:
        raise CorruptRecordError(f"gzip: {exc}") from None
    return b"".join(parts) if len(parts) != 1 else parts[0]


# ---------------------------------------------------------------------------------------------
# lz4 (frame format, KIP-57; KAFKA-3160 for magic 0)

_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_LZ4_FLG_CONTENT_SIZE: Final = 0x08
# LZ4 cannot expand a block by more than ~255x (each extra match-length byte yields at most
# 255 output bytes); under this bound the fast one-shot decoder is safe to use.
_LZ4_MAX_RATIO: Final = 256
_U64_LE: Final = struct.Struct("<Q")

_P1: Final = 2654435761
_P2: Final = 2246822519
_P3: Final = 3266489917
_P4: Final = 668265263
_P5: Final = 374761393
_M32: Final = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """Return the XXH32 hash of ``data`` (used for the LZ4 frame header checksum).

    Args:
        data: the bytes to hash.
        seed: the 32-bit seed.

    Returns:
        The unsigned 32-bit hash.
    """
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i <= n - 16:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl32((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl32((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl32((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl32((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (w,) = struct.unpack_from("<I", data, i)
        h = (_rotl32((h + w * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl32((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


_LZ4_DEFAULT_LEVEL: Final = 9  # KIP-390 compression.lz4.level default


def _lz4_compress(data: Buffer, level: int | None) -> bytes:
    import lz4.frame  # noqa: PLC0415 -- see the top

    # Kafka's Lz4BlockOutputStream uses the *fast* compressor at the default level and LZ4-HC
    # only for an explicitly different level; python-lz4's level 0 is the fast mode.
    if level is None or level == _LZ4_DEFAULT_LEVEL:
        level = 0
    try:
        return lz4.frame.compress(  # type: ignore[no-any-return]
            data,
            compression_level=level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,  # KafkaLZ4BlockOutputStream.BLOCKSIZE_64KB
            block_linked=False,  # KIP-57: blocks must be independent
            content_checksum=False,
            store_size=False,
        )
    except (ValueError, RuntimeError) as exc:
        raise KafkaConfigurationError(f"invalid lz4 compression level {level!r}: {exc}") from None


def _lz4_descriptor_end(view: memoryview) -> int:
    """Index of the header checksum byte of the LZ4 frame at the start of ``view``."""
    if len(view) < 7 or bytes(view[:4]) != _LZ4_MAGIC:
        raise CorruptRecordError("lz4: missing frame magic number")
    hc_pos = 6 + (8 if view[4] & _LZ4_FLG_CONTENT_SIZE else 0)
    if len(view) <= hc_pos:
        raise CorruptRecordError("lz4: truncated frame descriptor")
    return hc_pos


def _lz4_fix_kafka3160(data: Buffer) -> Buffer:
    # KAFKA-3160: Kafka 0.8/0.9 computed the frame descriptor checksum over magic + descriptor.
    # The Java reader skips the check for magic 0; we rewrite the byte to the correct value so
    # the (strict) frame decoder accepts it.
    view = memoryview(data)
    hc_pos = _lz4_descriptor_end(view)
    fixed = bytearray(view)
    fixed[hc_pos] = (xxh32(bytes(view[4:hc_pos])) >> 8) & 0xFF
    return fixed


def _lz4_decompress(data: Buffer, max_size: int, broken_checksum: bool) -> bytes:
    import cramjam  # noqa: PLC0415 -- see the top
    import lz4.frame  # noqa: PLC0415

    if broken_checksum:
        data = _lz4_fix_kafka3160(data)
    view = memoryview(data)
    _lz4_descriptor_end(view)  # magic number and descriptor present
    if view[4] & _LZ4_FLG_CONTENT_SIZE:
        (declared,) = _U64_LE.unpack_from(view, 6)
        if declared > max_size:
            raise CorruptRecordError(
                f"lz4: declared content size {declared} exceeds the limit of {max_size} bytes"
            )
    if len(view) * _LZ4_MAX_RATIO <= max_size:
        try:
            return bytes(cramjam.lz4.decompress(view))
        except Exception as exc:  # cramjam.DecompressionError
            raise CorruptRecordError(f"lz4 decompression failed: {exc}") from None
    # Large input: decode frame by frame with an output cap.
    parts: list[bytes] = []
    total = 0
    rest: bytes = bytes(view)
    try:
        while rest:
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(rest, max_length=max_size - total + 1)
            total += len(out)
            if total > max_size:
                raise CorruptRecordError(
                    f"lz4: decompressed size exceeds the limit of {max_size} bytes"
                )
            if not d.eof:
                raise CorruptRecordError("lz4: truncated frame")
            parts.append(out)
            rest = d.unused_data or b""
    except CorruptRecordError:
        raise  # (a KafkaError is a RuntimeError too: keep the message above)
    except RuntimeError as exc:  # lz4's own errors
        raise CorruptRecordError(f"lz4 decompression failed: {exc}") from None
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# zstd (KIP-110)

_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK: Final = 0xFFFFFFF0
_ZSTD_SKIPPABLE: Final = 0x184D2A50
_ZSTD_MAX_BLOCK: Final = 128 * 1024  # RFC 8878 3.1.1.2.3: Block_Maximum_Size <= 128 KiB
_ZSTD_FCS_SIZES: Final = (0, 2, 4, 8)
_ZSTD_DICT_SIZES: Final = (0, 1, 2, 4)
_U32_LE: Final = struct.Struct("<I")


# Creating a zstd context costs ~15 us, ten times a small batch's decompression, so contexts
# are reused. They must not be shared by two threads at once: list.pop()/append() are atomic,
# so each call takes a context nobody else holds and puts it back (no lock, no threading).
_ZSTD_DCTX_POOL: list[zstandard.ZstdDecompressor] = []
_ZSTD_CCTX_POOLS: dict[int, list[zstandard.ZstdCompressor]] = {}
_ZSTD_DEFAULT_LEVEL: Final = 3  # KIP-390 compression.zstd.level default


def _zstd_compress(data: Buffer, level: int | None) -> bytes:
    import zstandard  # noqa: PLC0415 -- see the top

    if level is None:
        level = _ZSTD_DEFAULT_LEVEL
    pool = _ZSTD_CCTX_POOLS.setdefault(level, [])
    try:
        cctx = pool.pop()
    except IndexError:
        try:
            cctx = zstandard.ZstdCompressor(level=level)
        except (ValueError, zstandard.ZstdError, TypeError) as exc:
            raise KafkaConfigurationError(
                f"invalid zstd compression level {level!r}: {exc}"
            ) from None
    try:
        return cctx.compress(data)
    finally:
        pool.append(cctx)


def _zstd_frames(view: memoryview) -> list[tuple[int, int, int]]:
    """Walk the frames of a zstd stream (RFC 8878 section 3.1) without decoding them.

    Returns ``(start, end, max_output)`` per data frame. Walking first finds truncated or
    trailing garbage exactly (zstandard's streaming reader stops silently at a cut frame) and
    bounds the output of frames that do not state their content size.
    """
    frames: list[tuple[int, int, int]] = []
    pos = 0
    end = len(view)
    if end == 0:
        raise CorruptRecordError("zstd: empty input")
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("zstd: truncated frame magic number")
        (magic,) = _U32_LE.unpack_from(view, pos)
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
            if end - pos < 8:
                raise CorruptRecordError("zstd: truncated skippable frame")
            (size,) = _U32_LE.unpack_from(view, pos + 4)
            pos += 8 + size
            if pos > end:
                raise CorruptRecordError("zstd: truncated skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"zstd: bad frame magic number 0x{magic:08x}")
        start = pos
        pos += 4
        if pos >= end:
            raise CorruptRecordError("zstd: truncated frame header")
        fhd = view[pos]
        single_segment = fhd & 0x20
        fcs_flag = fhd >> 6
        fcs_size = _ZSTD_FCS_SIZES[fcs_flag] or (1 if single_segment else 0)
        pos += 1 + (0 if single_segment else 1) + _ZSTD_DICT_SIZES[fhd & 0x03] + fcs_size
        bound = 0
        while True:
            if pos + 3 > end:
                raise CorruptRecordError("zstd: truncated block header")
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            pos += 3
            block_type = (header >> 1) & 0x03
            block_size = header >> 3
            if block_type == 1:  # RLE: one byte repeated block_size times
                bound += block_size
                pos += 1
            elif block_type == 0:  # raw
                bound += block_size
                pos += block_size
            elif block_type == 2:  # compressed
                bound += _ZSTD_MAX_BLOCK
                pos += block_size
            else:
                raise CorruptRecordError("zstd: reserved block type")
            if pos > end:
                raise CorruptRecordError("zstd: truncated block")
            if header & 1:  # Last_Block
                break
        if fhd & 0x04:  # Content_Checksum_flag
            pos += 4
            if pos > end:
                raise CorruptRecordError("zstd: truncated content checksum")
        frames.append((start, pos, bound))
    return frames


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    import zstandard  # noqa: PLC0415 -- see the top

    view = memoryview(data)
    frames = _zstd_frames(view)
    try:
        dctx = _ZSTD_DCTX_POOL.pop()
    except IndexError:
        dctx = zstandard.ZstdDecompressor()
    try:
        return _zstd_decompress_frames(dctx, view, frames, max_size)
    finally:
        _ZSTD_DCTX_POOL.append(dctx)


def _zstd_decompress_frames(
    dctx: zstandard.ZstdDecompressor,
    view: memoryview,
    frames: list[tuple[int, int, int]],
    max_size: int,
) -> bytes:
    import zstandard  # noqa: PLC0415 -- see the top

    parts: list[bytes] = []
    total = 0
    for start, stop, bound in frames:
        frame = view[start:stop]
        budget = max_size - total
        try:
            declared = zstandard.frame_content_size(frame)
            if declared > budget:
                raise CorruptRecordError(
                    f"zstd: declared content size {declared} exceeds the limit of {max_size} bytes"
                )
            if declared >= 0:
                out = dctx.decompress(frame)
            else:
                # Output buffer of min(bound, budget): a frame that needs more fails.
                out = dctx.decompress(frame, max_output_size=max(1, min(bound, budget)))
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"zstd: {exc} (limit {max_size} bytes)") from None
        if len(out) > budget:
            raise CorruptRecordError(
                f"zstd: decompressed size exceeds the limit of {max_size} bytes"
            )
        total += len(out)
        parts.append(out)
    return b"".join(parts) if len(parts) != 1 else parts[0]


# ---------------------------------------------------------------------------------------------
# public entry points


def compress(codec: int, data: Buffer, *, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` in the framing the Java client writes.

    Args:
        codec: a :class:`Compression` id (``NONE`` returns the data unchanged, as bytes).
        data: the uncompressed bytes (a batch's records section or a legacy inner message set).
        level: codec-specific level (KIP-390, ``compression.<codec>.level``); ``None`` picks
            the Java defaults (gzip 6, lz4 9, zstd 3). As in the Java client, lz4 at its
            default level uses the fast compressor, any other level LZ4-HC. Ignored for snappy.

    Returns:
        The compressed bytes.

    Raises:
        UnsupportedCodecError: ``codec`` is not 0-4.
        KafkaConfigurationError: ``level`` is out of range for the codec.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return _gzip_compress(data, level)
    if codec == Compression.SNAPPY:
        return _snappy_compress(data)
    if codec == Compression.LZ4:
        return _lz4_compress(data, level)
    if codec == Compression.ZSTD:
        return _zstd_compress(data, level)
    raise UnsupportedCodecError(f"unknown compression codec id {codec}")


def decompress(
    codec: int,
    data: Buffer,
    *,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    lz4_broken_header_checksum: bool = False,
) -> bytes:
    """Decompress ``data`` written by any Kafka client with ``codec``.

    Args:
        codec: a :class:`Compression` id.
        data: the compressed bytes.
        max_size: refuse output larger than this many bytes (decompression-bomb guard).
        lz4_broken_header_checksum: the data comes from a magic 0 message, whose LZ4 frame
            header checksum may be the broken one of KAFKA-3160; it is not checked.

    Returns:
        The decompressed bytes.

    Raises:
        CorruptRecordError: the data is not valid for the codec, or would exceed ``max_size``.
        UnsupportedCodecError: ``codec`` is not 0-4.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return _gzip_decompress(data, max_size)
    if codec == Compression.SNAPPY:
        return _snappy_decompress(data, max_size)
    if codec == Compression.LZ4:
        return _lz4_decompress(data, max_size, lz4_broken_header_checksum)
    if codec == Compression.ZSTD:
        return _zstd_decompress(data, max_size)
    raise UnsupportedCodecError(f"unknown compression codec id {codec}")
