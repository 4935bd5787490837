"""Fuzzing what a KIP-848 member reads out of a ConsumerGroupHeartbeat response: its
epoch, member id, heartbeat interval and target assignment (topic ids and partitions),
on a joining member and on a stable one.

Inputs are byte mutations of valid answers (the partitions, epochs and lengths change)
and fresh random valid entities of the response schema, decoded first; the member then
takes the answer, its events are drained and acted on as the consumer does (the
assignment or revocation done), and its next request is built. The only allowed
outcomes: that, or a KafkaError.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import cast

import pytest

from kafkastate.core.consumer.group import AssignPartitions, RevokePartitions
from kafkastate.core.consumer.group848 import ConsumerGroupMember
from kafkastate.core.protocol.framing import decode_body, encode_body
from kafkastate.core.protocol.versions import ApiKey, response_type
from kafkastate.errors import RemoteProtocolError
from tests._support.fuzzing import build_entity, derive, fuzz_count, run_mutations
from tests.core.consumer.test_group848 import TOPIC_ID, VERSIONS, answer, heartbeat, member

RESPONSE = response_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, VERSIONS.version_for(68))


def joined(*, stable: bool) -> ConsumerGroupMember:
    m = member()
    m.subscribe(["t"], now=0.0)
    m.update_topic_ids({TOPIC_ID: "t"}, now=0.0)
    m.coordinator_found(now=0.0)
    heartbeat(m)
    if stable:
        answer(m, epoch=3, parts=(0, 1))
        act(m, 0.1)
    return m


def act(m: ConsumerGroupMember, now: float) -> None:
    """Drain the events and answer them as the consumer does; build what it sends."""
    while (event := m.next_event()) is not None:
        if isinstance(event, AssignPartitions):
            m.assignment_done(now=now)
        elif isinstance(event, RevokePartitions):
            m.revocation_done(now=now)
    for request in m.take_requests():
        request.factory(VERSIONS)


class _Recorder:
    """Stands in for the member in ``answer``: keeps the answer it builds."""

    member_id = "cd613e30-d8f1-4adf-91b7-584a2265b1f5"
    body: object = None

    def handle_response(self, kind: str, body: object, *, now: float) -> None:
        self.body = body


def seeds() -> list[bytes]:
    """Valid answers: assignments of our topic id, an empty one, none."""
    out = []
    for parts in ((0, 1), (), (2,), None):
        recorder = _Recorder()
        answer(cast(ConsumerGroupMember, recorder), epoch=4, parts=parts)
        out.append(encode_body(recorder.body))
    return out


def derive_answer(seed: bytes, rng: random.Random, all_seeds: Sequence[bytes]) -> bytes:
    if rng.random() < 0.2:
        return encode_body(build_entity(RESPONSE, rng))
    return derive(seed, rng, all_seeds)


def take(data: bytes, *, stable: bool) -> None:
    body = decode_body(RESPONSE, memoryview(data), 0)
    m = joined(stable=stable)
    m.handle_response("heartbeat", body, now=1.0)
    act(m, 1.1)
    m.handle_timer(now=10.0)
    act(m, 10.0)


@pytest.mark.fuzz_loop
@pytest.mark.parametrize("state", ["joining", "stable"])
def test_mutated_heartbeat_answers(state: str) -> None:
    run_mutations(
        lambda data: take(data, stable=state == "stable"),
        seeds(),
        count=fuzz_count(250),
        seed=f"kip848-heartbeat-{state}",
        derive_input=derive_answer,
    )


# ------------------------------------------------------------------ crashers found

# Found by test_mutated_heartbeat_answers[joining] (its first 1,000 inputs):
# the Assignment's nullable-struct marker is 0x80 (-128). The length guard read any
# negative marker as null and skipped the struct; kio's reader takes only -1 for null, so
# it read the struct, whose compact array length (a 5-byte varint of 0) is null: the
# member iterated ``topic_partitions=None`` and raised TypeError out of handle_response.
NULL_MARKER_CRASHER = (
    b"\x00\x00\x00\x00\x00\x00\x00%cd613e30-d8f1-4adf-91b7-584a22\x00\x00\x00\x00\x00\x00"
    b"\x00\x00\x00\x00\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00\x00\x00\x00\x00\x07\x01\x00"
    b"\x00\x00"
)


def test_regression_nullable_struct_marker_other_than_minus_one_or_one() -> None:
    with pytest.raises(RemoteProtocolError, match="nullable struct marker -128"):
        take(NULL_MARKER_CRASHER, stable=False)
    with pytest.raises(RemoteProtocolError, match="nullable struct marker 0"):
        take(seeds()[0].replace(b"\x13\x88\x01", b"\x13\x88\x00"), stable=False)
