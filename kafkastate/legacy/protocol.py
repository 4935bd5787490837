"""kafka-python 0.9.5's ``kafka.protocol``: message construction and the API keys.

``create_message`` and friends build the seed's :class:`~kafkastate.legacy.common.Message`
tuples; a compressed one holds a v0 message set compressed with its codec, as 0.9.5 built
it. ``KafkaClient.send_produce_request`` (:mod:`kafkastate.legacy.client`) turns them into
a magic 2 record batch (:func:`message_records`): Kafka 4 accepts no other.

``KafkaProtocol``'s ``encode_*_request`` / ``decode_*_response`` class methods wrote and read
version 0 of each API. Kafka 4 removed the oldest versions (KIP-896; Produce < 3 and
Fetch < 4 among them) and stores no offsets in ZooKeeper, so they raise
:class:`~kafkastate.legacy.common.LegacyFeatureUnavailableError`: use the ``send_*``
methods of :class:`~kafkastate.legacy.client.KafkaClient`, which negotiate today's versions
and keep the 0.9.5 request and response tuples.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from kafkastate.core.protocol.compression import Compression, decompress
from kafkastate.core.protocol.records import build_legacy_message_set, iter_batches
from kafkastate.legacy.codec import gzip_encode, lz4_encode, snappy_encode
from kafkastate.legacy.common import (
    LegacyFeatureUnavailableError,
    Message,
    UnsupportedCodecError,
)

__all__ = [
    "ALL_CODECS",
    "ATTRIBUTE_CODEC_MASK",
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "KafkaProtocol",
    "create_gzip_message",
    "create_lz4_message",
    "create_message",
    "create_message_set",
    "create_snappy_message",
    "message_records",
]

ATTRIBUTE_CODEC_MASK = 0x07
CODEC_NONE = 0x00
CODEC_GZIP = 0x01
CODEC_SNAPPY = 0x02
CODEC_LZ4 = 0x03
CODEC_ZSTD = 0x04
ALL_CODECS = (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)
"""Every codec a producer may name (lz4 and zstd are not in 0.9.5; today's Kafka has them)."""


def _pairs(payloads: Iterable[Any]) -> list[tuple[bytes | None, bytes | None]]:
    # 0.9.5 passed (payload, key) pairs; its docs say a list of payloads: take both.
    out: list[tuple[bytes | None, bytes | None]] = []
    for item in payloads:
        payload, key = item if isinstance(item, tuple) else (item, None)
        out.append((payload, key))
    return out


def create_message(payload: bytes | None, key: bytes | None = None) -> Message:
    """An uncompressed message.

    Args:
        payload: the value (bytes, or None).
        key: the key, or None.
    """
    return Message(0, 0x00, key, payload)


def _wrapped(codec: int, compressed: Any, payloads: Iterable[Any], key: bytes | None) -> Message:
    inner = build_legacy_message_set(
        [(-1, k, v) for v, k in _pairs(payloads)], magic=0, compression=Compression.NONE
    )
    return Message(0, codec & ATTRIBUTE_CODEC_MASK, key, compressed(inner))


def create_gzip_message(
    payloads: Iterable[Any], key: bytes | None = None, compresslevel: int | None = None
) -> Message:
    """One gzip message holding ``payloads`` (bytes, or ``(payload, key)`` pairs)."""
    return _wrapped(CODEC_GZIP, lambda b: gzip_encode(b, compresslevel), payloads, key)


def create_snappy_message(payloads: Iterable[Any], key: bytes | None = None) -> Message:
    """One snappy (xerial-framed) message holding ``payloads``."""
    return _wrapped(CODEC_SNAPPY, lambda b: snappy_encode(b, True), payloads, key)


def create_lz4_message(payloads: Iterable[Any], key: bytes | None = None) -> Message:
    """One lz4 message holding ``payloads`` (kafka-python 1.x's; not in 0.9.5)."""
    return _wrapped(CODEC_LZ4, lz4_encode, payloads, key)


def create_message_set(
    messages: Iterable[Any],
    codec: int = CODEC_NONE,
    key: bytes | None = None,
    compresslevel: int | None = None,
) -> list[Message]:
    """Messages for ``messages`` (bytes, or ``(payload, key)`` pairs): one each without a
    codec, else a single compressed message.

    Raises:
        UnsupportedCodecError: ``codec`` is none of ``ALL_CODECS`` (zstd exists only in
            record batches: the producers take it, not a v0 message).
    """
    if codec == CODEC_NONE:
        return [create_message(v, k) for v, k in _pairs(messages)]
    if codec == CODEC_GZIP:
        return [create_gzip_message(messages, key, compresslevel)]
    if codec == CODEC_SNAPPY:
        return [create_snappy_message(messages, key)]
    if codec == CODEC_LZ4:
        return [create_lz4_message(messages, key)]
    raise UnsupportedCodecError(f"Codec 0x{codec:02x} unsupported in a v0 message set")


def message_records(
    messages: Sequence[Message],
) -> tuple[Compression, list[tuple[bytes | None, bytes | None]]]:
    """The codec and the ``(key, value)`` records of ``messages``, for one record batch.

    Raises:
        UnsupportedCodecError: a message names an unknown codec, or two different ones.
        CorruptRecordError: a compressed message does not decompress to a message set.
    """
    codec = Compression.NONE
    records: list[tuple[bytes | None, bytes | None]] = []
    for message in messages:
        if not isinstance(message, Message):
            raise TypeError(f"a ProduceRequest holds Message tuples, got {message!r}")
        this = message.attributes & ATTRIBUTE_CODEC_MASK
        if this not in ALL_CODECS:
            raise UnsupportedCodecError(f"Codec 0x{this:02x} unsupported")
        if this == CODEC_NONE:
            records.append((message.key, message.value))
            continue
        if codec not in (Compression.NONE, this):
            raise UnsupportedCodecError("one ProduceRequest cannot mix compression codecs")
        codec = Compression(this)
        inner = decompress(this, message.value or b"")
        for batch in iter_batches(inner):
            records.extend((r.key, r.value) for r in batch)
    return codec, records


def _unavailable(name: str, api: str) -> Any:
    def method(cls: type, *args: Any, **kwargs: Any) -> NoReturn:
        raise LegacyFeatureUnavailableError(
            f"KafkaProtocol.{name} writes/reads version 0 of the API, which Kafka 4 no longer "
            "accepts (KIP-896); use KafkaClient.send_* (they negotiate today's versions)"
        )

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Raises LegacyFeatureUnavailableError: v0 {api} is gone from Kafka 4."
    return classmethod(method)


class KafkaProtocol:
    """The API keys of the requests 0.9.5 spoke, and its v0 encoders and decoders
    (unavailable: see the module docstring)."""

    PRODUCE_KEY = 0
    FETCH_KEY = 1
    OFFSET_KEY = 2
    METADATA_KEY = 3
    OFFSET_COMMIT_KEY = 8
    OFFSET_FETCH_KEY = 9
    CONSUMER_METADATA_KEY = 10

    encode_produce_request = _unavailable("encode_produce_request", "Produce")
    decode_produce_response = _unavailable("decode_produce_response", "Produce")
    encode_fetch_request = _unavailable("encode_fetch_request", "Fetch")
    decode_fetch_response = _unavailable("decode_fetch_response", "Fetch")
    encode_offset_request = _unavailable("encode_offset_request", "ListOffsets")
    decode_offset_response = _unavailable("decode_offset_response", "ListOffsets")
    encode_metadata_request = _unavailable("encode_metadata_request", "Metadata")
    decode_metadata_response = _unavailable("decode_metadata_response", "Metadata")
    encode_consumer_metadata_request = _unavailable(
        "encode_consumer_metadata_request", "FindCoordinator"
    )
    decode_consumer_metadata_response = _unavailable(
        "decode_consumer_metadata_response", "FindCoordinator"
    )
    encode_offset_commit_request = _unavailable(
        "encode_offset_commit_request", "OffsetCommit (ZooKeeper offsets)"
    )
    decode_offset_commit_response = _unavailable("decode_offset_commit_response", "OffsetCommit")
    encode_offset_fetch_request = _unavailable(
        "encode_offset_fetch_request", "OffsetFetch (ZooKeeper offsets)"
    )
    decode_offset_fetch_response = _unavailable("decode_offset_fetch_response", "OffsetFetch")
