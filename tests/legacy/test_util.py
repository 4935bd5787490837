"""kafkastate.legacy.util."""

from __future__ import annotations

import threading
import zlib

import pytest

from kafkastate.legacy.common import (
    BufferUnderflowError,
    KafkaConfigurationError,
    OffsetRequest,
)
from kafkastate.legacy.util import (
    ReentrantTimer,
    crc32,
    group_by_topic_and_partition,
    kafka_bytestring,
    read_int_string,
    read_short_string,
    relative_unpack,
    write_int_string,
    write_short_string,
)


def test_strings_round_trip() -> None:
    for s in (None, b"", b"abc"):
        assert read_int_string(write_int_string(s), 0) == (s, len(write_int_string(s)))
        assert read_short_string(write_short_string(s), 0) == (s, len(write_short_string(s)))
    assert write_int_string(None) == b"\xff\xff\xff\xff"


def test_underflow_is_typed() -> None:
    with pytest.raises(BufferUnderflowError):
        read_int_string(b"\x00\x00\x00\x05ab", 0)
    with pytest.raises(BufferUnderflowError):
        relative_unpack(">i", b"\x00", 0)
    assert relative_unpack(">hh", b"\x00\x01\x00\x02", 0) == ((1, 2), 4)
    with pytest.raises(KafkaConfigurationError):
        write_short_string(b"x" * 40000)


def test_crc32_is_unsigned() -> None:
    assert crc32(b"abc") == zlib.crc32(b"abc") & 0xFFFFFFFF


def test_group_by_topic_and_partition() -> None:
    a, b = OffsetRequest("t", 0, -1, 1), OffsetRequest("t", 1, -1, 1)
    assert group_by_topic_and_partition([a, b]) == {"t": {0: a, 1: b}}
    with pytest.raises(KafkaConfigurationError, match="duplicate"):
        group_by_topic_and_partition([a, a])


def test_kafka_bytestring() -> None:
    assert kafka_bytestring("é") == "é".encode()
    assert kafka_bytestring(b"x") == b"x"
    with pytest.raises(TypeError):
        kafka_bytestring(3)  # type: ignore[arg-type]


def test_reentrant_timer_restarts_and_stops() -> None:
    fired = threading.Semaphore(0)
    timer = ReentrantTimer(10, fired.release)
    timer.start()
    assert fired.acquire(timeout=5)
    timer.start()  # restart
    assert fired.acquire(timeout=5)
    timer.stop()
    assert timer.thread is None
    with pytest.raises(KafkaConfigurationError):
        ReentrantTimer(0, print)
