"""GroupMember: one consumer's side of the classic group protocol, as a pure machine.

Theory of operation
-------------------
A member joins its group through the group coordinator (JoinGroup, then SyncGroup), proves
it is alive with Heartbeats, and leaves with LeaveGroup (Java's ``AbstractCoordinator`` and
``ConsumerCoordinator``). The machine decides *what* to send and *when*; its host (the
consumer machine that owns the :class:`~kafkastate.core.client.Client`) finds the
coordinator, sends what :meth:`GroupMember.take_requests` hands it, and feeds the answers
back (:meth:`GroupMember.handle_response`, :meth:`GroupMember.handle_failure`).

States (:class:`MemberState`)::

    UNJOINED --(rejoin wanted)--> PREPARING --(app revoked)--> JOINING --> SYNCING
        ^                                                                      |
        |                                                      ASSIGNING <-----+
        |                                                          | (app applied)
        +--- LeaveGroup (close, max.poll.interval.ms) <-------- STABLE ---+
                                                                   |      | heartbeats
                                                 REBALANCE_IN_PROGRESS ---+ -> PREPARING

The application takes part twice, as Java's rebalance listener does, through events and
acknowledgements: :class:`RevokePartitions` must be answered with
:meth:`GroupMember.revocation_done` (commit what was consumed, run
``on_partitions_revoked``/``on_partitions_lost``, stop fetching them) before the machine goes
on; :class:`AssignPartitions` with :meth:`GroupMember.assignment_done`. So every revocation
completes before the JoinGroup that hands the partitions to someone else is sent (eager),
or before the next round (cooperative).

Rebalance protocols (KIP-429): the members' common protocol is the newest every configured
assignor supports. EAGER revokes everything before each JoinGroup. COOPERATIVE keeps owning
through a rebalance: after SyncGroup it revokes only ``owned - assigned`` and, if it revoked
anything, joins again at once so the next round can hand those partitions over.

Errors, as Java's client handles them: MEMBER_ID_REQUIRED (KIP-394) -> join again with the
id the coordinator chose; UNKNOWN_MEMBER_ID -> forget the member id, partitions are *lost*
(:class:`RevokePartitions` with ``lost=True``), join again; ILLEGAL_GENERATION -> the same
but keeping the member id; REBALANCE_IN_PROGRESS -> join again (partitions revoked normally);
COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / a lost request -> the host must find the
coordinator again (:attr:`GroupMember.coordinator_wanted`); COORDINATOR_LOAD_IN_PROGRESS
-> retry after ``retry_backoff``; FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED,
INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED,
UNSUPPORTED_VERSION... -> FAILED with :class:`GroupFailed` (fatal: the application sees it).

Timers: a Heartbeat every ``heartbeat_interval`` while in a generation; no Heartbeat
answered (no error, or REBALANCE_IN_PROGRESS) within ``session_timeout`` of *sending* the
last one so answered (or the SyncGroup that began the generation) -> the member's
partitions are lost, it forgets its member id, looks for the coordinator again and joins
anew (librdkafka's behaviour; Java only looks for the coordinator and keeps its
partitions). The coordinator received that request no earlier than it was sent, so it
removes the member no earlier than this deadline: the application stops processing before
the partitions can go to another member. No :meth:`GroupMember.polled` for
``max_poll_interval`` -> LeaveGroup, and the next poll joins again. JoinGroup may wait
``rebalance_timeout`` at the coordinator: its request timeout is
``max(request_timeout, rebalance_timeout + 5 s)``.

Pure: no IO, no clock (every input carries ``now``), no randomness.
"""

from __future__ import annotations

import datetime
import enum
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from kafkastate.core.consumer.assignors import (
    Assignment,
    Assignor,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafkastate.core.deadlines import earliest
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    RemoteProtocolError,
    error_for_code,
)

__all__ = [
    "AssignPartitions",
    "GroupConfig",
    "GroupEvent",
    "GroupFailed",
    "GroupMember",
    "MemberBase",
    "MEMBER_STATES",
    "MemberState",
    "OutgoingRequest",
    "RevokePartitions",
]

TopicPartition = tuple[str, int]
"""``(topic, partition)``."""

_JOIN_TIMEOUT_LAPSE: Final = 5.0  # Java AbstractCoordinator.JOIN_GROUP_TIMEOUT_LAPSE

# error codes (the coordinator ones are shared with the KIP-848 member)
_NONE: Final = 0
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_LOST: Final = frozenset({15, 16})  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
_ILLEGAL_GENERATION: Final = 22
_UNKNOWN_MEMBER_ID: Final = 25
_REBALANCE_IN_PROGRESS: Final = 27
_MEMBER_ID_REQUIRED: Final = 79


class MemberState(enum.Enum):
    """Where the member stands in its group."""

    UNJOINED = "unjoined"
    """Not in a generation; joins when a rejoin is wanted and the coordinator is known."""
    PREPARING = "preparing"
    """Waiting for the application to finish revoking before JoinGroup."""
    JOINING = "joining"
    """JoinGroup sent or about to be."""
    SYNCING = "syncing"
    """SyncGroup sent."""
    ASSIGNING = "assigning"
    """The assignment arrived; the application is applying it."""
    STABLE = "stable"
    """A member of the current generation."""
    FAILED = "failed"
    """A fatal error (:attr:`GroupMember.error`); the member does nothing more."""
    CLOSED = "closed"
    """Left the group (or closed without leaving, for static members)."""


_M = MemberState
# STYLE §6: read off every change of state below. close() ends any live state; a poll
# timeout (_step) leaves from every state that takes part in the group; a fatal answer to
# JoinGroup, SyncGroup or Heartbeat fails the member in the state that sent it.
MEMBER_STATES: Final = register(
    StateTable(
        machine="GroupMember",
        states=MemberState,
        initial=_M.UNJOINED,
        transitions={
            _M.UNJOINED: {_M.PREPARING, _M.CLOSED},
            _M.PREPARING: {_M.JOINING, _M.UNJOINED, _M.CLOSED},
            _M.JOINING: {_M.JOINING, _M.SYNCING, _M.UNJOINED, _M.FAILED, _M.CLOSED},
            _M.SYNCING: {_M.JOINING, _M.ASSIGNING, _M.UNJOINED, _M.FAILED, _M.CLOSED},
            _M.ASSIGNING: {_M.STABLE, _M.UNJOINED, _M.FAILED, _M.CLOSED},
            _M.STABLE: {_M.PREPARING, _M.UNJOINED, _M.FAILED, _M.CLOSED},
            _M.FAILED: set(),
            _M.CLOSED: set(),
        },
    )
)
_IN_GROUP: Final = (_M.STABLE, _M.ASSIGNING, _M.PREPARING, _M.JOINING, _M.SYNCING)
"""The states that take part in the group (a tuple: no enum hashing on the timer path)."""
# (On Python 3.11 ``EnumClass.MEMBER`` goes through EnumType.__getattr__'s slow lookup,
# several times a global's: the per-step tests below compare with these module constants.)
_ENDED: Final = (_M.CLOSED, _M.FAILED)
_IN_GENERATION: Final = (_M.STABLE, _M.ASSIGNING)


def positive_seconds(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    """attrs validator: a duration > 0 (both member configs use it)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise KafkaConfigurationError(f"{attr.name} must be a number > 0, got {value!r}")


def group_id_name(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    """attrs validator: a non-empty group id (both member configs use it)."""
    if not isinstance(value, str) or not value:
        raise KafkaConfigurationError(f"group_id must be a non-empty str, got {value!r}")


@attrs.frozen(kw_only=True)
class GroupConfig:
    """Settings of a :class:`GroupMember`. Durations are float seconds."""

    group_id: str = attrs.field(validator=group_id_name)
    """``group.id``."""
    assignors: tuple[Assignor, ...] = attrs.field()
    """``partition.assignment.strategy``, preferred first (the leader runs the one every
    member lists first)."""
    session_timeout: float = attrs.field(default=45.0, validator=positive_seconds)
    """``session.timeout.ms``."""
    heartbeat_interval: float = attrs.field(default=3.0, validator=positive_seconds)
    """``heartbeat.interval.ms``."""
    max_poll_interval: float = attrs.field(default=300.0, validator=positive_seconds)
    """``max.poll.interval.ms``; also the JoinGroup rebalance timeout unless
    :attr:`rebalance_timeout` is set, as in Java."""
    rebalance_timeout: float | None = attrs.field(default=None)
    """How long the coordinator waits for members to rejoin in a rebalance; None:
    :attr:`max_poll_interval` (aiokafka's ``rebalance_timeout_ms`` decouples them)."""
    request_timeout: float = attrs.field(default=30.0, validator=positive_seconds)
    """``request.timeout.ms`` (JoinGroup gets at least the rebalance timeout + 5 s)."""
    retry_backoff: float = attrs.field(default=0.1, validator=positive_seconds)
    """``retry.backoff.ms``."""
    group_instance_id: str | None = None
    """``group.instance.id`` (KIP-345 static membership)."""
    leave_group_on_close: bool | None = None
    """Send LeaveGroup on close; default: dynamic members do, static ones do not."""
    client_rack: str | None = None
    """``client.rack``, sent in the subscription (v3)."""

    @assignors.validator
    def _check_assignors(self, _attr: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        if not value:
            raise KafkaConfigurationError("at least one partition assignor is needed")
        names = [getattr(a, "name", None) for a in value]
        if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
            raise KafkaConfigurationError(f"assignors need distinct names, got {names!r}")
        if not self._common_protocols(value):
            raise KafkaConfigurationError(
                f"the assignors {names!r} share no rebalance protocol (eager / cooperative)"
            )

    @staticmethod
    def _common_protocols(assignors: Sequence[Any]) -> set[RebalanceProtocol]:
        common = set(RebalanceProtocol)
        for assignor in assignors:
            common &= set(getattr(assignor, "protocols", ()))
        return common

    @rebalance_timeout.validator
    def _check_rebalance_timeout(self, attr: attrs.Attribute[Any], value: float | None) -> None:
        if value is not None:
            positive_seconds(self, attr, value)

    @property
    def join_timeout(self) -> float:
        """The rebalance timeout JoinGroup carries."""
        return self.max_poll_interval if self.rebalance_timeout is None else self.rebalance_timeout

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        """COOPERATIVE if every assignor supports it, else EAGER (Java's rule)."""
        common = self._common_protocols(self.assignors)
        return (
            RebalanceProtocol.COOPERATIVE
            if RebalanceProtocol.COOPERATIVE in common
            else RebalanceProtocol.EAGER
        )

    @property
    def leaves_on_close(self) -> bool:
        """Whether close sends LeaveGroup."""
        if self.leave_group_on_close is not None:
            return self.leave_group_on_close
        return self.group_instance_id is None


# ------------------------------------------------------------------------------- events


@attrs.frozen(kw_only=True)
class RevokePartitions:
    """Stop consuming these partitions; answer with :meth:`GroupMember.revocation_done`.

    With ``lost`` false the partitions are being handed over: commit what was consumed
    first (``on_partitions_revoked``). With ``lost`` true the member is no longer in the
    generation that owned them: a commit would be refused (``on_partitions_lost``)."""

    partitions: tuple[TopicPartition, ...]
    """The partitions, sorted."""
    lost: bool
    """Whether they were lost rather than revoked."""


@attrs.frozen(kw_only=True)
class AssignPartitions:
    """The new assignment; answer with :meth:`GroupMember.assignment_done` once fetching
    follows it (``on_partitions_assigned`` gets ``added``)."""

    assigned: tuple[TopicPartition, ...]
    """Everything the member owns from now on."""
    added: tuple[TopicPartition, ...]
    """What is new to it in this assignment."""
    generation: int
    """The generation it belongs to."""


@attrs.frozen(kw_only=True)
class GroupFailed:
    """A fatal error: the member stopped (FAILED)."""

    error: KafkaError
    """Why."""


GroupEvent = RevokePartitions | AssignPartitions | GroupFailed


@attrs.frozen(kw_only=True)
class OutgoingRequest:
    """A request for the host to send to the group coordinator."""

    kind: str
    """``join``, ``sync``, ``heartbeat`` or ``leave``: hand it back with the answer."""
    factory: Callable[[ApiVersionTable], Any]
    """Builds the kio request at the negotiated version."""
    timeout: float
    """The request timeout to use."""


# ------------------------------------------------------------------------------ machine


class MemberBase:
    """What both group member machines (classic and KIP-848) show their host alike."""

    def __init__(self) -> None:
        self.coordinator_wanted = True
        """Whether the host must (re)discover the coordinator before sending anything;
        the host clears it with ``coordinator_found``."""
        self.join_held = False
        """Set by the host while metadata does not describe every subscribed topic yet
        (and a short wait is not over): the member does not join meanwhile (JoinGroup; a
        KIP-848 member's first heartbeat), or the leader would assign without those
        topics and the group rebalance again when they arrive. The host steps the member
        (``handle_timer``) once it clears it."""
        self._topics: tuple[str, ...] = ()
        self._owned: tuple[TopicPartition, ...] = ()
        self._events: deque[GroupEvent] = deque()
        self._out: deque[OutgoingRequest] = deque()
        self._awaiting_revocation: RevokePartitions | None = None
        self._awaiting_assignment: AssignPartitions | None = None
        self._lose_after_revocation = False

    @property
    def owned(self) -> tuple[TopicPartition, ...]:
        """The partitions the application owns now (sorted)."""
        return self._owned

    @property
    def subscription(self) -> tuple[str, ...]:
        """The subscribed topics."""
        return self._topics

    @property
    def has_requests(self) -> bool:
        """Whether :meth:`take_requests` has something to send now: its host must step (a
        command such as ``polled`` may queue a request)."""
        return bool(self._out) and not self.coordinator_wanted

    def take_requests(self) -> list[OutgoingRequest]:
        """What to send to the coordinator now (empty while it is wanted)."""
        if self.coordinator_wanted:
            return []
        out = list(self._out)
        self._out.clear()
        return out

    def next_event(self) -> GroupEvent | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def _lose_owned(self) -> None:
        """The member fell out of the group: everything the application owns or is being
        given is lost -- right away, or, when a revocation is under way, right after the
        application finishes it (found by the simulator: the loss used to be dropped, and
        the application kept partitions the group had given to others)."""
        if self._awaiting_revocation is not None:
            self._lose_after_revocation = True
            return
        losing = self._losing()
        if losing:
            self._awaiting_revocation = RevokePartitions(partitions=losing, lost=True)
            self._events.append(self._awaiting_revocation)

    def _revocation_finished(self) -> None:
        """Call when the application finished a revocation: a loss waiting for it follows."""
        if self._lose_after_revocation:
            self._lose_after_revocation = False
            self._lose_owned()

    def _losing(self) -> tuple[TopicPartition, ...]:
        """What the application owns or is being given (an assignment it has not
        acknowledged yet): all of it is lost when the member falls out of the group."""
        pending = self._awaiting_assignment
        return tuple(sorted({*self._owned, *(pending.assigned if pending else ())}))


class GroupMember(MemberBase):
    """The classic-protocol member machine.

    Args:
        config: the settings.
    """

    def __init__(self, config: GroupConfig) -> None:
        super().__init__()
        self.config: Final = config
        self.state = MemberState.UNJOINED
        """Where the member stands."""
        self.member_id = ""
        """The id the coordinator gave it ("" before the first JoinGroup answer)."""
        self.generation = -1
        """The generation of its current assignment, -1 outside one."""
        self.leader_id: str | None = None
        """The generation's leader."""
        self.protocol_name: str | None = None
        """The assignor the group chose."""
        self.error: KafkaError | None = None
        """The fatal error, in FAILED."""
        self._partitions: dict[str, int] = {}
        self._rejoin = False
        self._unsubscribing = False  # unsubscribe(): revoke what is owned, then leave
        self._reason = ""
        self._in_flight: set[str] = set()
        self._pending_assignment: Assignment | None = None
        self._next_heartbeat: float | None = None
        self._session_deadline: float | None = None
        self._last_poll: float | None = None
        self._retry_at = 0.0
        self._now = 0.0

    # ------------------------------------------------------------ queries

    @property
    def requests_in_flight(self) -> frozenset[str]:
        """The group requests awaiting an answer: ``"join"``, ``"sync"``, ``"heartbeat"``
        (an eager member must have revoked everything before ``"join"`` goes out)."""
        return frozenset(self._in_flight)

    @property
    def active(self) -> bool:
        """Neither closed nor failed."""
        return self.state not in _ENDED

    @property
    def stable(self) -> bool:
        """Whether the member holds its generation's assignment, no rebalance under way."""
        return self.state is MemberState.STABLE and not self._rejoin

    def commit_identity(self) -> tuple[int, str, str | None]:
        """``(generation, member_id, group_instance_id)`` for OffsetCommit fencing: the
        coordinator refuses commits of an older generation (ILLEGAL_GENERATION)."""
        return self.generation, self.member_id, self.config.group_instance_id

    # ----------------------------------------------------------- commands

    def subscribe(self, topics: Sequence[str], *, now: float) -> None:
        """Subscribe to ``topics`` (replacing the old list); a change triggers a rejoin.

        Raises:
            KafkaConfigurationError: an empty or malformed topic list.
            IllegalStateError: the member is closed or failed.
        """
        self._check_open()
        if isinstance(topics, str) or not all(isinstance(t, str) and t for t in topics):
            raise KafkaConfigurationError(f"topics must be a list of topic names, got {topics!r}")
        wanted = tuple(sorted(set(topics)))
        if wanted != self._topics:
            self._topics = wanted
            self.request_rejoin("subscription changed")
        self._step(now)

    def unsubscribe(self, *, now: float) -> None:
        """Stop being a member, and stay usable (the consumer's ``unsubscribe()``): what
        the member owns is revoked first (:class:`RevokePartitions`, not lost -- the
        application may still commit it), then a dynamic member sends LeaveGroup, and it
        waits out of any generation with no topics. A later :meth:`subscribe` joins again
        as a new member.

        Raises:
            IllegalStateError: the member is closed or failed.
        """
        self._check_open()
        self._topics = ()
        self._rejoin = False
        self._unsubscribing = True
        self._step(now)

    def update_partition_counts(self, counts: Mapping[str, int], *, now: float) -> None:
        """The partition counts metadata reports for the subscribed topics. The leader
        rejoins when one it assigned changes (new partitions must be assigned)."""
        fresh = {t: int(counts[t]) for t in self._topics if t in counts}
        changed = fresh != self._partitions
        self._partitions = fresh
        leader = self.leader_id is not None and self.leader_id == self.member_id
        if changed and leader and self.state in _IN_GENERATION:
            self.request_rejoin("the leader saw partition counts change")
        self._step(now)

    def update_topic_ids(self, names: Mapping[Any, str], *, now: float) -> None:
        """Not needed by the classic protocol (assignments name topics); the host's
        convenience, as for :class:`~kafkastate.core.consumer.group848.ConsumerGroupMember`."""
        del names
        self._step(now)

    def request_rejoin(self, reason: str) -> None:
        """Join the group again at the next opportunity."""
        if self.state in (MemberState.FAILED, MemberState.CLOSED):
            return
        self._rejoin = True
        self._reason = reason

    def commit_refused(self, generation: int, member_id: str, reason: str) -> None:
        """The coordinator refused a commit sent as ``(generation, member_id)`` with
        ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID: join again -- but only if the member is
        still in that generation and not rebalancing already (Java's
        ``generationUnchanged()``). A refusal of a commit sent under a generation or member
        id the member has since left, or one that arrives while it rejoins, says nothing
        about where it stands now: a rejoin asked for then outlived the rebalance under
        way and began one more as soon as the new assignment was applied (found by the
        simulator: a retried commit of an expired member id refused while the member
        joined again as a new one, seed 27 at 56fa3db)."""
        if (generation, member_id) != (self.generation, self.member_id):
            return
        if self.state is MemberState.STABLE or self.state is MemberState.ASSIGNING:
            self.request_rejoin(reason)

    def polled(self, *, now: float) -> None:
        """The application called poll: the ``max_poll_interval`` clock restarts; after a
        poll timeout left the group, this joins again."""
        self._last_poll = now
        if self.state is MemberState.UNJOINED and self._topics:
            self._rejoin = True
        self._step(now)

    def revocation_done(self, *, now: float) -> None:
        """The application finished with the :class:`RevokePartitions` it was given."""
        revoking = self._awaiting_revocation
        if revoking is None:
            raise IllegalStateError("revocation_done without a RevokePartitions pending")
        self._awaiting_revocation = None
        self._owned = tuple(tp for tp in self._owned if tp not in set(revoking.partitions))
        self._revocation_finished()
        self._step(now)

    def assignment_done(self, *, now: float) -> None:
        """The application applied the :class:`AssignPartitions` it was given."""
        assigning = self._awaiting_assignment
        if assigning is None:
            raise IllegalStateError("assignment_done without an AssignPartitions pending")
        self._awaiting_assignment = None
        self._owned = assigning.assigned
        if self.state is MemberState.ASSIGNING:
            self._to(MemberState.STABLE, what="assignment_done")
        self._step(now)

    def coordinator_found(self, *, now: float) -> None:
        """The host has a connection to the group coordinator again."""
        self.coordinator_wanted = False
        # (the session deadline stays: only an answer from the coordinator moves it)
        if self.state in _IN_GENERATION and "heartbeat" not in self._in_flight:
            self._next_heartbeat = now  # tell the coordinator at once
        self._step(now)

    def close(self, *, now: float) -> None:
        """Leave the group (dynamic members, or ``leave_group_on_close``) and stop. The
        owned partitions should have been revoked by the application first."""
        if self.state in _ENDED:
            return
        if self.member_id and self.config.leaves_on_close and not self.coordinator_wanted:
            self._send_leave("the consumer is being closed")
        self._to(MemberState.CLOSED, what="close")
        self._next_heartbeat = self._session_deadline = None
        self._rejoin = False

    # ---------------------------------------------------------------- IO

    def get_timer(self) -> float | None:
        """The earliest deadline for :meth:`handle_timer`, or None."""
        best = self._poll_deadline()
        state = self.state
        if state in _IN_GENERATION:
            # only in a generation: a heartbeat left armed while joining again is not due
            # (the parked JoinGroup keeps the session), and would wake the host in a loop
            best = earliest(earliest(best, self._next_heartbeat), self._session_deadline)
        elif state is MemberState.JOINING and self._retry_at > self._now:
            best = earliest(best, self._retry_at)
        return best

    def handle_timer(self, *, now: float) -> None:
        """Run what is due."""
        self._step(now)

    def handle_failure(self, kind: str, error: KafkaError, *, now: float) -> None:
        """A request of ``kind`` got no answer (timeout, connection lost...)."""
        self._in_flight.discard(kind)
        if self.state in _ENDED:
            return
        del error  # all of them mean the same here: ask the coordinator again
        self._coordinator_lost()
        if kind == "heartbeat":
            self._heartbeat_answered(now)
        elif kind in ("join", "sync") and self.state in (
            MemberState.JOINING,
            MemberState.SYNCING,
        ):
            self._to(MemberState.JOINING, what=f"{kind} failed")
            self._retry_at = now + self.config.retry_backoff
        self._step(now)

    def handle_response(self, kind: str, response: Any, *, now: float) -> None:
        """The coordinator's answer to a request of ``kind``."""
        self._in_flight.discard(kind)
        if self.state in _ENDED:
            return
        code = int(getattr(response, "error_code", 0))
        if kind == "join":
            self._on_join(response, code, now)
        elif kind == "sync":
            self._on_sync(response, code, now)
        elif kind == "heartbeat":
            self._on_heartbeat(code, now)
        self._step(now)

    # ----------------------------------------------------------- internals

    def _to(self, new: MemberState, *, what: str) -> None:
        self.state = transition(MEMBER_STATES, self.state, new, what=what)

    def _check_open(self) -> None:
        if self.state is MemberState.FAILED:
            raise IllegalStateError(f"the group member failed: {self.error}")
        if self.state is MemberState.CLOSED:
            raise IllegalStateError("the group member is closed")

    def _poll_deadline(self) -> float | None:
        # In every state where the member takes part in the group: it rejoins in the
        # background, so without this a member whose application stopped polling could
        # hold its partitions through a rebalance (found by the simulator).
        if self._last_poll is None or self.state not in _IN_GROUP:
            return None
        return self._last_poll + self.config.max_poll_interval

    def _step(self, now: float) -> None:
        self._now = max(self._now, now)
        if self.state in _ENDED:
            return
        if (
            self._unsubscribing
            and self._awaiting_revocation is None
            and self._awaiting_assignment is None
        ):
            if self._owned:
                self._revoke(self._owned, lost=False)  # revocation_done steps again
                return
            self._unsubscribing = False
            if self.member_id and not self.coordinator_wanted and self.config.leaves_on_close:
                self._send_leave("the consumer unsubscribed")
            self._reset_generation(lost=False, keep_member=False)
            if self.state is not MemberState.UNJOINED:
                self._to(MemberState.UNJOINED, what="unsubscribe")
        in_generation = self.state in _IN_GENERATION
        deadline = self._poll_deadline()
        if deadline is not None and now >= deadline:
            # The application stopped polling: leave, so the group moves on (Java). Its
            # partitions are lost to it; the next poll joins again.
            if self.member_id and not self.coordinator_wanted:
                self._send_leave("consumer poll timeout has expired")
            self._reset_generation(lost=True, keep_member=False)
            self._to(MemberState.UNJOINED, what="poll timeout")
            self._rejoin = False
            return
        if in_generation and self._session_deadline is not None and now >= self._session_deadline:
            # No heartbeat answered within the session timeout: the coordinator may remove
            # the member from now on and hand its partitions to others. As librdkafka (not
            # Java, which keeps them): they are lost now, before that can happen; find the
            # coordinator again and join as a new member (no LeaveGroup: it is unreachable).
            self._reset_generation(lost=True, keep_member=False)
            self._to(MemberState.UNJOINED, what="session timeout")
            self.request_rejoin("no heartbeat was answered within the session timeout")
            self._coordinator_lost()
            in_generation = False
        if in_generation and self._next_heartbeat is not None and now >= self._next_heartbeat:
            self._next_heartbeat = None  # re-armed when it is answered or the coordinator found
            if not self.coordinator_wanted:
                self._send_heartbeat(now)
        if self._rejoin and not self._topics:
            self._rejoin = False  # nothing to join for
        if (
            self._rejoin
            and self.state in (MemberState.STABLE, MemberState.UNJOINED)
            and self._awaiting_revocation is None  # one revocation at a time
        ):
            self._prepare(now)
        if (
            self.state is MemberState.PREPARING
            and self._awaiting_revocation is None
            and self._awaiting_assignment is None
        ):
            self._to(MemberState.JOINING, what="prepared")
        if (
            self.state is MemberState.JOINING
            and "join" not in self._in_flight
            and self._awaiting_revocation is None  # lost partitions are dropped first
            and not self.coordinator_wanted
            and not self.join_held
            and now >= self._retry_at
        ):
            self._send_join()

    def _prepare(self, now: float) -> None:
        """Before JoinGroup: revoke what the protocol says must go first."""
        del now
        self._rejoin = False
        self._to(MemberState.PREPARING, what="rejoin")
        if self.config.rebalance_protocol is RebalanceProtocol.EAGER:
            going = self._owned
        else:
            going = tuple(tp for tp in self._owned if tp[0] not in self._topics)
        if going:
            self._revoke(going, lost=False)

    def _revoke(self, partitions: Sequence[TopicPartition], *, lost: bool) -> None:
        event = RevokePartitions(partitions=tuple(sorted(partitions)), lost=lost)
        self._awaiting_revocation = event
        self._events.append(event)

    def _reset_generation(self, *, lost: bool, keep_member: bool) -> None:
        """Out of the generation: owned partitions are lost (or were revoked already)."""
        self.generation = -1
        self.leader_id = None
        if not keep_member:
            self.member_id = ""
        self._next_heartbeat = self._session_deadline = None
        if lost:
            self._lose_owned()

    def _coordinator_lost(self) -> None:
        self.coordinator_wanted = True

    def _fail(self, error: KafkaError) -> None:
        self._lose_owned()
        self._to(MemberState.FAILED, what=f"fatal error {type(error).__name__}")
        self.error = error
        self._next_heartbeat = self._session_deadline = None
        self._events.append(GroupFailed(error=error))

    # -- JoinGroup

    def _send_join(self) -> None:
        cfg = self.config
        subscription = Subscription(
            topics=self._topics,
            owned_partitions=self._owned
            if cfg.rebalance_protocol is RebalanceProtocol.COOPERATIVE
            else (),
            generation_id=self.generation,
            rack_id=cfg.client_rack,
        )
        protocols = []
        for assignor in cfg.assignors:
            user_data_of = getattr(assignor, "subscription_user_data", None)
            user_data = user_data_of(self._topics) if user_data_of is not None else None
            metadata = encode_subscription(attrs.evolve(subscription, user_data=user_data))
            protocols.append((assignor.name, metadata))
        member_id, reason = self.member_id, self._reason

        def factory(versions: ApiVersionTable) -> Any:
            cls = versions.request_type(ApiKey.JOIN_GROUP)
            proto_cls = nested_type(cls, "JoinGroupRequestProtocol")
            return build(
                cls,
                group_id=cfg.group_id,
                session_timeout=_ms(cfg.session_timeout),
                rebalance_timeout=_ms(cfg.join_timeout),
                member_id=member_id,
                group_instance_id=cfg.group_instance_id,
                protocol_type="consumer",
                protocols=tuple(build(proto_cls, name=n, metadata=m) for n, m in protocols),
                reason=reason or None,
            )

        timeout = max(cfg.request_timeout, cfg.join_timeout + _JOIN_TIMEOUT_LAPSE)
        self._out.append(OutgoingRequest(kind="join", factory=factory, timeout=timeout))
        self._in_flight.add("join")

    def _on_join(self, response: Any, code: int, now: float) -> None:
        if self.state is not MemberState.JOINING:
            return
        if code == _NONE:
            self.member_id = str(response.member_id)
            self.generation = int(response.generation_id)
            self.leader_id = str(response.leader)
            self.protocol_name = response.protocol_name
            self._to(MemberState.SYNCING, what="JoinGroup answered")
            leader = self.leader_id == self.member_id
            assignments: dict[str, bytes] = {}
            if leader and not getattr(response, "skip_assignment", False):
                try:
                    assignments = self._run_assignor(response)
                except KafkaError as exc:
                    self._fail(exc)
                    return
            self._send_sync(assignments, now)
            return
        self._retry_at = now + self.config.retry_backoff
        if code == _MEMBER_ID_REQUIRED:
            self.member_id = str(response.member_id)
            self._retry_at = now  # join again at once, with that id
        elif code == _UNKNOWN_MEMBER_ID:
            self._reset_generation(lost=True, keep_member=False)
        elif code == _ILLEGAL_GENERATION:
            self._reset_generation(lost=True, keep_member=True)
        elif code in COORDINATOR_LOST:
            self._coordinator_lost()
        elif code not in (_REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS):
            self._fail(error_for_code(code)(f"JoinGroup for group {self.config.group_id!r}"))

    def _run_assignor(self, response: Any) -> dict[str, bytes]:
        """The leader's job: decode every member's subscription, run the chosen assignor,
        encode the assignments."""
        name = response.protocol_name
        assignor = next((a for a in self.config.assignors if a.name == name), None)
        if assignor is None:
            raise error_for_code(23)(  # INCONSISTENT_GROUP_PROTOCOL
                f"the group chose assignor {name!r}, which this member does not have"
            )
        subscriptions: dict[str, Subscription] = {}
        for member in response.members:
            try:
                subscriptions[str(member.member_id)] = decode_subscription(
                    bytes(member.metadata), group_instance_id=member.group_instance_id
                )
            except RemoteProtocolError as exc:
                raise RemoteProtocolError(
                    f"member {member.member_id!r} sent a malformed subscription: {exc}"
                ) from exc
        wanted = {t for s in subscriptions.values() for t in s.topics}
        counts = {t: n for t, n in self._partitions.items() if t in wanted}
        result = assignor.assign(counts, subscriptions)
        return {member: encode_assignment(a) for member, a in result.items()}

    # -- SyncGroup

    def _send_sync(self, assignments: Mapping[str, bytes], now: float) -> None:
        self._sync_sent = now  # the coordinator restarts the session when it answers
        cfg = self.config
        generation, member_id, protocol = self.generation, self.member_id, self.protocol_name

        def factory(versions: ApiVersionTable) -> Any:
            cls = versions.request_type(ApiKey.SYNC_GROUP)
            entry = nested_type(cls, "SyncGroupRequestAssignment")
            return build(
                cls,
                group_id=cfg.group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=cfg.group_instance_id,
                protocol_type="consumer",
                protocol_name=protocol,
                assignments=tuple(
                    build(entry, member_id=m, assignment=a) for m, a in assignments.items()
                ),
            )

        self._out.append(OutgoingRequest(kind="sync", factory=factory, timeout=cfg.request_timeout))
        self._in_flight.add("sync")

    def _on_sync(self, response: Any, code: int, now: float) -> None:
        if self.state is not MemberState.SYNCING:
            return
        if code == _NONE:
            try:
                assignment = decode_assignment(bytes(response.assignment or b""))
            except RemoteProtocolError as exc:
                self._fail(exc)
                return
            self._start_heartbeats(now)
            self._apply(assignment)
            return
        self._to(MemberState.JOINING, what="SyncGroup refused")
        self._retry_at = now + self.config.retry_backoff
        if code == _UNKNOWN_MEMBER_ID:
            self._reset_generation(lost=True, keep_member=False)
        elif code == _ILLEGAL_GENERATION:
            self._reset_generation(lost=True, keep_member=True)
        elif code in COORDINATOR_LOST:
            self._coordinator_lost()
        elif code != _REBALANCE_IN_PROGRESS:
            self._fail(error_for_code(code)(f"SyncGroup for group {self.config.group_id!r}"))

    def _apply(self, assignment: Assignment) -> None:
        """The assignment arrived: revoke what is gone (cooperative), then assign."""
        assigned = tuple(sorted(tp for tp in assignment.partitions if tp[0] in self._topics))
        for assignor in self.config.assignors:
            if assignor.name == self.protocol_name:
                on_assignment = getattr(assignor, "on_assignment", None)
                if on_assignment is not None:
                    on_assignment(assignment, self.generation)
        self._to(MemberState.ASSIGNING, what="SyncGroup answered")
        gone = tuple(tp for tp in self._owned if tp not in set(assigned))
        if gone:
            self._revoke(gone, lost=False)
            # KIP-429: what was revoked goes to another member in the next round
            self.request_rejoin("partitions were revoked")
        added = tuple(tp for tp in assigned if tp not in set(self._owned))
        event = AssignPartitions(assigned=assigned, added=added, generation=self.generation)
        self._awaiting_assignment = event
        self._events.append(event)

    # -- Heartbeat

    def _start_heartbeats(self, now: float) -> None:
        self._next_heartbeat = now + self.config.heartbeat_interval
        self._session_deadline = self._sync_sent + self.config.session_timeout
        if self._last_poll is None:
            self._last_poll = now

    def _heartbeat_answered(self, now: float) -> None:
        """The next Heartbeat goes ``heartbeat_interval`` after the last one was sent."""
        if self.state in _IN_GENERATION:
            self._next_heartbeat = max(now, self._heartbeat_sent + self.config.heartbeat_interval)

    def _session_refreshed(self) -> None:
        """The coordinator answered the last Heartbeat sent: it restarted the session no
        earlier than that was sent. (Never moved back: a late answer to an older one.)"""
        refreshed = self._heartbeat_sent + self.config.session_timeout
        current = self._session_deadline
        self._session_deadline = refreshed if current is None else max(current, refreshed)

    _heartbeat_sent = 0.0
    _sync_sent = 0.0

    def _send_heartbeat(self, now: float) -> None:
        self._heartbeat_sent = now
        cfg = self.config
        generation, member_id = self.generation, self.member_id

        def factory(versions: ApiVersionTable) -> Any:
            return build(
                versions.request_type(ApiKey.HEARTBEAT),
                group_id=cfg.group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=cfg.group_instance_id,
            )

        self._out.append(
            OutgoingRequest(kind="heartbeat", factory=factory, timeout=cfg.request_timeout)
        )
        self._in_flight.add("heartbeat")

    def _on_heartbeat(self, code: int, now: float) -> None:
        if self.state not in (MemberState.STABLE, MemberState.ASSIGNING):
            return
        self._heartbeat_answered(now)
        if code == _NONE:
            self._session_refreshed()
        elif code == _REBALANCE_IN_PROGRESS:
            self._session_refreshed()
            self.request_rejoin("the group is rebalancing")
        elif code == _UNKNOWN_MEMBER_ID:
            self._reset_generation(lost=True, keep_member=False)
            self._to(MemberState.UNJOINED, what="Heartbeat: unknown member")
            self.request_rejoin("the coordinator no longer knows this member")
        elif code == _ILLEGAL_GENERATION:
            self._reset_generation(lost=True, keep_member=True)
            self._to(MemberState.UNJOINED, what="Heartbeat: illegal generation")
            self.request_rejoin("the generation moved on")
        elif code in COORDINATOR_LOST:
            self._coordinator_lost()
        elif code != COORDINATOR_LOAD_IN_PROGRESS:  # FENCED_INSTANCE_ID, authorization...
            self._fail(error_for_code(code)(f"Heartbeat for group {self.config.group_id!r}"))

    # -- LeaveGroup

    def _send_leave(self, reason: str) -> None:
        cfg = self.config
        member_id = self.member_id

        def factory(versions: ApiVersionTable) -> Any:
            cls = versions.request_type(ApiKey.LEAVE_GROUP)
            try:
                identity = nested_type(cls, "MemberIdentity")
            except (KeyError, LookupError, AttributeError, TypeError):
                return build(cls, group_id=cfg.group_id, member_id=member_id)  # v0-v2
            member = build(
                identity,
                member_id=member_id,
                group_instance_id=cfg.group_instance_id,
                reason=reason,
            )
            return build(cls, group_id=cfg.group_id, members=(member,))

        self._out.append(
            OutgoingRequest(kind="leave", factory=factory, timeout=cfg.request_timeout)
        )


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=round(seconds * 1000))
