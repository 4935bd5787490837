"""kafkastate.legacy.codec: round trips and the snappy framings."""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastate.errors import CorruptRecordError, KafkaConfigurationError
from kafkastate.legacy import codec


def test_availability() -> None:
    assert codec.has_gzip() and codec.has_snappy() and codec.has_lz4()


@given(st.binary(max_size=5000))
def test_round_trips(data: bytes) -> None:
    assert codec.gzip_decode(codec.gzip_encode(data)) == data
    assert codec.gzip_decode(codec.gzip_encode(data, compresslevel=1)) == data
    assert codec.snappy_decode(codec.snappy_encode(data)) == data
    assert codec.snappy_decode(codec.snappy_encode(data, xerial_compatible=True)) == data
    assert codec.lz4_decode(codec.lz4_encode(data)) == data


def test_gzip_is_plain_gzip() -> None:
    assert gzip.decompress(codec.gzip_encode(b"abc")) == b"abc"


def test_xerial_blocks() -> None:
    data = b"x" * 100
    framed = codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=40)
    assert framed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", framed[8:16]) == (1, 1)
    pos, blocks = 16, 0
    while pos < len(framed):
        (n,) = struct.unpack(">i", framed[pos : pos + 4])
        pos += 4 + n
        blocks += 1
    assert blocks == 3  # 40 + 40 + 20 bytes of input
    assert codec.snappy_decode(framed) == data


def test_bad_input() -> None:
    with pytest.raises(CorruptRecordError):
        codec.gzip_decode(b"not gzip")
    with pytest.raises(CorruptRecordError):
        codec.lz4_decode(b"not lz4")
    with pytest.raises(KafkaConfigurationError):
        codec.snappy_encode(b"x", xerial_compatible=True, xerial_blocksize=0)
