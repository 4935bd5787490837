"""ProducerMachine: the sans-IO Kafka producer -- accumulator, sender and idempotence.

Theory of operation
-------------------
The machine owns a :class:`~kafkastate.core.client.Client` (connections, routing,
metadata), an :class:`~kafkastate.core.producer.accumulator.Accumulator` (batches, buffer
memory, linger, retries) and a :class:`~kafkastate.core.producer.partitioner.Partitioner`.
It exposes the Client's IO surface unchanged (``connection_made/failed/lost``,
``receive_data``, ``data_to_send``, ``handle_timer``, ``get_timer``, ``next_event``) and
passes ConnectRequested / CloseRequested / MetadataUpdated through.

``send`` partitions a record and appends it; it never blocks and never drops. Waiting is
the core's too, with ``max.block.ms`` (``config.accumulator.max_block``) as its timer; a
send that must wait gets its record id at once and :meth:`ProducerMachine.is_waiting` says
so:

- a topic whose metadata has not arrived yet -- or an explicit partition it does not have
  yet -- holds the send (Java ``KafkaProducer.waitOnMetadata``): the topic is added to the
  metadata of interest, and the send is routed when a MetadataUpdated names its partition.
  Sends to one topic stay in order; other topics' sends go on;
- a send that does not fit ``buffer.memory`` waits in the accumulator's FIFO, and the
  waiting sends are admitted strictly in send order as batches get their outcomes.

Either way a RecordsAdmitted names the send once it is appended, or a RecordsFailed ends
the wait: KafkaTimeoutError at its ``max_block`` deadline (a deadline of
:meth:`get_timer`), the partitioner's error if it refuses for good, ProducerClosedError
(aiokafka's ``ProducerClosed``) if the producer is closed or aborted meanwhile. Without
``max_block`` nothing waits: ``send`` raises :class:`MetadataPendingError` or
``BufferFullError`` (both retriable) and the caller tries again after MetadataUpdated or
BufferSpaceFreed.

The sender runs after every input (Java ``Sender.runOnce``):

1. expire queued batches (``accumulator.expire``) and in-flight batches whose delivery
   timeout passed (KIP-91: a record fails ``delivery.timeout.ms`` after it was appended,
   however many retries are under way; a late response for it is ignored);
2. with idempotence, get a producer id (InitProducerId v3+) before any Produce, and bump
   the epoch when a partition's sequence can no longer be trusted (KIP-360);
3. ``accumulator.ready`` names the leaders with sendable batches; unknown leaders ask for
   a metadata refresh; for each leader with room (fewer than
   ``max.in.flight.requests.per.connection`` Produce requests outstanding, and READY --
   or nothing outstanding at all, so that the one request makes the Client connect) it
   drains one batch per partition into one Produce request.

Ordering. With idempotence up to five batches per partition may be in flight: the broker
orders them by sequence and refuses gaps. A retried batch keeps its sequence and is only
re-sent once its partition has nothing else in flight (Java: the retry "reduces the in
flight count to 1"), so retries go out in sequence order. Until the broker has
acknowledged one batch of a partition under the current id/epoch, the partition also sends
one batch at a time: a broker holding no state for the producer accepts any first
sequence, so a later batch could be written ahead of a first one refused with
NOT_LEADER_OR_FOLLOWER while the topic is still being created, leaving a gap no retry
fills (KAFKA-15591, seen on Kafka 4.4). Without idempotence a partition is muted while it
has a batch in flight only when ``max_in_flight_requests_per_connection`` is 1; with more,
a retry may land after a later batch and reorder records, as in Java.

Responses, per partition: success and DUPLICATE_SEQUENCE_NUMBER complete the batch;
MESSAGE_TOO_LARGE splits it (the pieces take over the original's sequence range, as Java's
``splitAndReenqueue`` does -- the broker wrote none of it, so no epoch bump is needed; a
single record fails with MessageTooLargeError); retriable errors re-enqueue it with the same
sequence and refresh metadata for stale-leader codes; OUT_OF_ORDER_SEQUENCE_NUMBER for a
batch that is *not* the next expected one is a retry (an earlier batch failed), while for
the next one, for one a later sequence was acknowledged ahead of (the gap above, should it
happen anyway), and UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_EPOCH, the broker lost our state:
the epoch is bumped (KIP-360) and the batch retried under the new one; PRODUCER_FENCED and
authorization failures of the producer id are fatal: :class:`ProducerFailed` and every
pending record fails. Any other error fails the batch with the typed error, naming the
topic and partition; with idempotence a failed batch that had a sequence leaves a gap, so
the epoch is bumped too (Java 3.x does this for idempotent producers).

Epoch bump. InitProducerId v3+ is sent with the current id and epoch (KIP-360). Without a
transactional id today's brokers answer with a new producer id at epoch 0; a future broker
may return the same id at epoch + 1. Either way each partition starts again at sequence 0
once none of its old-epoch batches is in flight; its queued retries are stamped anew. That
re-stamping can write a retried batch twice if an earlier attempt of it was written and its
answer lost -- the window KIP-360 accepts for availability; a plain retry (timeout, lost
connection, NOT_LEADER) keeps its sequence and is deduplicated by the broker.

``acks=0``: the Produce request expects no response; its batches complete with offset -1
as soon as the request is handed to the Client.

Closing: ``close`` refuses new records, sends everything (no linger) and, once every
record has its outcome, closes the connections and emits :class:`ProducerClosed`. ``abort``
fails what is pending at once.

Topics of interest (Java ``ProducerMetadata``, ``metadata.max.idle.ms``). A send adds its
topic to the metadata's topics; at each metadata update, a topic not used for
``metadata_max_idle`` leaves them again -- no record sent to it and none pending (a record
counts until its outcome; a topic whose metadata has not come yet counts as used, and the
answer that first brings it too, as Java's ``newTopics``) -- with
its per-partition bookkeeping, so a producer that writes to many short-lived topics does
not refresh them all forever. A later send to it is a first send again.

Pure: time is the ``now`` argument, randomness the ``rng`` handed in.
"""

from __future__ import annotations

import datetime
import enum
import logging
import random
import uuid
from collections import deque
from collections.abc import Sequence
from typing import Any, Final

import attrs

from kafkastate.core import report
from kafkastate.core.client import (
    Client,
    ClientConfig,
    ClientDriven,
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    NodeDisconnected,
    NodeState,
    RequestCompleted,
    RequestFailed,
    RequestId,
    TokenRequested,
)
from kafkastate.core.metadata import NodeId
from kafkastate.core.metrics import ProducerCounters, throttle_seconds
from kafkastate.core.producer.accumulator import (
    Accumulator,
    AccumulatorConfig,
    BatchState,
    BufferFullError,
    BufferSpaceFreed,
    FlushCompleted,
    FlushId,
    ProducerBatch,
    RecordId,
    RecordsAcknowledged,
    RecordsAdmitted,
    RecordsFailed,
)
from kafkastate.core.producer.idempotence import (
    Idempotence,
    IdempotenceState,
    init_producer_id_request,
)
from kafkastate.core.producer.partitioner import (
    CustomPartitioner,
    Partitioner,
    PluggablePartitioner,
)
from kafkastate.core.producer.pending import MetadataPendingError
from kafkastate.core.producer.transactions import (
    TRANSACTIONAL_MAX_VERSIONS,
    TransactionManager,
    TransactionOperationCompleted,
    TransactionOpId,
)
from kafkastate.core.protocol import records as _records
from kafkastate.core.protocol.framing import produce_request
from kafkastate.core.protocol.versions import ApiVersionTable
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    RemoteProtocolError,
    TransactionStateError,
    error_for_code,
)
from kafkastate.structs import ConsumerGroupMetadata

__all__ = [
    "PRODUCER_STATES",
    "MetadataPendingError",
    "ProducerClosed",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerEvent",
    "ProducerFailed",
    "ProducerIdAssigned",
    "ProducerMachine",
    "ProducerState",
]

_TP = tuple[str, int]
_INT32_MAX: Final = 2**31 - 1
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_DUPLICATE_SEQUENCE: Final = 46
_MESSAGE_TOO_LARGE: Final = 10
_OUT_OF_ORDER_SEQUENCE: Final = 45
_INVALID_PRODUCER_EPOCH: Final = 47
_UNKNOWN_PRODUCER_ID: Final = 59
# The broker lost or rejected our producer state: bump the epoch (KIP-360).
_SEQUENCE_ERRORS: Final = frozenset(
    {_OUT_OF_ORDER_SEQUENCE, _INVALID_PRODUCER_EPOCH, _UNKNOWN_PRODUCER_ID}
)
# Nothing this producer can do fixes these (Java: fatal for an idempotent producer).
_FATAL_ERRORS: Final = frozenset(
    {
        90,  # PRODUCER_FENCED
        31,  # CLUSTER_AUTHORIZATION_FAILED (IDEMPOTENT_WRITE denied on old brokers)
        53,  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        49,  # INVALID_PRODUCER_ID_MAPPING
    }
)


log = logging.getLogger("kafkastate.producer")


# ---------------------------------------------------------------------------------- config


def _to_acks(value: Any) -> int:
    if value == "all":
        return -1
    if isinstance(value, bool) or value not in (0, 1, -1):
        raise KafkaConfigurationError(f"acks must be 0, 1, -1 or 'all', got {value!r}")
    return int(value)


def _int_at_least(minimum: int) -> Any:
    def check(_inst: object, attr: attrs.Attribute[Any], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise KafkaConfigurationError(f"{attr.name} must be an int >= {minimum}, got {value!r}")

    return check


def _transactional_id(_inst: object, _attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise KafkaConfigurationError(
            f"transactional_id must be a non-empty str or None, got {value!r}"
        )


def _positive_seconds(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise KafkaConfigurationError(f"{attr.name} must be a number > 0, got {value!r}")


def _optional_bool(_inst: object, attr: attrs.Attribute[Any], value: bool | None) -> None:
    if value is not None and not isinstance(value, bool):
        raise KafkaConfigurationError(f"{attr.name} must be True, False or None, got {value!r}")


@attrs.frozen(kw_only=True)
class ProducerConfig:
    """Settings of a :class:`ProducerMachine`. Durations are float seconds.

    ``delivery.timeout.ms``, ``request.timeout.ms``, ``linger.ms``, ``batch.size``,
    ``buffer.memory``, ``max.request.size``, ``compression.type`` and the retry backoffs
    live in :attr:`accumulator` (see :attr:`delivery_timeout`, :attr:`request_timeout`).
    """

    client: ClientConfig
    """Bootstrap servers, connection, metadata and reconnect settings."""
    accumulator: AccumulatorConfig = attrs.field(factory=AccumulatorConfig)
    """Batching, buffer memory, compression, delivery timeout, retry backoff."""
    acks: int = attrs.field(default=-1, converter=_to_acks)
    """``acks``: 0 (no response), 1 (leader) or -1 / ``"all"`` (all in-sync replicas)."""
    enable_idempotence: bool | None = attrs.field(default=None, validator=_optional_bool)
    """``enable.idempotence``. None (the default) means on unless ``acks`` is not all,
    ``max_in_flight_requests_per_connection`` exceeds 5 or ``retries`` is 0 -- then off,
    as the Java client (3.0+) does; True with such settings is refused."""
    max_in_flight_requests_per_connection: int = attrs.field(default=5, validator=_int_at_least(1))
    """``max.in.flight.requests.per.connection``: Produce requests outstanding per broker.
    The connection's own ``max_in_flight`` caps what is on the wire."""
    retries: int = attrs.field(default=_INT32_MAX, validator=_int_at_least(0))
    """``retries``: re-sends per batch after retriable errors; ``delivery.timeout.ms``
    bounds them anyway (KIP-91)."""
    transactional_id: str | None = attrs.field(default=None, validator=_transactional_id)
    """``transactional.id``: makes the producer transactional (see
    :class:`~kafkastate.core.producer.transactions.TransactionManager`); implies
    idempotence."""
    partitioner: CustomPartitioner | PluggablePartitioner | None = None
    """A custom partitioner (aiokafka's callable, or a kafka-python 3.0 partitioner
    object), or None for the Java default."""
    transaction_timeout: float = attrs.field(default=60.0, validator=_positive_seconds)
    """``transaction.timeout.ms``, sent in InitProducerId (ignored without transactions):
    the coordinator aborts a transaction left open longer."""
    metadata_max_idle: float = attrs.field(default=300.0, validator=_positive_seconds)
    """``metadata.max.idle.ms``: a topic not sent to for this long (nothing appended,
    nothing pending for it) leaves the metadata of interest at the next metadata update;
    a later send asks for its metadata again."""
    transaction_defence: bool = attrs.field(
        default=True, validator=attrs.validators.instance_of(bool)
    )
    """The client-side KIP-890 defence: re-initialise (epoch + 1) before the next
    transaction when a coordinator request's outcome was lost. Leave it on; it exists so
    the simulator can show the anomaly it prevents (DST.md scenario 9)."""

    def __attrs_post_init__(self) -> None:
        if self.transactional_id is not None and self.enable_idempotence is False:
            raise KafkaConfigurationError(
                "transactional_id needs idempotence: leave enable_idempotence None or True"
            )
        if self.enable_idempotence is True or self.transactional_id is not None:
            if self.acks != -1:
                raise KafkaConfigurationError(
                    "enable_idempotence=True (and transactional_id) requires acks='all' (-1), "
                    f"got acks={self.acks}"
                )
            if self.max_in_flight_requests_per_connection > 5:
                raise KafkaConfigurationError(
                    "enable_idempotence=True requires max_in_flight_requests_per_connection "
                    f"<= 5, got {self.max_in_flight_requests_per_connection}"
                )
            if self.retries == 0:
                raise KafkaConfigurationError("enable_idempotence=True requires retries > 0")

    @property
    def idempotent(self) -> bool:
        """Whether idempotence is in effect (explicitly, or by default with compatible
        settings)."""
        if self.enable_idempotence is not None or self.transactional_id is not None:
            return self.enable_idempotence is not False
        return (
            self.acks == -1 and self.max_in_flight_requests_per_connection <= 5 and self.retries > 0
        )

    @property
    def delivery_timeout(self) -> float:
        """``delivery.timeout.ms`` (from :attr:`accumulator`)."""
        return self.accumulator.delivery_timeout

    @property
    def request_timeout(self) -> float:
        """``request.timeout.ms`` (from :attr:`accumulator`): the Produce request's timeout
        and the acks timeout sent to the broker."""
        return self.accumulator.request_timeout


# ---------------------------------------------------------------------------------- events


@attrs.frozen(kw_only=True)
class ProducerIdAssigned:
    """InitProducerId answered: batches are stamped with this id and epoch from now on."""

    producer_id: int
    """The producer id."""
    producer_epoch: int
    """The epoch."""
    bumped: bool
    """True for an epoch bump after a sequence error (KIP-360), False for the first id."""


@attrs.frozen(kw_only=True)
class ProducerFailed:
    """A fatal error (PRODUCER_FENCED, an authorization failure...): every pending record
    failed with it and further sends raise it. Close the producer."""

    error: KafkaError
    """Why."""


@attrs.frozen(kw_only=True)
class ProducerClosed:
    """:meth:`ProducerMachine.close` or :meth:`~ProducerMachine.abort` finished: every record
    has its outcome and the connections were closed."""


ProducerEvent = (
    ConnectRequested
    | CloseRequested
    | TokenRequested
    | MetadataUpdated
    | RecordsAcknowledged
    | RecordsFailed
    | RecordsAdmitted
    | BufferSpaceFreed
    | FlushCompleted
    | ProducerIdAssigned
    | ProducerFailed
    | ProducerClosed
    | TransactionOperationCompleted
    | report.StatisticsReported
)


class ProducerState(enum.Enum):
    """Lifecycle of a :class:`ProducerMachine`."""

    OPEN = "open"
    """Accepting records."""
    CLOSING = "closing"
    """close() called: sending what is left, refusing new records."""
    FAILED = "failed"
    """A fatal error: records are refused; close or abort."""
    CLOSED = "closed"
    """Done; connections closed."""


_OPEN: Final = ProducerState.OPEN  # (send's hot path: one global, not an attribute lookup)


# STYLE §6: close() moves OPEN to CLOSING; a fatal error moves OPEN or CLOSING to FAILED;
# finishing (nothing left to send, or a failed producer closed) ends in CLOSED.
PRODUCER_STATES: Final = register(
    StateTable(
        machine="ProducerMachine",
        states=ProducerState,
        initial=ProducerState.OPEN,
        transitions={
            ProducerState.OPEN: {ProducerState.CLOSING, ProducerState.FAILED, ProducerState.CLOSED},
            ProducerState.CLOSING: {ProducerState.FAILED, ProducerState.CLOSED},
            ProducerState.FAILED: {ProducerState.CLOSED},
            ProducerState.CLOSED: set(),
        },
    )
)


@attrs.define(slots=True)
class _Produce:
    node_id: NodeId
    batches: dict[tuple[str | uuid.UUID, int], ProducerBatch]


def _overtaken_error(where: str, batch: ProducerBatch) -> KafkaError:
    """The error of a batch answered OUT_OF_ORDER_SEQUENCE_NUMBER after a later one of its
    partition was acknowledged: most likely written, never sent again."""
    context: dict[str, object] = {"topic": batch.topic, "partition": batch.partition}
    return error_for_code(_OUT_OF_ORDER_SEQUENCE)(
        f"{batch.record_count} record(s) to {where} (sequence {batch.base_sequence}) were "
        "overtaken by a later acknowledged batch: the broker most likely wrote them and the "
        "acknowledgement was lost; not sent again, so as not to write them twice (offsets "
        "unknown)",
        **context,
    )


def _ms_to_seconds_text(seconds: float) -> str:
    return f"{seconds:g} s"


def _append_time_ms(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return (value - _EPOCH) // datetime.timedelta(milliseconds=1)
    return int(value)


class ProducerMachine(ClientDriven):
    """The sans-IO producer: records in, Produce requests out, outcomes as events.

    Args:
        config: producer settings.
        rng: seeded randomness (backoff jitter, sticky partitions, node choice); adapters
            pass ``random.SystemRandom()``, the simulator a seeded ``random.Random``.
    """

    def __init__(self, config: ProducerConfig, *, rng: random.Random) -> None:
        self.config = config
        self._client = Client(config.client, rng=rng, topics=())
        self._metadata = self._client.metadata
        self._partitioner = Partitioner(
            rng=rng, batch_size=config.accumulator.batch_size, custom=config.partitioner
        )
        counters = ProducerCounters(config.client.metrics_samples, config.client.metrics_window)
        self._acc = Accumulator(
            config.accumulator, rng=rng, partitioner=self._partitioner, counters=counters
        )
        transactional = config.transactional_id is not None
        self._idem: Idempotence | None = (
            Idempotence(transactional=transactional) if config.idempotent else None
        )
        self._txn: TransactionManager | None = None
        if config.transactional_id is not None:
            assert self._idem is not None
            self._txn = TransactionManager(
                transactional_id=config.transactional_id,
                transaction_timeout=config.transaction_timeout,
                request_timeout=config.request_timeout,
                retry_backoff=config.accumulator.retry_backoff,
                client=self._client,
                idempotence=self._idem,
                accumulator=self._acc,
                on_fatal=self._on_txn_fatal,
                defence=config.transaction_defence,
            )
        self._state = ProducerState.OPEN
        self._close_requested = False
        self._fatal: KafkaError | None = None
        self._events: deque[ProducerEvent] = deque()
        self._requests: dict[RequestId, _Produce] = {}
        self._node_requests: dict[NodeId, int] = {}
        self._tp_in_flight: dict[_TP, int] = {}
        self._partitions: dict[_TP, None] = {}  # every partition appended to, in order
        self._init_rid: RequestId | None = None
        self._init_retry_at: float | None = None
        self._next_ready_at: float | None = None
        self._kick_at: float | None = None
        self._now = 0.0
        # topics handed to the metadata -> when last used (sent to, pending, or waiting
        # for its metadata): idle ones leave it (metadata.max.idle.ms)
        self._tracked: dict[str, float] = {}
        # tracked topics no metadata answer has named yet (Java ProducerMetadata.newTopics):
        # the answer that first names one keeps it, however long it took
        self._unanswered: dict[str, None] = {}
        self.steps = 0
        """How many times the machine has re-examined its state; it only grows (read it,
        do not set it).

        A cheap change detector for drivers: :meth:`send` appending to a batch that has
        room changes no output and no deadline, and leaves this unchanged. If it changed
        across a command, the driver should look at :meth:`data_to_send`,
        :meth:`next_event` and :meth:`get_timer` again. (A plain attribute: drivers read
        it twice per record.)"""
        self.urgent_steps = 0
        """How many of :attr:`steps` may have left work for the driver *now* (bytes to
        write, events, a send waiting for metadata or memory); it only grows.

        A step that only opened a batch waiting for its linger (a new deadline, nothing
        sendable) moves :attr:`steps` but not this: a driver then re-reads
        :meth:`get_timer` when it next runs, and an awaited send need not yield to it (with
        keys spread over partitions, a batch opens every few records)."""

    # ---------------------------------------------------------------- queries

    @property
    def accumulator(self) -> Accumulator:
        """The accumulator (buffer usage, queued batches)."""
        return self._acc

    @property
    def counters(self) -> ProducerCounters:
        """What the producer counted (:mod:`kafkastate.core.metrics`); the Client's own
        counters are ``client.counters``."""
        return self._acc.counters

    @property
    def requests_in_flight(self) -> int:
        """Produce requests awaiting a response."""
        return len(self._requests)

    @property
    def fatal_error(self) -> KafkaError | None:
        """The error that failed the producer for good, or None."""
        return self._fatal

    @property
    def state(self) -> ProducerState:
        """The lifecycle state."""
        return self._state

    @property
    def idempotence(self) -> Idempotence | None:
        """The idempotence bookkeeping, or None when idempotence is off."""
        return self._idem

    @property
    def transactions(self) -> TransactionManager | None:
        """The transaction manager, or None without ``transactional_id``."""
        return self._txn

    @property
    def producer_id(self) -> int:
        """The producer id, -1 before InitProducerId or without idempotence."""
        return -1 if self._idem is None else self._idem.producer_id

    @property
    def producer_epoch(self) -> int:
        """The producer epoch, -1 before InitProducerId or without idempotence."""
        return -1 if self._idem is None else self._idem.producer_epoch

    # --------------------------------------------------------------- commands

    def send(
        self,
        topic: str,
        *,
        value: bytes | bytearray | memoryview | None,
        key: bytes | bytearray | memoryview | None = None,
        partition: int | None = None,
        timestamp_ms: int,
        headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]] = (),
        now: float,
        block: bool = True,
    ) -> RecordId:
        """Append one record; it is sent when its batch is ready.

        Args:
            topic: the topic.
            value: serialized value, or None (a tombstone).
            key: serialized key, or None.
            partition: an explicit partition, or None to let the partitioner choose.
            timestamp_ms: create time, ms since the epoch.
            headers: ``(key, value)`` pairs.
            now: the driver's clock.
            block: False for a caller that cannot wait (a fire-and-forget ``send_nowait``,
                confluent-kafka's ``produce()``): a record that does not fit
                ``buffer.memory`` now, or that comes while earlier sends wait for it, is
                refused with ``BufferFullError`` (a builtin ``BufferError`` too) instead of
                waiting; one whose topic metadata is pending is still held (Java's
                ``waitOnMetadata``) if it fits ``buffer.memory`` (it counts there
                meanwhile), so its outcome, or its ``KafkaTimeoutError`` at ``max_block``,
                comes as events like any other record's.

        Waiting: with ``max_block`` set (``config.accumulator.max_block``), a record whose
        topic (or explicit partition) is not in the metadata yet, or that does not fit
        ``buffer.memory`` now -- or that comes while earlier sends wait -- waits in the
        core; its id is returned all the same and :meth:`is_waiting` says so. A
        :class:`RecordsAdmitted` naming it follows when it is appended, then its outcome as
        for any record; or a :class:`RecordsFailed` with ``KafkaTimeoutError`` at its
        ``max_block`` deadline (:meth:`get_timer`), with the partitioner's error if the
        metadata refuses it for good, or with ``ProducerClosedError`` if the producer is
        closed or aborted meanwhile.

        Returns:
            The record's id; exactly one RecordsAcknowledged or RecordsFailed names it.

        Raises:
            MetadataPendingError: no metadata for the topic yet and no ``max_block``
                (retriable: wait for MetadataUpdated, then send again).
            UnknownTopicOrPartitionError: the explicit partition is not in the metadata
                and no ``max_block`` (retriable while the topic may still grow).
            BufferFullError: no room in ``buffer.memory`` now and no ``max_block``, or
                ``block`` False (retriable: wait for BufferSpaceFreed).
            MessageTooLargeError: the record can never fit a request.
            PartitionerError, KafkaConfigurationError: bad partitioner result or argument.
            ProducerClosedError: the producer is closing or closed (:meth:`ensure_open`).
            KafkaError: the producer failed fatally (the error of its ProducerFailed).
        """
        if partition is None and not headers:
            # The common cases in one step (send_plain): None when the general path decides.
            rid = self.send_plain(topic, value, key, timestamp_ms, now)
            if rid is not None:
                return rid
        txn = self._txn
        if self._state is not _OPEN:
            self.ensure_open("send")
        if txn is not None:
            txn.check_send()
        if not isinstance(topic, str) or not topic:
            raise KafkaConfigurationError(f"topic must be a non-empty str, got {topic!r}")
        if topic not in self._tracked:
            self._track(topic, now)
        cluster = self._client.cluster
        acc = self._acc
        if topic not in cluster.topics or (acc.waiting_sends and acc.holds(topic)):
            record = (timestamp_ms, key, value, headers)
            cause = MetadataPendingError(topic)
            return self._hold(topic, [record], partition, cause, now, block=block)
        try:
            partitioner = self._partitioner
            if key is None:
                hint = None
                if partition is None and partitioner.wants_batch_hint:
                    record = (timestamp_ms, key, value, headers)

                    def hint(p: int) -> bool:
                        return acc.opens_batch(topic, p, record)

                chosen = partitioner.partition(
                    topic, None, cluster, explicit=partition, value=value, opens_batch=hint
                )
                sticky = partition is None and partitioner.custom is None
            else:
                chosen = partitioner.partition(
                    topic, bytes(key), cluster, explicit=partition, value=value
                )
                sticky = False
        except KafkaError as exc:
            if not exc.retriable:
                raise
            # a retriable topic error, or an explicit partition the topic does not have yet
            record = (timestamp_ms, key, value, headers)
            return self._hold(topic, [record], partition, exc, now, block=block)
        try:
            rid = acc.append(
                topic,
                chosen,
                timestamp_ms=timestamp_ms,
                key=key,
                value=value,
                headers=headers,
                now=now,
                sticky=sticky,
                block=block,
            )
        except BufferFullError:
            # The pool is exhausted: every batch is sendable now, lingering or not (Java's
            # RecordAccumulator). Step, so the refusal's caller -- who waits for room --
            # does not wait for a linger too (drivers see ``steps`` move).
            self._step(now, expire_waiting=False)
            raise
        if txn is not None and not acc.is_waiting(rid) and txn.add_partition(topic, chosen):
            # New to the transaction: AddPartitionsToTxn before any batch of it (KIP-98).
            # (A record that waits for memory adds its partition when admitted.)
            acc.take_readiness_changed()
            self._partitions[(topic, chosen)] = None
            self._step(now, expire_waiting=False)
        elif acc.take_readiness_changed():
            # A new batch (a new linger deadline; maybe a new partition), a full one, or a
            # record that waits for buffer memory (every partition is sendable then).
            self._partitions[(topic, chosen)] = None
            deadline = acc.take_quiet_open(cluster) if txn is None else None
            if deadline is None:
                self._step(now, expire_waiting=False)
            else:
                # Only a new linger deadline: no need to look at everything again, but
                # drivers must see the new timer (steps moved).
                if self._next_ready_at is None or deadline < self._next_ready_at:
                    self._next_ready_at = deadline
                self.steps += 1
                self._now = max(self._now, now)
        elif now > self._now:
            self._now = now
        return rid

    def send_plain(
        self,
        topic: str,
        value: bytes | bytearray | memoryview | None,
        key: bytes | bytearray | memoryview | None,
        timestamp_ms: int,
        now: float,
        /,
    ) -> RecordId | None:
        """:meth:`send`'s hot path, positional (drivers call it once per record): a record
        without an explicit partition or headers, appended in one step to an open batch
        that takes it without filling up -- keyless to the sticky partition's, keyed to
        the default partitioner's choice.

        It never refuses, waits or steps: whenever anything could differ (no lane or
        cached partition count yet, a batch the record might fill, a buffer nearly full,
        sends waiting, a transaction, a producer that is not open, a custom partitioner,
        an argument of an unusual type) nothing changes and it returns None; then call
        :meth:`send`, which decides. The outcome of a record it took is what :meth:`send`
        would give, and it leaves :attr:`steps` as it was.

        Args:
            topic: the topic.
            value: serialized value, or None (a tombstone: always None here).
            key: serialized key, or None.
            timestamp_ms: create time, ms since the epoch.
            now: the driver's clock.

        Returns:
            The record's id, or None: not appended, call :meth:`send`.
        """
        if self._txn is not None or self._state is not _OPEN:
            return None
        # With the C accelerator the accumulator's hot paths are called compiled, directly.
        acc = self._acc
        cluster = self._metadata.cluster
        bytes_value: Any = value  # anything but bytes: the hot paths say None
        if key is None:
            c_sticky = _records._c_lane_sticky
            if c_sticky is None:
                rid = acc.append_sticky(topic, timestamp_ms, bytes_value, cluster)
            else:
                rid = c_sticky(acc, topic, timestamp_ms, bytes_value, cluster)
                if rid is not None:  # the compiled step counts the record's bytes only
                    acc.count_record_overhead()
        else:
            bytes_key: Any = key
            c_hashed = _records._c_lane_hashed
            rid = (
                None
                if c_hashed is None
                else c_hashed(
                    acc, self._partitioner, topic, timestamp_ms, bytes_key, bytes_value, cluster
                )
            )
            if rid is not None:  # the compiled step counts the record's bytes only
                acc.count_record_overhead()
            else:  # (compiled: no partition count cached yet, or a full batch)
                chosen = self._partitioner.key_partition(topic, bytes_key, cluster)
                if chosen is not None:
                    rid = acc.append_keyed(topic, chosen, timestamp_ms, bytes_key, bytes_value)
        if rid is not None and now > self._now:  # (the hot path: no max() call)
            self._now = now
        return rid

    def send_batch(
        self,
        topic: str,
        partition: int,
        records: Sequence[
            tuple[
                int,
                bytes | bytearray | memoryview | None,
                bytes | bytearray | memoryview | None,
                Sequence[tuple[str, bytes | bytearray | memoryview | None]],
            ]
        ],
        *,
        now: float,
    ) -> list[RecordId]:
        """Append records as one batch of their own, to one partition (aiokafka's
        ``send_batch``): they get consecutive offsets and no other record joins them.

        Args:
            topic: the topic.
            partition: the partition (required: a batch is never partitioned).
            records: ``(timestamp_ms, key, value, headers)`` per record, in order.
            now: the driver's clock.

        Waiting is as for :meth:`send`: with ``max_block`` set the batch may wait for
        metadata or buffer memory (:meth:`is_waiting` of its first id).

        Returns:
            The records' ids, in order; each is named by a RecordsAcknowledged or
            RecordsFailed.

        Raises:
            MetadataPendingError, UnknownTopicOrPartitionError, BufferFullError: retriable,
                as for :meth:`send`.
            MessageTooLargeError: the batch can never fit a request.
            KafkaConfigurationError: no records or a bad argument.
            ProducerClosedError: the producer is closing or closed.
            KafkaError: the producer failed fatally.
        """
        if self._state is not _OPEN:
            self.ensure_open("send_batch")
        if self._txn is not None:
            self._txn.check_send()
        if not isinstance(topic, str) or not topic:
            raise KafkaConfigurationError(f"topic must be a non-empty str, got {topic!r}")
        if partition is None:
            raise KafkaConfigurationError("send_batch needs an explicit partition")
        if topic not in self._tracked:
            self._track(topic, now)
        cluster = self._client.cluster
        acc = self._acc
        try:
            if topic not in cluster.topics or (acc.waiting_sends and acc.holds(topic)):
                raise MetadataPendingError(topic)
            chosen = self._partitioner.partition(topic, None, cluster, explicit=partition)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            first = self._hold(topic, records, partition, exc, now, batch=True)
            return [RecordId(first + i) for i in range(len(records))]
        rids = self._acc.append_batch(topic, chosen, records, now=now)
        if self._txn is not None and not self._acc.is_waiting(rids[0]):
            self._txn.add_partition(topic, chosen)
        self._acc.take_readiness_changed()
        self._partitions[(topic, chosen)] = None
        self._step(now, expire_waiting=False)
        return rids

    def is_waiting(self, record_id: RecordId) -> bool:
        """Whether the send that returned ``record_id`` (the first id of a
        :meth:`send_batch`) waits for its topic's metadata or for ``buffer.memory``.

        Args:
            record_id: an id :meth:`send` returned.

        Returns:
            True until a RecordsAdmitted or RecordsFailed names it; an adapter whose
            caller blocks in ``send`` waits for one of those.
        """
        return self._acc.is_waiting(record_id)

    def withdraw(self, record_id: RecordId, *, now: float) -> bool:
        """Take back a send that still waits for metadata or ``buffer.memory`` (its caller
        stopped waiting: a cancelled task). No event will name its records.

        Args:
            record_id: an id :meth:`send` (or the first :meth:`send_batch`) returned.
            now: the driver's clock.

        Returns:
            True if it was waiting and is gone; False if it was admitted or failed already
            (its events are out or queued).
        """
        gone = self._acc.withdraw(record_id, now=now)
        if gone:
            self._step(now)  # the sends behind it may fit now
        return gone

    def track_topics(self, topics: Sequence[str], *, now: float | None = None) -> None:
        """Fetch metadata for ``topics`` ahead of their first :meth:`send`.

        They count as used at ``now``: left unused for ``metadata_max_idle`` after their
        metadata came, they leave the metadata of interest like any idle topic.

        Args:
            topics: topic names.
            now: the driver's clock; None for the last time the machine was given.
        """
        at = self._now if now is None else now
        for topic in topics:
            self._track(topic, at)

    @property
    def tracked_topics(self) -> tuple[str, ...]:
        """The topics whose metadata the producer keeps (sorted): those sent to (or
        tracked) and not idle past ``metadata_max_idle`` (``metadata.max.idle.ms``)."""
        return tuple(sorted(self._tracked))

    def flush(self, *, now: float | None = None) -> FlushId:
        """Send everything now (no linger) and report when every earlier record is done.

        Args:
            now: the driver's clock; without it the work happens at the next
                :meth:`handle_timer` (``get_timer`` says "now").

        Returns:
            The id of the :class:`FlushCompleted` that follows.
        """
        fid = self._acc.flush()
        if now is None:
            self._kick_at = self._now
        else:
            self._step(now)
        self._pull()
        return fid

    # -- transactions (KIP-98); see kafkastate.core.producer.transactions

    def _transactions(self, call: str) -> TransactionManager:
        if self._state is not _OPEN:
            self.ensure_open(call)  # closed first, as a send (and aiokafka's calls)
        if self._txn is None:
            raise TransactionStateError(
                f"{call}: this producer has no transactional_id; set one to use transactions"
            )
        return self._txn

    def init_transactions(self, *, now: float) -> TransactionOpId:
        """Get the producer id and epoch for the ``transactional_id`` (InitProducerId),
        fencing any earlier producer with the same id and aborting what it left open.

        Args:
            now: the driver's clock.

        Returns:
            The id of the :class:`TransactionOperationCompleted` that follows.

        Raises:
            TransactionStateError: no ``transactional_id``, or already initialised.
            ProducerClosedError: the producer is closing or closed.
            KafkaError: the producer failed fatally.
        """
        op = self._transactions("init_transactions").init(now=now)
        self._step(now)
        return op

    def begin_transaction(self) -> None:
        """Open a transaction (local; records and offsets sent from now on join it).

        Raises:
            TransactionStateError: not initialised, a transaction already open, or another
                transactional operation under way.
            TransactionFailedError: the previous transaction failed: abort it first.
            ProducerClosedError: the producer is closing or closed.
            KafkaError: the producer failed fatally.
        """
        self._transactions("begin_transaction").begin()

    def send_offsets_to_transaction(
        self,
        offsets: Any,
        group: str | ConsumerGroupMetadata,
        *,
        now: float,
    ) -> TransactionOpId:
        """Commit consumer offsets as part of the open transaction (AddOffsetsToTxn, then
        TxnOffsetCommit to the group coordinator; KIP-447 fencing with group metadata).

        Args:
            offsets: ``(topic, partition) -> offset`` of the next record to consume (or an
                ``OffsetAndMetadata``).
            group: the consumer group id, or its :class:`~kafkastate.structs.ConsumerGroupMetadata`.
            now: the driver's clock.

        Returns:
            The id of the :class:`TransactionOperationCompleted` that follows.

        Raises:
            TransactionStateError: no transaction open, or another operation under way.
            TransactionFailedError: the transaction failed: abort it.
            TypeError, ValueError: bad offsets or group (the message names it).
            ProducerClosedError: the producer is closing or closed.
            KafkaError: the producer failed fatally.
        """
        txn = self._transactions("send_offsets_to_transaction")
        op = txn.send_offsets(offsets, group, now=now)
        self._step(now)
        return op

    def commit_transaction(self, *, now: float) -> TransactionOpId:
        """Send every record of the transaction, then commit it (EndTxn).

        Args:
            now: the driver's clock.

        Returns:
            The id of the :class:`TransactionOperationCompleted` that follows; its error is
            a TransactionFailedError if a record or the offsets failed (abort then).

        Raises:
            TransactionStateError: no transaction open, or another operation under way.
            TransactionFailedError: the transaction already failed: abort it.
            ProducerClosedError: the producer is closing or closed.
            KafkaError: the producer failed fatally.
        """
        op = self._transactions("commit_transaction").commit(now=now)
        self._step(now)
        return op

    def abort_transaction(self, *, now: float) -> TransactionOpId:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError,
        the rest is discarded by the brokers (EndTxn abort).

        Args:
            now: the driver's clock.

        Returns:
            The id of the :class:`TransactionOperationCompleted` that follows.

        Raises:
            TransactionStateError: no transaction open, or another operation under way.
            ProducerClosedError: the producer is closing or closed.
            KafkaError: the producer failed fatally.
        """
        op = self._transactions("abort_transaction").abort(now=now)
        self._step(now)
        return op

    def ensure_open(self, call: str, *, advice: str = "") -> None:
        """Refuse a call on a producer that takes no more work: every command checks this,
        and an adapter asks it first when the call would not reach the machine (the
        producer's block or thread has ended).

        Args:
            call: the call's name, for the message.
            advice: appended to the message (how the face is meant to be used).

        Raises:
            ProducerClosedError: :meth:`close` or :meth:`abort` was called (an
                ``IllegalStateError``, kafka-python's type for a closed producer; aiokafka's
                ``ProducerClosed``).
            KafkaError: the producer failed fatally (the error of its ProducerFailed).
        """
        state = self._state
        if state is _OPEN:
            return
        if self._fatal is not None and state is ProducerState.FAILED:
            raise self._fatal
        raise ProducerClosedError(f"{call}: the producer is {state.value}{advice}")

    def close(self, *, now: float) -> None:
        """Refuse new records, send what is pending, then close the connections.

        :class:`ProducerClosed` follows once every record has its outcome (records that
        cannot be delivered fail at their delivery timeout; use :meth:`abort` to stop
        sooner).

        Args:
            now: the driver's clock.
        """
        if self._state is ProducerState.OPEN:
            self._transition(ProducerState.CLOSING, what="close")
        if self._state is ProducerState.CLOSED:
            return
        self._close_requested = True
        if self._acc.waiting_sends:
            # aiokafka's send raises ProducerClosed when stop() comes while it waits
            self._acc.fail_waiting(
                ProducerClosedError(
                    "the producer was closed while the record waited for topic metadata "
                    "or buffer memory (buffer_memory)"
                ),
                now=now,
            )
        if not self._acc.closed:
            self._acc.close()
        if self._txn is not None:
            self._txn.abort_on_close(now=now)  # Java aborts an open transaction too
        self._step(now)

    def abort(self, *, now: float) -> None:
        """Fail every pending record with ProducerClosedError and close at once.

        Args:
            now: the driver's clock.
        """
        if self._state is ProducerState.CLOSED:
            return
        self._pull_client(now)
        if self._acc.waiting_sends:
            self._acc.fail_waiting(
                ProducerClosedError(
                    "the producer was aborted while the record waited for topic metadata "
                    "or buffer memory (buffer_memory)"
                ),
                now=now,
            )
        error = ProducerClosedError("the producer was aborted")
        if self._txn is not None:
            self._txn.fenced(error, now=now)
        self._fail_everything(error, now)
        self._finish()

    # ------------------------------------------------------------ IO inputs

    def receive_data(self, node_id: NodeId, data: bytes, *, now: float) -> None:
        """Bytes read from ``node_id``'s socket (``b""`` = EOF)."""
        self._client.receive_data(node_id, data, now=now)
        self._step(now)

    def handle_timer(self, *, now: float) -> None:
        """Run everything whose deadline passed. Safe to call early or twice."""
        self._kick_at = None
        if self._state is ProducerState.CLOSED:
            return
        self._client.handle_timer(now=now)
        self._step(now)
        if self._client.statistics_due(now=now):
            self._emit(report.StatisticsReported(stats=report.statistics(self, now)))

    # ----------------------------------------------------------- IO outputs

    def next_event(self) -> ProducerEvent | None:
        """The next event, or None."""
        self._pull()
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` must run, or None."""
        if self._state is ProducerState.CLOSED:
            return None
        deadlines = [
            t
            for t in (
                self._client.get_timer(),
                self._kick_at,
                self._next_ready_at,
                self._acc.next_expiry_at(),
                self._acc.next_wait_deadline(),  # max_block of the first waiting send
                self._init_retry_at if self._init_rid is None else None,
                None if self._txn is None else self._txn.get_timer(),
            )
            if t is not None
        ]
        timeout = self.config.delivery_timeout
        deadlines.extend(b.created + timeout for b in self._acc.in_flight_batches())
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------- internals

    def _transition(self, new: ProducerState, *, what: str) -> None:
        self._state = transition(PRODUCER_STATES, self._state, new, what=what)

    def _pull(self) -> None:
        """Move accumulator and transaction events into the producer's queue, keeping
        their order."""
        while (event := self._acc.next_event()) is not None:
            self._events.append(event)
        txn = self._txn
        if txn is not None:
            while (done := txn.next_event()) is not None:
                self._events.append(done)

    def _emit(self, event: ProducerEvent) -> None:
        self._pull()
        self._events.append(event)

    def _step(self, now: float, *, expire_waiting: bool = True) -> None:
        self.steps += 1
        self.urgent_steps += 1
        self._now = max(self._now, now)
        if self._state is ProducerState.CLOSED:
            return
        acc = self._acc
        for _ in range(8):
            self._pull_client(now)
            self._expire(now)
            if acc.waiting_sends:
                refused = self._client.authentication_refused
                if refused is not None:
                    # The cluster refused our credentials: metadata will not come, so what
                    # waits for it fails now, not at max_block_ms (Java's send raises too).
                    acc.fail_waiting(refused, now=now)
            if acc.waiting_sends:
                self._admit(now, expire_waiting)
            self._maybe_init(now)
            self._send_ready(now)
            self._pull_client(now)
            if self._maybe_finish():
                break
            # Handling responses may have asked the Client for work that is due at once
            # (a metadata refresh after NOT_LEADER): let it run now, or its deadline would
            # already be past when the driver next looks. Likewise memory freed after the
            # admission above (acks=0 completes at once) lets waiting sends in now.
            due = self._client.get_timer()
            if due is None or due > now:
                if not acc.admission_pending():
                    break
            else:
                self._client.handle_timer(now=now)
        self._pull()

    def _hold(
        self,
        topic: str,
        records: Sequence[tuple[int, Any, Any, Any]],
        partition: int | None,
        cause: KafkaError,
        now: float,
        *,
        batch: bool = False,
        block: bool = True,
    ) -> RecordId:
        """Hold a send until the metadata routes it (or raise ``cause`` if nothing may
        wait); it counts against ``buffer.memory`` meanwhile. See :meth:`Accumulator.hold`."""
        try:
            rid = self._acc.hold(
                topic, records, explicit=partition, batch=batch, cause=cause, now=now, block=block
            )
        except BufferFullError:
            self._step(now, expire_waiting=False)  # every batch is sendable now (as append)
            raise
        if topic in self._client.cluster.topics:
            self._metadata.request_update()  # the topic is known: its partitions may grow
        self._step(now, expire_waiting=False)  # a new deadline, maybe a metadata request
        return rid

    def _admit(self, now: float, expire: bool) -> None:
        """Sends that wait: route the ones held for metadata, time out the ones past
        ``max_block``, admit the ones waiting for buffer memory in FIFO order."""
        if self._state not in (ProducerState.OPEN, ProducerState.CLOSING):
            return
        acc = self._acc
        cluster = self._client.cluster
        routed, refresh = acc.route_held(cluster, now=now, expire=expire)
        if refresh:
            self._metadata.request_update()
        txn = self._txn
        for tp in [*routed, *acc.admit_waiting(cluster, now=now, expire=expire)]:
            self._partitions[tp] = None
            if txn is not None:
                txn.add_partition(*tp)
        acc.take_readiness_changed()

    def _pull_client(self, now: float) -> None:
        client = self._client
        while (event := client.next_event()) is not None:
            match event:
                case MetadataUpdated():
                    if self._drop_idle_topics(now):
                        event = MetadataUpdated(cluster=client.cluster)  # without them
                    self._emit(event)
                case ConnectRequested() | CloseRequested() | TokenRequested():
                    self._emit(event)
                case RequestCompleted(request_id=rid, response=response):
                    self._on_completed(rid, response, now)
                case RequestFailed(request_id=rid, error=error):
                    self._on_failed(rid, error, now)
                case NodeDisconnected(error=AuthenticationFailedError() as error):
                    # fail closed, fast: metadata cannot come while the cluster refuses us
                    if self._acc.waiting_sends:
                        self._acc.fail_waiting(error, now=now)
                case NodeDisconnected():
                    pass

    # -- topics of interest: metadata.max.idle.ms (Java ProducerMetadata.retainTopic)

    def _track(self, topic: str, now: float) -> None:
        """Ask for the topic's metadata; it counts as used at ``now``."""
        self._metadata.add_topics([topic])
        last = self._tracked.get(topic)
        if last is None:
            self._unanswered[topic] = None
        if last is None or now > last:
            self._tracked[topic] = now

    def _drop_idle_topics(self, now: float) -> bool:
        """After a metadata update: drop from the metadata of interest every topic not used
        for ``metadata_max_idle`` -- nothing sent to it, nothing pending for it (queued,
        in flight, held for metadata or waiting for memory) and its metadata in. A record
        has its outcome after it was sent, so its topic counts as used until then.

        Returns:
            Whether a topic was dropped.
        """
        tracked = self._tracked
        known = self._client.cluster.topics
        if self._unanswered:
            for topic in [t for t in self._unanswered if t in known]:
                del self._unanswered[topic]
                tracked[topic] = max(tracked[topic], now)  # its idle clock starts now
        for topic, at in self._acc.take_settled().items():
            last = tracked.get(topic)
            if last is not None and at > last:
                tracked[topic] = at
        horizon = now - self.config.metadata_max_idle
        idle = [topic for topic, last in tracked.items() if last <= horizon]
        if not idle:
            return False
        busy = self._acc.busy_topics()
        gone: list[str] = []
        for topic in idle:
            if topic in busy or topic not in known:
                tracked[topic] = now  # records pending, or its metadata has not come yet
            else:
                gone.append(topic)
                del tracked[topic]
        if not gone:
            return False
        log.debug("idle topics leave the metadata: %s", gone)
        self._metadata.remove_topics(gone)
        dropped = set(gone)  # (membership only)
        self._partitions = {tp: None for tp in self._partitions if tp[0] not in dropped}
        self._partitioner.forget(gone)
        self._acc.forget(gone)
        return True

    # -- idempotence: InitProducerId (KIP-98), epoch bump (KIP-360)

    def _maybe_init(self, now: float) -> None:
        if self._txn is not None:
            # InitProducerId and epoch bumps are the transaction manager's (to the
            # transaction coordinator), as are AddPartitionsToTxn, EndTxn...
            if self._state in (ProducerState.OPEN, ProducerState.CLOSING):
                self._txn.poll(now=now)
            return
        idem = self._idem
        if idem is None or self._init_rid is not None:
            return
        if self._state not in (ProducerState.OPEN, ProducerState.CLOSING):
            return
        if idem.state is IdempotenceState.UNINITIALIZED:
            if self._state is ProducerState.CLOSING and not self._acc.has_incomplete():
                return  # nothing to send: no producer id needed
            idem.start_init()
        elif idem.state not in (IdempotenceState.INITIALIZING, IdempotenceState.BUMPING):
            return
        if self._init_retry_at is not None and now < self._init_retry_at:
            return
        self._init_retry_at = None
        bumping = idem.state is IdempotenceState.BUMPING
        pid, epoch = (idem.producer_id, idem.producer_epoch) if bumping else (-1, -1)
        timeout = self.config.transaction_timeout

        def factory(versions: ApiVersionTable) -> Any:
            return init_producer_id_request(
                versions, producer_id=pid, producer_epoch=epoch, transaction_timeout=timeout
            )

        self._init_rid = self._client.send(factory, now=now, timeout=self.config.request_timeout)

    def _on_init_response(self, response: Any, now: float) -> None:
        idem = self._idem
        assert idem is not None
        code = int(response.error_code)
        if code == 0:
            bumped = idem.state is IdempotenceState.BUMPING
            idem.initialized(int(response.producer_id), int(response.producer_epoch))
            log.info(
                "producer id %s epoch %s%s",
                idem.producer_id,
                idem.producer_epoch,
                " (epoch bump)" if bumped else "",
            )
            self._emit(
                ProducerIdAssigned(
                    producer_id=idem.producer_id,
                    producer_epoch=idem.producer_epoch,
                    bumped=bumped,
                )
            )
            return
        error = error_for_code(code)("InitProducerId failed")
        self._on_init_error(error, now)

    def _on_init_error(self, error: KafkaError, now: float) -> None:
        if _retriable(error):
            self._init_retry_at = now + self.config.accumulator.retry_backoff
            return
        self._fail_fatally(error, now)

    def _request_bump(self, reason: str, error: KafkaError | None = None) -> None:
        if self._txn is not None:
            # Not in the middle of a transaction: it becomes abortable and the epoch is
            # bumped after its abort (KIP-360).
            self._txn.batch_failed(error or KafkaError(reason), bump=True)
        elif self._idem is not None:
            self._idem.request_bump(reason)

    def _on_txn_fatal(self, error: KafkaError, now: float) -> None:
        self._fail_fatally(error, now)

    # -- the sender

    def _muted(self) -> set[_TP]:
        """Partitions that must not be drained now (membership only, never iterated)."""
        muted: set[_TP] = set()
        idem = self._idem
        txn = self._txn
        one_at_a_time = self.config.max_in_flight_requests_per_connection == 1
        for tp in self._partitions:
            if txn is not None and not txn.may_drain(*tp):
                muted.add(tp)  # not added to the transaction yet (or none open)
                continue
            in_flight = self._tp_in_flight.get(tp, 0)
            if idem is not None:
                if not idem.prepare(*tp) or in_flight >= 5:
                    muted.add(tp)
                elif in_flight and idem.unconfirmed(*tp):
                    # Nothing acknowledged yet: one batch at a time (KAFKA-15591).
                    muted.add(tp)
                elif in_flight:
                    # A retry keeps its sequence and goes out alone, in order.
                    queued = self._acc.queued_batches(*tp)
                    if queued and idem.is_current(queued[0]):
                        muted.add(tp)
            elif one_at_a_time and in_flight:
                muted.add(tp)
        return muted

    def _send_ready(self, now: float) -> None:
        if self._state not in (ProducerState.OPEN, ProducerState.CLOSING):
            return
        client = self._client
        limit = self.config.max_in_flight_requests_per_connection
        while True:
            cluster = client.cluster
            muted = self._muted()
            result = self._acc.ready(cluster, now=now, muted=muted)
            self._next_ready_at = result.next_ready_at
            if result.unknown_leader_topics:
                client.request_metadata_update()
            sent = False
            for node in result.nodes:
                state = client.node_state(node)
                outstanding = self._node_requests.get(node, 0)
                if state is None:
                    client.request_metadata_update()
                    continue
                if outstanding >= limit or (state is not NodeState.READY and outstanding):
                    continue
                batches = self._acc.drain(cluster, node, now=now, muted=muted)
                if batches:
                    self._send_batches(node, batches, now)
                    sent = True
            if not sent:
                return

    def _send_batches(self, node: NodeId, batches: list[ProducerBatch], now: float) -> None:
        cluster = self._client.cluster
        idem = self._idem
        payload: dict[tuple[str, uuid.UUID | None, int], bytes] = {}
        keyed: dict[tuple[str | uuid.UUID, int], ProducerBatch] = {}
        counters = self._acc.counters
        records = 0
        for batch in batches:
            if idem is not None:
                idem.stamp(batch)
            tp = (batch.topic, batch.partition)
            self._tp_in_flight[tp] = self._tp_in_flight.get(tp, 0) + 1
            topic = cluster.topics.get(batch.topic)
            topic_id = None if topic is None else topic.topic_id
            built = payload[(batch.topic, topic_id, batch.partition)] = batch.build()
            count = batch.record_count
            records += count
            counters.sent.record(count, now)
            counters.batch_bytes.record(len(built), now)
            counters.queue_time.record(now - batch.created, now)
            keyed[(batch.topic, batch.partition)] = batch
            if topic_id is not None:
                keyed[(topic_id, batch.partition)] = batch
        counters.records_per_request.record(records, now)
        acks = self.config.acks
        timeout = self.config.request_timeout
        tid = self.config.transactional_id
        top = None if tid is None else TRANSACTIONAL_MAX_VERSIONS[0]

        def factory(versions: ApiVersionTable) -> Any:
            return produce_request(
                versions, payload, acks=acks, timeout=timeout, transactional_id=tid, max_version=top
            )

        expect = acks != 0
        rid = self._client.send(
            factory, now=now, node_id=node, timeout=timeout, expect_response=expect
        )
        if not expect:
            # acks=0: no response will come; the batches are done once handed over.
            for batch in batches:
                self._landed(batch)
                self._acc.complete(batch, base_offset=-1, now=now)
            return
        self._requests[rid] = _Produce(node_id=node, batches=keyed)
        self._node_requests[node] = self._node_requests.get(node, 0) + 1

    def _landed(self, batch: ProducerBatch) -> None:
        tp = (batch.topic, batch.partition)
        count = self._tp_in_flight.get(tp, 0) - 1
        if count > 0:
            self._tp_in_flight[tp] = count
        else:
            self._tp_in_flight.pop(tp, None)
        if self._idem is not None:
            self._idem.landed(batch)

    def _take_request(self, rid: RequestId) -> _Produce | None:
        req = self._requests.pop(rid, None)
        if req is not None:
            left = self._node_requests.get(req.node_id, 0) - 1
            if left > 0:
                self._node_requests[req.node_id] = left
            else:
                self._node_requests.pop(req.node_id, None)
        return req

    @staticmethod
    def _unique(req: _Produce) -> list[ProducerBatch]:
        seen: dict[int, ProducerBatch] = {}
        for batch in req.batches.values():
            seen.setdefault(id(batch), batch)
        return list(seen.values())

    # -- responses

    def _on_completed(self, rid: RequestId, response: Any, now: float) -> None:
        txn = self._txn
        if txn is not None and txn.owns(rid):
            txn.on_completed(rid, response, now=now)
            return
        if rid == self._init_rid:
            self._init_rid = None
            self._on_init_response(response, now)
            return
        req = self._take_request(rid)
        if req is None:
            return
        self._acc.counters.throttle.record(throttle_seconds(response), now)
        handled: dict[int, None] = {}
        for topic_resp in response.responses:
            name = getattr(topic_resp, "name", None)
            topic_key: str | uuid.UUID = name if name is not None else topic_resp.topic_id
            for part in topic_resp.partition_responses:
                batch = req.batches.get((topic_key, int(part.index)))
                if batch is None or id(batch) in handled:
                    continue
                handled[id(batch)] = None
                self._on_partition(batch, part, now)
        for batch in self._unique(req):
            if id(batch) not in handled and batch.state is BatchState.IN_FLIGHT:
                self._landed(batch)
                missing = KafkaConnectionError(
                    f"the Produce response did not mention {batch.topic}-{batch.partition}"
                )
                self._retry(batch, missing, now)

    def _on_failed(self, rid: RequestId, error: KafkaError, now: float) -> None:
        txn = self._txn
        if txn is not None and txn.owns(rid):
            txn.on_failed(rid, error, now=now)
            return
        if rid == self._init_rid:
            self._init_rid = None
            self._on_init_error(error, now)
            return
        req = self._take_request(rid)
        if req is None:
            return
        retriable = _retriable(error)
        if retriable:
            self._client.request_metadata_update()
        for batch in self._unique(req):
            if batch.state is not BatchState.IN_FLIGHT:
                continue  # expired meanwhile (KIP-91)
            self._landed(batch)
            if retriable:
                self._retry(batch, error, now)
            else:
                self._fail_batch(batch, error, now)

    def _on_partition(self, batch: ProducerBatch, part: Any, now: float) -> None:
        if batch.state is not BatchState.IN_FLIGHT:
            return  # expired while in flight: its outcome is already out (KIP-91)
        self._landed(batch)
        code = int(part.error_code)
        idem = self._idem
        if code in (0, _DUPLICATE_SEQUENCE):
            # DUPLICATE_SEQUENCE_NUMBER: the broker already has it (KIP-98).
            if idem is not None:
                idem.acknowledged(batch)
            self._acc.complete(
                batch,
                base_offset=int(part.base_offset),
                log_append_time=_append_time_ms(getattr(part, "log_append_time", None)),
                log_start_offset=int(getattr(part, "log_start_offset", -1)),
                now=now,
            )
            return
        codes = self._acc.counters.error_codes
        codes[code] = codes.get(code, 0) + 1
        where = f"{batch.topic}-{batch.partition}"
        message = getattr(part, "error_message", None) or ""
        context: dict[str, object] = {"topic": batch.topic, "partition": batch.partition}
        record_errors = getattr(part, "record_errors", ())
        if record_errors:
            context["record_errors"] = [
                (int(e.batch_index), e.batch_index_error_message) for e in record_errors
            ]
        error = error_for_code(code)(message, **context)
        leader = getattr(part, "current_leader", None)
        if leader is not None and int(leader.leader_id) >= 0:
            # KIP-951: the response names the new leader; refresh if its epoch is newer.
            self._client.metadata.observe_leader_epoch(
                batch.topic, batch.partition, int(leader.leader_epoch)
            )
        if code == _MESSAGE_TOO_LARGE and batch.record_count > 1:
            pieces = self._acc.split(batch, now=now)
            if idem is not None:
                idem.restamp_split(batch, pieces)
            return
        if self._txn is not None and code == _INVALID_PRODUCER_EPOCH:
            # Transactional: the coordinator bumped the epoch -- a newer producer with our
            # transactional id, or the transaction ran past transaction_timeout_ms and was
            # aborted (Java: fatal ProducerFencedException; KIP-588's recovery is not done).
            fenced = self._txn.fencing_error(f"Produce to {where}", error, now=now)
            if self._txn.epoch_fenced(fenced, now=now):
                self._acc.fail(batch, fenced, now=now)  # timed out: abortable (KIP-588)
            # else fatal: the producer failed every record, this one included
            return
        if idem is not None and code in _SEQUENCE_ERRORS:
            if self._txn is not None:
                # A sequence gap inside a transaction: it cannot commit; abort, then bump.
                self._fail_batch(batch, error, now)
                return
            if (
                code == _OUT_OF_ORDER_SEQUENCE
                and idem.is_current(batch)
                and idem.is_overtaken(batch)
            ):
                # A later sequence of the partition was acknowledged under this id/epoch, so
                # the broker, which holds our state (the partition's first batch goes alone,
                # KAFKA-15591), wrote this batch: the acknowledgement was lost, and a retry
                # came after the broker's five-batch duplicate window. Sending it again
                # (under a new epoch) would write the records twice; its outcome is failed,
                # with offsets unknown (Java's producer retries it until delivery_timeout).
                self._acc.fail(batch, _overtaken_error(where, batch), now=now)
                return
            if idem.is_current(batch) and (code != _OUT_OF_ORDER_SEQUENCE or idem.is_next(batch)):
                # The broker lost our state: no retry under this epoch can succeed.
                self._request_bump(f"{error.__class__.__name__} on {where}")
            self._retry(batch, error, now)
            return
        if code in _FATAL_ERRORS:
            self._fail_fatally(error, now, batch=batch)
            return
        if error.retriable:
            self._client.metadata.observe_error(code)
            self._retry(batch, error, now)
            return
        self._fail_batch(batch, error, now)

    def _retry(self, batch: ProducerBatch, error: KafkaError, now: float) -> None:
        timeout = self.config.delivery_timeout
        if batch.created + timeout <= now:
            self._fail_batch(batch, self._expired_error(batch, now), now)
        elif batch.attempts >= self.config.retries:
            self._fail_batch(batch, error, now)
        else:
            self._acc.reenqueue(batch, now=now)

    def _fail_batch(self, batch: ProducerBatch, error: KafkaError, now: float) -> None:
        idem = self._idem
        if idem is not None and idem.is_current(batch):
            # its sequence range is a gap (or unknown): start a new epoch (KIP-360)
            self._request_bump(f"a batch of {batch.topic}-{batch.partition} failed: {error}", error)
        elif self._txn is not None:
            self._txn.batch_failed(error, bump=False)
        self._acc.fail(batch, error, now=now)

    def _expired_error(self, batch: ProducerBatch, now: float) -> KafkaTimeoutError:
        return KafkaTimeoutError(
            f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
            f"{now - batch.created:.3f} s have passed since batch creation, delivery_timeout "
            f"is {_ms_to_seconds_text(self.config.delivery_timeout)} (delivery.timeout.ms)"
        )

    def _expire(self, now: float) -> None:
        idem = self._idem
        for batch in self._acc.expire(now):
            if idem is not None and idem.is_current(batch):
                self._request_bump(f"a retry of {batch.topic}-{batch.partition} expired")
            elif self._txn is not None:
                self._txn.batch_failed(
                    self._expired_error(batch, now), bump=batch.base_sequence >= 0
                )
        timeout = self.config.delivery_timeout
        for batch in self._acc.in_flight_batches():
            if batch.created + timeout <= now:
                # KIP-91: in flight or not, the record's time is up; a late answer is ignored.
                self._landed(batch)
                self._fail_batch(batch, self._expired_error(batch, now), now)

    def _fail_fatally(
        self, error: KafkaError, now: float, *, batch: ProducerBatch | None = None
    ) -> None:
        if self._idem is not None and self._idem.state is not IdempotenceState.FATAL:
            self._idem.fatal()
        if self._txn is not None:
            self._txn.fenced(error, now=now)
        if batch is not None and batch.state is not BatchState.DONE:
            self._acc.fail(batch, error, now=now)
        self._fatal = error
        log.info("producer failed for good: %s", error)
        if self._state in (ProducerState.OPEN, ProducerState.CLOSING):
            self._transition(ProducerState.FAILED, what="fatal error")
        self._fail_everything(error, now)
        self._emit(ProducerFailed(error=error))

    def _fail_everything(self, error: KafkaError, now: float) -> None:
        self._acc.abort_undrained(error, now=now)
        for batch in self._acc.in_flight_batches():
            self._landed(batch)
            self._acc.fail(batch, error, now=now)
        self._requests.clear()
        self._node_requests.clear()

    def _maybe_finish(self) -> bool:
        """Finish a graceful close once nothing is pending; return whether closed."""
        # a FAILED producer has failed every record already: closing it finishes at once
        closing = self._state is ProducerState.CLOSING or (
            self._state is ProducerState.FAILED and self._close_requested
        )
        if self._txn is not None and self._txn.busy:
            return False  # an abort (or commit) of the transaction is under way
        if closing and not self._acc.has_incomplete() and not self._requests:
            self._finish()
            return True
        return False

    def _finish(self) -> None:
        self._transition(ProducerState.CLOSED, what="finish")
        log.info("producer closed")
        self._client.close()
        client = self._client
        while (event := client.next_event()) is not None:
            if isinstance(event, ConnectRequested | CloseRequested):
                self._emit(event)
        self._emit(ProducerClosed())
        self._next_ready_at = None
        self._kick_at = None


def _retriable(error: KafkaError) -> bool:
    """Whether a *request-level* failure may be retried.

    A RemoteProtocolError means the connection broke on bytes that did not parse: the
    request's fate is unknown, exactly as after a dropped connection, so it is retried like
    a network error (idempotence deduplicates a batch that was in fact written).
    """
    return error.retriable or isinstance(error, RemoteProtocolError)
