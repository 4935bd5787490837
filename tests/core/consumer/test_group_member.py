"""GroupMember (classic protocol) driven by hand: requests built at the versions we
negotiate with Kafka 4, answers scripted, time stepped explicitly."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    StickyAssignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from kafkastate.core.consumer.group import (
    AssignPartitions,
    GroupConfig,
    GroupFailed,
    GroupMember,
    MemberState,
    OutgoingRequest,
    RevokePartitions,
)
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    response_type,
)
from kafkastate.errors import FencedInstanceIdError, IllegalStateError, KafkaConfigurationError

VERSIONS = ApiVersionTable(CLIENT_VERSIONS)
NO_TIME = datetime.timedelta(0)


def member(*, cooperative: bool = True, **kw: Any) -> GroupMember:
    assignors = (CooperativeStickyAssignor(),) if cooperative else (RangeAssignor(),)
    kw.setdefault("session_timeout", 10.0)
    kw.setdefault("heartbeat_interval", 3.0)
    return GroupMember(GroupConfig(group_id="g", assignors=assignors, **kw))


def requests(m: GroupMember) -> list[tuple[str, Any]]:
    """(kind, kio request) of what the member wants sent now."""
    out: list[OutgoingRequest] = m.take_requests()
    return [(r.kind, r.factory(VERSIONS)) for r in out]


def only(m: GroupMember, kind: str) -> Any:
    sent = requests(m)
    assert [k for k, _r in sent] == [kind], sent
    return sent[0][1]


def events(m: GroupMember) -> list[Any]:
    out = []
    while (event := m.next_event()) is not None:
        out.append(event)
    return out


def join_response(
    req: Any,
    *,
    code: int = 0,
    member_id: str = "m-1",
    generation: int = 1,
    leader: str | None = None,
    others: dict[str, bytes] | None = None,
) -> Any:
    cls = response_type(ApiKey.JOIN_GROUP, VERSIONS.version_for(ApiKey.JOIN_GROUP))
    member_cls = nested_type(cls, "JoinGroupResponseMember")
    leader = member_id if leader is None else leader
    members = ()
    if leader == member_id and code == 0:
        mine = req.protocols[0].metadata
        entries = {member_id: mine, **(others or {})}
        members = tuple(
            build(member_cls, member_id=mid, group_instance_id=None, metadata=meta)
            for mid, meta in entries.items()
        )
    return build(
        cls,
        throttle_time=NO_TIME,
        error_code=ErrorCode(code),
        generation_id=generation,
        protocol_type="consumer",
        protocol_name=req.protocols[0].name,
        leader=leader,
        skip_assignment=False,
        member_id=member_id,
        members=members,
    )


def sync_response(partitions: tuple[tuple[str, int], ...], *, code: int = 0) -> Any:
    cls = response_type(ApiKey.SYNC_GROUP, VERSIONS.version_for(ApiKey.SYNC_GROUP))
    return build(
        cls,
        throttle_time=NO_TIME,
        error_code=ErrorCode(code),
        protocol_type="consumer",
        protocol_name="x",
        assignment=encode_assignment(Assignment(partitions=partitions)),
    )


def heartbeat_response(code: int = 0) -> Any:
    cls = response_type(ApiKey.HEARTBEAT, VERSIONS.version_for(ApiKey.HEARTBEAT))
    return build(cls, throttle_time=NO_TIME, error_code=ErrorCode(code))


def joined(m: GroupMember, *, partitions: int = 3, now: float = 0.0) -> None:
    """Subscribe to t, find the coordinator, join alone (after MEMBER_ID_REQUIRED),
    apply the assignment."""
    m.subscribe(["t"], now=now)
    m.update_partition_counts({"t": partitions}, now=now)
    assert requests(m) == []  # no coordinator yet
    m.coordinator_found(now=now)
    first = only(m, "join")
    assert first.member_id == "" and first.protocol_type == "consumer"
    m.handle_response("join", join_response(first, code=79, member_id="m-1"), now=now)
    again = only(m, "join")
    assert again.member_id == "m-1"  # KIP-394: the id the coordinator chose
    m.handle_response("join", join_response(again), now=now)
    sync = only(m, "sync")
    assert (sync.generation_id, sync.member_id) == (1, "m-1")
    (entry,) = sync.assignments  # the leader assigned itself everything
    got = decode_assignment(entry.assignment).partitions
    assert got == tuple(("t", p) for p in range(partitions))
    m.handle_response("sync", sync_response(got), now=now)
    (assign,) = events(m)
    assert isinstance(assign, AssignPartitions) and assign.added == got
    m.assignment_done(now=now)
    assert m.state is MemberState.STABLE and m.owned == got


def test_join_sync_and_heartbeats() -> None:
    m = member()
    joined(m)
    assert m.commit_identity() == (1, "m-1", None)
    assert m.get_timer() == 3.0  # the first heartbeat
    m.handle_timer(now=3.0)
    hb = only(m, "heartbeat")
    assert (hb.generation_id, hb.member_id) == (1, "m-1")
    assert m.get_timer() == 10.0  # only the session deadline while it is in flight
    m.handle_response("heartbeat", heartbeat_response(), now=3.2)
    assert m.get_timer() == 6.0  # interval after the last one was sent


def test_join_request_fields() -> None:
    m = member(group_instance_id="static-1", client_rack="r1", max_poll_interval=60.0)
    m.subscribe(["b", "a"], now=0.0)
    m.coordinator_found(now=0.0)
    (out,) = m.take_requests()
    assert out.kind == "join" and out.timeout == 65.0  # rebalance timeout + 5 s
    req = out.factory(VERSIONS)
    assert req.group_instance_id == "static-1"
    assert req.session_timeout == datetime.timedelta(seconds=10)
    assert req.rebalance_timeout == datetime.timedelta(seconds=60)
    assert [p.name for p in req.protocols] == ["cooperative-sticky"]
    sub = decode_subscription(req.protocols[0].metadata)
    assert sub.topics == ("a", "b") and sub.rack_id == "r1"


def test_eager_revokes_everything_before_joining_again() -> None:
    m = member(cooperative=False)
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(27), now=3.1)  # REBALANCE_IN_PROGRESS
    (revoke,) = events(m)
    assert revoke == RevokePartitions(partitions=(("t", 0), ("t", 1), ("t", 2)), lost=False)
    assert requests(m) == []  # no JoinGroup before the application revoked
    m.revocation_done(now=3.2)
    req = only(m, "join")
    assert decode_subscription(req.protocols[0].metadata).owned_partitions == ()
    assert m.owned == ()


def test_cooperative_keeps_partitions_revokes_only_what_moves_and_rejoins() -> None:
    m = member()
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(27), now=3.1)
    assert events(m) == []  # nothing revoked up front
    req = only(m, "join")
    sub = decode_subscription(req.protocols[0].metadata)
    assert sub.owned_partitions == (("t", 0), ("t", 1), ("t", 2)) and sub.generation_id == 1
    # a follower now: the leader (m-0) keeps t-0 and t-1 for m-1 and moves t-2 away
    m.handle_response("join", join_response(req, generation=2, leader="m-0"), now=3.2)
    sync = only(m, "sync")
    assert sync.assignments == ()  # followers send none
    m.handle_response("sync", sync_response((("t", 0), ("t", 1))), now=3.3)
    revoke, assign = events(m)
    assert revoke == RevokePartitions(partitions=(("t", 2),), lost=False)
    assert assign == AssignPartitions(
        assigned=(("t", 0), ("t", 1)), added=(), generation=2
    )  # fmt: skip
    m.revocation_done(now=3.4)
    assert requests(m) == []  # the assignment is not applied yet
    m.assignment_done(now=3.5)
    again = only(m, "join")  # KIP-429: the second round, to hand t-2 over
    assert decode_subscription(again.protocols[0].metadata).owned_partitions == (
        ("t", 0),
        ("t", 1),
    )


def test_unknown_member_loses_partitions_and_joins_afresh() -> None:
    m = member()
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(25), now=3.1)  # UNKNOWN_MEMBER_ID
    (lost,) = events(m)
    assert lost.lost and lost.partitions == (("t", 0), ("t", 1), ("t", 2))
    assert m.commit_identity() == (-1, "", None)
    assert requests(m) == []
    m.revocation_done(now=3.2)
    req = only(m, "join")
    assert req.member_id == ""
    assert decode_subscription(req.protocols[0].metadata).owned_partitions == ()


def test_illegal_generation_keeps_the_member_id() -> None:
    m = member()
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(22), now=3.1)  # ILLEGAL_GENERATION
    assert events(m)[0].lost
    m.revocation_done(now=3.2)
    assert only(m, "join").member_id == "m-1"


def test_a_member_that_stops_polling_leaves_and_rejoins_on_the_next_poll() -> None:
    m = member(max_poll_interval=20.0, session_timeout=30.0, heartbeat_interval=100.0)
    joined(m)
    m.polled(now=5.0)
    assert m.get_timer() == 25.0
    m.handle_timer(now=25.0)
    leave = only(m, "leave")
    (identity,) = leave.members
    assert identity.member_id == "m-1" and identity.reason == "consumer poll timeout has expired"
    (lost,) = events(m)
    assert lost.lost and m.state is MemberState.UNJOINED and m.get_timer() is None
    m.revocation_done(now=26.0)
    assert requests(m) == []
    m.polled(now=40.0)
    assert only(m, "join").member_id == ""


def test_unsubscribe_revokes_then_leaves_and_subscribe_joins_again() -> None:
    m = member(heartbeat_interval=100.0)
    joined(m)
    m.unsubscribe(now=1.0)
    (revoke,) = events(m)
    assert revoke.partitions == (("t", 0), ("t", 1), ("t", 2)) and not revoke.lost
    assert requests(m) == []  # the revocation first: the application may still commit
    assert m.state is MemberState.STABLE and m.subscription == ()
    m.revocation_done(now=2.0)
    leave = only(m, "leave")
    (identity,) = leave.members
    assert identity.member_id == "m-1" and identity.reason == "the consumer unsubscribed"
    assert m.state is MemberState.UNJOINED and m.member_id == "" and m.generation == -1
    assert m.owned == () and m.get_timer() is None
    m.polled(now=3.0)
    assert requests(m) == []  # no topics: nothing to join
    m.subscribe(["u"], now=4.0)
    m.update_partition_counts({"u": 1}, now=4.0)
    assert only(m, "join").member_id == ""  # a new member


def test_a_static_member_unsubscribes_without_leave_group() -> None:
    m = member(group_instance_id="i-1")
    joined(m)
    m.unsubscribe(now=1.0)
    events(m)
    m.revocation_done(now=2.0)
    assert m.state is MemberState.UNJOINED and requests(m) == []


def test_no_heartbeat_answer_within_the_session_timeout_loses_the_partitions() -> None:
    # As librdkafka: the coordinator may remove the member from 10 s on (the session ran
    # from the SyncGroup sent at 0) and give its partitions to another; the application
    # must have stopped by then. (It used to keep them and only look for the coordinator.)
    m = member(session_timeout=10.0, heartbeat_interval=3.0)
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")  # never answered
    assert m.get_timer() == 10.0
    m.handle_timer(now=10.0)
    (lost,) = events(m)
    assert lost == RevokePartitions(partitions=(("t", 0), ("t", 1), ("t", 2)), lost=True)
    assert m.state is MemberState.UNJOINED and m.commit_identity() == (-1, "", None)
    assert m.coordinator_wanted and requests(m) == []  # no LeaveGroup: it is unreachable
    assert m.get_timer() is None  # no busy timer
    m.handle_failure("heartbeat", _timeout(), now=11.0)
    m.coordinator_found(now=12.0)
    assert requests(m) == []  # the lost partitions are dropped first
    m.revocation_done(now=12.5)
    req = only(m, "join")  # a new member: the old id may be gone at the coordinator
    assert req.member_id == ""
    assert decode_subscription(req.protocols[0].metadata).owned_partitions == ()
    m.handle_response("join", join_response(req, member_id="m-2", generation=2), now=13.0)
    m.handle_response("sync", sync_response((("t", 0),)), now=13.5)
    (assign,) = events(m)
    assert assign.generation == 2 and assign.added == (("t", 0),)
    # a late answer to the old heartbeat does not pull the new session's deadline back
    m.handle_response("heartbeat", heartbeat_response(), now=14.0)
    m.assignment_done(now=14.0)
    assert m.state is MemberState.STABLE
    assert m.get_timer() == 23.0  # the SyncGroup sent at 13 + 10, not 3 + 10


def test_the_session_counts_from_when_the_answered_heartbeat_was_sent() -> None:
    m = member(session_timeout=10.0, heartbeat_interval=3.0)
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(), now=9.9)  # just in time
    m.handle_timer(now=9.9)
    only(m, "heartbeat")  # the next one, due since 6.0
    m.handle_timer(now=12.9)  # the session now ends at 3.0 + 10 (not at 9.9 + 10)
    assert events(m) == [] and m.state is MemberState.STABLE
    m.handle_timer(now=13.0)
    (lost,) = events(m)
    assert lost.lost and m.state is MemberState.UNJOINED


def test_finding_the_coordinator_again_does_not_extend_the_session() -> None:
    m = member(session_timeout=10.0, heartbeat_interval=3.0)
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_failure("heartbeat", _timeout(), now=8.0)  # coordinator lost
    m.coordinator_found(now=9.0)
    assert only(m, "heartbeat").generation_id == 1  # still in the generation: ask
    assert m.get_timer() == 10.0  # only an answer moves the deadline
    m.handle_response("heartbeat", heartbeat_response(), now=9.5)
    assert m.get_timer() == 12.0  # the next heartbeat; the session now ends at 9 + 10
    m.handle_timer(now=10.0)
    assert events(m) == [] and m.state is MemberState.STABLE


def test_a_static_member_loses_its_partitions_too_and_rejoins_by_instance_id() -> None:
    m = member(group_instance_id="i-1", session_timeout=10.0, heartbeat_interval=3.0)
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_timer(now=10.0)
    assert events(m)[0].lost
    m.revocation_done(now=10.5)
    m.coordinator_found(now=11.0)
    req = only(m, "join")
    assert (req.member_id, req.group_instance_id) == ("", "i-1")


def _timeout() -> Any:
    from kafkastate.errors import KafkaTimeoutError  # noqa: PLC0415

    return KafkaTimeoutError("request timed out")


def test_fenced_static_member_fails_for_good() -> None:
    m = member(group_instance_id="i-1")
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(82), now=3.1)  # FENCED_INSTANCE_ID
    lost, failed = events(m)
    assert lost.lost and isinstance(failed, GroupFailed)
    assert isinstance(failed.error, FencedInstanceIdError)
    assert m.state is MemberState.FAILED and m.get_timer() is None
    with pytest.raises(IllegalStateError, match="failed"):
        m.subscribe(["t"], now=4.0)


def test_leader_assigns_across_members_and_followers_get_theirs() -> None:
    m = member(cooperative=False)
    m.subscribe(["t"], now=0.0)
    m.update_partition_counts({"t": 4}, now=0.0)
    m.coordinator_found(now=0.0)
    req = only(m, "join")
    other = req.protocols[0].metadata  # the other member subscribes the same way
    m.handle_response("join", join_response(req, member_id="m-a", others={"m-b": other}), now=0)
    sync = only(m, "sync")
    got = {e.member_id: decode_assignment(e.assignment).partitions for e in sync.assignments}
    assert got == {"m-a": (("t", 0), ("t", 1)), "m-b": (("t", 2), ("t", 3))}  # range


def test_the_leader_rejoins_when_partitions_are_added() -> None:
    m = member()
    joined(m, partitions=3)
    m.update_partition_counts({"t": 5}, now=1.0)
    assert only(m, "join").member_id == "m-1"


def test_coordinator_errors_and_retries_during_join() -> None:
    m = member()
    m.subscribe(["t"], now=0.0)
    m.coordinator_found(now=0.0)
    req = only(m, "join")
    m.handle_response("join", join_response(req, code=16), now=0.0)  # NOT_COORDINATOR
    assert m.coordinator_wanted and requests(m) == []
    m.coordinator_found(now=1.0)
    req = only(m, "join")
    m.handle_response("join", join_response(req, code=14), now=1.0)  # LOAD_IN_PROGRESS
    assert requests(m) == [] and m.get_timer() == pytest.approx(1.1)
    m.handle_timer(now=1.1)
    req = only(m, "join")
    m.handle_response("join", join_response(req, code=30), now=1.2)  # GROUP_AUTHORIZATION
    (failed,) = events(m)
    assert isinstance(failed, GroupFailed) and "group 'g'" in str(failed.error)


def test_close_leaves_for_dynamic_members_only() -> None:
    dynamic = member()
    joined(dynamic)
    dynamic.close(now=1.0)
    assert only(dynamic, "leave").members[0].member_id == "m-1"
    static = member(group_instance_id="i-1")
    joined(static)
    static.close(now=1.0)
    assert requests(static) == [] and static.state is MemberState.CLOSED


def test_config_rules() -> None:
    with pytest.raises(KafkaConfigurationError, match="group_id"):
        GroupConfig(group_id="", assignors=(RangeAssignor(),))
    with pytest.raises(KafkaConfigurationError, match="at least one"):
        GroupConfig(group_id="g", assignors=())
    with pytest.raises(KafkaConfigurationError, match="distinct"):
        GroupConfig(group_id="g", assignors=(RangeAssignor(), RangeAssignor()))
    with pytest.raises(KafkaConfigurationError, match="session_timeout"):
        GroupConfig(group_id="g", assignors=(RangeAssignor(),), session_timeout=0)
    mixed = GroupConfig(group_id="g", assignors=(CooperativeStickyAssignor(), StickyAssignor()))
    assert mixed.rebalance_protocol is RebalanceProtocol.EAGER  # the common one
    coop = GroupConfig(group_id="g", assignors=(CooperativeStickyAssignor(),))
    assert coop.rebalance_protocol is RebalanceProtocol.COOPERATIVE
    with pytest.raises(IllegalStateError, match="without a RevokePartitions"):
        member().revocation_done(now=0.0)


def test_partitions_lost_during_a_cooperative_join_are_dropped_before_joining_again() -> None:
    m = member()
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(27), now=3.1)  # rebalance: keep all
    req = only(m, "join")
    m.handle_response("join", join_response(req, code=25), now=3.2)  # UNKNOWN_MEMBER_ID
    (lost,) = events(m)
    assert lost.lost and lost.partitions == (("t", 0), ("t", 1), ("t", 2))
    m.handle_timer(now=5.0)
    assert requests(m) == []  # not before the application dropped them
    m.revocation_done(now=5.1)
    again = only(m, "join")
    assert again.member_id == ""
    assert decode_subscription(again.protocols[0].metadata).owned_partitions == ()


def test_a_poll_timeout_before_the_application_took_its_assignment_loses_that_too() -> None:
    # The assignment is out but the application has not acknowledged it (it is not
    # polling): what it is being given is lost with the rest, after the assignment.
    m = member(max_poll_interval=20.0, session_timeout=30.0, heartbeat_interval=100.0)
    m.subscribe(["t"], now=0.0)
    m.update_partition_counts({"t": 2}, now=0.0)
    m.coordinator_found(now=0.0)
    m.handle_response("join", join_response(only(m, "join")), now=0.0)
    only(m, "sync")
    m.handle_response("sync", sync_response((("t", 0), ("t", 1))), now=0.0)
    m.polled(now=1.0)
    m.handle_timer(now=21.0)
    assert only(m, "leave").members[0].member_id == "m-1"
    assign, lost = events(m)
    assert isinstance(assign, AssignPartitions) and assign.added == (("t", 0), ("t", 1))
    assert isinstance(lost, RevokePartitions) and lost.lost
    assert lost.partitions == (("t", 0), ("t", 1))
    m.assignment_done(now=22.0)  # the application catches up, in order
    m.revocation_done(now=22.0)
    assert m.owned == () and m.state is MemberState.UNJOINED


def test_a_member_joining_again_has_no_heartbeat_deadline_left_to_spin_on() -> None:
    # Found by the simulator: a heartbeat armed before a rejoin stayed in get_timer() while
    # the member was joining, a deadline that handle_timer never cleared (a busy loop).
    m = member()
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(27), now=3.1)  # REBALANCE_IN_PROGRESS
    assert only(m, "join").member_id == "m-1"
    assert m.state is MemberState.JOINING
    due = m.get_timer()
    for _ in range(3):  # whatever is due is cleared by handling it
        if due is None:
            break
        m.handle_timer(now=due)
        after = m.get_timer()
        assert after is None or after > due, (due, after)
        due = after


def test_a_poll_timeout_while_joining_again_leaves_too() -> None:
    # Found by the simulator: the member rejoins in the background, so a rebalance used to
    # carry a member whose application had stopped polling (and its partitions) along.
    m = member(max_poll_interval=20.0, session_timeout=30.0, heartbeat_interval=3.0)
    joined(m)
    m.polled(now=1.0)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(27), now=3.1)  # REBALANCE_IN_PROGRESS
    assert only(m, "join").member_id == "m-1" and m.state is MemberState.JOINING
    assert m.get_timer() == 21.0
    m.handle_timer(now=21.0)
    assert only(m, "leave").members[0].reason == "consumer poll timeout has expired"
    (lost,) = events(m)
    assert isinstance(lost, RevokePartitions) and lost.lost and m.state is MemberState.UNJOINED


def test_falling_out_of_the_group_during_a_revocation_loses_the_rest_after_it() -> None:
    # Found by the simulator: the loss used to be dropped when a revocation was under way,
    # and the application kept partitions the group had already given to other members.
    m = member()
    joined(m)
    m.handle_timer(now=3.0)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(27), now=3.1)
    req = only(m, "join")
    m.handle_response("join", join_response(req, generation=2, leader="m-0"), now=3.2)
    only(m, "sync")
    m.handle_response("sync", sync_response((("t", 0), ("t", 1))), now=3.3)
    revoke, assign = events(m)  # the application is still working on these...
    assert isinstance(revoke, RevokePartitions) and isinstance(assign, AssignPartitions)
    m.handle_timer(now=6.3)
    only(m, "heartbeat")
    m.handle_response("heartbeat", heartbeat_response(25), now=6.4)  # UNKNOWN_MEMBER_ID
    assert events(m) == []  # ...so the loss waits for the revocation
    m.revocation_done(now=6.5)
    (lost,) = events(m)
    assert lost == RevokePartitions(partitions=(("t", 0), ("t", 1)), lost=True)
    m.assignment_done(now=6.6)  # in the order the application got them
    m.revocation_done(now=6.7)
    assert m.owned == ()


def test_a_refused_commit_rejoins_only_from_the_generation_it_was_sent_in() -> None:
    # Java's generationUnchanged(): a refusal (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) of a
    # commit sent under another generation or member id, or one that comes while the
    # member rejoins, asks for no rejoin -- it would outlive the rebalance under way and
    # begin another right after it (the simulator, seed 27 at 56fa3db).
    m = member()
    joined(m)
    m.commit_refused(0, "m-1", "a commit was refused")  # an older generation
    m.commit_refused(1, "m-0", "a commit was refused")  # an older member id
    m.handle_timer(now=3.0)
    assert m.state is MemberState.STABLE and [k for k, _r in requests(m)] == ["heartbeat"]
    m.handle_response("heartbeat", heartbeat_response(27), now=3.1)  # REBALANCE_IN_PROGRESS
    join = only(m, "join")
    assert m.state is MemberState.JOINING
    m.commit_refused(1, "m-1", "a commit was refused")  # rejoining already
    m.handle_response("join", join_response(join, generation=2), now=3.2)
    assert only(m, "sync").generation_id == 2
    m.handle_response("sync", sync_response(m.owned), now=3.3)
    (assign,) = events(m)
    assert assign.generation == 2
    m.assignment_done(now=3.3)
    assert m.state is MemberState.STABLE and requests(m) == []  # no second rebalance
    m.commit_refused(2, "m-1", "a commit was refused")  # the generation it is in
    m.handle_timer(now=3.4)
    assert m.state is MemberState.JOINING and only(m, "join").member_id == "m-1"
