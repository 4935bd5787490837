"""Fuzzing the group protocol's peer bytes: member metadata (ConsumerProtocolSubscription,
JoinGroup), assignments (ConsumerProtocolAssignment, SyncGroup) and the sticky assignors'
user data — every version, as the leader and the members read them.

A decoded subscription is also handed to every assignor, as the leader does: another
member's corrupt metadata may fail the decode with a KafkaError, never the assignment.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastate.core.consumer import assignors as asg
from kafkastate.errors import RemoteProtocolError
from tests._support.fuzzing import FUZZ, check_each, fuzz_count, run_mutations

TOPICS = ("orders", "payments", "é")
ASSIGNORS = (
    asg.RangeAssignor,
    asg.RoundRobinAssignor,
    asg.StickyAssignor,
    asg.CooperativeStickyAssignor,
)


def owned(rng: random.Random) -> tuple[tuple[str, int], ...]:
    return tuple(sorted({(rng.choice(TOPICS), rng.randrange(6)) for _ in range(rng.randint(0, 5))}))


def subscriptions() -> list[bytes]:
    rng = random.Random("subscriptions")
    out = []
    for version in range(asg.SUBSCRIPTION_VERSION + 1):
        for _ in range(3):
            sub = asg.Subscription(
                topics=tuple(rng.sample(TOPICS, rng.randint(1, 3))),
                user_data=rng.choice(
                    [None, b"", asg.encode_sticky_user_data(owned(rng), rng.randint(-1, 9))]
                ),
                owned_partitions=owned(rng),
                generation_id=rng.randint(-1, 100),
                rack_id=rng.choice([None, "rack-a"]),
            )
            out.append(asg.encode_subscription(sub, version))
    return out


def assignments() -> list[bytes]:
    rng = random.Random("assignments")
    return [
        asg.encode_assignment(asg.Assignment(partitions=owned(rng), user_data=b"u" * i), version)
        for version in range(asg.ASSIGNMENT_VERSION + 1)
        for i in range(3)
    ]


def sticky_user_data() -> list[bytes]:
    rng = random.Random("sticky")
    seeds = [asg.encode_sticky_user_data(owned(rng), rng.randint(-1, 9)) for _ in range(4)]
    return [*seeds, seeds[0][:-4]]  # v0: no generation


def lead(data: bytes) -> None:
    """Decode a member's metadata and run every assignor on it, as the group leader."""
    sub = asg.decode_subscription(data)
    for assignor in ASSIGNORS:
        assignor().assign({"orders": 3, "payments": 2, "é": 1}, {"m1": sub, "m2": sub})


def test_seeds_round_trip() -> None:
    for data in subscriptions():
        lead(data)
    for data in assignments():
        assert asg.encode_assignment(asg.decode_assignment(data)) == asg.encode_assignment(
            asg.decode_assignment(asg.encode_assignment(asg.decode_assignment(data)))
        )
    for data in sticky_user_data():
        asg.decode_sticky_user_data(data)


@pytest.mark.fuzz_loop
def test_mutated_subscriptions() -> None:
    run_mutations(lead, subscriptions(), count=fuzz_count(), seed="subscription")


@pytest.mark.fuzz_loop
def test_mutated_assignments() -> None:
    run_mutations(asg.decode_assignment, assignments(), count=fuzz_count(), seed="assignment")


@pytest.mark.fuzz_loop
def test_mutated_sticky_user_data() -> None:
    run_mutations(
        asg.decode_sticky_user_data, sticky_user_data(), count=fuzz_count(), seed="sticky"
    )


@given(st.binary(max_size=200))
@FUZZ
def test_arbitrary_bytes(data: bytes) -> None:
    check_each(data, lead, asg.decode_assignment, asg.decode_sticky_user_data)


@pytest.mark.parametrize("version", [asg.SUBSCRIPTION_VERSION + 1, 0x7FFF])
def test_newer_versions_read_as_the_newest_known(version: int) -> None:
    """A member on a newer protocol version: its fields we know are read, the rest is
    the KIP-482 compatible tail (here: none)."""
    data = asg.encode_subscription(asg.Subscription(topics=("orders",)))
    sub = asg.decode_subscription(version.to_bytes(2, "big") + data[2:])
    assert sub.topics == ("orders",)


# ------------------------------------------------------------------ crashers found


def test_regression_null_assigned_partitions() -> None:
    """Found by test_mutated_assignments: assignment v3 whose partition array has length
    -1 decoded with ``assigned_partitions=None``, and iterating it raised TypeError."""
    with pytest.raises(RemoteProtocolError, match="array assigned_partitions is null"):
        asg.decode_assignment(b"\x00\x03\xff\xff\xff\xff\x00\x00\x00\x00")


def test_regression_null_topics_in_subscription() -> None:
    """The same shape in member metadata (subscription v0, topics of length -1)."""
    with pytest.raises(RemoteProtocolError, match="array topics is null"):
        asg.decode_subscription(b"\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff")
