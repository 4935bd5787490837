"""ConsumerGroupMember (KIP-848): by hand against scripted answers, and two members against
real Kafka 4.3's consumer-protocol coordinator (ConsumerGroupHeartbeat over a blocking
connection each)."""

from __future__ import annotations

import datetime
import random
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.adapters.blocking import BlockingAdmin, BlockingConnection
from kafkastate.core.consumer.group import AssignPartitions, GroupFailed, RevokePartitions
from kafkastate.core.consumer.group848 import (
    ConsumerGroupConfig,
    ConsumerGroupMember,
    Member848State,
)
from kafkastate.core.protocol.requests import NewTopic, build, nested_type
from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    response_type,
)
from kafkastate.errors import IllegalStateError, KafkaConnectionError, UnsupportedVersionError
from tests._support.coordinators import GROUP, wait_for_coordinators

VERSIONS = ApiVersionTable(CLIENT_VERSIONS)
TOPIC_ID = uuid.UUID(int=7)


def member(**kw: Any) -> ConsumerGroupMember:
    return ConsumerGroupMember(ConsumerGroupConfig(group_id="g", **kw), rng=random.Random(1))


def heartbeat(m: ConsumerGroupMember, kind: str = "heartbeat") -> Any:
    (out,) = m.take_requests()
    assert out.kind == kind
    return out.factory(VERSIONS)


def answer(
    m: ConsumerGroupMember,
    *,
    code: int = 0,
    epoch: int = 1,
    parts: tuple[int, ...] | None = None,
    now: float = 0.0,
    interval: float = 5.0,
) -> None:
    cls = response_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, VERSIONS.version_for(68))
    assignment = None
    if parts is not None:
        tp_cls = nested_type(cls, "TopicPartitions")
        assignment = build(
            nested_type(cls, "Assignment"),
            topic_partitions=(build(tp_cls, topic_id=TOPIC_ID, partitions=parts),),
        )
    body = build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode(code),
        error_message=None,
        member_id=m.member_id,
        member_epoch=epoch,
        heartbeat_interval=datetime.timedelta(seconds=interval),
        assignment=assignment,
    )
    m.handle_response("heartbeat", body, now=now)


def events(m: ConsumerGroupMember) -> list[Any]:
    out = []
    while (event := m.next_event()) is not None:
        out.append(event)
    return out


def test_join_reconcile_and_report() -> None:
    m = member(group_remote_assignor="uniform", max_poll_interval=60.0)
    m.subscribe(["t"], now=0.0)
    m.update_topic_ids({TOPIC_ID: "t"}, now=0.0)
    assert m.take_requests() == []  # no coordinator yet
    m.coordinator_found(now=0.0)
    join = heartbeat(m)
    assert (join.member_epoch, join.member_id) == (0, m.member_id)
    assert join.subscribed_topic_names == ("t",) and join.server_assignor == "uniform"
    assert join.rebalance_timeout == datetime.timedelta(seconds=60)
    assert join.topic_partitions == ()
    uuid.UUID(m.member_id)  # client-generated (KIP-1082)
    answer(m, epoch=3, parts=(0, 1))
    (assign,) = events(m)
    assert assign == AssignPartitions(assigned=(("t", 0), ("t", 1)), added=(("t", 0), ("t", 1)),
                                      generation=3)  # fmt: skip
    assert m.take_requests() == []  # heartbeat in flight? no: waits for the application
    m.assignment_done(now=0.1)
    report = heartbeat(m)  # at once: the coordinator learns what is owned
    assert report.member_epoch == 3
    assert [(t.topic_id, t.partitions) for t in report.topic_partitions] == [(TOPIC_ID, (0, 1))]
    assert m.state is Member848State.STABLE and m.commit_identity() == (3, m.member_id, None)
    answer(m, epoch=3, now=0.2)
    assert m.get_timer() == pytest.approx(5.2)


@pytest.mark.parametrize("bad", [0.0, -1.0, -2_160_000.0])
def test_a_heartbeat_interval_that_is_not_positive_keeps_the_last_one(bad: float) -> None:
    # The fuzzer's input: an answer with a negative interval (about -25 days) made the
    # member heartbeat without pause.
    m = member()
    m.subscribe(["t"], now=0.0)
    m.update_topic_ids({TOPIC_ID: "t"}, now=0.0)
    m.coordinator_found(now=0.0)
    heartbeat(m)
    answer(m, epoch=1, now=0.0, interval=3.0)
    assert m.get_timer() == pytest.approx(3.0)
    answer(m, epoch=1, now=10.0, interval=bad)
    assert m.get_timer() == pytest.approx(13.0)


def test_revoke_first_then_assign() -> None:
    m = member()
    m.subscribe(["t"], now=0.0)
    m.update_topic_ids({TOPIC_ID: "t"}, now=0.0)
    m.coordinator_found(now=0.0)
    heartbeat(m)
    answer(m, epoch=1, parts=(0, 1))
    events(m)
    m.assignment_done(now=0.0)
    heartbeat(m)
    answer(m, epoch=2, parts=(1, 2), now=1.0)  # 0 moves away, 2 comes
    (revoke,) = events(m)
    assert revoke == RevokePartitions(partitions=(("t", 0),), lost=False)
    m.revocation_done(now=1.1)
    ack = heartbeat(m)  # reports the revocation before taking anything new
    assert [(t.partitions) for t in ack.topic_partitions] == [(1,)]
    (assign,) = events(m)
    assert assign.added == (("t", 2),) and assign.assigned == (("t", 1), ("t", 2))


def test_fenced_member_loses_partitions_and_rejoins_at_epoch_zero() -> None:
    m = member()
    m.subscribe(["t"], now=0.0)
    m.update_topic_ids({TOPIC_ID: "t"}, now=0.0)
    m.coordinator_found(now=0.0)
    heartbeat(m)
    answer(m, epoch=4, parts=(0,))
    events(m)
    m.assignment_done(now=0.0)
    heartbeat(m)
    answer(m, code=110, now=1.0)  # FENCED_MEMBER_EPOCH
    (lost,) = events(m)
    assert lost.lost and lost.partitions == (("t", 0),)
    m.revocation_done(now=1.0)
    rejoin = heartbeat(m)
    assert rejoin.member_epoch == 0 and rejoin.topic_partitions == ()


def test_fatal_errors_and_leaving() -> None:
    m = member()
    m.subscribe(["t"], now=0.0)
    m.coordinator_found(now=0.0)
    heartbeat(m)
    answer(m, code=112)  # UNSUPPORTED_ASSIGNOR
    (failed,) = events(m)
    assert isinstance(failed, GroupFailed) and m.state is Member848State.FAILED
    with pytest.raises(IllegalStateError):
        m.subscribe(["t"], now=1.0)
    static = member(group_instance_id="i-1")
    static.subscribe(["t"], now=0.0)
    static.coordinator_found(now=0.0)
    heartbeat(static)
    answer(static, epoch=2)
    static.close(now=1.0)
    assert heartbeat(static, "leave").member_epoch == -2  # a static member's temporary leave


def stable(m: ConsumerGroupMember, parts: tuple[int, ...] = (0, 1)) -> None:
    """Join with ``parts`` of t at epoch 3, the assignment applied and reported."""
    m.subscribe(["t"], now=0.0)
    m.update_topic_ids({TOPIC_ID: "t"}, now=0.0)
    m.coordinator_found(now=0.0)
    heartbeat(m)
    answer(m, epoch=3, parts=parts)
    if events(m):
        m.assignment_done(now=0.0)
        heartbeat(m)
        answer(m, epoch=3)


def test_unsubscribe_revokes_then_leaves_and_subscribe_joins_again() -> None:
    m = member()
    stable(m)
    member_id = m.member_id
    m.unsubscribe(now=1.0)
    (revoke,) = events(m)
    assert revoke == RevokePartitions(partitions=(("t", 0), ("t", 1)), lost=False)
    assert m.take_requests() == []  # the application revokes (and may commit) first
    m.revocation_done(now=1.1)
    leave = heartbeat(m, "leave")
    assert (leave.member_epoch, leave.member_id) == (-1, member_id)
    assert leave.subscribed_topic_names is None and leave.topic_partitions is None
    assert m.state is Member848State.UNSUBSCRIBED and m.generation == -1
    assert m.get_timer() is None and m.take_requests() == []
    m.handle_response("leave", None, now=1.2)  # the leave's answer changes nothing
    assert m.state is Member848State.UNSUBSCRIBED
    m.subscribe(["t"], now=2.0)
    join = heartbeat(m)
    assert (join.member_epoch, join.member_id) == (0, member_id)  # KIP-1082: same id
    assert join.subscribed_topic_names == ("t",) and join.topic_partitions == ()


def test_unsubscribe_of_a_static_member_leaves_temporarily() -> None:
    m = member(group_instance_id="i-1")
    stable(m, parts=())
    m.unsubscribe(now=1.0)
    assert events(m) == []  # nothing owned, nothing to revoke
    assert heartbeat(m, "leave").member_epoch == -2


def test_subscribe_while_unsubscribing_leaves_then_joins_anew() -> None:
    m = member()
    stable(m)
    m.unsubscribe(now=1.0)
    events(m)
    m.subscribe(["t"], now=1.05)  # before the application finished revoking
    m.revocation_done(now=1.1)
    sent = m.take_requests()
    assert [out.kind for out in sent] == ["heartbeat", "leave", "heartbeat"]
    epochs = [out.factory(VERSIONS).member_epoch for out in sent]
    assert epochs == [3, -1, 0]  # still a member while revoking; leave; join anew
    assert m.state is Member848State.JOINING
    answer(m, epoch=3, parts=(0, 1), now=1.2)  # the first heartbeat's: dropped
    assert events(m) == [] and m.take_requests() == []
    answer(m, epoch=5, parts=(1,), now=1.3)  # the join's
    (assign,) = events(m)
    assert assign.assigned == (("t", 1),) and m.epoch == 5


def test_unsubscribe_during_a_join_leaves_with_the_epoch_its_answer_gives() -> None:
    m = member()
    m.subscribe(["t"], now=0.0)
    m.update_topic_ids({TOPIC_ID: "t"}, now=0.0)
    m.coordinator_found(now=0.0)
    heartbeat(m)  # the join, in flight
    m.unsubscribe(now=0.5)
    assert m.take_requests() == [] and m.state is Member848State.JOINING
    answer(m, epoch=4, parts=(0,), now=0.6)
    assert events(m) == []  # not subscribed any more: nothing is assigned
    assert heartbeat(m, "leave").member_epoch == -1
    assert m.state is Member848State.UNSUBSCRIBED


def test_the_answer_in_flight_when_a_poll_timeout_left_is_dropped() -> None:
    m = member(max_poll_interval=10.0)
    stable(m)
    m.handle_timer(now=5.0)
    heartbeat(m)  # a regular heartbeat, in flight
    m.handle_timer(now=10.5)  # no poll for max_poll_interval: leave
    (lost,) = events(m)
    assert lost == RevokePartitions(partitions=(("t", 0), ("t", 1)), lost=True)
    m.revocation_done(now=10.5)
    assert heartbeat(m, "leave").member_epoch == -1
    answer(m, epoch=3, parts=(0, 1, 2), now=10.6)  # late: the membership it names ended
    assert events(m) == [] and m.state is Member848State.UNSUBSCRIBED
    assert m.generation == -1
    m.polled(now=11.0)  # the next poll joins again, at epoch 0
    assert heartbeat(m).member_epoch == 0


# ---------------------------------------------------------------------- real Kafka


class _Driven:
    """A member over its own blocking connection, its application answering at once."""

    def __init__(
        self, host: str, port: int, group: str, topic: str, ids: dict[Any, str], *, seed: int
    ) -> None:
        self.conn = BlockingConnection.open(host, port, timeout=20)
        versions = self.conn.versions
        assert versions is not None
        self.versions = versions
        self.member = ConsumerGroupMember(
            ConsumerGroupConfig(group_id=group, max_poll_interval=60.0),
            rng=random.Random(seed),
        )
        wait_for_coordinators(
            self.conn, versions, (GROUP,)
        )  # FindCoordinator loads the group topic
        self.member.subscribe([topic], now=time.monotonic())
        self.member.update_topic_ids(ids, now=time.monotonic())
        self.member.coordinator_found(now=time.monotonic())
        self.owned: set[tuple[str, int]] = set()

    def turn(self) -> None:
        now = time.monotonic()
        if self.member.coordinator_wanted:  # one broker: it is the coordinator
            self.member.coordinator_found(now=now)
        self.member.handle_timer(now=now)
        self.member.polled(now=now)
        for out in self.member.take_requests():
            response = self.conn.request(out.factory(self.versions), timeout=out.timeout)
            self.member.handle_response(out.kind, response, now=time.monotonic())
        while (event := self.member.next_event()) is not None:
            if isinstance(event, RevokePartitions):
                self.owned -= set(event.partitions)
                self.member.revocation_done(now=time.monotonic())
            elif isinstance(event, AssignPartitions):
                self.owned = set(event.assigned)
                self.member.assignment_done(now=time.monotonic())
            else:
                raise AssertionError(event)


def _settle(members: list[_Driven], expect: set[tuple[str, int]], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for d in members:
            d.turn()
        owned = [tp for d in members for tp in d.owned]
        shares = sorted(len(d.owned) for d in members)
        if sorted(owned) == sorted(expect) and shares[-1] - shares[0] <= 1:
            return
        time.sleep(0.2)
    raise AssertionError(f"no balanced assignment: {[sorted(d.owned) for d in members]}")


@pytest.mark.kafka_needs("single_broker")
@pytest.mark.integration
def test_two_members_share_partitions_on_real_kafka(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    host, port = bootstrap.rsplit(":", 1)
    topic = f"kip848-{uuid.uuid4().hex[:6]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=4)])
        ids = {t.topic_id: t.name for t in admin.metadata([topic]).topics}
    group = f"g-{uuid.uuid4().hex[:8]}"
    everything = {(topic, p) for p in range(4)}
    first = _Driven(host, int(port), group, topic, ids, seed=1)
    try:
        _settle([first], everything)
        second = _Driven(host, int(port), group, topic, ids, seed=2)
        try:
            _settle([first, second], everything)  # 2 + 2, handed over without overlap
            assert not first.owned & second.owned
            assert first.member.epoch > 1 and second.member.epoch >= 1
            second.member.close(now=time.monotonic())  # epoch -1
            second.turn()
            _settle([first], everything)  # everything comes back
        finally:
            second.conn.close()
    finally:
        first.conn.close()


def test_a_broker_without_consumer_group_heartbeat_fails_the_group_at_once() -> None:
    """Kafka 2.8/3.6 offer no ConsumerGroupHeartbeat: the member must fail, naming the
    feature, instead of looking for the coordinator again for ever (issue 25)."""
    old = ApiVersionTable({k: v for k, v in CLIENT_VERSIONS.items() if k != 68})
    m = member()
    m.subscribe(["t"], now=0.0)
    m.coordinator_found(now=0.0)
    (out,) = m.take_requests()
    with pytest.raises(UnsupportedVersionError) as info:
        out.factory(old)
    error = info.value.on_node(1)
    assert "group_protocol='consumer' (KIP-848)" in str(error)
    assert "broker node 1" in str(error) and "does not offer it" in str(error)
    assert "group_protocol='classic'" in str(error)
    assert (error.feature, error.node_id, error.api_key) == (
        "group_protocol='consumer' (KIP-848)",
        1,
        68,
    )
    m.handle_failure("heartbeat", error, now=0.1)
    (failed,) = events(m)
    assert failed == GroupFailed(error=error)
    assert m.state is Member848State.FAILED and not m.coordinator_wanted
    assert m.get_timer() is None and m.take_requests() == []
    # a lost request is still only a coordinator problem
    other = member()
    other.subscribe(["t"], now=0.0)
    other.coordinator_found(now=0.0)
    other.take_requests()
    other.handle_failure("heartbeat", KafkaConnectionError("reset"), now=0.1)
    assert other.coordinator_wanted and other.state is not Member848State.FAILED
