"""Transactions in the simulated cluster: producer state on partition leaders, the
transaction coordinator, transactional offsets, and markers.

Theory of operation
-------------------
:class:`TxnCluster` extends :class:`~kafkastate.sim.cluster.SimCluster` (same brokers,
metadata, group coordinator, held fetches) with what a broker does for idempotent and
transactional producers, after ../shared/DST.md A2.9 and Kafka's ``ProducerStateManager``,
``TransactionCoordinator`` and ``TransactionMetadata`` (transaction version 1: partitions
join a transaction only through AddPartitionsToTxn / AddOffsetsToTxn, and EndTxn does not
bump the epoch):

* **Partition leaders** keep, per producer id, the epoch and the last five batches'
  sequence ranges (``NUM_BATCHES_TO_RETAIN``): a batch of an older epoch gets
  INVALID_PRODUCER_EPOCH, a repeat of one of the last five batches is answered with the
  original offset and not written again, a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER, and a new
  epoch must start at sequence 0. A transactional batch opens a transaction on the partition
  (no check with the coordinator: TV1), which holds the last stable offset (LSO) at its first
  offset until a COMMIT or ABORT marker closes it; an aborted one goes to the aborted index.
  Fetch with ``isolation_level=1`` stops at the LSO and lists the aborted transactions in
  range.
* **The transaction coordinator** (on broker :attr:`TxnCluster.txn_node`) keeps per
  transactional id the producer id, epoch and state (Empty, Ongoing, PrepareCommit,
  PrepareAbort, CompleteCommit, CompleteAbort; transitions in :data:`TXN_TRANSITIONS`):
  InitProducerId (a new id, or epoch + 1; an open transaction is aborted first and the
  caller told CONCURRENT_TRANSACTIONS until the abort completes; KIP-360 and KIP-588 checks
  of the given id/epoch), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (retries of a
  completed end answered NONE, the wrong end INVALID_TXN_STATE), and the timeout abort of a
  transaction open longer than its ``transaction.timeout.ms`` (with an epoch bump).
* **Markers.** EndTxn moves the transaction to Prepare*, answers at once and queues one
  WriteTxnMarkers request per partition in :attr:`TxnCluster.markers_out`; the world carries
  them through its network to the partition's leader (or the group coordinator, for a
  group's offsets), where :meth:`TxnCluster.write_markers` writes the control batch, and
  brings the answer back (:meth:`TxnCluster.markers_answered`). Only when every partition has
  answered is the transaction Complete*. Unanswered markers are sent again to the current
  leader after :data:`MARKER_RETRY`.
* **Transactional offsets** (TxnOffsetCommit, with the KIP-447 generation/member check of
  the group coordinator) wait per producer id until a marker reaches the group: COMMIT makes
  them the group's committed offsets, ABORT drops them. While any are pending, OffsetFetch
  with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for those partitions (KIP-447).

Every request is handed in with a *tag* (:attr:`TxnCluster.request_tag`, set by the world:
which client transaction sent it), so checkers can tell a transaction's requests apart from
a late copy of an earlier one (invariant T5). Model checks that fail are appended to
:attr:`TxnCluster.violations` as ``(invariant, message)``.

**Failover** (:meth:`TxnCluster.move_txn_coordinator`: a move, or the coordinator's broker
crashing), as Kafka's ``TransactionStateManager`` does it: every transition is written to
``__transaction_state`` before it takes effect (the model answers a request once its write is
done), so the new coordinator knows what the log says -- each transactional id's producer id
and epoch, state, partitions, timeout and start time -- and nothing else: the KIP-588
``lastProducerEpoch`` is not in the log (``TransactionLog.readTxnRecordValue`` loads it as
``NO_PRODUCER_EPOCH``), and the old coordinator's queued and unanswered markers are dropped
with its channel (their answers go nowhere). The old broker answers NOT_COORDINATOR; the new
one answers COORDINATOR_LOAD_IN_PROGRESS for :data:`TXN_LOAD_TIME` (its transaction timeouts
wait too), then -- under a coordinator epoch one higher -- completes each PrepareCommit and
PrepareAbort by sending its markers to *every* partition of the transaction (the log does
not say which ones were written: a leader answers a repeated marker NONE).

Simplifications: every replica is in sync (HW = log end); ListOffsets answers the log end,
not the LSO; a transition whose write a move interrupts is not modelled (each is written at
once).

Pure: no IO, no clock; time comes with every call.
"""

from __future__ import annotations

import datetime
import io
import struct
import sys
from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any, Final

import attrs
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from kafkastate.core.protocol.framing import encode_request
from kafkastate.core.protocol.records import ControlRecordType, build_control_batch, iter_batches
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, request_type, response_type
from kafkastate.sim.cluster import SERVED_VERSIONS, PartitionLog, Request, SimCluster, parse_request
from kafkastate.sim.coordinator import ClassicCoordinator, commit_answer

__all__ = [
    "MARKER_RETRY",
    "TXN_LOAD_TIME",
    "TXN_SERVED_VERSIONS",
    "TXN_TRANSITIONS",
    "Marker",
    "TxnBatch",
    "TxnCluster",
    "TxnMeta",
    "TxnPartition",
    "offsets_partition",
]

ADD_PARTITIONS_TO_TXN: Final = 24
ADD_OFFSETS_TO_TXN: Final = 25
END_TXN: Final = 26
WRITE_TXN_MARKERS: Final = 27
TXN_OFFSET_COMMIT: Final = 28
_MARKER_VERSION: Final = 1

TXN_SERVED_VERSIONS: Final = {
    **SERVED_VERSIONS,
    ApiKey.PRODUCE: (3, 11),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ADD_PARTITIONS_TO_TXN: (0, 3),  # v4+ is the brokers' batched form
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 4),  # v5 is transaction version 2
    TXN_OFFSET_COMMIT: (0, 4),
}
"""Transaction version 1: what the simulated brokers advertise with transactions on."""

MARKER_RETRY: Final = 1.0
"""Seconds before the coordinator sends an unanswered marker again (to the current leader)."""
TXN_LOAD_TIME: Final = 0.5
"""Seconds a new transaction coordinator loads ``__transaction_state`` (it answers
COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""

_NO_TIME: Final = datetime.timedelta(0)
_TIMESTAMP: Final = 1_700_000_000_000
_RETAINED: Final = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN

_NONE: Final = 0
_UNKNOWN_TOPIC: Final = 3
_NOT_LEADER: Final = 6
_LOAD_IN_PROGRESS: Final = 14
_NOT_COORDINATOR: Final = 16
_OUT_OF_ORDER: Final = 45
_INVALID_PRODUCER_EPOCH: Final = 47
_INVALID_TXN_STATE: Final = 48
_INVALID_MAPPING: Final = 49
_CONCURRENT: Final = 51
_COORDINATOR_FENCED: Final = 52
_UNSTABLE: Final = 88
_PRODUCER_FENCED: Final = 90
_REBALANCE_IN_PROGRESS: Final = 27

EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"

TXN_TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
}
"""TransactionMetadata's valid previous states (DST.md A2.9; PrepareEpochFence and Dead
are not modelled: a fencing abort goes straight to PrepareAbort)."""

_TP = tuple[str, int]


def offsets_partition(group: str) -> _TP:
    """The stand-in for the ``__consumer_offsets`` partition of ``group``."""
    return (f"__consumer_offsets/{group}", 0)


# --------------------------------------------------------------------------- partitions


@attrs.define
class TxnBatch:
    """One batch in a partition log, with what the checkers need to know about it."""

    base: int
    count: int
    data: bytes
    pid: int
    epoch: int
    first_seq: int
    transactional: bool
    control: bool
    values: tuple[bytes, ...]
    tag: Any
    status: str
    """``plain`` (not transactional), ``open``, ``committed``, ``aborted``, or ``marker``."""

    @property
    def last(self) -> int:
        """The batch's last offset."""
        return self.base + self.count - 1


@attrs.define
class _ProducerEntry:
    epoch: int
    recent: list[tuple[int, int, int]] = attrs.Factory(list)  # (first seq, last seq, base)
    coordinator_epoch: int = -1


@attrs.define
class _OpenTxn:
    first: int
    batches: list[TxnBatch] = attrs.Factory(list)
    tags: dict[Any, None] = attrs.Factory(dict)


class TxnPartition(PartitionLog):
    """A partition log with producer state, open transactions and the aborted index."""

    def __init__(self) -> None:
        super().__init__()
        self.txn_batches: list[TxnBatch] = []
        self.producers: dict[int, _ProducerEntry] = {}
        self.open: dict[int, _OpenTxn] = {}
        self.aborted: list[tuple[int, int, int]] = []  # (producer id, first, last offset)

    def lso(self) -> int:
        """The last stable offset: the first offset of the earliest open transaction."""
        return min((t.first for t in self.open.values()), default=self.end)

    def append(self, values: list[bytes], epoch: int) -> None:
        """A plain (non-idempotent) batch written by the harness itself."""
        from kafkastate.core.protocol.records import RecordBatchBuilder  # noqa: PLC0415

        builder = RecordBatchBuilder(base_offset=self.end, partition_leader_epoch=epoch)
        for value in values:
            builder.append(_TIMESTAMP, None, value)
        self._add(builder.build(), values=tuple(values), status="plain")

    def _add(
        self,
        data: bytes,
        *,
        pid: int = -1,
        epoch: int = -1,
        first_seq: int = -1,
        transactional: bool = False,
        control: bool = False,
        values: tuple[bytes, ...],
        tag: Any = None,
        status: str,
    ) -> TxnBatch:
        count = max(len(values), 1)
        batch = TxnBatch(
            base=self.end,
            count=count,
            data=data,
            pid=pid,
            epoch=epoch,
            first_seq=first_seq,
            transactional=transactional,
            control=control,
            values=values,
            tag=tag,
            status=status,
        )
        self.txn_batches.append(batch)
        self.end += count
        return batch

    def read(self, offset: int, max_bytes: int, upper: int | None = None) -> bytes:
        """Whole batches from the one holding ``offset`` up to ``upper`` (exclusive)."""
        limit = self.end if upper is None else upper
        out = bytearray()
        for batch in self.txn_batches:
            if batch.last < offset:
                continue
            if batch.base >= limit:
                break
            if out and len(out) + len(batch.data) > max_bytes:
                break
            out += batch.data
        return bytes(out)


def _replace(entity: Any, **changes: Any) -> Any:
    """A copy of a frozen kio entity with some fields changed."""
    import dataclasses  # noqa: PLC0415

    return dataclasses.replace(entity, **changes)


def _split_batches(records: bytes) -> list[bytes]:
    """The v2 batches of a Produce request's records, one ``bytes`` each."""
    out = []
    pos = 0
    while pos + 12 <= len(records):
        (length,) = struct.unpack_from(">i", records, pos + 8)
        out.append(records[pos : pos + 12 + length])
        pos += 12 + length
    return out


def _restamp(data: bytes, base: int, leader_epoch: int) -> bytes:
    """Set a v2 batch's base offset and partition leader epoch (outside its CRC)."""
    return struct.pack(">q", base) + data[8:12] + struct.pack(">i", leader_epoch) + data[16:]


# ------------------------------------------------------------------------- coordinator


@attrs.define
class TxnMeta:
    """The coordinator's state of one transactional id."""

    tid: str
    pid: int
    epoch: int
    timeout: float
    last_epoch: int = -1  # the epoch before a timeout abort bumped it (KIP-588)
    state: str = EMPTY
    partitions: dict[_TP, None] = attrs.Factory(dict)
    started: float = 0.0
    tags: dict[Any, None] = attrs.Factory(dict)
    serial: int = 0  # how many transactions the coordinator began for this id
    pending: dict[_TP, int] = attrs.Factory(dict)  # partition -> marker id unanswered
    history: list[str] = attrs.Factory(list)


@attrs.define
class Marker:
    """One WriteTxnMarkers request on its way to a partition leader."""

    mid: int
    tid: str
    pid: int
    epoch: int
    commit: bool
    coordinator_epoch: int
    tp: _TP
    dst: int
    tags: tuple[Any, ...]
    serial: int
    due: float | None  # when to send it again (once it is known to be lost), else None

    def frame(self) -> bytes:
        """The request frame (WriteTxnMarkers v1) this marker travels as."""
        cls = request_type(WRITE_TXN_MARKERS, _MARKER_VERSION)
        marker_cls = nested_type(cls, "WritableTxnMarker")
        topic_cls = nested_type(cls, "WritableTxnMarkerTopic")
        body = build(
            cls,
            markers=(
                build(
                    marker_cls,
                    producer_id=self.pid,
                    producer_epoch=self.epoch,
                    transaction_result=self.commit,
                    topics=(build(topic_cls, name=self.tp[0], partition_indexes=(self.tp[1],)),),
                    coordinator_epoch=self.coordinator_epoch,
                ),
            ),
        )
        return encode_request(
            body, correlation_id=self.mid, client_id=f"txn-coordinator-{self.dst}"
        )


class TxnCluster(SimCluster):
    """A :class:`SimCluster` whose brokers also serve idempotent and transactional
    producers, read_committed fetches and a transaction coordinator.

    Args:
        brokers: how many brokers.
        coordinator: the group coordinator model.
        txn_node: the broker that is the transaction coordinator at first.
    """

    served = TXN_SERVED_VERSIONS

    def __init__(self, brokers: int, coordinator: ClassicCoordinator, *, txn_node: int) -> None:
        super().__init__(brokers, coordinator)
        self.txn_node = txn_node
        self.coordinator_epoch = 0
        self.parts: dict[_TP, TxnPartition] = {}
        self.txns: dict[str, TxnMeta] = {}
        self.by_pid: dict[int, TxnMeta] = {}
        self._next_pid = 1000
        self._next_marker = 0
        self.markers: dict[int, Marker] = {}  # unanswered, by id
        self.sent_markers: dict[int, Marker] = {}  # every marker ever sent, by id
        self.markers_out: list[Marker] = []  # to be sent by the world
        self.pending_offsets: dict[tuple[str, int], dict[_TP, tuple[int, int, Any]]] = {}
        self.offset_epochs: dict[tuple[str, int], int] = {}
        self.request_tag: Any = None
        self.violations: list[tuple[str, str]] = []
        self.appended: list[tuple[_TP, TxnBatch]] = []  # new data batches, for checkers
        self.accepted: list[tuple[str, str, Any]] = []
        """Coordinator requests that took effect: ``(init|add|end, transactional id, tag)``."""
        self.completed: list[tuple[str, int, bool]] = []  # (tid, serial, committed)
        self.epoch_history: dict[str, list[int]] = {}
        self.verify_partitions = True
        self.counts: Counter[str] = Counter()
        """What happened, for tests: ``refused <api> <code>``, ``marker resent``..."""
        self._now = 0.0
        self._offset_coordinator_epochs: dict[tuple[str, int], int] = {}
        self.loading_until: float | None = None
        """While the transaction coordinator loads its log: when it is done."""

    # ----------------------------------------------------------------- admin

    def create_topic(self, name: str, partitions: int) -> None:
        """A topic whose partitions keep producer state."""
        super().create_topic(name, partitions)
        for p in range(partitions):
            part = TxnPartition()
            self.parts[(name, p)] = part
            self.logs[(name, p)] = part

    def move_txn_coordinator(self, node: int, *, now: float) -> None:
        """The transaction coordinator fails over to broker ``node`` (see the module's
        docstring): the old one unloads, dropping its markers; the new one loads the log
        until ``now +`` :data:`TXN_LOAD_TIME`, then sends the markers of every transaction
        the log has in PrepareCommit or PrepareAbort."""
        self._now = max(self._now, now)
        self.txn_node = node
        self.coordinator_epoch += 1
        self.counts["txn coordinator loads"] += 1
        self.markers.clear()  # (answers to them are ignored: sent again meanwhile)
        self.markers_out.clear()
        for meta in self.txns.values():
            meta.last_epoch = -1  # not in the log: NO_PRODUCER_EPOCH once loaded
            meta.pending.clear()
        self.loading_until = self._now + TXN_LOAD_TIME

    def _loaded(self) -> None:
        """The new coordinator has read its log: it completes what was being completed
        (``TransactionStateManager.loadTransactionsForTxnTopicPartition``)."""
        self.loading_until = None
        for meta in self.txns.values():
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                self.counts["completed after a load"] += 1
                self._send_markers(meta, commit=meta.state == PREPARE_COMMIT)

    def _coordinator_error(self, node: int) -> int:
        """NOT_COORDINATOR at another broker, COORDINATOR_LOAD_IN_PROGRESS while loading."""
        if node != self.txn_node:
            return _NOT_COORDINATOR
        if self.loading_until is not None:
            if self._now < self.loading_until:
                return _LOAD_IN_PROGRESS
            self._loaded()
        return _NONE

    def set_alive(self, node: int, alive: bool) -> None:
        """A broker crashes or comes back; the transaction coordinator fails over from a
        dead one (to the highest live broker)."""
        super().set_alive(node, alive)
        if node == self.txn_node and not alive:
            live = sorted(self.alive)
            if live:
                self.move_txn_coordinator(live[-1], now=self._now)

    # -------------------------------------------------------------- requests

    def handle(self, node: int, token: Hashable, request: Request, now: float) -> list[Any]:
        """As :meth:`SimCluster.handle`, plus the producer and transaction APIs."""
        self._now = now
        key, version, body = request.api_key, request.version, request.body
        if key == ApiKey.PRODUCE:
            return [self._produce(node, version, body)]
        if key == ApiKey.INIT_PRODUCER_ID:
            return [self._init_producer_id(node, version, body, now)]
        if key == ADD_PARTITIONS_TO_TXN:
            return [self._add_partitions(node, version, body, now)]
        if key == ADD_OFFSETS_TO_TXN:
            return [self._add_offsets(node, version, body, now)]
        if key == END_TXN:
            return [self._end_txn(node, version, body, now)]
        if key == TXN_OFFSET_COMMIT:
            return [self._txn_offset_commit(node, version, body)]
        return super().handle(node, token, request, now)

    def _find_coordinator(self, version: int, body: Any) -> Any:
        if int(getattr(body, "key_type", 0)) != 1:
            return super()._find_coordinator(version, body)
        group_node = self.coordinator_node
        self.coordinator_node = self.txn_node  # key_type 1: the transaction coordinator
        try:
            return super()._find_coordinator(version, body)
        finally:
            self.coordinator_node = group_node

    # -- produce

    def _produce(self, node: int, version: int, body: Any) -> Any:
        cls = response_type(ApiKey.PRODUCE, version)
        topic_cls = nested_type(cls, "TopicProduceResponse")
        part_cls = nested_type(cls, "PartitionProduceResponse")
        leader_cls = getattr(sys.modules[cls.__module__], "LeaderIdAndEpoch", None)
        topics = []
        for t in body.topic_data:
            parts = []
            for p in t.partition_data:
                tp = (str(t.name), int(p.index))
                code, base = self._append_produce(node, tp, bytes(p.records or b""))
                if code:
                    self.counts[f"refused 0 {code}"] += 1
                fields: dict[str, Any] = {
                    "index": tp[1],
                    "error_code": ErrorCode(code),
                    "base_offset": base,
                    "log_append_time": None,
                    "log_start_offset": 0,
                    "record_errors": (),
                    "error_message": None,
                }
                if leader_cls is not None:
                    fields["current_leader"] = leader_cls(leader_id=-1, leader_epoch=-1)
                parts.append(build(part_cls, **fields))
            topics.append(build(topic_cls, name=t.name, partition_responses=tuple(parts)))
        return build(cls, responses=tuple(topics), throttle_time=_NO_TIME, node_endpoints=())

    def _append_produce(self, node: int, tp: _TP, records: bytes) -> tuple[int, int]:
        part = self.parts.get(tp)
        if part is None:
            return _UNKNOWN_TOPIC, -1
        if self.leader(*tp) != node:
            return _NOT_LEADER, -1
        first_base = -1
        for chunk in _split_batches(records):
            batch: Any = next(iter_batches(chunk))
            values = tuple(b"" if r.value is None else bytes(r.value) for r in batch.records())
            pid = int(getattr(batch, "producer_id", -1))
            epoch = int(getattr(batch, "producer_epoch", -1))
            first_seq = int(getattr(batch, "base_sequence", -1))
            transactional = bool(getattr(batch, "is_transactional", False))
            if pid >= 0:
                code, dup = self._check_sequence(part, pid, epoch, first_seq, len(values))
                if code != _NONE:
                    return code, -1
                if dup is not None:
                    first_base = dup if first_base < 0 else first_base
                    continue
            if transactional and pid not in part.open and not self._verified(tp, pid, epoch):
                return _INVALID_TXN_STATE, -1
            status = "open" if transactional else "plain"
            data = _restamp(chunk, part.end, self.leader_epochs[tp])
            added = part._add(
                data,
                pid=pid,
                epoch=epoch,
                first_seq=first_seq,
                transactional=transactional,
                values=values,
                tag=self.request_tag,
                status=status,
            )
            if pid >= 0:
                entry = part.producers.setdefault(pid, _ProducerEntry(epoch=epoch))
                if epoch != entry.epoch:
                    entry.epoch = epoch
                    entry.recent.clear()  # a new epoch's sequences start again
                entry.recent.append((first_seq, first_seq + len(values) - 1, added.base))
                del entry.recent[:-_RETAINED]
                if transactional:
                    txn = part.open.get(pid)
                    if txn is None:
                        txn = part.open[pid] = _OpenTxn(first=added.base)
                    txn.batches.append(added)
                    txn.tags[self.request_tag] = None
            self.appended.append((tp, added))
            first_base = added.base if first_base < 0 else first_base
        return _NONE, first_base

    def _verified(self, tp: _TP, pid: int, epoch: int) -> bool:
        """KIP-890 part 1 (on by default since Kafka 3.6): before the first transactional
        batch of a producer opens a transaction on a partition, the leader asks the
        coordinator whether that transaction is ongoing with this partition at this epoch
        (modelled as an instant look-up). Off, a late Produce of an ended transaction
        opens a hanging one."""
        if not self.verify_partitions:
            return True
        meta = self.by_pid.get(pid)
        return (
            meta is not None
            and meta.state == ONGOING
            and meta.epoch == epoch
            and tp in meta.partitions
        )

    def _check_sequence(
        self, part: TxnPartition, pid: int, epoch: int, first_seq: int, count: int
    ) -> tuple[int, int | None]:
        """ProducerAppendInfo's checks: ``(error code, base offset of a duplicate)``."""
        entry = part.producers.get(pid)
        if entry is not None and epoch < entry.epoch:
            return _INVALID_PRODUCER_EPOCH, None
        if entry is None or epoch > entry.epoch or not entry.recent:
            return (_NONE if first_seq == 0 else _OUT_OF_ORDER), None
        last_seq = first_seq + count - 1
        for first, last, base in entry.recent:
            if (first, last) == (first_seq, last_seq):
                return _NONE, base
        if first_seq != entry.recent[-1][1] + 1:
            return _OUT_OF_ORDER, None
        return _NONE, None

    # -- fetch (isolation levels)

    def _read_partition(
        self, node: int, tp: tuple[str, int], offset: int, limit: int, *, committed_only: bool
    ) -> tuple[int, bytes, int, int, list[tuple[int, int]]]:
        part = self.parts.get(tp)
        if part is None:
            return _UNKNOWN_TOPIC, b"", 0, 0, []
        if self.leader(*tp) != node:
            return _NOT_LEADER, b"", 0, 0, []
        end, lso = part.end, part.lso()
        upper = lso if committed_only else end
        data = part.read(offset, limit, upper)
        aborted = []
        if committed_only and data:
            aborted = [
                (pid, first)
                for pid, first, last in part.aborted
                if last >= offset and first < upper
            ]
        return 0, data, end, lso, aborted

    def _list_offsets(self, node: int, version: int, body: Any) -> Any:
        """As SimCluster's, except that "latest" under read_committed is the LSO."""
        answer = super()._list_offsets(node, version, body)
        if int(getattr(body, "isolation_level", 0)) != 1:
            return answer
        asked = {
            (str(t.name), int(p.partition_index)): int(p.timestamp)
            for t in body.topics
            for p in t.partitions
        }
        topics = []
        for t in answer.topics:
            parts = []
            for p in t.partitions:
                tp = (str(t.name), int(p.partition_index))
                if int(p.error_code) == 0 and asked.get(tp) == -1:
                    p = _replace(p, offset=self.parts[tp].lso())
                parts.append(p)
            topics.append(_replace(t, partitions=tuple(parts)))
        return _replace(answer, topics=tuple(topics))

    def _offset_fetch(self, version: int, body: Any) -> Any:
        cls = response_type(ApiKey.OFFSET_FETCH, version)
        topic_cls = nested_type(cls, "OffsetFetchResponseTopic")
        part_cls = nested_type(cls, "OffsetFetchResponsePartition")
        group = self.coordinator.groups.get(body.group_id)
        offsets = {} if group is None else group.offsets
        stable = bool(getattr(body, "require_stable", False))
        unstable = {
            tp
            for (g, _pid), pending in self.pending_offsets.items()
            if g == body.group_id
            for tp in pending
        }
        topics = []
        for t in body.topics or ():
            parts = []
            for p in t.partition_indexes:
                tp = (str(t.name), int(p))
                code = _UNSTABLE if stable and tp in unstable else _NONE
                parts.append(
                    build(
                        part_cls,
                        partition_index=p,
                        committed_offset=-1 if code else offsets.get(tp, -1),
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=ErrorCode(code),
                    )
                )
            topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
        return build(cls, throttle_time=_NO_TIME, topics=tuple(topics), error_code=ErrorCode(0))

    # -- the transaction coordinator

    def _txn_answer(self, key: int, version: int, code: int, **fields: Any) -> Any:
        if code:
            self.counts[f"refused {key} {code}"] += 1
        cls = response_type(key, version)
        return build(cls, throttle_time=_NO_TIME, error_code=ErrorCode(code), **fields)

    def _to(self, meta: TxnMeta, state: str) -> None:
        if meta.state not in TXN_TRANSITIONS[state]:
            self.violations.append(
                ("G0", f"transaction {meta.tid!r}: {meta.state} -> {state} is not allowed")
            )
        meta.history.append(state)
        meta.state = state

    def _set_epoch(self, meta: TxnMeta, epoch: int) -> None:
        seen = self.epoch_history.setdefault(meta.tid, [])
        if seen and epoch < seen[-1]:
            self.violations.append(("T3", f"{meta.tid!r}: epoch {seen[-1]} -> {epoch}"))
        seen.append(epoch)
        meta.epoch = epoch

    def _init_producer_id(self, node: int, version: int, body: Any, now: float) -> Any:
        tid = getattr(body, "transactional_id", None)
        key = ApiKey.INIT_PRODUCER_ID
        if tid is None:  # idempotent producer: any broker hands out a fresh id
            self._next_pid += 1
            return self._txn_answer(
                key, version, _NONE, producer_id=self._next_pid, producer_epoch=0
            )
        refused = self._coordinator_error(node)
        if refused:
            return self._txn_answer(key, version, refused, producer_id=-1, producer_epoch=-1)
        timeout = body.transaction_timeout.total_seconds()
        meta = self.txns.get(tid)
        if meta is None:
            self._next_pid += 1
            meta = TxnMeta(tid=tid, pid=self._next_pid, epoch=0, timeout=timeout)
            self.txns[tid] = meta
            self.by_pid[meta.pid] = meta
            self._set_epoch(meta, 0)
            self.accepted.append(("init", tid, self.request_tag))
            return self._txn_answer(key, version, _NONE, producer_id=meta.pid, producer_epoch=0)
        given_pid = int(getattr(body, "producer_id", -1))
        given_epoch = int(getattr(body, "producer_epoch", -1))
        # KIP-360: only the current producer (or, after a timeout abort, the one just
        # fenced by it -- KIP-588) may bump its own epoch
        if given_pid >= 0 and (
            given_pid != meta.pid or given_epoch not in (meta.epoch, meta.last_epoch)
        ):
            return self._txn_answer(
                key, version, _PRODUCER_FENCED, producer_id=-1, producer_epoch=-1
            )
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return self._txn_answer(key, version, _CONCURRENT, producer_id=-1, producer_epoch=-1)
        if meta.state == ONGOING:
            # fence the open transaction: abort it under a new epoch; the caller retries
            meta.last_epoch = meta.epoch
            self._set_epoch(meta, meta.epoch + 1)
            self._prepare_end(meta, commit=False, now=now)
            return self._txn_answer(key, version, _CONCURRENT, producer_id=-1, producer_epoch=-1)
        meta.timeout = timeout
        if given_pid >= 0 and given_epoch == meta.last_epoch != meta.epoch:
            # KIP-588: the producer the coordinator fenced (a timeout abort) or a retry of
            # a bump that took effect gets the current epoch, not another bump
            # (TransactionMetadata.prepareIncrementProducerEpoch)
            self.accepted.append(("init", tid, self.request_tag))
            return self._txn_answer(
                key, version, _NONE, producer_id=meta.pid, producer_epoch=meta.epoch
            )
        meta.last_epoch = -1
        self._set_epoch(meta, meta.epoch + 1)
        self.accepted.append(("init", tid, self.request_tag))
        return self._txn_answer(
            key, version, _NONE, producer_id=meta.pid, producer_epoch=meta.epoch
        )

    def _check_txn(self, node: int, tid: str, pid: int, epoch: int) -> tuple[int, TxnMeta | None]:
        refused = self._coordinator_error(node)
        if refused:
            return refused, None
        meta = self.txns.get(tid)
        if meta is None or meta.pid != pid:
            return _INVALID_MAPPING, None
        if epoch != meta.epoch:
            return _PRODUCER_FENCED, None
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return _CONCURRENT, None
        return _NONE, meta

    def _join(self, meta: TxnMeta, tps: list[_TP], now: float) -> None:
        if meta.state != ONGOING:
            meta.partitions.clear()
            meta.tags.clear()
            meta.started = now
            meta.serial += 1
            self._to(meta, ONGOING)
        for tp in tps:
            meta.partitions[tp] = None
        meta.tags[self.request_tag] = None
        self.accepted.append(("add", meta.tid, self.request_tag))
        if len(meta.tags) > 1:
            self.violations.append(
                (
                    "T5",
                    f"{meta.tid!r}: transaction {meta.serial} at the coordinator has requests "
                    f"of client transactions {list(meta.tags)}",
                )
            )

    def _add_partitions(self, node: int, version: int, body: Any, now: float) -> Any:
        cls = response_type(ADD_PARTITIONS_TO_TXN, version)
        topic_cls = nested_type(cls, "AddPartitionsToTxnTopicResult")
        part_cls = nested_type(cls, "AddPartitionsToTxnPartitionResult")
        tid = body.v3_and_below_transactional_id
        code, meta = self._check_txn(
            node, tid, int(body.v3_and_below_producer_id), int(body.v3_and_below_producer_epoch)
        )
        tps = [(str(t.name), int(p)) for t in body.v3_and_below_topics for p in t.partitions]
        unknown = [tp for tp in tps if tp not in self.parts]
        if code == _NONE and unknown:
            code = _UNKNOWN_TOPIC
        if code == _NONE and meta is not None:
            self._join(meta, tps, now)
        results = tuple(
            build(
                topic_cls,
                name=t.name,
                results_by_partition=tuple(
                    build(part_cls, partition_index=p, partition_error_code=ErrorCode(code))
                    for p in t.partitions
                ),
            )
            for t in body.v3_and_below_topics
        )
        return build(cls, throttle_time=_NO_TIME, results_by_topic_v3_and_below=results)

    def _add_offsets(self, node: int, version: int, body: Any, now: float) -> Any:
        code, meta = self._check_txn(
            node, body.transactional_id, int(body.producer_id), int(body.producer_epoch)
        )
        if code == _NONE and meta is not None:
            self._join(meta, [offsets_partition(str(body.group_id))], now)
        return self._txn_answer(ADD_OFFSETS_TO_TXN, version, code)

    def _end_txn(self, node: int, version: int, body: Any, now: float) -> Any:
        tid, commit = body.transactional_id, bool(body.committed)
        refused = self._coordinator_error(node)
        if refused:
            return self._txn_answer(END_TXN, version, refused)
        meta = self.txns.get(tid)
        if meta is None or meta.pid != int(body.producer_id):
            return self._txn_answer(END_TXN, version, _INVALID_MAPPING)
        if int(body.producer_epoch) != meta.epoch:
            return self._txn_answer(END_TXN, version, _PRODUCER_FENCED)
        state = meta.state
        if state == ONGOING:
            meta.tags[self.request_tag] = None
            self.accepted.append(("end", meta.tid, self.request_tag))
            if len(meta.tags) > 1:
                self.violations.append(
                    (
                        "T5",
                        f"{meta.tid!r}: EndTxn({'commit' if commit else 'abort'}) of client "
                        f"transaction {self.request_tag} ended coordinator transaction "
                        f"{meta.serial}, which holds client transactions {list(meta.tags)}",
                    )
                )
            self._prepare_end(meta, commit=commit, now=now)
            return self._txn_answer(END_TXN, version, _NONE)
        if state in (PREPARE_COMMIT, PREPARE_ABORT):
            same = (state == PREPARE_COMMIT) == commit
            return self._txn_answer(END_TXN, version, _CONCURRENT if same else _INVALID_TXN_STATE)
        if state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            same = (state == COMPLETE_COMMIT) == commit
            return self._txn_answer(END_TXN, version, _NONE if same else _INVALID_TXN_STATE)
        return self._txn_answer(END_TXN, version, _INVALID_TXN_STATE)

    def _prepare_end(self, meta: TxnMeta, *, commit: bool, now: float) -> None:
        self._to(meta, PREPARE_COMMIT if commit else PREPARE_ABORT)
        self._send_markers(meta, commit=commit)

    def _send_markers(self, meta: TxnMeta, *, commit: bool) -> None:
        """A marker to each partition of the transaction; Complete* once all answered."""
        meta.pending.clear()
        for tp in meta.partitions:
            self._next_marker += 1
            marker = Marker(
                mid=self._next_marker,
                tid=meta.tid,
                pid=meta.pid,
                epoch=meta.epoch,
                commit=commit,
                coordinator_epoch=self.coordinator_epoch,
                tp=tp,
                dst=self._marker_destination(tp),
                tags=tuple(meta.tags),
                serial=meta.serial,
                due=None,
            )
            meta.pending[tp] = marker.mid
            self.markers[marker.mid] = marker
            self.sent_markers[marker.mid] = marker
            self.markers_out.append(marker)
        if not meta.pending:
            self._complete(meta)

    def _marker_destination(self, tp: _TP) -> int:
        if tp[0].startswith("__consumer_offsets/"):
            return self.coordinator_node
        leader = self.leader(*tp)
        return self.txn_node if leader is None else leader

    def _complete(self, meta: TxnMeta) -> None:
        commit = meta.state == PREPARE_COMMIT
        self._to(meta, COMPLETE_COMMIT if commit else COMPLETE_ABORT)
        self.completed.append((meta.tid, meta.serial, commit))

    def _resend(self, marker: Marker, now: float | None) -> None:
        self.counts["marker resent"] += 1
        del self.markers[marker.mid]
        self._next_marker += 1
        again = attrs.evolve(
            marker,
            mid=self._next_marker,
            coordinator_epoch=self.coordinator_epoch,
            dst=self._marker_destination(marker.tp),
            due=None,
        )
        self.markers[again.mid] = again
        self.sent_markers[again.mid] = again
        self.markers_out.append(again)
        meta = self.txns[marker.tid]
        if meta.pending.get(marker.tp) == marker.mid:
            meta.pending[marker.tp] = again.mid

    def marker_lost(self, frame: bytes, *, now: float) -> None:
        """A marker's broker was down when it arrived: send it again after a backoff (the
        inter-broker channel is reliable otherwise; its 30 s request timeout is not
        modelled)."""
        (mid,) = struct.unpack_from(">i", frame, 8)
        marker = self.markers.get(mid)
        if marker is not None:
            marker.due = now + MARKER_RETRY

    def txn_timer(self) -> float | None:
        """When :meth:`handle_txn_timer` has something to do (a marker to send again, a
        transaction to time out)."""
        if self.loading_until is not None:
            return self.loading_until  # (nothing else happens while the log loads)
        times = [m.due for m in self.markers.values() if m.due is not None]
        times += [m.started + m.timeout for m in self.txns.values() if m.state == ONGOING]
        return min(times, default=None)

    def handle_txn_timer(self, *, now: float) -> None:
        """Finish loading the log; send lost markers again; abort transactions open past
        their timeout."""
        self._now = now
        if self.loading_until is not None:
            if now < self.loading_until:
                return
            self._loaded()
        for marker in sorted(self.markers.values(), key=lambda m: m.mid):
            if marker.due is not None and marker.due <= now:
                self._resend(marker, now)
        for meta in self.txns.values():
            if meta.state == ONGOING and meta.started + meta.timeout <= now:
                # TransactionCoordinator.abortTimedOutTransactions: fence, then abort
                self.counts["timeout abort"] += 1
                meta.last_epoch = meta.epoch
                self._set_epoch(meta, meta.epoch + 1)
                self._prepare_end(meta, commit=False, now=now)

    # -- markers at the partition leaders and the group coordinator

    def write_markers(self, node: int, frame: bytes) -> bytes:
        """Broker ``node`` handles a WriteTxnMarkers frame; returns the answer frame."""
        request = parse_request(frame)
        body = request.body
        cls = response_type(WRITE_TXN_MARKERS, request.version)
        result_cls = nested_type(cls, "WritableTxnMarkerResult")
        topic_cls = nested_type(cls, "WritableTxnMarkerTopicResult")
        part_cls = nested_type(cls, "WritableTxnMarkerPartitionResult")
        results = []
        for m in body.markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    code = self._apply_marker(
                        node,
                        (str(t.name), int(p)),
                        pid=int(m.producer_id),
                        epoch=int(m.producer_epoch),
                        commit=bool(m.transaction_result),
                        coordinator_epoch=int(m.coordinator_epoch),
                        mid=request.correlation_id,
                    )
                    parts.append(build(part_cls, partition_index=p, error_code=ErrorCode(code)))
                topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
            results.append(build(result_cls, producer_id=m.producer_id, topics=tuple(topics)))
        answer = build(cls, markers=tuple(results))
        buf = io.BytesIO()
        entity_writer(cls)(buf, answer)
        payload = struct.pack(">i", request.correlation_id) + b"\x00" + buf.getvalue()
        return struct.pack(">i", len(payload)) + payload

    def _apply_marker(
        self,
        node: int,
        tp: _TP,
        *,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        mid: int,
    ) -> int:
        marker = self.sent_markers.get(mid)
        tags = () if marker is None else marker.tags
        if tp[0].startswith("__consumer_offsets/"):
            if node != self.coordinator_node:
                return _NOT_COORDINATOR
            group = tp[0].split("/", 1)[1]
            seen = self._offset_coordinator_epochs.get((group, pid), -1)
            if coordinator_epoch < seen:
                self.counts["marker fenced"] += 1
                return _COORDINATOR_FENCED  # a copy from before the coordinator moved
            self._offset_coordinator_epochs[(group, pid)] = coordinator_epoch
            pending = self.pending_offsets.pop((group, pid), None)
            self.offset_epochs[(group, pid)] = max(self.offset_epochs.get((group, pid), -1), epoch)
            if pending and commit:
                stale = [t for t, (_o, e, tag) in pending.items() if tag not in tags and e == epoch]
                if stale:
                    self.violations.append(
                        (
                            "T5",
                            f"COMMIT of {tags} made offsets {sorted(stale)} of another client "
                            f"transaction ({sorted({pending[t][2] for t in stale}, key=str)}) "
                            "the committed ones",
                        )
                    )
                group_state = self.coordinator.groups.get(group)
                if group_state is None:
                    from kafkastate.sim.coordinator import SimGroup  # noqa: PLC0415

                    group_state = self.coordinator.groups[group] = SimGroup(group)
                for t, (offset, e, _tag) in pending.items():
                    if e == epoch:  # an older epoch's leftovers were fenced by the bump
                        group_state.offsets[t] = offset
            return _NONE
        part = self.parts.get(tp)
        if part is None:
            return _UNKNOWN_TOPIC
        if self.leader(*tp) != node:
            return _NOT_LEADER
        entry = part.producers.setdefault(pid, _ProducerEntry(epoch=epoch))
        if coordinator_epoch < entry.coordinator_epoch:
            self.counts["marker fenced"] += 1
            return _COORDINATOR_FENCED
        entry.coordinator_epoch = coordinator_epoch
        if epoch > entry.epoch:
            entry.epoch = epoch
            entry.recent.clear()
        txn = part.open.pop(pid, None)
        if txn is None:
            return _NONE  # nothing open (a retried marker, or nothing was written)
        foreign = [t for t in txn.tags if t not in tags]
        if foreign and marker is not None:
            self.violations.append(
                (
                    "T5",
                    f"{'COMMIT' if commit else 'ABORT'} marker of client transactions "
                    f"{list(tags)} closed records of client transactions {foreign} on {tp}",
                )
            )
        for batch in txn.batches:
            batch.status = "committed" if commit else "aborted"
        data = build_control_batch(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=_TIMESTAMP,
            base_offset=part.end,
            partition_leader_epoch=self.leader_epochs[tp],
        )
        last = part.end - 1
        part._add(
            data, pid=pid, epoch=epoch, transactional=True, control=True, values=(), status="marker"
        )
        if not commit:
            part.aborted.append((pid, txn.first, last))
        return _NONE

    def markers_answered(self, frame: bytes) -> None:
        """The coordinator reads a WriteTxnMarkers answer (a frame without size prefix)."""
        from kafkastate.core.protocol.framing import decode_body  # noqa: PLC0415

        (mid,) = struct.unpack_from(">i", frame, 0)
        marker = self.markers.get(mid)
        if marker is None:
            return  # sent again meanwhile; the newer copy counts
        cls = response_type(WRITE_TXN_MARKERS, _MARKER_VERSION)
        body = decode_body(cls, memoryview(frame), 5)
        codes = [int(p.error_code) for m in body.markers for t in m.topics for p in t.partitions]
        if any(code in (_NOT_LEADER, _NOT_COORDINATOR, _UNKNOWN_TOPIC) for code in codes):
            marker.due = self._now + MARKER_RETRY  # to the new leader, after a backoff
            return
        del self.markers[mid]
        meta = self.txns[marker.tid]
        if meta.pending.get(marker.tp) != mid:
            return
        del meta.pending[marker.tp]
        if not meta.pending and meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            self._complete(meta)

    # -- transactional offsets (the group coordinator)

    def _txn_offset_commit(self, node: int, version: int, body: Any) -> Any:
        cls = response_type(TXN_OFFSET_COMMIT, version)
        group, pid, epoch = str(body.group_id), int(body.producer_id), int(body.producer_epoch)
        code = _NONE
        if node != self.coordinator_node:
            code = _NOT_COORDINATOR
        else:
            # KIP-447: a stale generation or member is refused (transactional commits are
            # allowed while a rebalance completes)
            code = self.coordinator.commit_error(
                group,
                int(getattr(body, "generation_id", -1)),
                str(getattr(body, "member_id", "") or ""),
                getattr(body, "group_instance_id", None),
            )
            if code == _REBALANCE_IN_PROGRESS:
                code = _NONE
            if code == _NONE and epoch < self.offset_epochs.get((group, pid), -1):
                code = _INVALID_PRODUCER_EPOCH  # the offsets partition's producer state
        if code == _NONE:
            pending = self.pending_offsets.setdefault((group, pid), {})
            self.offset_epochs[(group, pid)] = epoch
            for t in body.topics:
                for p in t.partitions:
                    tp = (str(t.name), int(p.partition_index))
                    pending[tp] = (int(p.committed_offset), epoch, self.request_tag)
        topics = commit_answer(cls, "TxnOffsetCommit", body.topics, code)
        return build(cls, throttle_time=_NO_TIME, topics=topics)

    # ------------------------------------------------------------- views

    def committed_values(self, tp: _TP) -> list[bytes]:
        """What a read_committed reader sees of ``tp`` now, in order (up to the LSO,
        without aborted or control batches)."""
        part = self.parts[tp]
        lso = part.lso()
        out: list[bytes] = []
        for batch in part.txn_batches:
            if batch.base >= lso:
                break
            if batch.status in ("plain", "committed"):
                out.extend(batch.values)
        return out

    def batch_at(self, tp: _TP, offset: int) -> TxnBatch | None:
        """The batch holding ``offset``."""
        for batch in self.parts[tp].txn_batches:
            if batch.base <= offset <= batch.last:
                return batch
        return None
