"""Request/response framing: the 4-byte size prefix and the request/response headers.

Theory of operation
-------------------
Every Kafka message on the wire is ``int32 size`` followed by ``size`` bytes. A request is
a request header then the body; a response is a response header then the body.

* Request header v1 (non-flexible requests): api_key int16, api_version int16,
  correlation_id int32, client_id nullable *legacy* string (int16 length).
* Request header v2 (flexible requests, KIP-482): v1 followed by a tagged-field section
  (we never send tags, so a single ``0`` byte). The client_id stays a legacy string.
* Response header v0: correlation_id int32.
* Response header v1 (flexible responses): v0 followed by a tagged-field section.
  ApiVersions responses always use header v0, whatever the version, so that a client can
  read the answer before it knows which versions the broker speaks (KIP-511).

Bodies are kio entities: kio knows every API version's schema, we own the bytes around
them. The one exception is the Produce request, the producer's hot path: its body is written
here by hand (:func:`produce_request_body`), so a record's bytes go from the batch to the
frame in one module. Nothing here does IO; :class:`FrameDecoder` accepts bytes at any split point.

Timestamps the broker does not know: a response's int64 timestamp field (kio type
``datetime_i64``) carries -1 when there is no such time -- DescribeTransactions'
TransactionStartTimeMs of a transactional id with no open transaction, the delegation-token
timestamps of a refused request. kio reads -1 as null only where its schema marks the field
nullable (Produce's LogAppendTimeMs) and refuses it elsewhere, which would fail the whole
response. :func:`decode_body` therefore reads every response timestamp field as nullable:
-1 decodes to ``None``; any other negative value is still malformed.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from kafkastate.core.protocol._guard import LengthError, check_lengths, need, read_uvarint
from kafkastate.core.protocol.encoded import EncodedRequest, encoded_request_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.errors import KafkaConfigurationError, RemoteProtocolError

__all__ = [
    "API_VERSIONS_KEY",
    "DEFAULT_MAX_FRAME_SIZE",
    "EncodedRequest",
    "FrameDecoder",
    "decode_body",
    "decode_response_header",
    "encode_body",
    "encode_request",
    "encoded_request_type",
    "frame_request",
    "lenient_timestamps",
    "produce_request",
    "produce_request_body",
    "request_header_bytes",
    "response_header_version",
]

API_VERSIONS_KEY: Final = 18
DEFAULT_MAX_FRAME_SIZE: Final = 100 * 1024 * 1024
"""Largest response frame accepted (bytes); larger sizes mean corrupt or hostile input."""

_SIZE = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")


def request_header_bytes(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    *,
    flexible: bool,
) -> bytes:
    """Encode a request header: v2 if ``flexible`` else v1.

    Args:
        api_key: the API key (0 = Produce, 1 = Fetch, ...).
        api_version: the version of the body that follows.
        correlation_id: echoed by the broker in the response header.
        client_id: the client id, or None for a null string.
        flexible: whether the body's version is a flexible version (KIP-482).

    Returns:
        The header bytes, without the size prefix.
    """
    if client_id is None:
        head = _HEADER_V1.pack(api_key, api_version, correlation_id, -1)
    else:
        raw = client_id.encode()
        head = _HEADER_V1.pack(api_key, api_version, correlation_id, len(raw)) + raw
    # Header v2 = v1 + an empty tagged-field section.
    return head + b"\x00" if flexible else head


def encode_body(entity: Any) -> bytes:
    """Serialize a kio request or response entity (body only)."""
    if isinstance(entity, EncodedRequest):
        return entity.body
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_request(entity: Any, *, correlation_id: int, client_id: str | None) -> bytes:
    """Frame a kio request entity: size prefix, header for its version, body.

    Args:
        entity: a kio request entity (its class carries api key, version, flexibility).
        correlation_id: the id the response will carry.
        client_id: the client id sent in the header.

    Returns:
        The full frame, ready to write to the socket.
    """
    return frame_request(
        entity, encode_body(entity), correlation_id=correlation_id, client_id=client_id
    )


def frame_request(entity: Any, body: bytes, *, correlation_id: int, client_id: str | None) -> bytes:
    """Frame ``body``, the encoding of the request ``entity`` (see :func:`encode_request`),
    for a caller that has the body already."""
    cls = type(entity)
    header = request_header_bytes(
        int(cls.__api_key__),
        int(cls.__version__),
        correlation_id,
        client_id,
        flexible=bool(cls.__flexible__),
    )
    return _SIZE.pack(len(header) + len(body)) + header + body


def response_header_version(api_key: int, flexible: bool) -> int:
    """Which response header version a response uses (ApiVersions: always v0)."""
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if flexible else 0


def decode_response_header(frame: memoryview, version: int) -> tuple[int, int]:
    """Decode a response header.

    Args:
        frame: the frame payload (after the size prefix).
        version: 0 or 1 (see :func:`response_header_version`).

    Returns:
        ``(correlation_id, offset_of_body)``.

    Raises:
        RemoteProtocolError: the header is truncated or its tagged fields are malformed.
    """
    if len(frame) < 4:
        raise RemoteProtocolError(f"response frame of {len(frame)} bytes has no header")
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    pos = 4
    if version >= 1:
        end = len(frame)
        try:
            count, pos = read_uvarint(frame, pos, end)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos, end)
                size, pos = read_uvarint(frame, pos, end)
                pos = need(pos, size, end, "tagged field")
        except LengthError as exc:
            raise RemoteProtocolError(f"malformed response header: {exc}") from None
    return correlation_id, pos


_TIMESTAMP: Final = "datetime_i64"


def _same_entity(self: Any, other: Any) -> Any:
    # a lenient class's instance equals its kio twin with the same field values
    if type(other) not in (type(self), type(self).__kio_entity__):
        return NotImplemented
    names = [f.name for f in dataclasses.fields(self)]
    return [getattr(self, n) for n in names] == [getattr(other, n) for n in names]


_LENIENT: Final[dict[type[Any], type[Any]]] = {}


def lenient_timestamps(cls: type[Any]) -> type[Any]:
    """``cls`` with every timestamp field (``datetime_i64``), its own or a nested entity's,
    read as nullable, so that the broker's -1 ("no such time") decodes to ``None``.

    The result subclasses ``cls`` (``isinstance`` holds, and an instance equals the kio
    entity with the same values); a schema without a non-nullable timestamp is returned
    as it is.

    Args:
        cls: a kio entity class.

    Returns:
        The class to decode ``cls``'s bytes with.
    """
    known = _LENIENT.get(cls)
    if known is None:
        known = _LENIENT[cls] = _lenient(cls)
    return known


def _lenient(cls: type[Any]) -> type[Any]:
    specs: list[tuple[str, Any, Any]] = []
    changed = False
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        ftype: Any = f.type
        if f.metadata.get("kafka_type") == _TIMESTAMP and not is_optional(f):
            ftype = ftype | None
        elif isinstance(kind, (EntityField, EntityTupleField)):
            inner = lenient_timestamps(kind.type_)
            if inner is not kind.type_:
                ftype = inner if isinstance(kind, EntityField) else tuple[inner, ...]  # type: ignore[valid-type]
                if is_optional(f):
                    ftype = ftype | None
        changed = changed or ftype is not f.type
        keep: dict[str, Any] = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            keep["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            keep["default_factory"] = f.default_factory
        specs.append((f.name, ftype, dataclasses.field(**keep)))
    if not changed:
        return cls
    namespace = {"__module__": cls.__module__, "__kio_entity__": cls, "__eq__": _same_entity}
    return dataclasses.make_dataclass(
        cls.__name__,
        specs,
        bases=(cls,),
        namespace=namespace,
        frozen=True,
        slots=True,
        kw_only=True,
    )


def decode_body(cls: type[Any], frame: memoryview, offset: int) -> Any:
    """Decode a kio entity of type ``cls`` from ``frame[offset:]``.

    A timestamp field holding -1 (the protocol's "none") decodes to ``None``, also where
    kio's schema does not mark it nullable (see :func:`lenient_timestamps`).

    Raises:
        RemoteProtocolError: the bytes do not parse as ``cls`` (any kio or value error is
            converted, naming the entity).
    """
    # kio's native reader aborts the process on absurd array lengths; check them first.
    check_lengths(cls, frame, offset)
    try:
        entity, _size = entity_reader(lenient_timestamps(cls))(frame[offset:], 0)
    except Exception as exc:  # kio raises DecodeError, ValueError, UnicodeError, ...
        raise RemoteProtocolError(
            f"malformed {cls.__name__} v{getattr(cls, '__version__', '?')}: {exc}"
        ) from exc
    return entity


class FrameDecoder:
    """Splits a byte stream into size-prefixed frames.

    Feed bytes at any split point with :meth:`feed`; take complete frame payloads with
    :meth:`next_frame` until it returns None.
    """

    __slots__ = ("_buf", "_max_frame_size", "_pos", "_whole")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._max_frame_size = max_frame_size
        # Bytes fed while nothing was buffered, kept as given: a read usually holds one
        # whole frame (or several), which then leave as slices of it with no copy into
        # and out of the buffer.
        self._whole: bytes | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        if self._whole is None:
            if not self._buf and type(data) is bytes:
                self._whole = data
                return
        else:
            self._buf += self._whole
            self._whole = None
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        whole = self._whole
        return len(self._buf) - self._pos + (0 if whole is None else len(whole))

    def next_frame(self) -> bytes | None:
        """Return the next complete frame payload, or None if more bytes are needed.

        Raises:
            RemoteProtocolError: a size prefix is negative or above the maximum.
        """
        whole = self._whole
        if whole is not None:
            if len(whole) >= 4:
                (size,) = _SIZE.unpack_from(whole, 0)
                if size < 0 or size > self._max_frame_size:
                    raise RemoteProtocolError(
                        f"invalid frame size {size} (maximum {self._max_frame_size})"
                    )
                end = 4 + size
                if len(whole) >= end:
                    # the rest (if any) goes to the buffer: one copy of what follows
                    self._whole = None
                    if len(whole) > end:
                        self._buf += memoryview(whole)[end:]
                    return whole[4:end]
            self._whole = None  # a partial frame: buffered until the rest comes
            self._buf += whole
        avail = len(self._buf) - self._pos
        if avail < 4:
            self._compact()
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        if size < 0 or size > self._max_frame_size:
            raise RemoteProtocolError(f"invalid frame size {size} (maximum {self._max_frame_size})")
        if avail < 4 + size:
            self._compact()
            return None
        start = self._pos + 4
        # one copy (a bytearray slice then bytes() would copy a big Fetch response twice)
        with memoryview(self._buf) as view, view[start : start + size] as payload:
            frame = bytes(payload)
        self._pos = start + size
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return frame

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0


def produce_request(
    versions: ApiVersionTable,
    batches: Mapping[tuple[str, uuid.UUID | None, int], bytes],
    *,
    acks: int = -1,
    timeout: float = 30.0,
    transactional_id: str | None = None,
    max_version: int | None = None,
) -> Any:
    """Produce record batches.

    Args:
        versions: the negotiated version table.
        batches: ``(topic name, topic id or None, partition) -> record batch bytes``. The
            topic id is needed when the negotiated version names topics by id (v13+).
        acks: 0, 1 or -1 (all).
        timeout: how long the broker waits for acks.
        transactional_id: for transactional batches.
        max_version: the highest version to use (a transactional producer speaking
            transaction version 1 stays at v11).
    """
    version = versions.version_for(ApiKey.PRODUCE)
    if max_version is not None:
        version = min(version, max_version)
    body = produce_request_body(
        version, batches, acks=acks, timeout=timeout, transactional_id=transactional_id
    )
    return encoded_request_type(ApiKey.PRODUCE, version, flexible=version >= _PRODUCE_FLEXIBLE)(
        body
    )


_PRODUCE_FLEXIBLE: Final = 9  # Produce v9+ is flexible (KIP-482)
_PRODUCE_TOPIC_IDS: Final = 13  # Produce v13+ names topics by id (KIP-516)
_I16_I32: Final = struct.Struct(">hi")
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def produce_request_body(
    version: int,
    batches: Mapping[tuple[str, uuid.UUID | None, int], bytes],
    *,
    acks: int = -1,
    timeout: float = 30.0,
    transactional_id: str | None = None,
) -> bytes:
    """Encode a ProduceRequest body (v3-v13) by hand: the producer sends one per batch
    or so, and kio's generic writer is several times slower for it. The same bytes as
    kio writes for the same request (tests/core/protocol/test_framing.py compares them).

    Args:
        version: the request version (3 to 13).
        batches: ``(topic name, topic id or None, partition) -> record batch bytes``.
        acks: 0, 1 or -1 (all).
        timeout: how long the broker waits for acks, in seconds.
        transactional_id: for transactional batches.

    Returns:
        The body bytes.

    Raises:
        KafkaConfigurationError: v13+ without a topic id, or a version out of range.
    """
    if not 3 <= version <= _PRODUCE_TOPIC_IDS:
        raise KafkaConfigurationError(f"no Produce encoder for v{version}")
    flexible = version >= _PRODUCE_FLEXIBLE
    by_topic: dict[tuple[str, uuid.UUID | None], list[tuple[int, bytes]]] = {}
    for (topic, topic_id, partition), records in batches.items():
        by_topic.setdefault((topic, topic_id), []).append((partition, records))
    out: list[bytes] = []
    tid = None if transactional_id is None else transactional_id.encode()
    if flexible:
        out.append(b"\x00" if tid is None else _uvarint(len(tid) + 1) + tid)
    else:
        out.append(b"\xff\xff" if tid is None else _I16.pack(len(tid)) + tid)
    out.append(_I16_I32.pack(acks, round(timeout * 1000)))
    out.append(_uvarint(len(by_topic) + 1) if flexible else _I32.pack(len(by_topic)))
    for (topic, topic_id), parts in by_topic.items():
        if version >= _PRODUCE_TOPIC_IDS:
            if topic_id is None:
                raise KafkaConfigurationError(f"Produce v{version} needs the id of {topic!r}")
            out.append(topic_id.bytes)
        else:
            name = topic.encode()
            out.append(_uvarint(len(name) + 1) + name if flexible else _I16.pack(len(name)) + name)
        out.append(_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
        for partition, records in parts:
            out.append(_I32.pack(partition))
            out.append(_uvarint(len(records) + 1) if flexible else _I32.pack(len(records)))
            out.append(records)
            if flexible:
                out.append(b"\x00")  # the partition's tagged fields
        if flexible:
            out.append(b"\x00")  # the topic's tagged fields
    if flexible:
        out.append(b"\x00")  # the request's tagged fields
    return b"".join(out)
