"""Transactions as an operator sees them (KIP-664, KIP-1152): ListTransactions on every
broker, DescribeTransactions and fencing (InitProducerId) at each transactional id's
coordinator, DescribeProducers and the abort marker (WriteTxnMarkers) at each partition's
leader -- operations of the :class:`~kafkastate.core.admin.AdminMachine`.

Routes: a transaction coordinator is found with FindCoordinator ``key_type`` 1 and
followed when it moves (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE); a partition's leader
comes from metadata, refreshed on NOT_LEADER_OR_FOLLOWER. ``abort_transaction`` is what the
Java Admin does for a hanging transaction: it asks the partition's leader to write an abort
marker for the producer (WriteTxnMarkers, an API brokers otherwise send each other), so a
read_committed consumer's last stable offset moves past it.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from kafkastate.core.admin.operations import (
    Operation,
    PerBroker,
    Route,
    ToCoordinator,
    ToLeader,
    error_of,
)
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.structs import TopicPartition

__all__ = [
    "AbortTransactionSpec",
    "PartitionProducerState",
    "ProducerIdAndEpoch",
    "ProducerState",
    "TransactionDescription",
    "TransactionListing",
]

WRITE_TXN_MARKERS: Final = 27
DESCRIBE_PRODUCERS: Final = 61
DESCRIBE_TRANSACTIONS: Final = 65
LIST_TRANSACTIONS: Final = 66
_TRANSACTION: Final = 1  # FindCoordinator key_type of a transactional id


@attrs.frozen(kw_only=True)
class TransactionListing:
    """A transactional id a broker coordinates (``list_transactions``)."""

    transactional_id: str
    """The id."""
    producer_id: int
    """Its producer id."""
    state: str
    """``"Ongoing"``, ``"Empty"``, ``"CompleteCommit"``... (the broker's words)."""


@attrs.frozen(kw_only=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (``describe_transactions``)."""

    coordinator_id: int
    """The coordinator's broker id."""
    state: str
    """The transaction's state."""
    producer_id: int
    """The producer id."""
    producer_epoch: int
    """The producer epoch."""
    transaction_timeout_ms: int
    """Its ``transaction.timeout.ms``."""
    transaction_start_time_ms: int | None
    """When the open transaction started (ms since the epoch); None when none is open (an
    ``Empty`` id, one that only ran ``init_transactions``: the broker sends -1)."""
    topic_partitions: frozenset[TopicPartition]
    """The partitions in the open transaction."""


@attrs.frozen(kw_only=True)
class ProducerState:
    """A producer a partition's leader remembers (``describe_producers``)."""

    producer_id: int
    """Its id."""
    producer_epoch: int
    """Its epoch."""
    last_sequence: int
    """The last sequence number it wrote (-1: none)."""
    last_timestamp: int
    """The timestamp of its last write (ms)."""
    coordinator_epoch: int
    """The coordinator epoch of its last transaction marker (-1: none)."""
    current_transaction_start_offset: int
    """The first offset of its open transaction (-1: none open)."""


@attrs.frozen(kw_only=True)
class PartitionProducerState:
    """A partition's active producers."""

    active_producers: tuple[ProducerState, ...]
    """Each of them."""


def _partition(tp: Any) -> TopicPartition:
    return TopicPartition(*tp)


@attrs.frozen
class AbortTransactionSpec:
    """Which open transaction to abort on which partition (kafka-python's order);
    ``describe_producers`` of the partition gives the values."""

    topic_partition: TopicPartition = attrs.field(converter=_partition)
    """The partition the transaction hangs on."""
    producer_id: int
    """The producer's id."""
    producer_epoch: int
    """The producer's epoch."""
    coordinator_epoch: int = -1
    """The coordinator epoch of its last marker (-1 as the Java tool sends)."""


@attrs.frozen(kw_only=True)
class ProducerIdAndEpoch:
    """The producer id and the epoch that fenced the older ones (``fence_producers``)."""

    producer_id: int
    """The id."""
    producer_epoch: int
    """The new epoch."""


@attrs.define
class ListTransactions(PerBroker):
    """ListTransactions on every broker (or those given), one key per broker id."""

    name: ClassVar[str] = "list_transactions"
    state_filters: Sequence[str] = ()
    producer_id_filters: Sequence[int] = ()
    duration_filter_ms: int | None = None
    transactional_id_pattern: str | None = None

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        version = versions.version_for(LIST_TRANSACTIONS)
        filters = (
            ("duration_filter_ms", self.duration_filter_ms, 1, "Kafka 3.8"),
            ("transactional_id_pattern", self.transactional_id_pattern, 2, "Kafka 4.1 (KIP-1152)"),
        )
        for option, given, needed, since in filters:
            if given is not None:
                version = versions.require(
                    LIST_TRANSACTIONS,
                    feature=f"list_transactions({option}=...)",
                    remedy=f"that filter needs {since} or newer",
                    min_version=needed,
                )
        return build(
            request_type(LIST_TRANSACTIONS, version),
            state_filters=tuple(self.state_filters),
            producer_id_filters=tuple(self.producer_id_filters),
            duration_filter=-1 if self.duration_filter_ms is None else self.duration_filter_ms,
            transactional_id_pattern=self.transactional_id_pattern,
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, None, broker=keys[0])
        return {
            keys[0]: error
            or [
                TransactionListing(
                    transactional_id=str(t.transactional_id),
                    producer_id=int(t.producer_id),
                    state=str(t.transaction_state),
                )
                for t in response.transaction_states
            ]
        }


def _ms_of(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value) if value is not None else -1


@attrs.define
class _PerTransactionalId(Operation):
    """An operation at each transactional id's coordinator, one key per id."""

    transactional_ids: Sequence[str]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.transactional_ids)

    def route(self, key: Any) -> Route:
        return ToCoordinator(key, _TRANSACTION)


@attrs.define
class DescribeTransactions(_PerTransactionalId):
    """DescribeTransactions at each id's coordinator, one key per transactional id."""

    name: ClassVar[str] = "describe_transactions"

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_TRANSACTIONS)
        return build(cls, transactional_ids=tuple(keys))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return self.parse_from(response, keys, -1)

    def parse_from(self, response: Any, keys: Sequence[Any], node: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for t in response.transaction_states:
            tid = str(t.transactional_id)
            out[tid] = error_of(t.error_code, None, transactional_id=tid) or TransactionDescription(
                coordinator_id=int(node),
                state=str(t.transaction_state),
                producer_id=int(t.producer_id),
                producer_epoch=int(t.producer_epoch),
                transaction_timeout_ms=_ms_of(t.transaction_timeout),
                # None when no transaction is open (-1 on the wire, decoded to None)
                transaction_start_time_ms=(
                    None if t.transaction_start_time is None else _ms_of(t.transaction_start_time)
                ),
                topic_partitions=frozenset(
                    TopicPartition(p.topic, int(i)) for p in t.topics for i in p.partitions
                ),
            )
        return out


@attrs.define
class DescribeProducers(Operation):
    """DescribeProducers at each partition's leader, one key per partition."""

    name: ClassVar[str] = "describe_producers"
    partitions: Sequence[TopicPartition]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.partitions)

    def route(self, key: Any) -> Route:
        return ToLeader(key.topic, key.partition)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_PRODUCERS)
        topic_cls = nested_type(cls, "TopicRequest")
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(keys):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return build(
            cls,
            topics=tuple(
                build(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
            ),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                out[tp] = error_of(
                    p.error_code, p.error_message, topic=tp.topic, partition=tp.partition
                ) or PartitionProducerState(
                    active_producers=tuple(
                        ProducerState(
                            producer_id=int(s.producer_id),
                            producer_epoch=int(s.producer_epoch),
                            last_sequence=int(s.last_sequence),
                            last_timestamp=int(s.last_timestamp),
                            coordinator_epoch=int(s.coordinator_epoch),
                            current_transaction_start_offset=int(s.current_txn_start_offset),
                        )
                        for s in p.active_producers
                    )
                )
        return out


@attrs.define
class AbortTransaction(Operation):
    """WriteTxnMarkers (abort) at the partition's leader; the one key is the partition."""

    name: ClassVar[str] = "abort_transaction"
    batch: ClassVar[bool] = False
    spec: AbortTransactionSpec

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [self.spec.topic_partition]

    def route(self, key: Any) -> Route:
        return ToLeader(key.topic, key.partition)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(WRITE_TXN_MARKERS)
        topic_cls = nested_type(cls, "WritableTxnMarkerTopic")
        tp = self.spec.topic_partition
        marker = build(
            nested_type(cls, "WritableTxnMarker"),
            producer_id=self.spec.producer_id,
            producer_epoch=self.spec.producer_epoch,
            transaction_result=False,  # abort
            topics=(build(topic_cls, name=tp.topic, partition_indexes=(tp.partition,)),),
            coordinator_epoch=self.spec.coordinator_epoch,
            transaction_version=0,
        )
        return build(cls, markers=(marker,))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            TopicPartition(t.name, int(p.partition_index)): error_of(
                p.error_code, None, topic=t.name, partition=int(p.partition_index)
            )
            for m in response.markers
            for t in m.topics
            for p in t.partitions
        }


@attrs.define
class FenceProducers(_PerTransactionalId):
    """InitProducerId for each transactional id at its coordinator: the epoch bump fences
    every producer of that id (KIP-618's ``fenceProducers``), one key per id."""

    name: ClassVar[str] = "fence_producers"
    batch: ClassVar[bool] = False

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(ApiKey.INIT_PRODUCER_ID)
        return build(
            cls,
            transactional_id=keys[0],
            # only to fence: the new epoch writes nothing, so its transactions may time
            # out at once (as the Java Admin asks)
            transaction_timeout=datetime.timedelta(milliseconds=1),
            producer_id=-1,
            producer_epoch=-1,
            enable2_pc=False,
            keep_prepared_txn=False,
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, None, transactional_id=keys[0])
        return {
            keys[0]: error
            or ProducerIdAndEpoch(
                producer_id=int(response.producer_id), producer_epoch=int(response.producer_epoch)
            )
        }


FINISHED_STATES: Final = frozenset({"Empty", "CompleteCommit", "CompleteAbort", "Dead"})
"""Transaction states with nothing left open (the others may hang)."""


def hanging_transactions(
    descriptions: Mapping[str, TransactionDescription], *, now_ms: int, threshold_ms: int
) -> list[tuple[str, TransactionDescription, int]]:
    """The open transactions that started ``threshold_ms`` or more before ``now_ms``
    (``kafka-transactions.sh find-hanging``'s rule: older than the longest allowed
    transaction timeout), as ``(transactional id, description, age in ms)``, oldest
    first. A description whose start time is unknown (None) is left out."""
    out = []
    for tid, d in descriptions.items():
        start = d.transaction_start_time_ms
        if d.state in FINISHED_STATES or start is None or start < 0:
            continue
        age = now_ms - start
        if age >= threshold_ms:
            out.append((tid, d, age))
    return sorted(out, key=lambda item: -item[2])
