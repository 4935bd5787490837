"""kafka-python 0.9.5's ``kafka.common``: the request/response namedtuples and the errors.

The structs are the seed's namedtuples, field for field. The errors keep the seed's names:
where kafkastate has the same error (a broker error code, a timeout, a bad option), the seed
name *is* kafkastate's class or a subclass of it carrying the seed's ``errno`` and
``message``, so ``except kafkastate.errors.UnknownTopicOrPartitionError`` and ``except
kafkastate.legacy.common.UnknownTopicOrPartitionError`` both catch what the legacy classes
raise. Broker error codes 13-16 kept their numbers but were renamed by Kafka (13 is now
``NETWORK_EXCEPTION``; 14-16 name the *group* coordinator): the seed's classes subclass the
current ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar, NamedTuple, cast

from kafkastate import errors as _errors
from kafkastate.errors import (
    BrokerResponseError,
    CorruptRecordError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedCodecError,
    error_for_code,
)
from kafkastate.errors import KafkaConnectionError as ConnectionError
from kafkastate.errors import RemoteProtocolError as ProtocolError

__all__ = [
    "AsyncProducerQueueFull",
    "BrokerMetadata",
    "BrokerNotAvailableError",
    "BrokerNotFoundError",
    "BrokerResponseError",
    "BufferUnderflowError",
    "ChecksumError",
    "ConnectionError",
    "ConsumerCoordinatorNotAvailable",
    "ConsumerCoordinatorNotAvailableCode",
    "ConsumerFetchSizeTooSmall",
    "ConsumerMetadataRequest",
    "ConsumerMetadataResponse",
    "ConsumerNoMoreData",
    "ConsumerTimeout",
    "FailedPayloadsError",
    "FetchRequest",
    "FetchResponse",
    "InvalidFetchRequest",
    "InvalidFetchRequestError",
    "InvalidMessageError",
    "KafkaConfigurationError",
    "KafkaError",
    "KafkaMessage",
    "KafkaTimeoutError",
    "KafkaUnavailableError",
    "LeaderNotAvailableError",
    "LeaderNotFoundError",
    "LegacyFeatureUnavailableError",
    "Message",
    "MessageSizeTooLargeError",
    "MetadataRequest",
    "MetadataResponse",
    "NotCoordinatorForConsumerCode",
    "NotLeaderForPartitionError",
    "OffsetAndMessage",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "OffsetOutOfRangeException",
    "OffsetRequest",
    "OffsetResponse",
    "OffsetsLoadInProgressCode",
    "PartitionMetadata",
    "ProduceRequest",
    "ProduceResponse",
    "ProtocolError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "RetryOptions",
    "StaleControllerEpochError",
    "StaleLeaderEpochCodeError",
    "TopicAndPartition",
    "TopicMetadata",
    "UnknownError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCodecError",
    "check_error",
    "kafka_errors",
    "legacy_errors",
    "x",
]

# ------------------------------------------------------------------------------ structs


class MetadataRequest(NamedTuple):
    """A Metadata request payload."""

    topics: Any


class MetadataResponse(NamedTuple):
    """A Metadata response: brokers and topics."""

    brokers: Any
    topics: Any


class ConsumerMetadataRequest(NamedTuple):
    """A FindCoordinator (0.9.5: ConsumerMetadata) request payload."""

    groups: Any


class ConsumerMetadataResponse(NamedTuple):
    """Where a group's coordinator is."""

    error: int
    nodeId: int
    host: str
    port: int


class ProduceRequest(NamedTuple):
    """Messages (:class:`Message`) for one partition."""

    topic: Any
    partition: int
    messages: Any


class FetchRequest(NamedTuple):
    """Fetch one partition from ``offset``, at most ``max_bytes``."""

    topic: Any
    partition: int
    offset: int
    max_bytes: int


class OffsetRequest(NamedTuple):
    """ListOffsets: ``time`` -1 latest, -2 earliest, else a timestamp in ms."""

    topic: Any
    partition: int
    time: int
    max_offsets: int


class OffsetCommitRequest(NamedTuple):
    """Commit ``offset`` (the next to read) with ``metadata`` for one partition."""

    topic: Any
    partition: int
    offset: int
    metadata: Any


class OffsetFetchRequest(NamedTuple):
    """Read a group's committed offset for one partition."""

    topic: Any
    partition: int


class ProduceResponse(NamedTuple):
    """The outcome of a :class:`ProduceRequest`: ``offset`` of its first message."""

    topic: Any
    partition: int
    error: int
    offset: int


class FetchResponse(NamedTuple):
    """Messages (:class:`OffsetAndMessage`) fetched from one partition."""

    topic: Any
    partition: int
    error: int
    highwaterMark: int
    messages: Any


class OffsetResponse(NamedTuple):
    """The offsets a :class:`OffsetRequest` found."""

    topic: Any
    partition: int
    error: int
    offsets: Any


class OffsetCommitResponse(NamedTuple):
    """The outcome of one :class:`OffsetCommitRequest`."""

    topic: Any
    partition: int
    error: int


class OffsetFetchResponse(NamedTuple):
    """A committed offset (-1: none) and its metadata."""

    topic: Any
    partition: int
    offset: int
    metadata: Any
    error: int


class BrokerMetadata(NamedTuple):
    """A broker's id and address."""

    nodeId: int
    host: str
    port: int


class TopicMetadata(NamedTuple):
    """A topic's error and its partitions."""

    topic: Any
    error: int
    partitions: Any


class PartitionMetadata(NamedTuple):
    """A partition's leader, replicas and in-sync replicas."""

    topic: Any
    partition: int
    leader: int
    replicas: Any
    isr: Any
    error: int


class OffsetAndMessage(NamedTuple):
    """A fetched :class:`Message` and its offset."""

    offset: int
    message: Message


class Message(NamedTuple):
    """A message: ``magic`` and ``attributes`` (bits 0-1: the codec) as 0.9.5 wrote them."""

    magic: int
    attributes: int
    key: bytes | None
    value: bytes | None


class KafkaMessage(NamedTuple):
    """What the 0.9.5 ``KafkaConsumer`` yields (value after ``deserializer_class``)."""

    topic: Any
    partition: int
    offset: int
    key: bytes | None
    value: Any


class TopicAndPartition(NamedTuple):
    """A topic and a partition."""

    topic: Any
    partition: int


class RetryOptions(NamedTuple):
    """The async producer's retry settings."""

    limit: int | None
    backoff_ms: int
    retry_on_timeouts: bool


# ------------------------------------------------------------------------------ errors


class BufferUnderflowError(KafkaError):
    """Bytes ended before the structure being read (``kafka.util``'s readers)."""


class ChecksumError(CorruptRecordError):
    """A message's CRC did not match."""


class ConsumerFetchSizeTooSmall(KafkaError):
    """A message is larger than ``max_buffer_size``: the consumer cannot fetch it."""


class ConsumerNoMoreData(KafkaError):
    """No more data (0.9.5 internal)."""


class ConsumerTimeout(KafkaError):
    """The 0.9.5 ``KafkaConsumer.next()`` saw no message within ``consumer_timeout_ms``."""


class KafkaUnavailableError(ConnectionError):
    """No broker could be reached."""


class FailedPayloadsError(KafkaError):
    """A request's payloads failed (the broker was unreachable)."""

    def __init__(self, payload: Any, *args: Any) -> None:
        super().__init__(payload, *args)
        self.payload = payload


class AsyncProducerQueueFull(KafkaError):
    """The async producer holds ``async_queue_maxsize`` messages already."""

    def __init__(self, failed_msgs: Any, *args: Any) -> None:
        super().__init__(failed_msgs, *args)
        self.failed_msgs = failed_msgs


class LegacyFeatureUnavailableError(KafkaError, NotImplementedError):
    """A 0.9.5 feature that cannot exist on Kafka 4: the message says why and what to use.

    Not in the seed: kafkastate's own, raised instead of sending something today's brokers
    reject (v0 wire encodings, ZooKeeper-only behaviour).
    """


class _SeedError(BrokerResponseError):
    """How type checkers see the seed's broker errors: ``errno`` and ``message``."""

    message: ClassVar[str]


def _seed(base: type[BrokerResponseError], name: str, message: str) -> type[_SeedError]:
    # A subclass of kafkastate's class for the code, carrying 0.9.5's name and message.
    cls = type(name, (base,), {"message": message, "__module__": __name__})
    cls.__doc__ = f"errno {base.errno}: ``{message}`` (0.9.5's name; a {base.__name__})."
    return cast("type[_SeedError]", cls)


UnknownError = _seed(_errors.UnknownServerError, "UnknownError", "UNKNOWN")
OffsetOutOfRangeError = _seed(
    _errors.OffsetOutOfRangeError, "OffsetOutOfRangeError", "OFFSET_OUT_OF_RANGE"
)
InvalidMessageError = _seed(_errors.CorruptMessageError, "InvalidMessageError", "INVALID_MESSAGE")
UnknownTopicOrPartitionError = _seed(
    _errors.UnknownTopicOrPartitionError,
    "UnknownTopicOrPartitionError",
    "UNKNOWN_TOPIC_OR_PARTITION",
)
InvalidFetchRequestError = _seed(
    _errors.InvalidFetchSizeError, "InvalidFetchRequestError", "INVALID_FETCH_SIZE"
)
LeaderNotAvailableError = _seed(
    _errors.LeaderNotAvailableError, "LeaderNotAvailableError", "LEADER_NOT_AVAILABLE"
)
NotLeaderForPartitionError = _seed(
    _errors.NotLeaderForPartitionError, "NotLeaderForPartitionError", "NOT_LEADER_FOR_PARTITION"
)
RequestTimedOutError = _seed(
    _errors.RequestTimedOutError, "RequestTimedOutError", "REQUEST_TIMED_OUT"
)
BrokerNotAvailableError = _seed(
    _errors.BrokerNotAvailableError, "BrokerNotAvailableError", "BROKER_NOT_AVAILABLE"
)
ReplicaNotAvailableError = _seed(
    _errors.ReplicaNotAvailableError, "ReplicaNotAvailableError", "REPLICA_NOT_AVAILABLE"
)
MessageSizeTooLargeError = _seed(
    _errors.MessageTooLargeError, "MessageSizeTooLargeError", "MESSAGE_SIZE_TOO_LARGE"
)
StaleControllerEpochError = _seed(
    _errors.StaleControllerEpochError, "StaleControllerEpochError", "STALE_CONTROLLER_EPOCH"
)
OffsetMetadataTooLargeError = _seed(
    _errors.OffsetMetadataTooLargeError,
    "OffsetMetadataTooLargeError",
    "OFFSET_METADATA_TOO_LARGE",
)
StaleLeaderEpochCodeError = _seed(
    _errors.NetworkError, "StaleLeaderEpochCodeError", "STALE_LEADER_EPOCH_CODE"
)
OffsetsLoadInProgressCode = _seed(
    _errors.CoordinatorLoadInProgressError,
    "OffsetsLoadInProgressCode",
    "OFFSETS_LOAD_IN_PROGRESS_CODE",
)
ConsumerCoordinatorNotAvailableCode = _seed(
    _errors.CoordinatorNotAvailableError,
    "ConsumerCoordinatorNotAvailableCode",
    "CONSUMER_COORDINATOR_NOT_AVAILABLE_CODE",
)
NotCoordinatorForConsumerCode = _seed(
    _errors.NotCoordinatorError,
    "NotCoordinatorForConsumerCode",
    "NOT_COORDINATOR_FOR_CONSUMER_CODE",
)

# The seed's other spellings of the same errors.
OffsetOutOfRangeException = OffsetOutOfRangeError
InvalidFetchRequest = InvalidFetchRequestError
LeaderNotFoundError = LeaderNotAvailableError
BrokerNotFoundError = BrokerNotAvailableError
ConsumerCoordinatorNotAvailable = ConsumerCoordinatorNotAvailableCode
x = UnknownTopicOrPartitionError

legacy_errors: dict[int, type[BrokerResponseError]] = {
    cls.errno: cls
    for cls in (
        UnknownError,
        OffsetOutOfRangeError,
        InvalidMessageError,
        UnknownTopicOrPartitionError,
        InvalidFetchRequestError,
        LeaderNotAvailableError,
        NotLeaderForPartitionError,
        RequestTimedOutError,
        BrokerNotAvailableError,
        ReplicaNotAvailableError,
        MessageSizeTooLargeError,
        StaleControllerEpochError,
        OffsetMetadataTooLargeError,
        StaleLeaderEpochCodeError,
        OffsetsLoadInProgressCode,
        ConsumerCoordinatorNotAvailableCode,
        NotCoordinatorForConsumerCode,
    )
}
"""errno -> the seed's class (0.9.5's ``kafka_errors``)."""

kafka_errors = legacy_errors


def error_class(code: int) -> type[BrokerResponseError]:
    """The class raised for a broker error code: the seed's, else kafkastate's."""
    return legacy_errors.get(code) or error_for_code(code)


def check_error(response: Any) -> None:
    """Raise the error class of ``response.error`` (a broker error code) if it is not 0.

    Raises:
        BrokerResponseError: the seed's subclass for the code (kafkastate's for codes the
            seed did not know), with the response as its message.
    """
    code = int(getattr(response, "error", 0) or 0)
    if code:
        raise error_class(code)(repr(response))


@contextlib.contextmanager
def seed_errors() -> Iterator[None]:
    """Re-raise kafkastate's broker errors as the seed's subclass for the same code."""
    try:
        yield
    except BrokerResponseError as exc:
        cls = legacy_errors.get(exc.errno)
        if cls is None or isinstance(exc, cls):
            raise
        raise cls(str(exc)) from exc
