"""A classic group member cut off from its coordinator for longer than its session, against
real Kafka: the only broker is paused (SIGSTOP), so no heartbeat is answered. As librdkafka,
the member declares its partitions lost when its session ends (Java keeps them), and joins
again as a new member once the coordinator answers."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer
from tests.integration.test_group_listeners import FAST, Recorder
from tests.integration.test_groups import _topic

pytestmark = pytest.mark.integration


def test_a_member_whose_heartbeats_go_unanswered_for_the_session_loses_its_partitions(
    kafka_cluster: Any,
) -> None:
    if not kafka_cluster.controllable:
        pytest.skip("KAFKASTATE_BOOTSTRAP names a cluster the harness cannot pause")
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    options = {
        "bootstrap_servers": bootstrap,
        "group_id": f"g-{uuid.uuid4().hex[:8]}",
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        **FAST,  # a 6 s session, a heartbeat a second
    }
    listener = Recorder()
    with KafkaConsumer(**options) as member:
        member.subscribe([topic], listener=listener)
        deadline = time.monotonic() + 30
        while len(member.assignment()) != 2:
            assert time.monotonic() < deadline, member.assignment()
            member.poll(timeout_ms=100)
        broker = kafka_cluster.brokers[0]
        broker.pause()
        try:
            paused_at = time.monotonic()
            while not any(call[0] == "lost" for call in listener.calls):
                assert time.monotonic() < paused_at + 15, listener.calls
                member.poll(timeout_ms=100)
            lost_after = time.monotonic() - paused_at
            assert member.assignment() == set()
        finally:
            broker.resume(settle=True)
        # the last answered heartbeat was sent at most a second before the pause
        assert lost_after < 6.0 + 1.0, lost_after
        assert listener.calls[-1] == ("lost", {0, 1}), listener.calls
        deadline = time.monotonic() + 40
        while listener.calls[-1] != ("assigned", {0, 1}):  # joins again once answered
            assert time.monotonic() < deadline, (member.assignment(), listener.calls)
            member.poll(timeout_ms=100)
        assert member.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
