"""Every exception kafkastate raises.

``KafkaError`` is the root. Broker error codes map to subclasses of
``BrokerResponseError`` (one per code, generated in ``_error_codes.py`` from the protocol's
error table) carrying ``errno`` and the ``retriable`` flag; :func:`error_for_code` finds the
class for a code. Local errors (bad bytes, an illegal command, a failed negotiation) have their
own classes below.
"""

from __future__ import annotations

from kafkastate._error_base import (
    AuthenticationFailedError,
    AuthorizationError,
    BrokerResponseError,
    InvalidMetadataError,
    KafkaConnectionError,
    KafkaError,
    KafkaProtocolError,
    KafkaTimeoutError,
    RetriableError,
    UnsupportedVersionError,
)

# One class per broker error code, importable from here (``kafkastate.errors.NotCoordinatorError``).
# The generated module imports only kafkastate._error_base: the dependency is one-way.
from kafkastate._error_codes import *  # noqa: F403
from kafkastate._error_codes import (
    BY_CODE,
    BrokerUnsupportedVersionError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptMessageError,
    DelegationTokenAuthDisabledError,
    DelegationTokenAuthorizationFailedError,
    DelegationTokenExpiredError,
    DelegationTokenNotFoundError,
    DelegationTokenOwnerMismatchError,
    DelegationTokenRequestNotAllowedError,
    DuplicateSequenceNumberError,
    FetchSessionIdNotFoundError,
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidFetchSessionEpochError,
    InvalidFetchSizeError,
    InvalidPrincipalTypeError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidReplicaAssignmentError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ListenerNotFoundError,
    LogDirNotFoundError,
    MemberIdRequiredError,
    MessageTooLargeError,
    NetworkError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    ReassignmentInProgressError,
    SaslAuthenticationFailedError,
    SecurityDisabledError,
    TransactionalIdAuthorizationFailedError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    UnknownServerError,
    UnsupportedSaslMechanismError,
)
from kafkastate._error_codes import __all__ as _code_names

__all__ = [
    "AuthenticationFailedError",
    "AuthorizationError",
    "BrokerResponseError",
    "BufferFullError",
    "Cancelled",
    "CorrelationIdError",
    "CorruptRecordException",
    "IllegalArgumentError",
    "IncompatibleBrokerVersion",
    "InvalidConfigurationError",
    "InvalidFetchRequestError",
    "InvalidMetadataError",
    "InvalidReceiveError",
    "InvalidReplicationAssignmentError",
    "KafkaProtocolError",
    "MetadataEmptyBrokerList",
    "NetworkExceptionError",
    "NoError",
    "NodeNotReadyError",
    "QuotaViolationError",
    "RetriableError",
    "StaleMetadata",
    "TooManyInFlightRequests",
    "UnknownBrokerIdError",
    "UnknownError",
    "UnrecognizedBrokerVersion",
    "for_code",
    "ConcurrentTransactions",
    "DelegationTokenAuthDisabled",
    "DelegationTokenAuthorizationFailed",
    "DelegationTokenExpired",
    "DelegationTokenNotFound",
    "DelegationTokenOwnerMismatch",
    "DelegationTokenRequestNotAllowed",
    "DuplicateSequenceNumber",
    "FetchSessionIdNotFound",
    "GroupCoordinatorNotAvailableError",
    "GroupIdNotFound",
    "GroupLoadInProgressError",
    "InvalidFetchSessionEpoch",
    "InvalidMessageError",
    "InvalidPrincipalType",
    "InvalidProducerEpoch",
    "InvalidProducerIdMapping",
    "InvalidTransactionTimeout",
    "InvalidTxnState",
    "ListenerNotFound",
    "LogDirNotFound",
    "MemberIdRequired",
    "NonEmptyGroup",
    "NotCoordinatorForGroupError",
    "OperationNotAttempted",
    "OutOfOrderSequenceNumber",
    "ReassignmentInProgress",
    "SaslAuthenticationFailed",
    "SecurityDisabled",
    "StaleLeaderEpochCodeError",
    "TransactionCoordinatorFenced",
    "TransactionalIdAuthorizationFailed",
    "UnknownProducerId",
    "AuthenticationMethodNotSupported",
    "KafkaUnavailableError",
    "kafka_errors",
    "CommitFailedError",
    "ConsumerStoppedError",
    "CorruptRecordError",
    "IllegalStateError",
    "KafkaConfigurationError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "LocalProtocolError",
    "LogTruncationError",
    "MessageSizeTooLargeError",
    "NoBrokersAvailable",
    "NoOffsetForPartitionError",
    "PartitionerError",
    "IllegalOperation",
    "KafkaArgumentTypeError",
    "ProducerFenced",
    "ProducerClosed",
    "ProducerClosedError",
    "RebalanceListenerError",
    "RecordTooLargeError",
    "RemoteProtocolError",
    "SecurityProtocolMismatchError",
    "SslAuthenticationError",
    "TransactionAbortedError",
    "TransactionFailedError",
    "TransactionStateError",
    "TransactionTimedOutError",
    "UnknownBrokerError",
    "UnsupportedCodecError",
    "UnsupportedVersionError",
    "error_for_code",
]
__all__ += _code_names  # noqa: PLE0605


class KafkaConfigurationError(KafkaError, ValueError):
    """A configuration value or argument is invalid; the message names it."""


class KafkaArgumentTypeError(KafkaConfigurationError, TypeError):
    """An argument of the wrong type (a record value that is not bytes, topics given as a
    bare string...): a ``TypeError``, as aiokafka raises, and a
    :class:`KafkaConfigurationError`; the message names the argument."""


class IllegalStateError(KafkaError):
    """The client object is not in a state that allows this call (closed, not started…)."""


class IllegalOperation(IllegalStateError):
    """An operation the client's configuration or state does not allow: a commit without
    a ``group_id``, a transactional call without a transaction (aiokafka's name; it is an
    :class:`IllegalStateError` too, which kafka-python raises for the same calls)."""


class ConsumerStoppedError(IllegalStateError):
    """The consumer was stopped (its ``async with`` block ended, ``stop()``, ``close()``)
    before a call, or while it waited for records or for the answer to a commit or an
    offsets query (a commit sent may have been stored); iteration ends instead. aiokafka's
    name, and an :class:`IllegalStateError`, which kafka-python raises after ``close()``."""


class CommitFailedError(KafkaError):
    """The group refused a commit because this member is no longer part of the generation
    that owns the partitions (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
    FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH): the partitions may already belong to another
    member. The member rejoins; records since the last successful commit may be read again
    by whoever owns them next (aiokafka's and kafka-python's name). The broker's error is
    ``__cause__``."""


class RebalanceListenerError(KafkaError):
    """A rebalance listener callback raised. The rebalance went on without it (the
    partitions were revoked or assigned as the group decided); the listener's exception is
    ``__cause__`` and :attr:`callback` names the method."""

    def __init__(self, message: str, *, callback: str) -> None:
        super().__init__(message)
        self.callback = callback
        """``on_partitions_revoked``, ``on_partitions_assigned`` or ``on_partitions_lost``."""


class LocalProtocolError(KafkaError):
    """A command was issued that the machine cannot accept in its current state."""


class RemoteProtocolError(KafkaError):
    """The broker sent bytes that break framing or decoding; the connection is unusable."""


class SslAuthenticationError(AuthenticationFailedError):
    """The TLS handshake with a broker failed on a certificate: the broker's is not signed
    by a trusted CA, does not name the host connected to (``ssl_check_hostname``), is
    revoked (``ssl_crlfile``) or expired, or the broker refused the client's (mutual TLS).
    Java's ``SslAuthenticationException``. Not retriable, like every
    :class:`AuthenticationFailedError`: the requests waiting for that broker fail at once and
    a client waiting for its bootstrap servers raises it at once, never a plaintext fallback.
    The message names the broker's address and the cause; the ``ssl`` module's exception is
    ``__cause__``."""


class SecurityProtocolMismatchError(AuthenticationFailedError):
    """A listener and ``security_protocol`` disagree on TLS: a TLS listener answered a
    plaintext client with TLS, or a plaintext listener hung up on a TLS handshake. The
    message names the broker and the setting to check; not retriable, and never answered by
    switching to the other protocol."""


class CorruptRecordError(KafkaError):
    """A record batch or message set failed validation (CRC, size, varint, compression)."""


class UnsupportedCodecError(KafkaError):
    """A record batch names a compression codec this build cannot handle."""


class NoOffsetForPartitionError(KafkaError):
    """A partition has no committed offset to start from and ``auto_offset_reset`` is
    ``"none"``; seek to choose one. (An out-of-range position under ``"none"`` raises
    ``OffsetOutOfRangeError``.)"""


class LogTruncationError(KafkaError):
    """The partition's log was truncated below the consumer's position (an unclean leader
    election lost records it had read; KIP-320) and ``auto_offset_reset`` is ``"none"``.

    Found by validating the position with OffsetForLeaderEpoch after a leader change. Seek
    to choose where to go on: :attr:`divergent_offset` is the first offset the new leader's
    log does not share with what was consumed, when the broker could say.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        offset: int,
        divergent_offset: int | None,
        divergent_epoch: int | None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        """The partition's topic."""
        self.partition = partition
        """The partition."""
        self.offset = offset
        """The position that was found beyond the log."""
        self.divergent_offset = divergent_offset
        """The end offset of the position's leader epoch on the new leader (None if unknown)."""
        self.divergent_epoch = divergent_epoch
        """The leader epoch of :attr:`divergent_offset` (None if unknown)."""


class RecordTooLargeError(KafkaError):
    """A fetched record batch is larger than the fetch limits allow the broker to send
    (``max_partition_fetch_bytes`` / ``fetch_max_bytes``); raise the limits."""


class NoBrokersAvailable(KafkaConnectionError, KafkaTimeoutError):
    """No bootstrap server answered in time: kafka-python 2's name; aiokafka raises a
    KafkaConnectionError and kafka-python 3 a KafkaTimeoutError, and this is both."""


class BufferFullError(KafkaError, BufferError):
    """``buffer.memory`` has no room for this record now; nothing was appended.

    Retriable: wait for room (the core's ``BufferSpaceFreed`` event, or an awaited send that
    waits for it up to ``max.block.ms``) and append again.
    Also a builtin ``BufferError``, the exception confluent-kafka's ``produce()`` raises
    when its queue is full, so code written for it catches this one too.
    """

    retriable = True

    def __init__(self, *, needed: int, available: int, buffer_memory: int) -> None:
        super().__init__(
            f"buffer.memory is full: the record needs up to {needed} bytes, {available} of "
            f"{buffer_memory} are free"
        )
        self.needed = needed
        """Bytes the append would have reserved (an upper bound)."""
        self.available = available
        """Bytes free when it was refused."""
        self.buffer_memory = buffer_memory
        """The configured limit."""


class ProducerClosedError(IllegalStateError):
    """The producer was closed or aborted before the record had an outcome, or a call came
    after it was closed (``stop()``, ``close()``, the end of its ``async with`` block): the
    same type on every face. It is aiokafka's ``ProducerClosed`` and an
    :class:`IllegalStateError`, which kafka-python raises for a send after ``close()``."""


ProducerClosed = ProducerClosedError
"""aiokafka's name for :class:`ProducerClosedError`."""


class TransactionStateError(LocalProtocolError, IllegalOperation):
    """A transactional call that the producer's transaction state does not allow: commit or
    abort without :meth:`begin_transaction`, ``begin_transaction`` twice, a send outside a
    transaction on a transactional producer, a transactional call on a producer without
    ``transactional_id``... The message names the call and the state. Nothing was changed.
    aiokafka raises ``IllegalOperation``, kafka-python an ``IllegalStateError`` (this is
    both)."""


class TransactionFailedError(KafkaError):
    """The current transaction cannot be committed: a record failed, a partition or the
    offsets could not be added, the group refused the offsets (KIP-447 fencing)...

    The producer stays usable: call ``abort_transaction()`` and start a new transaction.
    The error that caused it is :attr:`cause` (also ``__cause__``). (The broker's
    TRANSACTION_ABORTABLE code is :class:`TransactionAbortableError`; it is one such cause.)
    """

    def __init__(self, message: str, *, cause: KafkaError | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        """The error that made the transaction abortable."""
        self.__cause__ = cause


class TransactionAbortedError(KafkaError):
    """A record failed because its transaction was aborted before it was sent."""


class PartitionerError(KafkaError):
    """A custom partitioner raised, or returned something that is not one of the topic's
    partitions. The record is refused; the message names the partitioner and the value,
    and a raised exception is kept as ``__cause__``."""

    def __init__(self, message: str, *, partitioner: object, topic: str) -> None:
        super().__init__(message)
        self.partitioner = partitioner
        """The partitioner that misbehaved."""
        self.topic = topic
        """The record's topic."""


class UnknownBrokerError(BrokerResponseError):
    """The broker sent an error code this client does not know."""


def error_for_code(code: int) -> type[BrokerResponseError]:
    """Return the exception class for a Kafka error code.

    Args:
        code: the ``error_code`` field of a response (must not be 0).

    Returns:
        The ``BrokerResponseError`` subclass for that code, or ``UnknownBrokerError`` for a
        code outside the protocol's table.
    """
    return BY_CODE.get(code, UnknownBrokerError)


ProducerFenced = ProducerFencedError
"""aiokafka's name for :class:`ProducerFencedError` (PRODUCER_FENCED): another producer
with the same ``transactional_id`` started, or the transaction coordinator fenced this one.
Fatal: close the producer."""


class TransactionTimedOutError(TransactionFailedError):
    """The transaction coordinator aborted the transaction because it stayed open longer
    than ``transaction_timeout_ms``, and bumped the producer's epoch (the broker's answer
    is PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, its ``__cause__``).

    Like any :class:`TransactionFailedError`: call ``abort_transaction()``; on Kafka 4.0+
    it re-initialises the producer with its old epoch, which the coordinator accepts after
    a timeout abort (KIP-588), and the producer goes on. Raised instead of a
    ProducerFencedError when the transaction had been open at least
    ``transaction_timeout_ms``; should another producer have taken over meanwhile, the
    abort raises ProducerFencedError. Kafka 2.8-3.9 cannot re-initialise a producer after a
    timeout abort: there the abort raises :class:`UnsupportedVersionError` (``feature`` =
    ``"recovering from a transaction timeout (KIP-588)"``, this error as ``__cause__``), the
    producer is unusable, and the next step is a new producer with the same
    ``transactional_id``."""

    def __init__(self, message: str, *, cause: KafkaError | None = None) -> None:
        super().__init__(message, cause=cause)


MessageSizeTooLargeError = MessageTooLargeError
"""aiokafka's and kafka-python's name for :class:`MessageTooLargeError`."""


# --------------------------------------------------------------- kafka-python's names
# Every name of kafka-python 3.0's ``kafka.errors`` resolves here, with its subclass
# relations (tests/test_error_names.py walks kafka-python's module; the few relations that
# differ on purpose are listed there and in docs/migrating-from-kafka-python.md).


class Cancelled(RetriableError):
    """A request was cancelled before its answer (kafka-python's name)."""


class CorrelationIdError(RetriableError, KafkaProtocolError):
    """A response's correlation id matched no request in flight (kafka-python's name;
    kafkastate raises :class:`RemoteProtocolError` for it)."""


class IllegalArgumentError(KafkaError):
    """An argument is not valid (kafka-python's name)."""


class InvalidReceiveError(KafkaProtocolError):
    """A response frame could not be read (kafka-python's name)."""


class MetadataEmptyBrokerList(RetriableError):
    """A metadata answer named no brokers (kafka-python's name)."""


class NodeNotReadyError(RetriableError):
    """The connection to a node is not ready for requests (kafka-python's name)."""


class QuotaViolationError(KafkaError):
    """A client quota was exceeded (kafka-python's name)."""


class StaleMetadata(InvalidMetadataError):
    """The metadata is older than what an operation needs (kafka-python's name)."""


class TooManyInFlightRequests(RetriableError):
    """A connection has as many requests in flight as it may (kafka-python's name)."""


class UnknownBrokerIdError(KafkaError):
    """A node id is not in the metadata (kafka-python's name)."""


class UnrecognizedBrokerVersion(KafkaError):
    """The broker's version could not be told from its ApiVersions (kafka-python's name;
    kafkastate negotiates every API by version, so it never raises it)."""


class NoError(BrokerResponseError):
    """Error code 0: no error (kafka-python's placeholder class)."""

    errno = 0
    error_name = "none"


CorruptRecordException = CorruptMessageError
"""kafka-python's alias of its broker code 2 class (CORRUPT_MESSAGE)."""
IncompatibleBrokerVersion = BrokerUnsupportedVersionError
"""kafka-python's name of broker code 35 (UNSUPPORTED_VERSION)."""
InvalidConfigurationError = InvalidConfigError
"""kafka-python's name of broker code 40 (INVALID_CONFIG)."""
InvalidFetchRequestError = InvalidFetchSizeError
"""kafka-python's name of broker code 4 (INVALID_FETCH_SIZE)."""
InvalidReplicationAssignmentError = InvalidReplicaAssignmentError
"""kafka-python's name of broker code 39 (INVALID_REPLICA_ASSIGNMENT)."""
NetworkExceptionError = NetworkError
"""kafka-python's name of broker code 13 (NETWORK_EXCEPTION)."""
UnknownError = UnknownServerError
"""kafka-python's name of broker code -1 (UNKNOWN_SERVER_ERROR)."""

# aiokafka's own names (its errors module keeps older spellings of some codes)
ConcurrentTransactions = ConcurrentTransactionsError
"""aiokafka's name of broker code 51."""
DelegationTokenAuthDisabled = DelegationTokenAuthDisabledError
"""aiokafka's name of broker code 61."""
DelegationTokenAuthorizationFailed = DelegationTokenAuthorizationFailedError
"""aiokafka's name of broker code 65."""
DelegationTokenExpired = DelegationTokenExpiredError
"""aiokafka's name of broker code 66."""
DelegationTokenNotFound = DelegationTokenNotFoundError
"""aiokafka's name of broker code 62."""
DelegationTokenOwnerMismatch = DelegationTokenOwnerMismatchError
"""aiokafka's name of broker code 63."""
DelegationTokenRequestNotAllowed = DelegationTokenRequestNotAllowedError
"""aiokafka's name of broker code 64."""
DuplicateSequenceNumber = DuplicateSequenceNumberError
"""aiokafka's name of broker code 46."""
FetchSessionIdNotFound = FetchSessionIdNotFoundError
"""aiokafka's name of broker code 70."""
GroupCoordinatorNotAvailableError = CoordinatorNotAvailableError
"""aiokafka's name of broker code 15."""
GroupIdNotFound = GroupIdNotFoundError
"""aiokafka's name of broker code 69."""
GroupLoadInProgressError = CoordinatorLoadInProgressError
"""aiokafka's name of broker code 14."""
InvalidFetchSessionEpoch = InvalidFetchSessionEpochError
"""aiokafka's name of broker code 71."""
InvalidMessageError = CorruptMessageError
"""aiokafka's name of broker code 2."""
InvalidPrincipalType = InvalidPrincipalTypeError
"""aiokafka's name of broker code 67."""
InvalidProducerEpoch = InvalidProducerEpochError
"""aiokafka's name of broker code 47."""
InvalidProducerIdMapping = InvalidProducerIdMappingError
"""aiokafka's name of broker code 49."""
InvalidTransactionTimeout = InvalidTransactionTimeoutError
"""aiokafka's name of broker code 50."""
InvalidTxnState = InvalidTxnStateError
"""aiokafka's name of broker code 48."""
ListenerNotFound = ListenerNotFoundError
"""aiokafka's name of broker code 72."""
LogDirNotFound = LogDirNotFoundError
"""aiokafka's name of broker code 57."""
MemberIdRequired = MemberIdRequiredError
"""aiokafka's name of broker code 79."""
NonEmptyGroup = NonEmptyGroupError
"""aiokafka's name of broker code 68."""
NotCoordinatorForGroupError = NotCoordinatorError
"""aiokafka's name of broker code 16."""
OperationNotAttempted = OperationNotAttemptedError
"""aiokafka's name of broker code 55."""
OutOfOrderSequenceNumber = OutOfOrderSequenceNumberError
"""aiokafka's name of broker code 45."""
ReassignmentInProgress = ReassignmentInProgressError
"""aiokafka's name of broker code 60."""
SaslAuthenticationFailed = SaslAuthenticationFailedError
"""aiokafka's name of broker code 58."""
SecurityDisabled = SecurityDisabledError
"""aiokafka's name of broker code 54."""
StaleLeaderEpochCodeError = NetworkError
"""aiokafka's name of broker code 13."""
TransactionCoordinatorFenced = TransactionCoordinatorFencedError
"""aiokafka's name of broker code 52."""
TransactionalIdAuthorizationFailed = TransactionalIdAuthorizationFailedError
"""aiokafka's name of broker code 53."""
UnknownProducerId = UnknownProducerIdError
"""aiokafka's name of broker code 59."""
AuthenticationMethodNotSupported = UnsupportedSaslMechanismError
"""aiokafka's name for a SASL mechanism the broker does not enable."""
KafkaUnavailableError = NoBrokersAvailable
"""aiokafka's (and kafka-python 0.9's) name for no reachable broker."""

kafka_errors: dict[int, type[BrokerResponseError]] = {0: NoError, **BY_CODE}
"""Every broker error code -> its class (kafka-python's ``kafka_errors``)."""


def for_code(error_code: int) -> type[BrokerResponseError]:
    """kafka-python's ``for_code``: the class of a broker error code (0 gives
    :class:`NoError`; an unknown code :class:`UnknownBrokerError`).

    Args:
        error_code: the code.

    Returns:
        The class.
    """
    return kafka_errors.get(error_code, UnknownBrokerError)
