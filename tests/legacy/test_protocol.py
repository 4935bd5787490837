"""kafkastate.legacy.protocol and common: messages, codecs, the v0 encoders, errors."""

from __future__ import annotations

import pytest

from kafkastate import errors
from kafkastate.core.protocol.compression import Compression
from kafkastate.legacy import common, create_gzip_message, create_message, create_snappy_message
from kafkastate.legacy.protocol import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    KafkaProtocol,
    create_message_set,
    message_records,
)


def test_create_message() -> None:
    assert create_message(b"v", b"k") == common.Message(0, 0, b"k", b"v")


@pytest.mark.parametrize(
    ("make", "codec"),
    [
        (create_gzip_message, Compression.GZIP),
        (create_snappy_message, Compression.SNAPPY),
    ],
)
def test_compressed_messages_unwrap(make, codec) -> None:  # type: ignore[no-untyped-def]
    message = make([b"a", (b"b", b"key")])
    assert message.attributes == codec
    assert message_records([message]) == (codec, [(None, b"a"), (b"key", b"b")])


def test_create_message_set() -> None:
    assert create_message_set([b"a", b"b"]) == [create_message(b"a"), create_message(b"b")]
    for codec in (CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4):
        (wrapper,) = create_message_set([b"a"], codec)
        assert message_records([wrapper])[1] == [(None, b"a")]
    with pytest.raises(common.UnsupportedCodecError):
        create_message_set([b"a"], 9)


def test_mixed_codecs_and_non_messages_are_refused() -> None:
    with pytest.raises(common.UnsupportedCodecError, match="mix"):
        message_records([create_gzip_message([b"a"]), create_snappy_message([b"b"])])
    with pytest.raises(TypeError):
        message_records([b"raw"])  # type: ignore[list-item]


def test_v0_encoders_say_why_they_are_unavailable() -> None:
    assert KafkaProtocol.PRODUCE_KEY == 0 and KafkaProtocol.CONSUMER_METADATA_KEY == 10
    with pytest.raises(common.LegacyFeatureUnavailableError, match="KIP-896"):
        KafkaProtocol.encode_produce_request(b"client", 1, [])
    with pytest.raises(NotImplementedError):
        KafkaProtocol.decode_fetch_response(b"")


def test_seed_errors_are_kafkastates() -> None:
    assert common.KafkaError is errors.KafkaError
    assert common.UnknownTopicOrPartitionError.errno == 3
    assert common.UnknownTopicOrPartitionError.message == "UNKNOWN_TOPIC_OR_PARTITION"
    assert issubclass(common.UnknownTopicOrPartitionError, errors.UnknownTopicOrPartitionError)
    assert common.x is common.UnknownTopicOrPartitionError
    assert common.OffsetOutOfRangeException is common.OffsetOutOfRangeError
    assert issubclass(common.StaleLeaderEpochCodeError, errors.NetworkError)
    assert {code: cls.errno for code, cls in common.kafka_errors.items()} == {
        c: c for c in common.kafka_errors
    }
    with pytest.raises(common.NotLeaderForPartitionError):
        common.check_error(common.ProduceResponse("t", 0, 6, -1))
    with pytest.raises(errors.InvalidTopicError):  # a code the seed did not know
        common.check_error(common.ProduceResponse("t", 0, 17, -1))
    common.check_error(common.ProduceResponse("t", 0, 0, 5))


def test_seed_errors_translates_kafkastates() -> None:
    with pytest.raises(common.LeaderNotAvailableError), common.seed_errors():
        raise errors.LeaderNotAvailableError("x")
    with pytest.raises(errors.InvalidTopicError), common.seed_errors():
        raise errors.InvalidTopicError("x")
