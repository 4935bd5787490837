"""Assignors and the consumer protocol bytes: Java's documented examples, kafka-python's
range and roundrobin assignors and its encoder as independent references, and Hypothesis
properties of the sticky assignors (validity, balance, stickiness, the cooperative
two-round hand-over)."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kafkastate.core.consumer.assignors import (
    ASSIGNORS,
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
)
from kafkastate.errors import KafkaConfigurationError, RemoteProtocolError

kp_metadata = pytest.importorskip("kafka.protocol.consumer.metadata")
kp_range = pytest.importorskip("kafka.coordinator.assignors.range")
kp_roundrobin = pytest.importorskip("kafka.coordinator.assignors.roundrobin")

TP = tuple[str, int]


def sub(*topics: str, owned: tuple[TP, ...] = (), generation: int = -1, **kw: Any) -> Subscription:
    return Subscription(topics=topics, owned_partitions=owned, generation_id=generation, **kw)


def parts(result: Mapping[str, Assignment]) -> dict[str, list[TP]]:
    return {m: list(a.partitions) for m, a in result.items()}


# ------------------------------------------------------------------------- wire format


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip_and_kafka_python_reads_it(version: int) -> None:
    original = sub("b", "a", owned=(("a", 2), ("a", 0)), generation=7, rack_id="r1")
    original = Subscription(
        topics=original.topics,
        user_data=b"\x00\x01",
        owned_partitions=original.owned_partitions,
        generation_id=7,
        rack_id="r1",
    )
    data = encode_subscription(original, version)
    back = decode_subscription(data)
    assert back.topics == ("b", "a") and back.user_data == b"\x00\x01"
    assert back.owned_partitions == ((("a", 0), ("a", 2)) if version >= 1 else ())
    assert back.generation_id == (7 if version >= 2 else -1)
    assert back.rack_id == ("r1" if version >= 3 else None)
    theirs = kp_metadata.ConsumerProtocolSubscription.decode(data)
    assert theirs.version == version and list(theirs.topics) == ["b", "a"]


def test_kafka_python_subscriptions_decode() -> None:
    theirs = kp_metadata.ConsumerProtocolSubscription(
        version=1, topics=["t"], user_data=b"x", owned_partitions=[("t", [3, 1])]
    )
    back = decode_subscription(theirs.encode(version=1), group_instance_id="i-1")
    assert back == Subscription(
        topics=("t",), user_data=b"x", owned_partitions=(("t", 1), ("t", 3)),
        group_instance_id="i-1",
    )  # fmt: skip


def test_a_newer_version_is_read_as_the_newest_known() -> None:
    data = encode_subscription(sub("t", owned=(("t", 0),), generation=3, rack_id="r"), 3)
    future = struct.pack(">h", 9) + data[2:] + b"fields of v9"
    assert decode_subscription(future).rack_id == "r"
    assignment = encode_assignment(Assignment(partitions=(("t", 1),), user_data=b"u"))
    later = struct.pack(">h", 4) + assignment[2:] + b"\x00\x00"
    assert decode_assignment(later) == Assignment(partitions=(("t", 1),), user_data=b"u")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_round_trip_and_kafka_python_reads_it(version: int) -> None:
    original = Assignment(partitions=(("a", 1), ("b", 0), ("a", 0)), user_data=None)
    data = encode_assignment(original, version)
    assert decode_assignment(data).partitions == (("a", 0), ("a", 1), ("b", 0))
    theirs = kp_metadata.ConsumerProtocolAssignment.decode(data)
    assert sorted(theirs.partitions()) == [("a", 0), ("a", 1), ("b", 0)]
    assert decode_assignment(b"") == Assignment(partitions=())  # left out by the leader


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\xff\xff\x00", b"\x00\x00\x7f\xff\xff\xff", b"\x00\x01\x00\x00\x00\x01\x00"],
)
def test_malformed_subscriptions_are_typed(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_subscription(data)


def test_bad_versions_are_refused() -> None:
    with pytest.raises(KafkaConfigurationError, match=r"0\.\.3"):
        encode_subscription(sub("t"), 4)
    with pytest.raises(KafkaConfigurationError, match=r"0\.\.3"):
        encode_assignment(Assignment(partitions=()), -1)


def test_sticky_user_data_round_trip_and_malformed() -> None:
    data = encode_sticky_user_data([("b", 1), ("a", 0), ("a", 5)], 12)
    assert decode_sticky_user_data(data) == ((("a", 0), ("a", 5), ("b", 1)), 12)
    assert decode_sticky_user_data(data[:-4]) == ((("a", 0), ("a", 5), ("b", 1)), -1)  # v0
    for bad in (b"\x00", b"\x7f\xff\xff\xff", data[:9], b"\x00\x00\x00\x01\x00\x02\xff\xfe"):
        with pytest.raises(RemoteProtocolError):
            decode_sticky_user_data(bad)


# ------------------------------------------------------- range and roundrobin, by example


def test_range_and_roundrobin_java_examples() -> None:
    # From the Java RangeAssignor / RoundRobinAssignor javadoc: C0 and C1, t0 and t1 of
    # three partitions each.
    subs = {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")}
    counts = {"t0": 3, "t1": 3}
    assert parts(RangeAssignor().assign(counts, subs)) == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }
    assert parts(RoundRobinAssignor().assign(counts, subs)) == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "C1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }


def test_roundrobin_with_unequal_subscriptions_java_example() -> None:
    # Javadoc: C0 [t0], C1 [t0, t1], C2 [t0, t1, t2]; t0 1, t1 2, t2 3 partitions.
    subs = {"C0": sub("t0"), "C1": sub("t0", "t1"), "C2": sub("t0", "t1", "t2")}
    result = parts(RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs))
    assert result == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)],
    }


def test_static_members_come_first_in_range() -> None:
    subs = {"a-dynamic": sub("t"), "z-static": sub("t", group_instance_id="inst")}
    assert parts(RangeAssignor().assign({"t": 3}, subs)) == {
        "a-dynamic": [("t", 2)],
        "z-static": [("t", 0), ("t", 1)],
    }


@dataclass
class _KpMember:
    member_id: str
    group_instance_id: str | None
    metadata: Any


class _KpCluster:
    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.counts[topic])) if topic in self.counts else None


groups = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.tuples(
        st.lists(st.sampled_from(["t0", "t1", "t2"]), min_size=1, max_size=3, unique=True),
        st.one_of(st.none(), st.text("xyz", min_size=1, max_size=2)),
    ),
    min_size=1,
    max_size=6,
)
topic_counts = st.fixed_dictionaries(
    {"t0": st.integers(0, 7), "t1": st.integers(0, 7), "t2": st.integers(0, 7)}
)


@given(members=groups, counts=topic_counts)
@settings(max_examples=300, deadline=None)
def test_range_and_roundrobin_agree_with_kafka_python(
    members: dict[str, tuple[list[str], str | None]], counts: dict[str, int]
) -> None:
    """kafka-python 3.0's assignors as the reference, with their two known bugs encoded:
    both group members with ``itertools.groupby`` on an unsorted list, which drops members
    when static and dynamic ones alternate, so they get the members static first (the order
    of the list does not matter to a correct assignor); its roundrobin raises KeyError when
    it has to skip a member not subscribed to a partition's topic (it looks the member up
    by its (instance id, member id) pair), which takes subscriptions that differ: then ours
    is checked for a valid assignment, and against Java's rules by the examples above."""
    instances = [i for _t, i in members.values() if i is not None]
    assume(len(instances) == len(set(instances)))  # instance ids are unique in a group
    subs = {m: sub(*topics, group_instance_id=i) for m, (topics, i) in members.items()}
    kp_members = [
        _KpMember(m, i, kp_metadata.ConsumerProtocolSubscription(0, topics, b""))
        for m, (topics, i) in members.items()
    ]
    kp_members.sort(key=lambda member: member.group_instance_id is None)  # the groupby bug
    cluster = _KpCluster(counts)
    expected = {
        m: sorted(a.partitions())
        for m, a in kp_range.RangePartitionAssignor.assign(cluster, kp_members).items()
    }
    assert parts(RangeAssignor().assign(counts, subs)) == expected
    ours = RoundRobinAssignor().assign(counts, subs)
    try:
        theirs = kp_roundrobin.RoundRobinPartitionAssignor.assign(cluster, kp_members)
    except KeyError:  # kafka-python's roundrobin bug: only where subscriptions differ
        subscribed = [set(topics) for topics, _i in members.values()]
        partitioned = {t for t in set().union(*subscribed) if counts[t]}
        assert any(not partitioned <= topics for topics in subscribed)
        check_valid(counts, subs, ours)
        return
    expected = {m: sorted(a.partitions()) for m, a in theirs.items()}
    assert parts(ours) == expected


# --------------------------------------------------------------------------- sticky


def check_valid(
    counts: Mapping[str, int],
    subs: Mapping[str, Subscription],
    result: Mapping[str, Assignment],
    *,
    complete: bool = True,
) -> None:
    """Every member answered; no partition twice; only subscribed topics; everything
    assigned (when ``complete``)."""
    assert set(result) == set(subs)
    seen: list[TP] = [tp for a in result.values() for tp in a.partitions]
    assert len(seen) == len(set(seen)), "a partition assigned twice"
    for member, assignment in result.items():
        assert all(t in subs[member].topics for t, _p in assignment.partitions)
    wanted = {
        (t, p)
        for t in {t for s in subs.values() for t in s.topics}
        for p in range(counts.get(t, 0))
    }
    assert set(seen) <= wanted
    if complete:
        assert set(seen) == wanted


def check_balanced(subs: Mapping[str, Subscription], result: Mapping[str, Assignment]) -> None:
    """No partition could move to an eligible member with two fewer."""
    for a, b in itertools.permutations(result, 2):
        more, fewer = result[a].partitions, result[b].partitions
        if len(more) - len(fewer) >= 2:
            assert not [tp for tp in more if tp[0] in subs[b].topics], (a, b, result)


@given(members=groups, counts=topic_counts, data=st.data())
@settings(max_examples=300, deadline=None)
def test_sticky_assignments_are_valid_and_balanced(
    members: dict[str, tuple[list[str], str | None]], counts: dict[str, int], data: st.DataObject
) -> None:
    subs = {m: sub(*topics) for m, (topics, _i) in members.items()}
    first = StickyAssignor().assign(counts, subs)
    check_valid(counts, subs, first)
    check_balanced(subs, first)
    if len({frozenset(s.topics) for s in subs.values()}) == 1:
        sizes = [len(a.partitions) for a in first.values()]
        assert max(sizes) - min(sizes) <= 1
    # The next generation, owning what it was given, with one member gone and one new.
    gone = data.draw(st.sampled_from(sorted(subs)))
    again = {
        m: sub(*subs[m].topics, owned=first[m].partitions, generation=1) for m in subs if m != gone
    }
    again["newcomer"] = sub("t0", "t1", "t2")
    second = StickyAssignor().assign(counts, again)
    check_valid(counts, again, second)
    check_balanced(again, second)


def test_sticky_keeps_partitions_when_a_member_leaves_or_joins() -> None:
    counts = {"t": 6}
    three = {m: sub("t") for m in ("a", "b", "c")}
    first = parts(CooperativeStickyAssignor().assign(counts, three))
    assert sorted(len(v) for v in first.values()) == [2, 2, 2]
    # c leaves: a and b keep theirs and share c's
    two = {m: sub("t", owned=tuple(first[m]), generation=1) for m in ("a", "b")}
    second = parts(StickyAssignor().assign(counts, two))
    for m in ("a", "b"):
        assert set(first[m]) <= set(second[m]) and len(second[m]) == 3
    # d joins the two: each of a, b gives up exactly one
    again = {m: sub("t", owned=tuple(second[m]), generation=2) for m in ("a", "b")}
    again["d"] = sub("t")
    third = parts(StickyAssignor().assign(counts, again))
    for m in ("a", "b"):
        assert len(set(second[m]) & set(third[m])) == 2
    assert len(third["d"]) == 2


def test_eager_sticky_reads_previous_assignments_from_user_data() -> None:
    # Eager members own nothing when they rejoin: the previous assignment is in user data.
    member = StickyAssignor()
    member.on_assignment(Assignment(partitions=(("t", 3), ("t", 4))), 5)
    user_data = member.subscription_user_data(["t"])
    assert user_data is not None
    subs = {
        "x": Subscription(topics=("t",), user_data=user_data),
        "y": Subscription(topics=("t",), user_data=encode_sticky_user_data([("t", 0)], 5)),
    }
    result = parts(StickyAssignor().assign({"t": 5}, subs))
    assert {("t", 3), ("t", 4)} <= set(result["x"]) and ("t", 0) in result["y"]


def test_claims_of_the_highest_generation_win_and_ties_cancel() -> None:
    subs = {
        "old": sub("t", owned=(("t", 0), ("t", 1)), generation=3),
        "new": sub("t", owned=(("t", 0),), generation=4),
        "twin": sub("t", owned=(("t", 1),), generation=3),
        "fourth": sub("t"),
    }
    assignor = CooperativeStickyAssignor()
    owners = assignor._previous_owners({"t": 4}, subs)
    assert owners == {("t", 0): "new"}  # t-1: two claims of generation 3 cancel


# ------------------------------------------------------------------------ cooperative


@given(members=groups, counts=topic_counts, data=st.data())
@settings(max_examples=300, deadline=None)
def test_cooperative_never_hands_over_an_owned_partition_in_one_round(
    members: dict[str, tuple[list[str], str | None]], counts: dict[str, int], data: st.DataObject
) -> None:
    subs = {m: sub(*topics) for m, (topics, _i) in members.items()}
    assignor = CooperativeStickyAssignor()
    first = assignor.assign(counts, subs)  # nobody owns anything: complete at once
    check_valid(counts, subs, first)
    # a newcomer and a changed subscription: generation 2
    owned = {m: first[m].partitions for m in subs}
    again = {m: sub(*subs[m].topics, owned=owned[m], generation=2) for m in subs}
    again["newcomer"] = sub(*data.draw(st.sets(st.sampled_from(["t0", "t1", "t2"]), min_size=1)))
    round1 = assignor.assign(counts, again)
    check_valid(counts, again, round1, complete=False)
    for member, assignment in round1.items():
        for tp in assignment.partitions:
            owner = next((m for m, tps in owned.items() if tp in tps), None)
            assert owner in (None, member), f"{tp} moved from {owner} to {member} in one round"
    # Members revoke what they lost and rejoin owning what they kept: round 2 completes.
    kept = {m: round1[m].partitions for m in again}
    final = {m: sub(*again[m].topics, owned=kept[m], generation=3) for m in again}
    round2 = assignor.assign(counts, final)
    check_valid(counts, final, round2)
    check_balanced(final, round2)
    for m in final:
        assert set(kept[m]) <= set(round2[m].partitions), "round 2 took back what round 1 kept"


def test_cooperative_generation_travels_in_user_data_for_v1_members() -> None:
    assignor = CooperativeStickyAssignor()
    assignor.on_assignment(Assignment(partitions=()), 9)
    data = assignor.subscription_user_data(["t"])
    assert data == struct.pack(">i", 9)
    v1 = decode_subscription(
        encode_subscription(
            Subscription(topics=("t",), user_data=data, owned_partitions=(("t", 0),)), 1
        )
    )
    assert assignor._owned(v1) == ((("t", 0),), 9)


def test_registry_and_protocols() -> None:
    assert set(ASSIGNORS) == {"range", "roundrobin", "sticky", "cooperative-sticky"}
    for name, cls in ASSIGNORS.items():
        instance = cls()
        assert instance.name == name and isinstance(instance, Assignor)
    assert CooperativeStickyAssignor.protocols[0] is RebalanceProtocol.COOPERATIVE
    with pytest.raises(KafkaConfigurationError, match="partition count"):
        RangeAssignor().assign({"t": -1}, {"m": sub("t")})
