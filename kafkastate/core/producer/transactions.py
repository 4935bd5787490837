"""TransactionManager: the client side of Kafka transactions (KIP-98), sans-IO.

Theory of operation
-------------------
A transactional producer has a ``transactional.id``. The manager owns the transaction
state (:class:`TransactionState`, transitions in :data:`TRANSITIONS`, after Java's
``TransactionManager.State.isTransitionValid``) and every request to the *transaction
coordinator* (FindCoordinator with key_type 1) and, for offsets, to the group coordinator
(key_type 0). The :class:`~kafkastate.core.producer.producer.ProducerMachine` owns it, sends
its requests through the same :class:`~kafkastate.core.client.Client`, routes their answers
back, asks it which partitions may be drained, and tells it when a batch failed.

Commands return a :data:`TransactionOpId`; :class:`TransactionOperationCompleted` names it
once the operation is over (``error`` None on success). One operation at a time.

* ``init`` (UNINITIALIZED -> INITIALIZING -> READY): InitProducerId with the transactional
  id and ``transaction.timeout.ms``; the coordinator aborts whatever the previous
  incarnation left open and bumps the epoch, fencing it.
* ``begin`` (READY -> IN_TRANSACTION) is local.
* A record for a partition not yet in the transaction puts it in the *pending* set; pending
  partitions go out together in one AddPartitionsToTxn, and a partition's batches are not
  drained before the coordinator has added it (KIP-98: the coordinator must know every
  partition before data lands there, or the commit marker would miss it).
* ``send_offsets``: AddOffsetsToTxn (the group's ``__consumer_offsets`` partition joins the
  transaction), then TxnOffsetCommit to the group coordinator with the generation, member id
  and group instance id (KIP-447: a zombie's offsets are refused).
* ``commit`` (IN_TRANSACTION -> COMMITTING -> READY): flush, wait until every record has its
  outcome, then EndTxn(commit). A failed record makes the transaction abortable instead.
* ``abort`` (IN_TRANSACTION | ABORTABLE_ERROR -> ABORTING -> READY): queued records fail with
  :class:`~kafkastate.errors.TransactionAbortedError`, in-flight ones are waited for, then
  EndTxn(abort) if anything reached the coordinator.

Errors. Retriable coordinator answers (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS)
are retried after ``retry.backoff.ms``; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look the
coordinator up again first. PRODUCER_FENCED, INVALID_PRODUCER_EPOCH (from a coordinator),
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE and anything unexpected are fatal
(FATAL_ERROR; the producer fails every record and must be closed) -- except that a fenced
answer to TxnOffsetCommit is first put to the transaction coordinator (AddOffsetsToTxn
again), since the group coordinator may judge by a stale cache (:meth:`_check_fence`).
Errors that concern only
the current transaction (a failed batch, TOPIC/GROUP_AUTHORIZATION_FAILED, KIP-447 fencing of
the offsets, TRANSACTION_ABORTABLE) go to ABORTABLE_ERROR: everything after it raises
:class:`~kafkastate.errors.TransactionFailedError` until ``abort``, after which the
producer is usable again.

Timeout abort (KIP-588). The coordinator aborts a transaction open longer than
``transaction.timeout.ms`` and bumps the epoch; our next request or batch is refused as if
fenced. If the transaction has been open that long, this is not treated as fatal: the
transaction becomes abortable (:class:`~kafkastate.errors.TransactionTimedOutError`) and
its abort skips EndTxn (it would be refused) for InitProducerId with the old epoch, which
the coordinator accepts only after its own timeout abort -- after a real fence it answers
PRODUCER_FENCED, and that is fatal. Only Kafka 4.0+ coordinators accept it; on older ones
(told apart by the negotiated versions, :func:`_check_timeout_recovery`) the abort fails the
producer with an UnsupportedVersionError that names the next step instead of sending a
request whose PRODUCER_FENCED answer would claim a fencing that did not happen.

Epoch bump (KIP-360). When the sequence of some partition can no longer be trusted (a failed
or expired batch, UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER) the transaction becomes
abortable and, after its abort, InitProducerId is sent with the current id and epoch
(ABORTING -> INITIALIZING -> READY): same producer id, epoch + 1, sequences from 0.

KIP-890 client defence. With transaction version 1 (the versions this client speaks: Produce
<= v11, EndTxn <= v4) a request to the coordinator whose answer never came may still be
delivered later -- the Jepsen finding on Kafka-compatible brokers: a delayed EndTxn(abort)
of transaction n lands after transaction n+1 began and aborts it, or a delayed
AddPartitionsToTxn adds a partition to the next transaction. So when the outcome of an
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit or EndTxn is unknown (request timeout,
connection lost after sending), the request is retried (all four are idempotent within one
transaction) and, once the transaction is over, the producer re-initialises -- InitProducerId
with its id and epoch, epoch + 1 -- *before* the next transaction may begin. A late message
then carries an old epoch and the coordinator refuses it. Likewise when an abort fails a
batch that had been sent before (a Produce timed out and its retry was still queued): a
late copy of it would be the next sequence at the same epoch and join the next transaction
on the partition, so the epoch is bumped after the abort (KIP-360).

Pure: no IO, no clock; ``now`` comes in, deadlines go out through :meth:`get_timer`.
"""

from __future__ import annotations

import datetime
import enum
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final, NewType

import attrs

from kafkastate.core.client import Client, RequestId
from kafkastate.core.metadata import NodeId
from kafkastate.core.producer.accumulator import Accumulator
from kafkastate.core.producer.idempotence import Idempotence, IdempotenceState
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
    RemoteProtocolError,
    TransactionAbortedError,
    TransactionFailedError,
    TransactionStateError,
    TransactionTimedOutError,
    UnsupportedVersionError,
    error_for_code,
)
from kafkastate.structs import ConsumerGroupMetadata

__all__ = [
    "TRANSACTIONAL_MAX_VERSIONS",
    "TRANSACTION_STATES",
    "TRANSITIONS",
    "TransactionEvent",
    "TransactionManager",
    "TransactionOpId",
    "TransactionOperationCompleted",
    "TransactionState",
    "group_metadata",
]

TransactionOpId = NewType("TransactionOpId", int)
_TP = tuple[str, int]

log = logging.getLogger("kafkastate.txn")

_ADD_PARTITIONS_TO_TXN: Final = 24
_ADD_OFFSETS_TO_TXN: Final = 25
_END_TXN: Final = 26
_TXN_OFFSET_COMMIT: Final = 28

TRANSACTIONAL_MAX_VERSIONS: Final[Mapping[int, int]] = {
    ApiKey.PRODUCE: 11,  # v12 lets the broker add partitions implicitly (TV2)
    ApiKey.INIT_PRODUCER_ID: 5,  # v6 is KIP-939 (two-phase commit)
    _ADD_PARTITIONS_TO_TXN: 3,  # v4+ is the brokers' batched form
    _ADD_OFFSETS_TO_TXN: 4,
    _END_TXN: 4,  # v5 bumps the epoch on every transaction (TV2)
    _TXN_OFFSET_COMMIT: 4,  # v5 adds the offsets partition implicitly (TV2)
}
"""Transaction version 1 (KIP-890 part 2 off): the highest version a transactional producer
sends per API. The client-side defence in the module docstring stands in for TV2."""

# Error codes, by what they mean here.
_NONE: Final = 0
_COORDINATOR_LOAD_IN_PROGRESS: Final = 14
_COORDINATOR_NOT_AVAILABLE: Final = 15
_NOT_COORDINATOR: Final = 16
_REQUEST_TIMED_OUT: Final = 7
_UNKNOWN_TOPIC_OR_PARTITION: Final = 3
_CONCURRENT_TRANSACTIONS: Final = 51
_OPERATION_NOT_ATTEMPTED: Final = 55
_MOVED: Final = frozenset({_COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR})
_RETRY: Final = frozenset({_COORDINATOR_LOAD_IN_PROGRESS, _CONCURRENT_TRANSACTIONS})
_FENCED: Final = frozenset({90, 47})  # PRODUCER_FENCED, INVALID_PRODUCER_EPOCH
_FATAL: Final = frozenset(
    {
        53,  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        48,  # INVALID_TXN_STATE
        43,  # UNSUPPORTED_FOR_MESSAGE_FORMAT
        35,  # UNSUPPORTED_VERSION
        50,  # INVALID_TRANSACTION_TIMEOUT
        31,  # CLUSTER_AUTHORIZATION_FAILED
    }
)
# The transaction is lost, the producer is not: abort, then bump the epoch (KIP-360).
_BUMP: Final = frozenset({59, 49})  # UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING
_ABORTABLE: Final = frozenset(
    {
        29,  # TOPIC_AUTHORIZATION_FAILED
        30,  # GROUP_AUTHORIZATION_FAILED
        120,  # TRANSACTION_ABORTABLE (KIP-890)
        25,  # UNKNOWN_MEMBER_ID     } KIP-447: the consumer is no longer the group
        22,  # ILLEGAL_GENERATION    } member the offsets were read under
        82,  # FENCED_INSTANCE_ID    }
        27,  # REBALANCE_IN_PROGRESS }
        10,  # MESSAGE_TOO_LARGE
        87,  # INVALID_RECORD
    }
)


class TransactionState(enum.Enum):
    """The transaction state of a transactional producer (Java ``TransactionManager.State``)."""

    UNINITIALIZED = "uninitialized"
    """``init_transactions`` not called yet."""
    INITIALIZING = "initializing"
    """InitProducerId under way (first time, or an epoch bump after a transaction)."""
    READY = "ready"
    """No transaction open; ``begin_transaction`` may be called."""
    IN_TRANSACTION = "in_transaction"
    """A transaction is open: records and offsets join it."""
    COMMITTING = "committing"
    """``commit_transaction``: flushing, then EndTxn(commit)."""
    ABORTING = "aborting"
    """``abort_transaction``: failing queued records, then EndTxn(abort)."""
    ABORTABLE_ERROR = "abortable_error"
    """The transaction failed; only ``abort_transaction`` is allowed."""
    FATAL_ERROR = "fatal_error"
    """Fenced or refused for good; close the producer."""


_S = TransactionState
# STYLE §6: Java's isTransitionValid written from -> to, plus COMMITTING -> INITIALIZING for
# the KIP-890 re-initialisation after an uncertain commit. Every state may fail fatally.
TRANSACTION_STATES: Final = register(
    StateTable(
        machine="TransactionManager",
        states=TransactionState,
        initial=_S.UNINITIALIZED,
        transitions={
            _S.UNINITIALIZED: {_S.INITIALIZING, _S.FATAL_ERROR},
            _S.INITIALIZING: {_S.READY, _S.ABORTABLE_ERROR, _S.FATAL_ERROR},
            _S.READY: {_S.IN_TRANSACTION, _S.FATAL_ERROR},
            _S.IN_TRANSACTION: {_S.COMMITTING, _S.ABORTING, _S.ABORTABLE_ERROR, _S.FATAL_ERROR},
            _S.COMMITTING: {_S.INITIALIZING, _S.READY, _S.ABORTABLE_ERROR, _S.FATAL_ERROR},
            _S.ABORTING: {_S.INITIALIZING, _S.READY, _S.FATAL_ERROR},
            _S.ABORTABLE_ERROR: {_S.ABORTING, _S.ABORTABLE_ERROR, _S.FATAL_ERROR},
            _S.FATAL_ERROR: {_S.FATAL_ERROR},
        },
        error=TransactionStateError,
    )
)

TRANSITIONS: Final[Mapping[TransactionState, frozenset[TransactionState]]] = (
    TRANSACTION_STATES.sources()
)
"""The table inverted, as Java states it: target state -> the states it may be entered
from."""


@attrs.frozen(kw_only=True)
class TransactionOperationCompleted:
    """A transactional operation (``init``, ``send_offsets``, ``commit``, ``abort``) ended."""

    operation_id: TransactionOpId
    """The id the command returned."""
    operation: str
    """``"init"``, ``"send_offsets"``, ``"commit"`` or ``"abort"``."""
    error: KafkaError | None
    """None on success; else why (TransactionFailedError: abort and go on; anything else
    is fatal)."""


TransactionEvent = TransactionOperationCompleted


def group_metadata(group: str | ConsumerGroupMetadata) -> ConsumerGroupMetadata:
    """Normalise a group argument: a ``group_id`` string (no KIP-447 fencing) or metadata.

    Args:
        group: a non-empty group id, or a :class:`~kafkastate.structs.ConsumerGroupMetadata`.

    Returns:
        The metadata.

    Raises:
        TypeError: neither (the message names what was given).
        ValueError: an empty group id.
    """
    if isinstance(group, ConsumerGroupMetadata):
        meta = group
    elif isinstance(group, str):
        meta = ConsumerGroupMetadata(group)
    else:
        # a consumer's own metadata object with the same fields (kafka-python, aiokafka)
        fields = ("group_id", "generation_id", "member_id", "group_instance_id")
        if not all(hasattr(group, f) for f in fields):
            raise TypeError(
                "send_offsets_to_transaction needs a group_id str or a ConsumerGroupMetadata"
                f"(group_id, generation_id, member_id, group_instance_id), got {group!r}"
            )
        meta = ConsumerGroupMetadata(*(getattr(group, f) for f in fields))
    if not isinstance(meta.group_id, str) or not meta.group_id:
        raise ValueError(f"group_id must be a non-empty str, got {meta.group_id!r}")
    return meta


def _capped(versions: ApiVersionTable, api_key: int) -> type[Any]:
    version = min(versions.version_for(api_key), TRANSACTIONAL_MAX_VERSIONS[api_key])
    return request_type(api_key, version)


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=round(seconds * 1000))


@attrs.define(slots=True)
class _Operation:
    op_id: TransactionOpId
    kind: str
    offsets: dict[_TP, tuple[int, str, int]] = attrs.field(factory=dict)
    group: ConsumerGroupMetadata | None = None
    offsets_added: bool = False  # AddOffsetsToTxn answered
    fence_checked: bool = False  # a fenced TxnOffsetCommit was put to the txn coordinator


@attrs.define(slots=True)
class _Pending:
    kind: str  # find_txn, find_group, init, add_partitions, add_offsets, txn_offsets, end
    partitions: tuple[_TP, ...] = ()


_OUTCOME_UNKNOWN: Final = frozenset({"add_partitions", "add_offsets", "txn_offsets", "end"})


class TransactionManager:
    """Transaction state and coordinator requests of one transactional producer.

    Args:
        transactional_id: ``transactional.id``.
        transaction_timeout: ``transaction.timeout.ms`` in seconds.
        request_timeout: ``request.timeout.ms`` in seconds, per coordinator request.
        retry_backoff: ``retry.backoff.ms`` in seconds.
        client: the producer's Client (requests go through it).
        idempotence: the producer's idempotence bookkeeping (id, epoch, sequences).
        accumulator: the producer's accumulator (flush before commit, fail on abort).
        on_fatal: called with the error when the manager turns FATAL_ERROR, so the producer
            fails every pending record.
        defence: the KIP-890 client defence (re-initialise after an unknown outcome); off
            only to show what it prevents (the simulator's self-test).
    """

    def __init__(
        self,
        *,
        transactional_id: str,
        transaction_timeout: float,
        request_timeout: float,
        retry_backoff: float,
        client: Client,
        idempotence: Idempotence,
        accumulator: Accumulator,
        on_fatal: Callable[[KafkaError, float], None],
        defence: bool = True,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout = transaction_timeout
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self._client = client
        self._idem = idempotence
        self._acc = accumulator
        self._on_fatal = on_fatal
        self._defence = defence
        self._state = TransactionState.UNINITIALIZED
        self._events: deque[TransactionEvent] = deque()
        self._op: _Operation | None = None
        self._next_op = 0
        self._coordinator: NodeId | None = None
        self._group_coordinators: dict[str, NodeId] = {}
        self._requests: dict[RequestId, _Pending] = {}
        self._retry_at: float | None = None
        self._added: dict[_TP, None] = {}  # in the transaction, per the coordinator
        self._pending: dict[_TP, None] = {}  # appended to, not added yet
        self._started = False  # the coordinator knows the transaction (something added)
        self._started_at: float | None = None  # when the first partition/offsets went
        self._bump_required = False  # KIP-360 / KIP-890: new epoch before the next one
        self._epoch_lost = False  # KIP-588: the coordinator aborted us after a timeout
        # the timeout that the InitProducerId now under way recovers from (KIP-588)
        self._recovering: KafkaError | None = None
        self._abortable: KafkaError | None = None
        self._fatal: KafkaError | None = None
        self._transitions: list[tuple[TransactionState, TransactionState]] = []

    # ---------------------------------------------------------------- queries

    @property
    def state(self) -> TransactionState:
        """The transaction state."""
        return self._state

    @property
    def fatal_error(self) -> KafkaError | None:
        """The error that made the manager FATAL_ERROR, if any."""
        return self._fatal

    @property
    def bump_required(self) -> bool:
        """Whether the epoch will be bumped before the next transaction (KIP-360/KIP-890)."""
        return self._bump_required

    @property
    def transitions(self) -> list[tuple[TransactionState, TransactionState]]:
        """Every transition made so far, ``(from, to)``, for tests and the simulator."""
        return self._transitions

    @property
    def partitions(self) -> tuple[_TP, ...]:
        """Partitions the coordinator has added to the current transaction."""
        return tuple(self._added)

    @property
    def operation(self) -> str | None:
        """The operation under way (``"init"``, ``"send_offsets"``, ``"commit"``,
        ``"abort"``), or None."""
        return None if self._op is None else self._op.kind

    @property
    def busy(self) -> bool:
        """Whether an operation or a coordinator request is under way."""
        return self._op is not None or bool(self._requests)

    def owns(self, rid: RequestId) -> bool:
        """Whether ``rid`` is one of the manager's requests."""
        return rid in self._requests

    def may_drain(self, topic: str, partition: int) -> bool:
        """Whether batches of this partition may be sent now: the transaction is open (or
        committing) and the coordinator added the partition."""
        if self._state not in (_S.IN_TRANSACTION, _S.COMMITTING):
            return False
        return (topic, partition) in self._added

    def next_event(self) -> TransactionEvent | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """When :meth:`poll` has something to do (a retry backoff ending), or None."""
        if self._requests:
            return None
        return self._retry_at

    # --------------------------------------------------------------- commands

    def init(self, *, now: float) -> TransactionOpId:
        """Start ``init_transactions``: InitProducerId with the transactional id.

        Returns:
            The operation's id.

        Raises:
            TransactionStateError: already initialised or initialising.
            KafkaError: the producer failed fatally.
        """
        self._check_usable("init_transactions")
        if self._state is not _S.UNINITIALIZED:
            raise TransactionStateError(
                f"init_transactions: already called (transaction state {self._state.name})"
            )
        op = self._start_op("init")
        self._to(_S.INITIALIZING)
        self._idem.start_init()
        self.poll(now=now)
        return op.op_id

    def begin(self) -> None:
        """Start a transaction (local: nothing is sent until a record or offsets are).

        Raises:
            TransactionStateError: not READY (not initialised, a transaction already open,
                one committing or aborting).
            TransactionFailedError: the last transaction failed; abort it first.
            KafkaError: the producer failed fatally.
        """
        self._check_usable("begin_transaction")
        if self._state is _S.ABORTABLE_ERROR:
            raise self._abortable_error("begin_transaction")
        if self._state is not _S.READY or self._op is not None:
            raise TransactionStateError(
                f"begin_transaction: {self._why_not_ready()} (transaction state {self._state.name})"
            )
        self._added.clear()
        self._pending.clear()
        self._started = False
        self._to(_S.IN_TRANSACTION)

    def check_send(self) -> None:
        """Raise unless a record may join a transaction now.

        Raises:
            TransactionStateError: no transaction open (the message says which call to make).
            TransactionFailedError: the transaction failed; abort it.
            KafkaError: the producer failed fatally.
        """
        if self._state is _S.IN_TRANSACTION:
            return
        self._check_usable("send")
        if self._state is _S.ABORTABLE_ERROR:
            raise self._abortable_error("send")
        raise TransactionStateError(
            "send on a transactional producer outside a transaction: call "
            f"begin_transaction() first (transaction state {self._state.name})"
        )

    def add_partition(self, topic: str, partition: int) -> bool:
        """A record was appended for this partition; add it to the transaction if new.

        Returns:
            Whether the partition is new to the transaction (AddPartitionsToTxn will go).
        """
        tp = (topic, partition)
        if tp in self._added or tp in self._pending:
            return False
        self._pending[tp] = None
        return True

    def send_offsets(
        self,
        offsets: Mapping[tuple[str, int], Any],
        group: str | ConsumerGroupMetadata,
        *,
        now: float,
    ) -> TransactionOpId:
        """Commit consumer offsets as part of the transaction (``sendOffsetsToTransaction``).

        Args:
            offsets: ``(topic, partition) -> offset`` of the next record to read; the value
                may also be an ``OffsetAndMetadata``-like ``(offset, metadata[, leader
                epoch])`` tuple or have ``.offset``/``.metadata``.
            group: the group id, or the consumer's group metadata (KIP-447 fencing).
            now: the driver's clock.

        Returns:
            The operation's id.

        Raises:
            TransactionStateError: no transaction open, or another operation under way.
            TransactionFailedError: the transaction failed; abort it.
            TypeError, ValueError: a bad group or offsets (the message names the entry).
            KafkaError: the producer failed fatally.
        """
        self._check_usable("send_offsets_to_transaction")
        if self._state is _S.ABORTABLE_ERROR:
            raise self._abortable_error("send_offsets_to_transaction")
        if self._state is not _S.IN_TRANSACTION:
            raise TransactionStateError(
                "send_offsets_to_transaction outside a transaction: call begin_transaction() "
                f"first (transaction state {self._state.name})"
            )
        meta = group_metadata(group)
        parsed = _parse_offsets(offsets)
        self._check_no_op("send_offsets_to_transaction")
        op = self._start_op("send_offsets")
        op.offsets = parsed
        op.group = meta
        self.poll(now=now)
        return op.op_id

    def commit(self, *, now: float) -> TransactionOpId:
        """Flush, then commit the transaction (EndTxn commit).

        Returns:
            The operation's id.

        A commit already under way (its caller gave up waiting: a timeout, a cancellation)
        is resumed, not refused: its id is returned again (Java: "it is safe to retry" a
        commitTransaction that timed out; no other operation may start meanwhile).

        Raises:
            TransactionStateError: no transaction open, or another operation under way.
            TransactionFailedError: the transaction failed; abort it instead.
            KafkaError: the producer failed fatally.
        """
        self._check_usable("commit_transaction")
        resumed = self._resume("commit")
        if resumed is not None:
            return resumed
        if self._state is _S.ABORTABLE_ERROR:
            raise self._abortable_error("commit_transaction")
        if self._state is not _S.IN_TRANSACTION:
            raise TransactionStateError(
                "commit_transaction without an open transaction: call begin_transaction() "
                f"first (transaction state {self._state.name})"
            )
        self._check_no_op("commit_transaction")
        op = self._start_op("commit")
        self._to(_S.COMMITTING)
        self._acc.flush()  # no linger: everything goes now
        self.poll(now=now)
        return op.op_id

    def abort(self, *, now: float) -> TransactionOpId:
        """Abort the transaction: queued records fail, then EndTxn(abort).

        Returns:
            The operation's id.

        A ``send_offsets`` still under way ends with TransactionAbortedError (its offsets
        are aborted with the rest); a commit under way cannot be aborted.

        An abort already under way is resumed (its id returned again), as a commit is.

        Raises:
            TransactionStateError: no transaction open, or a commit under way.
            KafkaError: the producer failed fatally.
        """
        self._check_usable("abort_transaction")
        resumed = self._resume("abort")
        if resumed is not None:
            return resumed
        if self._state not in (_S.IN_TRANSACTION, _S.ABORTABLE_ERROR):
            raise TransactionStateError(
                "abort_transaction without an open transaction (transaction state "
                f"{self._state.name})"
            )
        self._supersede_offsets()
        self._check_no_op("abort_transaction")
        op = self._start_op("abort")
        self._begin_abort(now)
        return op.op_id

    def abort_on_close(self, *, now: float) -> None:
        """The producer is closing: abort an open transaction (Java does too), and give up
        an InitProducerId still under way (nothing depends on it any more)."""
        if self._state is _S.INITIALIZING:
            op = self._op
            if op is not None and op.kind in ("commit", "abort"):
                self._finish_op(None)  # done; only the epoch bump after it is given up
            self._fail(ProducerClosedError("the producer closed during init"), now, notify=False)
            return
        if self._state in (_S.IN_TRANSACTION, _S.ABORTABLE_ERROR):
            self._supersede_offsets()
            if self._op is None:
                self._start_op("abort")
                self._begin_abort(now)

    def _supersede_offsets(self) -> None:
        op = self._op
        if op is not None and op.kind == "send_offsets":
            self._finish_op(
                TransactionAbortedError(
                    "send_offsets_to_transaction: the transaction was aborted meanwhile"
                )
            )

    # -------------------------------------------------------------- producer hooks

    def batch_failed(self, error: KafkaError, *, bump: bool) -> None:
        """A batch of the transaction failed (or its sequence broke): the transaction can
        no longer commit.

        Args:
            error: why.
            bump: the partition's sequence is no longer trusted: bump the epoch after the
                abort (KIP-360).
        """
        if bump:
            self._bump_required = True
        if isinstance(error, TransactionAbortedError | TransactionFailedError):
            return  # our own abort failing what was queued
        self._set_abortable(error)

    def fencing_error(self, what: str, cause: KafkaError, *, now: float) -> KafkaError:
        """The error to fail with after PRODUCER_FENCED / INVALID_PRODUCER_EPOCH.

        The broker says the same when a newer producer took the transactional id and when
        the coordinator aborted a transaction past ``transaction.timeout.ms``; if the
        transaction has been open that long, the second is meant.

        Args:
            what: the request or partition that was refused.
            cause: the broker's error.
            now: the driver's clock.

        Returns:
            A TransactionTimedOutError or a ProducerFencedError (``__cause__`` = cause).
        """
        started = self._started_at
        error: KafkaError
        if started is not None and now - started >= self.transaction_timeout:
            error = TransactionTimedOutError(
                f"{what}: the transaction of {self.transactional_id!r} was open "
                f"{now - started:.1f} s, longer than transaction_timeout_ms "
                f"({self.transaction_timeout * 1000:g} ms): the coordinator aborted it "
                f"({cause}); call abort_transaction()",
                cause=cause,
            )
        else:
            error = ProducerFencedError(
                f"{what}: producer fenced for transactional id {self.transactional_id!r}: a "
                f"newer producer with the same transactional_id started ({cause})"
            )
        error.__cause__ = cause
        return error

    def epoch_fenced(self, error: KafkaError, *, now: float) -> bool:
        """Our epoch was refused (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH).

        A newer producer: fatal. The coordinator's abort of a transaction past
        ``transaction.timeout.ms`` (``error`` is a TransactionTimedOutError): the transaction
        is abortable, and its abort re-initialises with the old epoch, which the coordinator
        accepts after a timeout abort only (KIP-588) -- if it refuses, that is fatal then.

        Args:
            error: from :meth:`fencing_error`.
            now: the driver's clock.

        Returns:
            Whether the producer survives (False: it is FATAL_ERROR now).
        """
        if isinstance(error, TransactionTimedOutError):
            if self._state in (_S.IN_TRANSACTION, _S.COMMITTING, _S.ABORTABLE_ERROR):
                self._epoch_lost = True
                self._bump_required = True
                self._set_abortable(error)
                self._abortable = error  # the timeout is what the caller should see
                return True
            if self._state is _S.ABORTING:
                self._epoch_lost = True
                self._bump_required = True
                return True
        self._fail(error, now)
        return False

    def fenced(self, error: KafkaError, *, now: float) -> None:
        """The producer was fenced or refused for good (from a Produce answer)."""
        self._fail(error, now, notify=False)

    # ------------------------------------------------------------------ IO

    def poll(self, *, now: float) -> None:
        """Send whatever request is due. Called by the producer after every input."""
        if self._state is _S.FATAL_ERROR or self._requests:
            return
        if self._state is _S.ABORTABLE_ERROR:
            self._fail_queued(now)
            self._finish_blocked_op()
        if self._retry_at is not None:
            if now < self._retry_at:
                return
            self._retry_at = None
        state = self._state
        op = self._op
        if state is _S.INITIALIZING:
            self._send_coordinator("init", now)
        elif state in (_S.IN_TRANSACTION, _S.COMMITTING) and self._pending:
            self._send_coordinator("add_partitions", now)
        elif state is _S.IN_TRANSACTION and op is not None and op.kind == "send_offsets":
            if not op.offsets_added:
                self._send_coordinator("add_offsets", now)
            else:
                self._send_group(op, now)
        elif state is _S.COMMITTING:
            if self._acc.has_incomplete():
                return  # the flush is under way
            if self._started:
                self._send_coordinator("end", now)
            else:
                self._transaction_over(now)  # nothing reached the coordinator
        elif state is _S.ABORTING:
            if self._acc.in_flight_batches() or self._acc.has_undrained():
                self._fail_queued(now)
                if self._acc.in_flight_batches():
                    return  # their outcome first: markers must follow the data
            if self._started and not self._epoch_lost:
                self._send_coordinator("end", now)
            else:
                # nothing reached the coordinator, or it aborted the transaction itself
                # (KIP-588): EndTxn would be refused; InitProducerId with the old epoch
                # re-initialises instead (see _transaction_over)
                self._transaction_over(now)

    def on_completed(self, rid: RequestId, response: Any, *, now: float) -> None:
        """A response to one of the manager's requests."""
        pending = self._requests.pop(rid)
        if self._state is _S.FATAL_ERROR:
            return
        match pending.kind:
            case "find_txn" | "find_group":
                self._on_find(pending, response, now)
            case "init":
                self._on_init(response, now)
            case "add_partitions":
                self._on_add_partitions(pending, response, now)
            case "add_offsets":
                self._on_add_offsets(response, now)
            case "txn_offsets":
                self._on_txn_offsets(response, now)
            case "end":
                self._on_end(response, now)
        self.poll(now=now)

    def on_failed(self, rid: RequestId, error: KafkaError, *, now: float) -> None:
        """One of the manager's requests got no response (timeout, connection lost...)."""
        pending = self._requests.pop(rid)
        if self._state is _S.FATAL_ERROR:
            return
        if not (error.retriable or isinstance(error, RemoteProtocolError)):
            self._fail(error, now)
            return
        if pending.kind in _OUTCOME_UNKNOWN and self._defence:
            # KIP-890 defence: the request may still land later; retrying is safe within
            # this transaction, and a new epoch before the next one makes a late copy of it
            # harmless.
            self._bump_required = True
        if pending.kind == "txn_offsets":
            op = self._op
            if op is not None and op.group is not None:
                self._group_coordinators.pop(op.group.group_id, None)
        elif pending.kind != "find_group":
            self._coordinator = None
        self._retry_at = now + self.retry_backoff
        self.poll(now=now)

    # ------------------------------------------------------------- internals

    def _to(self, target: TransactionState) -> None:
        before = self._state
        self._state = transition(TRANSACTION_STATES, before, target, what="transaction")
        self._transitions.append((before, target))

    def _check_usable(self, call: str) -> None:
        if self._fatal is not None:
            raise self._fatal

    def _check_no_op(self, call: str) -> None:
        if self._op is not None:
            raise TransactionStateError(
                f"{call}: {self._op.kind} is still under way; wait for it to finish"
            )

    def _why_not_ready(self) -> str:
        if self._state is _S.UNINITIALIZED:
            return "call init_transactions() first"
        if self._state is _S.IN_TRANSACTION:
            return "a transaction is already open"
        if self._op is not None:
            return f"{self._op.kind} is still under way"
        return "the producer is not ready for a transaction"

    def _abortable_error(self, call: str) -> TransactionFailedError:
        cause = self._abortable
        if isinstance(cause, TransactionFailedError):
            return cause  # TransactionTimedOutError: raised as it is
        return TransactionFailedError(
            f"{call}: the transaction cannot commit ({cause}); call abort_transaction()",
            cause=cause,
        )

    def _resume(self, kind: str) -> TransactionOpId | None:
        """The id of a ``kind`` operation under way (a retried call waits for it), or None."""
        op = self._op
        return op.op_id if op is not None and op.kind == kind else None

    def _start_op(self, kind: str) -> _Operation:
        self._next_op += 1
        op = _Operation(op_id=TransactionOpId(self._next_op), kind=kind)
        self._op = op
        return op

    def _finish_op(self, error: KafkaError | None) -> None:
        op, self._op = self._op, None
        if op is not None:
            log.log(
                logging.INFO if op.kind == "init" else logging.DEBUG,
                "transactional id %r: %s %s",
                self.transactional_id,
                op.kind,
                "done" if error is None else f"failed: {error}",
            )
            self._events.append(
                TransactionOperationCompleted(operation_id=op.op_id, operation=op.kind, error=error)
            )

    def _finish_blocked_op(self) -> None:
        # In ABORTABLE_ERROR only abort proceeds; a commit or send_offsets in progress ends.
        op = self._op
        if op is not None and op.kind in ("commit", "send_offsets"):
            self._finish_op(self._abortable_error(op.kind))

    def _set_abortable(self, error: KafkaError) -> None:
        if self._state in (_S.IN_TRANSACTION, _S.COMMITTING, _S.ABORTABLE_ERROR):
            if self._state is not _S.ABORTABLE_ERROR:
                self._abortable = error
                self._to(_S.ABORTABLE_ERROR)
            self._pending.clear()
        elif self._state is _S.INITIALIZING and self._op is not None and self._op.kind == "abort":
            # the bump after an abort failed: the next abort tries again
            self._abortable = error
            self._idem_back_to_ready()
            self._to(_S.ABORTABLE_ERROR)
            self._finish_op(self._abortable_error("abort_transaction"))

    def _idem_back_to_ready(self) -> None:
        if self._idem.state is IdempotenceState.BUMPING:
            self._idem.initialized(self._idem.producer_id, self._idem.producer_epoch)

    def _fail(self, error: KafkaError, now: float, *, notify: bool = True) -> None:
        if self._fatal is not None:
            return
        self._fatal = error
        log.info("transactional id %r failed for good (fenced?): %s", self.transactional_id, error)
        self._to(_S.FATAL_ERROR)
        self._requests.clear()
        self._retry_at = None
        self._finish_op(error)
        if notify:
            self._on_fatal(error, now)

    def _fail_queued(self, now: float) -> None:
        if self._acc.has_undrained():
            error: KafkaError = TransactionAbortedError(
                f"the transaction of {self.transactional_id!r} was aborted before the record "
                "was sent"
            )
            if self._state is _S.ABORTABLE_ERROR:
                error = self._abortable_error("send")
            for batch in self._acc.abort_undrained(error, now=now):
                if batch.base_sequence >= 0:
                    # sent before (a retry was queued): a late copy may still land, and at
                    # this epoch it would join the next transaction -- bump (KIP-360)
                    self._bump_required = True

    def _begin_abort(self, now: float) -> None:
        self._to(_S.ABORTING)
        self._pending.clear()  # never added: nothing of them reached a broker
        self._retry_at = None if not self._requests else self._retry_at
        self._fail_queued(now)
        self.poll(now=now)

    def _mark_started(self, now: float) -> None:
        if not self._started:
            self._started = True
            self._started_at = now

    def _transaction_over(self, now: float) -> None:
        """EndTxn answered (or nothing to end): bump the epoch first if needed."""
        self._added.clear()
        self._pending.clear()
        self._started = False
        self._started_at = None
        if self._epoch_lost:
            self._recovering = self._abortable or TransactionTimedOutError(
                f"the coordinator aborted the transaction of {self.transactional_id!r}"
            )
        self._abortable = None
        self._epoch_lost = False
        if self._bump_required:
            self._to(_S.INITIALIZING)
            self._idem.request_bump("transaction ended after an error or an unknown outcome")
            self.poll(now=now)
            return
        self._to(_S.READY)
        self._finish_op(None)

    # -- sending

    def _send_coordinator(self, kind: str, now: float) -> None:
        node = self._coordinator
        if node is None or self._client.node_state(node) is None:
            self._coordinator = None
            self._send_find("find_txn", self.transactional_id, 1, now)
            return
        factory: Callable[[ApiVersionTable], Any]
        pending = _Pending(kind=kind)
        tid = self.transactional_id
        pid, epoch = self._idem.producer_id, self._idem.producer_epoch
        match kind:
            case "init":
                bumping = self._idem.state is IdempotenceState.BUMPING
                init_pid, init_epoch = (pid, epoch) if bumping else (-1, -1)
                timeout = self.transaction_timeout
                recovering = self._recovering

                def factory(versions: ApiVersionTable) -> Any:
                    if recovering is not None:
                        _check_timeout_recovery(versions, tid, recovering)
                    cls = _capped(versions, ApiKey.INIT_PRODUCER_ID)
                    return build(
                        cls,
                        transactional_id=tid,
                        transaction_timeout=_ms(timeout),
                        producer_id=init_pid,
                        producer_epoch=init_epoch,
                    )

            case "add_partitions":
                tps = tuple(self._pending)
                pending.partitions = tps

                def factory(versions: ApiVersionTable) -> Any:
                    return _add_partitions_request(versions, tid, pid, epoch, tps)

            case "add_offsets":
                op = self._op
                assert op is not None and op.group is not None
                group_id = op.group.group_id

                def factory(versions: ApiVersionTable) -> Any:
                    cls = _capped(versions, _ADD_OFFSETS_TO_TXN)
                    return build(
                        cls,
                        transactional_id=tid,
                        producer_id=pid,
                        producer_epoch=epoch,
                        group_id=group_id,
                    )

            case _:  # "end"
                committed = self._state is _S.COMMITTING

                def factory(versions: ApiVersionTable) -> Any:
                    cls = _capped(versions, _END_TXN)
                    return build(
                        cls,
                        transactional_id=tid,
                        producer_id=pid,
                        producer_epoch=epoch,
                        committed=committed,
                    )

        rid = self._client.send(factory, now=now, node_id=node, timeout=self.request_timeout)
        self._requests[rid] = pending

    def _send_group(self, op: _Operation, now: float) -> None:
        group = op.group
        assert group is not None
        node = self._group_coordinators.get(group.group_id)
        if node is None or self._client.node_state(node) is None:
            self._group_coordinators.pop(group.group_id, None)
            self._send_find("find_group", group.group_id, 0, now)
            return
        tid = self.transactional_id
        pid, epoch = self._idem.producer_id, self._idem.producer_epoch
        offsets = dict(op.offsets)

        def factory(versions: ApiVersionTable) -> Any:
            return _txn_offset_commit_request(
                versions, tid, pid=pid, epoch=epoch, group=group, offsets=offsets
            )

        rid = self._client.send(factory, now=now, node_id=node, timeout=self.request_timeout)
        self._requests[rid] = _Pending(kind="txn_offsets")

    def _send_find(self, kind: str, key: str, key_type: int, now: float) -> None:
        def factory(versions: ApiVersionTable) -> Any:
            cls = versions.request_type(ApiKey.FIND_COORDINATOR)
            return build(cls, key=key, key_type=key_type, coordinator_keys=(key,))

        rid = self._client.send(factory, now=now, timeout=self.request_timeout)
        self._requests[rid] = _Pending(kind=kind)

    # -- responses

    def _error(self, code: int, what: str, **context: object) -> KafkaError:
        return error_for_code(code)(
            f"{what} for transactional id {self.transactional_id!r}", **context
        )

    def _classify(self, code: int, what: str, now: float, *, group: bool = False) -> str:
        """Act on a coordinator error code; return "ok", "retry" or "stop"."""
        if code == _NONE:
            return "ok"
        if code in _MOVED:
            if group and self._op is not None and self._op.group is not None:
                self._group_coordinators.pop(self._op.group.group_id, None)
            else:
                self._coordinator = None
            self._retry_at = now + self.retry_backoff
            return "retry"
        if code in _RETRY:
            self._retry_at = now + self.retry_backoff
            return "retry"
        error = self._error(code, what)
        if what == "InitProducerId" and code not in _FENCED:
            self._fail(error, now)  # nothing to abort: the producer cannot get an epoch
        elif code in _FENCED:
            self.epoch_fenced(self.fencing_error(what, error, now=now), now=now)
        elif code in _BUMP:
            self._bump_required = True
            self._set_abortable(error)
        elif code in _ABORTABLE:
            self._set_abortable(error)
        else:  # _FATAL and anything unexpected
            self._fail(error, now)
        return "stop"

    def _on_find(self, pending: _Pending, response: Any, now: float) -> None:
        coordinators = getattr(response, "coordinators", None)
        found = coordinators[0] if coordinators else response  # v4+: one per key
        code = int(found.error_code)
        group = pending.kind == "find_group"
        if code != _NONE:
            if code in _MOVED or code in _RETRY:
                self._retry_at = now + self.retry_backoff
                return
            key = "group" if group else "transaction"
            error = self._error(code, f"FindCoordinator ({key} coordinator)")
            if group and self._state is _S.IN_TRANSACTION:
                self._set_abortable(error)  # GROUP_AUTHORIZATION_FAILED...: offsets only
            else:
                self._fail(error, now)  # no transaction coordinator: nothing works
            return
        node = NodeId(int(found.node_id))
        if self._client.node_state(node) is None:
            # not in metadata yet: refresh and ask again after the backoff
            self._client.request_metadata_update()
            self._retry_at = now + self.retry_backoff
            return
        if group:
            op = self._op
            if op is not None and op.group is not None:
                self._group_coordinators[op.group.group_id] = node
        else:
            self._coordinator = node

    def _on_init(self, response: Any, now: float) -> None:
        code = int(response.error_code)
        if self._classify(code, "InitProducerId", now) != "ok":
            return
        self._idem.initialized(int(response.producer_id), int(response.producer_epoch))
        self._bump_required = False
        self._recovering = None
        self._to(_S.READY)
        self._finish_op(None)

    def _on_add_partitions(self, pending: _Pending, response: Any, now: float) -> None:
        results: dict[_TP, int] = {}
        for topic in response.results_by_topic_v3_and_below:
            for part in topic.results_by_partition:
                results[(str(topic.name), int(part.partition_index))] = int(
                    part.partition_error_code
                )
        if _NONE in results.values():
            self._mark_started(now)  # the coordinator has a transaction: it must be ended
        if self._state not in (_S.IN_TRANSACTION, _S.COMMITTING):
            return  # aborted (or failed) meanwhile; the pending set was dropped
        retry = False
        for tp in pending.partitions:
            code = results.get(tp, _OPERATION_NOT_ATTEMPTED)
            if code == _NONE:
                self._pending.pop(tp, None)
                self._added[tp] = None
            elif code in (_OPERATION_NOT_ATTEMPTED, _UNKNOWN_TOPIC_OR_PARTITION):
                retry = True
            else:
                verdict = self._classify(code, "AddPartitionsToTxn", now)
                if verdict == "stop":
                    return
                retry = True
        if retry and self._retry_at is None:
            self._retry_at = now + self.retry_backoff

    def _on_add_offsets(self, response: Any, now: float) -> None:
        op = self._op
        code = int(response.error_code)
        if op is None or op.kind != "send_offsets":
            if code == _NONE:
                self._mark_started(now)  # superseded by an abort: EndTxn must still go
            return
        verdict = self._classify(code, "AddOffsetsToTxn", now)
        if verdict == "ok":
            op.offsets_added = True
            self._mark_started(now)
        elif verdict == "stop" and self._op is op:
            self._finish_op(self._op_error("send_offsets_to_transaction"))

    def _on_txn_offsets(self, response: Any, now: float) -> None:
        op = self._op
        if op is None or op.kind != "send_offsets":
            return
        for topic in response.topics:
            for part in topic.partitions:
                tp = (str(topic.name), int(part.partition_index))
                code = int(part.error_code)
                if code == _NONE:
                    op.offsets.pop(tp, None)
                    continue
                if code in (_UNKNOWN_TOPIC_OR_PARTITION, _REQUEST_TIMED_OUT):
                    self._retry_at = now + self.retry_backoff
                    continue
                if code in _FENCED and not op.fence_checked:
                    self._check_fence(op, code, now)
                    return
                verdict = self._classify(code, "TxnOffsetCommit", now, group=True)
                if verdict == "stop":
                    if self._op is op:
                        self._finish_op(self._op_error("send_offsets_to_transaction"))
                    return
        if not op.offsets:
            self._finish_op(None)
        elif self._retry_at is None:
            self._retry_at = now + self.retry_backoff  # partitions left unanswered

    def _check_fence(self, op: _Operation, code: int, now: float) -> None:
        """A TxnOffsetCommit refused as fenced: ask the transaction coordinator first.

        The group coordinator's verdict is second hand: it checks our epoch with the
        transaction coordinator *it* knows, and a broker that was paused while both
        coordinators moved away answers from what it cached before, once it runs again --
        an epoch we have since bumped (KIP-890 defence, KIP-360) then looks fenced. So
        AddOffsetsToTxn goes again to our transaction coordinator (the authority on the
        epoch; idempotent within the transaction) and the group coordinator is looked up
        again: a real fence is refused there (fatal as before), else TxnOffsetCommit is
        sent once more, and only a second fenced answer is fatal.
        """
        op.fence_checked = True
        op.offsets_added = False
        assert op.group is not None
        self._group_coordinators.pop(op.group.group_id, None)
        self._retry_at = now + self.retry_backoff
        log.info(
            "transactional id %r: TxnOffsetCommit answered %s; asking the transaction "
            "coordinator before taking it for a fence",
            self.transactional_id,
            error_for_code(code).__name__,
        )

    def _on_end(self, response: Any, now: float) -> None:
        if self._state not in (_S.COMMITTING, _S.ABORTING):
            return
        code = int(response.error_code)
        verdict = self._classify(code, "EndTxn", now)
        if verdict == "ok":
            self._transaction_over(now)
            return
        state: TransactionState = self._state  # _classify may have moved it
        if verdict == "stop" and state is _S.ABORTABLE_ERROR:
            self._finish_blocked_op()
        elif verdict == "stop" and state is _S.ABORTING:
            # UNKNOWN_PRODUCER_ID & co during abort: the bump re-initialises anyway
            self._bump_required = True
            self._transaction_over(now)

    def _op_error(self, call: str) -> KafkaError:
        if self._fatal is not None:
            return self._fatal
        return self._abortable_error(call)


# ---------------------------------------------------------------------------- requests


def _add_partitions_request(
    versions: ApiVersionTable, tid: str, pid: int, epoch: int, tps: tuple[_TP, ...]
) -> Any:
    cls = _capped(versions, _ADD_PARTITIONS_TO_TXN)
    topic_cls = nested_type(cls, "AddPartitionsToTxnTopic")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    topics = tuple(
        build(topic_cls, name=topic, partitions=tuple(sorted(parts)))
        for topic, parts in by_topic.items()
    )
    return build(
        cls,
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=topics,
    )


def _txn_offset_commit_request(
    versions: ApiVersionTable,
    tid: str,
    *,
    pid: int,
    epoch: int,
    group: ConsumerGroupMetadata,
    offsets: Mapping[_TP, tuple[int, str, int]],
) -> Any:
    cls = _capped(versions, _TXN_OFFSET_COMMIT)
    topic_cls = nested_type(cls, "TxnOffsetCommitRequestTopic")
    part_cls = nested_type(cls, "TxnOffsetCommitRequestPartition")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (offset, metadata, leader_epoch) in offsets.items():
        by_topic.setdefault(topic, []).append(
            build(
                part_cls,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=leader_epoch,
                committed_metadata=metadata,
            )
        )
    return build(
        cls,
        transactional_id=tid,
        group_id=group.group_id,
        producer_id=pid,
        producer_epoch=epoch,
        # KIP-447: the group coordinator refuses a stale generation or member
        generation_id=group.generation_id,
        member_id=group.member_id,
        group_instance_id=group.group_instance_id,
        topics=tuple(build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )


def _parse_offsets(offsets: Mapping[tuple[str, int], Any]) -> dict[_TP, tuple[int, str, int]]:
    if not isinstance(offsets, Mapping):
        raise TypeError(
            f"offsets must be a mapping of (topic, partition) to offset, got {offsets!r}"
        )
    out: dict[_TP, tuple[int, str, int]] = {}
    for tp, value in offsets.items():
        if (
            not isinstance(tp, tuple)
            or len(tp) != 2
            or not isinstance(tp[0], str)
            or isinstance(tp[1], bool)
            or not isinstance(tp[1], int)
        ):
            raise TypeError(f"offsets: key {tp!r} is not a (topic, partition) pair")
        metadata, leader_epoch = "", -1
        if isinstance(value, int) and not isinstance(value, bool):
            offset = value
        elif hasattr(value, "offset"):
            offset = value.offset
            metadata = getattr(value, "metadata", "") or ""
            leader_epoch = getattr(value, "leader_epoch", -1)
            leader_epoch = -1 if leader_epoch is None else leader_epoch
        elif isinstance(value, tuple) and value:
            offset = value[0]
            metadata = value[1] if len(value) > 1 and value[1] is not None else ""
        else:
            raise TypeError(f"offsets: value {value!r} for {tp} is not an offset")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offsets: offset for {tp} must be an int >= 0, got {offset!r}")
        if not isinstance(metadata, str):
            raise TypeError(f"offsets: metadata for {tp} must be a str, got {metadata!r}")
        out[(tp[0], int(tp[1]))] = (int(offset), metadata, int(leader_epoch))
    if not out:
        raise ValueError("offsets: empty; nothing to send")
    return out


TIMEOUT_RECOVERY = "recovering from a transaction timeout (KIP-588)"
"""The feature :func:`_check_timeout_recovery` gates."""


def _check_timeout_recovery(versions: ApiVersionTable, tid: str, timed_out: KafkaError) -> None:
    """Refuse InitProducerId with the epoch the coordinator fenced, where it cannot work.

    When a transaction outlives ``transaction.timeout.ms`` the coordinator aborts it and bumps
    the epoch. From Kafka 4.0 on it remembers the fenced epoch, and InitProducerId with that
    epoch re-initialises the producer (the Java client's ``abortTransaction`` after a timeout).
    Older coordinators answer PRODUCER_FENCED to it -- though no other producer exists
    (seen on 2.8.2, 3.6.2 and 3.9.1; issue 25). No API version announces the change, so the
    broker's generation decides (:meth:`ApiVersionTable.at_least`: a broker still offering
    Fetch v0-v3 predates 4.0). A fresh InitProducerId (epoch -1) would work there, but it
    would also fence a newer producer if one did take the transactional id over; only the
    application knows, so the producer fails, naming the next step, instead of guessing.
    """
    if versions.at_least((4, 0)):
        return
    error = UnsupportedVersionError(
        f"{TIMEOUT_RECOVERY} needs Kafka 4.0+; this broker is {versions.release} (by its API "
        "versions), and its coordinator, when it aborted the timed-out "
        f"transaction of {tid!r}, fenced the producer's epoch for good -- no other producer "
        "took over. The transaction is aborted; close this producer and create a new one with "
        "the same transactional_id (its init_transactions() takes a new epoch), or keep "
        "transactions shorter than transaction_timeout_ms",
        api_key=ApiKey.INIT_PRODUCER_ID,
        api_name="InitProducerId",
        broker_range=versions.broker_ranges.get(ApiKey.INIT_PRODUCER_ID),
        feature=TIMEOUT_RECOVERY,
    )
    error.__cause__ = timed_out
    raise error
