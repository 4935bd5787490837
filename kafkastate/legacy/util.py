"""kafka-python 0.9.5's ``kafka.util``: string framing, crc32, grouping, a restartable timer."""

from __future__ import annotations

import collections
import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from kafkastate.errors import KafkaConfigurationError
from kafkastate.legacy.common import BufferUnderflowError

__all__ = [
    "ReentrantTimer",
    "crc32",
    "group_by_topic_and_partition",
    "kafka_bytestring",
    "read_int_string",
    "read_short_string",
    "relative_unpack",
    "topic_name",
    "write_int_string",
    "write_short_string",
]


def crc32(data: bytes) -> int:
    """The unsigned CRC-32 of ``data`` (the checksum of 0.9.5's v0 messages)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def write_int_string(s: bytes | None) -> bytes:
    """``s`` prefixed with its length as a big-endian int32 (-1 for None)."""
    if s is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(s)) + s


def write_short_string(s: bytes | None) -> bytes:
    """``s`` prefixed with its length as a big-endian int16 (-1 for None).

    Raises:
        struct.error: ``s`` is longer than 32767 bytes (as 0.9.5).
    """
    if s is None:
        return struct.pack(">h", -1)
    if len(s) > 32767:
        raise KafkaConfigurationError(f"string too long for an int16 length: {len(s)} bytes")
    return struct.pack(">h", len(s)) + s


def relative_unpack(fmt: str, data: bytes, cur: int) -> tuple[tuple[Any, ...], int]:
    """Unpack ``fmt`` at ``cur``; return the values and the position after them.

    Raises:
        BufferUnderflowError: ``data`` ends first.
    """
    size = struct.calcsize(fmt)
    if len(data) - cur < size:
        raise BufferUnderflowError(f"not enough data: need {size} bytes at {cur}")
    return struct.unpack(fmt, data[cur : cur + size]), cur + size


def _read_string(fmt: str, data: bytes, cur: int) -> tuple[bytes | None, int]:
    (length,), cur = relative_unpack(fmt, data, cur)
    if length == -1:
        return None, cur
    if len(data) - cur < length:
        raise BufferUnderflowError(f"not enough data: need {length} bytes at {cur}")
    return data[cur : cur + length], cur + length


def read_short_string(data: bytes, cur: int) -> tuple[bytes | None, int]:
    """Read an int16-length-prefixed string at ``cur``: ``(bytes or None, new position)``.

    Raises:
        BufferUnderflowError: ``data`` ends first.
    """
    return _read_string(">h", data, cur)


def read_int_string(data: bytes, cur: int) -> tuple[bytes | None, int]:
    """Read an int32-length-prefixed string at ``cur``: ``(bytes or None, new position)``.

    Raises:
        BufferUnderflowError: ``data`` ends first.
    """
    return _read_string(">i", data, cur)


def group_by_topic_and_partition(tuples: Iterable[Any]) -> dict[Any, dict[int, Any]]:
    """``{topic: {partition: t}}`` for namedtuples with ``topic`` and ``partition``.

    Raises:
        KafkaConfigurationError: two tuples name the same topic and partition.
    """
    out: dict[Any, dict[int, Any]] = collections.defaultdict(dict)
    for t in tuples:
        if t.partition in out[t.topic]:
            raise KafkaConfigurationError(
                f"duplicate {type(t).__name__}s for {t.topic!r} {t.partition}"
            )
        out[t.topic][t.partition] = t
    return dict(out)


def kafka_bytestring(s: str | bytes) -> bytes:
    """``s`` as bytes: str is encoded as UTF-8.

    Raises:
        TypeError: ``s`` is neither str nor bytes.
    """
    if isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return s.encode("utf-8")
    raise TypeError(f"{s!r} is neither str nor bytes")


def topic_name(topic: str | bytes) -> str:
    """A topic as today's clients name it (str); 0.9.5 code passes bytes.

    Raises:
        TypeError: ``topic`` is neither str nor bytes.
    """
    if isinstance(topic, bytes):
        return topic.decode("utf-8")
    if isinstance(topic, str):
        return topic
    raise TypeError(f"a topic is str or bytes, got {topic!r}")


class ReentrantTimer:
    """A timer that can be restarted, unlike ``threading.Timer``: calls ``fn`` every ``t``
    milliseconds on a daemon thread between :meth:`start` and :meth:`stop`.

    Args:
        t: interval in milliseconds (> 0).
        fn: the callable.
        args: positional arguments for ``fn``.
        kwargs: keyword arguments for ``fn``.

    Raises:
        KafkaConfigurationError: ``t`` is not positive.
    """

    def __init__(self, t: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if t <= 0:
            raise KafkaConfigurationError(f"timer interval must be > 0 ms, got {t!r}")
        self.t = t
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.thread: threading.Thread | None = None
        self.active: threading.Event | None = None

    def _timer(self, active: threading.Event) -> None:
        while not active.wait(self.t / 1000):
            self.fn(*self.args, **self.kwargs)

    def start(self) -> None:
        """Start (or restart) the timer."""
        if self.thread is not None:
            self.stop()
        self.active = threading.Event()
        self.thread = threading.Thread(target=self._timer, args=(self.active,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop the timer and wait for its thread (unless called from ``fn`` itself)."""
        if self.thread is None or self.active is None:
            return
        self.active.set()
        if self.thread is not threading.current_thread():
            self.thread.join(self.t / 1000 + 1)
        self.thread = None
