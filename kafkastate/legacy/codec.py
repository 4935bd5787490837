"""kafka-python 0.9.5's ``kafka.codec``: gzip, snappy (raw or xerial-framed) and lz4, on
kafkastate's codecs (:mod:`kafkastate.core.protocol.compression`)."""

from __future__ import annotations

import struct

import cramjam

from kafkastate.core.protocol.compression import Compression, compress, decompress
from kafkastate.errors import KafkaConfigurationError

__all__ = [
    "gzip_decode",
    "gzip_encode",
    "has_gzip",
    "has_lz4",
    "has_snappy",
    "lz4_decode",
    "lz4_encode",
    "snappy_decode",
    "snappy_encode",
]

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def has_gzip() -> bool:
    """True: gzip is in the standard library."""
    return True


def has_snappy() -> bool:
    """True: snappy is a kafkastate dependency (cramjam)."""
    return True


def has_lz4() -> bool:
    """True: lz4 is a kafkastate dependency."""
    return True


def gzip_encode(payload: bytes, compresslevel: int | None = None) -> bytes:
    """Gzip ``payload`` (level 6 unless ``compresslevel``).

    Raises:
        KafkaConfigurationError: ``compresslevel`` is out of range.
    """
    return compress(Compression.GZIP, payload, level=compresslevel)


def gzip_decode(payload: bytes) -> bytes:
    """Gunzip ``payload``.

    Raises:
        CorruptRecordError: not gzip data.
    """
    return decompress(Compression.GZIP, payload)


def snappy_encode(
    payload: bytes, xerial_compatible: bool = False, xerial_blocksize: int = 32768
) -> bytes:
    """Snappy-compress ``payload``: one raw block, or with ``xerial_compatible`` the xerial
    framing (16-byte header, then ``[int32 BE length, block]`` per ``xerial_blocksize``
    bytes of input) that the Java client reads.

    Raises:
        KafkaConfigurationError: ``xerial_blocksize`` is not positive.
    """
    if not xerial_compatible:
        return bytes(cramjam.snappy.compress_raw(payload))
    if xerial_blocksize <= 0:
        raise KafkaConfigurationError(f"xerial_blocksize must be > 0, got {xerial_blocksize}")
    out = [_XERIAL_HEADER]
    for start in range(0, len(payload), xerial_blocksize):
        block = bytes(cramjam.snappy.compress_raw(payload[start : start + xerial_blocksize]))
        out.append(struct.pack(">i", len(block)) + block)
    return b"".join(out)


def snappy_decode(payload: bytes) -> bytes:
    """Decompress a raw snappy block or a xerial-framed stream.

    Raises:
        CorruptRecordError: neither.
    """
    return decompress(Compression.SNAPPY, payload)


def lz4_encode(payload: bytes) -> bytes:
    """LZ4-frame-compress ``payload`` as the Java client writes it."""
    return compress(Compression.LZ4, payload)


def lz4_decode(payload: bytes) -> bytes:
    """Decompress an LZ4 frame.

    Raises:
        CorruptRecordError: not an LZ4 frame.
    """
    return decompress(Compression.LZ4, payload)
