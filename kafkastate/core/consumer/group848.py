"""ConsumerGroupMember: one consumer's side of the KIP-848 group protocol, as a pure machine.

Theory of operation
-------------------
In the consumer protocol (``group.protocol=consumer``, Kafka 4) the coordinator assigns
partitions itself and members only heartbeat: ConsumerGroupHeartbeat carries the member's
subscription and the partitions it owns, and the answer carries its member epoch and,
when it changed, its target assignment (by topic id). There is no JoinGroup/SyncGroup and
no group-wide barrier: each member reconciles on its own -- it revokes what it must give up,
says so in its next heartbeat (the coordinator then hands those partitions to their new
owner), and takes on what it was given.

The machine has the same shape as :class:`~kafkastate.core.consumer.group.GroupMember`, so the
consumer machine hosts either: :meth:`take_requests` / :meth:`handle_response` /
:meth:`handle_failure` for the coordinator conversation, :class:`RevokePartitions` /
:class:`AssignPartitions` answered with :meth:`revocation_done` / :meth:`assignment_done`,
:meth:`polled` for ``max_poll_interval``.

* Joining: member epoch 0, a member id the client generates (KIP-1082; from the seeded
  ``rng``), the subscription, the rebalance timeout and the owned partitions (none).
* Every heartbeat repeats the subscription and the owned partitions (a full state is always
  valid; the broker only requires it after a join or an error).
* A new target: revoke ``owned - target`` first; heartbeat at once to report it; then assign
  ``target - owned``; heartbeat at once again. Target topics whose id metadata does not know
  yet wait (:meth:`update_topic_ids`).
* FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the partitions are lost; join again at epoch 0
  (same member id). COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / a lost request: the host
  looks for the coordinator again. COORDINATOR_LOAD_IN_PROGRESS: retry after
  ``retry_backoff``. Others (GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR,
  UNRELEASED_INSTANCE_ID, authorization, INVALID_REQUEST...) are fatal: :class:`GroupFailed`.
* Leaving: epoch -1 (dynamic members) or -2 (static members: a temporary leave that keeps the
  assignment for the instance's return). ``max_poll_interval`` without a poll leaves too; the
  next poll joins again.

Pure: no IO, no clock, randomness only from the ``rng`` handed in.
"""

from __future__ import annotations

import datetime
import enum
import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from kafkastate.core.consumer.group import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_LOST,
    AssignPartitions,
    GroupFailed,
    MemberBase,
    OutgoingRequest,
    RevokePartitions,
    group_id_name,
    positive_seconds,
)
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    UnsupportedVersionError,
    error_for_code,
)

__all__ = ["MEMBER848_STATES", "ConsumerGroupConfig", "ConsumerGroupMember", "Member848State"]

TopicPartition = tuple[str, int]

_JOIN_EPOCH: Final = 0
_LEAVE_EPOCH: Final = -1
_STATIC_LEAVE_EPOCH: Final = -2
_NONE: Final = 0
_UNKNOWN_MEMBER_ID: Final = 25
_FENCED_MEMBER_EPOCH: Final = 110


class Member848State(enum.Enum):
    """Where the member stands."""

    UNSUBSCRIBED = "unsubscribed"
    """No subscription, or left after a poll timeout (the next poll joins)."""
    JOINING = "joining"
    """Heartbeating at epoch 0 until the coordinator gives an epoch."""
    STABLE = "stable"
    """A member with an epoch, reconciled to its target."""
    RECONCILING = "reconciling"
    """Revoking or assigning towards a new target."""
    FAILED = "failed"
    """A fatal error."""
    CLOSED = "closed"
    """Left."""


_S = Member848State
# STYLE §6: read off every change of state below. close() and a fatal answer end any live
# state; a poll timeout (_step) leaves from a member with an epoch; FENCED_MEMBER_EPOCH /
# UNKNOWN_MEMBER_ID join again; _reconcile moves towards a target; unsubscribe() revokes,
# leaves and waits (or joins again when subscribed meanwhile). The answer to a heartbeat in
# flight when the member left is dropped (_answered), so nothing acts on an UNSUBSCRIBED one.
MEMBER848_STATES: Final = register(
    StateTable(
        machine="ConsumerGroupMember",
        states=Member848State,
        initial=_S.UNSUBSCRIBED,
        transitions={
            _S.UNSUBSCRIBED: {_S.JOINING, _S.FAILED, _S.CLOSED},
            _S.JOINING: {
                _S.JOINING,
                _S.STABLE,
                _S.RECONCILING,
                _S.UNSUBSCRIBED,
                _S.FAILED,
                _S.CLOSED,
            },
            _S.STABLE: {_S.JOINING, _S.RECONCILING, _S.UNSUBSCRIBED, _S.FAILED, _S.CLOSED},
            _S.RECONCILING: {
                _S.JOINING,
                _S.STABLE,
                _S.RECONCILING,
                _S.UNSUBSCRIBED,
                _S.FAILED,
                _S.CLOSED,
            },
            _S.FAILED: set(),
            _S.CLOSED: set(),
        },
    )
)


@attrs.frozen(kw_only=True)
class ConsumerGroupConfig:
    """Settings of a :class:`ConsumerGroupMember`. Durations are float seconds."""

    group_id: str = attrs.field(validator=group_id_name)
    """``group.id``."""
    max_poll_interval: float = attrs.field(default=300.0, validator=positive_seconds)
    """``max.poll.interval.ms``, also the rebalance timeout sent to the coordinator."""
    request_timeout: float = attrs.field(default=30.0, validator=positive_seconds)
    """``request.timeout.ms``."""
    retry_backoff: float = attrs.field(default=0.1, validator=positive_seconds)
    """``retry.backoff.ms``."""
    group_instance_id: str | None = None
    """``group.instance.id`` (static membership)."""
    group_remote_assignor: str | None = None
    """``group.remote.assignor``: the coordinator's assignor to use (``uniform``,
    ``range``), None for the broker's default."""
    client_rack: str | None = None
    """``client.rack``."""


class ConsumerGroupMember(MemberBase):
    """The KIP-848 member machine.

    Args:
        config: the settings.
        rng: seeded randomness (the client-generated member id).
    """

    def __init__(self, config: ConsumerGroupConfig, *, rng: random.Random) -> None:
        super().__init__()
        self.config: Final = config
        self.state = Member848State.UNSUBSCRIBED
        """Where the member stands."""
        self.member_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        """The member id (client-generated, KIP-1082)."""
        self.epoch = _JOIN_EPOCH
        """The member epoch (0 until the coordinator gives one)."""
        self.error: KafkaError | None = None
        """The fatal error, in FAILED."""
        self._names: dict[uuid.UUID, str] = {}
        self._target: dict[uuid.UUID, tuple[int, ...]] | None = None
        self._in_flight = False
        self._interval = 5.0
        self._next_heartbeat: float | None = None
        self._last_poll: float | None = None
        self._leaving = False
        self._unsubscribing = False  # unsubscribe(): revoke what is owned, then leave
        self._stale = 0  # answers to drop: the heartbeat in flight when the member left
        self._now = 0.0

    # ------------------------------------------------------------ queries

    @property
    def active(self) -> bool:
        """Neither closed nor failed."""
        return self.state not in (Member848State.CLOSED, Member848State.FAILED)

    @property
    def stable(self) -> bool:
        """Whether the member is reconciled to its target assignment."""
        return self.state is Member848State.STABLE

    @property
    def generation(self) -> int:
        """The member epoch, as the host's commit fencing reads it."""
        return self.epoch if self.epoch > 0 else -1

    def commit_identity(self) -> tuple[int, str, str | None]:
        """``(member epoch, member id, instance id)`` for OffsetCommit v9+."""
        return self.epoch, self.member_id, self.config.group_instance_id

    # ----------------------------------------------------------- commands

    def subscribe(self, topics: Sequence[str], *, now: float) -> None:
        """Subscribe to ``topics``; the next heartbeat tells the coordinator.

        Raises:
            KafkaConfigurationError: a malformed topic list.
            IllegalStateError: the member is closed or failed.
        """
        if self.state in (Member848State.FAILED, Member848State.CLOSED):
            raise IllegalStateError(f"the group member is {self.state.value}")
        if isinstance(topics, str) or not all(isinstance(t, str) and t for t in topics):
            raise KafkaConfigurationError(f"topics must be a list of topic names, got {topics!r}")
        self._topics = tuple(sorted(set(topics)))
        if self.state is Member848State.UNSUBSCRIBED and self._topics:
            self._to(Member848State.JOINING, what="subscribe")
            self.epoch = _JOIN_EPOCH
        self._next_heartbeat = now  # tell the coordinator now
        self._step(now)

    def update_topic_ids(self, names: Mapping[uuid.UUID, str], *, now: float) -> None:
        """Topic id -> name from metadata (the coordinator assigns by id)."""
        self._names = dict(names)
        self._step(now)

    def update_partition_counts(self, counts: Mapping[str, int], *, now: float) -> None:
        """Not needed here (the coordinator assigns); kept for the host's convenience."""
        del counts
        self._step(now)

    def polled(self, *, now: float) -> None:
        """The application polled: the ``max_poll_interval`` clock restarts; after a poll
        timeout this joins again."""
        self._last_poll = now
        if self.state is Member848State.UNSUBSCRIBED and self._topics:
            self._to(Member848State.JOINING, what="polled")
            self.epoch = _JOIN_EPOCH
            self._next_heartbeat = now
        self._step(now)

    def revocation_done(self, *, now: float) -> None:
        """The application finished the :class:`RevokePartitions` it was given."""
        revoking = self._awaiting_revocation
        if revoking is None:
            raise IllegalStateError("revocation_done without a RevokePartitions pending")
        self._awaiting_revocation = None
        gone = set(revoking.partitions)
        self._owned = tuple(tp for tp in self._owned if tp not in gone)
        self._revocation_finished()
        self._next_heartbeat = now  # report it: the coordinator can hand them over
        self._step(now)

    def assignment_done(self, *, now: float) -> None:
        """The application applied the :class:`AssignPartitions` it was given."""
        assigning = self._awaiting_assignment
        if assigning is None:
            raise IllegalStateError("assignment_done without an AssignPartitions pending")
        self._awaiting_assignment = None
        self._owned = assigning.assigned
        if self.state is Member848State.RECONCILING:
            self._to(Member848State.STABLE, what="assignment_done")
        self._next_heartbeat = now  # report the new owned set
        self._step(now)

    def coordinator_found(self, *, now: float) -> None:
        """The host reaches the coordinator again."""
        self.coordinator_wanted = False
        self._next_heartbeat = now
        self._step(now)

    def unsubscribe(self, *, now: float) -> None:
        """Stop being a member and stay usable (the consumer's ``unsubscribe()``, as Java's
        KIP-848 consumer does it): what the member owns is revoked first
        (:class:`RevokePartitions`, not lost -- the application may still commit it), then
        it leaves (epoch -1, or -2 for a static member) and waits with no subscription. A
        later :meth:`subscribe` joins again at epoch 0 with the same member id.

        Raises:
            IllegalStateError: the member is closed or failed.
        """
        if self.state in (Member848State.FAILED, Member848State.CLOSED):
            raise IllegalStateError(f"the group member is {self.state.value}")
        self._topics = ()
        self._target = None
        self._unsubscribing = True
        self._step(now)

    def close(self, *, now: float) -> None:
        """Leave the group (epoch -1, or -2 for a static member)."""
        if self.state in (Member848State.CLOSED, Member848State.FAILED):
            return
        if self.epoch > 0 and not self.coordinator_wanted:
            self._send_leave(now)
        self._to(Member848State.CLOSED, what="close")
        self._next_heartbeat = None

    # ---------------------------------------------------------------- IO

    def get_timer(self) -> float | None:
        """The earliest deadline for :meth:`handle_timer`, or None."""
        heartbeat = self._next_heartbeat if self._can_heartbeat() else None
        times = [t for t in (heartbeat, self._poll_deadline()) if t is not None]
        return min(times) if times else None

    def _can_heartbeat(self) -> bool:
        """Whether a Heartbeat could go out now (then a due one is a deadline)."""
        return (
            self.state not in (Member848State.UNSUBSCRIBED, Member848State.CLOSED)
            and self.state is not Member848State.FAILED
            and not (self.state is Member848State.JOINING and self._awaiting_revocation)
            and not self._in_flight
            and not self.coordinator_wanted
            and not (self.join_held and self.epoch == _JOIN_EPOCH)  # the join waits
        )

    def handle_timer(self, *, now: float) -> None:
        """Run what is due."""
        self._step(now)

    def handle_failure(self, kind: str, error: KafkaError, *, now: float) -> None:
        """The heartbeat got no answer."""
        if self._answered(kind):
            return
        if isinstance(error, UnsupportedVersionError):
            # The coordinator's broker cannot take the request at all: another coordinator
            # lookup lands on the same kind of broker, so retrying would hang for ever.
            self._fail(error)
            self._step(now)
            return
        self.coordinator_wanted = True
        self._next_heartbeat = now + self.config.retry_backoff
        self._step(now)

    def handle_response(self, kind: str, response: Any, *, now: float) -> None:
        """The coordinator's answer to a heartbeat."""
        if self._answered(kind):
            return
        code = int(response.error_code)
        if code == _NONE:
            self._on_heartbeat(response, now)
        elif code in (_FENCED_MEMBER_EPOCH, _UNKNOWN_MEMBER_ID):
            self._lose_everything(now)
        elif code in COORDINATOR_LOST:
            self.coordinator_wanted = True
        elif code == COORDINATOR_LOAD_IN_PROGRESS:
            self._next_heartbeat = now + self.config.retry_backoff
        else:
            message = response.error_message or "no message"
            error = error_for_code(code)(
                f"ConsumerGroupHeartbeat for group {self.config.group_id!r}: {message}"
            )
            self._fail(error)
        self._step(now)

    # ----------------------------------------------------------- internals

    def _answered(self, kind: str) -> bool:
        """Account for an answer (or a failure); True when it is to be ignored: the answer
        to a leave, to the heartbeat that was in flight when the member left (its epoch
        and target belong to the membership that ended), or after close/failure."""
        if kind == "leave":
            return True
        if self._stale:  # (the heartbeat in flight now, if any, is a later one)
            self._stale -= 1
            return True
        self._in_flight = False
        return self.state in (Member848State.CLOSED, Member848State.FAILED)

    def _send_leave(self, now: float, *, epoch: int | None = None) -> None:
        """Leave at ``epoch``: by default -1, or -2 for a static member (a temporary leave
        that keeps its assignment for the instance's return). The answer to a heartbeat in
        flight is dropped when it comes: it belongs to the membership that ended."""
        if epoch is None:
            static = self.config.group_instance_id is not None
            epoch = _STATIC_LEAVE_EPOCH if static else _LEAVE_EPOCH
        if self._in_flight:
            self._stale += 1
            self._in_flight = False
        self._send_heartbeat(epoch, now)

    def _to(self, new: Member848State, *, what: str) -> None:
        self.state = transition(MEMBER848_STATES, self.state, new, what=what)

    def _poll_deadline(self) -> float | None:
        if (
            self._last_poll is None
            or self.epoch <= 0
            or self.state
            in (
                Member848State.UNSUBSCRIBED,
                Member848State.CLOSED,
                Member848State.FAILED,
            )
        ):
            return None
        return self._last_poll + self.config.max_poll_interval

    def _step(self, now: float) -> None:
        self._now = max(self._now, now)
        if self.state in (Member848State.CLOSED, Member848State.FAILED):
            return
        if (
            self._unsubscribing
            and self._awaiting_revocation is None
            and self._awaiting_assignment is None
        ):
            if self._owned:
                self._awaiting_revocation = RevokePartitions(partitions=self._owned, lost=False)
                self._events.append(self._awaiting_revocation)
                return  # revocation_done steps again
            if self._in_flight and self.epoch <= 0:
                return  # a join is under way: leave with the epoch its answer gives
            self._unsubscribing = False
            if self.epoch > 0 and not self.coordinator_wanted:
                self._send_leave(now)
            self.epoch = _JOIN_EPOCH
            self._target = None
            if self._topics:  # subscribed again meanwhile: join as the same member, anew
                self._to(Member848State.JOINING, what="resubscribe")
                self._next_heartbeat = now
            else:
                if self.state is not Member848State.UNSUBSCRIBED:
                    self._to(Member848State.UNSUBSCRIBED, what="unsubscribe")
                self._next_heartbeat = None
                return
        deadline = self._poll_deadline()
        if deadline is not None and now >= deadline:
            if not self.coordinator_wanted:
                self._send_leave(now, epoch=_LEAVE_EPOCH)  # the group moves on without us
            self._lose()
            self._to(Member848State.UNSUBSCRIBED, what="poll timeout")
            self.epoch = _JOIN_EPOCH
            self._target = None
            self._next_heartbeat = None
            return
        self._reconcile()
        due = self._next_heartbeat
        if due is not None and now >= due and self._can_heartbeat():
            self._send_heartbeat(self.epoch, now)

    def _reconcile(self) -> None:
        """Move towards the target: revoke first, then assign, one step at a time."""
        target = self._target
        if target is None or self._awaiting_revocation or self._awaiting_assignment:
            return
        if any(tid not in self._names for tid in target):
            return  # wait for metadata to name the topics
        wanted = {(self._names[tid], p) for tid, parts in target.items() for p in parts}
        wanted = {tp for tp in wanted if tp[0] in self._topics}
        gone = tuple(sorted(tp for tp in self._owned if tp not in wanted))
        if gone:
            self._to(Member848State.RECONCILING, what="revoke")
            self._awaiting_revocation = RevokePartitions(partitions=gone, lost=False)
            self._events.append(self._awaiting_revocation)
            return
        added = tuple(sorted(wanted - set(self._owned)))
        self._target = None
        if added:
            self._to(Member848State.RECONCILING, what="assign")
            event = AssignPartitions(
                assigned=tuple(sorted(wanted)), added=added, generation=self.epoch
            )
            self._awaiting_assignment = event
            self._events.append(event)
        elif self.state is Member848State.RECONCILING or self.state is Member848State.JOINING:
            self._to(Member848State.STABLE, what="reconciled")

    def _lose(self) -> None:
        """Everything owned or being assigned is lost (the application acknowledges a
        pending assignment first, then the loss; after a revocation under way)."""
        self._lose_owned()

    def _lose_everything(self, now: float) -> None:
        """Fenced or forgotten: the partitions are lost; join again at epoch 0."""
        self._lose()
        self._target = None
        self.epoch = _JOIN_EPOCH
        self._to(Member848State.JOINING, what="fenced")
        self._next_heartbeat = now

    def _fail(self, error: KafkaError) -> None:
        self._lose()
        self._to(Member848State.FAILED, what="fatal error")
        self.error = error
        self._next_heartbeat = None
        self._events.append(GroupFailed(error=error))

    def _on_heartbeat(self, response: Any, now: float) -> None:
        if response.member_id:
            self.member_id = str(response.member_id)
        self.epoch = int(response.member_epoch)
        interval = response.heartbeat_interval.total_seconds()
        if interval > 0:  # a zero or negative interval (no broker sends one) keeps the last
            self._interval = interval
        self._next_heartbeat = now + self._interval
        if self.state is Member848State.JOINING and self.epoch > 0:
            self._to(Member848State.STABLE, what="joined")
            if self._last_poll is None:
                self._last_poll = now
        assignment = response.assignment
        if assignment is not None:
            self._target = {
                t.topic_id: tuple(int(p) for p in t.partitions) for t in assignment.topic_partitions
            }

    def _send_heartbeat(self, epoch: int, now: float) -> None:
        cfg = self.config
        member_id, topics = self.member_id, self._topics
        owned = self._owned_by_id()
        joining = epoch == _JOIN_EPOCH

        def factory(versions: ApiVersionTable) -> Any:
            versions.require(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                feature="group_protocol='consumer' (KIP-848)",
                remedy="it needs Kafka 4.0+ (3.7-3.9 only as a preview); use "
                "group_protocol='classic' with this broker",
            )
            cls = versions.request_type(ApiKey.CONSUMER_GROUP_HEARTBEAT)
            tp_cls = nested_type(cls, "TopicPartitions")
            leaving = epoch < 0
            return build(
                cls,
                group_id=cfg.group_id,
                member_id=member_id,
                member_epoch=epoch,
                instance_id=cfg.group_instance_id,
                rack_id=cfg.client_rack if joining else None,
                rebalance_timeout=_ms(cfg.max_poll_interval),
                subscribed_topic_names=None if leaving else topics,
                subscribed_topic_regex=None,
                server_assignor=cfg.group_remote_assignor if joining else None,
                topic_partitions=None
                if leaving
                else tuple(build(tp_cls, topic_id=t, partitions=ps) for t, ps in owned.items()),
            )

        leave = epoch < 0
        self._out.append(
            OutgoingRequest(
                kind="leave" if leave else "heartbeat",
                factory=factory,
                timeout=cfg.request_timeout,
            )
        )
        if not leave:
            self._in_flight = True
        self._next_heartbeat = now + self._interval

    def _owned_by_id(self) -> dict[uuid.UUID, tuple[int, ...]]:
        ids = {name: tid for tid, name in self._names.items()}
        out: dict[uuid.UUID, list[int]] = {}
        for topic, partition in self._owned:
            tid = ids.get(topic)
            if tid is not None:
                out.setdefault(tid, []).append(partition)
        return {t: tuple(sorted(ps)) for t, ps in out.items()}


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=round(seconds * 1000))
