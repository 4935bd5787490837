"""Type stub for the optional C accelerator ``_speedups.c`` (see records.py)."""

from collections.abc import Sequence
from typing import Any, TypeVar, overload

from kafkastate.core.protocol.records import Record, TimestampType

_T = TypeVar("_T")

def setup(record_type: type[Record], malformed: type[Exception], /) -> None: ...
@overload
def parse_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    ts_type: TimestampType,
    append_ts: int | None,
    /,
) -> list[Record]: ...
@overload
def parse_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    ts_type: TimestampType,
    append_ts: int | None,
    cls: type[_T],
    topic: str,
    partition: int,
    leader_epoch: int,
    /,
) -> list[_T]: ...
def append_record(
    parts: list[bytes | bytearray | memoryview],
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]],
    /,
) -> int | None: ...
def append_records(
    parts: list[bytes | bytearray | memoryview],
    offset_delta: int,
    base_ts: int,
    max_ts: int,
    records: list[Any],
    start: int,
    /,
) -> tuple[int, int, int]: ...
def murmur2(data: bytes | bytearray | memoryview, /) -> int: ...
def lane_sticky(
    accumulator: Any, topic: str, timestamp_ms: int, value: bytes, cluster: Any, /
) -> int | None: ...
def lane_keyed(
    accumulator: Any, topic: str, partition: int, timestamp_ms: int, key: bytes, value: bytes, /
) -> int | None: ...
def lane_hashed(
    accumulator: Any,
    partitioner: Any,
    topic: str,
    timestamp_ms: int,
    key: bytes,
    value: bytes,
    cluster: Any,
    /,
) -> int | None: ...
def setup_lanes(
    accumulator: type, batch: type, builder: type, sticky: type, partitioner: type, /
) -> None: ...
def consumer_records(
    cls: type[Any],
    records: list[Record],
    topic: str,
    partition: int,
    leader_epoch: int,
    /,
) -> list[Any]: ...
