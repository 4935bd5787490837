"""The record accumulator: per-partition batches waiting to be sent.

Theory of operation
-------------------
A pure machine between the user's ``send`` and the sender (Java ``RecordAccumulator``).

Appending. Each partition has a deque of :class:`ProducerBatch`; only the last one may be
*open*. A record goes into the open batch's :class:`RecordBatchBuilder` (magic 2, the
configured codec) while ``has_room_for`` says it fits in ``batch.size`` (capped at
``max.request.size``); otherwise the open batch is closed and a new one opened. A record
larger than ``batch.size`` gets a batch of its own. :meth:`Accumulator.append` returns a
:class:`RecordId`; every record id later gets exactly one outcome event,
:class:`RecordsAcknowledged` or :class:`RecordsFailed`.

Buffer memory (``buffer.memory``). The accumulator counts the encoded (uncompressed) bytes of
every batch from its first record until its outcome -- queued, in flight, or waiting to be
retried. An append that would go past the limit is *refused*, never dropped:
:class:`BufferFullError` is raised, nothing changes, and all partitions become sendable so
memory frees up fast (Java: the pool is ``exhausted``). When memory is next released,
:class:`BufferSpaceFreed` is emitted; the adapter wakes every waiting append, retries it, and
turns a wait that outlives ``max.block.ms`` into ``KafkaTimeoutError``. To keep the user's
order, the adapter queues later appends behind a waiting one. A record that could never fit
(its batch estimate exceeds ``max.request.size`` or ``buffer.memory``) raises
:class:`~kafkastate.errors.MessageTooLargeError` at once (Java ``RecordTooLargeException``).

Readiness (:meth:`Accumulator.ready`). A partition with a known leader is sendable when its
first batch is full (or not the last), its linger expired (``created + linger <= now``), a
flush is in progress, memory is exhausted, or the accumulator is closing -- unless that batch
is a retry still in its backoff. The result names the nodes to drain, the exact time of the
next linger or backoff deadline, and the topics that have batches but no leader (refresh
metadata).

Draining (:meth:`Accumulator.drain`) takes at most one batch per partition led by the node,
starting at a partition that rotates per node so no partition starves, until the next batch
would push the request past ``max.request.size``. Drained batches are *in flight*: closed
for appends, still counted in buffer memory, and the sender's until it calls
:meth:`~Accumulator.complete`, :meth:`~Accumulator.fail`, :meth:`~Accumulator.reenqueue` or
:meth:`~Accumulator.split`.

Ordering. Per partition, the deque is kept sorted by each batch's first record id (ids grow
with every append). A retried or split batch is inserted at that place -- the front, ahead
of every batch appended after it -- so with one batch in flight per partition (the sender's
``muted`` argument) records are acknowledged in append order.

Retries back off ``retry.backoff.ms`` doubled per attempt up to ``retry.backoff.max.ms``,
with +-20 % jitter from the seeded ``rng`` (KIP-580). Batches that are not in flight and
older than ``delivery.timeout.ms`` are failed by :meth:`~Accumulator.expire` (KIP-91).

Flushes (:meth:`~Accumulator.flush`) make everything sendable and complete -- with
:class:`FlushCompleted` -- once every record appended before the flush has its outcome.

Pure: no IO, no clock (``now`` is an argument), randomness only from the ``rng`` handed in;
partitions are kept in dicts and deques, never iterated from a set.
"""

from __future__ import annotations

import bisect
import enum
import operator
import random
from collections import deque
from collections.abc import Container, Sequence
from typing import Any, Final, NewType

import attrs

from kafkastate.core.metadata import ClusterMetadata, NodeId
from kafkastate.core.metrics import ProducerCounters
from kafkastate.core.producer.partitioner import Partitioner, sticky_state_class
from kafkastate.core.protocol import records as _records
from kafkastate.core.protocol.compression import Compression, compress
from kafkastate.core.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    estimate_record_size_upper_bound,
)
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    BufferFullError,
    IllegalStateError,
    KafkaArgumentTypeError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    LocalProtocolError,
    MessageTooLargeError,
)

__all__ = [
    "BATCH_STATES",
    "Accumulator",
    "AccumulatorConfig",
    "AccumulatorEvent",
    "BatchState",
    "BufferFullError",
    "BufferSpaceFreed",
    "FlushCompleted",
    "FlushId",
    "ProducerBatch",
    "ReadyResult",
    "RecordId",
    "RecordsAcknowledged",
    "RecordsAdmitted",
    "RecordsFailed",
]

RecordId = NewType("RecordId", int)
"""Names one appended record in later events; increases with every append."""
FlushId = NewType("FlushId", int)
"""Names one :meth:`Accumulator.flush` in its :class:`FlushCompleted`."""

Buffer = bytes | bytearray | memoryview
HeadersIn = Sequence[tuple[str, Buffer | None]]
_TP = tuple[str, int]
_Rec = tuple[int, Buffer | None, Buffer | None, tuple[tuple[str, Buffer | None], ...]]

_JITTER: Final = 0.2  # KIP-580: +-20 %
_timestamp_of: Final = operator.itemgetter(0)  # of a _Rec, in C: once per acknowledged record
_MAX_TIMESTAMP: Final = (1 << 63) - 1


# ---------------------------------------------------------------------------------- config


def _non_negative(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise KafkaConfigurationError(f"{attr.name} must be a number >= 0, got {value!r}")


def _positive(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise KafkaConfigurationError(f"{attr.name} must be a number > 0, got {value!r}")


def _optional_non_negative(inst: object, attr: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None:
        _non_negative(inst, attr, value)


def _int_at_least(minimum: int) -> Any:
    def check(_inst: object, attr: attrs.Attribute[Any], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise KafkaConfigurationError(f"{attr.name} must be an int >= {minimum}, got {value!r}")

    return check


def _to_compression(value: Any) -> Compression:
    try:
        return Compression(value)
    except ValueError:
        raise KafkaConfigurationError(f"unknown compression {value!r}") from None


def max_block_timeout(max_block: float, waited_for: str, cause: KafkaError) -> KafkaTimeoutError:
    """The error of a send that waited ``max_block`` seconds (``max.block.ms``) for
    ``waited_for`` (buffer memory, topic metadata) because of ``cause``: one wording on
    every runtime."""
    error = KafkaTimeoutError(
        f"send waited max_block_ms ({max_block * 1000:g} ms) for {waited_for}: {cause}"
    )
    error.__cause__ = cause
    return error


RECORD_OVERHEAD: Final = 480
"""Bytes of ``buffer.memory`` each record in the buffer counts on top of its encoded bytes:
an estimate of the Python objects a waiting record holds (measured for a 100 B record on
CPython 3.11: its tuple, id, timestamp and value objects and the encoded pieces in the
accumulator, about 290 B; the adapter's future and its entry in the map of pending sends,
about 200 B). Without it a full buffer of small records held several times
``buffer.memory`` in real memory."""

MIN_BUFFER_MEMORY: Final = (
    RECORD_OVERHEAD + RECORD_BATCH_OVERHEAD + estimate_record_size_upper_bound(None, None)
)
"""The smallest ``buffer.memory`` a producer can work with (561 bytes): the smallest record
(no key, no value, no headers) in a batch of its own, plus the :data:`RECORD_OVERHEAD` it
counts. With less, every record would be refused as larger than the buffer."""


@attrs.frozen(kw_only=True)
class AccumulatorConfig:
    """Settings of an :class:`Accumulator`. Durations are float seconds, sizes bytes."""

    batch_size: int = attrs.field(default=16384, validator=_int_at_least(0))
    """Target size of one batch (``batch.size``); 0 puts every record in its own batch."""
    linger: float = attrs.field(default=0.005, validator=_non_negative)
    """How long a batch waits for more records (``linger.ms``). The default is 5 ms, the
    Java client's since Kafka 4.0 (KIP-1030; it was 0 before)."""
    buffer_memory: int = attrs.field(
        default=32 * 1024 * 1024, validator=_int_at_least(MIN_BUFFER_MEMORY)
    )
    """Bytes of records held before appends are refused (``buffer.memory``): each record
    counts its encoded bytes (and its batch's header) plus :data:`RECORD_OVERHEAD`, an
    estimate of the Python objects it holds while it waits, so that real memory stays
    near this figure however small the records are. At least :data:`MIN_BUFFER_MEMORY`;
    nothing is asked of ``batch_size`` against it (as Java: a record that does not fit
    the buffer is refused when it is sent)."""
    max_request_size: int = attrs.field(default=1024 * 1024, validator=_int_at_least(1))
    """Largest record batch and Produce request (``max.request.size``)."""
    compression: Compression = attrs.field(default=Compression.NONE, converter=_to_compression)
    """Codec of the batches (``compression.type``)."""
    compression_level: int | None = None
    """Codec level (``compression.<codec>.level``, KIP-390); None for the codec's default."""
    delivery_timeout: float = attrs.field(default=120.0, validator=_positive)
    """Upper bound on the time from append to outcome (``delivery.timeout.ms``, KIP-91)."""
    request_timeout: float = attrs.field(default=30.0, validator=_positive)
    """``request.timeout.ms``; here only for the rule ``delivery.timeout.ms >= linger.ms +
    request.timeout.ms`` (Java refuses such a configuration)."""
    retry_backoff: float = attrs.field(default=0.1, validator=_non_negative)
    """First backoff before a batch is retried (``retry.backoff.ms``)."""
    retry_backoff_max: float = attrs.field(default=1.0, validator=_non_negative)
    """Backoff ceiling as attempts double it (``retry.backoff.max.ms``, KIP-580)."""
    max_block: float | None = attrs.field(default=None, validator=_optional_non_negative)
    """How long an append may wait for ``buffer.memory`` (``max.block.ms``), or None.

    None: an append that does not fit is refused with :class:`BufferFullError` and the
    caller retries. A number: it waits in the accumulator's FIFO instead (see
    :meth:`Accumulator.append`) and fails with ``KafkaTimeoutError`` after this long."""

    def __attrs_post_init__(self) -> None:
        if self.delivery_timeout < self.linger + self.request_timeout:
            raise KafkaConfigurationError(
                f"delivery_timeout ({self.delivery_timeout:g} s, delivery.timeout.ms) must be "
                f">= linger ({self.linger:g} s, linger.ms) + request_timeout "
                f"({self.request_timeout:g} s, request.timeout.ms)"
            )
        if self.compression_level is not None:
            if isinstance(self.compression_level, bool) or not isinstance(
                self.compression_level, int
            ):
                raise KafkaConfigurationError(
                    f"compression_level must be an int or None, got {self.compression_level!r}"
                )
            if self.compression is not Compression.NONE:
                compress(self.compression, b"x", level=self.compression_level)  # raises if bad


# ---------------------------------------------------------------------------------- events


@attrs.frozen(kw_only=True)
class RecordsAcknowledged:
    """The broker wrote a batch: its records are durable (as far as ``acks`` asked)."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    record_ids: tuple[RecordId, ...]
    """The records, in offset order."""
    base_offset: int
    """Offset of the first record; -1 if the broker did not say (``acks=0``)."""
    timestamps: tuple[int, ...]
    """Each record's timestamp as the log keeps it: the broker's log-append time on a
    LOG_APPEND_TIME topic, else the record's own create time."""
    log_append_time: int
    """The broker's append time in ms, or -1 on a CREATE_TIME topic."""
    log_start_offset: int = -1
    """The partition's log start offset when the broker wrote the batch (Produce v5+),
    -1 if it did not say."""

    def results(self) -> list[tuple[RecordId, int, int]]:
        """Per record: ``(record_id, offset, timestamp)``; offset -1 when unknown.

        Returns:
            One tuple per record, in offset order.
        """
        if self.base_offset < 0:
            return [(rid, -1, ts) for rid, ts in zip(self.record_ids, self.timestamps, strict=True)]
        base = self.base_offset
        return [
            (rid, base + i, ts)
            for i, (rid, ts) in enumerate(zip(self.record_ids, self.timestamps, strict=True))
        ]


@attrs.frozen(kw_only=True)
class RecordsFailed:
    """A batch's records will not be written."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    record_ids: tuple[RecordId, ...]
    """The records, in append order."""
    error: KafkaError
    """Why (delivery timeout, a non-retriable broker error, an abort...)."""


@attrs.frozen(kw_only=True)
class RecordsAdmitted:
    """Records that waited for ``buffer.memory`` or for their topic's metadata
    (:meth:`Accumulator.is_waiting`) were appended, in the order they were sent; their
    outcome follows as for any record."""

    topic: str
    """The topic."""
    partition: int
    """The partition they were appended to (a keyless record's sticky partition is
    chosen when it is admitted)."""
    record_ids: tuple[RecordId, ...]
    """The records: one, or the records of one ``append_batch``."""


@attrs.frozen(kw_only=True)
class BufferSpaceFreed:
    """Memory was released after an append had been refused with BufferFullError."""

    available: int
    """Bytes of ``buffer.memory`` free now."""


@attrs.frozen(kw_only=True)
class FlushCompleted:
    """Every record appended before the flush has its outcome."""

    flush_id: FlushId
    """The id :meth:`Accumulator.flush` returned."""


AccumulatorEvent = (
    RecordsAcknowledged | RecordsFailed | RecordsAdmitted | BufferSpaceFreed | FlushCompleted
)


@attrs.frozen(kw_only=True)
class ReadyResult:
    """What :meth:`Accumulator.ready` found."""

    nodes: tuple[NodeId, ...]
    """Leaders with a sendable batch, sorted: drain these now."""
    next_ready_at: float | None
    """The earliest linger or retry-backoff deadline of a partition that is not sendable
    yet (absolute, the driver's clock), or None."""
    unknown_leader_topics: tuple[str, ...]
    """Topics with batches for a partition that has no known leader: refresh metadata."""


# --------------------------------------------------------------------------------- batches


class BatchState(enum.Enum):
    """Where a :class:`ProducerBatch` is."""

    QUEUED = "queued"
    """In its partition's deque, waiting to be drained (open for appends if last)."""
    IN_FLIGHT = "in_flight"
    """Drained: the sender owns it until it is completed, failed, retried or split."""
    DONE = "done"
    """Acknowledged, failed, expired or split: it changes no more."""

    # Members are singletons compared by identity: hash them by identity too, in C (Enum's
    # own __hash__ is Python code), so the per-batch table checks stay cheap.
    __hash__ = object.__hash__


_B = BatchState
# STYLE §6: the moves, and each state's commands; every command has one target (_TARGETS).
# drain takes a queued batch; reenqueue puts an in-flight one back; complete and split end
# an in-flight batch; fail ends either; expire and abort_undrained end a queued one.
BATCH_STATES: Final = register(
    StateTable(
        machine="ProducerBatch",
        states=BatchState,
        initial=_B.QUEUED,
        transitions={
            _B.QUEUED: {_B.IN_FLIGHT, _B.DONE},
            _B.IN_FLIGHT: {_B.QUEUED, _B.DONE},
            _B.DONE: set(),
        },
        commands={
            _B.QUEUED: {"drain", "fail", "expire", "abort_undrained"},
            _B.IN_FLIGHT: {"reenqueue", "complete", "split", "fail"},
            _B.DONE: set(),
        },
    )
)
"""A :class:`ProducerBatch`'s states and the :class:`Accumulator` commands each allows."""

_COMMANDS: Final = BATCH_STATES.commands
_TARGETS: Final[dict[str, BatchState]] = {
    "drain": _B.IN_FLIGHT,
    "reenqueue": _B.QUEUED,
    "complete": _B.DONE,
    "split": _B.DONE,
    "fail": _B.DONE,
    "expire": _B.DONE,
    "abort_undrained": _B.DONE,
}


class ProducerBatch:
    """One record batch for one partition, from its first record to its outcome.

    Read its attributes; change it only through the :class:`Accumulator` and
    :meth:`set_producer_state`.

    Attributes:
        topic: the topic.
        partition: the partition.
        created: when its first record was appended (driver's clock); a split batch keeps
            the original's.
        attempts: how many times it was re-enqueued for a retry.
        retry_at: while waiting to be retried, when its backoff ends; else None.
        drained_at: when it was last drained, or None.
        done_at: when it got its outcome, or None.
        state: a :class:`BatchState`.
        producer_id: idempotent/transactional producer id (KIP-98), -1 if none.
        producer_epoch: its epoch, -1 if none.
        base_sequence: sequence number of the first record, -1 if none.
        is_transactional: whether the batch is part of a transaction.
    """

    __slots__ = (
        "_accepting",
        "_builder",
        "_built",
        "_compression",
        "_ids",
        "_level",
        "_owner",
        "_records",
        "_serial",
        "_size",
        "attempts",
        "base_sequence",
        "created",
        "done_at",
        "drained_at",
        "is_transactional",
        "partition",
        "producer_epoch",
        "producer_id",
        "retry_at",
        "state",
        "topic",
    )

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        created: float,
        compression: Compression,
        compression_level: int | None,
        owner: object,
        serial: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.created = created
        self.attempts = 0
        self.retry_at: float | None = None
        self.drained_at: float | None = None
        self.done_at: float | None = None
        self.state = BatchState.QUEUED
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.is_transactional = False
        self._compression = compression
        self._level = compression_level
        self._builder: RecordBatchBuilder | None = RecordBatchBuilder(
            compression=compression, compression_level=compression_level
        )
        self._built: bytes | None = None
        self._ids: list[RecordId] = []
        self._records: list[_Rec] = []
        self._accepting = True
        self._size = 0
        self._owner = owner
        self._serial = serial

    # --------------------------------------------------------------------- queries

    @property
    def record_ids(self) -> tuple[RecordId, ...]:
        """The records' ids; the record at index ``i`` has offset delta ``i``."""
        return tuple(self._ids)

    @property
    def record_count(self) -> int:
        """Number of records."""
        return len(self._ids)

    @property
    def is_open(self) -> bool:
        """Whether records may still be appended (only a partition's last batch can be)."""
        return self._accepting

    @property
    def size_in_bytes(self) -> int:
        """The built size if built, else the uncompressed estimate (an upper bound)."""
        return len(self._built) if self._built is not None else self._size

    @property
    def reserved_bytes(self) -> int:
        """Bytes of ``buffer.memory`` this batch holds until its outcome: its encoded
        bytes plus :data:`RECORD_OVERHEAD` per record."""
        return self._size + RECORD_OVERHEAD * len(self._ids)

    # -------------------------------------------------------------------- commands

    def set_producer_state(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        *,
        is_transactional: bool = False,
    ) -> None:
        """Stamp the idempotence/transaction fields before the batch is built (KIP-98).

        Changing them on a built batch (a retry after an epoch bump) makes the next
        :meth:`build` encode it again.

        Args:
            producer_id: the producer id.
            producer_epoch: its epoch.
            base_sequence: the first record's sequence number.
            is_transactional: set the transactional attribute.

        Raises:
            LocalProtocolError: the batch is done.
        """
        if self.state is BatchState.DONE:
            raise LocalProtocolError(f"set_producer_state on a done batch {self!r}")
        old = (self.producer_id, self.producer_epoch, self.base_sequence, self.is_transactional)
        new = (producer_id, producer_epoch, base_sequence, is_transactional)
        if new != old:
            self.producer_id, self.producer_epoch, self.base_sequence, self.is_transactional = new
            self._built = None

    def build(self) -> bytes:
        """Encode the batch (closing it for appends); cached until the producer state changes.

        Returns:
            The magic 2 record batch for a Produce request's ``records`` field.
        """
        if self._built is None:
            self._accepting = False
            builder = self._builder
            if builder is not None:
                # The producer fields are header-only: the records encoded while they were
                # appended stay valid (no second encoding of an idempotent batch).
                builder.stamp(
                    self.producer_id, self.producer_epoch, self.base_sequence, self.is_transactional
                )
            else:
                # Built before (a retry whose producer state changed): encode it anew
                # from its records.
                builder = RecordBatchBuilder(
                    compression=self._compression,
                    compression_level=self._level,
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    base_sequence=self.base_sequence,
                    is_transactional=self.is_transactional,
                )
                for ts, key, value, headers in self._records:
                    builder.append(ts, key, value, headers)
            self._built = builder.build()
            self._builder = None  # its encoded parts are no longer needed
        return self._built

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} records={len(self._ids)} "
            f"bytes={self._size} state={self.state.name} attempts={self.attempts}>"
        )

    # ------------------------------------------------------------------- internals

    def _has_room(self, rec: _Rec, limit: int) -> bool:
        builder = self._builder
        return builder is not None and builder.has_room_for(*rec, limit=limit)

    def _append_all(
        self, first: int, records: Sequence[tuple[int, Buffer | None, Buffer | None, HeadersIn]]
    ) -> None:
        """Append every record of a batch of its own (ids from ``first``), with no size
        limit: :meth:`_append`'s loop with the checks of one record inlined (a batch of
        thousands of records is the bulk writers' hot path).

        Raises:
            KafkaConfigurationError: a bad argument, naming the record; the batch is then
                unusable (the caller drops it).
        """
        _check_append_arguments(self.topic, self.partition, 0)
        builder = self._builder
        if builder is None:  # pragma: no cover - a new batch has its builder
            raise LocalProtocolError(f"append to a closed batch {self!r}")
        # The compiled loop takes the valid records of the common shapes; this loop checks
        # and appends the others (and the first, which sets the base timestamp).
        rows = records if type(records) is list else list(records)
        i, n = 0, len(rows)
        while i < n:
            try:
                i = builder.append_run(rows, i)
            except KafkaConfigurationError as exc:
                raise KafkaConfigurationError(f"invalid record of the batch: {exc}") from None
            if i == n:
                break
            timestamp_ms, key, value, headers = rows[i]
            if type(timestamp_ms) is not int or not 0 <= timestamp_ms <= _MAX_TIMESTAMP:
                _check_append_arguments(self.topic, self.partition, timestamp_ms)
            _check_bytes("key", key)
            _check_bytes("value", value)
            try:
                builder.append(timestamp_ms, key, value, tuple(headers) if headers else ())
            except (TypeError, AttributeError, ValueError) as exc:
                raise KafkaConfigurationError(f"invalid record {i} of the batch: {exc}") from None
            i += 1
        self._ids.extend(range(first, first + n))  # type: ignore[arg-type] # RecordIds
        self._records.extend(rows)  # type: ignore[arg-type] # headers as given, not tuples
        self._size = builder.size_in_bytes()

    def _append(self, rid: RecordId, rec: _Rec, limit: int) -> int:
        """Append one record; return how much the batch grew."""
        builder = self._builder
        if builder is None:  # pragma: no cover - only open batches are appended to
            raise LocalProtocolError(f"append to a closed batch {self!r}")
        builder.append(*rec)
        size = builder.size_in_bytes()
        grown = size - self._size
        self._size = size
        self._ids.append(rid)
        self._records.append(rec)
        if size >= limit:
            self._accepting = False  # Java MemoryRecordsBuilder.isFull
        return grown


# ------------------------------------------------------------------------------ accumulator


_SMALL_VALUE: Final = 8000


def _small_value_upper_bound(n: int) -> int:
    """``estimate_record_size_upper_bound(None, value, ())`` for ``len(value) = n < 8000``:
    1 attributes + 10 timestamp delta + 5 offset delta + 1 null key + the value's length
    varint (1 byte below 64, else 2) and bytes + 1 header count, then the length prefix."""
    body = 19 + n if n < 64 else 20 + n
    return body + (1 if body < 64 else 2)


def _check_append_arguments(topic: object, partition: object, timestamp_ms: object) -> None:
    """The slow path of :meth:`Accumulator.append`'s checks: name what is wrong."""
    if not isinstance(topic, str) or not topic:
        raise KafkaConfigurationError(f"topic must be a non-empty str, got {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise KafkaConfigurationError(f"partition must be an int >= 0, got {partition!r}")
    if (
        isinstance(timestamp_ms, bool)
        or not isinstance(timestamp_ms, int)
        or not 0 <= timestamp_ms <= _MAX_TIMESTAMP
    ):
        raise KafkaConfigurationError(
            f"timestamp_ms must be an int in 0..2**63-1, got {timestamp_ms!r}"
        )


def _too_large(alone: int, cfg: AccumulatorConfig, topic: str, partition: int) -> KafkaError:
    """The error of a record needing ``alone`` bytes in a batch of its own, more than a
    request or the whole buffer can hold."""
    if alone > cfg.max_request_size:
        limit, name = cfg.max_request_size, "max_request_size (max.request.size)"
    else:  # it counts RECORD_OVERHEAD on top
        limit = cfg.buffer_memory - RECORD_OVERHEAD
        name = f"buffer_memory (buffer.memory) less the record overhead ({RECORD_OVERHEAD})"
    return MessageTooLargeError(
        f"the record is up to {alone} bytes when serialized, larger than {name} = {limit}",
        topic=topic,
        partition=partition,
    )


def _check_bytes(what: str, data: object) -> None:
    if data is not None and not isinstance(data, bytes | bytearray | memoryview):
        raise KafkaArgumentTypeError(
            f"record {what} must be bytes, bytearray, memoryview or None, not {type(data).__name__}"
        )


class _Waiting:
    """A send refused for ``buffer.memory``, waiting in the FIFO: a record, or the batch of
    an ``append_batch`` (built already, with its reserved ids)."""

    __slots__ = (
        "alone",
        "batch",
        "count",
        "deadline",
        "partition",
        "rec",
        "rid",
        "since",
        "sticky",
        "topic",
        "upper",
    )

    def __init__(  # noqa: PLR0917 -- internal record
        self,
        rid: RecordId,
        count: int,
        topic: str,
        partition: int,
        sticky: bool,
        rec: _Rec | None,
        upper: int,
        alone: int,
        batch: ProducerBatch | None,
        deadline: float,
        since: float,
    ) -> None:
        self.rid = rid
        self.count = count
        self.topic = topic
        self.partition = partition  # the send's choice; a sticky one is chosen anew
        self.sticky = sticky
        self.rec = rec
        self.upper = upper  # bytes if it joins an open batch
        self.alone = alone  # bytes in a batch of its own (a batch's whole size)
        self.batch = batch
        self.deadline = deadline
        self.since = since  # when it began to wait (bufferpool-wait-time)


class _Held:
    """A send held until its topic -- or its explicit partition -- is in the metadata: one
    record, or the records of one ``append_batch``, with the ids reserved for them and,
    when it fitted, the ``buffer.memory`` it will need."""

    __slots__ = ("batch", "cause", "deadline", "explicit", "records", "reserved", "rid", "topic")

    def __init__(  # noqa: PLR0917 -- internal record
        self,
        rid: RecordId,
        topic: str,
        explicit: int | None,
        records: Sequence[_Rec],
        batch: bool,
        deadline: float,
        cause: KafkaError,
        reserved: int,
    ) -> None:
        self.rid = rid
        self.topic = topic
        self.explicit = explicit
        self.records = records
        self.batch = batch
        self.deadline = deadline
        self.cause = cause  # why it could not be routed the last time it was tried
        self.reserved = reserved  # bytes of buffer.memory counted for it (0: none fitted)


class Accumulator:
    """Per-partition record batches, buffer memory, readiness, draining and outcomes.

    Args:
        config: the settings.
        rng: seeded randomness for retry-backoff jitter.
        partitioner: told about bytes appended on the sticky path (``append(sticky=True)``)
            so it can switch partitions (KIP-794); None if nothing is sticky-partitioned.
        counters: where to count (the producer's, windowed as its client is configured);
            None for a new set with Java's windows.
    """

    # Slots: the compiled hot paths (records._c_lane_sticky / _c_lane_keyed) read and write
    # the accumulator's counters where the interpreter keeps them (__dict__ stays for tests
    # that wrap a method).
    __slots__ = (
        "__dict__",
        "_batch_limit",
        "_blocked",
        "_buffer_memory",
        "_closed",
        "_drain_start",
        "_events",
        "_flushes",
        "_held",
        "_held_topics",
        "_in_flight",
        "_lanes",
        "_last_deadline",
        "_max_alone",
        "_next_batch",
        "_next_flush",
        "_next_record",
        "_opened",
        "_outstanding",
        "_partitioner",
        "_queues",
        "_readiness_changed",
        "_rng",
        "_routed_in",
        "_settled",
        "_used",
        "_used_at_admission",
        "_waiting",
        "config",
        "counters",
    )

    def __init__(
        self,
        config: AccumulatorConfig,
        *,
        rng: random.Random,
        partitioner: Partitioner | None = None,
        counters: ProducerCounters | None = None,
    ) -> None:
        self.config = config
        self._rng = rng
        self._partitioner = partitioner
        # A batch may never outgrow a request; one record larger than batch.size gets its own.
        self._batch_limit = min(config.batch_size, config.max_request_size)
        # a record on its own needs its batch and its RECORD_OVERHEAD in buffer.memory
        self._max_alone = min(config.max_request_size, config.buffer_memory - RECORD_OVERHEAD)
        self._queues: dict[_TP, deque[ProducerBatch]] = {}
        self._in_flight: dict[int, ProducerBatch] = {}
        self._used = 0
        # What the hot paths compare `_used + upper` with: room for the record's
        # RECORD_OVERHEAD, which the caller of a compiled hot path adds after it appended.
        self._buffer_memory = config.buffer_memory - RECORD_OVERHEAD
        self._blocked = False
        self._closed = False
        self._next_record = 0
        self._next_batch = 0
        self._readiness_changed = False
        self._next_flush = 0
        self._outstanding = 0
        self._flushes: dict[FlushId, list[int]] = {}  # id -> [mark, records still pending]
        self._drain_start: dict[NodeId, int] = {}
        self._events: deque[AccumulatorEvent] = deque()
        # topic -> the sticky partition's open batch, its deque, the partitioner's state
        # for the topic and the switch threshold: what append_sticky needs (see there).
        self._lanes: dict[str, tuple[ProducerBatch, deque[ProducerBatch], Any, int]] = {}
        self._opened: tuple[ProducerBatch, deque[ProducerBatch]] | None = None  # by append
        # Sends waiting for buffer.memory (config.max_block set), by first record id, in
        # send order: a FIFO that nothing overtakes (Java BufferPool's waiters).
        self._waiting: dict[int, _Waiting] = {}
        self._last_deadline = float("-inf")
        # Sends held for their topic's metadata (config.max_block set), by first record id,
        # in send order; a FIFO per topic (other topics' sends go on).
        self._held: dict[int, _Held] = {}
        self._held_topics: dict[str, int] = {}  # topic -> how many of its sends are held
        self._routed_in: ClusterMetadata | None = None  # metadata of the last routing round
        self._used_at_admission = 0  # memory in use after the last admission round
        # topic -> when a send to it last got its outcome, since take_settled
        self._settled: dict[str, float] = {}
        self.counters: Final = ProducerCounters() if counters is None else counters
        """Acknowledged, retried and failed records, buffer waits (:mod:`..metrics`); the
        producer machine counts what it sends here too."""

    # ----------------------------------------------------------------------- queries

    @property
    def buffer_used(self) -> int:
        """Bytes of ``buffer.memory`` held by batches without an outcome (their encoded
        bytes plus :data:`RECORD_OVERHEAD` per record), and reserved for the sends held
        for their topic's metadata (:meth:`hold`)."""
        return self._used

    @property
    def buffer_available(self) -> int:
        """Bytes of ``buffer.memory`` free (0 when a split overshot the limit)."""
        return max(0, self.config.buffer_memory - self._used)

    @property
    def outstanding_records(self) -> int:
        """Records appended that have no outcome yet."""
        return self._outstanding

    @property
    def flush_in_progress(self) -> bool:
        """Whether a flush waits for records: everything is sendable meanwhile."""
        return bool(self._flushes)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def has_undrained(self) -> bool:
        """Whether any batch waits in a partition's deque, or any send for buffer memory.

        Returns:
            True if something is left to drain.
        """
        return bool(self._waiting) or bool(self._held) or any(self._queues.values())

    @property
    def waiting_sends(self) -> int:
        """How many sends wait for ``buffer.memory`` or for metadata (a record, or one
        ``append_batch``)."""
        return len(self._waiting) + len(self._held)

    def holds(self, topic: str) -> bool:
        """Whether sends to ``topic`` are held for metadata (a later one must queue behind).

        Args:
            topic: the topic.

        Returns:
            True if :meth:`hold` holds a send to it.
        """
        return topic in self._held_topics

    def opens_batch(
        self,
        topic: str,
        partition: int,
        record: tuple[int, Buffer | None, Buffer | None, HeadersIn],
    ) -> bool:
        """Whether appending ``record`` to the partition now would open a new batch (its
        last batch is closed or has no room), for KIP-480's ``on_new_batch`` hook.

        Args:
            topic: the topic.
            partition: the partition.
            record: ``(timestamp_ms, key, value, headers)``.
        """
        dq = self._queues.get((topic, partition))
        last = dq[-1] if dq and dq[-1]._accepting else None
        if last is None:
            return True
        timestamp_ms, key, value, headers = record
        rec: _Rec = (timestamp_ms, key, value, tuple(headers) if headers else ())
        return not last._has_room(rec, self._batch_limit)

    def is_waiting(self, record_id: RecordId) -> bool:
        """Whether the send that returned ``record_id`` (the first id of an
        ``append_batch``) still waits for ``buffer.memory``.

        Args:
            record_id: the id :meth:`append` returned.

        Returns:
            True until :class:`RecordsAdmitted` or :class:`RecordsFailed` names it (or it
            was withdrawn).
        """
        return record_id in self._waiting or record_id in self._held

    def next_wait_deadline(self) -> float | None:
        """When the first waiting send reaches ``max_block`` (:meth:`admit_waiting` then
        fails it).

        Returns:
            An absolute time on the driver's clock, or None if no send waits.
        """
        first = None
        for waiting in self._waiting.values():
            first = waiting.deadline  # the head: deadlines follow send order
            break
        for held in self._held.values():
            return held.deadline if first is None else min(first, held.deadline)
        return first

    def admission_pending(self) -> bool:
        """Whether sends wait and memory was freed since :meth:`admit_waiting` last ran.

        Returns:
            True if calling :meth:`admit_waiting` again may admit something.
        """
        return bool(self._waiting) and self._used < self._used_at_admission

    def has_incomplete(self) -> bool:
        """Whether any record still waits for its outcome.

        Returns:
            True if some record has no outcome yet.
        """
        return self._outstanding > 0

    def queued_batches(self, topic: str, partition: int) -> list[ProducerBatch]:
        """The partition's queued batches, first to be drained first.

        Args:
            topic: the topic.
            partition: the partition.

        Returns:
            A new list.
        """
        return list(self._queues.get((topic, partition), ()))

    def busy_topics(self) -> set[str]:
        """Topics with records pending: queued or in-flight batches, sends held for
        metadata or waiting for ``buffer.memory``. (A set: for membership tests.)

        Returns:
            A new set.
        """
        busy = {topic for (topic, _), dq in self._queues.items() if dq}
        busy.update(batch.topic for batch in self._in_flight.values())
        busy.update(self._held_topics)
        busy.update(entry.topic for entry in self._waiting.values())
        return busy

    def take_settled(self) -> dict[str, float]:
        """The topics whose sends got an outcome (acknowledged or failed) since the last
        call, with the time of the last one; cleared.

        Returns:
            ``topic -> time`` on the driver's clock.
        """
        settled, self._settled = self._settled, {}
        return settled

    def forget(self, topics: Sequence[str]) -> None:
        """Drop what is kept per partition of ``topics`` (their empty queues and hot-path
        lanes): the producer no longer sends to them. A topic with records pending keeps
        everything.

        Args:
            topics: topic names.
        """
        gone = set(topics) - self.busy_topics()
        if not gone:
            return
        for topic in gone:
            self._lanes.pop(topic, None)
        self._queues = {tp: dq for tp, dq in self._queues.items() if tp[0] not in gone}
        if self._opened is not None and self._opened[0].topic in gone:
            self._opened = None

    def in_flight_batches(self) -> list[ProducerBatch]:
        """Batches drained and not yet completed, failed, retried or split, in drain order.

        Returns:
            A new list (the sender checks their ``created + delivery_timeout`` itself).
        """
        return list(self._in_flight.values())

    def next_expiry_at(self) -> float | None:
        """When the next queued batch reaches ``delivery.timeout.ms``.

        Returns:
            An absolute time on the driver's clock, or None if nothing is queued.
        """
        timeout = self.config.delivery_timeout
        fronts = [dq[0].created + timeout for dq in self._queues.values() if dq]
        return min(fronts) if fronts else None

    # ---------------------------------------------------------------------- commands

    def append(
        self,
        topic: str,
        partition: int,
        *,
        timestamp_ms: int,
        key: Buffer | None,
        value: Buffer | None,
        headers: HeadersIn = (),
        now: float,
        sticky: bool = False,
        reserved: RecordId | None = None,
        block: bool = True,
        prepaid: int = 0,
    ) -> RecordId:
        """Add one record to its partition's open batch (opening one if needed).

        Args:
            topic: the topic.
            partition: the partition (chosen by the :class:`Partitioner`).
            timestamp_ms: create time, milliseconds since the epoch (>= 0).
            key: serialized key or None. Bytes-like values are referenced, not copied: do
                not mutate them until the record's outcome.
            value: serialized value or None (a tombstone).
            headers: ``(key, value)`` pairs.
            now: the driver's clock.
            sticky: the partition came from the partitioner's sticky choice (no key, no
                explicit partition, no custom partitioner); the appended bytes are reported
                to the partitioner.
            reserved: the id the record got when it was held for metadata (:meth:`hold`);
                None gives it a new one.
            block: False for a caller that cannot wait (a fire-and-forget send): a record
                that would wait for buffer memory is refused with :class:`BufferFullError`
                even when ``config.max_block`` is set.
            prepaid: bytes of ``buffer.memory`` the record had reserved while it was held
                (released just before): within them it is placed at once, ahead of the
                sends that wait for memory, since it held that memory before them.

        Buffer memory: a record that does not fit now, or that comes while other sends
        wait (nothing overtakes them), is refused with :class:`BufferFullError` -- unless
        ``config.max_block`` is set: then it waits in a FIFO and its id is returned at once
        (:meth:`is_waiting` is True). :meth:`admit_waiting` appends waiting sends in order
        as memory frees (:class:`RecordsAdmitted`), or fails them with ``KafkaTimeoutError``
        once ``max_block`` has passed (:class:`RecordsFailed`).

        Returns:
            The record's id, named again by exactly one :class:`RecordsAcknowledged` or
            :class:`RecordsFailed`.

        Raises:
            BufferFullError: no room in ``buffer.memory`` now (or sends wait for it) and
                ``config.max_block`` is None or ``block`` False; nothing was appended.
            MessageTooLargeError: the record alone exceeds ``max.request.size`` or
                ``buffer.memory``.
            KafkaConfigurationError: an argument has the wrong type or range.
            IllegalStateError: the accumulator is closed.
        """
        if self._closed:
            raise IllegalStateError("append after the accumulator was closed")
        if not (
            type(topic) is str
            and topic
            and type(partition) is int
            and partition >= 0
            and type(timestamp_ms) is int
            and 0 <= timestamp_ms <= _MAX_TIMESTAMP
        ):
            _check_append_arguments(topic, partition, timestamp_ms)
        # (the builder would take a str value and fail only when the batch is built)
        if key is not None and type(key) is not bytes:
            _check_bytes("key", key)
        if value is not None and type(value) is not bytes:
            _check_bytes("value", value)
        hdrs = tuple(headers) if headers else ()
        if key is None and not hdrs and type(value) is bytes and len(value) < _SMALL_VALUE:
            upper = _small_value_upper_bound(len(value))  # the common case, inlined
        else:
            try:
                upper = estimate_record_size_upper_bound(key, value, hdrs)
            except (TypeError, AttributeError, ValueError) as exc:
                raise KafkaConfigurationError(f"invalid record headers: {exc}") from None
        cfg = self.config
        alone = RECORD_BATCH_OVERHEAD + upper  # the batch it would need on its own
        if alone > self._max_alone:
            raise _too_large(alone, cfg, topic, partition)
        rec: _Rec = (timestamp_ms, key, value, hdrs)
        if self._waiting and alone + RECORD_OVERHEAD > prepaid:  # strict FIFO: none overtakes
            return self._refuse(
                topic,
                partition,
                sticky,
                rec,
                upper,
                alone,
                upper + RECORD_OVERHEAD,
                now,
                reserved=reserved,
                block=block,
            )
        tp = (topic, partition)
        dq = self._queues.get(tp)
        if dq is None:
            dq = self._queues[tp] = deque()
        last = dq[-1] if dq and dq[-1]._accepting else None
        if last is None:
            fits = False
        elif last._size + upper <= self._batch_limit:
            fits = True  # even the upper bound fits: skip the exact size
        else:
            fits = last._has_room(rec, self._batch_limit)
        needed = (upper if fits else alone) + RECORD_OVERHEAD
        if needed > prepaid and self._used + needed > cfg.buffer_memory:
            return self._refuse(
                topic,
                partition,
                sticky,
                rec,
                upper,
                alone,
                needed,
                now,
                reserved=reserved,
                block=block,
            )
        if reserved is not None:  # counted when it was held
            self._place(topic, partition, dq, last, fits, rec, reserved, now, sticky)
            return reserved
        rid = RecordId(self._next_record)
        self._place(topic, partition, dq, last, fits, rec, rid, now, sticky)
        self._next_record += 1
        self._outstanding += 1
        return rid

    def _place(  # noqa: PLR0917 -- internal, positional for speed
        self,
        topic: str,
        partition: int,
        dq: deque[ProducerBatch],
        last: ProducerBatch | None,
        fits: bool,
        rec: _Rec,
        rid: RecordId,
        now: float,
        sticky: bool,
    ) -> None:
        """Put a record that fits ``buffer.memory`` into ``last`` (the partition's open
        batch, if ``fits``) or a new batch. Counting ``rid`` is the caller's."""
        cfg = self.config
        self._opened = None
        if fits and last is not None:
            batch = last
            grown = batch._append(rid, rec, self._batch_limit)
        else:
            batch = ProducerBatch(
                topic=topic,
                partition=partition,
                created=now,
                compression=cfg.compression,
                compression_level=cfg.compression_level,
                owner=self,
                serial=self._next_batch,
            )
            grown = batch._append(rid, rec, self._batch_limit)
            self._next_batch += 1
            if last is not None:
                last._accepting = False
            dq.append(batch)
            self._readiness_changed = True  # a new linger deadline
            self._opened = (batch, dq)
        self._used += grown + RECORD_OVERHEAD
        if not batch._accepting:
            self._readiness_changed = True  # full: sendable now
        if sticky and self._partitioner is not None:
            self._partitioner.on_append(topic, partition, grown, batch_full=not batch._accepting)
            lane = self._partitioner.sticky_lane(topic) if batch._accepting else None
            if lane is not None and lane[0].partition == partition:
                self._lanes[topic] = (batch, dq, lane[0], lane[1])
            else:
                self._lanes.pop(topic, None)

    def _refuse(  # noqa: PLR0917 -- internal
        self,
        topic: str,
        partition: int,
        sticky: bool,
        rec: _Rec | None,
        upper: int,
        alone: int,
        needed: int,
        now: float,
        batch: ProducerBatch | None = None,
        *,
        reserved: RecordId | None = None,
        block: bool = True,
    ) -> RecordId:
        """No room in ``buffer.memory`` (or sends wait): raise BufferFullError, or with
        ``max_block`` set and ``block``, queue the send in the FIFO and return its (first)
        id (``reserved``: the id it was held under, counted already)."""
        cfg = self.config
        self._blocked = True  # Java: the pool is exhausted -> everything becomes sendable
        if cfg.max_block is None or not block:
            raise BufferFullError(
                needed=needed,
                available=cfg.buffer_memory - self._used,
                buffer_memory=cfg.buffer_memory,
            )
        count = 1 if batch is None else len(batch._ids)
        if reserved is not None:
            rid = reserved
        else:
            rid = RecordId(self._next_record) if batch is None else batch._ids[0]
            self._next_record = rid + count
            self._outstanding += count
        # Deadlines follow send order (one max_block, a clock that does not go back), so the
        # FIFO's head is always the first to expire.
        deadline = max(now + cfg.max_block, self._last_deadline)
        self._last_deadline = deadline
        self._waiting[rid] = _Waiting(
            rid, count, topic, partition, sticky, rec, upper, alone, batch, deadline, now
        )
        self._lanes.clear()  # append_sticky must not overtake it
        self._opened = None
        self._readiness_changed = True  # exhausted: every partition is sendable now
        return rid

    def append_sticky(
        self, topic: str, timestamp_ms: int, value: bytes, cluster: ClusterMetadata
    ) -> RecordId | None:
        """The hot path of a keyless record without headers whose partition the sticky
        partitioner chooses: when the topic's sticky partition is still the one of
        ``cluster`` and its open batch has room, append there in one step.

        The outcome is what ``Partitioner.partition`` followed by ``append(sticky=True)``
        would give, and it changes nothing the owner must react to (no batch opens or
        fills up: :meth:`take_readiness_changed` stays as it was). Whenever anything might
        differ (no lane yet, new metadata, the sticky partition changed, the batch was
        closed, drained, expired or could fill up, the buffer is nearly full, an unusual
        argument), nothing is appended and the caller takes the general path.

        Args:
            topic: the topic.
            timestamp_ms: create time, ms since the epoch.
            value: the serialized value (``bytes``).
            cluster: the current metadata snapshot.

        Returns:
            The record's id, or None: not appended, use the general path.
        """
        c_lane = _records._c_lane_sticky
        if c_lane is not None:  # the same steps, compiled (_speedups.c)
            rid: RecordId | None = c_lane(self, topic, timestamp_ms, value, cluster)
            if rid is not None:  # the compiled step counts the record's bytes only
                self._used += RECORD_OVERHEAD
            return rid
        lane = self._lanes.get(topic)
        if lane is None or type(value) is not bytes:  # (a tombstone: the general path)
            return None
        batch, dq, s, switch = lane
        n = len(value)
        if not (
            batch._accepting
            and s.checked_in is cluster
            and dq
            and dq[-1] is batch
            and n < _SMALL_VALUE
            and type(timestamp_ms) is int
            and 0 <= timestamp_ms <= _MAX_TIMESTAMP
        ):
            return None
        body = 19 + n if n < 64 else 20 + n  # _small_value_upper_bound, inlined
        upper = body + (1 if body < 64 else 2)
        if (
            batch._size + upper >= self._batch_limit  # it might fill the batch
            or self._used + upper > self._buffer_memory
            or s.produced + upper >= 2 * switch  # it might switch partitions
        ):
            return None  # the general path decides exactly (and may refuse, or switch)
        builder = batch._builder
        if builder is None:  # pragma: no cover - an accepting batch has its builder
            return None
        size = builder.append_value(timestamp_ms, value)
        grown = size - batch._size
        batch._size = size
        next_id = self._next_record
        batch._ids.append(next_id)  # type: ignore[arg-type] # RecordId is an int
        batch._records.append((timestamp_ms, None, value, ()))
        self._next_record = next_id + 1
        self._used += grown + RECORD_OVERHEAD
        self._outstanding += 1
        s.produced += grown  # below 2 x switch with room in the batch: no switch (on_append)
        return next_id  # type: ignore[return-value] # RecordId is an int

    def count_record_overhead(self) -> None:
        """Count :data:`RECORD_OVERHEAD` for the record a compiled hot path
        (``_speedups.lane_sticky``, ``lane_hashed``) just appended: the compiled step counts
        its bytes only, and leaves room for this (it compares with ``buffer.memory`` less
        the overhead). Callers of those functions call this after each record id they get."""
        self._used += RECORD_OVERHEAD

    def append_keyed(
        self, topic: str, partition: int, timestamp_ms: int, key: bytes, value: bytes
    ) -> RecordId | None:
        """The hot path of a keyed record without headers whose partition the default
        partitioner chose: when the partition's open batch takes it without filling up,
        append there in one step.

        The outcome is what ``append(sticky=False)`` would give, and it changes nothing the
        owner must react to (:meth:`take_readiness_changed` stays as it was). Whenever
        anything might differ (no open batch, it could fill up, the buffer is nearly full,
        sends wait for memory or metadata, an unusual argument), nothing is appended and
        the caller takes the general path.

        Args:
            topic: the topic.
            partition: the partition (the partitioner's choice for the key).
            timestamp_ms: create time, ms since the epoch.
            key: the serialized key (``bytes``).
            value: the serialized value (``bytes``).

        Returns:
            The record's id, or None: not appended, use the general path.
        """
        c_lane = _records._c_lane_keyed
        if c_lane is not None:  # the same steps, compiled (_speedups.c)
            rid: RecordId | None = c_lane(self, topic, partition, timestamp_ms, key, value)
            if rid is not None:  # the compiled step counts the record's bytes only
                self._used += RECORD_OVERHEAD
            return rid
        dq = self._queues.get((topic, partition))
        # (a tombstone, or a key or value that is not bytes: the general path)
        if not dq or type(value) is not bytes or type(key) is not bytes:
            return None
        batch = dq[-1]
        nk = len(key)
        n = len(value)
        if not (
            batch._accepting
            and nk < 64
            and n < _SMALL_VALUE
            and not self._waiting
            and not self._held
            and not self._closed
            and type(timestamp_ms) is int
            and 0 <= timestamp_ms <= _MAX_TIMESTAMP
        ):
            return None
        # estimate_record_size_upper_bound(key, value, ()), inlined: attributes, widest
        # timestamp and offset deltas, key (one-byte length), value, no headers
        body = 19 + nk + n if n < 64 else 20 + nk + n
        upper = body + (1 if body < 64 else 2)
        if (
            batch._size + upper >= self._batch_limit  # it might fill the batch
            or self._used + upper > self._buffer_memory
        ):
            return None  # the general path decides exactly (and may refuse)
        builder = batch._builder
        if builder is None:  # pragma: no cover - an accepting batch has its builder
            return None
        size = builder.append_value(timestamp_ms, value, key)
        self._used += size - batch._size + RECORD_OVERHEAD
        batch._size = size
        next_id = self._next_record
        batch._ids.append(next_id)  # type: ignore[arg-type] # RecordId is an int
        batch._records.append((timestamp_ms, key, value, ()))
        self._next_record = next_id + 1
        self._outstanding += 1
        return next_id  # type: ignore[return-value] # RecordId is an int

    def append_batch(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[int, Buffer | None, Buffer | None, HeadersIn]],
        *,
        now: float,
        reserved: RecordId | None = None,
        prepaid: int = 0,
    ) -> list[RecordId]:
        """Add records as one batch of their own (aiokafka's ``send_batch``).

        The batch takes no other record and is sent as it is, whatever ``batch.size`` says
        (it is only split if the broker answers MESSAGE_TOO_LARGE). All or nothing: on an
        error nothing was appended.

        Args:
            topic: the topic.
            partition: the partition.
            records: ``(timestamp_ms, key, value, headers)`` per record, in offset order.
            now: the driver's clock.
            reserved: the first id the batch got when it was held for metadata
                (:meth:`hold`); None gives it new ones.
            prepaid: bytes of ``buffer.memory`` the batch had reserved while it was held,
                as for :meth:`append`.

        Returns:
            The records' ids, in order.

        Buffer memory is as for :meth:`append`: with ``config.max_block`` set, a batch
        that does not fit now waits in the FIFO (:meth:`is_waiting` of its first id).

        Raises:
            BufferFullError: no room in ``buffer.memory`` now (``config.max_block`` None).
            MessageTooLargeError: the batch exceeds ``max.request.size`` or
                ``buffer.memory``.
            KafkaConfigurationError: no records, or an argument has the wrong type.
            IllegalStateError: the accumulator is closed.
        """
        if self._closed:
            raise IllegalStateError("append after the accumulator was closed")
        if not records:
            raise KafkaConfigurationError("a batch needs at least one record")
        cfg = self.config
        batch = ProducerBatch(
            topic=topic,
            partition=partition,
            created=now,
            compression=cfg.compression,
            compression_level=cfg.compression_level,
            owner=self,
            serial=self._next_batch,
        )
        first = self._next_record if reserved is None else reserved
        batch._append_all(first, records)
        size = batch._size
        counted = size + RECORD_OVERHEAD * len(records)  # what it takes of buffer.memory
        if size > cfg.max_request_size or counted > cfg.buffer_memory:
            if size > cfg.max_request_size:
                limit, name = cfg.max_request_size, "max_request_size (max.request.size)"
            else:
                limit, name = cfg.buffer_memory, "buffer_memory (buffer.memory)"
                size = counted  # (the record overhead included)
            raise MessageTooLargeError(
                f"the batch is {size} bytes, larger than {name} = {limit}",
                topic=topic,
                partition=partition,
            )
        batch._accepting = False  # its own batch: nothing else joins it
        self._next_batch += 1
        if counted > prepaid and (self._waiting or self._used + counted > cfg.buffer_memory):
            rid = self._refuse(
                topic,
                partition,
                False,
                None,
                counted,
                counted,
                counted,
                now,
                batch,
                reserved=reserved,
            )
            return list(range(rid, rid + len(records)))  # type: ignore[arg-type] # RecordIds
        if reserved is None:
            self._next_record += len(records)
            self._outstanding += len(records)
        self._place_batch(batch)
        return list(batch._ids)

    def _place_batch(self, batch: ProducerBatch) -> None:
        """Queue a batch of its own (``append_batch``) that fits ``buffer.memory``."""
        tp = (batch.topic, batch.partition)
        dq = self._queues.get(tp)
        if dq is None:
            dq = self._queues[tp] = deque()
        if dq and dq[-1]._accepting:
            dq[-1]._accepting = False  # keep offsets in append order
        dq.append(batch)
        self._used += batch.reserved_bytes
        self._readiness_changed = True

    def admit_waiting(
        self, cluster: ClusterMetadata, *, now: float, expire: bool = True
    ) -> list[_TP]:
        """Settle the sends waiting for ``buffer.memory``, strictly in send order.

        First (with ``expire``) every waiting send whose ``max_block`` deadline is at or
        before ``now`` fails with :class:`~kafkastate.errors.KafkaTimeoutError`
        (:class:`RecordsFailed`; its ``__cause__`` is a :class:`BufferFullError` with the
        numbers at that time). Then waiting sends are appended from the head of the FIFO
        while the head fits (:class:`RecordsAdmitted`), a keyless sticky record to the
        sticky partition of now; the first that does not fit stops the round, so a later
        small send never overtakes an earlier big one.

        Args:
            cluster: the current metadata (a sticky record's partition).
            now: the driver's clock.
            expire: False leaves expired sends for a later call (the producer's ``send``
                does, so that the send it just queued is decided by ``handle_timer``).

        Returns:
            The ``(topic, partition)`` pairs appended to, in order.
        """
        waiting = self._waiting
        appended: list[_TP] = []
        if expire:
            while waiting:
                head = next(iter(waiting.values()))
                if head.deadline > now:
                    break
                del waiting[head.rid]
                self._fail_waiting(head, self._timeout_error(head), now)
        while waiting:
            head = next(iter(waiting.values()))
            tp = self._admit(head, cluster, now)
            if tp is None:
                break
            if tp[1] >= 0:
                appended.append(tp)
        if waiting:
            self._blocked = True
            self._lanes.clear()  # admissions may have opened lanes: none while sends wait
        self._used_at_admission = self._used
        return appended

    def withdraw(self, record_id: RecordId, *, now: float) -> bool:
        """Take back a send that waits for ``buffer.memory`` (its caller gave up waiting,
        say a cancelled task). No event will name its records.

        Args:
            record_id: the id :meth:`append` (or the first of :meth:`append_batch`)
                returned.
            now: the driver's clock.

        Returns:
            True if it was waiting and is gone; False if it was admitted or failed already.
        """
        held = self._held.get(record_id)
        if held is not None:
            freed = self._unhold(held)
            self._settle(range(held.rid, held.rid + len(held.records)))
            if freed:
                self._announce_freed()
            return True
        waiting = self._waiting.pop(record_id, None)
        if waiting is None:
            return False
        self._settle(range(waiting.rid, waiting.rid + waiting.count))
        if not self._waiting:
            self._last_deadline = float("-inf")
        return True

    def fail_waiting(self, error: KafkaError, *, now: float) -> None:
        """Fail every send waiting for ``buffer.memory`` or held for metadata with
        ``error`` (close, abort), in send order.

        Args:
            error: the error each :class:`RecordsFailed` carries.
            now: the driver's clock.
        """
        entries: list[_Waiting | _Held] = [*self._waiting.values(), *self._held.values()]
        entries.sort(key=lambda e: e.rid)
        self._waiting = {}
        self._held = {}
        self._held_topics = {}
        freed = 0
        for entry in entries:
            if isinstance(entry, _Held):
                freed += self._release(entry)
                self._fail_held(entry, error, now)
            else:
                self._fail_waiting(entry, error, now)
        if freed:
            self._announce_freed()

    def hold(
        self,
        topic: str,
        records: Sequence[tuple[int, Buffer | None, Buffer | None, HeadersIn]],
        *,
        explicit: int | None,
        batch: bool,
        cause: KafkaError,
        now: float,
        block: bool = True,
    ) -> RecordId:
        """Hold a send whose topic -- or explicit partition -- is not in the metadata yet
        (Java's ``waitOnMetadata``): its ids are reserved now, and :meth:`route_held`
        appends it once the metadata names its partition (:class:`RecordsAdmitted`), or
        fails it with ``KafkaTimeoutError`` at its ``max_block`` deadline
        (:class:`RecordsFailed`). Sends to one topic stay in order: while one is held,
        later ones to the same topic must be held too (:meth:`holds`); other topics go on.

        Buffer memory: a held send counts against ``buffer.memory`` as an appended one
        does (the size of a batch of its own, an upper bound), from now until it is routed,
        fails or is withdrawn -- so a burst of sends to a topic without metadata meets the
        bound, and waits, as any other. One that does not fit now (or that comes while
        sends wait for memory) is refused with :class:`BufferFullError` if ``block`` is
        False; else it is held without memory and, once routed, waits for memory in the
        FIFO like any send (its caller waits meanwhile).

        Args:
            topic: the topic.
            records: ``(timestamp_ms, key, value, headers)``: one record, or the records
                of an :meth:`append_batch` (then ``batch``).
            explicit: the partition the caller asked for, or None for the partitioner's
                choice.
            batch: the records are one batch of their own (``append_batch``).
            cause: why it cannot be routed now (the partitioner's retriable error, or
                ``MetadataPendingError``); raised at once if ``config.max_block`` is None,
                and the ``__cause__`` of the timeout.
            now: the driver's clock.
            block: False for a caller that cannot wait (see :meth:`append`).

        Returns:
            The (first) record id; :meth:`is_waiting` is True for it.

        Raises:
            KafkaError: ``cause``, when nothing may wait (``config.max_block`` None).
            BufferFullError: no room in ``buffer.memory`` now and ``block`` False.
            MessageTooLargeError: a single record can never fit a request.
            KafkaConfigurationError: a bad argument, or no records.
            IllegalStateError: the accumulator is closed.
        """
        cfg = self.config
        if self._closed:
            raise IllegalStateError("append after the accumulator was closed")
        if cfg.max_block is None or self._partitioner is None:
            raise cause
        if not records:
            raise KafkaConfigurationError("a batch needs at least one record")
        recs: list[_Rec] = []
        size = RECORD_BATCH_OVERHEAD  # a batch of its own: what it needs at most
        for timestamp_ms, key, value, headers in records:
            _check_append_arguments(topic, 0 if explicit is None else explicit, timestamp_ms)
            _check_bytes("key", key)
            _check_bytes("value", value)
            hdrs = tuple(headers) if headers else ()
            try:
                size += estimate_record_size_upper_bound(key, value, hdrs)
            except (TypeError, AttributeError, ValueError) as exc:
                raise KafkaConfigurationError(f"invalid record headers: {exc}") from None
            if not batch and size > self._max_alone:
                raise _too_large(size, cfg, topic, -1 if explicit is None else explicit)
            recs.append((timestamp_ms, key, value, hdrs))
        reserved = size = size + RECORD_OVERHEAD * len(recs)  # with each record's overhead
        if self._waiting or self._used + size > cfg.buffer_memory:
            self._blocked = True  # Java: the pool is exhausted -> everything becomes sendable
            if not block:
                raise BufferFullError(
                    needed=size,
                    available=cfg.buffer_memory - self._used,
                    buffer_memory=cfg.buffer_memory,
                )
            reserved = 0  # its caller waits; routed, it waits for memory as any send
        self._used += reserved
        rid = RecordId(self._next_record)
        self._next_record += len(recs)
        self._outstanding += len(recs)
        self._held[rid] = _Held(
            rid, topic, explicit, recs, batch, now + cfg.max_block, cause, reserved
        )
        self._held_topics[topic] = self._held_topics.get(topic, 0) + 1
        self._lanes.pop(topic, None)  # append_sticky must not overtake it
        return rid

    def route_held(
        self, cluster: ClusterMetadata, *, now: float, expire: bool = True
    ) -> tuple[list[_TP], bool]:
        """Route the sends held for metadata (:meth:`hold`) that ``cluster`` now places.

        First (with ``expire``) every held send whose ``max_block`` deadline is at or
        before ``now`` fails with :class:`~kafkastate.errors.KafkaTimeoutError` (its
        ``__cause__`` says what was missing). Then, if the metadata changed since the last
        round, each topic's held sends are partitioned and appended in send order
        (:class:`RecordsAdmitted`; one that meets a full ``buffer.memory`` goes on waiting
        in that FIFO instead) until one still cannot be placed; one the partitioner
        refuses for good (an authorization error, a failing custom partitioner) fails with
        that error.

        Args:
            cluster: the current metadata.
            now: the driver's clock.
            expire: False leaves expired sends for a later call.

        Returns:
            The ``(topic, partition)`` pairs appended to, in order; and whether a send
            waits for a partition its topic's metadata does not have yet (the owner
            should ask for a metadata refresh).
        """
        held = self._held
        freed = 0
        if expire:
            while held:
                head = next(iter(held.values()))
                if head.deadline > now:
                    break
                freed += self._unhold(head)
                assert self.config.max_block is not None  # nothing is held without it
                error = max_block_timeout(self.config.max_block, "topic metadata", head.cause)
                self._fail_held(head, error, now)
        appended: list[_TP] = []
        if not held or cluster is self._routed_in:
            if freed:
                self._announce_freed()
            return appended, False
        self._routed_in = cluster
        partitioner = self._partitioner
        assert partitioner is not None  # nothing is held without it
        stuck: set[str] = set()
        for entry in list(held.values()):
            topic = entry.topic
            if topic in stuck:
                continue
            timestamp_ms, key, value, hdrs = entry.records[0]
            plain = key is None or entry.batch
            hint = None
            if plain and not entry.batch and partitioner.wants_batch_hint:
                record = entry.records[0]

                def hint(p: int, topic: str = topic, record: Any = record) -> bool:
                    return self.opens_batch(topic, p, record)

            try:
                chosen = partitioner.partition(
                    topic,
                    None if key is None or plain else bytes(key),
                    cluster,
                    explicit=entry.explicit,
                    value=None if entry.batch else value,
                    opens_batch=hint,
                )
            except KafkaError as exc:
                if exc.retriable:
                    entry.cause = exc
                    stuck.add(topic)
                    continue
                freed += self._unhold(entry)
                self._fail_held(entry, exc, now)
                continue
            prepaid = entry.reserved
            self._unhold(entry)
            try:
                if entry.batch:
                    self.append_batch(
                        topic, chosen, entry.records, now=now, reserved=entry.rid, prepaid=prepaid
                    )
                else:
                    sticky = plain and entry.explicit is None and partitioner.custom is None
                    self.append(
                        topic,
                        chosen,
                        timestamp_ms=timestamp_ms,
                        key=key,
                        value=value,
                        headers=hdrs,
                        now=now,
                        sticky=sticky,
                        reserved=entry.rid,
                        prepaid=prepaid,
                    )
            except KafkaError as exc:
                freed += prepaid
                self._fail_held(entry, exc, now)
                continue
            if entry.rid not in self._waiting:  # else it waits on, for buffer memory
                ids = tuple(RecordId(i) for i in range(entry.rid, entry.rid + len(entry.records)))
                self._events.append(RecordsAdmitted(topic=topic, partition=chosen, record_ids=ids))
                appended.append((topic, chosen))
        for topic in stuck:
            self._lanes.pop(topic, None)  # routed sends may have opened one: none while held
        if freed:
            self._announce_freed()
        return appended, any(topic in cluster.topics for topic in stuck)

    def _release(self, entry: _Held) -> int:
        """Give back the ``buffer.memory`` a held send counted; how many bytes."""
        freed, entry.reserved = entry.reserved, 0
        self._used -= freed
        return freed

    def _unhold(self, entry: _Held) -> int:
        """Take a send off the held ones; the bytes of ``buffer.memory`` given back."""
        freed = self._release(entry)
        del self._held[entry.rid]
        left = self._held_topics[entry.topic] - 1
        if left:
            self._held_topics[entry.topic] = left
        else:
            del self._held_topics[entry.topic]
        return freed

    def _fail_held(self, entry: _Held, error: KafkaError, now: float) -> None:
        """A held send failed (timeout, refused, close, abort): emit its RecordsFailed. (Its
        memory was released already.)"""
        ids = range(entry.rid, entry.rid + len(entry.records))
        self._events.append(
            RecordsFailed(
                topic=entry.topic,
                partition=-1 if entry.explicit is None else entry.explicit,
                record_ids=tuple(RecordId(i) for i in ids),
                error=error,
            )
        )
        self._settled[entry.topic] = now
        self._settle(ids)

    def take_quiet_open(self, cluster: ClusterMetadata) -> float | None:
        """After an :meth:`append` that changed readiness: if all it did was open a batch
        that only waits for its linger (nothing else queued for the partition, a leader
        known, nothing forcing sends), that batch's linger deadline; else None (the
        owner must look at :meth:`ready` again). Clears what it looked at.

        Args:
            cluster: the current metadata.

        Returns:
            The new batch's send deadline, or None.
        """
        opened, self._opened = self._opened, None
        if opened is None:
            return None
        batch, dq = opened
        linger = self.config.linger
        if (
            linger <= 0
            or self._closed
            or self._blocked
            or self._waiting
            or self._flushes
            or not batch._accepting
            or dq[0] is not batch  # the new batch is the last: alone in its deque
            or batch.retry_at is not None
            or cluster.leader_for(batch.topic, batch.partition) is None
        ):
            return None
        return batch.created + linger

    def take_readiness_changed(self) -> bool:
        """Whether an :meth:`append` since the last call opened a batch or filled one.

        Appending to an open batch that still has room changes no deadline, so the owner
        need not look at :meth:`ready` again; anything else may. The flag is cleared.

        Returns:
            True if readiness must be recomputed.
        """
        changed, self._readiness_changed = self._readiness_changed, False
        return changed

    def ready(
        self, cluster: ClusterMetadata, *, now: float, muted: Container[_TP] = ()
    ) -> ReadyResult:
        """Find the nodes that have something to send now.

        Args:
            cluster: the current metadata (leaders).
            now: the driver's clock.
            muted: ``(topic, partition)`` pairs not to send now (e.g. one batch already in
                flight where ordering needs at most one).

        Returns:
            Sendable nodes, the next linger/backoff deadline, and topics without a leader.
        """
        nodes: dict[NodeId, None] = {}
        unknown: dict[str, None] = {}
        next_at: float | None = None
        forced = self._closed or self._blocked or bool(self._flushes) or bool(self._waiting)
        linger = self.config.linger
        for tp, dq in self._queues.items():
            if not dq:
                continue
            topic, partition = tp
            leader = cluster.leader_for(topic, partition)
            if leader is None:
                unknown[topic] = None
                continue
            if leader in nodes or tp in muted:
                continue
            first = dq[0]
            retry_at = first.retry_at
            if retry_at is not None:
                # a retry waits out its backoff whatever else is going on
                sendable = retry_at <= now
                deadline = retry_at
            else:
                deadline = first.created + linger
                sendable = forced or len(dq) > 1 or not first._accepting or deadline <= now
            if sendable:
                nodes[leader] = None
            elif next_at is None or deadline < next_at:
                next_at = deadline
        return ReadyResult(
            nodes=tuple(sorted(nodes)),
            next_ready_at=next_at,
            unknown_leader_topics=tuple(unknown),
        )

    def drain(
        self,
        cluster: ClusterMetadata,
        node_id: NodeId,
        *,
        now: float,
        max_request_size: int | None = None,
        muted: Container[_TP] = (),
    ) -> list[ProducerBatch]:
        """Take batches for one Produce request to ``node_id``.

        At most one batch per partition the node leads (the first in its deque, ready or
        not, as Java does once the node is ready), skipping muted partitions and retries in
        backoff, stopping before the total would exceed ``max_request_size``. The starting
        partition rotates per node.

        Args:
            cluster: the current metadata (leaders).
            node_id: the node the request goes to.
            now: the driver's clock.
            max_request_size: byte budget; default ``config.max_request_size``.
            muted: ``(topic, partition)`` pairs to leave alone.

        Returns:
            The batches, now IN_FLIGHT and closed for appends; call :meth:`ProducerBatch.build`
            for their bytes.
        """
        budget = self.config.max_request_size if max_request_size is None else max_request_size
        parts = [tp for tp in self._queues if cluster.leader_for(*tp) == node_id]
        if not parts:
            return []
        n = len(parts)
        start = self._drain_start.get(node_id, 0) % n
        next_start = (start + 1) % n
        out: list[ProducerBatch] = []
        total = 0
        for i in range(n):
            index = (start + i) % n
            tp = parts[index]
            dq = self._queues[tp]
            if not dq or tp in muted:
                continue
            first = dq[0]
            if first.retry_at is not None and now < first.retry_at:
                continue
            size = first.size_in_bytes
            if out and total + size > budget:
                next_start = index  # this partition goes first next time
                break
            dq.popleft()
            self._transition(first, "drain")
            first._accepting = False
            first.drained_at = now
            first.retry_at = None
            self._in_flight[first._serial] = first
            total += size
            out.append(first)
        self._drain_start[node_id] = next_start
        return out

    def complete(
        self,
        batch: ProducerBatch,
        *,
        base_offset: int,
        log_append_time: int = -1,
        log_start_offset: int = -1,
        now: float,
    ) -> None:
        """The broker acknowledged an in-flight batch: emit :class:`RecordsAcknowledged`.

        Args:
            batch: a batch from :meth:`drain`.
            base_offset: the offset the broker gave the first record (-1 for ``acks=0``).
            log_append_time: the broker's append time (ms) on a LOG_APPEND_TIME topic, else -1.
            log_start_offset: the partition's log start offset, or -1 if unknown.
            now: the driver's clock (recorded as ``batch.done_at``).

        Raises:
            LocalProtocolError: the batch is not in flight, or not this accumulator's.
        """
        self._own(batch, "complete")
        self._transition(batch, "complete")
        del self._in_flight[batch._serial]
        batch.done_at = now
        counters = self.counters
        counters.acked += len(batch._ids)
        counters.last_ack = now
        if log_append_time >= 0:
            timestamps = (log_append_time,) * len(batch._ids)
        else:
            timestamps = tuple(map(_timestamp_of, batch._records))
        self._events.append(
            RecordsAcknowledged(
                topic=batch.topic,
                partition=batch.partition,
                record_ids=tuple(batch._ids),
                base_offset=base_offset,
                timestamps=timestamps,
                log_append_time=log_append_time,
                log_start_offset=log_start_offset,
            )
        )
        self._resolved(batch)
        self._announce_freed()

    def fail(self, batch: ProducerBatch, error: KafkaError, *, now: float) -> None:
        """Fail a batch, queued or in flight: emit :class:`RecordsFailed`.

        Args:
            batch: the batch.
            error: why; becomes the event's ``error``.
            now: the driver's clock (recorded as ``batch.done_at``).

        Raises:
            LocalProtocolError: the batch is done already, or not this accumulator's.
        """
        self._own(batch, "fail")
        if batch.state is BatchState.QUEUED:
            self._queues[(batch.topic, batch.partition)].remove(batch)
        else:
            self._in_flight.pop(batch._serial, None)
        self._fail(batch, error, now, "fail")
        self._announce_freed()

    def reenqueue(self, batch: ProducerBatch, *, now: float) -> None:
        """Put an in-flight batch back for a retry, ahead of every later batch.

        Its backoff is ``retry_backoff * 2**(attempts-1)``, +-20 % jitter, at most
        ``retry_backoff_max`` (KIP-580). Its built bytes (and sequence numbers) are kept.

        Args:
            batch: a batch from :meth:`drain`.
            now: the driver's clock.

        Raises:
            LocalProtocolError: the batch is not in flight, or not this accumulator's.
        """
        self._own(batch, "reenqueue")
        self._transition(batch, "reenqueue")
        del self._in_flight[batch._serial]
        batch.attempts += 1
        self.counters.retries.record(len(batch._ids), now)
        batch.retry_at = now + self._backoff(batch.attempts)
        self._insert(batch)

    def split(self, batch: ProducerBatch, *, now: float) -> list[ProducerBatch]:
        """Re-batch an in-flight batch the broker found too large (MESSAGE_TOO_LARGE).

        The records go, in order and with their ids, into batches of at most half the
        failed batch's size (one record each at worst), placed where the original was: at
        the front of the partition, ahead of later batches. They keep its creation time
        and attempt count, carry no producer state (the idempotence layer assigns new
        sequences) and are sendable at once.

        Args:
            batch: a batch from :meth:`drain` with at least two records.
            now: the driver's clock (recorded as the original's ``done_at``).

        Returns:
            The new batches, in order.

        Raises:
            LocalProtocolError: the batch is not in flight or not this accumulator's, or it
                holds a single record (fail it with ``MessageTooLargeError`` instead).
        """
        self._own(batch, "split")
        if batch.state is BatchState.IN_FLIGHT and len(batch._ids) < 2:
            raise LocalProtocolError(
                f"cannot split {batch!r}: one record; fail it with MessageTooLargeError"
            )
        self._transition(batch, "split")
        del self._in_flight[batch._serial]
        batch.done_at = now
        limit = max(1, batch._size // 2)
        cfg = self.config
        pieces: list[ProducerBatch] = []
        current: ProducerBatch | None = None
        for rid, rec in zip(batch._ids, batch._records, strict=True):
            if current is None or not current._has_room(rec, limit):
                current = ProducerBatch(
                    topic=batch.topic,
                    partition=batch.partition,
                    created=batch.created,
                    compression=cfg.compression,
                    compression_level=cfg.compression_level,
                    owner=self,
                    serial=self._next_batch,
                )
                self._next_batch += 1
                current.attempts = batch.attempts
                pieces.append(current)
            current._append(rid, rec, limit)
        # Memory moves from the original to the pieces (a little more: one header each);
        # it may overshoot buffer.memory briefly -- refusing here would lose records.
        self._used -= batch.reserved_bytes
        for piece in pieces:
            piece._accepting = False
            self._used += piece.reserved_bytes
            self._insert(piece)
        return pieces

    def expire(self, now: float) -> list[ProducerBatch]:
        """Fail queued batches older than ``delivery.timeout.ms`` (KIP-91).

        In-flight batches are left to the sender. Each expired batch emits
        :class:`RecordsFailed` with a :class:`~kafkastate.errors.KafkaTimeoutError`.

        Args:
            now: the driver's clock.

        Returns:
            The expired batches (the idempotence layer may need their sequences).
        """
        timeout = self.config.delivery_timeout
        expired: list[ProducerBatch] = []
        for (topic, partition), dq in self._queues.items():
            # deques are in creation order, so the first young batch ends the scan
            while dq and dq[0].created + timeout <= now:
                batch = dq.popleft()
                error = KafkaTimeoutError(
                    f"expiring {len(batch._ids)} record(s) for {topic}-{partition}: "
                    f"{now - batch.created:.3f} s have passed since batch creation, "
                    f"delivery_timeout is {timeout:g} s (delivery.timeout.ms)"
                )
                self._fail(batch, error, now, "expire")
                expired.append(batch)
        if expired:
            self._announce_freed()
        return expired

    def abort_undrained(self, error: KafkaError, *, now: float) -> list[ProducerBatch]:
        """Fail every queued batch (transaction abort, forced close), and every send waiting
        for ``buffer.memory``; in-flight ones stay.

        Args:
            error: the error each :class:`RecordsFailed` carries.
            now: the driver's clock.

        Returns:
            The failed batches (sends that waited had none).
        """
        aborted: list[ProducerBatch] = []
        for dq in self._queues.values():
            while dq:
                batch = dq.popleft()
                self._fail(batch, error, now, "abort_undrained")
                aborted.append(batch)
        self.fail_waiting(error, now=now)
        if aborted:
            self._announce_freed()
        return aborted

    def flush(self) -> FlushId:
        """Make everything sendable until every record appended so far has its outcome.

        Returns:
            The id :class:`FlushCompleted` will carry (queued at once if nothing is pending).
        """
        fid = FlushId(self._next_flush)
        self._next_flush += 1
        if self._outstanding == 0:
            self._events.append(FlushCompleted(flush_id=fid))
        else:
            # every pending record has an id below the mark; later ones are not waited for
            self._flushes[fid] = [self._next_record, self._outstanding]
        return fid

    def close(self) -> None:
        """Refuse further appends and make every queued batch sendable."""
        self._closed = True

    def next_event(self) -> AccumulatorEvent | None:
        """The next event, or None.

        Returns:
            :class:`RecordsAcknowledged`, :class:`RecordsFailed`, :class:`FlushCompleted` or
            :class:`BufferSpaceFreed`, in the order they happened.
        """
        return self._events.popleft() if self._events else None

    # --------------------------------------------------------------------- internals

    def _own(self, batch: ProducerBatch, verb: str) -> None:
        if batch._owner is not self:
            raise LocalProtocolError(f"{verb}: {batch!r} belongs to another accumulator")

    @staticmethod
    def _transition(batch: ProducerBatch, verb: str) -> None:
        # once per batch per step: two frozenset membership tests (the command, the move)
        state = batch.state
        if verb not in _COMMANDS[state]:
            raise LocalProtocolError(f"cannot {verb} {batch!r}: it is {state.name}")
        batch.state = transition(BATCH_STATES, state, _TARGETS[verb], what=verb)

    def _backoff(self, attempts: int) -> float:
        cfg = self.config
        term = cfg.retry_backoff * 2.0 ** min(attempts - 1, 60)
        term *= 1 + self._rng.uniform(-_JITTER, _JITTER)
        return min(term, cfg.retry_backoff_max)

    def _insert(self, batch: ProducerBatch) -> None:
        """Queue ``batch`` before every batch of its partition with later records."""
        tp = (batch.topic, batch.partition)
        dq = self._queues.get(tp)
        if dq is None:
            dq = self._queues[tp] = deque()
        first = batch._ids[0]
        index = 0
        for queued in dq:
            if queued._ids[0] > first:
                break
            index += 1
        dq.insert(index, batch)

    def _fail(self, batch: ProducerBatch, error: KafkaError, now: float, verb: str) -> None:
        self._transition(batch, verb)
        batch.done_at = now
        self.counters.errors.record(len(batch._ids), now)
        self._events.append(
            RecordsFailed(
                topic=batch.topic,
                partition=batch.partition,
                record_ids=tuple(batch._ids),
                error=error,
            )
        )
        self._resolved(batch)

    def _resolved(self, batch: ProducerBatch) -> None:
        """Outcome emitted: settle flushes, then free the batch's memory."""
        if batch.done_at is not None:
            self._settled[batch.topic] = batch.done_at
        self._settle(batch._ids)
        self._used -= batch.reserved_bytes

    def _settle(self, ids: Sequence[int]) -> None:
        """These records (ascending ids) have their outcome: count them off the flushes."""
        self._outstanding -= len(ids)
        if self._flushes:
            for fid, state in list(self._flushes.items()):
                state[1] -= bisect.bisect_left(ids, state[0])
                if state[1] <= 0:
                    del self._flushes[fid]
                    self._events.append(FlushCompleted(flush_id=fid))

    def _admit(self, entry: _Waiting, cluster: ClusterMetadata, now: float) -> _TP | None:
        """Append the FIFO's head if it fits now; None if it does not (the round ends).
        A head that can no longer be partitioned fails: ``(topic, -1)``."""
        cfg = self.config
        topic = entry.topic
        batch = entry.batch
        if batch is not None:
            if self._used + batch.reserved_bytes > cfg.buffer_memory:
                return None
            del self._waiting[entry.rid]
            self.counters.buffer_wait.record(now - entry.since, now)
            self._place_batch(batch)
            self._events.append(
                RecordsAdmitted(
                    topic=topic, partition=batch.partition, record_ids=tuple(batch._ids)
                )
            )
            return (topic, batch.partition)
        rec = entry.rec
        assert rec is not None  # a record when it is not a batch
        partition = entry.partition
        if entry.sticky and self._partitioner is not None:
            # chosen now, not at send time: records that waited spread as any others do
            try:
                partition = self._partitioner.partition(topic, None, cluster)
            except KafkaError as exc:  # the topic left the metadata meanwhile
                del self._waiting[entry.rid]
                self._fail_waiting(entry, exc, now)
                return (topic, -1)
        tp = (topic, partition)
        dq = self._queues.get(tp)
        if dq is None:
            dq = self._queues[tp] = deque()
        last = dq[-1] if dq and dq[-1]._accepting else None
        fits = last is not None and last._has_room(rec, self._batch_limit)
        needed = (entry.upper if fits else entry.alone) + RECORD_OVERHEAD
        if self._used + needed > cfg.buffer_memory:
            return None
        del self._waiting[entry.rid]
        self.counters.buffer_wait.record(now - entry.since, now)
        try:
            self._place(topic, partition, dq, last, fits, rec, entry.rid, now, entry.sticky)
        except KafkaError as exc:  # found only when encoded (a header value of a bad type)
            self._fail_waiting(entry, exc, now)
            return (topic, -1)
        self._events.append(
            RecordsAdmitted(topic=topic, partition=partition, record_ids=(entry.rid,))
        )
        return tp

    def _fail_waiting(self, entry: _Waiting, error: KafkaError, now: float) -> None:
        """A waiting send failed (timeout, close, abort): emit its RecordsFailed."""
        ids = range(entry.rid, entry.rid + entry.count)
        self._events.append(
            RecordsFailed(
                topic=entry.topic,
                partition=entry.partition,
                record_ids=tuple(RecordId(i) for i in ids),
                error=error,
            )
        )
        self._settled[entry.topic] = now
        self._settle(ids)
        if not self._waiting:
            self._last_deadline = float("-inf")

    def _timeout_error(self, entry: _Waiting) -> KafkaTimeoutError:
        cfg = self.config
        assert cfg.max_block is not None  # nothing waits without it
        full = BufferFullError(
            needed=entry.alone + RECORD_OVERHEAD,  # at most: a batch of its own
            available=cfg.buffer_memory - self._used,
            buffer_memory=cfg.buffer_memory,
        )
        return max_block_timeout(cfg.max_block, "buffer memory (buffer_memory)", full)

    def _announce_freed(self) -> None:
        """After a command released memory: wake refused appends, once, with the final count."""
        if self._blocked:
            self._blocked = False
            self._events.append(BufferSpaceFreed(available=self.buffer_available))


# The classes whose slots the compiled hot paths (records._c_lane_sticky and _c_lane_keyed)
# read and write.
_records.register_lane_classes(
    Accumulator, ProducerBatch, RecordBatchBuilder, sticky_state_class(), Partitioner
)
