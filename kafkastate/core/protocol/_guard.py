"""Length pre-check of response bodies before kio's native parser sees them.

kio's native reader allocates an array's capacity from the length on the wire. A corrupt
or hostile length (say 2**32 elements) makes it request tens of gigabytes and the Rust
allocator aborts the whole process -- no exception to catch. This module walks the same
schema kio would, in Python, tracking only positions, and raises RemoteProtocolError as
soon as a string, bytes or array length claims more than the bytes that remain. Once the
walk succeeds kio parses the body; its own errors are converted by the caller.

The walk follows the protocol's encodings (KIP-482 compact forms in flexible versions,
int16/int32 lengths otherwise, tagged-field sections, KIP-893 nullable structs) from
kio's dataclass field metadata. Plans are compiled once per entity class.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Final

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from kafkastate.errors import RemoteProtocolError

__all__ = ["LengthError", "check_lengths", "need", "read_uvarint"]

_FIXED: Final = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}

# A step consumes one field: (buf, pos, end) -> new pos.
_Step = Callable[[memoryview, int, int], int]


class LengthError(Exception):
    """A length, count or varint does not fit the bytes that remain."""


def need(pos: int, size: int, end: int, what: str) -> int:
    """Return ``pos + size`` if ``size`` bytes of ``what`` fit before ``end``."""
    if size < 0 or pos + size > end:
        raise LengthError(f"{what} of {size} bytes overruns the {end - pos} remaining")
    return pos + size


def read_uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise LengthError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise LengthError("varint longer than 5 bytes")


def _int(buf: memoryview, pos: int, end: int, size: int) -> tuple[int, int]:
    new = need(pos, size, end, "integer")
    return int.from_bytes(buf[pos:new], "big", signed=True), new


def _length(buf: memoryview, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """Read a length prefix; -1 means null. Compact forms store length + 1."""
    if flexible:
        raw, pos = read_uvarint(buf, pos, end)
        return raw - 1, pos
    return _int(buf, pos, end, 4 if wide else 2)


def _null(n: int, nullable: bool, what: str) -> bool:
    """Whether length ``n`` is a null; a null where the schema has none is malformed
    (kio would hand the caller None in a field typed as never None)."""
    if n >= 0:
        return False
    if not nullable:
        raise LengthError(f"{what} is null but not nullable")
    return True


def _sized(flexible: bool, wide: bool, what: str, nullable: bool) -> _Step:
    def step(buf: memoryview, pos: int, end: int) -> int:
        n, pos = _length(buf, pos, end, flexible, wide)
        return pos if _null(n, nullable, what) else need(pos, n, end, what)

    return step


def _fixed(size: int, name: str) -> _Step:
    what = f"field {name}"

    def step(buf: memoryview, pos: int, end: int) -> int:
        return need(pos, size, end, what)

    return step


def _scalar_step(kafka_type: str, flexible: bool, name: str, nullable: bool) -> _Step:
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type], name)
    if kafka_type == "string":
        return _sized(flexible, False, f"string {name}", nullable)
    if kafka_type in ("bytes", "records"):
        return _sized(flexible, True, f"{kafka_type} {name}", nullable)
    raise LengthError(f"unknown kafka_type {kafka_type!r}")  # pragma: no cover - schema drift


def _array(element: _Step, flexible: bool, name: str, nullable: bool) -> _Step:
    def step(buf: memoryview, pos: int, end: int) -> int:
        n, pos = _length(buf, pos, end, flexible, True)
        if _null(n, nullable, f"array {name}"):
            return pos
        # Every element takes at least one byte, so a count above the remainder is a lie.
        if n > end - pos:
            raise LengthError(f"array {name} of {n} elements in {end - pos} bytes")
        for _ in range(n):
            pos = element(buf, pos, end)
        return pos

    return step


def _nullable_struct(inner: _Step) -> _Step:
    def step(buf: memoryview, pos: int, end: int) -> int:
        marker, pos = _int(buf, pos, end, 1)
        # Kafka writes -1 (null) or 1. kio's reader takes only -1 for null, Java any
        # negative: another marker would make this walk and kio's parse disagree about
        # what follows (a fuzzer found -128, read as present by kio).
        if marker not in (-1, 1):
            raise LengthError(f"nullable struct marker {marker} is neither -1 nor 1")
        return pos if marker < 0 else inner(buf, pos, end)

    return step


def _field_step(field: dataclasses.Field[Any], flexible: bool, *, tagged: bool) -> _Step:
    kind = classify_field(field)
    nullable = is_optional(field)
    if isinstance(kind, EntityTupleField):
        return _array(_entity_step(kind.type_), flexible, field.name, nullable)
    if isinstance(kind, EntityField):
        inner = _entity_step(kind.type_)
        # Tagged structs carry no presence marker: the tag's absence is the null.
        return _nullable_struct(inner) if is_optional(field) and not tagged else inner
    kafka_type = field.metadata["kafka_type"]
    if isinstance(kind, PrimitiveTupleField):
        element = _scalar_step(kafka_type, flexible, f"{field.name}[]", False)
        return _array(element, flexible, field.name, nullable)
    return _scalar_step(kafka_type, flexible, field.name, nullable)


@functools.cache
def _entity_step(cls: type[Any]) -> _Step:
    flexible = bool(cls.__flexible__)
    regular: list[_Step] = []
    tagged: dict[int, _Step] = {}
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        if tag is None:
            regular.append(_field_step(field, flexible, tagged=False))
        else:
            tagged[int(tag)] = _field_step(field, flexible, tagged=True)

    def step(buf: memoryview, pos: int, end: int) -> int:
        for s in regular:
            pos = s(buf, pos, end)
        if flexible:
            count, pos = read_uvarint(buf, pos, end)
            for _ in range(count):
                tag, pos = read_uvarint(buf, pos, end)
                size, pos = read_uvarint(buf, pos, end)
                field_end = need(pos, size, end, "tagged field")
                known = tagged.get(tag)
                # kio reads a known tagged field without its declared size and goes on
                # from where the value ends: a size that disagrees would make kio parse
                # bytes this walk skipped. Unknown tags are skipped by size, as in kio.
                if known is not None and known(buf, pos, field_end) != field_end:
                    raise LengthError(f"tagged field {tag} does not fill its {size} bytes")
                pos = field_end
        return pos

    return step


def check_lengths(cls: type[Any], buf: memoryview, offset: int) -> None:
    """Walk ``buf[offset:]`` as an instance of the kio entity ``cls``.

    Raises:
        RemoteProtocolError: a length or count claims more bytes than remain, a varint is
            malformed, or the body ends early.
    """
    try:
        step = _entity_step(cls)  # type: ignore[arg-type]  # classes are hashable
        step(buf, offset, len(buf))
    except LengthError as exc:
        raise RemoteProtocolError(
            f"malformed {cls.__name__} v{getattr(cls, '__version__', '?')}: {exc}"
        ) from None
