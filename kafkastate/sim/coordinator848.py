"""A pure model of Kafka's KIP-848 ("consumer" protocol) group coordinator, for simulation.

Theory of operation
-------------------
Ported in behaviour (not in code) from the broker's ``GroupMetadataManager``
(``consumerGroupHeartbeat``), ``ConsumerGroup`` and ``CurrentAssignmentBuilder`` as DST.md
A2.8 describes them. A consumer group has a *group epoch*, bumped whenever its membership
or a subscription changes, and a *target assignment* computed by a server-side assignor
(``uniform`` or ``range``) at the group epoch, whose epoch is the *assignment epoch*. Each
member has a *member epoch* and reconciles towards its share of the target on its own:

* partitions it must give up are *pending revocation*: its epoch stays, the answer's
  assignment leaves them out, and they stay the member's until a heartbeat no longer
  reports them (then the member moves on to the next epoch);
* partitions it gains that another member still holds (assigned or pending revocation)
  are *unreleased*: it gets them on a later heartbeat, once they are free. A partition
  therefore never has two holders (invariant G3 in KIP-848 form);
* a member with nothing to revoke or wait for moves straight to the assignment epoch.

Target assignments are batched (KIP-1263, Kafka 4.3+): a heartbeat computes a new target
only when the group epoch is ahead of the assignment epoch *and* the group has never
computed one, or its ``consumer.assignment.interval.ms`` is 0, or that interval has passed
since the last computation (``canComputeNextTargetAssignment``). Otherwise the heartbeat
reconciles the member towards the last target (a member that just joined gets the last
assignment epoch and nothing). No timer computes it: the first heartbeat after the interval
does. Removing a member (leave, expiry, fencing) bumps the group epoch and drops the
member's share of the target, without a computation.

Fencing: a heartbeat with an epoch the coordinator does not know for the member (other than
the previous one with a subset of the assignment: its answer may have been lost) gets
FENCED_MEMBER_EPOCH; an unknown member id UNKNOWN_MEMBER_ID. A member is removed (fenced:
the group epoch moves, its partitions are free) when it leaves with epoch -1, when its
session (``group.consumer.session.timeout.ms``, or the group's own
``consumer.session.timeout.ms``) passes without a heartbeat, or when it does not revoke
within its rebalance timeout. Static members (``group.instance.id``) leave with
epoch -2: they keep their assignment, the group does not rebalance, and a new member id of
the same instance takes it over (while the old one has not left: UNRELEASED_INSTANCE_ID).

OffsetCommit from a member of a consumer group is accepted only at its current member epoch
(STALE_MEMBER_EPOCH otherwise, UNKNOWN_MEMBER_ID for a member the group does not have);
commits with epoch -1 only while the group has no members. Each accepted commit is
recorded with the member's epoch and whether it held the partition then (:attr:`commits`).

The coordinator extends :class:`~kafkastate.sim.coordinator.ClassicCoordinator` (classic
groups, and the offsets store of every group, stay its own). Left out: regular expression
subscriptions, racks, ConsumerGroupDescribe (the client does not use it), classic members
in consumer groups, group size limits.

Pure: no IO, no clock, no randomness.
"""

from __future__ import annotations

import datetime
import enum
import uuid
from collections.abc import Hashable, Mapping
from typing import Any, Final

import attrs
from kio.schema.errors import ErrorCode

from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, response_type
from kafkastate.sim.coordinator import ClassicCoordinator, Reply

__all__ = [
    "ASSIGNORS",
    "GROUP848_TRANSITIONS",
    "MEMBER848_TRANSITIONS",
    "Commit848",
    "ConsumerCoordinator",
    "ConsumerGroup",
    "ConsumerGroupState",
    "GroupConfig848",
    "Member848",
    "topic_id",
]

TopicPartition = tuple[str, int]

ASSIGNORS: Final = ("uniform", "range")
"""The server-side assignors (``group.consumer.assignors``); the first is the default."""

_NONE: Final = 0
_INVALID_REQUEST: Final = 42
_UNKNOWN_MEMBER_ID: Final = 25
_GROUP_ID_NOT_FOUND: Final = 69
_FENCED_INSTANCE_ID: Final = 82
_UNSUPPORTED_ASSIGNOR: Final = 104
_FENCED_MEMBER_EPOCH: Final = 110
_UNRELEASED_INSTANCE_ID: Final = 111
_STALE_MEMBER_EPOCH: Final = 113
_LEAVE: Final = -1
_STATIC_LEAVE: Final = -2
_NO_TIME: Final = datetime.timedelta(0)


def topic_id(topics: Mapping[str, int], name: str) -> uuid.UUID:
    """The simulated cluster's id of topic ``name`` (its place among the sorted names)."""
    return uuid.UUID(int=sorted(topics).index(name) + 1)


class ConsumerGroupState(enum.Enum):
    """ConsumerGroup.ConsumerGroupState, derived from the epochs (DST.md A2.8)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class MemberState(enum.Enum):
    """MemberState: where a member's reconciliation stands."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


GROUP848_TRANSITIONS: Final = tuple(
    (a, b) for a in ConsumerGroupState for b in ConsumerGroupState if a is not b
)
"""The group state is derived from the epochs (DST.md A2.8), so any change is possible:
the transitions a coverage report counts (:attr:`ConsumerGroup.transitions`)."""
MEMBER848_TRANSITIONS: Final = tuple((a, b) for a in MemberState for b in MemberState if a is not b)
"""A member's reconciliation may move between any two of its states
(:attr:`ConsumerGroup.member_transitions`)."""


@attrs.define
class Member848:
    """One member as the coordinator sees it."""

    member_id: str
    instance_id: str | None
    subscription: tuple[str, ...] = ()
    rebalance_timeout: float = 300.0
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: set[TopicPartition] = attrs.Factory(set)
    revoking: set[TopicPartition] = attrs.Factory(set)
    session_deadline: float = 0.0
    rebalance_deadline: float | None = None
    last_heartbeat: float = 0.0

    def holds(self) -> set[TopicPartition]:
        """What the member holds: assigned or still pending revocation."""
        return self.assigned | self.revoking


@attrs.frozen
class GroupConfig848:
    """A consumer group's own settings (KIP-848 group configs, set by
    IncrementalAlterConfigs), in seconds; None: the coordinator's."""

    session_timeout: float | None = None
    """``consumer.session.timeout.ms``."""
    assignment_interval: float | None = None
    """``consumer.assignment.interval.ms`` (KIP-1263)."""

    @classmethod
    def parse(cls, configs: Mapping[str, str]) -> GroupConfig848:
        """From group config names and values in milliseconds (others are refused)."""
        fields = {
            "consumer.session.timeout.ms": "session_timeout",
            "consumer.assignment.interval.ms": "assignment_interval",
        }
        unknown = sorted(set(configs) - set(fields))
        if unknown:
            raise ValueError(f"group configs the model does not know: {unknown}")
        return cls(**{fields[name]: int(value) / 1000 for name, value in configs.items()})


@attrs.define
class ConsumerGroup:
    """One KIP-848 group."""

    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignment_time: float | None = None
    """When the last target assignment was computed (None: never)."""
    assignor: str = ASSIGNORS[0]
    members: dict[str, Member848] = attrs.Factory(dict)
    static: dict[str, str] = attrs.Factory(dict)  # instance id -> member id
    target: dict[str, set[TopicPartition]] = attrs.Factory(dict)
    subscribed_topics: tuple[str, ...] = ()
    """The topics the members subscribe to, as of the last heartbeat."""
    epochs: list[int] = attrs.Factory(list)  # every group epoch, in order (G1)
    removed: list[tuple[str, str, float, float]] = attrs.Factory(list)
    """Members removed: (member id, why, when, its session deadline then)."""
    transitions: list[tuple[ConsumerGroupState, ConsumerGroupState]] = attrs.Factory(list)
    """Every change of :attr:`state`, as the coordinator answered or timed out (coverage)."""
    member_transitions: list[tuple[MemberState, MemberState]] = attrs.Factory(list)
    """Every change of a member's reconciliation state (coverage)."""
    last_state: ConsumerGroupState = ConsumerGroupState.EMPTY

    @property
    def state(self) -> ConsumerGroupState:
        """The state derived from the epochs."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.epoch != self.assignment_epoch or m.state is not MemberState.STABLE
            for m in self.members.values()
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def holder(self, tp: TopicPartition, *, but: str | None = None) -> str | None:
        """The member holding ``tp`` (assigned or pending revocation), other than ``but``."""
        for member_id, member in self.members.items():
            if member_id != but and tp in member.holds():
                return member_id
        return None

    def note_state(self) -> None:
        """Record a change of the derived state since the last note."""
        state = self.state
        if state is not self.last_state:
            self.transitions.append((self.last_state, state))
            self.last_state = state

    def set_member_state(self, member: Member848, state: MemberState) -> None:
        """Move ``member``'s reconciliation to ``state`` (recorded when it changes)."""
        if state is not member.state:
            self.member_transitions.append((member.state, state))
            member.state = state

    def bump(self) -> None:
        """A new group epoch: membership or subscriptions changed."""
        self.epoch += 1
        self.epochs.append(self.epoch)


@attrs.frozen
class Commit848:
    """An OffsetCommit the coordinator accepted for a consumer group (for checkers)."""

    member_id: str
    epoch: int
    partition: TopicPartition
    member_epoch: int | None
    """The member's epoch at the coordinator then (None: a commit with no member)."""
    held: bool
    """Whether the member held the partition then (assigned or pending revocation)."""


class ConsumerCoordinator(ClassicCoordinator):
    """The coordinator of classic and KIP-848 groups.

    Args:
        session_timeout: ``group.consumer.session.timeout.ms`` in seconds.
        heartbeat_interval: ``group.consumer.heartbeat.interval.ms`` in seconds.
        assignor: the default server-side assignor.
        assignment_interval: ``group.consumer.assignment.interval.ms`` in seconds (KIP-1263;
            Kafka 4.4's default 1 s; 0 computes each target at once).
        kwargs: the classic coordinator's settings.
    """

    def __init__(
        self,
        *,
        session_timeout: float = 45.0,
        heartbeat_interval: float = 5.0,
        assignor: str = ASSIGNORS[0],
        assignment_interval: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.session_timeout = session_timeout
        self.heartbeat_interval = heartbeat_interval
        self.assignor = assignor
        self.assignment_interval = assignment_interval
        self.group_configs: dict[str, GroupConfig848] = {}
        """Group id -> the group's own settings (they may precede the group)."""
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.topics: Mapping[str, int] = {}
        """Topic name -> partition count (the cluster's; topic ids by :func:`topic_id`)."""
        self.commits: list[Commit848] = []
        """Commits accepted for consumer groups, for checkers to read (and clear)."""
        self.hands_over_unrevoked = False
        """A planted bug's switch: a partition goes to its new owner at once, held or not."""
        self.ignores_member_epoch = False
        """A planted bug's switch: commits are not checked against the member epoch."""

    # ------------------------------------------------------------------ API

    def configure_group(self, group_id: str, configs: Mapping[str, str]) -> None:
        """IncrementalAlterConfigs (SET) of group ``group_id``'s configs: names and values in
        milliseconds, as the broker takes them. A group's session timeout applies from its
        members' next heartbeat, as a rescheduled timer does in Kafka."""
        given = attrs.asdict(GroupConfig848.parse(configs))
        old = self.group_configs.get(group_id, GroupConfig848())
        self.group_configs[group_id] = attrs.evolve(
            old, **{name: value for name, value in given.items() if value is not None}
        )

    def group_session_timeout(self, group_id: str) -> float:
        """The session timeout of group ``group_id``'s members, in seconds."""
        own = self.group_configs.get(group_id)
        if own is None or own.session_timeout is None:
            return self.session_timeout
        return own.session_timeout

    def group_assignment_interval(self, group_id: str) -> float:
        """The least time between two target assignments of group ``group_id``, seconds."""
        own = self.group_configs.get(group_id)
        if own is None or own.assignment_interval is None:
            return self.assignment_interval
        return own.assignment_interval

    def handle(
        self, token: Hashable, api_key: int, version: int, request: Any, *, now: float
    ) -> None:
        """Take a request; its answer comes out of :meth:`take_replies` now or later."""
        if api_key != ApiKey.CONSUMER_GROUP_HEARTBEAT:
            super().handle(token, api_key, version, request, now=now)
            return
        self._expire(now)
        fields = self._heartbeat848(request, now)
        group = self.consumer_groups.get(request.group_id)
        if group is not None:
            group.note_state()
        cls = response_type(api_key, version)
        body = build(cls, throttle_time=_NO_TIME, error_message=None, **fields)
        self._replies.append(Reply(token, api_key, body))

    def get_timer(self) -> float | None:
        """The earliest deadline, or None."""
        times = [t for t in (super().get_timer(),) if t is not None]
        for group in self.consumer_groups.values():
            for m in group.members.values():
                times.append(m.session_deadline)
                if m.rebalance_deadline is not None:
                    times.append(m.rebalance_deadline)
        return min(times) if times else None

    def failover(self, *, now: float) -> None:
        """The coordinator moved: classic groups are unloaded and loaded from their last
        records; a consumer group's whole state is in records, so it comes back as it was,
        with every member's session (and a revoking member's rebalance timeout) started
        afresh (``onLoaded``). The offsets of a consumer group are no classic group."""
        consumer = {g: self.groups.pop(g) for g in list(self.groups) if g in self.consumer_groups}
        super().failover(now=now)
        self.groups.update(consumer)
        for group in self.consumer_groups.values():
            for member in group.members.values():
                member.session_deadline = now + self.group_session_timeout(group.group_id)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    member.rebalance_deadline = now + member.rebalance_timeout

    # ------------------------------------------------------------ heartbeat

    def _heartbeat848(self, req: Any, now: float) -> dict[str, Any]:
        """ConsumerGroupHeartbeat: the answer's fields (error code, member, assignment)."""
        epoch = int(req.member_epoch)
        member_id = str(req.member_id or "")
        instance = req.instance_id
        error = self._invalid(req, epoch, member_id, instance)
        if error != _NONE:
            return _error(error)
        if epoch in (_LEAVE, _STATIC_LEAVE):
            return self._leave848(req.group_id, member_id, instance, epoch, now)
        group = self.consumer_groups.get(req.group_id)
        if group is None:
            if epoch != 0:
                return _error(_GROUP_ID_NOT_FOUND)
            group = self.consumer_groups[req.group_id] = ConsumerGroup(
                req.group_id, assignor=self.assignor
            )
        owned = _owned(req.topic_partitions, self.topics)
        before = group.epoch
        member, error = self._member(group, member_id, instance, epoch, owned)
        if member is None:
            return _error(error)
        if req.server_assignor:
            group.assignor = str(req.server_assignor)
        if req.rebalance_timeout is not None and req.rebalance_timeout.total_seconds() > 0:
            member.rebalance_timeout = req.rebalance_timeout.total_seconds()
        topics = req.subscribed_topic_names
        if topics is not None and tuple(sorted(topics)) != member.subscription:
            member.subscription = tuple(sorted(topics))
            if group.epoch == before:  # one new epoch for a join with its subscription
                group.bump()
        topics_now = tuple(sorted({t for m in group.members.values() for t in m.subscription}))
        if topics_now != group.subscribed_topics:
            # the group's subscription metadata changed: an epoch of its own (Kafka 4.4
            # answers a new group's first member with epoch 2)
            group.subscribed_topics = topics_now
            group.bump()
        member.session_deadline = now + self.group_session_timeout(group.group_id)
        member.last_heartbeat = now
        if group.epoch > group.assignment_epoch and self._may_assign(group, now):
            self._assign(group, now)
        self._reconcile(group, member, owned, now)
        ids = {name: topic_id(self.topics, name) for name in self.topics}
        return {
            "error_code": ErrorCode(_NONE),
            "member_id": member.member_id,
            "member_epoch": member.epoch,
            "heartbeat_interval": datetime.timedelta(
                milliseconds=round(self.heartbeat_interval * 1000)
            ),
            "assignment": _assignment(member.assigned, ids),
        }

    def _invalid(self, req: Any, epoch: int, member_id: str, instance: str | None) -> int:
        """``throwIfConsumerGroupHeartbeatRequestIsInvalid``: INVALID_REQUEST (or
        UNSUPPORTED_ASSIGNOR) for a malformed heartbeat, else NONE."""
        if not req.group_id or not member_id:
            return _INVALID_REQUEST
        if epoch == 0:
            timeout = req.rebalance_timeout
            if timeout is None or timeout.total_seconds() <= 0:
                return _INVALID_REQUEST
            if req.subscribed_topic_names is None or req.topic_partitions:
                return _INVALID_REQUEST
        elif (epoch == _STATIC_LEAVE and instance is None) or epoch < _STATIC_LEAVE:
            return _INVALID_REQUEST
        if req.server_assignor and req.server_assignor not in ASSIGNORS:
            return _UNSUPPORTED_ASSIGNOR
        return _NONE

    def _member(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance: str | None,
        epoch: int,
        owned: set[TopicPartition] | None,
    ) -> tuple[Member848 | None, int]:
        """The member a heartbeat (epoch >= 0) is from, created or taken over as the
        epoch allows; else None and the error code."""
        if instance is not None:
            return self._static_member(group, member_id, instance, epoch, owned)
        member = group.members.get(member_id)
        if epoch == 0:
            if member is None:
                member = group.members[member_id] = Member848(member_id, None)
                group.bump()
            else:
                # the same member id joins again (after it was fenced or lost its epoch):
                # it starts over with what it holds released
                self._reset(group, member)
            return member, _NONE
        if member is None:
            return None, _UNKNOWN_MEMBER_ID
        return self._epoch_ok(member, epoch, owned)

    def _static_member(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance: str,
        epoch: int,
        owned: set[TopicPartition] | None,
    ) -> tuple[Member848 | None, int]:
        current_id = group.static.get(instance)
        current = None if current_id is None else group.members.get(current_id)
        if epoch == 0:
            if current is None:
                member = group.members[member_id] = Member848(member_id, instance)
                group.static[instance] = member_id
                group.bump()
                return member, _NONE
            if current.member_id == member_id:
                self._reset(group, current)
                return current, _NONE
            if current.epoch != _STATIC_LEAVE:
                return None, _UNRELEASED_INSTANCE_ID
            # the instance comes back under a new member id: it takes over the assignment
            # (no rebalance: the group epoch stays)
            del group.members[current.member_id]
            target = group.target.pop(current.member_id, set())
            member = Member848(
                member_id,
                instance,
                subscription=current.subscription,
                rebalance_timeout=current.rebalance_timeout,
                epoch=group.assignment_epoch,
                assigned=current.assigned,
                revoking=current.revoking,
            )
            group.members[member_id] = member
            group.static[instance] = member_id
            group.target[member_id] = target
            return member, _NONE
        if current is None:
            return None, _UNKNOWN_MEMBER_ID
        if current.member_id != member_id:
            return None, _FENCED_INSTANCE_ID
        return self._epoch_ok(current, epoch, owned)

    def _epoch_ok(
        self, member: Member848, epoch: int, owned: set[TopicPartition] | None
    ) -> tuple[Member848 | None, int]:
        """``throwIfMemberEpochIsInvalid``: a greater epoch, or a smaller one other than
        the previous epoch with a subset of the assignment (the answer that moved it on
        may be lost), is fenced."""
        if epoch > member.epoch:
            return None, _FENCED_MEMBER_EPOCH
        if epoch < member.epoch and (
            epoch != member.previous_epoch or owned is None or not owned <= member.assigned
        ):
            return None, _FENCED_MEMBER_EPOCH
        return member, _NONE

    def _reset(self, group: ConsumerGroup, member: Member848) -> None:
        """A member joins again at epoch 0: what it held is released."""
        member.assigned = set()
        member.revoking = set()
        group.set_member_state(member, MemberState.STABLE)
        member.rebalance_deadline = None
        member.previous_epoch = member.epoch
        member.epoch = 0
        group.bump()

    def _leave848(
        self, group_id: str, member_id: str, instance: str | None, epoch: int, now: float
    ) -> dict[str, Any]:
        group = self.consumer_groups.get(group_id)
        if group is None:
            return _error(_UNKNOWN_MEMBER_ID)
        if instance is None:
            member = group.members.get(member_id)
        else:
            current_id = group.static.get(instance)
            member = None if current_id is None else group.members.get(current_id)
            if member is not None and member.member_id != member_id:
                return _error(_FENCED_INSTANCE_ID)
        if member is None:
            return _error(_UNKNOWN_MEMBER_ID)
        if epoch == _STATIC_LEAVE:
            # a temporary leave: the instance keeps its assignment for its return
            member.previous_epoch = member.epoch
            member.epoch = _STATIC_LEAVE
            member.rebalance_deadline = None
        else:
            self.remove(group, member.member_id, "left", now)
        return {
            "error_code": ErrorCode(_NONE),
            "member_id": member_id,
            "member_epoch": epoch,
            "heartbeat_interval": _NO_TIME,
            "assignment": None,
        }

    def remove(self, group: ConsumerGroup, member_id: str, why: str, now: float) -> None:
        """Fence a member: it goes, what it held is free, the group epoch moves."""
        member = group.members.pop(member_id)
        if member.instance_id is not None and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]
        group.target.pop(member_id, None)
        group.removed.append((member_id, why, now, member.session_deadline))
        group.bump()

    # ----------------------------------------------------------- assignment

    def _may_assign(self, group: ConsumerGroup, now: float) -> bool:
        """``canComputeNextTargetAssignment`` (KIP-1263): never computed, no interval, or
        the interval has passed since the last computation."""
        interval = self.group_assignment_interval(group.group_id)
        last = group.assignment_time
        return last is None or interval == 0 or now >= last + interval

    def _assign(self, group: ConsumerGroup, now: float) -> None:
        """A new target assignment at the group epoch (the server-side assignor)."""
        subscribed: dict[str, list[str]] = {}
        for member_id, member in sorted(group.members.items()):
            for topic in member.subscription:
                if topic in self.topics:
                    subscribed.setdefault(topic, []).append(member_id)
        if group.assignor == "range":
            target = _range(subscribed, self.topics)
        else:
            target = _uniform(subscribed, self.topics, group.target)
        group.target = {m: target.get(m, set()) for m in group.members}
        group.assignment_epoch = group.epoch
        group.assignment_time = now

    def _reconcile(
        self,
        group: ConsumerGroup,
        member: Member848,
        owned: set[TopicPartition] | None,
        now: float,
    ) -> None:
        """``CurrentAssignmentBuilder``: move the member towards its target."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.revoking:
                return  # not revoked yet
            member.revoking = set()
            member.rebalance_deadline = None
            self._next(group, member, member.epoch + 1, owned, now)
        elif member.state is MemberState.UNRELEASED_PARTITIONS or (
            member.epoch != group.assignment_epoch
        ):
            self._next(group, member, member.epoch, owned, now)

    def _next(
        self,
        group: ConsumerGroup,
        member: Member848,
        epoch: int,
        owned: set[TopicPartition] | None,
        now: float,
    ) -> None:
        """``computeNextAssignment``: keep what stays, revoke what goes (the epoch stays
        until the member reports it revoked), take what is free."""
        target = group.target.get(member.member_id, set())
        keep = member.assigned & target
        revoke = member.assigned - target
        unreleased = False
        for tp in sorted(target - member.assigned):
            taken = group.holder(tp, but=member.member_id) is not None
            if self.hands_over_unrevoked:
                taken = False  # the planted bug: no wait for the holder's revocation
            if taken:
                unreleased = True
            else:
                keep.add(tp)
        if revoke and (owned is None or owned & revoke):
            self._set_epoch(member, epoch)
            group.set_member_state(member, MemberState.UNREVOKED_PARTITIONS)
            member.assigned = member.assigned & target
            member.revoking = revoke
            member.rebalance_deadline = now + member.rebalance_timeout
            return
        self._set_epoch(member, group.assignment_epoch)
        member.assigned = keep
        member.revoking = set()
        group.set_member_state(
            member, MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        )

    @staticmethod
    def _set_epoch(member: Member848, epoch: int) -> None:
        if epoch != member.epoch:
            member.previous_epoch = member.epoch
            member.epoch = epoch

    # -------------------------------------------------------- OffsetCommit

    def commit_error(
        self, group_id: str, generation: int, member_id: str, instance: str | None
    ) -> int:
        """The error code an OffsetCommit gets: a consumer group checks the member epoch
        (``ConsumerGroup.validateOffsetCommit``), a classic one as before."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            return super().commit_error(group_id, generation, member_id, instance)
        if generation < 0 and not group.members:
            return _NONE
        member = group.members.get(member_id)
        if member is None:
            return _UNKNOWN_MEMBER_ID
        if generation != member.epoch and not self.ignores_member_epoch:
            return _STALE_MEMBER_EPOCH
        return _NONE

    def _commit(self, token: Hashable, version: int, req: Any, now: float) -> None:
        group = self.consumer_groups.get(req.group_id)
        before = len(self.accepted)
        super()._commit(token, version, req, now)
        if group is None:
            return
        member = group.members.get(req.member_id or "")
        for member_id, epoch, tp, _generation in self.accepted[before:]:
            self.commits.append(
                Commit848(
                    member_id=member_id,
                    epoch=epoch,
                    partition=tp,
                    member_epoch=None if member is None else member.epoch,
                    held=member is not None and tp in member.holds(),
                )
            )
        del self.accepted[before:]

    # --------------------------------------------------------------- timers

    def _expire(self, now: float) -> None:
        super()._expire(now)
        for group in self.consumer_groups.values():
            for member_id, member in sorted(group.members.items()):
                if now >= member.session_deadline:
                    self.remove(group, member_id, "session expired", now)
                elif member.rebalance_deadline is not None and now >= member.rebalance_deadline:
                    self.remove(group, member_id, "rebalance timeout", now)
            group.note_state()


def _error(code: int) -> dict[str, Any]:
    return {
        "error_code": ErrorCode(code),
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval": _NO_TIME,
        "assignment": None,
    }


def _owned(entries: Any, topics: Mapping[str, int]) -> set[TopicPartition] | None:
    """The partitions a heartbeat reports owned (None: not reported)."""
    if entries is None:
        return None
    names = {topic_id(topics, name): name for name in topics}
    out: set[TopicPartition] = set()
    for entry in entries:
        name = names.get(entry.topic_id)
        if name is not None:
            out.update((name, int(p)) for p in entry.partitions)
    return out


def _assignment(partitions: set[TopicPartition], ids: Mapping[str, uuid.UUID]) -> Any:
    """The answer's Assignment: the member's partitions by topic id."""
    cls = response_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0)
    assignment_cls = nested_type(cls, "Assignment")
    tp_cls = nested_type(cls, "TopicPartitions")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return build(
        assignment_cls,
        topic_partitions=tuple(
            build(tp_cls, topic_id=ids[t], partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )


def _range(
    subscribed: Mapping[str, list[str]], topics: Mapping[str, int]
) -> dict[str, set[TopicPartition]]:
    """The range assignor: per topic, contiguous ranges to its subscribers in id order
    (the first ones get one more)."""
    out: dict[str, set[TopicPartition]] = {}
    for topic, members in sorted(subscribed.items()):
        count, n = topics[topic], len(members)
        start = 0
        for i, member_id in enumerate(members):
            size = count // n + (1 if i < count % n else 0)
            out.setdefault(member_id, set()).update((topic, p) for p in range(start, start + size))
            start += size
    return out


def _uniform(
    subscribed: Mapping[str, list[str]],
    topics: Mapping[str, int],
    previous: Mapping[str, set[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """The uniform assignor: as even as the subscriptions allow, and sticky -- a member
    keeps what it had up to its quota; the rest goes to the least loaded subscriber."""
    out: dict[str, set[TopicPartition]] = {m: set() for ms in subscribed.values() for m in ms}
    members = sorted(out)
    partitions = sorted((t, p) for t in subscribed for p in range(topics[t]))
    quota = len(partitions) // max(1, len(members))
    free = []
    for tp in partitions:
        owner = next((m for m in members if tp in previous.get(m, set())), None)
        if owner is not None and owner in subscribed[tp[0]] and len(out[owner]) < quota:
            out[owner].add(tp)
        else:
            free.append(tp)
    for tp in free:
        member = min(subscribed[tp[0]], key=lambda m: (len(out[m]), m))
        out[member].add(tp)
    return out
