"""A pure model of Kafka's classic group coordinator, for simulation tests.

Theory of operation
-------------------
Ported in behaviour (not in code) from the broker's ``GroupMetadataManager`` and
``ClassicGroup`` as ../shared/DST.md Part 1 describes them (sections A2.1-A2.6): group states
Empty -> PreparingRebalance -> CompletingRebalance -> Stable, JoinGroup with KIP-394's
MEMBER_ID_REQUIRED for dynamic members, static members (KIP-345) replaced without a rebalance
when the group is Stable, parked JoinGroup and SyncGroup requests answered when the join
phase completes or the leader's SyncGroup arrives, heartbeats, LeaveGroup, the session,
join and pending-sync timers, and OffsetCommit validation (A2.5). Left out: group size limits,
the initial-rebalance delay extension beyond one delay, KIP-848 groups, DescribeGroups.

Coordinator failover (:meth:`ClassicCoordinator.failover`): a group's state lives in memory,
and only some changes are written to ``__consumer_offsets`` as a GroupMetadata record -- a
new group (empty), a join phase ending with no members, the leader's SyncGroup (the
generation with its assignments), a static member replaced in a Stable group. When the
partition moves to another leader, the old coordinator unloads every group
(``GroupMetadataManager.onUnloaded``: the group goes Dead; JoinGroups parked in
PreparingRebalance, SyncGroups parked in CompletingRebalance or Stable are answered
NOT_COORDINATOR) and the new one replays the records: each group comes back from its last
record -- Stable at that generation with those members and assignments, or Empty -- with
every member's session started afresh (``onLoaded``). What was not written is gone: a
rebalance under way, a member that had joined but not synced, a generation begun but not
synced (whose number the next generation takes again). Committed offsets are records too
and stay.

Requests and answers are kio entities at the version the client chose; a request is handed
in with a caller token, and every answer -- at once or later, when a parked request
completes -- comes out of :meth:`ClassicCoordinator.take_replies` with that token. Time is
the caller's (``now`` on every input; :meth:`ClassicCoordinator.get_timer`).

Pure: no IO, no clock, no randomness (member ids are numbered).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Hashable
from typing import Any, Final

import attrs
from kio.schema.errors import ErrorCode

from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, response_type

__all__ = ["ClassicCoordinator", "GroupState", "Persisted", "Reply", "SimGroup", "SimMember"]

NEW_MEMBER_JOIN_TIMEOUT: Final = 300.0  # CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS
_NO_TIME: Final = datetime.timedelta(0)

# error codes
_NONE: Final = 0
_NOT_COORDINATOR: Final = 16
_ILLEGAL_GENERATION: Final = 22
_INCONSISTENT_GROUP_PROTOCOL: Final = 23
_INVALID_GROUP_ID: Final = 24
_UNKNOWN_MEMBER_ID: Final = 25
_INVALID_SESSION_TIMEOUT: Final = 26
_REBALANCE_IN_PROGRESS: Final = 27
_MEMBER_ID_REQUIRED: Final = 79
_FENCED_INSTANCE_ID: Final = 82


def commit_answer(cls: type[Any], prefix: str, topics: Any, code: int) -> tuple[Any, ...]:
    """The ``topics`` of an (Txn)OffsetCommit response that gives every partition of the
    request the same error code; ``prefix`` names the API's nested types
    (``"OffsetCommit"``, ``"TxnOffsetCommit"``)."""
    topic_cls = nested_type(cls, f"{prefix}ResponseTopic")
    part_cls = nested_type(cls, f"{prefix}ResponsePartition")
    return tuple(
        build(
            topic_cls,
            name=t.name,
            partitions=tuple(
                build(part_cls, partition_index=p.partition_index, error_code=ErrorCode(code))
                for p in t.partitions
            ),
        )
        for t in topics
    )


_COMMIT_ANSWERS: dict[tuple[Any, ...], Any] = {}
"""OffsetCommit answers by (version, error code, the request's topics and partitions):
kio entities are frozen, so one answer serves every commit of that shape. Bounded; the
entity is the same either way, so a run does not depend on what an earlier one left."""
_COMMIT_ANSWERS_MAX: Final = 1024


def _commit_response(version: int, code: int, shape: list[tuple[Any, Any, tuple[Any, ...]]]) -> Any:
    """The OffsetCommit answer giving each partition of ``shape`` -- ``(name, topic id,
    partition indexes)`` per topic -- the error ``code``."""
    cls = response_type(ApiKey.OFFSET_COMMIT, version)
    topic_cls = nested_type(cls, "OffsetCommitResponseTopic")
    part_cls = nested_type(cls, "OffsetCommitResponsePartition")
    topics = []
    for name, topic_id, indexes in shape:
        error = ErrorCode(code)
        partitions = tuple(build(part_cls, partition_index=i, error_code=error) for i in indexes)
        topics.append(build(topic_cls, name=name, topic_id=topic_id, partitions=partitions))
    return build(cls, throttle_time=_NO_TIME, topics=tuple(topics))


class GroupState(enum.Enum):
    """ClassicGroupState (Dead: unloaded, when the coordinator moves)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: Final = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {
        GroupState.STABLE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.EMPTY,
    },
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: {
        GroupState.STABLE,
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.EMPTY,
        GroupState.DEAD,
    },
}


@attrs.frozen
class Reply:
    """An answer for the request handed in with ``token``."""

    token: Hashable
    api_key: int
    response: Any


@attrs.define
class SimMember:
    """One member as the coordinator sees it."""

    member_id: str
    instance_id: str | None
    session_timeout: float
    rebalance_timeout: float
    protocols: tuple[tuple[str, bytes], ...]
    join_token: Hashable | None = None  # a parked JoinGroup (awaiting join)
    join_version: int = 0
    sync_token: Hashable | None = None  # a parked SyncGroup
    sync_version: int = 0
    assignment: bytes = b""
    is_new: bool = True
    heartbeat_deadline: float = 0.0

    def protocol_names(self) -> list[str]:
        return [name for name, _m in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        return next(m for n, m in self.protocols if n == protocol)


@attrs.frozen
class Persisted:
    """A classic group as its last GroupMetadata record has it (what a new coordinator
    loads): the generation, the selected protocol, the leader, the members with their
    assignments (each member's protocols reduced to the selected one, as the record keeps
    only its subscription)."""

    generation: int
    protocol_name: str | None
    leader: str | None
    members: tuple[SimMember, ...]


@attrs.define
class SimGroup:
    """One classic group."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    generations: list[int] = attrs.field(factory=list)  # every generation begun, in order
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, SimMember] = attrs.field(factory=dict)
    pending: dict[str, float] = attrs.field(factory=dict)  # KIP-394 ids -> expiry
    static: dict[str, str] = attrs.field(factory=dict)  # instance id -> member id
    pending_sync: set[str] = attrs.field(factory=set)
    join_deadline: float | None = None
    sync_deadline: float | None = None
    initial: bool = False  # the rebalance started from Empty
    transitions: list[tuple[GroupState, GroupState]] = attrs.field(factory=list)
    offsets: dict[tuple[str, int], int] = attrs.field(factory=dict)
    persisted: Persisted | None = None
    """The group's last GroupMetadata record (None: none written)."""
    loaded: set[int] = attrs.field(factory=set)
    """Indexes in :attr:`generations` of generations a failover loaded (not begun)."""

    def persist(self) -> None:
        """Write the group's GroupMetadata record (what a failover loads)."""
        protocol = self.protocol_name

        def protocols(m: SimMember) -> tuple[tuple[str, bytes], ...]:
            return m.protocols if protocol is None else ((protocol, m.metadata(protocol)),)

        self.persisted = Persisted(
            generation=self.generation,
            protocol_name=protocol,
            leader=self.leader,
            members=tuple(
                attrs.evolve(
                    m,
                    join_token=None,
                    sync_token=None,
                    protocols=protocols(m),
                )
                for m in self.members.values()
            ),
        )

    def transition(self, to: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[to]:
            raise AssertionError(f"illegal transition {self.state.value} -> {to.value}")
        self.transitions.append((self.state, to))
        self.state = to

    def validate_member(self, member_id: str, instance: str | None) -> int:
        """``ClassicGroup.validateMember``: a request naming an instance id is checked
        against the member id that instance has now (an older one is fenced); one without
        is checked only for a known member id."""
        if instance is not None:
            current = self.static.get(instance)
            if current is None:
                return _UNKNOWN_MEMBER_ID
            return _NONE if current == member_id else _FENCED_INSTANCE_ID
        return _NONE if member_id in self.members else _UNKNOWN_MEMBER_ID

    def rebalance_timeout(self) -> float:
        return max((m.rebalance_timeout for m in self.members.values()), default=0.0)

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_token is not None for m in self.members.values())


class ClassicCoordinator:
    """The coordinator of every group it is asked about.

    Args:
        initial_rebalance_delay: ``group.initial.rebalance.delay.ms`` in seconds.
        min_session_timeout: ``group.min.session.timeout.ms`` in seconds.
        max_session_timeout: ``group.max.session.timeout.ms`` in seconds.
    """

    def __init__(
        self,
        *,
        initial_rebalance_delay: float = 0.0,
        min_session_timeout: float = 6.0,
        max_session_timeout: float = 1800.0,
    ) -> None:
        self.initial_rebalance_delay = initial_rebalance_delay
        self.min_session_timeout = min_session_timeout
        self.max_session_timeout = max_session_timeout
        self.groups: dict[str, SimGroup] = {}
        self.accepted: list[tuple[str, int, tuple[str, int], int]] = []
        """Commits accepted, as ``(member id, generation, partition, group generation)``,
        for checkers to read (and clear)."""
        self._replies: list[Reply] = []
        self._next_id = 0
        self._now = 0.0

    # ------------------------------------------------------------------ API

    def handle(
        self, token: Hashable, api_key: int, version: int, request: Any, *, now: float
    ) -> None:
        """Take a request; its answer comes out of :meth:`take_replies` now or later."""
        self._expire(now)
        handler = {
            ApiKey.JOIN_GROUP: self._join,
            ApiKey.SYNC_GROUP: self._sync,
            ApiKey.HEARTBEAT: self._heartbeat,
            ApiKey.LEAVE_GROUP: self._leave,
            ApiKey.OFFSET_COMMIT: self._commit,
        }.get(api_key)
        if handler is None:
            raise NotImplementedError(f"the simulated coordinator does not serve api {api_key}")
        handler(token, version, request, now)

    def take_replies(self) -> list[Reply]:
        """Answers ready now, in the order they were made."""
        out, self._replies = self._replies, []
        return out

    def get_timer(self) -> float | None:
        """The earliest deadline, or None."""
        best: float | None = None  # (no list of every deadline: this runs after each request)
        for g in self.groups.values():
            for m in g.members.values():
                t = m.heartbeat_deadline
                if best is None or t < best:
                    best = t
            for t in g.pending.values():
                if best is None or t < best:
                    best = t
            for d in (g.join_deadline, g.sync_deadline):
                if d is not None and (best is None or d < best):
                    best = d
        return best

    def handle_timer(self, *, now: float) -> None:
        """Run the timers that are due."""
        self._expire(now)

    # ------------------------------------------------------------- replies

    def _reply(self, token: Hashable, api_key: int, version: int, **fields: Any) -> None:
        cls = response_type(api_key, version)
        self._replies.append(Reply(token, api_key, build(cls, throttle_time=_NO_TIME, **fields)))

    def _join_reply(
        self,
        group: SimGroup,
        member: SimMember | None,
        token: Hashable,
        version: int,
        *,
        code: int = _NONE,
        member_id: str = "",
        skip_assignment: bool = False,
    ) -> None:
        cls = response_type(ApiKey.JOIN_GROUP, version)
        entries: tuple[Any, ...] = ()
        if code == _NONE and member is not None and member.member_id == group.leader:
            entry_cls = nested_type(cls, "JoinGroupResponseMember")
            assert group.protocol_name is not None
            entries = tuple(
                build(
                    entry_cls,
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    metadata=m.metadata(group.protocol_name),
                )
                for m in group.members.values()
            )
        self._reply(
            token,
            ApiKey.JOIN_GROUP,
            version,
            error_code=ErrorCode(code),
            generation_id=group.generation if code == _NONE else -1,
            protocol_type="consumer" if code == _NONE else None,
            protocol_name=group.protocol_name if code == _NONE else None,
            leader=group.leader or "" if code == _NONE else "",
            skip_assignment=skip_assignment,
            member_id=member.member_id if member is not None else member_id,
            members=entries,
        )

    # ----------------------------------------------------------- JoinGroup

    def _join(self, token: Hashable, version: int, req: Any, now: float) -> None:
        session = req.session_timeout.total_seconds()
        rebalance = getattr(req, "rebalance_timeout", req.session_timeout).total_seconds()
        if not req.group_id:
            self._join_reply(SimGroup(""), None, token, version, code=_INVALID_GROUP_ID)
            return
        if not self.min_session_timeout <= session <= self.max_session_timeout:
            self._join_reply(SimGroup(""), None, token, version, code=_INVALID_SESSION_TIMEOUT)
            return
        member_id = req.member_id or ""
        group = self.groups.get(req.group_id)
        if group is None:
            if member_id:
                self._join_reply(SimGroup(""), None, token, version, code=_UNKNOWN_MEMBER_ID)
                return
            group = self.groups[req.group_id] = SimGroup(req.group_id)
            group.persist()  # a new group's empty record
        protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
        if (
            req.protocol_type != "consumer"
            or not protocols
            or not self._compatible(group, protocols)
        ):
            self._join_reply(group, None, token, version, code=_INCONSISTENT_GROUP_PROTOCOL)
            return
        instance = getattr(req, "group_instance_id", None)
        if not member_id:
            self._join_new(
                group,
                token,
                version,
                instance=instance,
                session=session,
                rebalance=rebalance,
                protocols=protocols,
                now=now,
            )
        elif member_id in group.pending:
            del group.pending[member_id]
            member = SimMember(member_id, instance, session, rebalance, protocols)
            self._add_member(group, member, token, version, now)
        else:
            self._join_existing(
                group,
                token,
                version,
                member_id=member_id,
                instance=instance,
                protocols=protocols,
                now=now,
            )

    def _compatible(self, group: SimGroup, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not group.members:
            return True
        names = {n for n, _m in protocols}
        common = set.intersection(*(set(m.protocol_names()) for m in group.members.values()))
        return bool(names & common)

    def _new_id(self, prefix: str) -> str:
        self._next_id += 1
        return f"{prefix}-{self._next_id}"

    def _join_new(
        self,
        group: SimGroup,
        token: Hashable,
        version: int,
        *,
        instance: str | None,
        session: float,
        rebalance: float,
        protocols: tuple[tuple[str, bytes], ...],
        now: float,
    ) -> None:
        if instance is None:
            new_id = self._new_id("member")
            if version >= 4:  # KIP-394: come back with this id
                group.pending[new_id] = now + session
                self._join_reply(
                    group, None, token, version, code=_MEMBER_ID_REQUIRED, member_id=new_id
                )
                return
            member = SimMember(new_id, None, session, rebalance, protocols)
            self._add_member(group, member, token, version, now)
            return
        new_id = self._new_id(instance)
        old_id = group.static.get(instance)
        if old_id is None or old_id not in group.members:
            group.static[instance] = new_id
            member = SimMember(new_id, instance, session, rebalance, protocols)
            self._add_member(group, member, token, version, now)
            return
        # A known static member came back (a restart): it replaces its old member id.
        old = group.members.pop(old_id)
        if old.join_token is not None:
            self._join_reply(
                group, None, old.join_token, old.join_version, code=_FENCED_INSTANCE_ID
            )
        if old.sync_token is not None:
            self._sync_error(old.sync_token, old.sync_version, _FENCED_INSTANCE_ID)
        member = attrs.evolve(
            old,
            member_id=new_id,
            protocols=protocols,
            join_token=None,
            sync_token=None,
            session_timeout=session,
            rebalance_timeout=rebalance,
        )
        group.members[new_id] = member
        group.static[instance] = new_id
        group.pending_sync.discard(old_id)
        if group.leader == old_id:
            group.leader = new_id
        member.heartbeat_deadline = now + member.session_timeout
        if group.state is GroupState.STABLE and self._select_protocol(group) == group.protocol_name:
            # No rebalance while the group's protocol stays the one selected (its metadata
            # may change: updateStaticMemberThenRebalanceOrCompleteJoin compares only the
            # selected protocol): the current generation's answer (a static leader skips
            # assigning, v9+).
            group.persist()
            self._join_reply(group, member, token, version, skip_assignment=group.leader == new_id)
            return
        member.join_token, member.join_version = token, version
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)
        else:
            self._prepare_rebalance(group, now)

    def _add_member(
        self, group: SimGroup, member: SimMember, token: Hashable, version: int, now: float
    ) -> None:
        member.join_token, member.join_version = token, version
        member.is_new = True
        member.heartbeat_deadline = now + NEW_MEMBER_JOIN_TIMEOUT
        group.members[member.member_id] = member
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)
        else:
            self._prepare_rebalance(group, now)

    def _join_existing(
        self,
        group: SimGroup,
        token: Hashable,
        version: int,
        *,
        member_id: str,
        instance: str | None,
        protocols: tuple[tuple[str, bytes], ...],
        now: float,
    ) -> None:
        code = group.validate_member(member_id, instance)
        if code == _NONE and group.state is GroupState.EMPTY:
            code = _UNKNOWN_MEMBER_ID
        if code != _NONE:
            self._join_reply(group, None, token, version, code=code, member_id=member_id)
            return
        member = group.members[member_id]
        changed = protocols != member.protocols
        member.protocols = protocols
        if group.state is GroupState.PREPARING_REBALANCE:
            member.join_token, member.join_version = token, version
            self._maybe_complete_join(group, now)
        elif not changed and (
            group.state is GroupState.COMPLETING_REBALANCE
            or (group.state is GroupState.STABLE and member_id != group.leader)
        ):
            self._join_reply(group, member, token, version)
        else:
            member.join_token, member.join_version = token, version
            self._prepare_rebalance(group, now)

    # ----------------------------------------------------------- rebalance

    def _prepare_rebalance(self, group: SimGroup, now: float) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                if m.sync_token is not None:
                    self._sync_error(m.sync_token, m.sync_version, _REBALANCE_IN_PROGRESS)
                    m.sync_token = None
        group.pending_sync.clear()
        group.sync_deadline = None
        group.initial = group.state is GroupState.EMPTY
        if group.state is not GroupState.PREPARING_REBALANCE:
            group.transition(GroupState.PREPARING_REBALANCE)
        if group.initial:
            group.join_deadline = now + self.initial_rebalance_delay
            if self.initial_rebalance_delay == 0:
                self._maybe_complete_join(group, now)
        else:
            group.join_deadline = now + group.rebalance_timeout()
            self._maybe_complete_join(group, now)

    def _maybe_complete_join(self, group: SimGroup, now: float) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.initial and group.join_deadline is not None and now < group.join_deadline:
            return  # the initial delay never completes early
        if group.all_joined():
            self._complete_join(group, now)

    def _complete_join(self, group: SimGroup, now: float) -> None:
        group.join_deadline = None
        for member_id in [m for m, x in group.members.items() if x.join_token is None]:
            if group.members[member_id].instance_id is None:
                del group.members[member_id]  # dynamic members that did not rejoin
        joined = [m for m in group.members.values() if m.join_token is not None]
        if group.members and not joined:
            group.join_deadline = now + group.rebalance_timeout()
            return
        group.generation += 1
        group.generations.append(group.generation)
        if not group.members:
            group.protocol_name = group.leader = None
            group.transition(GroupState.EMPTY)
            group.persist()
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader not in group.members or group.members[group.leader].join_token is None:
            group.leader = joined[0].member_id
        group.transition(GroupState.COMPLETING_REBALANCE)
        for m in group.members.values():
            m.is_new = False
            m.heartbeat_deadline = now + m.session_timeout
            group.pending_sync.add(m.member_id)
            if m.join_token is not None:
                token, version = m.join_token, m.join_version
                m.join_token = None
                self._join_reply(group, m, token, version)
        group.sync_deadline = now + group.rebalance_timeout()

    def _select_protocol(self, group: SimGroup) -> str:
        members = list(group.members.values())
        common = set.intersection(*(set(m.protocol_names()) for m in members))
        votes: dict[str, int] = {}
        for m in members:
            choice = next(n for n in m.protocol_names() if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])

    # ----------------------------------------------------------- SyncGroup

    def _sync(self, token: Hashable, version: int, req: Any, now: float) -> None:
        group = self.groups.get(req.group_id)
        code = (
            _UNKNOWN_MEMBER_ID
            if group is None
            else group.validate_member(req.member_id, getattr(req, "group_instance_id", None))
        )
        if code != _NONE:
            self._sync_error(token, version, code)
            return
        assert group is not None
        member = group.members[req.member_id]
        if req.generation_id != group.generation:
            self._sync_error(token, version, _ILLEGAL_GENERATION)
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            self._sync_error(token, version, _REBALANCE_IN_PROGRESS)
            return
        member.heartbeat_deadline = now + member.session_timeout
        if group.state is GroupState.STABLE:
            self._sync_reply(group, token, version, member.assignment)
            return
        member.sync_token, member.sync_version = token, version
        group.pending_sync.discard(member.member_id)
        if member.member_id == group.leader:
            given = {a.member_id: bytes(a.assignment) for a in req.assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.sync_deadline = None
            group.transition(GroupState.STABLE)
            group.persist()  # the generation's record: a failover comes back to it
            for m in group.members.values():
                if m.sync_token is not None:
                    self._sync_reply(group, m.sync_token, m.sync_version, m.assignment)
                    m.sync_token = None
                    m.heartbeat_deadline = now + m.session_timeout

    def _sync_error(self, token: Hashable, version: int, code: int) -> None:
        self._reply(
            token,
            ApiKey.SYNC_GROUP,
            version,
            error_code=ErrorCode(code),
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )

    def _sync_reply(self, group: SimGroup, token: Hashable, version: int, data: bytes) -> None:
        self._reply(
            token,
            ApiKey.SYNC_GROUP,
            version,
            error_code=ErrorCode(_NONE),
            protocol_type="consumer",
            protocol_name=group.protocol_name,
            assignment=data,
        )

    # ------------------------------------------------------ Heartbeat, Leave

    def _heartbeat(self, token: Hashable, version: int, req: Any, now: float) -> None:
        group = self.groups.get(req.group_id)
        instance = getattr(req, "group_instance_id", None)
        if group is None:
            code = _UNKNOWN_MEMBER_ID
        elif (code := group.validate_member(req.member_id, instance)) != _NONE:
            pass
        elif req.generation_id != group.generation:
            code = _ILLEGAL_GENERATION
        elif group.state is GroupState.EMPTY:
            code = _UNKNOWN_MEMBER_ID
        else:
            member = group.members[req.member_id]
            member.heartbeat_deadline = now + member.session_timeout
            preparing = group.state is GroupState.PREPARING_REBALANCE
            code = _REBALANCE_IN_PROGRESS if preparing else _NONE
        self._reply(token, ApiKey.HEARTBEAT, version, error_code=ErrorCode(code))

    def _leave(self, token: Hashable, version: int, req: Any, now: float) -> None:
        group = self.groups.get(req.group_id)
        identities = getattr(req, "members", None)
        if identities is None:  # v0-v2: one member id
            identities = [
                attrs.make_class("Identity", ["member_id", "group_instance_id"])(
                    req.member_id, None
                )
            ]
        answers = []
        for ident in identities:
            member_id, instance = ident.member_id, getattr(ident, "group_instance_id", None)
            code = _NONE
            if group is None:
                code = _UNKNOWN_MEMBER_ID
            elif not member_id and instance is not None:
                member_id = group.static.get(instance, "")
                code = _NONE if member_id in group.members else _UNKNOWN_MEMBER_ID
            if group is not None and code == _NONE:
                if member_id in group.pending:
                    del group.pending[member_id]
                else:
                    code = group.validate_member(member_id, instance)
                    if code == _NONE:
                        self._remove(group, member_id, now)
            answers.append((ident.member_id, instance, code))
        cls = response_type(ApiKey.LEAVE_GROUP, version)
        try:
            member_cls = nested_type(cls, "MemberResponse")
        except (KeyError, LookupError, AttributeError, TypeError):
            self._reply(token, ApiKey.LEAVE_GROUP, version, error_code=ErrorCode(answers[0][2]))
            return
        self._reply(
            token,
            ApiKey.LEAVE_GROUP,
            version,
            error_code=ErrorCode(_NONE),
            members=tuple(
                build(member_cls, member_id=m, group_instance_id=i, error_code=ErrorCode(c))
                for m, i, c in answers
            ),
        )

    def _remove(self, group: SimGroup, member_id: str, now: float) -> None:
        member = group.members.pop(member_id)
        if member.instance_id is not None and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]
        group.pending_sync.discard(member_id)
        if member.join_token is not None:
            self._join_reply(
                group,
                None,
                member.join_token,
                member.join_version,
                code=_UNKNOWN_MEMBER_ID,
                member_id=member_id,
            )
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)

    # --------------------------------------------------------- OffsetCommit

    def commit_error(
        self, group_id: str, generation: int, member_id: str, instance: str | None
    ) -> int:
        """The error code a non-transactional OffsetCommit gets (DST.md A2.5)."""
        group = self.groups.get(group_id)
        if group is None:
            return _NONE if generation < 0 else _ILLEGAL_GENERATION
        if generation < 0 and group.state is GroupState.EMPTY:
            return _NONE
        if generation >= 0 or member_id or instance is not None:
            code = group.validate_member(member_id, instance)
            if code != _NONE:
                return code
            if generation != group.generation:
                return _ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return _UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return _REBALANCE_IN_PROGRESS
        return _NONE

    def _commit(self, token: Hashable, version: int, req: Any, now: float) -> None:
        del now
        raw: Any = getattr(req, "generation_id_or_member_epoch", None)
        generation = int(getattr(req, "generation_id", -1) if raw is None else raw)
        instance = getattr(req, "group_instance_id", None)
        code = self.commit_error(req.group_id, generation, req.member_id or "", instance)
        group = self.groups.get(req.group_id)
        if group is None:  # (not setdefault: a SimGroup built for every commit is dropped)
            group = self.groups[req.group_id] = SimGroup(req.group_id)
        shape = []
        for t in req.topics:
            name = getattr(t, "name", None) or str(getattr(t, "topic_id", ""))
            indexes = []
            for part in t.partitions:
                if code == _NONE:
                    tp = (name, int(part.partition_index))
                    group.offsets[tp] = int(part.committed_offset)
                    self.accepted.append((req.member_id or "", generation, tp, group.generation))
                indexes.append(part.partition_index)
            shape.append((getattr(t, "name", None), getattr(t, "topic_id", None), tuple(indexes)))
        # The answer depends only on the partitions named and the code: built once per
        # shape (commits of moving offsets repeat it), then one entity the encoder knows.
        key = (version, code, tuple(shape))
        response = _COMMIT_ANSWERS.get(key)
        if response is None:
            response = _commit_response(version, code, shape)
            if len(_COMMIT_ANSWERS) >= _COMMIT_ANSWERS_MAX:
                _COMMIT_ANSWERS.clear()
            _COMMIT_ANSWERS[key] = response
        self._replies.append(Reply(token, ApiKey.OFFSET_COMMIT, response))

    # ------------------------------------------------------------- failover

    def failover(self, *, now: float) -> None:
        """The coordinator moved (its ``__consumer_offsets`` partition has a new leader):
        the old one unloads every group, answering its parked requests NOT_COORDINATOR,
        and the new one loads each from its last record (see the module's docstring)."""
        self._now = max(self._now, now)
        for group in self.groups.values():
            self._unload(group)
            self._load(group, now)

    def _unload(self, group: SimGroup) -> None:
        """``onUnloaded``: Dead; parked JoinGroups (PreparingRebalance) and SyncGroups
        (CompletingRebalance, Stable) answered NOT_COORDINATOR."""
        before = group.state
        group.transition(GroupState.DEAD)
        for member in group.members.values():
            if before is GroupState.PREPARING_REBALANCE and member.join_token is not None:
                self._join_reply(
                    group,
                    None,
                    member.join_token,
                    member.join_version,
                    code=_NOT_COORDINATOR,
                    member_id=member.member_id,
                )
            if (
                before in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
                and member.sync_token is not None
            ):
                self._sync_error(member.sync_token, member.sync_version, _NOT_COORDINATOR)

    def _load(self, group: SimGroup, now: float) -> None:
        """Replay the group's last record (``ClassicGroup`` from GroupMetadataValue:
        Stable with members, else Empty) and start every member's session now."""
        record = group.persisted or Persisted(0, None, None, ())
        group.state = GroupState.STABLE if record.members else GroupState.EMPTY
        group.generation = record.generation
        group.generations.append(record.generation)
        group.loaded.add(len(group.generations) - 1)
        group.protocol_name = record.protocol_name
        group.leader = record.leader
        group.members = {
            m.member_id: attrs.evolve(m, is_new=False, heartbeat_deadline=now + m.session_timeout)
            for m in record.members
        }
        group.static = {m.instance_id: m.member_id for m in record.members if m.instance_id}
        group.pending.clear()
        group.pending_sync.clear()
        group.join_deadline = group.sync_deadline = None
        group.initial = False

    # --------------------------------------------------------------- timers

    def _expire(self, now: float) -> None:
        self._now = max(self._now, now)
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending.items()):
                if now >= deadline:
                    del group.pending[member_id]
                    self._maybe_complete_join(group, now)
            if group.join_deadline is not None and now >= group.join_deadline:
                self._complete_join(group, now)
            if group.sync_deadline is not None and now >= group.sync_deadline:
                group.sync_deadline = None
                late = [m for m in group.pending_sync if m in group.members]
                for member_id in late:
                    self._remove(group, member_id, now)
            for member_id, member in list(group.members.items()):
                if member_id not in group.members or now < member.heartbeat_deadline:
                    continue
                satisfied = not member.is_new and (
                    member.join_token is not None or member.sync_token is not None
                )
                if satisfied:
                    member.heartbeat_deadline = now + member.session_timeout
                else:
                    self._remove(group, member_id, now)
