"""FetcherMachine with group membership, byte level against a scripted cluster: subscribe,
find the coordinator, join, sync, fetch from the committed offsets; a cooperative
rebalance that takes a partition away; commits fenced by generation; leaving on close."""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    decode_assignment,
    encode_assignment,
)
from kafkastate.core.consumer.fetcher import (
    FetcherMachine,
    GroupFailed,
    PartitionsAssigned,
    PartitionsRevoked,
)
from kafkastate.core.consumer.group import GroupConfig, MemberState
from kafkastate.core.consumer.group848 import ConsumerGroupConfig
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, response_type
from kafkastate.errors import GroupAuthorizationFailedError, IllegalStateError
from tests._support.peer import Sent
from tests.core.consumer.test_fetcher_validation import FetcherPeer, answer_coordinator, batch

NO_TIME = datetime.timedelta(0)


def group_peer(**kw: Any) -> FetcherPeer:
    group = GroupConfig(
        group_id="g", assignors=(CooperativeStickyAssignor(),), session_timeout=10.0, **kw
    )
    return FetcherPeer(partitions=2, group=group, group_id="g", auto_offset_reset="earliest")


def answer(peer: FetcherPeer, api_key: int, **fields: Any) -> Sent:
    sent = peer.take(api_key)
    cls = response_type(api_key, sent.req.version)
    peer.answer(sent, build(cls, throttle_time=NO_TIME, **fields))
    return sent


def answer_join(
    peer: FetcherPeer, *, code: int = 0, generation: int = 1, leader: str = "m-1"
) -> Sent:
    """Answer the pending JoinGroup: member ``m-1``, the group's only member when it leads."""
    sent = peer.take(ApiKey.JOIN_GROUP)
    req = sent.req.body
    cls = response_type(ApiKey.JOIN_GROUP, sent.req.version)
    member_cls = nested_type(cls, "JoinGroupResponseMember")
    members = (build(member_cls, member_id="m-1", group_instance_id=None,
                     metadata=req.protocols[0].metadata),)  # fmt: skip
    peer.answer(
        sent,
        build(
            cls,
            throttle_time=NO_TIME,
            error_code=ErrorCode(code),
            generation_id=generation,
            protocol_type="consumer",
            protocol_name=req.protocols[0].name,
            leader=leader,
            skip_assignment=False,
            member_id="m-1",
            members=members if code == 0 and leader == "m-1" else (),
        ),
    )
    return sent


def answer_sync(peer: FetcherPeer, partitions: tuple[tuple[str, int], ...] | None = None) -> Any:
    sent = peer.take(ApiKey.SYNC_GROUP)
    if partitions is None:  # what the leader (this member) assigned
        (entry,) = sent.req.body.assignments
        partitions = decode_assignment(entry.assignment).partitions
    cls = response_type(ApiKey.SYNC_GROUP, sent.req.version)
    body = build(
        cls,
        throttle_time=NO_TIME,
        error_code=ErrorCode.none,
        protocol_type="consumer",
        protocol_name="cooperative-sticky",
        assignment=encode_assignment(Assignment(partitions=partitions)),
    )
    peer.answer(sent, body)
    return sent.req.body


def answer_offset_fetch(peer: FetcherPeer, committed: dict[int, int]) -> None:
    sent = peer.take(ApiKey.OFFSET_FETCH)
    cls = response_type(ApiKey.OFFSET_FETCH, sent.req.version)
    topic_id = {n: i for i, n in peer.topic_ids().items()}["t"]
    parts = tuple(
        build(
            nested_type(cls, "OffsetFetchResponsePartitions"),
            partition_index=p,
            committed_offset=o,
            committed_leader_epoch=-1,
            metadata="",
            error_code=ErrorCode.none,
        )
        for p, o in committed.items()
    )
    topic = build(
        nested_type(cls, "OffsetFetchResponseTopics"), topic_id=topic_id, partitions=parts
    )
    group = build(
        nested_type(cls, "OffsetFetchResponseGroup"), group_id="g", topics=(topic,),
        error_code=ErrorCode.none,
    )  # fmt: skip
    peer.answer(sent, build(cls, throttle_time=NO_TIME, groups=(group,)))


def answer_heartbeat848(
    peer: FetcherPeer, sent: Sent, *, epoch: int, partitions: tuple[int, ...]
) -> None:
    """Answer a ConsumerGroupHeartbeat: ``epoch``, partitions of ``t`` assigned."""
    cls = response_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, sent.req.version)
    topic_id = {n: i for i, n in peer.topic_ids().items()}["t"]
    tps = build(nested_type(cls, "TopicPartitions"), topic_id=topic_id, partitions=partitions)
    peer.answer(
        sent,
        build(
            cls,
            throttle_time=NO_TIME,
            error_code=ErrorCode.none,
            error_message=None,
            member_id=sent.req.body.member_id,
            member_epoch=epoch,
            heartbeat_interval=datetime.timedelta(seconds=5),
            assignment=build(
                nested_type(cls, "Assignment"), topic_partitions=(tps,) if partitions else ()
            ),
        ),
    )


def group_events(peer: FetcherPeer) -> list[Any]:
    return [
        e
        for e in peer.events
        if isinstance(e, PartitionsAssigned | PartitionsRevoked | GroupFailed)
    ]


def in_group(peer: FetcherPeer) -> None:
    """Coordinator found, joined alone, both partitions assigned and acknowledged."""
    answer_coordinator(peer)
    answer_join(peer)
    body = answer_sync(peer)
    assert (body.generation_id, body.member_id) == (1, "m-1")
    (assigned,) = group_events(peer)
    assert assigned == PartitionsAssigned(
        assigned=(("t", 0), ("t", 1)), added=(("t", 0), ("t", 1)), generation=1
    )
    assert peer.m.assignment() == (("t", 0), ("t", 1))
    peer.m.assignment_done(now=peer.now)
    peer.pump()
    peer.events.clear()


def test_subscribe_join_and_fetch_from_the_committed_offsets() -> None:
    peer = group_peer()
    in_group(peer)
    assert peer.m.member is not None and peer.m.member.state is MemberState.STABLE
    answer_offset_fetch(peer, {0: 4, 1: 7})
    sent = peer.take(ApiKey.FETCH)
    offsets = {p.partition: p.fetch_offset for t in sent.req.body.topics for p in t.partitions}
    assert offsets == {0: 4, 1: 7}
    # a commit of a group member carries its generation and member id (fencing)
    peer.m.commit({("t", 0): 5}, now=peer.now)
    peer.pump()
    commit = peer.take(ApiKey.OFFSET_COMMIT).req.body
    assert (commit.generation_id_or_member_epoch, commit.member_id) == (1, "m-1")


def test_a_cooperative_rebalance_revokes_only_the_partition_that_moves() -> None:
    peer = group_peer()
    in_group(peer)
    answer_offset_fetch(peer, {0: 0, 1: 0})
    peer.answer_fetch(batch(0, 3, epoch=0), hw=3)  # data for t-0 waits for the application
    peer.advance(3.0)  # heartbeat due
    answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.rebalance_in_progress)
    answer_join(peer, generation=2)
    answer_sync(peer, (("t", 1),))  # t-0 goes to another member
    revoked, assigned = group_events(peer)
    assert revoked == PartitionsRevoked(partitions=(("t", 0),), lost=False)
    assert assigned.assigned == (("t", 1),) and assigned.added == ()
    # t-0 is neither handed out nor fetched while the application revokes it, but its
    # position is still there to commit
    assert peer.m.poll(10, now=peer.now) == []
    assert peer.m.position(("t", 0)) == 0
    peer.m.revocation_done(now=peer.now)
    peer.m.assignment_done(now=peer.now)
    peer.pump()
    assert peer.m.assignment() == (("t", 1),)
    rejoin = peer.take(ApiKey.JOIN_GROUP)  # KIP-429: the second round hands t-0 over
    assert rejoin.req.body.member_id == "m-1"


def test_a_session_over_without_an_answered_heartbeat_loses_the_partitions() -> None:
    # Found by a chaos run: heartbeats unanswered for longer than the session timeout (the
    # coordinator unreachable), the member kept its partitions and went on handing out
    # records the coordinator had meanwhile given to a new member. As librdkafka, they
    # are lost when the session ends, counted from the last answered heartbeat's sending.
    peer = group_peer(heartbeat_interval=3.0)
    in_group(peer)
    joined_at = peer.now
    answer_offset_fetch(peer, {0: 0, 1: 0})
    peer.answer_fetch(batch(0, 3, epoch=0), hw=3)  # records for t-0 wait in the buffer
    peer.advance(joined_at + 3.0)
    peer.take(ApiKey.HEARTBEAT)  # never answered
    peer.advance(joined_at + 9.9)
    assert group_events(peer) == []  # not yet
    peer.advance(joined_at + 10.0)
    (lost,) = group_events(peer)
    assert lost == PartitionsRevoked(partitions=(("t", 0), ("t", 1)), lost=True)
    assert peer.m.poll(10, now=peer.now) == []  # nothing more of them
    peer.m.commit({("t", 0): 3}, now=peer.now)
    peer.pump()
    assert not peer.has(ApiKey.OFFSET_COMMIT)  # refused here: outside any generation
    peer.m.revocation_done(now=peer.now)
    peer.pump()
    assert peer.m.assignment() == ()
    answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.none)  # too late: changes nothing
    assert group_events(peer) == [lost]
    while not peer.has(ApiKey.JOIN_GROUP):  # it looks for the coordinator again
        if peer.has(ApiKey.FIND_COORDINATOR):
            answer_coordinator(peer)
        else:
            peer.advance()
    assert peer.take(ApiKey.JOIN_GROUP).req.body.member_id == ""  # joins as a new member


def test_a_fatal_group_error_surfaces_from_poll() -> None:
    peer = group_peer()
    answer_coordinator(peer)
    answer_join(peer, code=30)  # GROUP_AUTHORIZATION_FAILED
    (failed,) = group_events(peer)
    assert isinstance(failed.error, GroupAuthorizationFailedError)
    with pytest.raises(GroupAuthorizationFailedError, match="group 'g'"):
        peer.m.poll(10, now=peer.now)


def test_leave_group_on_close_and_manual_assign_is_refused() -> None:
    peer = group_peer()
    in_group(peer)
    with pytest.raises(IllegalStateError, match="subscribed through the group"):
        peer.m.assign([("t", 0)], now=peer.now)
    peer.m.leave_group(now=peer.now)
    peer.pump()
    leave = peer.take(ApiKey.LEAVE_GROUP).req.body
    assert [m.member_id for m in leave.members] == ["m-1"]


def test_the_kip848_member_runs_in_the_fetcher_too() -> None:
    group = ConsumerGroupConfig(group_id="g", group_remote_assignor="uniform")
    peer = FetcherPeer(partitions=2, group=group, group_id="g", auto_offset_reset="earliest")
    answer_coordinator(peer)
    sent = peer.take(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    req = sent.req.body
    assert (req.member_epoch, req.subscribed_topic_names) == (0, ("t",))
    answer_heartbeat848(peer, sent, epoch=5, partitions=(0, 1))
    (assigned,) = group_events(peer)
    assert assigned.assigned == (("t", 0), ("t", 1)) and assigned.generation == 5
    peer.m.assignment_done(now=peer.now)
    peer.pump()
    report = peer.take(ApiKey.CONSUMER_GROUP_HEARTBEAT).req.body  # owned, reported at once
    assert [tuple(t.partitions) for t in report.topic_partitions] == [(0, 1)]
    answer_offset_fetch(peer, {0: 2, 1: 3})
    peer.m.commit({("t", 0): 4}, now=peer.now)
    peer.pump()
    commit = peer.take(ApiKey.OFFSET_COMMIT).req.body
    assert (commit.generation_id_or_member_epoch, commit.member_id) == (5, req.member_id)


def test_a_new_member_joins_once_metadata_describes_its_topics() -> None:
    # Joining before the topic's partitions are known made the leader assign nothing and
    # the group rebalance again as soon as they arrived.
    peer = FetcherPeer(partitions=2, group_id="g", auto_offset_reset="earliest")
    peer.topics["u"] = {0: (1, 0)}
    del peer.topics["t"]  # what the member subscribes to is not in metadata yet
    group = GroupConfig(group_id="g", assignors=(CooperativeStickyAssignor(),))
    machine = FetcherMachine(peer.m.config, rng=random.Random(1), group=group)
    peer.m = machine
    machine.subscribe(["t"], now=peer.now)
    peer.pump()
    answer_coordinator(peer)
    assert not peer.has(ApiKey.JOIN_GROUP)  # waiting for "t" in metadata
    peer.topics["t"] = {0: (1, 0), 1: (2, 0)}
    peer.advance()  # the metadata refresh finds it
    while not peer.has(ApiKey.JOIN_GROUP):
        peer.advance()
    assert peer.now < 3.0  # well before the wait would have given up


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("appears", [True, False], ids=["topic-appears", "topic-never-appears"])
def test_a_member_whose_coordinator_is_known_waits_for_its_topics_metadata_too(
    protocol: str, appears: bool
) -> None:
    # The wait gated only the coordinator lookup: a member told its coordinator before it
    # subscribed (any step finds it) joined at once, with no metadata for its topics.
    peer = FetcherPeer(partitions=2, group_id="g", auto_offset_reset="earliest")
    del peer.topics["t"]  # what the member subscribes to is not in metadata yet
    group: Any = (
        GroupConfig(group_id="g", assignors=(CooperativeStickyAssignor(),))
        if protocol == "classic"
        else ConsumerGroupConfig(group_id="g", group_remote_assignor="uniform")
    )
    join = ApiKey.JOIN_GROUP if protocol == "classic" else ApiKey.CONSUMER_GROUP_HEARTBEAT
    machine = FetcherMachine(peer.m.config, rng=random.Random(1), group=group)
    peer.m = machine
    machine.handle_timer(now=peer.now)
    peer.pump()
    answer_coordinator(peer)
    assert machine.coordinator is not None  # known before the subscription
    subscribed = peer.now
    machine.subscribe(["t"], now=peer.now)
    peer.pump()
    assert not peer.has(join)  # waiting for "t" in metadata
    if appears:
        peer.topics["t"] = {0: (1, 0), 1: (2, 0)}
    while not peer.has(join):
        peer.advance()
    if appears:
        assert peer.now < subscribed + 3.0  # as soon as the metadata describes it
    else:
        assert peer.now == subscribed + 3.0  # the wait's end: the join goes without it


def test_a_kip848_member_back_from_a_poll_timeout_sends_its_join_on_the_next_poll() -> None:
    # Found by the simulator (--workload group848): the poll that ends a poll-timeout leave
    # queued the join heartbeat, but a fetcher with no partitions had nothing else to step
    # for, so the join waited for some unrelated event (up to metadata.max.age).
    group = ConsumerGroupConfig(group_id="g", max_poll_interval=2.0)
    peer = FetcherPeer(partitions=2, group=group, group_id="g", auto_offset_reset="earliest")
    answer_coordinator(peer)
    sent = peer.take(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    answer_heartbeat848(peer, sent, epoch=5, partitions=())
    peer.advance(peer.now + 2.5)  # no poll for max_poll_interval: the member leaves
    leave = peer.take(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    assert leave.req.body.member_epoch == -1
    peer.pending.remove(leave)
    assert peer.m.poll(10, now=peer.now) == []
    peer.pump()
    join = peer.take(ApiKey.CONSUMER_GROUP_HEARTBEAT).req.body
    assert (join.member_epoch, join.member_id) == (0, sent.req.body.member_id)


def test_a_classic_member_back_from_a_poll_timeout_sends_its_join_on_the_next_poll() -> None:
    # Found by the simulator (asyncio, seed 89): after a poll timeout had left the group and
    # its partitions were lost, the next poll queued the JoinGroup, but a fetcher with no
    # partitions, heartbeats or timers had nothing else to step for: the member stayed
    # JOINING, its JoinGroup unsent, while the application polled every 100 ms.
    peer = group_peer(max_poll_interval=2.0)
    in_group(peer)
    answer_offset_fetch(peer, {0: 0, 1: 0})
    peer.pending.clear()  # the fetch stays unanswered
    peer.advance(peer.now + 2.5)  # no poll for max_poll_interval: the member leaves
    leave = peer.take(ApiKey.LEAVE_GROUP)
    peer.pending.remove(leave)
    (lost,) = group_events(peer)
    assert lost == PartitionsRevoked(partitions=(("t", 0), ("t", 1)), lost=True)
    peer.m.revocation_done(now=peer.now)
    peer.pump()
    assert not peer.has(ApiKey.JOIN_GROUP)
    assert peer.m.poll(10, now=peer.now) == []
    peer.pump()
    join = peer.take(ApiKey.JOIN_GROUP).req.body
    assert join.member_id == ""  # a new member: the poll timeout forgot the id


def test_a_stale_commit_refused_while_the_member_rejoins_starts_no_second_rebalance() -> None:
    # Found by the simulator (seed 27 at 56fa3db, cooperative-sticky, coordinator moves):
    # commits sent under a generation the member then fell out of were refused while it
    # joined again; each refusal asked for a rejoin that outlived that join, so as soon as
    # the new generation's assignment was applied the member began one more rebalance (and,
    # passing through STABLE within one step, hid its receipt of that assignment from G6).
    peer = group_peer()
    in_group(peer)
    answer_offset_fetch(peer, {0: 0, 1: 0})
    peer.pending.clear()  # the Fetch stays unanswered
    peer.advance(3.0)  # the heartbeat goes out...
    peer.m.commit({("t", 0): 2}, now=peer.now)  # ...then a commit of generation 1
    peer.pump()
    commit = peer.take(ApiKey.OFFSET_COMMIT)
    assert commit.req.body.generation_id_or_member_epoch == 1
    answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.illegal_generation)
    (lost,) = group_events(peer)
    assert lost == PartitionsRevoked(partitions=(("t", 0), ("t", 1)), lost=True)
    peer.m.revocation_done(now=peer.now)
    peer.pump()
    assert peer.has(ApiKey.JOIN_GROUP)  # rejoining, behind the commit on the connection
    cls = response_type(ApiKey.OFFSET_COMMIT, commit.req.version)
    topic = commit.req.body.topics[0]
    part = build(
        nested_type(cls, "OffsetCommitResponsePartition"),
        partition_index=0,
        error_code=ErrorCode.illegal_generation,
    )
    entry = build(
        nested_type(cls, "OffsetCommitResponseTopic"),
        name=getattr(topic, "name", None),
        topic_id=getattr(topic, "topic_id", None),
        partitions=(part,),
    )
    peer.answer(commit, build(cls, throttle_time=NO_TIME, topics=(entry,)))
    answer_join(peer, generation=2)
    answer_sync(peer)
    peer.events.clear()
    peer.m.assignment_done(now=peer.now)
    peer.pump()
    member = peer.m.member
    assert member is not None and member.state is MemberState.STABLE
    assert member.generation == 2
    assert not peer.has(ApiKey.JOIN_GROUP)  # no second rebalance


def poll_as_the_adapters_do(peer: FetcherPeer, now: float) -> None:
    """The application polls at ``now``; the adapter then runs ``handle_timer`` only if
    ``get_timer()`` says a deadline is due (the anyio driver's ``timers_when_due``)."""
    peer.now = now
    assert peer.m.poll(10, now=now) == []
    peer.pump()
    due = peer.m.get_timer()
    if due is not None and due <= now:
        peer.m.handle_timer(now=now)
        peer.pump()


def test_a_poll_that_finds_the_session_over_looks_for_the_coordinator() -> None:
    # Found by the simulator's async API (trio seed 25, asyncio seed 57; pauses and
    # member crashes): a member with no partitions (so no Fetch answers to step the
    # machine) was paused past its heartbeat and session deadlines. After the pause its
    # poll ran before the driver's timer: the member's polled() ran those deadlines -- the
    # session is over, find the coordinator -- but the fetcher did not step, and
    # get_timer() named only the next poll deadline, which each poll moved on. No
    # FindCoordinator ever went out: the member stayed in its old generation while the
    # group settled without it.
    peer = group_peer(heartbeat_interval=3.0)
    peer.advance(4.0)  # (the subscription's metadata wait is over)
    answer_coordinator(peer)
    answer_join(peer)
    answer_sync(peer, partitions=())
    peer.m.assignment_done(now=peer.now)
    peer.pump()
    member = peer.m.member
    assert member is not None and member.state is MemberState.STABLE
    while (due := peer.m.get_timer()) is not None and due < 7.0:
        peer.advance()  # the machine's own timers, up to the first heartbeat (at 7 s)
    assert not peer.pending
    # paused: neither the heartbeat (7 s) nor the session's end (14 s) ran on time
    poll_as_the_adapters_do(peer, 14.5)
    assert peer.has(ApiKey.FIND_COORDINATOR)
    answer_coordinator(peer)
    # the session is over: the member joins again as a new one (librdkafka's behaviour)
    assert peer.take(ApiKey.JOIN_GROUP).req.body.member_id == ""
