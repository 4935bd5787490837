"""ConsumerMachine: every decision a consumer API object makes, once, for every runtime.

Theory of operation
-------------------
:class:`~kafkastate.core.consumer.fetcher.FetcherMachine` fetches, keeps positions and runs
the group member. :class:`ConsumerMachine` wraps it and owns the policy that the
application sees, so that aiokafka's ``AIOKafkaConsumer``, trio/anyio's ``open_consumer``,
kafka-python's blocking ``KafkaConsumer`` and the simulator behave alike:

* **Hand-out.** :meth:`ConsumerMachine.poll` hands out runs of records (``getmany`` /
  ``poll``); :meth:`ConsumerMachine.take_one` one record at a time (``getone``, iteration).
  Records pulled from the fetcher for one-at-a-time reading wait in a hand-out buffer: they
  are not consumed yet, so :meth:`position` and :meth:`consumed` (what a commit stores)
  count them as unread. Both calls honour paused partitions and a partition filter.
* **Commits.** :meth:`commit` checks its argument (nothing is queued for bad input), and by
  default stores, per assigned partition, the offset after the last record handed out.
* **Auto-commit.** With ``auto_commit`` the machine commits :meth:`consumed` every
  ``auto_commit_interval`` on its own timer (:meth:`get_timer`), before partitions are
  revoked, and when the application closes the consumer (:meth:`final_commit`).
* **Rebalances.** The group's revocations and assignments are sequenced one at a time:
  revoke -> auto-commit of the revoked partitions (waits for its answer; a failure is
  reported and the rebalance goes on, as in Java) -> the listener's
  ``on_partitions_revoked`` (``on_partitions_lost`` for lost partitions, falling back to
  the revoked callback) -> :meth:`FetcherMachine.revocation_done`; assign -> the
  listener's ``on_partitions_assigned`` -> :meth:`FetcherMachine.assignment_done`. The
  listener is user code: the machine emits :class:`ListenerCallRequested`, the adapter runs
  the callback (awaiting it where the runtime can) and reports back with
  :meth:`listener_done`. A callback that raised is raised once, as
  :class:`~kafkastate.errors.RebalanceListenerError`, by the next read.
* **Leaving.** :meth:`leave` runs the revoke callback for what the member owns, then sends
  the group's LeaveGroup; :class:`~kafkastate.core.consumer.fetcher.GroupLeft` follows.

The machine's IO surface is the fetcher's (``receive_data``, ``handle_timer``,
``data_to_send``, ``next_event``, ``get_timer``...), so the adapters' drivers and the
simulator drive it as they drive any machine.

States (one table, :data:`CONSUMER_STATES`; its commands are :data:`ALLOWED`): ``OPEN``
takes every command; ``LEAVING`` (after :meth:`leave`) still lets the application read and
commit what it has; ``CLOSED`` refuses everything with
:class:`~kafkastate.errors.IllegalStateError`.
"""

from __future__ import annotations

import enum
import logging
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from kafkastate.core import report
from kafkastate.core.client import (
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    TokenRequested,
)
from kafkastate.core.consumer.fetcher import (
    CommittedOffsets,
    FetcherEvent,
    FetcherMachine,
    GroupFailed,
    GroupLeft,
    OffsetsCommitted,
    OffsetsListed,
    PartitionsAssigned,
    PartitionsRevoked,
    PositionsResolved,
    RecordsFetched,
)
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    ConsumerStoppedError,
    IllegalOperation,
    IllegalStateError,
    KafkaArgumentTypeError,
    KafkaConfigurationError,
    KafkaError,
    RebalanceListenerError,
)
from kafkastate.structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata

__all__ = [
    "ALLOWED",
    "CONSUMER_STATES",
    "AssignmentSettled",
    "AutoCommitted",
    "ConsumerEvent",
    "ConsumerMachine",
    "ConsumerState",
    "ListenerCallRequested",
    "check_listener",
    "check_subscription",
    "compile_pattern",
    "matching_topics",
]

TopicPartition = tuple[str, int]
Run = tuple[TopicPartition, list[ConsumerRecord], int]
"""``(partition, records, leader_epoch)``: records of one partition, in offset order, as
the application gets them (before its deserializers run)."""

_LISTENER_METHODS: Final = ("on_partitions_revoked", "on_partitions_assigned")

log = logging.getLogger("kafkastate.consumer")
_POLL_NOTE_EVERY: Final = 1.0  # seconds between max_poll_interval notes from the buffer


class ConsumerState(enum.Enum):
    """Where the consumer stands (see :data:`ALLOWED`)."""

    OPEN = "open"
    """Reading, committing, rebalancing."""
    LEAVING = "leaving"
    """:meth:`ConsumerMachine.leave` was called: the member revokes and leaves."""
    CLOSED = "closed"
    """:meth:`ConsumerMachine.close` was called: nothing more."""


_READ: Final = frozenset({"read", "commit", "query"})
_CLOSED: Final = ConsumerState.CLOSED  # (a global: ``Enum.MEMBER`` is slow on Python 3.11)
CONSUMER_STATES: Final = register(
    StateTable(
        machine="ConsumerMachine",
        states=ConsumerState,
        initial=ConsumerState.OPEN,
        transitions={
            ConsumerState.OPEN: {ConsumerState.LEAVING, ConsumerState.CLOSED},
            ConsumerState.LEAVING: {ConsumerState.CLOSED},
            ConsumerState.CLOSED: set(),
        },
        commands={
            ConsumerState.OPEN: _READ | {"assign", "subscribe", "seek", "leave", "close"},
            ConsumerState.LEAVING: _READ | {"seek", "leave", "close"},
            ConsumerState.CLOSED: {"close"},
        },
    )
)
"""The state table (STYLE §6): :meth:`ConsumerMachine.leave` moves OPEN to LEAVING,
:meth:`ConsumerMachine.close` any state to CLOSED; and which kind of command each state
allows (:data:`ALLOWED`)."""

ALLOWED: Final[Mapping[ConsumerState, frozenset[str]]] = CONSUMER_STATES.commands
"""Which kind of command each state allows. ``read``: poll, take_one,
position; ``commit``: commit; ``query``: offset and metadata queries; ``assign``: assign,
unsubscribe; ``subscribe``: subscribe; ``seek``: seek*, pause, resume; ``leave``: leave;
``close``: close (always allowed, and idempotent)."""


# ------------------------------------------------------------------------------ events


@attrs.frozen(kw_only=True)
class ListenerCallRequested:
    """Run the rebalance listener's ``method`` with ``partitions`` (a set of
    :class:`~kafkastate.structs.TopicPartition`), then call
    :meth:`ConsumerMachine.listener_done` with ``call_id`` and what it raised."""

    call_id: int
    """Names this call in :meth:`ConsumerMachine.listener_done`."""
    method: str
    """``on_partitions_revoked``, ``on_partitions_lost`` or ``on_partitions_assigned``
    (``on_partitions_revoked`` where the listener has no ``on_partitions_lost``)."""
    callback: str
    """What the group did: ``on_partitions_revoked``, ``on_partitions_lost`` or
    ``on_partitions_assigned`` (differs from ``method`` for the fallback)."""
    partitions: tuple[TopicPartition, ...]
    """The partitions, sorted."""


@attrs.frozen(kw_only=True)
class AutoCommitted:
    """An auto-commit the machine made itself (on its timer, or before a revocation)
    was answered."""

    offsets: Mapping[TopicPartition, int]
    """What it committed."""
    error: KafkaError | None
    """Why it failed, or None. The next period tries again; a revocation goes on."""
    before_revoke: bool
    """Made for partitions about to be revoked."""


@attrs.frozen(kw_only=True)
class AssignmentSettled:
    """The subscription has its assignment (:attr:`ConsumerMachine.assignment_settled`
    turned True): the group's first assignment since :meth:`ConsumerMachine.subscribe`
    was handed out, or without a group the metadata named every subscribed topic."""

    assignment: tuple[TopicPartition, ...]
    """The partitions assigned then."""


ConsumerEvent = (
    ConnectRequested
    | CloseRequested
    | TokenRequested
    | MetadataUpdated
    | RecordsFetched
    | PositionsResolved
    | OffsetsListed
    | CommittedOffsets
    | OffsetsCommitted
    | GroupFailed
    | GroupLeft
    | ListenerCallRequested
    | AutoCommitted
    | AssignmentSettled
    | report.StatisticsReported
)


# ---------------------------------------------------------------------- subscriptions


def check_listener(listener: Any) -> None:
    """Refuse a rebalance listener without ``on_partitions_revoked`` and
    ``on_partitions_assigned`` (``on_partitions_lost`` is optional: the revoked callback
    stands in for it, as in Java).

    Raises:
        KafkaArgumentTypeError: naming what is missing (a TypeError, as aiokafka raises).
    """
    if listener is None:
        return
    missing = [m for m in _LISTENER_METHODS if not callable(getattr(listener, m, None))]
    if missing:
        raise KafkaArgumentTypeError(
            f"listener {listener!r} lacks {', '.join(missing)}: subclass "
            "kafkastate.abc.ConsumerRebalanceListener"
        )


def compile_pattern(pattern: Any) -> re.Pattern[str]:
    """A subscription pattern (a str or a compiled regex).

    Raises:
        KafkaConfigurationError: not a valid regular expression.
    """
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str) or not pattern:
        raise KafkaConfigurationError(f"pattern must be a regular expression, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise KafkaConfigurationError(f"pattern {pattern!r} is not a valid regex: {exc}") from exc


def check_subscription(
    topics: Any, pattern: Any, listener: Any, *, group: bool
) -> re.Pattern[str] | None:
    """Check ``subscribe(topics, pattern, listener)`` arguments.

    Returns:
        The compiled pattern, or None for a topic list.

    Raises:
        KafkaArgumentTypeError: (a TypeError, as aiokafka raises) bad topics, both or
            neither topics and a pattern, a listener without the callbacks.
        KafkaConfigurationError: (a ValueError) a bad pattern, or a listener without group
            membership.
    """
    compiled: re.Pattern[str] | None = None
    if pattern is not None:
        if topics:
            raise KafkaArgumentTypeError("subscribe to topics or to a pattern, not both")
        compiled = compile_pattern(pattern)
    elif isinstance(topics, str) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise KafkaArgumentTypeError(f"topics must be a list of topic names, got {topics!r}")
    check_listener(listener)
    if listener is not None and not group:
        raise KafkaConfigurationError("a rebalance listener needs a group_id")
    return compiled


def matching_topics(
    cluster: ClusterMetadata, pattern: re.Pattern[str], *, exclude_internal: bool = True
) -> list[str]:
    """The cluster's topics whose name matches ``pattern`` from its start (``re.match``,
    as aiokafka and kafka-python match), sorted; internal topics left out unless
    ``exclude_internal`` is false."""
    return sorted(
        name
        for name, topic in cluster.topics.items()
        if topic.error_code == 0
        and pattern.match(name)
        and not (exclude_internal and topic.is_internal)
    )


def _commit_value(tp: Any, value: Any) -> int | tuple[int, str]:
    """One entry of a ``commit(offsets)`` mapping, checked.

    Raises:
        ValueError: (a KafkaConfigurationError) naming the partition.
    """
    if isinstance(value, OffsetAndMetadata):
        offset, meta = value.offset, value.metadata
    elif isinstance(value, tuple):
        if len(value) != 2:
            raise KafkaConfigurationError(
                f"commit offset for {tp} must be an offset or (offset, metadata), got {value!r}"
            )
        offset, meta = value
    else:
        offset, meta = value, ""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise KafkaConfigurationError(f"commit offset for {tp} must be an int >= 0, got {offset!r}")
    if meta is None:
        meta = ""
    if not isinstance(meta, str):
        raise KafkaConfigurationError(f"commit metadata for {tp} must be a str, got {meta!r}")
    return offset if not meta else (offset, meta)


def _partition(tp: Any) -> TopicPartition:
    if (
        not isinstance(tp, tuple | list)
        or len(tp) != 2
        or not isinstance(tp[0], str)
        or isinstance(tp[1], bool)
        or not isinstance(tp[1], int)
    ):
        raise KafkaConfigurationError(f"a partition must be a (topic, partition) pair, got {tp!r}")
    return (tp[0], tp[1])


# ----------------------------------------------------------------------- the machine


class ConsumerMachine:
    """The consumer's policy over a :class:`FetcherMachine` (see the module docstring).

    Args:
        fetcher: the fetcher (with its group member, if any).
        max_poll_records: the default record limit of :meth:`poll` and of what
            :meth:`take_one` pulls at a time.
        auto_commit: commit on a timer, before revocations and on close (only with a
            ``group_id``; ignored without, as aiokafka and kafka-python do).
        auto_commit_interval: seconds between auto-commits (``auto.commit.interval.ms``).
        exclude_internal_topics: leave internal topics out of pattern subscriptions.
    """

    def __init__(
        self,
        fetcher: FetcherMachine,
        *,
        max_poll_records: int = 500,
        auto_commit: bool = False,
        auto_commit_interval: float = 5.0,
        exclude_internal_topics: bool = True,
    ) -> None:
        self.fetcher: Final = fetcher
        """The fetcher machine underneath (the IO surface is its)."""
        self.state = ConsumerState.OPEN
        """Where the consumer stands."""
        self.max_poll_records: Final = max_poll_records
        self.auto_commit: Final = auto_commit and fetcher.config.group_id is not None
        """Auto-commit is on (it needs a ``group_id``)."""
        self.listener: Any = None
        """The rebalance listener of the subscription (user code: the adapter runs it)."""
        self._interval = auto_commit_interval
        self._auto_commit_at: float | None = None  # armed at the first time seen
        self._exclude_internal = exclude_internal_topics
        self._subscribed: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._paused: set[TopicPartition] = set()
        # Records pulled for one-at-a-time reading: [tp, records, epoch, next index].
        self._held: deque[list[Any]] = deque()
        self._polled_at = -1e300
        # The rebalance in progress: group events wait here, one at a time.
        self._group_events: deque[PartitionsRevoked | PartitionsAssigned] = deque()
        self._settled = True  # see assignment_settled
        # An assignment was applied before the metadata knew every subscribed topic:
        # settled once it does, if no rebalance followed (see _settle_on_metadata).
        self._settle_pending = False
        self._manual = False  # assign() was called (until unsubscribe)
        # The head group event's progress: None (not started), "commit" (the auto-commit
        # before a revocation is in flight), "committed", "listener" (a call is out).
        self._step: str | None = None
        self._revoke_commit: int | None = None
        self._call_id = 0
        self._calls: dict[int, str] = {}  # call id -> callback, while the adapter runs it
        self._leaving_call: int | None = None
        self._listener_error: RebalanceListenerError | None = None
        self._auto_commits: dict[int, bool] = {}  # query id -> before a revocation
        self._events: deque[ConsumerEvent] = deque()
        self.pulls = 0
        """How often :meth:`take_one` went to the fetcher and the fetcher stepped (a
        drained partition's Fetch, a rejoin...: the adapter's cue to write)."""
        self._unnoted = False  # next_record handed out records the member has not heard of
        self.turn_due = False
        """Set when :meth:`take_one` went to the fetcher: before its next record an
        event-loop runtime lets its other tasks run once (:meth:`next_record` answers None
        until the adapter clears this), so a loop over buffered records yields at least
        once per ``max_poll_records`` records and the Fetch for the drained partitions goes
        out while the application reads on."""
        self._pulling = False
        self._now = 0.0

    @property
    def client(self) -> Any:
        """The fetcher's :class:`~kafkastate.core.client.Client` (metadata, connections)."""
        return self.fetcher.client

    @property
    def config(self) -> Any:
        """The fetcher's :class:`~kafkastate.core.consumer.fetcher.FetcherConfig`."""
        return self.fetcher.config

    @property
    def member(self) -> Any:
        """The group member machine (classic or KIP-848), or None."""
        return self.fetcher.member

    @property
    def assignment_settled(self) -> bool:
        """Whether the assignment is what the subscription asked for, at least once since
        :meth:`subscribe`: the group's first assignment was handed out (the listener ran),
        or -- without a group -- the metadata named every subscribed topic's partitions
        (for a pattern: the first metadata after subscribing). Always True for a manual
        assignment or no subscription. aiokafka's ``start()`` waits for this."""
        return self._settled

    @property
    def group_error(self) -> KafkaError | None:
        """Why the group member failed for good (reads raise it), or None."""
        member = self.fetcher.member
        if member is not None and not member.active:
            error: KafkaError | None = member.error
            return error
        return None

    @property
    def rebalancing(self) -> bool:
        """A group event (revocation, assignment) or a listener call is in progress."""
        return bool(self._group_events or self._calls)

    # ------------------------------------------------------------------ state

    def ensure_open(self, *, advice: str = "") -> None:
        """Refuse a call on a closed consumer (an adapter asks before its own checks).

        Args:
            advice: appended to the message (how the face is meant to be used).

        Raises:
            ConsumerStoppedError: :meth:`close` was called (an IllegalStateError, the
                type aiokafka raises for a stopped consumer, kafka-python for a closed one).
        """
        if self.state is _CLOSED:
            raise ConsumerStoppedError(f"the consumer is closed{advice}")

    def _allow(self, kind: str) -> None:
        if kind not in ALLOWED[self.state]:
            self.ensure_open()
            raise IllegalStateError(f"the consumer is {self.state.value}: {kind} is not allowed")

    def _time(self, now: float) -> None:
        self._now = now
        if self.auto_commit and self._auto_commit_at is None:
            self._auto_commit_at = now + self._interval
        if self._unnoted and now - self._polled_at >= _POLL_NOTE_EVERY:
            # next_record takes no time: its hand-outs count as a poll at the first input
            # since (at the latest the member's own timers: heartbeat, poll deadline)
            self._unnoted = False
            self._note_poll(now)

    # ------------------------------------------------------------- assignment

    def assignment(self) -> tuple[TopicPartition, ...]:
        """The partitions being read."""
        return self.fetcher.assignment()

    def subscription(self) -> tuple[str, ...]:
        """The subscribed topics (empty with a manual assignment)."""
        return self._subscribed

    def assign(self, partitions: Iterable[Any], *, now: float) -> None:
        """Read exactly these partitions, replacing any assignment or subscription.

        Raises:
            KafkaConfigurationError: a malformed partition.
            IllegalStateError: the consumer is subscribed (call :meth:`unsubscribe` first,
                as aiokafka and kafka-python require), or closed.
        """
        self._allow("assign")
        if self._subscribed or self._pattern is not None:
            raise IllegalStateError(
                "assign() while subscribed: manual assignment and subscription are mutually "
                "exclusive; call unsubscribe() first"
            )
        self._time(now)
        tps = [_partition(tp) for tp in partitions]
        self._manual = True
        self._subscribed = ()
        self._pattern = None
        self._settled = True
        self._held.clear()
        self._paused.clear()
        log.info("assigned %s", ", ".join(f"{t}-{p}" for t, p in tps) or "nothing")
        self.fetcher.assign(tps, now=now)

    def subscribe(
        self,
        topics: Sequence[str] = (),
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
        now: float,
    ) -> None:
        """Subscribe to ``topics``, or to every topic whose name matches ``pattern`` from
        its start. With a ``group_id`` the member joins the group, which assigns the
        partitions; without one every partition of the topics is read (and partitions added
        later join).

        Raises:
            KafkaConfigurationError: empty or malformed topics, both topics and a pattern,
                a bad pattern or listener, or a listener without a ``group_id``.
            IllegalStateError: partitions were assigned with :meth:`assign` (call
                :meth:`unsubscribe` first, as aiokafka and kafka-python require), or the
                consumer is closed.
        """
        self._allow("subscribe")
        if self._manual:
            raise IllegalStateError(
                "subscribe() after assign(): manual assignment and subscription are mutually "
                "exclusive; call unsubscribe() first"
            )
        compiled = check_subscription(
            topics, pattern, listener, group=self.fetcher.member is not None
        )
        self._time(now)
        fetcher = self.fetcher
        self.listener = listener
        self._pattern = compiled
        metadata = fetcher.client.metadata
        subscribed: tuple[str, ...] = ()
        if compiled is None:
            subscribed = tuple(dict.fromkeys(topics))
            if fetcher.member is not None:
                fetcher.subscribe(subscribed, now=now)
            else:
                metadata.add_topics(subscribed)
        else:
            metadata.set_topics(None)  # every topic: the pattern picks
        fetcher.client.request_metadata_update()
        self._subscribed = subscribed
        self._settled = False
        self._settle_pending = False
        log.info(
            "subscribed to %s",
            ", ".join(subscribed) if compiled is None else f"pattern {compiled.pattern!r}",
        )
        self._follow_subscription(now)

    def unsubscribe(self, *, now: float) -> None:
        """Drop the subscription and the assignment. A group member leaves the group as
        Java's ``unsubscribe()`` does: what it owns is revoked first (auto-commit, then
        the listener's ``on_partitions_revoked``), then LeaveGroup; a later
        :meth:`subscribe` joins again as a new member.

        Raises:
            IllegalStateError: the consumer is closed.
        """
        self._allow("assign")
        member = self.fetcher.member
        leaving = member is not None and bool(member.subscription)
        if leaving:
            self.fetcher.unsubscribe_group(now=now)
        self._time(now)
        self._manual = False
        self._subscribed = ()
        self._pattern = None
        self._settled = True
        self._held.clear()
        if not leaving:  # (a member's revocation -- auto-commit, listener -- empties it)
            self._paused.clear()
            self.fetcher.assign((), now=now)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group metadata, for a transactional producer's
        ``send_offsets_to_transaction``: generation (member epoch with KIP-848), member id
        and instance id while in a generation, so the coordinator fences a zombie's offsets
        (KIP-447); the group id alone otherwise.

        Raises:
            IllegalStateError: no ``group_id``.
        """
        group_id = self.fetcher.config.group_id
        if group_id is None:
            raise IllegalStateError("group_metadata() needs a group_id")
        member = self.fetcher.member
        if member is None or member.generation < 0:
            return ConsumerGroupMetadata(group_id)
        generation, member_id, instance = member.commit_identity()
        return ConsumerGroupMetadata(group_id, generation, member_id, instance)

    def interesting_topics(self) -> list[str] | None:
        """The topics whose metadata the consumer follows (None: every topic, for a
        pattern)."""
        if self._pattern is not None:
            return None
        topics = dict.fromkeys(self._subscribed)
        topics.update(dict.fromkeys(t for t, _ in self.fetcher.assignment()))
        return list(topics)

    def want_metadata(self, topics: Sequence[str] | None, *, now: float) -> ClusterMetadata:
        """Ask for metadata of ``topics`` as well (None: every topic) at once; put the
        interest back with :meth:`metadata_done`.

        Returns:
            The metadata known now: wait until the client's cluster is another object.
        """
        self._allow("query")
        self._time(now)
        client = self.fetcher.client
        if topics is None:
            client.metadata.set_topics(None)
        else:
            client.metadata.add_topics(list(topics))
        client.request_metadata_update()
        return client.cluster

    def metadata_done(self) -> None:
        """After :meth:`want_metadata`: follow only the consumer's own topics again."""
        self.fetcher.client.metadata.set_topics(self.interesting_topics())

    # ------------------------------------------------------------------ reading

    def check_partition(self, partition: Any) -> TopicPartition:
        """``partition`` as a pair, which must be assigned.

        Raises:
            IllegalStateError: not assigned.
            KafkaConfigurationError: malformed.
        """
        tp = _partition(partition)
        if tp not in self.fetcher.assignment():
            raise IllegalStateError(f"partition {tp[0]}-{tp[1]} is not assigned")
        return tp

    def _targets(self, partitions: Sequence[Any]) -> list[TopicPartition]:
        if not partitions:
            return list(self.fetcher.assignment())
        return [self.check_partition(tp) for tp in partitions]

    def raise_pending_error(self) -> None:
        """Raise a rebalance listener's failure once (reads call this first).

        Raises:
            RebalanceListenerError: the listener raised since the last read.
        """
        error = self._listener_error
        if error is not None:
            self._listener_error = None
            raise error

    def poll(
        self, max_records: int | None = None, partitions: Sequence[Any] = (), *, now: float
    ) -> list[Run]:
        """Hand out up to ``max_records`` records (default ``max_poll_records``), of
        ``partitions`` only if given: first those waiting in the hand-out buffer, else
        fresh ones from the fetcher (partitions take turns).

        Returns:
            Runs of records; empty if there are none yet (wait for
            :class:`~kafkastate.core.consumer.fetcher.RecordsFetched`).

        Raises:
            KafkaConfigurationError: ``max_records`` below 1.
            RebalanceListenerError: the listener raised (once).
            KafkaError: a partition or the group member failed.
        """
        self._allow("read")
        limit = self.max_poll_records if max_records is None else max_records
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise KafkaConfigurationError(f"max_records must be an int >= 1, got {limit!r}")
        self.raise_pending_error()
        self._time(now)
        if self._held:
            out = self._from_held(limit, partitions, now)
            if out:
                return out
        return self._from_fetcher(limit, partitions, now)

    def next_record(self) -> ConsumerRecord | None:
        """The per-record path of getone and iteration: the head of the hand-out buffer,
        when one is held, nothing filters it (no paused partition, no listener error to
        raise) and no turn is due (:attr:`turn_due`). Its position moves past it now.

        It takes no time: the group member hears of these hand-outs (``max_poll_interval``)
        at the machine's next input with a time -- the next :meth:`take_one` (once per
        batch), any command, received bytes, or its own timers (heartbeat, poll deadline)
        -- rather than at once; as before, at most once a second.

        Returns:
            The record, or None: call :meth:`take_one` (which pulls from the fetcher and
            raises what there is to raise) after the turn, if one is due.
        """
        held = self._held
        if not held or self.turn_due or self._paused or self._listener_error is not None:
            return None
        # (A record is held only while the consumer is open or leaving -- close() and
        # revocations drop them -- so reading is allowed, and the auto-commit timer was
        # armed when it was pulled.)
        entry = held[0]
        records = entry[1]
        index = entry[3]
        if index + 1 == len(records):
            held.popleft()
        else:
            entry[3] = index + 1
        self._unnoted = True
        record: ConsumerRecord = records[index]
        return record

    def turn_taken(self) -> None:
        """The adapter let its other tasks run (or is about to wait): :attr:`turn_due`
        is cleared."""
        self.turn_due = False

    def take_one(self, partitions: Sequence[Any] = (), *, now: float) -> Run | None:
        """The next record (of ``partitions`` if given) as a one-record run, or None if
        none is fetched yet. Its position moves past it now. (It does not look at
        :attr:`turn_due`: the adapter takes its turn first.)

        Raises:
            RebalanceListenerError: the listener raised (once).
            KafkaError: a partition or the group member failed.
        """
        held = self._held
        if held and not partitions and not self._paused and self._listener_error is None:
            entry = held[0]  # (as in next_record)
            tp, records, epoch, index = entry
            if index + 1 == len(records):
                held.popleft()
            else:
                entry[3] = index + 1
            self._note_poll(now)
            return (tp, [records[index]], epoch)
        return self._take_one(partitions, now)

    def _take_one(self, partitions: Sequence[Any], now: float) -> Run | None:
        """:meth:`take_one` when the hand-out buffer is empty or something filters it."""
        self._allow("read")
        self.raise_pending_error()
        self._time(now)
        held = self._held
        if not held or not self._take_from_held_possible(partitions):
            steps = self.fetcher.steps
            runs = self._from_fetcher(self.max_poll_records, partitions, now)
            held.extend([tp, records, epoch, 0] for tp, records, epoch in runs)
            if self.fetcher.steps != steps:
                self.pulls += 1
            self.turn_due = True
        paused = self._paused
        wanted = None if not partitions else {_partition(tp) for tp in partitions}
        for i, entry in enumerate(held):
            tp = entry[0]
            if tp in paused or (wanted is not None and tp not in wanted):
                continue
            records, index = entry[1], entry[3]
            record = records[index]
            if index + 1 == len(records):
                del held[i]
            else:
                entry[3] = index + 1
            self._note_poll(now)
            return (tp, [record], entry[2])
        return None

    def give_back(self, runs: Sequence[Run]) -> None:
        """Records the adapter could not deliver (a user deserializer raised on the first
        of them): they go back to the front of the hand-out buffer, in order, so nothing
        is lost -- positions and commits count them as unread, and the next read hands
        them out again (as Java's consumer stops at a record it cannot deserialize until
        the application seeks past it). Records of partitions no longer assigned are
        dropped.
        """
        self._allow("read")
        assigned = set(self.fetcher.assignment())
        for tp, records, epoch in reversed(runs):
            if records and tp in assigned:
                self._held.appendleft([tp, list(records), epoch, 0])

    def _take_from_held_possible(self, partitions: Sequence[Any]) -> bool:
        if not partitions and not self._paused:
            return True
        wanted = {_partition(tp) for tp in partitions} if partitions else None
        return any(
            e[0] not in self._paused and (wanted is None or e[0] in wanted) for e in self._held
        )

    def _from_held(self, limit: int, partitions: Sequence[Any], now: float) -> list[Run]:
        wanted = None if not partitions else {_partition(tp) for tp in partitions}
        paused = self._paused
        out: list[Run] = []
        keep: deque[list[Any]] = deque()
        for entry in self._held:
            tp, records, epoch, index = entry
            if limit <= 0 or tp in paused or (wanted is not None and tp not in wanted):
                keep.append(entry)
                continue
            taken = records[index : index + limit]
            limit -= len(taken)
            out.append((tp, taken, epoch))
            if index + len(taken) < len(records):
                entry[3] = index + len(taken)
                keep.append(entry)
        self._held = keep
        if out:
            self._note_poll(now)
        return out

    def _from_fetcher(self, limit: int, partitions: Sequence[Any], now: float) -> list[Run]:
        fetcher = self.fetcher
        if partitions:
            wanted = {_partition(tp) for tp in partitions}
            others = [tp for tp in fetcher.assignment() if tp not in wanted]
            fetcher.pause(others)
            try:
                runs = fetcher.poll(limit, now=now)
            finally:
                fetcher.resume([tp for tp in others if tp not in self._paused], now=now)
        else:
            runs = fetcher.poll(limit, now=now)
        return runs

    def _note_poll(self, now: float) -> None:
        """Records handed out from the buffer count as polls for ``max_poll_interval``
        (told to the member at most once a second)."""
        if now - self._polled_at >= _POLL_NOTE_EVERY:
            self._polled_at = now
            if self.fetcher.member is not None:
                self.fetcher.polled(now=now)

    # ---------------------------------------------------------------- positions

    def position(self, partition: Any) -> int | None:
        """The offset of the next record to hand out (counting records waiting in the
        hand-out buffer as unread), or None while it is being looked up.

        Raises:
            IllegalStateError: not assigned.
        """
        self._allow("read")
        tp = self.check_partition(partition)
        for entry in self._held:
            if entry[0] == tp:
                record: ConsumerRecord = entry[1][entry[3]]
                return record.offset
        return self.fetcher.position(tp)

    def consumed(self) -> dict[TopicPartition, int]:
        """Per assigned partition with a known position: the offset after the last record
        handed out, which is what a default commit stores."""
        first_held: dict[TopicPartition, int] = {}
        for tp, records, _epoch, index in self._held:
            first_held.setdefault(tp, records[index].offset)
        out: dict[TopicPartition, int] = {}
        fetcher = self.fetcher
        for tp in fetcher.assignment():
            position = first_held.get(tp)
            if position is None:
                position = fetcher.position(tp)
            if position is not None:
                out[tp] = position
        return out

    def _drop_held(self, partitions: Iterable[TopicPartition]) -> None:
        gone = set(partitions)
        if self._held:
            self._held = deque(e for e in self._held if e[0] not in gone)

    def seek(self, partition: Any, offset: int, *, now: float) -> None:
        """Read ``partition`` from ``offset`` next.

        Raises:
            KafkaConfigurationError: (a ValueError) a negative or non-int offset, checked
                first, as aiokafka does.
            IllegalStateError: the partition is not assigned.
        """
        self._allow("seek")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise KafkaConfigurationError(f"offset must be an int >= 0, got {offset!r}")
        tp = self.check_partition(partition)
        self._time(now)
        self._drop_held([tp])
        self.fetcher.seek(tp, offset, now=now)

    def seek_to(self, partitions: Sequence[Any], timestamp: int, *, now: float) -> None:
        """Reset ``partitions`` (all assigned if empty) by ``timestamp``
        (:data:`~kafkastate.core.consumer.fetcher.EARLIEST`, ``LATEST`` or ms).

        Raises:
            IllegalStateError: a partition is not assigned.
        """
        self._allow("seek")
        tps = self._targets(partitions)
        self._time(now)
        self._drop_held(tps)
        self.fetcher.seek_to(tps, timestamp, now=now)

    def seek_to_committed(self, partitions: Sequence[Any], *, now: float) -> None:
        """Go back to the group's committed offsets (all assigned if empty); where nothing
        is committed, to the reset policy.

        Raises:
            IllegalStateError: no ``group_id``, or a partition is not assigned.
        """
        self._allow("seek")
        if self.fetcher.config.group_id is None:
            raise IllegalStateError("seek_to_committed needs a group_id")
        tps = self._targets(partitions)
        self._time(now)
        self._drop_held(tps)
        self.fetcher.seek_to_committed(tps, now=now)

    def pause(self, partitions: Sequence[Any]) -> None:
        """Stop fetching and handing out records of these partitions.

        Raises:
            IllegalStateError: a partition is not assigned.
        """
        self._allow("seek")
        tps = [self.check_partition(tp) for tp in partitions]
        self._paused.update(tps)
        self.fetcher.pause(tps)

    def resume(self, partitions: Sequence[Any], *, now: float) -> None:
        """Undo :meth:`pause`.

        Raises:
            IllegalStateError: a partition is not assigned.
        """
        self._allow("seek")
        tps = [self.check_partition(tp) for tp in partitions]
        self._time(now)
        self._paused.difference_update(tps)
        self.fetcher.resume(tps, now=now)

    def paused(self) -> tuple[TopicPartition, ...]:
        """The paused partitions."""
        return self.fetcher.paused()

    # ------------------------------------------------------------------ commits

    def commit(self, offsets: Mapping[Any, Any] | None = None, *, now: float) -> int | None:
        """Commit ``offsets`` (per partition: an offset, ``(offset, metadata)`` or an
        :class:`~kafkastate.structs.OffsetAndMetadata`), by default :meth:`consumed`.
        Every argument is checked before anything is queued.

        Returns:
            The query id :class:`~kafkastate.core.consumer.fetcher.OffsetsCommitted`
            answers, or None when there was nothing to commit.

        Raises:
            IllegalOperation: (an IllegalStateError) no ``group_id``.
            IllegalStateError: the consumer is closed.
            TypeError: ``offsets`` is not a mapping.
            KafkaConfigurationError: (a ValueError) a malformed partition or offset, named.
        """
        self._allow("commit")
        if self.fetcher.config.group_id is None:
            raise IllegalOperation("commit needs a group_id")
        plain: dict[TopicPartition, int | tuple[int, str]] = {}
        if offsets is None:
            plain.update(self.consumed())
        else:
            if not isinstance(offsets, Mapping):
                raise TypeError(
                    f"commit() takes a mapping of partition -> offset, got {type(offsets).__name__}"
                )
            for tp, value in offsets.items():
                pair = _partition(tp)
                plain[pair] = _commit_value(pair, value)
        if not plain:
            return None
        self._time(now)
        return self.fetcher.commit(plain, now=now)

    def fetch_committed(self, partitions: Iterable[Any], *, now: float) -> int:
        """Ask for the group's committed offsets;
        :class:`~kafkastate.core.consumer.fetcher.CommittedOffsets` answers.

        Raises:
            IllegalOperation: (an IllegalStateError) no ``group_id``.
        """
        self._allow("query")
        if self.fetcher.config.group_id is None:
            raise IllegalOperation("committed offsets need a group_id")
        self._time(now)
        return self.fetcher.fetch_committed([_partition(tp) for tp in partitions], now=now)

    def list_offsets(self, timestamps: Mapping[Any, int], *, now: float) -> int:
        """Ask for offsets by timestamp;
        :class:`~kafkastate.core.consumer.fetcher.OffsetsListed` answers.

        Raises:
            KafkaConfigurationError: a malformed partition or timestamp.
        """
        self._allow("query")
        self._time(now)
        return self.fetcher.list_offsets(
            {_partition(tp): ts for tp, ts in timestamps.items()}, now=now
        )

    def final_commit(self, *, now: float) -> int | None:
        """On close, with auto-commit: commit :meth:`consumed`.

        Returns:
            The query id, or None (auto-commit off, or nothing to commit).
        """
        if not self.auto_commit or self.state is ConsumerState.CLOSED:
            return None
        return self.commit(now=now)

    def final_commit_failed(self, error: KafkaError) -> KafkaError | None:
        """What to do with the final auto-commit's failure.

        Returns:
            The error to raise from close() (a consumer without group membership), or None:
            a group member that fell out of its generation cannot commit, and the
            partitions' next owner reads from the last commit (at-least-once); Java logs
            that and goes on.
        """
        member = self.fetcher.member
        if member is None or not member.subscription:
            return error
        return None

    # ----------------------------------------------------------------- leaving

    def leave(self, *, now: float) -> bool:
        """Start leaving the group: once a rebalance step in progress has finished, the
        listener's revoke for what the member owns, then LeaveGroup. Group events not yet
        started are dropped. Idempotent.

        Returns:
            True if a :class:`~kafkastate.core.consumer.fetcher.GroupLeft` will follow
            (wait for it), False if there is no group to leave.
        """
        self._allow("leave")
        member = self.fetcher.member
        if member is None or not member.subscription:
            return False
        if self.state is ConsumerState.LEAVING:
            return True
        self._time(now)
        self.state = transition(CONSUMER_STATES, self.state, ConsumerState.LEAVING, what="leave")
        del_from = 1 if self._step is not None else 0
        while len(self._group_events) > del_from:
            self._group_events.pop()
        if self._step is None:
            self._start_leave(now)
        return True

    def _start_leave(self, now: float) -> None:
        member = self.fetcher.member
        assert member is not None
        owned = tuple(sorted(member.owned))
        if owned and member.active and self.listener is not None:
            self._leaving_call = self._request_call("on_partitions_revoked", owned)
        else:
            self.fetcher.leave_group(now=now)

    def close(self) -> None:
        """Close every connection; outstanding queries fail. Idempotent."""
        if self.state is _CLOSED:
            return
        self.state = transition(CONSUMER_STATES, self.state, ConsumerState.CLOSED, what="close")
        self._held.clear()
        self._group_events.clear()
        self._calls.clear()
        self.fetcher.close()
        self._pull()

    # ---------------------------------------------------------------- listener

    def _request_call(self, callback: str, partitions: tuple[TopicPartition, ...]) -> int:
        self._call_id += 1
        method = callback
        if callback == "on_partitions_lost" and not callable(
            getattr(self.listener, "on_partitions_lost", None)
        ):
            method = "on_partitions_revoked"  # aiokafka's and kafka-python's lack it
        self._calls[self._call_id] = callback
        self._events.append(
            ListenerCallRequested(
                call_id=self._call_id, method=method, callback=callback, partitions=partitions
            )
        )
        return self._call_id

    def listener_done(self, call_id: int, *, error: BaseException | None, now: float) -> None:
        """The adapter ran the listener call ``call_id``; ``error`` is what it raised (the
        rebalance goes on; the next read raises it as
        :class:`~kafkastate.errors.RebalanceListenerError`).

        Raises:
            IllegalStateError: no such call is in progress (a closed consumer forgets
                its calls).
        """
        callback = self._calls.pop(call_id, None)
        if callback is None:
            if self.state is _CLOSED:
                return
            raise IllegalStateError(f"no listener call {call_id} is in progress")
        self._time(now)
        if error is not None and self._listener_error is None:
            failure = RebalanceListenerError(
                f"{callback} of {self.listener!r} raised {error!r}; the rebalance went on "
                "without it",
                callback=callback,
            )
            failure.__cause__ = error
            self._listener_error = failure
        if call_id == self._leaving_call:
            self._leaving_call = None
            self.fetcher.leave_group(now=now)
        else:
            self._finish_group_event(now)
        self._pull()

    # ---------------------------------------------------------- the rebalance

    def _advance_group(self, now: float) -> bool:
        """Move the rebalance on by one step where nothing is awaited.

        Returns:
            True if a group event finished (the fetcher may have news), else False.
        """
        if not self._group_events or self._step in ("commit", "listener"):
            return False
        event = self._group_events[0]
        if self.state is not ConsumerState.OPEN and self._step is None:
            return False
        if isinstance(event, PartitionsRevoked):
            if self._step is None and self.auto_commit and not event.lost:
                tps = set(event.partitions)
                mine = {tp: o for tp, o in self.consumed().items() if tp in tps}
                if mine:
                    qid = self.fetcher.commit(mine, now=now)
                    self._auto_commits[qid] = True
                    self._revoke_commit = qid
                    self._step = "commit"
                    return False  # goes on when the commit is answered
            self._drop_held(event.partitions)
            self._paused.difference_update(event.partitions)
            callback = "on_partitions_lost" if event.lost else "on_partitions_revoked"
            partitions = tuple(sorted(event.partitions))
        else:
            callback = "on_partitions_assigned"
            partitions = tuple(sorted(event.added))
        if self.listener is not None:
            self._step = "listener"
            self._request_call(callback, partitions)
            return False
        self._finish_group_event(now)
        return True

    def _finish_group_event(self, now: float) -> None:
        self._step = None
        if not self._group_events:
            return
        event = self._group_events.popleft()
        if isinstance(event, PartitionsRevoked):
            self.fetcher.revocation_done(now=now)
        else:
            self.fetcher.assignment_done(now=now)
            cluster = self.fetcher.client.cluster
            if all(cluster.partitions_for(t) for t in self._subscribed):
                self._settle()
            else:
                # (an assignment made before the metadata knew the topics may not be the
                # one the subscription asked for: a leader rejoins when it learns them)
                self._settle_pending = True
        if self.state is ConsumerState.LEAVING:
            self._group_events.clear()
            self._start_leave(now)

    # ------------------------------------------------------------- the timer

    def _maybe_auto_commit(self, now: float) -> None:
        due = self._auto_commit_at
        if due is None or now < due or self.state is not ConsumerState.OPEN:
            return
        self._auto_commit_at = now + self._interval
        consumed = self.consumed()
        if consumed and self.fetcher.config.group_id is not None:
            qid = self.fetcher.commit(consumed, now=now)
            self._auto_commits[qid] = False

    def _follow_subscription(self, now: float) -> None:
        """Follow metadata: a pattern's matching topics (a change re-subscribes the
        member), and without a group, every partition of the subscribed topics."""
        fetcher = self.fetcher
        cluster = fetcher.client.cluster
        pattern = self._pattern
        if pattern is not None and cluster.topics:
            matching = tuple(
                matching_topics(cluster, pattern, exclude_internal=self._exclude_internal)
            )
            if matching and matching != self._subscribed:
                self._subscribed = matching
                if fetcher.member is not None:
                    fetcher.subscribe(matching, now=now)
            if not matching and fetcher.member is None:
                self._settle()  # nothing matches yet: an empty assignment
        if not self._subscribed or fetcher.member is not None:
            return
        wanted: list[TopicPartition] = []
        known = True
        for topic in self._subscribed:
            found = cluster.partitions_for(topic)
            known = known and bool(found)
            wanted.extend((topic, p) for p in found or ())
        if set(wanted) != set(fetcher.assignment()):
            fetcher.assign(wanted, now=now)
        if known:
            self._settle()

    def _settle_on_metadata(self) -> None:
        """The metadata learned the subscribed topics after the assignment was applied:
        with no rebalance since (a leader that assigned without them rejoined, and its
        member is not stable), that assignment is the subscription's. Waiting for the next
        assignment instead held aiokafka's ``start()`` for its whole timeout when a
        member's first metadata came after its SyncGroup (found by the simulator)."""
        member = self.fetcher.member
        cluster = self.fetcher.client.cluster
        if (
            self._settle_pending
            and not self._group_events
            and member is not None
            and member.stable
            and all(cluster.partitions_for(t) for t in self._subscribed)
        ):
            self._settle()

    def _settle(self) -> None:
        self._settle_pending = False
        if not self._settled:
            self._settled = True
            self._events.append(AssignmentSettled(assignment=self.fetcher.assignment()))

    # ----------------------------------------------------------- IO surface

    def connection_made(self, node_id: Any, *, now: float, attempt: int | None = None) -> None:
        """The adapter's socket to ``node_id`` is connected (:meth:`Client.connection_made`)."""
        self.fetcher.connection_made(node_id, now=now, attempt=attempt)
        self._after(now)

    def connection_failed(
        self,
        node_id: Any,
        *,
        now: float,
        error: BaseException | None = None,
        attempt: int | None = None,
    ) -> None:
        """The adapter could not connect to ``node_id`` (:meth:`Client.connection_failed`)."""
        self.fetcher.connection_failed(node_id, now=now, error=error, attempt=attempt)
        self._after(now)

    def connection_lost(
        self, node_id: Any, *, now: float, error: BaseException | None = None
    ) -> None:
        """The adapter's socket to ``node_id`` closed or failed."""
        self.fetcher.connection_lost(node_id, now=now, error=error)
        self._after(now)

    def token_received(
        self, token: str, *, now: float, extensions: Mapping[str, str] | None = None
    ) -> None:
        """The token provider's answer to :class:`TokenRequested`."""
        self.fetcher.token_received(token, now=now, extensions=extensions)
        self._after(now)

    def token_failed(self, error: BaseException, *, now: float) -> None:
        """The token provider raised instead of answering :class:`TokenRequested`."""
        self.fetcher.token_failed(error, now=now)
        self._after(now)

    def receive_data(self, node_id: Any, data: bytes, *, now: float) -> None:
        """Bytes read from ``node_id``'s socket (``b""`` = EOF)."""
        self.fetcher.receive_data(node_id, data, now=now)
        self._after(now)

    def handle_timer(self, *, now: float) -> None:
        """Run everything whose deadline passed (auto-commit included). Safe to call early
        or twice."""
        if self.state is _CLOSED:
            return
        self._time(now)
        self._maybe_auto_commit(now)
        self.fetcher.handle_timer(now=now)
        self._after(now)
        if self.fetcher.client.statistics_due(now=now):
            self._events.append(report.StatisticsReported(stats=report.statistics(self, now)))

    def data_to_send(self) -> list[tuple[Any, bytes]]:
        """``(node, bytes)`` to write, in order; clears the buffer."""
        return self.fetcher.data_to_send()

    def next_event(self) -> ConsumerEvent | None:
        """The next event, or None."""
        if not self._events:
            self._pull()
            if not self._events:
                return None
        return self._events.popleft()

    def get_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` must run, or None."""
        if self.state is _CLOSED:
            return None
        timer = self.fetcher.get_timer()
        due = self._auto_commit_at
        if due is not None and self.state is ConsumerState.OPEN:
            return due if timer is None else min(due, timer)
        return timer

    def _after(self, now: float) -> None:
        self._time(now)
        self._pull()

    def _pull(self) -> None:
        """Take the fetcher's events (the machine's own -- group events, its commits'
        answers -- are handled here, the rest passed on) and move the rebalance on."""
        if self._pulling:
            return
        self._pulling = True
        try:
            fetcher = self.fetcher
            now = self._now
            while True:
                while (event := fetcher.next_event()) is not None:
                    self._take(event, now)
                if not self._advance_group(now):
                    break
        finally:
            self._pulling = False

    def _take(self, event: FetcherEvent, now: float) -> None:
        match event:
            case PartitionsRevoked() | PartitionsAssigned():
                if self.state is ConsumerState.OPEN:
                    self._group_events.append(event)
                return
            case OffsetsCommitted(query_id=qid) if qid in self._auto_commits:
                before_revoke = self._auto_commits.pop(qid)
                self._events.append(
                    AutoCommitted(
                        offsets=event.offsets, error=event.error, before_revoke=before_revoke
                    )
                )
                if qid == self._revoke_commit:
                    self._revoke_commit = None
                    self._step = "committed"
                return
            case MetadataUpdated():
                if self.state is not ConsumerState.CLOSED:
                    self._follow_subscription(now)
                    self._settle_on_metadata()
        self._events.append(event)
