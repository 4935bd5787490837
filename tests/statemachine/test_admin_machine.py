"""The admin machine under random answers: every request it sends is answered at random --
success, a retriable error (NOT_CONTROLLER, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER), a final one, or a dropped connection
-- in a random order. Whatever happens, each operation completes exactly once, with an
outcome for every resource, no later than its deadline, and the machine's timer is never
left in the past (ScriptedCluster.advance checks that at every step)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kafkastate.admin import NewTopic, OffsetSpec
from kafkastate.core.admin import AdminOperationCompleted
from kafkastate.structs import TopicPartition
from tests._support.peer import ScriptedCluster, Sent
from tests.core.admin.test_admin_machine import (
    CLASSIC_GROUPS,
    _described,
    _find_answer,
    _offsets_answer,
    admin,
    answer,
    topic_result,
)

TIMEOUT = 3.0
ERRORS = {
    19: (ErrorCode.none, ErrorCode.not_controller, ErrorCode.topic_already_exists),
    10: (
        ErrorCode.none,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    ),
    15: (
        ErrorCode.none,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.group_authorization_failed,
    ),
    2: (ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.offset_not_available),
}


def _answer(cluster: ScriptedCluster, sent: Sent, code: ErrorCode, node: int) -> None:
    key = sent.req.api_key
    if key == 19:
        topics = tuple(topic_result(sent, t.name, code) for t in sent.req.body.topics)
        answer(cluster, sent, topics=topics)
    elif key == 10:
        _find_answer(cluster, sent, node if code == ErrorCode.none else -1, code)
    elif key == 15:
        answer(cluster, sent, groups=tuple(_described(sent, g, code) for g in sent.req.body.groups))
    else:
        codes = {p.partition_index: code for t in sent.req.body.topics for p in t.partitions}
        _offsets_answer(cluster, sent, codes)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_operation_completes_once_by_its_deadline(data: st.DataObject) -> None:
    # a broker without ConsumerGroupDescribe: groups are described with DescribeGroups,
    # whose retriable answers this test draws (ConsumerGroupDescribe's have their own test)
    m, cluster = admin(api_ranges=CLASSIC_GROUPS)
    now = cluster.now
    ops: dict[Any, list[Any]] = {
        m.create_topics([NewTopic("a"), NewTopic("b")], now=now, timeout=TIMEOUT): ["a", "b"],
        m.describe_consumer_groups(["g", "h"], now=now, timeout=TIMEOUT): ["g", "h"],
        m.list_offsets(
            {TopicPartition("t", 0): OffsetSpec.LATEST, TopicPartition("t", 1): 5},
            now=now,
            timeout=TIMEOUT,
        ): [TopicPartition("t", 0), TopicPartition("t", 1)],
    }
    cluster.pump()
    for _ in range(400):
        if m.in_flight == 0:
            break
        if cluster.pending and data.draw(st.booleans(), label="answer now"):
            sent = data.draw(st.sampled_from(cluster.pending), label="which request")
            if sent.auto is not None:
                continue  # a Metadata answer queued behind another: it goes with that one
            if data.draw(st.integers(0, 9), label="drop") == 0:
                cluster.pending = [s for s in cluster.pending if s.node != sent.node]
                cluster.open.discard(sent.node)
                m.connection_lost(sent.node, now=cluster.now, error=OSError("dropped"))
                cluster.pump()
                continue
            code = data.draw(st.sampled_from(ERRORS[sent.req.api_key]), label="error")
            _answer(cluster, sent, code, data.draw(st.sampled_from([1, 2]), label="node"))
        else:
            cluster.advance()
    assert m.in_flight == 0
    assert cluster.now <= now + TIMEOUT + 1e-9
    done = [e for e in cluster.events if isinstance(e, AdminOperationCompleted)]
    assert sorted(e.op_id for e in done) == sorted(ops)  # each exactly once
    for event in done:
        assert list(event.results) == ops[event.op_id]  # every resource, in order
