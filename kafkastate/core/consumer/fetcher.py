"""FetcherMachine: the sans-IO consumer without groups -- positions, offsets and fetching.

Theory of operation
-------------------
The machine owns a :class:`~kafkastate.core.client.Client` and exposes its IO surface
unchanged, like the producer. Partitions are assigned by the application (``assign``);
group membership comes later and drives the same ``assign``. Each assigned partition is in
one :class:`PositionState`:

* ``AWAIT_COMMITTED`` -- a ``group_id`` is set and no position is known: the committed
  offset is asked for (FindCoordinator, then OffsetFetch). A committed offset becomes the
  position; none (-1) falls through to the reset policy.
* ``AWAIT_RESET`` -- the position comes from ListOffsets with the partition's reset
  strategy (earliest = -2, latest = -1, or a timestamp for ``seek_to_timestamp``).
  ``auto_offset_reset="none"`` instead parks the partition in ``FAILED`` with a
  :class:`~kafkastate.errors.NoOffsetForPartitionError` that :meth:`poll` raises.
* ``AWAIT_VALIDATION`` -- the position carries the leader epoch of the record before it
  (KIP-320) and the partition's leader changed since the position was known good (or the
  position is a committed offset with an epoch): OffsetForLeaderEpoch asks the current
  leader where that epoch ends in its log. At or past the position: fetching goes on. Below
  it, the log was truncated under the consumer (an unclean leader election): with a reset
  policy the position moves back to the end offset, where the logs diverge (Java does the
  same); with ``none`` the partition FAILS with a
  :class:`~kafkastate.errors.LogTruncationError`. An epoch the leader does not know at all
  resets by policy. Brokers without OffsetForLeaderEpoch v3 skip the check.
* ``FETCHING`` -- the position is known; the partition is fetched from its leader (or the
  preferred read replica the leader named, KIP-392) whenever it is not paused and has no
  fetched data waiting for the application (aiokafka's per-partition prefetch: a partition
  drained by :meth:`poll` is fetched again at once).

One Fetch request per node is in flight at a time, built from that node's incremental fetch
session (KIP-227, :mod:`kafkastate.core.consumer.fetch_session`). A Fetch that would name only
partitions already at their end waits while another partition of the same node still has data
for the application: the broker would hold it for ``fetch_max_wait``, and the partition being
drained, which has more to read, could not be fetched meanwhile. A partition's data is kept
as it arrived (:class:`_Completed`) and decoded only when :meth:`poll` reaches it; data
fetched for a position that has since moved (a seek) is dropped.

Per-partition fetch errors, as the Java fetcher handles them: NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR,
OFFSET_NOT_AVAILABLE -> refresh metadata and fetch again; OFFSET_OUT_OF_RANGE -> reset by
policy (``none``: fail the partition); authorization errors and anything else -> the
partition is FAILED with the typed error, raised by the next :meth:`poll` and cleared by
a seek.

Group membership (optional, ``group=``): a :class:`~kafkastate.core.consumer.group.GroupMember`
(classic protocol, ``GroupConfig``) or a
:class:`~kafkastate.core.consumer.group848.ConsumerGroupMember` (KIP-848, ``ConsumerGroupConfig``)
runs inside the machine. :meth:`FetcherMachine.subscribe` hands it the topics; the machine finds
the coordinator for it, sends its requests and routes the answers back, gives it partition
counts from metadata, and turns its decisions into the assignment: :class:`PartitionsRevoked`
(fetching of those partitions stops at once; the application commits and runs its listener,
then calls :meth:`FetcherMachine.revocation_done`, which drops them) and
:class:`PartitionsAssigned` (the partitions are assigned and look for their committed offset;
the application runs its listener and calls :meth:`FetcherMachine.assignment_done`). Commits
carry the member's generation and id, so a member that fell out of the group cannot overwrite
the new owner's offsets.

read_committed (KIP-98): the broker stops the data at the last stable offset and lists the
aborted transactions that overlap it; batches of a producer from its aborted transaction's
first offset up to its ABORT marker are skipped. Control batches never reach the
application, but the position moves past them.
"""

from __future__ import annotations

import datetime
import enum
import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from kafkastate.core.client import (
    Client,
    ClientConfig,
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    NodeDisconnected,
    RequestCompleted,
    RequestFailed,
    RequestId,
)
from kafkastate.core.consumer.fetch_session import (
    FetchSession,
    PartitionFetchState,
    fetch_request_from_session,
)
from kafkastate.core.consumer.group import (
    AssignPartitions,
    GroupConfig,
    GroupFailed,
    GroupMember,
    MemberState,
    RevokePartitions,
)
from kafkastate.core.consumer.group848 import ConsumerGroupConfig, ConsumerGroupMember
from kafkastate.core.metadata import NodeId
from kafkastate.core.protocol.records import Batch, ControlRecordType, Record, iter_batches
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.errors import (
    CommitFailedError,
    KafkaConfigurationError,
    KafkaError,
    LocalProtocolError,
    LogTruncationError,
    NoOffsetForPartitionError,
    RecordTooLargeError,
    UnsupportedVersionError,
    error_for_code,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "CommittedOffsets",
    "FetcherConfig",
    "FetcherEvent",
    "FetcherMachine",
    "GroupFailed",
    "GroupLeft",
    "ListedOffset",
    "OffsetsCommitted",
    "OffsetsListed",
    "PartitionsAssigned",
    "PartitionsRevoked",
    "PositionState",
    "PositionsResolved",
    "RecordsFetched",
    "TopicPartition",
]

TopicPartition = tuple[str, int]
"""``(topic, partition)``."""

EARLIEST: Final = -2
"""ListOffsets timestamp for the log start offset."""
LATEST: Final = -1
"""ListOffsets timestamp for the log end (high watermark, or LSO for read_committed)."""

_RESETS: Final = {"earliest": EARLIEST, "latest": LATEST, "none": None}

# Fetch errors after which the partition is fetched again once metadata was refreshed.
_REFRESH_CODES: Final = frozenset(
    {
        6,  # NOT_LEADER_OR_FOLLOWER
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        56,  # KAFKA_STORAGE_ERROR
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
        78,  # OFFSET_NOT_AVAILABLE
        100,  # UNKNOWN_TOPIC_ID
        106,  # INCONSISTENT_TOPIC_ID
        5,  # LEADER_NOT_AVAILABLE
        9,  # REPLICA_NOT_AVAILABLE
    }
)
_OFFSET_OUT_OF_RANGE: Final = 1
# FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: the session handles them.
_SESSION_ERRORS: Final = frozenset({70, 71})
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look again.
_COORDINATOR_MOVED: Final = frozenset({14, 15, 16})
# OffsetCommit codes meaning the member is not (any more) in the generation that owns the
# partitions: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
# FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH.
_COMMIT_FENCED: Final = frozenset({22, 25, 27, 82, 113})
_REJOIN_ON_COMMIT: Final = frozenset({22, 25})
# How long a member that just subscribed waits for its topics' metadata before joining.
_SUBSCRIPTION_METADATA_WAIT: Final = 3.0


def _positive(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise KafkaConfigurationError(f"{attr.name} must be a number >= 0, got {value!r}")


def _positive_int(_inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KafkaConfigurationError(f"{attr.name} must be an int >= 1, got {value!r}")


def _reset_name(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    if value not in _RESETS:
        raise KafkaConfigurationError(
            f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {value!r}"
        )


def _isolation(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    if value not in ("read_uncommitted", "read_committed"):
        raise KafkaConfigurationError(
            f"isolation_level must be 'read_uncommitted' or 'read_committed', got {value!r}"
        )


@attrs.frozen(kw_only=True)
class FetcherConfig:
    """Settings of a :class:`FetcherMachine`. Durations are float seconds."""

    client: ClientConfig
    """Connections and metadata."""
    group_id: str | None = None
    """``group.id``: where committed offsets are read and written; None for none."""
    auto_offset_reset: str = attrs.field(default="latest", validator=_reset_name)
    """``auto.offset.reset``: ``earliest``, ``latest`` or ``none``."""
    isolation_level: str = attrs.field(default="read_uncommitted", validator=_isolation)
    """``isolation.level``."""
    fetch_min_bytes: int = attrs.field(default=1, validator=_positive_int)
    """``fetch.min.bytes``."""
    fetch_max_wait: float = attrs.field(default=0.5, validator=_positive)
    """``fetch.max.wait.ms``: how long the broker may hold a Fetch for min bytes."""
    fetch_max_bytes: int = attrs.field(default=52_428_800, validator=_positive_int)
    """``fetch.max.bytes``: the response size limit (a first batch larger than it is
    still returned: the broker always makes progress)."""
    max_partition_fetch_bytes: int = attrs.field(default=1_048_576, validator=_positive_int)
    """``max.partition.fetch.bytes`` (same progress rule, per partition)."""
    check_crcs: bool = True
    """``check.crcs``: verify each batch's CRC32C."""
    client_rack: str = ""
    """``client.rack`` (KIP-392): lets the leader name a closer replica to fetch from."""
    retry_backoff: float = attrs.field(default=0.1, validator=_positive)
    """``retry.backoff.ms``: wait after a failed Fetch / ListOffsets / OffsetFetch."""
    use_fetch_sessions: bool = True
    """Incremental fetch sessions (KIP-227); False sends full sessionless fetches."""

    @property
    def read_committed(self) -> bool:
        """Whether ``isolation_level`` is read_committed."""
        return self.isolation_level == "read_committed"


# ------------------------------------------------------------------------------- events


@attrs.frozen(kw_only=True)
class RecordsFetched:
    """Data arrived for these partitions: :meth:`FetcherMachine.poll` has records (or an
    error) to hand out."""

    partitions: tuple[TopicPartition, ...]
    """The partitions with new data, in response order."""


@attrs.frozen(kw_only=True)
class PositionsResolved:
    """Looking up positions (committed offsets, resets) ended for these partitions: each
    is now FETCHING, FAILED, or waiting to try again."""

    partitions: tuple[TopicPartition, ...]
    """The partitions whose lookup ended."""


@attrs.frozen(kw_only=True)
class ListedOffset:
    """One partition's answer to a ListOffsets query."""

    offset: int
    """The offset (-1: none, e.g. no record at or after the timestamp)."""
    timestamp: int
    """The record's timestamp for a timestamp query, else -1."""
    leader_epoch: int
    """The leader epoch of that offset, -1 if unknown."""


@attrs.frozen(kw_only=True)
class OffsetsListed:
    """The outcome of :meth:`FetcherMachine.list_offsets`."""

    query_id: int
    """The id ``list_offsets`` returned."""
    offsets: Mapping[TopicPartition, ListedOffset]
    """Per partition; absent if the query failed."""
    error: KafkaError | None
    """The first error that made the query fail, or None."""


@attrs.frozen(kw_only=True)
class CommittedOffsets:
    """The outcome of :meth:`FetcherMachine.fetch_committed`."""

    query_id: int
    """The id ``fetch_committed`` returned."""
    offsets: Mapping[TopicPartition, tuple[int, str | None] | None]
    """Per partition: ``(offset, metadata)``, or None if the group committed nothing."""
    error: KafkaError | None
    """Why the query failed, or None."""


@attrs.frozen(kw_only=True)
class OffsetsCommitted:
    """The outcome of :meth:`FetcherMachine.commit`."""

    query_id: int
    """The id ``commit`` returned."""
    offsets: Mapping[TopicPartition, int]
    """What was committed."""
    error: KafkaError | None
    """Why the commit failed (the first partition error), or None."""


@attrs.frozen(kw_only=True)
class PartitionsRevoked:
    """The group takes these partitions away (``lost``: the member fell out of the
    generation that owned them; a commit would be refused). They are no longer fetched or
    handed out; commit what was consumed (unless lost), run the listener, then call
    :meth:`FetcherMachine.revocation_done`."""

    partitions: tuple[TopicPartition, ...]
    """The partitions, sorted."""
    lost: bool
    """Lost rather than revoked."""


@attrs.frozen(kw_only=True)
class PartitionsAssigned:
    """The group's new assignment is in place (new partitions look for their committed
    offsets); run the listener, then call :meth:`FetcherMachine.assignment_done`."""

    assigned: tuple[TopicPartition, ...]
    """Everything assigned now."""
    added: tuple[TopicPartition, ...]
    """What this assignment added."""
    generation: int
    """The group generation."""


@attrs.frozen(kw_only=True)
class GroupLeft:
    """After :meth:`FetcherMachine.leave_group`: the member's last request (LeaveGroup, or
    the leaving heartbeat) was answered or failed, or there was nothing to send. Closing
    the connections now loses nothing."""


FetcherEvent = (
    ConnectRequested
    | CloseRequested
    | MetadataUpdated
    | RecordsFetched
    | PositionsResolved
    | OffsetsListed
    | CommittedOffsets
    | OffsetsCommitted
    | PartitionsRevoked
    | PartitionsAssigned
    | GroupFailed
    | GroupLeft
)


# ---------------------------------------------------------------------- partition state


class PositionState(enum.Enum):
    """Where an assigned partition's position stands."""

    AWAIT_COMMITTED = "await_committed"
    """Waiting for the group's committed offset."""
    AWAIT_RESET = "await_reset"
    """Waiting for ListOffsets by the reset strategy."""
    AWAIT_VALIDATION = "await_validation"
    """Checking the position against the current leader's log (OffsetForLeaderEpoch)."""
    FETCHING = "fetching"
    """The position is known; fetched when not paused."""
    FAILED = "failed"
    """An error the application must see (raised by ``poll``); a seek clears it."""


@attrs.define(slots=True)
class _Partition:
    state: PositionState
    position: int = -1
    position_epoch: int = -1  # leader epoch of the record before the position (KIP-320)
    leader_epoch: int = -1  # the metadata leader epoch the position is known good under
    reset_to: int | None = None  # ListOffsets timestamp while AWAIT_RESET
    paused: bool = False
    error: KafkaError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    last_fetch_at: float | None = None  # when data last arrived for it (driver clock)
    in_flight: bool = False  # a Fetch, ListOffsets or OffsetFetch names it
    backoff_until: float = 0.0
    awaits_metadata: bool = False  # not tried again before fresh metadata arrives
    seeks: int = 0  # which placing of the position this is (to spot stale answers)
    revoking: bool = False  # the group is taking it away: neither fetched nor handed out
    read_replica: NodeId | None = None


@attrs.define(slots=True)
class _Completed:
    """One partition's data from one Fetch response, decoded lazily by ``poll``."""

    tp: TopicPartition
    fetch_offset: int
    records: bytes
    aborted: list[tuple[int, int]]  # (first_offset, producer_id), sorted
    batches: Any = None  # iterator over decoded batches, made on first poll
    pending: list[Record] = attrs.field(factory=list)  # the decoded batch being handed out
    taken: int = 0  # how many of ``pending`` were handed out
    aborted_producers: set[int] = attrs.field(factory=set)
    next_offset: int = -1  # the position after everything consumed so far
    leader_epoch: int = -1


@attrs.define(slots=True)
class _Query:
    kind: str  # "list", "committed", "commit"
    query_id: int
    partitions: dict[TopicPartition, Any]  # timestamp / None / (offset, metadata)
    results: dict[TopicPartition, Any] = attrs.field(factory=dict)
    outstanding: int = 0  # requests in flight for it
    error: KafkaError | None = None
    retry_at: float | None = None
    internal: bool = False  # a position reset, not the application's
    awaits_metadata: bool = False  # retry_at was set only to wait for metadata
    epochs: dict[TopicPartition, int] = attrs.field(factory=dict)  # committed leader epochs
    seeks: dict[TopicPartition, int] = attrs.field(factory=dict)  # _Partition.seeks when sent


# --------------------------------------------------------------------------- the machine


class FetcherMachine:
    """The sans-IO fetcher: positions, offset queries and Fetch sessions over a Client.

    Args:
        config: the settings.
        rng: seeded randomness (backoff jitter, node choice).
        group: group membership settings (``config.group_id`` must name the same group),
            or None to assign partitions by hand only.

    Raises:
        KafkaConfigurationError: ``group`` without the same ``group_id`` in ``config``.
    """

    def __init__(
        self,
        config: FetcherConfig,
        *,
        rng: random.Random,
        group: GroupConfig | ConsumerGroupConfig | None = None,
    ) -> None:
        if group is not None and group.group_id != config.group_id:
            raise KafkaConfigurationError(
                f"group membership for {group.group_id!r} needs group_id={group.group_id!r}"
            )
        self.config = config
        self.member: Final[GroupMember | ConsumerGroupMember | None] = (
            None
            if group is None
            else ConsumerGroupMember(group, rng=rng)
            if isinstance(group, ConsumerGroupConfig)
            else GroupMember(group)
        )
        """The group member machine (classic or KIP-848 protocol), or None."""
        self._member_coordinator: NodeId | None = None  # what the member was told
        self._leaving = False  # leave_group was called; GroupLeft not yet emitted
        self._subscription_wait_until = 0.0  # joining waits for the topics' metadata
        self._group_requests: dict[RequestId, str] = {}
        self._client = Client(config.client, rng=rng, topics=())
        self._parts: dict[TopicPartition, _Partition] = {}
        self._completed: dict[TopicPartition, _Completed] = {}
        self._sessions: dict[NodeId, FetchSession] = {}
        self._fetching: dict[RequestId, tuple[NodeId, dict[TopicPartition, int]]] = {}
        # OffsetForLeaderEpoch in flight: tp -> (position, position epoch, leader epoch)
        self._validating: dict[RequestId, dict[TopicPartition, tuple[int, int, int]]] = {}
        self._node_busy: set[NodeId] = set()
        self._node_backoff: dict[NodeId, float] = {}
        self._queries: dict[int, _Query] = {}
        self._query_requests: dict[RequestId, tuple[int, str, list[TopicPartition]]] = {}
        self._query_topic_ids: dict[RequestId, dict[Any, str]] = {}
        self._next_query = 0
        self._coordinator: NodeId | None = None
        self._coordinator_rid: RequestId | None = None
        self._coordinator_retry_at = 0.0
        self._coordinator_unknown: NodeId | None = None  # found, not yet in metadata
        self._metadata_news = False  # metadata arrived during this step's last pull
        self._seek_serial = 0  # numbers every placing of a position (_Partition.seeks)
        self._events: deque[FetcherEvent] = deque()
        self._now = 0.0
        self._closed = False

    # ---------------------------------------------------------------- queries

    @property
    def client(self) -> Client:
        """The Client (metadata, connections)."""
        return self._client

    def assignment(self) -> tuple[TopicPartition, ...]:
        """The assigned partitions, in assignment order."""
        return tuple(self._parts)

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record :meth:`poll` returns, or None while unknown.

        Raises:
            LocalProtocolError: ``tp`` is not assigned.
        """
        p = self._part(tp)
        return p.position if p.state is PositionState.FETCHING else None

    def position_state(self, tp: TopicPartition) -> PositionState:
        """How ``tp``'s position stands.

        Raises:
            LocalProtocolError: ``tp`` is not assigned.
        """
        return self._part(tp).state

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark the last Fetch reported, or None before one."""
        p = self._part(tp)
        return None if p.high_watermark < 0 else p.high_watermark

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        """The last stable offset the last Fetch reported, or None before one."""
        p = self._part(tp)
        return None if p.last_stable_offset < 0 else p.last_stable_offset

    def last_fetch_time(self, tp: TopicPartition) -> float | None:
        """When data (possibly empty) last arrived for ``tp``, on the driver's clock."""
        return self._part(tp).last_fetch_at

    def paused(self) -> tuple[TopicPartition, ...]:
        """The paused partitions."""
        return tuple(tp for tp, p in self._parts.items() if p.paused)

    def has_records(self) -> bool:
        """Whether :meth:`poll` would return something (records or an error) now."""
        if any(p.state is PositionState.FAILED for p in self._parts.values()):
            return True
        return any(
            not self._parts[tp].paused
            and (c.taken < len(c.pending) or c.batches is None or c.records)
            for tp, c in self._completed.items()
        )

    # --------------------------------------------------------------- commands

    def assign(self, partitions: Iterable[TopicPartition], *, now: float) -> None:
        """Replace the assignment. Kept partitions keep their position; new ones look for
        one (committed offset with a group, else the reset policy).

        Raises:
            KafkaConfigurationError: a malformed ``(topic, partition)``.
        """
        wanted: dict[TopicPartition, None] = {}
        for tp in partitions:
            if (
                not isinstance(tp, tuple)
                or len(tp) != 2
                or not isinstance(tp[0], str)
                or not tp[0]
                or isinstance(tp[1], bool)
                or not isinstance(tp[1], int)
                or tp[1] < 0
            ):
                raise KafkaConfigurationError(
                    f"a partition must be a (topic: str, partition: int >= 0) pair, got {tp!r}"
                )
            wanted[(tp[0], tp[1])] = None
        if self.member is not None and self.member.subscription:
            raise LocalProtocolError("assign() while subscribed through the group")
        self._set_assignment(wanted)
        self._step(now)

    def _set_assignment(self, wanted: Mapping[TopicPartition, None]) -> None:
        for tp in list(self._parts):
            if tp not in wanted:
                del self._parts[tp]
                self._completed.pop(tp, None)
        for tp in wanted:
            if tp not in self._parts:
                self._parts[tp] = self._fresh_partition(tp)
        self._client.metadata.add_topics(sorted({t for t, _ in wanted}))

    # -- group membership

    def subscribe(self, topics: Iterable[str], *, now: float) -> None:
        """Join the group for ``topics``: the group assigns their partitions
        (:class:`PartitionsAssigned`). Changing the list makes the member rejoin with it;
        unsubscribing (an empty list) is not supported yet: use :meth:`leave_group`.

        Raises:
            LocalProtocolError: no group membership configured.
            KafkaConfigurationError: a malformed topic list.
        """
        member = self._group_member()
        names = list(topics)
        self._client.metadata.add_topics(names)
        self._client.request_metadata_update()
        self._subscription_wait_until = now + _SUBSCRIPTION_METADATA_WAIT
        member.subscribe(names, now=now)
        self._step(now)

    def revocation_done(self, *, now: float) -> None:
        """The application is done with the last :class:`PartitionsRevoked`: the
        partitions leave the assignment and the group protocol goes on.

        Raises:
            LocalProtocolError: no group membership configured.
            IllegalStateError: no revocation pending.
        """
        member = self._group_member()
        keep = {tp: None for tp, p in self._parts.items() if not p.revoking}
        member.revocation_done(now=now)
        self._set_assignment(keep)
        self._step(now)

    def assignment_done(self, *, now: float) -> None:
        """The application is done with the last :class:`PartitionsAssigned`.

        Raises:
            LocalProtocolError: no group membership configured.
            IllegalStateError: no assignment pending.
        """
        self._group_member().assignment_done(now=now)
        self._step(now)

    def leave_group(self, *, now: float) -> None:
        """Leave the group before closing (LeaveGroup for dynamic members); revoke the
        partitions first (commit, listener). The request goes out with the next write."""
        if self.member is None or self._leaving:
            return
        self._leaving = True
        self.member.close(now=now)
        self._step(now)

    def polled(self, *, now: float) -> None:
        """The application took records without :meth:`poll` (from its own buffer): the
        group member's ``max_poll_interval`` clock restarts as in :meth:`poll`."""
        if self.member is not None:
            self.member.polled(now=now)
            self._step(now)

    def _group_member(self) -> GroupMember | ConsumerGroupMember:
        if self.member is None:
            raise LocalProtocolError("no group membership: the consumer was made without one")
        return self.member

    def seek(self, tp: TopicPartition, offset: int, *, now: float) -> None:
        """Fetch ``tp`` from ``offset`` next.

        Raises:
            LocalProtocolError: ``tp`` is not assigned.
            KafkaConfigurationError: ``offset`` is not an int >= 0.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise KafkaConfigurationError(f"offset must be an int >= 0, got {offset!r}")
        p = self._part(tp)
        self._moved(p)
        p.state, p.position, p.position_epoch, p.error = PositionState.FETCHING, offset, -1, None
        p.reset_to, p.leader_epoch = None, -1
        self._completed.pop(tp, None)
        self._step(now)

    def seek_to(self, tps: Iterable[TopicPartition], timestamp: int, *, now: float) -> None:
        """Reset positions with ListOffsets: :data:`EARLIEST`, :data:`LATEST`, or a
        timestamp in ms (the first record at or after it; the end if there is none).

        Raises:
            LocalProtocolError: a partition is not assigned.
        """
        for tp in tps:
            p = self._part(tp)
            self._moved(p)
            p.state, p.reset_to, p.error = PositionState.AWAIT_RESET, timestamp, None
            self._completed.pop(tp, None)
        self._step(now)

    def seek_to_committed(self, tps: Iterable[TopicPartition], *, now: float) -> None:
        """Move positions to the group's committed offsets (the reset policy where there
        are none).

        Raises:
            LocalProtocolError: a partition is not assigned, or there is no group_id.
        """
        if self.config.group_id is None:
            raise LocalProtocolError("seek_to_committed needs a group_id")
        for tp in tps:
            p = self._part(tp)
            self._moved(p)
            p.state, p.error = PositionState.AWAIT_COMMITTED, None
            self._completed.pop(tp, None)
        self._step(now)

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions and handing out their records (data already
        fetched is kept for when they are resumed)."""
        for tp in tps:
            self._part(tp).paused = True
        # Fetches held back for the sake of these partitions' buffered data go now.
        self._step(self._now)

    def resume(self, tps: Iterable[TopicPartition], *, now: float) -> None:
        """Undo :meth:`pause`."""
        for tp in tps:
            self._part(tp).paused = False
        self._step(now)

    def poll(
        self, max_records: int, *, now: float
    ) -> list[tuple[TopicPartition, list[Record], int]]:
        """Hand out up to ``max_records`` fetched records and advance the positions.

        Partitions take turns (one partition's run of records, then the next), so a busy
        partition does not starve the others.

        Returns:
            ``(partition, records, leader_epoch)`` runs, each run in offset order.

        Raises:
            KafkaError: a partition FAILED (no offset and reset policy ``none``, an
                authorization error, corrupt data...): the first such error. The partition
                stays FAILED until a seek.
        """
        member = self.member
        if member is not None:
            member.polled(now=now)
            if not member.active and member.error is not None:
                raise member.error
        for part in self._parts.values():
            if part.state is PositionState.FAILED and part.error is not None and not part.paused:
                raise part.error
        out: list[tuple[TopicPartition, list[Record], int]] = []
        left = max_records
        drained: list[TopicPartition] = []
        for tp in list(self._completed):
            if left <= 0:
                break
            p = self._parts.get(tp)
            if p is None or p.paused or p.revoking:
                continue
            done = self._completed[tp]
            try:
                records = self._take(done, p, left)
            except KafkaError as exc:
                del self._completed[tp]
                p.state, p.error = PositionState.FAILED, exc
                if out:
                    break  # hand out what we have; the error comes next time
                raise
            if records:
                out.append((tp, records, done.leader_epoch))
                left -= len(records)
            if done.taken >= len(done.pending) and done.batches is False:
                drained.append(tp)
        for tp in drained:
            self._completed.pop(tp, None)
        if drained:
            self._step(now)
        return out

    def list_offsets(self, timestamps: Mapping[TopicPartition, int], *, now: float) -> int:
        """Ask the leaders for offsets by timestamp (:data:`EARLIEST`, :data:`LATEST`, or
        ms). :class:`OffsetsListed` answers with the returned id.

        Raises:
            KafkaConfigurationError: a malformed partition or timestamp.
        """
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < -2:
                raise KafkaConfigurationError(f"timestamp for {tp} must be an int, got {ts!r}")
        self._client.metadata.add_topics(sorted({t for t, _ in timestamps}))
        qid = self._new_query("list", dict(timestamps))
        self._step(now)
        return qid

    def fetch_committed(self, tps: Iterable[TopicPartition], *, now: float) -> int:
        """Ask the group coordinator for committed offsets; :class:`CommittedOffsets`
        answers.

        Raises:
            LocalProtocolError: no group_id.
        """
        if self.config.group_id is None:
            raise LocalProtocolError("committed offsets need a group_id")
        qid = self._new_query("committed", dict.fromkeys(tps))
        self._step(now)
        return qid

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | tuple[int, str]],
        *,
        now: float,
        generation: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> int:
        """Commit offsets for the group (OffsetCommit); :class:`OffsetsCommitted` answers.
        Without a generation (-1) the broker accepts the commit only while the group has
        no active members -- the manual-assignment case.

        Raises:
            LocalProtocolError: no group_id.
            KafkaConfigurationError: a malformed offset.
        """
        if self.config.group_id is None:
            raise LocalProtocolError("commit needs a group_id")
        if self.member is not None and generation < 0 and self.member.generation >= 0:
            # a group member commits as one: the coordinator fences other generations
            generation, member_id, group_instance_id = self.member.commit_identity()
        parts: dict[TopicPartition, Any] = {}
        for tp, value in offsets.items():
            offset, meta = value if isinstance(value, tuple) else (value, "")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise KafkaConfigurationError(f"offset for {tp} must be an int >= 0")
            # Committing the position: its leader epoch goes along (KIP-320), so whoever
            # resumes from it can validate it.
            p = self._parts.get(tp)
            epoch = -1
            if p is not None and p.state is PositionState.FETCHING and p.position == offset:
                epoch = p.position_epoch
            parts[tp] = (offset, meta, generation, member_id, group_instance_id, epoch)
        qid = self._new_query("commit", parts)
        member = self.member
        if (
            isinstance(member, GroupMember)
            and member.state in (MemberState.JOINING, MemberState.SYNCING)
            and member.generation >= 0
        ):
            # As Java: no commit while the member is rejoining. The generation it would carry
            # is the new one, whose assignment the application has not seen: it could commit
            # a partition that generation gives to another member (found by the simulator).
            q = self._queries[qid]
            q.error = self._commit_fenced(27, next(iter(parts), ("", 0))[0])
            self._complete_query(q, now)
            return qid
        self._step(now)
        return qid

    def close(self) -> None:
        """Close every connection; outstanding queries fail."""
        if self._closed:
            return
        self._closed = True
        self._client.close()
        self._pull_client(self._now)

    # ------------------------------------------------------------ IO inputs

    def connection_made(self, node_id: NodeId, *, now: float) -> None:
        """The adapter's socket to ``node_id`` is connected."""
        self._client.connection_made(node_id, now=now)
        self._step(now)

    def connection_failed(
        self, node_id: NodeId, *, now: float, error: BaseException | None = None
    ) -> None:
        """The adapter could not connect to ``node_id``."""
        self._client.connection_failed(node_id, now=now, error=error)
        self._step(now)

    def connection_lost(
        self, node_id: NodeId, *, now: float, error: BaseException | None = None
    ) -> None:
        """The adapter's socket to ``node_id`` closed or failed."""
        self._client.connection_lost(node_id, now=now, error=error)
        self._step(now)

    def receive_data(self, node_id: NodeId, data: bytes, *, now: float) -> None:
        """Bytes read from ``node_id``'s socket (``b""`` = EOF)."""
        self._client.receive_data(node_id, data, now=now)
        self._step(now)

    def handle_timer(self, *, now: float) -> None:
        """Run everything whose deadline passed. Safe to call early or twice."""
        if self._closed:
            return
        self._client.handle_timer(now=now)
        self._step(now)

    # ----------------------------------------------------------- IO outputs

    def data_to_send(self) -> list[tuple[NodeId, bytes]]:
        """``(node, bytes)`` to write, in order; clears the buffer."""
        return self._client.data_to_send()

    def next_event(self) -> FetcherEvent | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` must run, or None."""
        if self._closed:
            return None
        times = [t for t in (self._client.get_timer(),) if t is not None]
        now = self._now
        times.extend(t for t in self._node_backoff.values() if t > now)
        times.extend(p.backoff_until for p in self._parts.values() if p.backoff_until > now)
        times.extend(
            q.retry_at
            for q in self._queries.values()
            if q.retry_at is not None and q.retry_at > now
        )
        if self._coordinator_retry_at > now:
            times.append(self._coordinator_retry_at)
        if self._subscription_wait_until > now:
            times.append(self._subscription_wait_until)
        if self.member is not None:
            due = self.member.get_timer()
            if due is not None:
                times.append(due)
        return min(times) if times else None

    # ------------------------------------------------------------- internals

    def _part(self, tp: TopicPartition) -> _Partition:
        p = self._parts.get(tp)
        if p is None:
            raise LocalProtocolError(f"partition {tp[0]}-{tp[1]} is not assigned")
        return p

    def _fresh_partition(self, tp: TopicPartition) -> _Partition:
        if self.config.group_id is not None:
            p = _Partition(state=PositionState.AWAIT_COMMITTED)
        else:
            p = _Partition(state=PositionState.AWAIT_RESET)
            self._apply_policy(p, tp)
        self._moved(p)  # an answer for an earlier assignment of tp is not for this one
        return p

    def _moved(self, p: _Partition) -> None:
        """The application (re)placed ``p``'s position: lookups already sent are stale."""
        self._seek_serial += 1
        p.seeks = self._seek_serial

    def _apply_policy(
        self, p: _Partition, tp: TopicPartition, *, out_of_range: int | None = None
    ) -> None:
        """No valid position: reset by ``auto_offset_reset`` or fail (``none``):
        OffsetOutOfRangeError for a position the log does not hold (``out_of_range``, as
        Java, aiokafka and kafka-python raise), else NoOffsetForPartitionError."""
        ts = _RESETS[self.config.auto_offset_reset]
        if ts is None:
            p.state = PositionState.FAILED
            if out_of_range is not None:
                p.error = error_for_code(_OFFSET_OUT_OF_RANGE)(
                    f"offset {out_of_range} is out of range for partition {tp[0]}-{tp[1]} "
                    "and auto_offset_reset is 'none'",
                    topic=tp[0],
                    partition=tp[1],
                )
                return
            p.error = NoOffsetForPartitionError(
                f"no valid offset for partition {tp[0]}-{tp[1]} and auto_offset_reset is 'none'"
            )
        else:
            p.state, p.reset_to = PositionState.AWAIT_RESET, ts

    def _new_query(self, kind: str, partitions: dict[TopicPartition, Any]) -> int:
        qid = self._next_query
        self._next_query += 1
        self._queries[qid] = _Query(kind=kind, query_id=qid, partitions=partitions)
        return qid

    def _step(self, now: float) -> None:
        self._now = max(self._now, now)
        if self._closed:
            return
        for _ in range(4):
            self._pull_client(now)
            self._drive_group(now)
            self._positions(now)
            self._run_queries(now)
            self._send_fetches(now)
            self._metadata_news = False
            self._pull_client(now)
            if self._metadata_news:
                continue  # what waited for this metadata goes now
            due = self._client.get_timer()
            if due is None or due > now:
                break
            self._client.handle_timer(now=now)

    def _pull_client(self, now: float) -> None:
        client = self._client
        while (event := client.next_event()) is not None:
            match event:
                case MetadataUpdated():
                    self._events.append(event)
                    self._metadata_arrived()
                case ConnectRequested() | CloseRequested():
                    self._events.append(event)
                case RequestCompleted(request_id=rid, node_id=node, response=response):
                    self._on_response(rid, node, response, now)
                case RequestFailed(request_id=rid, error=error):
                    self._on_failure(rid, error, now)
                case NodeDisconnected(node_id=node):
                    session = self._sessions.get(node)
                    if session is not None:
                        session.handle_error()

    def _await_metadata(self, p: _Partition) -> None:
        """Try ``p`` again once fresh metadata arrived (the Metadata machine paces and
        retries its refreshes; retrying ``p`` before would ask the same stale leader)."""
        p.awaits_metadata = True
        self._client.request_metadata_update()

    def _metadata_arrived(self) -> None:
        """What waited for metadata (not for a backoff after an error) goes on at once."""
        self._metadata_news = True
        member = self.member
        if member is not None and member.subscription:
            topics = self._client.cluster.topics
            counts = {
                t: len(topics[t].partitions)
                for t in member.subscription
                if t in topics and topics[t].error_code == 0
            }
            member.update_partition_counts(counts, now=self._now)
            names = {t.topic_id: name for name, t in topics.items() if t.topic_id is not None}
            member.update_topic_ids(names, now=self._now)
        for q in self._queries.values():
            if q.awaits_metadata:
                q.retry_at, q.awaits_metadata = None, False
        for p in self._parts.values():
            p.awaits_metadata = False
        node = self._coordinator_unknown
        if node is not None and self._client.node_state(node) is not None:
            self._coordinator_unknown = None
            self._coordinator = self._client.separate_connection(node)

    # -- the group member: coordinator, requests, decisions

    def _subscription_known(self, now: float) -> bool:
        """Whether metadata describes every subscribed topic (or waiting for it is over):
        a member that joined before would make the leader assign without those topics, and
        the group would rebalance again as soon as they arrive."""
        member = self.member
        if member is None or now >= self._subscription_wait_until:
            return True
        topics = self._client.cluster.topics
        return all(t in topics and topics[t].error_code == 0 for t in member.subscription)

    def _drive_group(self, now: float) -> None:
        member = self.member
        if member is None:
            return
        member.handle_timer(now=now)
        if member.coordinator_wanted:
            if self._member_coordinator is not None:  # the member lost it: look again
                if self._coordinator == self._member_coordinator:
                    self._coordinator = None
                self._member_coordinator = None
            if member.active:
                node = self._find_coordinator(now)
                if node is not None and self._subscription_known(now):
                    self._member_coordinator = node
                    member.coordinator_found(now=now)
        for out in member.take_requests():
            rid = self._client.send(
                out.factory, now=now, node_id=self._member_coordinator, timeout=out.timeout
            )
            self._group_requests[rid] = out.kind
        while (event := member.next_event()) is not None:
            match event:
                case RevokePartitions(partitions=tps, lost=lost):
                    for tp in tps:
                        p = self._parts.get(tp)
                        if p is not None:
                            p.revoking = True
                    self._events.append(PartitionsRevoked(partitions=tps, lost=lost))
                case AssignPartitions(assigned=assigned, added=added, generation=generation):
                    # partitions being revoked stay (with their positions, to commit)
                    # until revocation_done
                    revoking = [tp for tp, p in self._parts.items() if p.revoking]
                    self._set_assignment(dict.fromkeys([*assigned, *revoking]))
                    self._events.append(
                        PartitionsAssigned(assigned=assigned, added=added, generation=generation)
                    )
                case GroupFailed():
                    self._events.append(event)
        if self._leaving and not self._group_requests:
            self._leaving = False
            self._events.append(GroupLeft())

    # -- positions: committed offsets and resets become internal queries

    def _positions(self, now: float) -> None:
        committed: list[TopicPartition] = []
        resets: dict[TopicPartition, int] = {}
        validate: list[TopicPartition] = []
        for tp, p in self._parts.items():
            if p.in_flight or p.awaits_metadata or p.backoff_until > now:
                continue
            if p.state is PositionState.FETCHING:
                self._check_leader(tp, p)
            if p.state is PositionState.AWAIT_COMMITTED:
                committed.append(tp)
            elif p.state is PositionState.AWAIT_RESET and p.reset_to is not None:
                resets[tp] = p.reset_to
            elif p.state is PositionState.AWAIT_VALIDATION:
                validate.append(tp)
        if validate:
            self._send_validations(validate, now)
        for kind, asked in (("committed", dict.fromkeys(committed)), ("list", resets)):
            if asked:
                q = self._queries[self._new_query(kind, asked)]
                q.internal = True
                for tp in asked:
                    self._parts[tp].in_flight = True
                    q.seeks[tp] = self._parts[tp].seeks

    def _finish_internal(self, q: _Query, now: float) -> None:
        self._events.append(PositionsResolved(partitions=tuple(q.partitions)))
        for tp in q.partitions:
            p = self._parts.get(tp)
            if p is None:
                continue
            p.in_flight = False
            if q.seeks.get(tp) != p.seeks:
                continue  # the application moved the position meanwhile: a stale answer
            result = q.results.get(tp)
            if q.kind == "committed" and p.state is PositionState.AWAIT_COMMITTED:
                if result is not None:
                    # A committed offset with a leader epoch is checked against the
                    # current leader's log before fetching from it (KIP-320).
                    epoch = q.epochs.get(tp, -1)
                    p.position, p.position_epoch, p.leader_epoch = result[0], epoch, -1
                    p.state = (
                        PositionState.AWAIT_VALIDATION if epoch >= 0 else PositionState.FETCHING
                    )
                elif q.error is not None:
                    p.backoff_until = now + self.config.retry_backoff
                else:
                    self._apply_policy(p, tp)
            elif q.kind == "list" and p.state is PositionState.AWAIT_RESET:
                if isinstance(result, ListedOffset) and result.offset >= 0:
                    p.state, p.position = PositionState.FETCHING, result.offset
                    p.position_epoch, p.reset_to = result.leader_epoch, None
                    p.leader_epoch = self._leader_epoch(tp)  # fresh from the leader
                else:
                    p.backoff_until = now + self.config.retry_backoff

    # -- position validation after a leader change (KIP-320)

    def _leader_epoch(self, tp: TopicPartition) -> int:
        topic = self._client.cluster.topics.get(tp[0])
        meta = None if topic is None else topic.partitions.get(tp[1])
        return -1 if meta is None else meta.leader_epoch

    def _check_leader(self, tp: TopicPartition, p: _Partition) -> None:
        """A FETCHING position whose leader changed is validated if it knows its epoch."""
        current = self._leader_epoch(tp)
        if current < 0 or current == p.leader_epoch:
            return
        if p.position_epoch < 0:
            p.leader_epoch = current  # nothing to validate with (a seek to an offset)
            return
        p.state = PositionState.AWAIT_VALIDATION
        p.read_replica = None
        self._completed.pop(tp, None)  # fetched from the old leader: fetch it again

    def _send_validations(self, tps: list[TopicPartition], now: float) -> None:
        cluster = self._client.cluster
        by_leader: dict[NodeId, dict[TopicPartition, tuple[int, int, int]]] = {}
        for tp in tps:
            p = self._parts[tp]
            leader = cluster.leader_for(*tp)
            current = self._leader_epoch(tp)
            if leader is None or current < 0:
                self._client.request_metadata_update()
                continue
            by_leader.setdefault(leader, {})[tp] = (p.position, p.position_epoch, current)
        for node, parts in by_leader.items():

            def factory(
                versions: ApiVersionTable, parts: dict[TopicPartition, tuple[int, int, int]] = parts
            ) -> Any:
                return _offset_for_leader_epoch_request(versions, parts)

            rid = self._client.send(factory, now=now, node_id=node)
            self._validating[rid] = parts
            for tp in parts:
                self._parts[tp].in_flight = True

    def _validation_target(
        self, tp: TopicPartition, sent: tuple[int, int, int]
    ) -> _Partition | None:
        """The partition, if it still waits for the validation that was sent."""
        p = self._parts.get(tp)
        if p is None:
            return None
        p.in_flight = False
        if p.state is not PositionState.AWAIT_VALIDATION or (p.position, p.position_epoch) != (
            sent[0],
            sent[1],
        ):
            return None
        return p

    def _on_validation(
        self, sent: dict[TopicPartition, tuple[int, int, int]], response: Any, now: float
    ) -> None:
        answered: dict[TopicPartition, Any] = {}
        for t in response.topics:
            for part in t.partitions:
                answered[(str(t.topic), int(part.partition))] = part
        for tp, request in sent.items():
            p = self._validation_target(tp, request)
            if p is None:
                continue
            part = answered.get(tp)
            code = -1 if part is None else int(part.error_code)
            if code == 0:
                self._complete_validation(tp, p, request, part)
            elif part is None or code in _REFRESH_CODES or error_for_code(code).retriable:
                self._await_metadata(p)
            else:
                p.state = PositionState.FAILED
                p.error = error_for_code(code)(
                    f"OffsetForLeaderEpoch for {tp[0]}-{tp[1]}", topic=tp[0], partition=tp[1]
                )
        self._events.append(PositionsResolved(partitions=tuple(sent)))

    def _complete_validation(
        self, tp: TopicPartition, p: _Partition, request: tuple[int, int, int], part: Any
    ) -> None:
        position, _epoch, current = request
        end_offset, end_epoch = int(part.end_offset), int(part.leader_epoch)
        if end_offset >= 0 and end_epoch >= 0 and end_offset >= position:
            p.state, p.leader_epoch = PositionState.FETCHING, current
            return
        where = f"{tp[0]}-{tp[1]}"
        if end_offset < 0 or end_epoch < 0:
            # The leader knows no such epoch: where the logs diverge is unknown.
            if _RESETS[self.config.auto_offset_reset] is not None:
                self._apply_policy(p, tp)
                return
            message = f"log of {where} truncated below offset {position} (divergence unknown)"
            divergent: tuple[int | None, int | None] = (None, None)
        else:
            if _RESETS[self.config.auto_offset_reset] is not None:
                p.state, p.position, p.position_epoch = (
                    PositionState.FETCHING,
                    end_offset,
                    end_epoch,
                )
                p.leader_epoch = current
                return
            message = (
                f"log of {where} truncated below offset {position}: the leader's log diverges "
                f"from offset {end_offset} (leader epoch {end_epoch})"
            )
            divergent = (end_offset, end_epoch)
        p.state = PositionState.FAILED
        p.error = LogTruncationError(
            message + " and auto_offset_reset is 'none'",
            topic=tp[0],
            partition=tp[1],
            offset=position,
            divergent_offset=divergent[0],
            divergent_epoch=divergent[1],
        )

    def _on_validation_failure(
        self, sent: dict[TopicPartition, tuple[int, int, int]], error: KafkaError, now: float
    ) -> None:
        for tp, request in sent.items():
            p = self._validation_target(tp, request)
            if p is None:
                continue
            if isinstance(error, UnsupportedVersionError):
                # No OffsetForLeaderEpoch v3+ on this broker: skip the check, as Java does.
                p.state, p.leader_epoch = PositionState.FETCHING, request[2]
            else:
                self._await_metadata(p)
        self._events.append(PositionsResolved(partitions=tuple(sent)))

    # -- offset queries (ListOffsets to leaders; OffsetFetch / OffsetCommit to the coordinator)

    def _run_queries(self, now: float) -> None:
        for q in list(self._queries.values()):
            if q.outstanding or (q.retry_at is not None and q.retry_at > now):
                continue
            if q.kind == "list":
                self._send_list(q, now)
            else:
                self._send_group(q, now)

    def _complete_query(self, q: _Query, now: float) -> None:
        del self._queries[q.query_id]
        if q.internal:
            self._finish_internal(q, now)
            return
        if q.kind == "list":
            offsets = {tp: r for tp, r in q.results.items() if isinstance(r, ListedOffset)}
            self._events.append(OffsetsListed(query_id=q.query_id, offsets=offsets, error=q.error))
        elif q.kind == "committed":
            self._events.append(
                CommittedOffsets(query_id=q.query_id, offsets=dict(q.results), error=q.error)
            )
        else:
            committed = {tp: v[0] for tp, v in q.partitions.items()}
            self._events.append(
                OffsetsCommitted(query_id=q.query_id, offsets=committed, error=q.error)
            )

    def _send_list(self, q: _Query, now: float) -> None:
        cluster = self._client.cluster
        by_leader: dict[NodeId, dict[TopicPartition, int]] = {}
        waiting = False
        for tp, ts in q.partitions.items():
            if tp in q.results:
                continue
            topic = cluster.topics.get(tp[0])
            if topic is not None and topic.error_code not in (0, 3, 5):
                q.error = error_for_code(topic.error_code)(f"metadata for topic {tp[0]!r}")
                q.results[tp] = None
                continue
            leader = cluster.leader_for(*tp)
            if leader is None:
                waiting = True
                continue
            by_leader.setdefault(leader, {})[tp] = ts
        if waiting:
            self._client.metadata.add_topics(sorted({t for t, _ in q.partitions}))
            self._client.request_metadata_update()
        if not by_leader and not waiting:
            self._complete_query(q, now)
            return
        isolation = 1 if self.config.read_committed else 0
        for node, parts in by_leader.items():

            def factory(versions: ApiVersionTable, parts: dict[TopicPartition, int] = parts) -> Any:
                return _list_offsets_request(versions, parts, isolation)

            rid = self._client.send(factory, now=now, node_id=node)
            self._query_requests[rid] = (q.query_id, "list", list(parts))
            q.outstanding += 1
        if waiting and not by_leader:
            q.retry_at, q.awaits_metadata = now + self.config.retry_backoff, True

    def _send_group(self, q: _Query, now: float) -> None:
        coordinator = self._find_coordinator(now)
        if coordinator is None:
            return
        group = self.config.group_id
        assert group is not None  # checked by the commands
        # OffsetFetch/OffsetCommit v10+ name topics by id: know them before asking.
        cluster = self._client.cluster
        names = sorted({topic for topic, _ in q.partitions})
        missing = [n for n in names if n not in cluster.topics]
        if missing:
            self._client.metadata.add_topics(missing)
            self._client.request_metadata_update()
            q.retry_at, q.awaits_metadata = now + self.config.retry_backoff, True
            return
        ids = {n: cluster.topics[n].topic_id for n in names}
        if q.kind == "committed":
            tps = list(q.partitions)

            def factory(versions: ApiVersionTable) -> Any:
                return _offset_fetch_request(versions, group, tps, ids)

        else:
            parts = dict(q.partitions)

            def factory(versions: ApiVersionTable) -> Any:
                return _offset_commit_request(versions, group, parts, ids)

        rid = self._client.send(factory, now=now, node_id=coordinator)
        self._query_requests[rid] = (q.query_id, q.kind, list(q.partitions))
        self._query_topic_ids[rid] = {tid: n for n, tid in ids.items() if tid is not None}
        q.outstanding += 1

    def _find_coordinator(self, now: float) -> NodeId | None:
        if self._coordinator is not None:
            if self._client.node_state(self._coordinator) is not None:
                return self._coordinator
            self._coordinator = None
        if self._coordinator_rid is not None or self._coordinator_retry_at > now:
            return None
        group = self.config.group_id
        assert group is not None

        def factory(versions: ApiVersionTable) -> Any:
            return _find_coordinator_request(versions, group)

        self._coordinator_rid = self._client.send(factory, now=now)
        return None

    def _on_coordinator(self, response: Any, now: float) -> None:
        self._coordinator_rid = None
        coordinators = getattr(response, "coordinators", None)
        found = coordinators[0] if coordinators else response  # v4+: one per key
        code = int(found.error_code)
        if code != 0:
            self._coordinator_retry_at = now + self.config.retry_backoff
            if code not in _COORDINATOR_MOVED:
                error = error_for_code(code)(f"FindCoordinator for group {self.config.group_id!r}")
                for q in list(self._queries.values()):
                    if q.kind != "list" and not q.outstanding:
                        q.error = error
                        self._complete_query(q, now)
            return
        node = NodeId(int(found.node_id))
        if self._client.node_state(node) is None:
            # Not in metadata yet: the refresh adds it (or, failing that, ask again later).
            self._client.request_metadata_update()
            self._coordinator_unknown = node
            self._coordinator_retry_at = now + self.config.retry_backoff
            return
        self._coordinator_unknown = None
        # Its own connection, as in Java: offset requests do not wait behind a Fetch.
        self._coordinator = self._client.separate_connection(node)

    def _on_query_response(
        self,
        query: tuple[int, str, list[TopicPartition]],
        response: Any,
        now: float,
        names_by_id: Mapping[Any, str],
    ) -> None:
        qid, kind, _tps = query
        q = self._queries.get(qid)
        if q is None:
            return
        q.outstanding -= 1
        retry = False
        if kind == "list":
            for t in response.topics:
                for part in t.partitions:
                    tp = (str(t.name), int(part.partition_index))
                    if tp not in q.partitions:
                        continue
                    code = int(part.error_code)
                    if code == 0:
                        q.results[tp] = ListedOffset(
                            offset=int(part.offset),
                            timestamp=int(getattr(part, "timestamp", -1)),
                            leader_epoch=int(getattr(part, "leader_epoch", -1)),
                        )
                    elif error_for_code(code).retriable:
                        retry = True
                        self._client.request_metadata_update()
                    else:
                        q.error = q.error or error_for_code(code)(
                            f"ListOffsets for {tp[0]}-{tp[1]}", topic=tp[0], partition=tp[1]
                        )
                        q.results[tp] = None
        elif kind == "committed":
            groups = getattr(response, "groups", None)
            if groups:
                group = groups[0]
                topics, top_code = group.topics, int(group.error_code)
            else:
                topics, top_code = response.topics, int(getattr(response, "error_code", 0))
            if top_code in _COORDINATOR_MOVED:
                self._coordinator = None
                retry = True
            elif top_code != 0:
                q.error = error_for_code(top_code)(f"OffsetFetch for {self.config.group_id!r}")
            else:
                for t in topics:
                    name = _topic_name(t, names_by_id)
                    for part in t.partitions:
                        tp = (name, int(part.partition_index))
                        code = int(part.error_code)
                        if code != 0:
                            if error_for_code(code).retriable:
                                retry = True
                            else:
                                q.error = q.error or error_for_code(code)(
                                    f"OffsetFetch for {tp[0]}-{tp[1]}"
                                )
                            continue
                        offset = int(part.committed_offset)
                        q.results[tp] = None if offset < 0 else (offset, part.metadata)
                        q.epochs[tp] = int(getattr(part, "committed_leader_epoch", -1))
                for tp in q.partitions:
                    q.results.setdefault(tp, None)
        else:
            for t in response.topics:
                name = _topic_name(t, names_by_id)
                for part in t.partitions:
                    code = int(part.error_code)
                    if code in _COORDINATOR_MOVED:
                        self._coordinator = None
                        retry = True
                    elif code in _COMMIT_FENCED:
                        q.error = q.error or self._commit_fenced(code, name)
                    elif code != 0:
                        q.error = q.error or error_for_code(code)(
                            f"OffsetCommit for {name}-{part.partition_index}",
                            topic=name,
                            partition=int(part.partition_index),
                        )
        if q.outstanding:
            return
        if retry and q.error is None:
            q.retry_at = now + self.config.retry_backoff
            return
        self._complete_query(q, now)

    def _commit_fenced(self, code: int, topic: str) -> KafkaError:
        """The error for a commit the group refused as coming from outside the generation;
        the member rejoins when the coordinator no longer knows it there."""
        cause = error_for_code(code)(f"OffsetCommit for group {self.config.group_id!r}")
        member = self.member
        if isinstance(member, GroupMember) and code in _REJOIN_ON_COMMIT and member.active:
            member.request_rejoin("a commit was refused: " + type(cause).__name__)
        error = CommitFailedError(
            f"commit for group {self.config.group_id!r} refused ({type(cause).__name__} on "
            f"{topic}): this member is not in the group generation that owns the partitions "
            "(it was removed after a session or poll timeout, or a rebalance is under way); "
            "its partitions may belong to another member now"
        )
        error.__cause__ = cause
        return error

    def _on_query_failure(
        self, query: tuple[int, str, list[TopicPartition]], error: KafkaError, now: float
    ) -> None:
        qid, kind, _tps = query
        q = self._queries.get(qid)
        if q is None:
            return
        q.outstanding -= 1
        if kind != "list":
            self._coordinator = None
        if error.retriable:
            if not q.outstanding:
                q.retry_at = now + self.config.retry_backoff
            return
        q.error = q.error or error
        if not q.outstanding:
            self._complete_query(q, now)

    # -- fetching

    def _fetchable(self, now: float) -> dict[NodeId, dict[TopicPartition, PartitionFetchState]]:
        cluster = self._client.cluster
        out: dict[NodeId, dict[TopicPartition, PartitionFetchState]] = {}
        limit = self.config.max_partition_fetch_bytes
        for tp, p in self._parts.items():
            if (
                p.state is not PositionState.FETCHING
                or p.paused
                or p.revoking
                or p.in_flight
                or p.awaits_metadata
                or p.backoff_until > now
                or tp in self._completed
            ):
                continue
            topic = cluster.topics.get(tp[0])
            leader = cluster.leader_for(*tp)
            if topic is None or leader is None:
                self._client.request_metadata_update()
                continue
            node = p.read_replica if p.read_replica is not None else leader
            if self._client.node_state(node) is None:
                p.read_replica = None
                node = leader
            meta = topic.partitions.get(tp[1])
            out.setdefault(node, {})[tp] = PartitionFetchState(
                topic=tp[0],
                topic_id=topic.topic_id,
                partition=tp[1],
                fetch_offset=p.position,
                log_start_offset=-1,
                current_leader_epoch=-1 if meta is None else meta.leader_epoch,
                partition_max_bytes=limit,
            )
        return out

    def _caught_up(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s position is at the end the last Fetch reported."""
        p = self._parts[tp]
        end = p.last_stable_offset if self.config.read_committed else p.high_watermark
        return end >= 0 and p.position >= end

    def _buffered_on(self, node: NodeId) -> bool:
        """Whether a partition fetched from ``node`` has data the application has not
        drained yet (and is not paused): it will want fetching as soon as it is drained."""
        cluster = self._client.cluster
        for tp in self._completed:
            p = self._parts.get(tp)
            if p is None or p.paused:
                continue
            source = p.read_replica if p.read_replica is not None else cluster.leader_for(*tp)
            if source == node:
                return True
        return False

    def _send_fetches(self, now: float) -> None:
        cfg = self.config
        for node, parts in self._fetchable(now).items():
            if node in self._node_busy or self._node_backoff.get(node, 0.0) > now:
                continue
            if all(self._caught_up(tp) for tp in parts) and self._buffered_on(node):
                # Only partitions at their end: the broker would hold this Fetch for
                # fetch_max_wait while the partitions being drained, which have more to
                # read, could not be fetched (one Fetch per node). Ask once they are drained.
                continue
            session = self._sessions.get(node)
            if session is None:
                session = FetchSession(sessionless=not cfg.use_fetch_sessions)
                self._sessions[node] = session
            data = session.build(parts)

            def factory(versions: ApiVersionTable, data: Any = data) -> Any:
                return fetch_request_from_session(
                    versions,
                    data,
                    max_wait=cfg.fetch_max_wait,
                    min_bytes=cfg.fetch_min_bytes,
                    max_bytes=cfg.fetch_max_bytes,
                    isolation_level=1 if cfg.read_committed else 0,
                    rack_id=cfg.client_rack,
                )

            timeout = self._client.config.connection.request_timeout + cfg.fetch_max_wait
            rid = self._client.send(factory, now=now, node_id=node, timeout=timeout)
            self._fetching[rid] = (node, {tp: st.fetch_offset for tp, st in parts.items()})
            self._node_busy.add(node)
            for tp in parts:
                self._parts[tp].in_flight = True

    def _on_fetch_response(
        self, node: NodeId, offsets: dict[TopicPartition, int], response: Any, now: float
    ) -> None:
        session = self._sessions.get(node)
        code = int(getattr(response, "error_code", 0))
        if session is not None:
            session.handle_response(code, int(getattr(response, "session_id", 0)))
        for tp in offsets:
            p = self._parts.get(tp)
            if p is not None:
                p.in_flight = False
        if code != 0:
            if code not in _SESSION_ERRORS:
                self._node_backoff[node] = now + self.config.retry_backoff
            return
        ids = {t.topic_id: name for name, t in self._client.cluster.topics.items()}
        arrived: list[TopicPartition] = []
        for t in response.responses:
            name = getattr(t, "topic", None)
            if name is None:
                name = ids.get(getattr(t, "topic_id", None))
            if name is None:
                continue
            for part in t.partitions:
                tp = (str(name), int(part.partition_index))
                p = self._parts.get(tp)
                if p is None or tp not in offsets or p.position != offsets[tp]:
                    continue  # unassigned or seeked meanwhile: stale data
                if p.state is not PositionState.FETCHING:
                    continue
                if self._on_partition_data(tp, p, part, offsets[tp], now):
                    arrived.append(tp)
        if arrived:
            self._events.append(RecordsFetched(partitions=tuple(arrived)))

    def _on_partition_data(
        self, tp: TopicPartition, p: _Partition, part: Any, fetch_offset: int, now: float
    ) -> bool:
        code = int(part.error_code)
        p.last_fetch_at = now
        if code == 0:
            p.high_watermark = int(part.high_watermark)
            lso = int(getattr(part, "last_stable_offset", -1))
            p.last_stable_offset = lso
            p.log_start_offset = int(getattr(part, "log_start_offset", -1))
            replica = int(getattr(part, "preferred_read_replica", -1))
            p.read_replica = NodeId(replica) if replica >= 0 else None
            records = part.records
            data = b"" if records is None else bytes(records)
            if not data:
                return False
            aborted = sorted(
                (int(a.first_offset), int(a.producer_id))
                for a in (getattr(part, "aborted_transactions", None) or ())
            )
            self._completed[tp] = _Completed(
                tp=tp,
                fetch_offset=fetch_offset,
                records=data,
                aborted=aborted,
                next_offset=fetch_offset,
            )
            return True
        if code == _OFFSET_OUT_OF_RANGE:
            self._apply_policy(p, tp, out_of_range=fetch_offset)
            return p.state is PositionState.FAILED
        if code in _REFRESH_CODES:
            p.read_replica = None
            self._await_metadata(p)
            return False
        p.state = PositionState.FAILED
        p.error = error_for_code(code)(
            f"Fetch for {tp[0]}-{tp[1]} at offset {fetch_offset}", topic=tp[0], partition=tp[1]
        )
        return True

    def _take(self, done: _Completed, p: _Partition, limit: int) -> list[Record]:
        """Up to ``limit`` records from ``done``, skipping what the application must not
        see; advances the position."""
        out: list[Record] = []
        if done.batches is None:
            done.batches = iter_batches(done.records, check_crcs=self.config.check_crcs)
        read_committed = self.config.read_committed
        while len(out) < limit:
            pending = done.pending
            if done.taken < len(pending):
                # Whole runs of a batch at once, not record by record.
                start = done.taken
                stop = min(len(pending), start + limit - len(out))
                out.extend(pending if start == 0 and stop == len(pending) else pending[start:stop])
                done.taken = stop
                p.position = pending[stop - 1].offset + 1
                continue
            if done.batches is False:
                break
            batch: Batch | None = next(done.batches, None)
            if batch is None:
                done.batches = False
                if not out and p.position == done.fetch_offset and done.records:
                    self._check_progress(done, p)
                break
            if batch.next_offset <= p.position:
                continue  # before the position (a compressed batch's head, a re-fetch)
            done.leader_epoch = batch.partition_leader_epoch
            if batch.is_control:
                marker = batch.marker
                if marker is not None and marker.type is ControlRecordType.ABORT:
                    done.aborted_producers.discard(batch.producer_id)
                p.position = max(p.position, batch.next_offset)
                continue
            if read_committed and batch.is_transactional:
                pid = batch.producer_id
                while done.aborted and done.aborted[0][0] <= batch.last_offset:
                    done.aborted_producers.add(done.aborted.pop(0)[1])
                if pid in done.aborted_producers:
                    p.position = max(p.position, batch.next_offset)
                    continue
            position = p.position
            records = batch.records()
            if batch.base_offset < position:  # the batch began before the position
                records = [r for r in records if r.offset >= position]
            done.pending, done.taken = records, 0
            if not records:
                p.position = max(p.position, batch.next_offset)
        p.position_epoch = done.leader_epoch
        return out

    def _check_progress(self, done: _Completed, p: _Partition) -> None:
        """Data arrived but not one whole batch at the position: the first batch is larger
        than the fetch limits and the broker could not send it (very old brokers; since
        KIP-74 they always do)."""
        raise RecordTooLargeError(
            f"the batch at offset {p.position} of {done.tp[0]}-{done.tp[1]} is larger than "
            f"max_partition_fetch_bytes ({self.config.max_partition_fetch_bytes}) / "
            f"fetch_max_bytes ({self.config.fetch_max_bytes}) and the broker sent only "
            f"{len(done.records)} bytes of it"
        )

    # -- responses

    def _on_response(self, rid: RequestId, node: NodeId, response: Any, now: float) -> None:
        fetch = self._fetching.pop(rid, None)
        if fetch is not None:
            self._node_busy.discard(fetch[0])
            self._on_fetch_response(fetch[0], fetch[1], response, now)
            return
        sent = self._validating.pop(rid, None)
        if sent is not None:
            self._on_validation(sent, response, now)
            return
        kind = self._group_requests.pop(rid, None)
        if kind is not None and self.member is not None:
            self.member.handle_response(kind, response, now=now)
            return
        query = self._query_requests.pop(rid, None)
        if query is not None:
            names_by_id = self._query_topic_ids.pop(rid, {})
            self._on_query_response(query, response, now, names_by_id)
            return
        if rid == self._coordinator_rid:
            self._on_coordinator(response, now)

    def _on_failure(self, rid: RequestId, error: KafkaError, now: float) -> None:
        fetch = self._fetching.pop(rid, None)
        if fetch is not None:
            node, offsets = fetch
            self._node_busy.discard(node)
            session = self._sessions.get(node)
            if session is not None:
                session.handle_error()
            self._node_backoff[node] = now + self.config.retry_backoff
            for tp in offsets:
                p = self._parts.get(tp)
                if p is not None:
                    p.in_flight = False
                    p.read_replica = None
            self._client.request_metadata_update()
            return
        sent = self._validating.pop(rid, None)
        if sent is not None:
            self._on_validation_failure(sent, error, now)
            return
        kind = self._group_requests.pop(rid, None)
        if kind is not None and self.member is not None:
            self.member.handle_failure(kind, error, now=now)
            return
        query = self._query_requests.pop(rid, None)
        if query is not None:
            self._query_topic_ids.pop(rid, None)
            self._on_query_failure(query, error, now)
            return
        if rid == self._coordinator_rid:
            self._coordinator_rid = None
            self._coordinator_retry_at = now + self.config.retry_backoff


# ------------------------------------------------------------------------------ requests


def _list_offsets_request(
    versions: ApiVersionTable, parts: Mapping[TopicPartition, int], isolation: int
) -> Any:
    cls = versions.request_type(ApiKey.LIST_OFFSETS)
    topic_cls = nested_type(cls, "ListOffsetsTopic")
    part_cls = nested_type(cls, "ListOffsetsPartition")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), ts in parts.items():
        by_topic.setdefault(topic, []).append(
            build(part_cls, partition_index=partition, current_leader_epoch=-1, timestamp=ts)
        )
    return build(
        cls,
        replica_id=-1,
        isolation_level=isolation,
        topics=tuple(build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        timeout=_timedelta_ms(30_000),
    )


def _offset_for_leader_epoch_request(
    versions: ApiVersionTable, parts: Mapping[TopicPartition, tuple[int, int, int]]
) -> Any:
    """Where does each position's epoch end? ``parts``: tp -> (position, epoch, current)."""
    cls = versions.request_type(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    topic_cls = nested_type(cls, "OffsetForLeaderTopic")
    part_cls = nested_type(cls, "OffsetForLeaderPartition")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (_position, epoch, current) in parts.items():
        by_topic.setdefault(topic, []).append(
            build(part_cls, partition=partition, current_leader_epoch=current, leader_epoch=epoch)
        )
    return build(
        cls,
        replica_id=-1,
        topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )


def _find_coordinator_request(versions: ApiVersionTable, group: str) -> Any:
    cls = versions.request_type(ApiKey.FIND_COORDINATOR)
    return build(cls, key=group, key_type=0, coordinator_keys=(group,))


def _topic_name(entry: Any, names_by_id: Mapping[Any, str]) -> str:
    """A response topic's name: given (up to v9) or looked up by its id (v10+)."""
    name = getattr(entry, "name", None)
    if name is None:
        name = names_by_id.get(getattr(entry, "topic_id", None), "")
    return str(name)


def _offset_fetch_request(
    versions: ApiVersionTable,
    group: str,
    tps: Sequence[TopicPartition],
    ids: Mapping[str, Any],
) -> Any:
    cls = versions.request_type(ApiKey.OFFSET_FETCH)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    try:
        group_cls = nested_type(cls, "OffsetFetchRequestGroup")
    except (KeyError, LookupError, AttributeError, TypeError):
        group_cls = None
    if group_cls is not None:
        topic_cls = nested_type(cls, "OffsetFetchRequestTopics")
        topics = tuple(
            build(topic_cls, name=t, topic_id=ids.get(t), partition_indexes=tuple(ps))
            for t, ps in by_topic.items()
        )
        group_entry = build(
            group_cls, group_id=group, member_id=None, member_epoch=-1, topics=topics
        )
        return build(cls, groups=(group_entry,), require_stable=True)
    topic_cls = nested_type(cls, "OffsetFetchRequestTopic")
    topics = tuple(
        build(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
    )
    return build(cls, group_id=group, topics=topics, require_stable=True)


def _offset_commit_request(
    versions: ApiVersionTable,
    group: str,
    parts: Mapping[TopicPartition, Any],
    ids: Mapping[str, Any],
) -> Any:
    cls = versions.request_type(ApiKey.OFFSET_COMMIT)
    topic_cls = nested_type(cls, "OffsetCommitRequestTopic")
    part_cls = nested_type(cls, "OffsetCommitRequestPartition")
    by_topic: dict[str, list[Any]] = {}
    generation, member_id, instance_id = -1, "", None
    for (topic, partition), (offset, meta, gen, member, instance, epoch) in parts.items():
        generation, member_id, instance_id = gen, member, instance
        by_topic.setdefault(topic, []).append(
            build(
                part_cls,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=epoch,
                committed_metadata=meta,
                commit_timestamp=-1,
            )
        )
    return build(
        cls,
        group_id=group,
        generation_id_or_member_epoch=generation,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        retention_time=_timedelta_ms(-1),
        topics=tuple(
            build(topic_cls, name=t, topic_id=ids.get(t), partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )


def _timedelta_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)
