"""The simulated classic coordinator against real Kafka (DST.md A3.9): the same scripted
JoinGroup / SyncGroup / Heartbeat / OffsetCommit / LeaveGroup conversation of two members
runs against both; the answers, with member ids replaced by the members' names, must be
the same. A difference is a bug in the simulator (or a Kafka version it does not model)."""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin, BlockingConnection
from kafkastate.core.consumer.assignors import Assignment, decode_assignment, encode_assignment
from kafkastate.core.protocol.requests import NewTopic, build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.sim.coordinator import ClassicCoordinator

pytestmark = pytest.mark.integration

SESSION = datetime.timedelta(seconds=10)
REBALANCE = datetime.timedelta(seconds=20)

Send = Callable[[str, int, Any], Any]  # (member, api key, request) -> response


def conversation(send: Send, versions: ApiVersionTable, group: str, topic: str) -> dict[str, Any]:
    """Two members, A then B, through two generations; the normalised answers by step."""
    ids: dict[str, str] = {}
    out: dict[str, Any] = {}

    def name(member_id: str) -> str:
        return next((k for k, v in ids.items() if v == member_id), "?" if member_id else "")

    def join(member: str) -> Any:
        cls = versions.request_type(ApiKey.JOIN_GROUP)
        proto = build(nested_type(cls, "JoinGroupRequestProtocol"), name="range", metadata=b"m")
        req = build(cls, group_id=group, session_timeout=SESSION, rebalance_timeout=REBALANCE,
                    member_id=ids.get(member, ""), group_instance_id=None,
                    protocol_type="consumer", protocols=(proto,), reason=None)  # fmt: skip
        return send(member, ApiKey.JOIN_GROUP, req)

    def joined(step: str, member: str, response: Any) -> None:
        if response.member_id:  # MEMBER_ID_REQUIRED carries the id to come back with
            ids[member] = str(response.member_id)
        out[step] = (
            int(response.error_code),
            int(response.generation_id),
            name(str(response.leader)),
            name(str(response.member_id)),
            sorted(name(str(m.member_id)) for m in response.members),
        )

    def sync(step: str, member: str, generation: int, plan: dict[str, tuple[int, ...]]) -> None:
        cls = versions.request_type(ApiKey.SYNC_GROUP)
        entry = nested_type(cls, "SyncGroupRequestAssignment")
        assignments = tuple(
            build(entry, member_id=ids[m], assignment=_assignment(topic, ps))
            for m, ps in plan.items()
        )
        req = build(cls, group_id=group, generation_id=generation, member_id=ids[member],
                    group_instance_id=None, protocol_type="consumer", protocol_name="range",
                    assignments=assignments)  # fmt: skip
        response = send(member, ApiKey.SYNC_GROUP, req)
        got = decode_assignment(bytes(response.assignment or b"")).partitions
        out[step] = (int(response.error_code), [p for _t, p in got])

    def heartbeat(step: str, member: str, generation: int) -> None:
        req = build(
            versions.request_type(ApiKey.HEARTBEAT),
            group_id=group,
            generation_id=generation,
            member_id=ids[member],
            group_instance_id=None,
        )
        out[step] = int(send(member, ApiKey.HEARTBEAT, req).error_code)

    def commit(step: str, member: str, generation: int) -> None:
        cls = request_type(ApiKey.OFFSET_COMMIT, 9)  # v9: topics by name (v10: by id)
        part = build(nested_type(cls, "OffsetCommitRequestPartition"), partition_index=0,
                     committed_offset=5, committed_leader_epoch=-1, committed_metadata="",
                     commit_timestamp=-1)  # fmt: skip
        req = build(cls, group_id=group, generation_id_or_member_epoch=generation,
                    generation_id=generation, member_id=ids[member], group_instance_id=None,
                    retention_time=datetime.timedelta(milliseconds=-1),
                    topics=(build(nested_type(cls, "OffsetCommitRequestTopic"), name=topic,
                                  topic_id=None, partitions=(part,)),))  # fmt: skip
        response = send(member, ApiKey.OFFSET_COMMIT, req)
        out[step] = [int(p.error_code) for t in response.topics for p in t.partitions]

    def leave(step: str, member: str) -> None:
        cls = versions.request_type(ApiKey.LEAVE_GROUP)
        identity = build(nested_type(cls, "MemberIdentity"), member_id=ids[member],
                         group_instance_id=None, reason=None)  # fmt: skip
        response = send(member, ApiKey.LEAVE_GROUP, build(cls, group_id=group, members=(identity,)))
        out[step] = (int(response.error_code), [int(m.error_code) for m in response.members])

    joined("A join (no id)", "A", join("A"))
    joined("A join", "A", join("A"))
    sync("A sync 1", "A", 1, {"A": (0, 1, 2, 3)})
    heartbeat("A heartbeat 1", "A", 1)
    commit("A commit 1", "A", 1)
    joined("B join (no id)", "B", join("B"))
    parked: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: parked.update(b=join("B")))
    thread.start()  # parked until A rejoins
    _wait_parked(thread)
    heartbeat("A heartbeat while B waits", "A", 1)
    joined("A rejoin", "A", join("A"))
    thread.join(30)
    joined("B join", "B", parked["b"])
    commit("A commit, old generation", "A", 1)
    sync_b = threading.Thread(target=lambda: sync("B sync 2", "B", 2, {}))
    sync_b.start()  # parked until the leader's SyncGroup
    _wait_parked(sync_b)
    sync("A sync 2", "A", 2, {"A": (0, 1), "B": (2, 3)})
    sync_b.join(30)
    commit("A commit 2", "A", 2)
    heartbeat("B heartbeat 2", "B", 2)
    leave("B leaves", "B")
    heartbeat("A heartbeat after B left", "A", 2)
    return out


def _wait_for_coordinator(conn: BlockingConnection, versions: ApiVersionTable) -> None:
    """A fresh broker creates __consumer_offsets on the first group request: wait."""
    cls = versions.request_type(ApiKey.FIND_COORDINATOR)
    deadline = time.monotonic() + 60
    while True:
        response = conn.request(build(cls, key="probe", key_type=0, coordinator_keys=("probe",)))
        coordinators = getattr(response, "coordinators", None) or (response,)
        if int(coordinators[0].error_code) == 0:
            return
        assert time.monotonic() < deadline, f"no group coordinator: {response}"
        time.sleep(0.2)


def _assignment(topic: str, partitions: tuple[int, ...]) -> bytes:
    return encode_assignment(Assignment(partitions=tuple((topic, p) for p in partitions)))


def _wait_parked(thread: threading.Thread) -> None:
    thread.join(1.0)  # long enough for the request to reach the coordinator and park
    assert thread.is_alive(), "the request was expected to wait at the coordinator"


@pytest.mark.kafka_needs("single_broker")
def test_the_simulated_coordinator_answers_like_kafka(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    host, port = bootstrap.rsplit(":", 1)
    topic = f"conform-{uuid.uuid4().hex[:6]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=4)])
    conns = {m: BlockingConnection.open(host, int(port), timeout=20) for m in ("A", "B")}
    try:
        versions = conns["A"].versions
        assert versions is not None

        def real(member: str, _api: int, req: Any) -> Any:
            return conns[member].request(req, timeout=60)

        _wait_for_coordinator(conns["A"], versions)

        kafka = conversation(real, versions, f"g-{uuid.uuid4().hex[:8]}", topic)
    finally:
        for conn in conns.values():
            conn.close()

    sim = ClassicCoordinator()
    waiting: dict[tuple[str, int], Any] = {}
    lock = threading.Lock()
    done = threading.Condition(lock)
    clock = [0.0]

    def simulated(member: str, api: int, req: Any) -> Any:
        token = (member, api)
        with done:
            sim.handle(token, api, versions.version_for(api), req, now=clock[0])
            for reply in sim.take_replies():
                waiting[reply.token] = reply.response  # type: ignore[index]
            done.notify_all()
            assert done.wait_for(lambda: token in waiting, timeout=30)
            return waiting.pop(token)

    simulation = conversation(simulated, versions, "g", topic)
    assert simulation == kafka, (simulation, kafka)
    assert kafka["A commit, old generation"] == [22]  # ILLEGAL_GENERATION: fenced
    assert kafka["A heartbeat while B waits"] == 27  # REBALANCE_IN_PROGRESS
