"""Idempotence bookkeeping: the producer id and epoch, and per-partition sequence numbers.

Theory of operation
-------------------
An idempotent producer (KIP-98) gets a producer id and epoch from InitProducerId and stamps
every record batch with them and with the partition's next *sequence number*. The broker
keeps, per producer id and partition, the sequences of the last five batches it wrote: a
batch re-sent with the same sequence is recognised as a duplicate and not written twice, a
batch whose sequence leaves a gap is refused with OUT_OF_ORDER_SEQUENCE_NUMBER.

:class:`Idempotence` is the pure bookkeeping the :class:`~kafkastate.core.producer.producer.
ProducerMachine` consults:

* the producer-wide state (:class:`IdempotenceState`, transitions in :data:`IDEMPOTENCE_STATES`):
  UNINITIALIZED -> INITIALIZING (InitProducerId in flight) -> READY; READY -> BUMPING when
  the sequence of some partition can no longer be trusted (KIP-360); BUMPING -> READY when
  the new id/epoch arrives; anything -> FATAL (PRODUCER_FENCED, authorization...).
* per partition: the (producer id, epoch) its sequences belong to, the next sequence to
  hand out, the last acknowledged sequence, and the batches in flight.

Sequences are assigned when a batch is drained (Java does the same), so they follow the
order in which batches leave, which is append order per partition. A retried batch keeps
its sequence. When the id/epoch changes, a partition moves to the new one -- sequence 0 --
only once none of its batches stamped with the old one is in flight
(Java ``TransactionManager.maybeUpdateProducerIdAndEpoch``); its queued retries are then
stamped anew. Sequence numbers wrap from 2**31-1 to 0 like Java's
``DefaultRecordBatch.incrementSequence``.

Pure: no IO, no clock, partitions kept in dicts.
"""

from __future__ import annotations

import datetime
import enum
from typing import Any, Final

import attrs

from kafkastate.core.producer.accumulator import ProducerBatch
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.core.states import StateTable, register, transition

__all__ = [
    "IDEMPOTENCE_STATES",
    "INIT_PRODUCER_ID_MIN_VERSION",
    "Idempotence",
    "IdempotenceState",
    "PartitionSequence",
    "increment_sequence",
    "init_producer_id_request",
]

_INT32_MAX: Final = 2**31 - 1
_TP = tuple[str, int]

INIT_PRODUCER_ID_MIN_VERSION: Final = 3
"""InitProducerId v3 (KIP-360) accepts the current producer id and epoch, which an epoch
bump needs; older brokers (< 2.5) are refused."""


def increment_sequence(sequence: int, increment: int) -> int:
    """Advance a sequence number as Java's ``DefaultRecordBatch.incrementSequence`` does.

    Args:
        sequence: the current sequence (0..2**31-1).
        increment: how many records were added.

    Returns:
        ``sequence + increment``, wrapping past 2**31-1 to 0.
    """
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def init_producer_id_request(
    versions: ApiVersionTable,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    transaction_timeout: float = 60.0,
) -> Any:
    """Build an InitProducerId request for an idempotent (non-transactional) producer.

    Args:
        versions: the negotiated version table.
        producer_id: the current producer id for an epoch bump (KIP-360), -1 for a new one.
        producer_epoch: the current epoch, -1 for a new one.
        transaction_timeout: ``transaction.timeout.ms`` (ignored by the broker without a
            transactional id).

    Returns:
        The kio request entity.

    Raises:
        UnsupportedVersionError: the broker does not speak InitProducerId v3+.
    """
    version = versions.require(
        ApiKey.INIT_PRODUCER_ID,
        feature="the idempotent producer (KIP-360, Kafka 2.5+)",
        remedy="set enable_idempotence=False",
        min_version=INIT_PRODUCER_ID_MIN_VERSION,
    )
    cls = request_type(ApiKey.INIT_PRODUCER_ID, version)
    return cls(
        transactional_id=None,
        transaction_timeout=datetime.timedelta(milliseconds=round(transaction_timeout * 1000)),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


class IdempotenceState(enum.Enum):
    """Producer-wide idempotence state."""

    UNINITIALIZED = "uninitialized"
    """No producer id yet; nothing may be sent."""
    INITIALIZING = "initializing"
    """The first InitProducerId is in flight (or waiting for its retry backoff)."""
    READY = "ready"
    """A producer id and epoch are known; batches are stamped with them."""
    BUMPING = "bumping"
    """An epoch bump (KIP-360) is under way; no new batch is stamped until it ends."""
    FATAL = "fatal"
    """Fenced or refused for good; every pending record fails."""


_I = IdempotenceState
# STYLE §6: each command has one target (_TARGETS); a command is legal in a state when the
# table allows the move to its target (start_init only from UNINITIALIZED; a bump only
# from READY, or again while BUMPING; fatal from anywhere).
IDEMPOTENCE_STATES: Final = register(
    StateTable(
        machine="Idempotence",
        states=IdempotenceState,
        initial=_I.UNINITIALIZED,
        transitions={
            _I.UNINITIALIZED: {_I.INITIALIZING, _I.FATAL},
            _I.INITIALIZING: {_I.READY, _I.FATAL},
            _I.READY: {_I.BUMPING, _I.FATAL},
            _I.BUMPING: {_I.BUMPING, _I.READY, _I.FATAL},
            _I.FATAL: {_I.FATAL},
        },
    )
)
"""The producer-wide idempotence states (STYLE §6)."""

_TARGETS: Final[dict[str, IdempotenceState]] = {
    "start_init": _I.INITIALIZING,
    "initialized": _I.READY,
    "request_bump": _I.BUMPING,
    "fatal": _I.FATAL,
}


@attrs.define(kw_only=True)
class PartitionSequence:
    """Sequence bookkeeping of one partition."""

    producer_id: int = -1
    """The producer id the sequences below belong to."""
    producer_epoch: int = -1
    """Its epoch."""
    next_sequence: int = 0
    """Base sequence of the next batch stamped anew."""
    last_acked: int = -1
    """Last sequence the broker acknowledged under this id/epoch, -1 if none."""
    in_flight: list[ProducerBatch] = attrs.field(factory=list)
    """Batches of this partition on the wire, in drain order."""


class Idempotence:
    """Producer id, epoch and per-partition sequences of an idempotent producer."""

    def __init__(self, *, transactional: bool = False) -> None:
        self.transactional = transactional
        """Batches are stamped transactional (a producer with a ``transactional.id``)."""
        self.state = IdempotenceState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[_TP, PartitionSequence] = {}
        self.bump_reason: str | None = None
        """Why the pending epoch bump was requested (for logs and events)."""

    # ------------------------------------------------------------------------ state

    def _to(self, command: str) -> None:
        self.state = transition(IDEMPOTENCE_STATES, self.state, _TARGETS[command], what=command)

    @property
    def can_stamp(self) -> bool:
        """Whether new batches may be stamped and sent (READY)."""
        return self.state is IdempotenceState.READY

    def start_init(self) -> None:
        """The first InitProducerId is being sent.

        Raises:
            LocalProtocolError: not UNINITIALIZED.
        """
        self._to("start_init")

    def initialized(self, producer_id: int, producer_epoch: int) -> None:
        """InitProducerId answered: adopt the id and epoch.

        Partitions move to them lazily (:meth:`prepare`).

        Args:
            producer_id: the id the broker returned.
            producer_epoch: the epoch it returned.

        Raises:
            LocalProtocolError: no InitProducerId was expected.
        """
        self._to("initialized")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.bump_reason = None

    def request_bump(self, reason: str) -> bool:
        """Ask for a new epoch (KIP-360) because a partition's sequence is broken.

        Args:
            reason: what happened, for the record.

        Returns:
            Whether this started a bump (False if one is already pending, or not READY).
        """
        if self.state is IdempotenceState.READY:
            self._to("request_bump")
            self.bump_reason = reason
            return True
        return False

    def fatal(self) -> None:
        """Fenced or refused: nothing more is stamped."""
        self._to("fatal")

    # ------------------------------------------------------------------- partitions

    def partition(self, topic: str, partition: int) -> PartitionSequence:
        """The bookkeeping of one partition (created on first use).

        Args:
            topic: the topic.
            partition: the partition.

        Returns:
            The partition's :class:`PartitionSequence`.
        """
        tp = (topic, partition)
        seq = self._partitions.get(tp)
        if seq is None:
            seq = self._partitions[tp] = PartitionSequence(
                producer_id=self.producer_id, producer_epoch=self.producer_epoch
            )
        return seq

    def is_current(self, batch: ProducerBatch) -> bool:
        """Whether the batch is stamped with the current id and epoch.

        Args:
            batch: a batch.

        Returns:
            True if it carries a sequence under the current producer id/epoch.
        """
        return (
            batch.base_sequence >= 0
            and batch.producer_id == self.producer_id
            and batch.producer_epoch == self.producer_epoch
        )

    def prepare(self, topic: str, partition: int) -> bool:
        """Move the partition to the current id/epoch if it can; say whether it may send.

        A partition still on an old id/epoch moves (sequence 0) once none of its batches
        is in flight; until then it must not send.

        Args:
            topic: the topic.
            partition: the partition.

        Returns:
            Whether batches of this partition may be stamped and drained now.
        """
        if not self.can_stamp:
            return False
        seq = self.partition(topic, partition)
        if (seq.producer_id, seq.producer_epoch) != (self.producer_id, self.producer_epoch):
            if seq.in_flight:
                return False
            seq.producer_id, seq.producer_epoch = self.producer_id, self.producer_epoch
            seq.next_sequence = 0
            seq.last_acked = -1
        return True

    def stamp(self, batch: ProducerBatch) -> None:
        """Give a drained batch its producer state: keep a retry's sequence, else the next.

        Args:
            batch: a batch just drained from a partition :meth:`prepare` allowed.
        """
        seq = self.partition(batch.topic, batch.partition)
        if not self.is_current(batch):
            base = seq.next_sequence
            seq.next_sequence = increment_sequence(base, batch.record_count)
            batch.set_producer_state(
                self.producer_id, self.producer_epoch, base, is_transactional=self.transactional
            )
        seq.in_flight.append(batch)

    def restamp_split(self, original: ProducerBatch, pieces: list[ProducerBatch]) -> None:
        """Give split pieces the original's sequence range, in order (Java
        ``RecordAccumulator.splitAndReenqueue``): the broker wrote none of it.

        Args:
            original: the batch refused with MESSAGE_TOO_LARGE.
            pieces: what :meth:`Accumulator.split` made of it.
        """
        if not self.is_current(original):
            return  # stamped anew when drained
        base = original.base_sequence
        for piece in pieces:
            piece.set_producer_state(
                original.producer_id,
                original.producer_epoch,
                base,
                is_transactional=self.transactional,
            )
            base = increment_sequence(base, piece.record_count)

    def landed(self, batch: ProducerBatch) -> None:
        """The batch left the wire (acknowledged, failed, re-enqueued or split).

        Args:
            batch: a batch :meth:`stamp` recorded.
        """
        seq = self._partitions.get((batch.topic, batch.partition))
        if seq is not None and batch in seq.in_flight:
            seq.in_flight.remove(batch)

    def acknowledged(self, batch: ProducerBatch) -> None:
        """The broker wrote the batch: remember its last sequence.

        Args:
            batch: an acknowledged batch.
        """
        self.landed(batch)
        if self.is_current(batch):
            seq = self.partition(batch.topic, batch.partition)
            seq.last_acked = increment_sequence(batch.base_sequence, batch.record_count - 1)

    def is_next(self, batch: ProducerBatch) -> bool:
        """Whether the batch's sequence directly follows the last acknowledged one.

        An OUT_OF_ORDER_SEQUENCE_NUMBER for such a batch means the broker lost our state;
        for any other batch it only means an earlier batch failed and is being retried.

        Args:
            batch: a stamped batch.

        Returns:
            True if ``base_sequence == last_acked + 1``.
        """
        seq = self.partition(batch.topic, batch.partition)
        expected = 0 if seq.last_acked < 0 else increment_sequence(seq.last_acked, 1)
        return batch.base_sequence == expected

    def is_overtaken(self, batch: ProducerBatch) -> bool:
        """Whether a later sequence of the batch's partition was acknowledged before it.

        A broker holding the producer's state writes a partition's sequences in order, and
        a partition's first batch under an id/epoch goes alone (:meth:`unconfirmed`: a
        broker with no state accepts any first sequence, KAFKA-15591). So an overtaken
        batch was written and its acknowledgement lost; a retry answered
        OUT_OF_ORDER_SEQUENCE_NUMBER came after the broker's duplicate window, and must not
        be sent again.

        Args:
            batch: a stamped batch under the current id/epoch, not acknowledged.

        Returns:
            True if the partition's last acknowledged sequence is at or after the batch's
            base sequence (compared modulo 2**31, as sequences wrap).
        """
        seq = self.partition(batch.topic, batch.partition)
        if seq.last_acked < 0 or batch.base_sequence < 0:
            return False
        return (seq.last_acked - batch.base_sequence) % (_INT32_MAX + 1) < (_INT32_MAX + 1) // 2

    def unconfirmed(self, topic: str, partition: int) -> bool:
        """Whether the broker has acknowledged nothing of the partition under this id/epoch.

        Until it has, a broker may hold no state for the producer and would accept a later
        batch ahead of an earlier one that failed; the producer sends one batch at a time
        to such a partition (see :meth:`is_overtaken`).

        Args:
            topic: the topic.
            partition: the partition.

        Returns:
            True if no batch was acknowledged yet under the current id/epoch.
        """
        return self.partition(topic, partition).last_acked < 0

    def in_flight_count(self, topic: str, partition: int) -> int:
        """Batches of the partition on the wire.

        Args:
            topic: the topic.
            partition: the partition.

        Returns:
            The count.
        """
        seq = self._partitions.get((topic, partition))
        return 0 if seq is None else len(seq.in_flight)
