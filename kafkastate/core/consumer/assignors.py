"""Partition assignors of the classic group protocol, and the consumer protocol's bytes.

Theory of operation
-------------------
In the classic protocol (JoinGroup / SyncGroup) the broker does not assign partitions: the
member it elects leader runs an *assignor* over every member's subscription and sends the
result in SyncGroup. What members tell each other travels as opaque bytes in JoinGroup's
``metadata`` and SyncGroup's ``assignment``: the ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment`` structures (an int16 version, then the fields of that
version). :func:`encode_subscription` / :func:`decode_subscription` and the assignment pair
read and write them; a newer version than we know is read as the newest we know (the
fields are only ever appended), as Java does.

An assignor is a pure function of the topics' partition counts and the subscriptions, so
every member computing it gets the same answer, and tests and the simulator can call it
directly. Four are built in, under the names the Java client uses, so a group may mix
kafkastate members with Java, librdkafka, kafka-python or aiokafka members:

* ``range`` (:class:`RangeAssignor`): per topic, the members subscribed to it in order take
  consecutive ranges of its partitions, the first ``partitions % members`` one more.
* ``roundrobin`` (:class:`RoundRobinAssignor`): every partition of every topic, sorted, dealt
  in turn to the members (skipping members not subscribed to its topic).
* ``sticky`` (:class:`StickyAssignor`, eager): a balanced assignment that keeps as many of
  each member's previous partitions as balance allows. Previous assignments travel in the
  subscription's user data (Java's ``StickyAssignor`` format), as every partition is
  revoked before an eager rejoin.
* ``cooperative-sticky`` (:class:`CooperativeStickyAssignor`, KIP-429): the same target,
  but a partition that moves from one member to another is left out of the new owner's
  assignment in this round; its old owner revokes only it and rejoins, and the next round
  hands it over. Nobody stops consuming the partitions that do not move.

Owned partitions: a partition claimed by several members goes to the claim of the highest
generation; claims of equal highest generation cancel (the partition is treated as unowned),
as in Java's ``AbstractStickyAssignor``.

Balance (sticky assignors): after keeping owned partitions and dealing unowned ones to the
eligible member with the fewest, partitions move from a member to an eligible one with at
least two fewer until no such move exists -- never-owned partitions first, then the
member's latest ones. With equal subscriptions the counts end within one of each other.

Custom assignors implement :class:`Assignor` (``name``, ``protocols``, ``assign``, and
optionally ``subscription_user_data`` / ``on_assignment``).

Pure: no IO, no clock, no randomness; every result is a deterministic function of the input.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import attrs
from kio.schema.consumer_protocol_assignment.v0 import data as _asg_v0
from kio.schema.consumer_protocol_assignment.v1 import data as _asg_v1
from kio.schema.consumer_protocol_assignment.v2 import data as _asg_v2
from kio.schema.consumer_protocol_assignment.v3 import data as _asg_v3
from kio.schema.consumer_protocol_subscription.v0 import data as _sub_v0
from kio.schema.consumer_protocol_subscription.v1 import data as _sub_v1
from kio.schema.consumer_protocol_subscription.v2 import data as _sub_v2
from kio.schema.consumer_protocol_subscription.v3 import data as _sub_v3

from kafkastate.core.protocol.framing import decode_body, encode_body
from kafkastate.errors import KafkaConfigurationError, RemoteProtocolError

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "decode_assignment",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_sticky_user_data",
    "encode_subscription",
]

TopicPartition = tuple[str, int]
"""``(topic, partition)``."""

SUBSCRIPTION_VERSION: Final = 3
"""The ConsumerProtocolSubscription version we write (v3: rack id, KIP-881)."""
ASSIGNMENT_VERSION: Final = 3
"""The ConsumerProtocolAssignment version we write."""

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")


class RebalanceProtocol(enum.Enum):
    """How members give up partitions in a rebalance (KIP-429)."""

    EAGER = "eager"
    """Every member revokes everything before rejoining."""
    COOPERATIVE = "cooperative"
    """Members keep their partitions; only the ones that move are revoked, in a second
    round."""


@attrs.frozen(kw_only=True)
class Subscription:
    """One member's JoinGroup metadata, decoded."""

    topics: tuple[str, ...]
    """The topics the member wants."""
    user_data: bytes | None = None
    """Its assignor's private data."""
    owned_partitions: tuple[TopicPartition, ...] = ()
    """What it owns now (v1+; cooperative members keep owning through a rebalance)."""
    generation_id: int = -1
    """The generation its owned partitions come from (v2+), -1 if unknown."""
    rack_id: str | None = None
    """Its ``client.rack`` (v3+)."""
    group_instance_id: str | None = None
    """Its static membership id (from JoinGroup's member list, not these bytes): members
    are ordered by it when present, as Java orders them."""


@attrs.frozen(kw_only=True)
class Assignment:
    """What the leader gives one member in SyncGroup, decoded."""

    partitions: tuple[TopicPartition, ...]
    """The assigned partitions, sorted."""
    user_data: bytes | None = None
    """The assignor's private data for the member."""


@runtime_checkable
class Assignor(Protocol):
    """A partition assignor (the leader runs :meth:`assign`; every member runs the rest).

    ``name`` is what JoinGroup advertises: members agree on the first name every member
    lists. ``protocols`` are the rebalance protocols it supports, preferred first.
    """

    name: str
    protocols: tuple[RebalanceProtocol, ...]

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """The assignment of every member.

        Args:
            partitions_per_topic: the partition count of every subscribed topic that
                exists (missing topics are left out).
            subscriptions: member id -> its subscription.

        Returns:
            member id -> its assignment, for every member.
        """
        ...


# ------------------------------------------------------------------------ wire format


def _tp_groups(cls: type[Any], partitions: Iterable[TopicPartition]) -> tuple[Any, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return tuple(cls(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())


_SCHEMAS: Final[Mapping[str, tuple[Any, ...]]] = {
    "subscription": (_sub_v0, _sub_v1, _sub_v2, _sub_v3),
    "assignment": (_asg_v0, _asg_v1, _asg_v2, _asg_v3),
}


def _schema(kind: str, version: int) -> Any:
    return _SCHEMAS[kind][version]


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """JoinGroup metadata bytes for ``sub`` (ConsumerProtocolSubscription ``version``).

    Raises:
        KafkaConfigurationError: a version outside 0..3.
    """
    if version not in range(SUBSCRIPTION_VERSION + 1):
        raise KafkaConfigurationError(f"subscription version must be 0..3, got {version!r}")
    mod = _schema("subscription", version)
    fields: dict[str, Any] = {"topics": tuple(sub.topics), "user_data": sub.user_data}
    if version >= 1:
        fields["owned_partitions"] = _tp_groups(mod.TopicPartition, sub.owned_partitions)
    if version >= 2:
        fields["generation_id"] = sub.generation_id
    if version >= 3:
        fields["rack_id"] = sub.rack_id
    return _INT16.pack(version) + encode_body(mod.ConsumerProtocolSubscription(**fields))


def decode_subscription(data: bytes, *, group_instance_id: str | None = None) -> Subscription:
    """A member's JoinGroup metadata (any version; newer ones read as v3).

    Raises:
        RemoteProtocolError: the bytes are not a subscription.
    """
    version = _version(data, "subscription")
    mod = _schema("subscription", min(version, SUBSCRIPTION_VERSION))
    body = decode_body(mod.ConsumerProtocolSubscription, memoryview(data), 2)
    owned = getattr(body, "owned_partitions", ())
    return Subscription(
        topics=tuple(str(t) for t in body.topics),
        user_data=None if body.user_data is None else bytes(body.user_data),
        owned_partitions=tuple(sorted((str(t.topic), int(p)) for t in owned for p in t.partitions)),
        generation_id=int(getattr(body, "generation_id", -1)),
        rack_id=getattr(body, "rack_id", None),
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    """SyncGroup assignment bytes (ConsumerProtocolAssignment ``version``).

    Raises:
        KafkaConfigurationError: a version outside 0..3.
    """
    if version not in range(ASSIGNMENT_VERSION + 1):
        raise KafkaConfigurationError(f"assignment version must be 0..3, got {version!r}")
    mod = _schema("assignment", version)
    entity = mod.ConsumerProtocolAssignment(
        assigned_partitions=_tp_groups(mod.TopicPartition, assignment.partitions),
        user_data=assignment.user_data,
    )
    return _INT16.pack(version) + encode_body(entity)


def decode_assignment(data: bytes) -> Assignment:
    """A SyncGroup assignment (any version). Empty bytes are an empty assignment (what
    the broker hands a member the leader left out).

    Raises:
        RemoteProtocolError: the bytes are not an assignment.
    """
    if not data:
        return Assignment(partitions=())
    version = _version(data, "assignment")
    mod = _schema("assignment", min(version, ASSIGNMENT_VERSION))
    body = decode_body(mod.ConsumerProtocolAssignment, memoryview(data), 2)
    return Assignment(
        partitions=tuple(
            sorted((str(t.topic), int(p)) for t in body.assigned_partitions for p in t.partitions)
        ),
        user_data=None if body.user_data is None else bytes(body.user_data),
    )


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise RemoteProtocolError(f"consumer protocol {what} of {len(data)} bytes has no version")
    (version,) = _INT16.unpack_from(data, 0)
    if version < 0:
        raise RemoteProtocolError(f"consumer protocol {what} with version {version}")
    return int(version)


# ------------------------------------------------------------------ ordering of members


def _member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Java's ``MemberInfo`` order: static members by instance id first, then the others
    by member id."""

    def key(member: str) -> tuple[int, str, str]:
        instance = subscriptions[member].group_instance_id
        return (0, instance, member) if instance is not None else (1, member, member)

    return sorted(subscriptions, key=key)


def _as_assignments(
    members: Iterable[str], chosen: Mapping[str, Iterable[TopicPartition]]
) -> dict[str, Assignment]:
    return {m: Assignment(partitions=tuple(sorted(chosen.get(m, ())))) for m in members}


def _check_counts(partitions_per_topic: Mapping[str, int]) -> None:
    for topic, count in partitions_per_topic.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise KafkaConfigurationError(f"partition count of {topic!r} must be >= 0: {count!r}")


# ------------------------------------------------------------------------------- range


class RangeAssignor:
    """``range``: consecutive ranges of each topic's partitions per member (Java's
    ``RangeAssignor``, without its rack-aware variant)."""

    name = "range"
    protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """See :meth:`Assignor.assign`."""
        _check_counts(partitions_per_topic)
        order = _member_order(subscriptions)
        chosen: dict[str, list[TopicPartition]] = {m: [] for m in order}
        for topic in sorted(partitions_per_topic):
            members = [m for m in order if topic in subscriptions[m].topics]
            if not members:
                continue
            count = partitions_per_topic[topic]
            each, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                size = each + (1 if i < extra else 0)
                chosen[member].extend((topic, p) for p in range(start, start + size))
                start += size
        return _as_assignments(order, chosen)


# -------------------------------------------------------------------------- roundrobin


class RoundRobinAssignor:
    """``roundrobin``: every partition, sorted by topic and number, dealt in turn to the
    members subscribed to its topic (Java's ``RoundRobinAssignor``)."""

    name = "roundrobin"
    protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """See :meth:`Assignor.assign`."""
        _check_counts(partitions_per_topic)
        order = _member_order(subscriptions)
        chosen: dict[str, list[TopicPartition]] = {m: [] for m in order}
        if not order:
            return {}
        wanted = {t for m in order for t in subscriptions[m].topics}
        turn = 0
        for topic in sorted(t for t in partitions_per_topic if t in wanted):
            for partition in range(partitions_per_topic[topic]):
                while topic not in subscriptions[order[turn % len(order)]].topics:
                    turn += 1
                chosen[order[turn % len(order)]].append((topic, partition))
                turn += 1
        return _as_assignments(order, chosen)


# ------------------------------------------------------------------------------ sticky


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """Java ``StickyAssignor`` user data v1: the member's current partitions and their
    generation."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = [_INT32.pack(len(by_topic))]
    for topic, parts in by_topic.items():
        name = topic.encode()
        out.append(_INT16.pack(len(name)) + name + _INT32.pack(len(parts)))
        out.extend(_INT32.pack(p) for p in parts)
    out.append(_INT32.pack(generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> tuple[tuple[TopicPartition, ...], int]:
    """Read :func:`encode_sticky_user_data` (v1, or v0 without the generation: -1).

    Raises:
        RemoteProtocolError: malformed bytes.
    """
    view = memoryview(data)
    pos, end = 0, len(data)

    def take(size: int) -> int:
        nonlocal pos
        if size < 0 or pos + size > end:
            raise RemoteProtocolError("malformed sticky assignor user data")
        start, pos = pos, pos + size
        return start

    (topics,) = _INT32.unpack_from(view, take(4))
    if topics < 0 or topics > end:
        raise RemoteProtocolError("malformed sticky assignor user data")
    out: list[TopicPartition] = []
    for _ in range(topics):
        (size,) = _INT16.unpack_from(view, take(2))
        start = take(size)
        try:
            topic = bytes(view[start : start + size]).decode()
        except UnicodeDecodeError:
            raise RemoteProtocolError("malformed sticky assignor user data") from None
        (count,) = _INT32.unpack_from(view, take(4))
        if count < 0 or count * 4 > end - pos:
            raise RemoteProtocolError("malformed sticky assignor user data")
        out.extend((topic, p) for p in struct.unpack_from(f">{count}i", view, take(4 * count)))
    generation = -1
    if end - pos >= 4:
        (generation,) = _INT32.unpack_from(view, take(4))
    return tuple(out), int(generation)


class _StickyBase:
    """The balanced, sticky assignment both sticky assignors compute."""

    name: str
    protocols: tuple[RebalanceProtocol, ...]

    def __init__(self) -> None:
        self._current: tuple[TopicPartition, ...] = ()
        self._generation = -1

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        """Remember what this member was given (for the next subscription's user data)."""
        self._current = assignment.partitions
        self._generation = generation

    def _owned(self, sub: Subscription) -> tuple[tuple[TopicPartition, ...], int]:
        return sub.owned_partitions, sub.generation_id

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """See :meth:`Assignor.assign`."""
        _check_counts(partitions_per_topic)
        order = _member_order(subscriptions)
        owners = self._previous_owners(partitions_per_topic, subscriptions)
        target = _balanced(partitions_per_topic, subscriptions, order, owners)
        return _as_assignments(order, self._adjust(target, owners))

    def _previous_owners(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[TopicPartition, str]:
        """Who owns what, keeping only valid claims: the partition exists, the member is
        subscribed to its topic, and no other claim of equal or higher generation exists."""
        best: dict[TopicPartition, tuple[int, list[str]]] = {}
        for member, sub in subscriptions.items():
            owned, generation = self._owned(sub)
            for tp in set(owned):
                topic, partition = tp
                if topic not in sub.topics or not 0 <= partition < partitions_per_topic.get(
                    topic, 0
                ):
                    continue
                seen = best.get(tp)
                if seen is None or generation > seen[0]:
                    best[tp] = (generation, [member])
                elif generation == seen[0]:
                    seen[1].append(member)
        return {tp: members[0] for tp, (_g, members) in best.items() if len(members) == 1}

    def _adjust(
        self, target: dict[str, list[TopicPartition]], owners: Mapping[TopicPartition, str]
    ) -> dict[str, list[TopicPartition]]:
        return target


def _balanced(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    order: Sequence[str],
    owners: Mapping[TopicPartition, str],
) -> dict[str, list[TopicPartition]]:
    rank = {m: i for i, m in enumerate(order)}
    topics = {m: set(subscriptions[m].topics) for m in order}
    chosen: dict[str, set[TopicPartition]] = {m: set() for m in order}
    for tp, member in owners.items():
        chosen[member].add(tp)
    wanted = sorted({t for m in order for t in topics[m] if t in partitions_per_topic})
    eligible = {t: [m for m in order if t in topics[m]] for t in wanted}
    for topic in wanted:
        for partition in range(partitions_per_topic[topic]):
            tp = (topic, partition)
            if tp in owners:
                continue
            member = min(eligible[topic], key=lambda m: (len(chosen[m]), rank[m]))
            chosen[member].add(tp)
    # Move partitions from a member to an eligible one with two or more fewer, until no
    # such move exists; each move lowers the sum of squared counts, so this ends.
    while True:
        by_load = sorted(order, key=lambda m: (-len(chosen[m]), rank[m]))
        moved = False
        for src in by_load:
            for dst in reversed(by_load):
                if len(chosen[src]) - len(chosen[dst]) < 2:
                    break
                movable = [tp for tp in chosen[src] if tp[0] in topics[dst]]
                if not movable:
                    continue
                # never-owned partitions first (no revocation), then the latest ones
                tp = max(movable, key=lambda tp: (owners.get(tp) != src, tp))
                chosen[src].remove(tp)
                chosen[dst].add(tp)
                moved = True
                break
            if moved:
                break
        if not moved:
            return {m: sorted(chosen[m]) for m in order}


class StickyAssignor(_StickyBase):
    """``sticky`` (eager): balanced, keeping previous partitions where balance allows;
    previous assignments travel in the user data (Java's ``StickyAssignor`` format)."""

    name = "sticky"
    protocols = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        """This member's previous assignment and generation, for the leader."""
        del topics
        return encode_sticky_user_data(self._current, self._generation)

    def _owned(self, sub: Subscription) -> tuple[tuple[TopicPartition, ...], int]:
        if sub.user_data:
            try:
                return decode_sticky_user_data(sub.user_data)
            except RemoteProtocolError:
                pass  # another assignor's data: fall back on the subscription's fields
        return sub.owned_partitions, sub.generation_id


class CooperativeStickyAssignor(_StickyBase):
    """``cooperative-sticky`` (KIP-429): the sticky target, minus partitions that change
    owner in this round (their owner revokes them first; the next round assigns them)."""

    name = "cooperative-sticky"
    protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        """The generation, as Java's ``CooperativeStickyAssignor`` sends it (for members
        on subscription v1, which has no generation field)."""
        del topics
        return _INT32.pack(self._generation)

    def _owned(self, sub: Subscription) -> tuple[tuple[TopicPartition, ...], int]:
        generation = sub.generation_id
        if generation < 0 and sub.user_data is not None and len(sub.user_data) >= 4:
            (generation,) = _INT32.unpack_from(sub.user_data, 0)
        return sub.owned_partitions, int(generation)

    def _adjust(
        self, target: dict[str, list[TopicPartition]], owners: Mapping[TopicPartition, str]
    ) -> dict[str, list[TopicPartition]]:
        return {
            member: [tp for tp in tps if owners.get(tp, member) == member]
            for member, tps in target.items()
        }


ASSIGNORS: Final[Mapping[str, type[Any]]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    StickyAssignor.name: StickyAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}
"""The built-in assignors by protocol name."""
