"""FetcherMachine: the sans-IO consumer -- positions, offsets, fetching, group membership.

Theory of operation
-------------------
The machine owns a :class:`~kafkastate.core.client.Client` and exposes its IO surface
unchanged, like the producer. Partitions are assigned by the application (``assign``) or by
the group member running inside the machine (``group=``, :meth:`FetcherMachine.subscribe`).
Each assigned partition is in one :class:`PositionState`:

* ``AWAIT_COMMITTED`` -- a ``group_id`` is set and no position is known: the committed
  offset is asked for (FindCoordinator, then OffsetFetch); none falls through to the reset
  policy.
* ``AWAIT_RESET`` -- the position comes from ListOffsets with the reset strategy (earliest =
  -2, latest = -1, or a timestamp); ``auto_offset_reset="none"`` FAILS the partition instead.
* ``AWAIT_VALIDATION`` -- the leader changed since the position was known good:
  OffsetForLeaderEpoch checks it against the leader's log (KIP-320).
* ``FETCHING`` -- fetched from its leader (or the preferred read replica, KIP-392) whenever
  it is not paused and has no fetched data waiting for the application (per-partition
  prefetch: a partition drained by :meth:`poll` is fetched again at once).
* ``FAILED`` -- an error :meth:`poll` raises until a seek.

The group member's decisions become :class:`PartitionsRevoked` (fetching stops at once; the
application commits, runs its listener and calls :meth:`FetcherMachine.revocation_done`) and
:class:`PartitionsAssigned` (then :meth:`FetcherMachine.assignment_done`).

This module is the orchestration: events, commands and :meth:`FetcherMachine._step`,
which runs the jobs of :mod:`kafkastate.core.consumer.fetch` in turn, each explained in its
module: fetch sessions (KIP-227, ``session``), building Fetch requests (``request``,
``follower``), decoding responses (``decode``, ``aborted`` for read_committed), resets and
leader-epoch validation (``reset``), offset queries (``offsets``) and the group member's
coordinator (``membership``).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final

from kafkastate.core.client import (
    Client,
    ClientDriven,
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    NodeDisconnected,
    RequestCompleted,
    RequestFailed,
    RequestId,
    TokenRequested,
)
from kafkastate.core.consumer.fetch import decode, membership, reset
from kafkastate.core.consumer.fetch.config import EARLIEST, LATEST, RESETS, FetcherConfig
from kafkastate.core.consumer.fetch.decode import _Completed
from kafkastate.core.consumer.fetch.events import (
    CommittedOffsets,
    FetcherEvent,
    GroupLeft,
    OffsetsCommitted,
    OffsetsListed,
    PartitionsAssigned,
    PartitionsRevoked,
    PositionsResolved,
    RecordsFetched,
)
from kafkastate.core.consumer.fetch.offsets import (
    ListedOffset,
    OffsetQueries,
    _Query,
    commit_entries,
)
from kafkastate.core.consumer.fetch.request import Fetches
from kafkastate.core.consumer.fetch.state import (
    PositionState,
    TopicPartition,
    _Partition,
    checked_partitions,
    move,
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
from kafkastate.core.deadlines import earliest
from kafkastate.core.metadata import NodeId
from kafkastate.core.metrics import FetchCounters, GroupCounters, throttle_seconds
from kafkastate.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    LocalProtocolError,
)
from kafkastate.structs import ConsumerRecord

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

# How long a member that just subscribed waits for its topics' metadata before joining.
_SUBSCRIPTION_METADATA_WAIT: Final = 3.0


# --------------------------------------------------------------------------- the machine


log = logging.getLogger("kafkastate.group")


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps) or "nothing"


class FetcherMachine(ClientDriven):
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
        # Fetch requests in flight and the fetch sessions, per node
        self._fetches = Fetches(config, self._client)
        # OffsetForLeaderEpoch in flight: tp -> (position, position epoch, leader epoch)
        self._validating: dict[RequestId, dict[TopicPartition, reset.Validation]] = {}
        # ListOffsets, OffsetFetch, OffsetCommit and the coordinator they go to
        self._offsets = OffsetQueries(config, self._client, self.member, self._complete_query)
        self._metadata_news = False  # metadata arrived during this step's last pull
        self._seek_serial = 0  # numbers every placing of a position (_Partition.seeks)
        self._events: deque[FetcherEvent] = deque()
        self._now = 0.0
        self._closed = False
        windows = (config.client.metrics_samples, config.client.metrics_window)
        self.counters: Final = FetchCounters(*windows)
        self.steps = 0
        """How often the machine stepped (requests built, answers taken): a command that
        left this unchanged left nothing new to write or to report."""
        """Fetches, bytes and records handed out, counted (:mod:`kafkastate.core.metrics`)."""
        self.group_counters: Final = GroupCounters(*windows)
        """The group's requests, commits and rebalances, counted."""
        self._commits_started: dict[int, float] = {}  # commit query id -> when asked

    # ---------------------------------------------------------------- queries

    def assignment(self) -> tuple[TopicPartition, ...]:
        """The assigned partitions, in assignment order."""
        return tuple(self._parts)

    @property
    def coordinator(self) -> NodeId | None:
        """The group coordinator the member talks to, or None while unknown."""
        return self._member_coordinator

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
        return decode.has_records(self._parts, self._completed)

    # --------------------------------------------------------------- commands

    def assign(self, partitions: Iterable[TopicPartition], *, now: float) -> None:
        """Replace the assignment. Kept partitions keep their position; new ones look for
        one (committed offset with a group, else the reset policy).

        Raises:
            KafkaConfigurationError: a malformed ``(topic, partition)``.
        """
        wanted = checked_partitions(partitions)
        if self.member is not None and self.member.subscription:
            raise IllegalStateError("assign() while subscribed through the group")
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
        wait = self._subscription_wait_until = now + _SUBSCRIPTION_METADATA_WAIT
        # held even where the coordinator is known already (its lookup waits too)
        member.join_held = not membership.subscription_known(names, self._client.cluster, wait, now)
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
        owned = sorted(self.member.owned)
        if owned:
            log.info("group %s: revoked %s (leaving)", self.config.group_id, _names(owned))
        self.member.close(now=now)
        self._step(now)

    def unsubscribe_group(self, *, now: float) -> None:
        """Stop being a group member and stay open: the member revokes what it owns
        (:class:`PartitionsRevoked`, then :meth:`revocation_done`), then leaves; a later
        :meth:`subscribe` joins again.

        Raises:
            LocalProtocolError: no group membership configured.
            IllegalStateError: the member is closed or failed.
        """
        self._group_member().unsubscribe(now=now)
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
        move(p, PositionState.FETCHING, what="seek")
        p.position, p.position_epoch, p.error = offset, -1, None
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
            move(p, PositionState.AWAIT_RESET, what="seek_to")
            p.reset_to, p.error = timestamp, None
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
            move(p, PositionState.AWAIT_COMMITTED, what="seek_to_committed")
            p.error = None
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
    ) -> list[tuple[TopicPartition, list[ConsumerRecord], int]]:
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
        overdue = False
        if member is not None:
            # polled() runs the member's deadlines that are due (a heartbeat, the session's
            # end, the poll timeout) -- which handle_timer would otherwise have run with a
            # step of the whole machine; after it get_timer() no longer names them
            due = member.get_timer()
            overdue = due is not None and due <= now
            member.polled(now=now)
            if not member.active and member.error is not None:
                raise member.error
        for part in self._parts.values():
            if part.state is PositionState.FAILED and part.error is not None and not part.paused:
                raise part.error
        out, drained = decode.hand_out(self._completed, self._parts, max_records, self._take)
        if out:
            self.counters.consumed.record(sum(len(run[1]) for run in out), now)
        if drained or overdue or (member is not None and member.has_requests):
            # A member back from a poll timeout queues its join in polled(): with nothing
            # else to step the machine it was never sent (found by the simulator for a
            # KIP-848 member; for a classic one by a real-broker test: an asyncio or trio
            # consumer that kept polling after its poll timeout never joined again, its
            # JoinGroup waiting for a timer -- the next poll deadline -- that each poll
            # moved on). Likewise a deadline polled() ran late: a member paused past its
            # session found it over and wanted the coordinator again, but the lookup is
            # the machine's, and nothing else stepped a member without partitions (found
            # by the simulator's async API: trio seed 25, asyncio seed 57, pauses)
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
        qid = self._offsets.new("list", dict(timestamps)).query_id
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
        qid = self._offsets.new("committed", dict.fromkeys(tps)).query_id
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
        parts = commit_entries(offsets, self._parts, (generation, member_id, group_instance_id))
        q = self._offsets.new("commit", parts)
        self._commits_started[q.query_id] = now
        member = self.member
        topic = next(iter(parts), ("", 0))[0]
        if (
            isinstance(member, GroupMember)
            and member.state in (MemberState.JOINING, MemberState.SYNCING)
            and member.generation >= 0
        ):
            # As Java: no commit while the member is rejoining. The generation it would carry
            # is the new one, whose assignment the application has not seen: it could commit
            # a partition that generation gives to another member (found by the simulator).
            # (No rejoin asked for: the one under way settles it.)
            q.error = self._offsets.commit_fenced(27, topic)
            self._offsets.complete(q, now)
            return q.query_id
        if member is not None and member.subscription and generation < 0 and member.generation < 0:
            # As Java (ConsumerCoordinator.sendOffsetCommitRequest: "not part of an active
            # group"): a subscribed member outside a generation -- its partitions lost to a
            # session or poll timeout, or not joined yet -- fails its commit here. Sent with
            # generation -1, the coordinator would store it whenever the group is empty:
            # offsets of partitions the member lost, over what their next owner committed.
            rejoining = isinstance(member, GroupMember) and member.state in (
                MemberState.PREPARING,
                MemberState.JOINING,
                MemberState.SYNCING,
            )
            code = 27 if rejoining else 25  # REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID
            q.error = self._offsets.commit_fenced(code, topic)
            self._offsets.complete(q, now)
            return q.query_id
        self._step(now)
        return q.query_id

    def close(self) -> None:
        """Close every connection; outstanding queries fail."""
        if self._closed:
            return
        self._closed = True
        self._client.close()
        self._pull_client(self._now)
        # A query whose request failed with the client retries after a backoff that never
        # comes now: each ends here, its outcome unknown to the broker's side (a commit
        # sent may have been stored), so its caller gets a typed error, not a hang.
        self._offsets.fail_all(
            ConsumerStoppedError(
                "the consumer closed before the answer came (a commit sent may have been stored)"
            ),
            self._now,
        )

    # ------------------------------------------------------------ IO inputs

    def receive_data(self, node_id: NodeId, data: bytes, *, now: float) -> None:
        """Bytes read from ``node_id``'s socket (``b""`` = EOF)."""
        client = self._client
        client.receive_data(node_id, data, now=now)
        if not client.has_events():
            due = client.get_timer()
            if due is None or due > now:
                # Part of a response: nothing the machine can act on. A step looks at every
                # assigned partition; what only time brings on is handle_timer's (get_timer).
                self._now = max(self._now, now)
                return
        self._step(now)

    def handle_timer(self, *, now: float) -> None:
        """Run everything whose deadline passed. Safe to call early or twice."""
        if self._closed:
            return
        self._client.handle_timer(now=now)
        self._step(now)

    # ----------------------------------------------------------- IO outputs

    def next_event(self) -> FetcherEvent | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` must run, or None."""
        if self._closed:
            return None
        best = self._client.get_timer()
        now = self._now
        for t in self._fetches.node_backoff.values():
            if t > now:
                best = earliest(best, t)
        for p in self._parts.values():
            if p.backoff_until > now:
                best = earliest(best, p.backoff_until)
        best = earliest(best, self._offsets.next_deadline(now))
        if self._subscription_wait_until > now:
            best = earliest(best, self._subscription_wait_until)
        if self.member is not None:
            best = earliest(best, self.member.get_timer())
        return best

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
            reset.apply_policy(p, tp, self._reset_to)
        self._moved(p)  # an answer for an earlier assignment of tp is not for this one
        return p

    @property
    def _reset_to(self) -> int | None:
        """The reset policy's ListOffsets timestamp; None for ``none``."""
        return RESETS[self.config.auto_offset_reset]

    def _moved(self, p: _Partition) -> None:
        """The application (re)placed ``p``'s position: lookups already sent are stale."""
        self._seek_serial += 1
        p.seeks = self._seek_serial

    def _step(self, now: float) -> None:
        self.steps += 1
        self._now = max(self._now, now)
        if self._closed:
            return
        for _ in range(4):
            self._pull_client(now)
            self._drive_group(now)
            reset.start_lookups(  # committed offsets, resets, validation
                self._parts, self._completed, self._client, self._offsets, self._validating, now=now
            )
            self._offsets.run(now)
            self._fetches.send(self._parts, self._completed, now)
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
                case ConnectRequested() | CloseRequested() | TokenRequested():
                    self._events.append(event)
                case RequestCompleted(
                    request_id=rid, node_id=node, response=response, latency=latency
                ):
                    self._on_response(rid, node, response, now, latency)
                case RequestFailed(request_id=rid, error=error):
                    self._on_failure(rid, error, now)
                case NodeDisconnected(node_id=node):
                    self._fetches.disconnected(node)

    def _metadata_arrived(self) -> None:
        """What waited for metadata (not for a backoff after an error) goes on at once."""
        self._metadata_news = True
        member = self.member
        if member is not None and member.subscription:
            membership.tell_metadata(member, self._client.cluster, self._now)
        for p in self._parts.values():
            p.awaits_metadata = False
        self._offsets.metadata_arrived()

    # -- the group member: coordinator, requests, decisions

    def _drive_group(self, now: float) -> None:
        member = self.member
        if member is None:
            return
        cluster, wait = self._client.cluster, self._subscription_wait_until
        member.join_held = not membership.subscription_known(
            member.subscription, cluster, wait, now
        )
        member.handle_timer(now=now)
        self._member_coordinator = membership.coordinator_for(
            member,
            self._offsets,
            self._member_coordinator,
            lambda: not member.join_held,
            now,
        )
        for out in member.take_requests():
            rid = self._client.send(
                out.factory, now=now, node_id=self._member_coordinator, timeout=out.timeout
            )
            self._group_requests[rid] = out.kind
        while (event := member.next_event()) is not None:
            match event:
                case RevokePartitions(partitions=tps, lost=lost):
                    log.info(
                        "group %s: %s %s",
                        self.config.group_id,
                        "lost" if lost else "revoked",
                        _names(sorted(tps)),
                    )
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
                    self.group_counters.rebalances.record(1.0, now)
                    self.group_counters.last_rebalance = now
                    log.info(
                        "group %s: joined generation %s; assignment %s",
                        self.config.group_id,
                        generation,
                        _names(assigned),
                    )
                    self._events.append(
                        PartitionsAssigned(assigned=assigned, added=added, generation=generation)
                    )
                case GroupFailed(error=error):
                    log.info(
                        "group %s: the member failed for good: %s", self.config.group_id, error
                    )
                    self.group_counters.failed_rebalances += 1
                    self._events.append(event)
        if self._leaving and not self._group_requests:
            self._leaving = False
            log.info("group %s: left", self.config.group_id)
            self._events.append(GroupLeft())

    def _complete_query(self, q: _Query, now: float) -> None:
        if q.internal:
            self._events.append(PositionsResolved(partitions=tuple(q.partitions)))
            reset.finish_lookup(
                q,
                self._parts,
                self._client.cluster,
                reset_to=self._reset_to,
                retry_backoff=self.config.retry_backoff,
                now=now,
            )
            return
        if q.kind == "list":
            offsets = {tp: r for tp, r in q.results.items() if isinstance(r, ListedOffset)}
            self._events.append(OffsetsListed(query_id=q.query_id, offsets=offsets, error=q.error))
        elif q.kind == "committed":
            self._events.append(
                CommittedOffsets(query_id=q.query_id, offsets=dict(q.results), error=q.error)
            )
        else:
            started = self._commits_started.pop(q.query_id, None)
            if started is not None:
                self.group_counters.commits.record(now - started, now)
            committed = {tp: v[0] for tp, v in q.partitions.items()}
            self._events.append(
                OffsetsCommitted(query_id=q.query_id, offsets=committed, error=q.error)
            )

    def _complete_validation(
        self, tp: TopicPartition, p: _Partition, request: reset.Validation, part: Any
    ) -> None:
        reset.complete_validation(tp, p, request, part, self._reset_to)

    # -- fetching (fetch/request.py, fetch/session.py, fetch/decode.py)

    def _on_fetch_response(
        self, node: NodeId, offsets: dict[TopicPartition, int], response: Any, now: float
    ) -> None:
        if not self._fetches.session_answered(node, offsets, self._parts, response, now):
            return
        arrived = decode.read_response(
            response,
            offsets,
            self._parts,
            self._completed,
            self._client,
            reset_to=self._reset_to,
            now=now,
        )
        if arrived:
            self._events.append(RecordsFetched(partitions=tuple(arrived)))

    def _take(self, done: _Completed, p: _Partition, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` records from ``done`` (:func:`.decode.take`)."""
        return decode.take(done, p, limit, self.config)

    # -- responses

    def _on_response(
        self, rid: RequestId, node: NodeId, response: Any, now: float, latency: float
    ) -> None:
        fetch = self._fetches.answered(rid)
        if fetch is not None:
            self._count_fetch(response, now, latency)
            self._on_fetch_response(fetch[0], fetch[1], response, now)
            return
        sent = self._validating.pop(rid, None)
        if sent is not None:
            reset.read_validation(
                sent, response, self._parts, self._client, self._complete_validation
            )
            self._events.append(PositionsResolved(partitions=tuple(sent)))
            return
        kind = self._group_requests.pop(rid, None)
        if kind is not None and self.member is not None:
            self._count_group(kind, now, latency)
            self.member.handle_response(kind, response, now=now)
            return
        self._offsets.handle_response(rid, response, now)

    def _count_fetch(self, response: Any, now: float, latency: float) -> None:
        """Per Fetch response (never per record): latency, record bytes, throttle."""
        counters = self.counters
        counters.fetches.record(latency, now)
        counters.throttle.record(throttle_seconds(response), now)
        counters.last_fetch = now
        size = 0
        for topic in response.responses:
            for part in topic.partitions:
                records = part.records
                if records:
                    size += len(records)
        counters.bytes.record(size, now)

    def _count_group(self, kind: str, now: float, latency: float) -> None:
        counters = self.group_counters
        if kind == "heartbeat":
            counters.heartbeats.record(latency, now)
            counters.last_heartbeat = now
        elif kind == "join":
            counters.joins.record(latency, now)
        elif kind == "sync":
            counters.syncs.record(latency, now)

    def _on_failure(self, rid: RequestId, error: KafkaError, now: float) -> None:
        if self._fetches.failed(rid, self._parts, now):
            return
        sent = self._validating.pop(rid, None)
        if sent is not None:
            reset.validation_failed(sent, error, self._parts, self._client)
            self._events.append(PositionsResolved(partitions=tuple(sent)))
            return
        kind = self._group_requests.pop(rid, None)
        if kind is not None and self.member is not None:
            self.member.handle_failure(kind, error, now=now)
            return
        self._offsets.handle_failure(rid, error, now)
