"""ConsumerMachine, the consumer's policy, driven by hand against a scripted cluster: what
a commit stores and refuses, the auto-commit timer, the rebalance sequence around the
listener (commit -> revoke callback -> revocation_done -> assign callback), one-at-a-time
hand-out with paused partitions, leaving, and the state table."""

from __future__ import annotations

import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.client import ClientConfig
from kafkastate.core.consumer.assignors import CooperativeStickyAssignor
from kafkastate.core.consumer.consumer import (
    ALLOWED,
    AssignmentSettled,
    AutoCommitted,
    ConsumerMachine,
    ConsumerState,
    ListenerCallRequested,
)
from kafkastate.core.consumer.fetcher import (
    FetcherConfig,
    FetcherMachine,
    GroupLeft,
    OffsetsCommitted,
)
from kafkastate.core.consumer.group import GroupConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, response_type
from kafkastate.errors import (
    CommitFailedError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaConfigurationError,
    RebalanceListenerError,
)
from kafkastate.structs import OffsetAndMetadata
from tests._support.peer import ScriptedCluster
from tests.core.consumer.test_fetcher_group import (
    NO_TIME,
    answer,
    answer_join,
    answer_offset_fetch,
    answer_sync,
)
from tests.core.consumer.test_fetcher_validation import FetcherPeer, answer_coordinator, batch


class Listener:
    """Records the calls; ``fail`` names a callback that raises."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail

    def on_partitions_revoked(self, revoked: Any) -> None:
        if self.fail == "on_partitions_revoked":
            raise RuntimeError("boom")

    def on_partitions_assigned(self, assigned: Any) -> None:
        if self.fail == "on_partitions_assigned":
            raise RuntimeError("boom")


class ConsumerPeer(FetcherPeer):
    """A scripted cluster around a ConsumerMachine (topic t, partitions led by node 1)."""

    def __init__(
        self,
        *,
        partitions: int = 2,
        group: bool = True,
        listener: Any = None,
        auto_commit: bool = False,
        topics: dict[str, dict[int, tuple[int, int]]] | None = None,
        max_poll_interval: float = 300.0,
        **config: Any,
    ) -> None:
        cfg = FetcherConfig(
            client=ClientConfig(
                bootstrap_servers=[("boot", 9092)], metadata=MetadataConfig(retry_backoff=0.1)
            ),
            retry_backoff=0.1,
            group_id="g",
            auto_offset_reset="earliest",
            **config,
        )
        membership = (
            GroupConfig(
                group_id="g",
                assignors=(CooperativeStickyAssignor(),),
                session_timeout=10.0,
                max_poll_interval=max_poll_interval,
            )
            if group
            else None
        )
        fetcher = FetcherMachine(cfg, rng=random.Random(3), group=membership)
        machine = ConsumerMachine(fetcher, auto_commit=auto_commit, auto_commit_interval=5.0)
        if topics is None:
            topics = {"t": {i: (1, 0) for i in range(partitions)}}
        ScriptedCluster.__init__(self, machine, topics=topics)
        if group:
            self.m.subscribe(["t"], listener=listener, now=0.0)
        else:
            self.m.assign([("t", i) for i in range(partitions)], now=0.0)
        self.advance(0.0)

    def calls(self) -> list[ListenerCallRequested]:
        out = [e for e in self.events if isinstance(e, ListenerCallRequested)]
        self.events = [e for e in self.events if not isinstance(e, ListenerCallRequested)]
        return out

    def done(self, call: ListenerCallRequested, error: BaseException | None = None) -> None:
        self.m.listener_done(call.call_id, error=error, now=self.now)
        self.pump()

    def join(self) -> None:
        """Coordinator found, joined alone with both partitions, offsets 0 committed."""
        answer_coordinator(self)
        answer_join(self)
        answer_sync(self)

    def answer_commit(self) -> dict[tuple[str, int], int]:
        """Answer the pending OffsetCommit with success; what it committed."""
        sent = self.take(ApiKey.OFFSET_COMMIT)
        cls = response_type(ApiKey.OFFSET_COMMIT, sent.req.version)
        topic_cls = nested_type(cls, "OffsetCommitResponseTopic")
        part_cls = nested_type(cls, "OffsetCommitResponsePartition")
        names = self.topic_ids()
        topics = []
        committed = {}
        for t in sent.req.body.topics:
            key = {"topic_id": t.topic_id} if hasattr(t, "topic_id") else {"name": t.name}
            name = names[t.topic_id] if hasattr(t, "topic_id") else t.name
            parts = tuple(
                build(part_cls, partition_index=p.partition_index, error_code=ErrorCode.none)
                for p in t.partitions
            )
            topics.append(build(topic_cls, partitions=parts, **key))
            committed.update({(name, p.partition_index): p.committed_offset for p in t.partitions})
        self.answer(sent, build(cls, throttle_time=NO_TIME, topics=tuple(topics)))
        return committed


def fetch_both(peer: ConsumerPeer) -> None:
    """Positions from committed offsets 0, then three records for each partition."""
    answer_offset_fetch(peer, {0: 0, 1: 0})
    peer.answer_fetch(batch(0, 3, epoch=0), hw=3, more={1: (batch(0, 3, epoch=0), 3)})


# ----------------------------------------------------------------------------- commits


@pytest.mark.parametrize(
    ("offsets", "error", "match"),
    [
        ([(("t", 0), 1)], TypeError, "mapping"),
        ({("t", 0): (5, 1000)}, KafkaConfigurationError, r"metadata for \('t', 0\)"),
        ({("t", 0): (5, "m", 3)}, KafkaConfigurationError, r"\('t', 0\)"),
        ({("t", 0): -1}, KafkaConfigurationError, r"offset for \('t', 0\)"),
        ({("t", 0): True}, KafkaConfigurationError, r"offset for \('t', 0\)"),
        ({"t": 5}, KafkaConfigurationError, "topic, partition"),
    ],
)
def test_a_bad_commit_is_refused_before_anything_is_queued(
    offsets: Any, error: type[Exception], match: str
) -> None:
    peer = ConsumerPeer(group=False)
    answer_coordinator(peer)
    answer_offset_fetch(peer, {0: 0, 1: 0})
    with pytest.raises(error, match=match):
        peer.m.commit(offsets, now=peer.now)
    peer.pump()
    assert not any(s.req.api_key == ApiKey.OFFSET_COMMIT for s in peer.pending)
    # the consumer is still usable: a good commit goes out and is answered
    qid = peer.m.commit({("t", 0): OffsetAndMetadata(7, "meta")}, now=peer.now)
    peer.pump()
    assert peer.answer_commit() == {("t", 0): 7}
    (done,) = [e for e in peer.events if isinstance(e, OffsetsCommitted)]
    assert done.query_id == qid and done.error is None


def test_a_default_commit_stores_what_was_handed_out_not_what_is_held() -> None:
    peer = ConsumerPeer()
    peer.join()
    fetch_both(peer)
    run = peer.m.take_one(now=peer.now)
    assert run is not None and run[0] == ("t", 0) and run[1][0].offset == 0
    # the other records were pulled from the fetcher but not handed out yet
    assert peer.m.consumed() == {("t", 0): 1, ("t", 1): 0}
    assert peer.m.position(("t", 0)) == 1
    assert peer.m.position(("t", 1)) == 0
    runs = peer.m.poll(now=peer.now)  # the held ones come first
    assert [(tp, [r.offset for r in recs]) for tp, recs, _ in runs] == [
        (("t", 0), [1, 2]),
        (("t", 1), [0, 1, 2]),
    ]
    assert peer.m.consumed() == {("t", 0): 3, ("t", 1): 3}
    peer.m.commit(now=peer.now)
    peer.pump()
    assert peer.answer_commit() == {("t", 0): 3, ("t", 1): 3}


def test_take_one_skips_paused_partitions_and_honours_a_filter() -> None:
    peer = ConsumerPeer()
    peer.join()
    fetch_both(peer)
    peer.m.pause([("t", 0)])
    got = [peer.m.take_one(now=peer.now) for _ in range(3)]
    assert [(r[0], r[1][0].offset) for r in got if r] == [(("t", 1), o) for o in range(3)]
    assert peer.m.take_one(now=peer.now) is None  # t-0 is held, but paused
    assert peer.m.position(("t", 0)) == 0
    peer.m.resume([("t", 0)], now=peer.now)
    run = peer.m.take_one([("t", 0)], now=peer.now)
    assert run is not None and run[0] == ("t", 0) and run[1][0].offset == 0


def test_one_at_a_time_from_the_buffer_per_record_positions_listener_errors_close() -> None:
    # take_one's per-record path (the head of the hand-out buffer): one pull per batch,
    # positions per record, and what stands in its way still does.
    peer = ConsumerPeer(listener=Listener())
    peer.join()
    peer.done(peer.calls()[0])
    fetch_both(peer)
    pulls = peer.m.pulls
    got = [peer.m.take_one(now=peer.now) for _ in range(2)]
    assert [(r[0], r[1][0].offset) for r in got if r] == [(("t", 0), 0), (("t", 0), 1)]
    assert peer.m.pulls == pulls + 1  # both partitions' records came in one pull
    assert peer.m.position(("t", 0)) == 2 and peer.m.consumed() == {("t", 0): 2, ("t", 1): 0}
    rebalance_away_t0(peer)
    (revoked,) = peer.calls()
    peer.done(revoked, RuntimeError("boom"))
    (again,) = peer.calls()
    peer.done(again)
    with pytest.raises(RebalanceListenerError, match="on_partitions_revoked"):
        peer.m.take_one(now=peer.now)  # t-1's records are held: raised first, once
    run = peer.m.take_one(now=peer.now)  # t-0's held record went with the revocation
    assert run is not None and (run[0], run[1][0].offset) == (("t", 1), 0)
    assert peer.m.pulls == pulls + 1
    peer.m.close()
    with pytest.raises(ConsumerStoppedError, match="closed"):
        peer.m.take_one(now=peer.now)  # records were held: close() dropped them


def test_next_record_serves_the_buffer_head_until_a_turn_a_pause_or_an_error() -> None:
    # The one-call path of getone / iteration: the head of the hand-out buffer, or None
    # whenever take_one must decide (nothing held, a turn due, a pause, a listener error).
    peer = ConsumerPeer(listener=Listener())
    peer.join()
    peer.done(peer.calls()[0])
    fetch_both(peer)
    m = peer.m
    assert m.next_record() is None and not m.turn_due  # nothing held yet
    run = m.take_one(now=peer.now)  # pulls both partitions' records
    assert run is not None and run[1][0].offset == 0
    assert m.turn_due  # a batch was taken: the runtime's turn before the next record
    assert m.next_record() is None
    m.turn_taken()
    got = [m.next_record() for _ in range(2)]
    assert [(r.partition, r.offset) for r in got if r] == [(0, 1), (0, 2)]
    assert m.position(("t", 0)) == 3 and m.consumed() == {("t", 0): 3, ("t", 1): 0}
    m.pause([("t", 1)])
    assert m.next_record() is None  # t-1 is held, but paused
    m.resume([("t", 1)], now=peer.now)
    first = m.next_record()
    assert first is not None and (first.partition, first.offset) == (1, 0)
    assert m.position(("t", 1)) == 1
    rebalance_away_t0(peer)
    (revoked,) = peer.calls()
    peer.done(revoked, RuntimeError("boom"))
    (again,) = peer.calls()
    peer.done(again)
    assert m.next_record() is None  # the listener's error goes first, by take_one
    with pytest.raises(RebalanceListenerError, match="on_partitions_revoked"):
        m.take_one(now=peer.now)
    second = m.next_record()
    assert second is not None and (second.partition, second.offset) == (1, 1)
    assert not m.turn_due and m.pulls == 1
    m.close()
    assert m.next_record() is None  # close() dropped what was held


# ------------------------------------------------------------------------- auto-commit


def test_auto_commit_fires_on_the_machines_own_timer() -> None:
    peer = ConsumerPeer(auto_commit=True)
    assert peer.m.get_timer() is not None and peer.m.get_timer() <= 5.0
    peer.join()
    fetch_both(peer)
    peer.m.poll(2, now=peer.now)
    peer.events.clear()
    # heartbeats come due before; answer them until the auto-commit's deadline
    while not any(s.req.api_key == ApiKey.OFFSET_COMMIT for s in peer.pending):
        timer = peer.m.get_timer()
        assert timer is not None and timer <= 5.0
        peer.advance(timer)
        if any(s.req.api_key == ApiKey.HEARTBEAT for s in peer.pending):
            answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.none)
    assert peer.now == 5.0
    assert peer.answer_commit() == {("t", 0): 2, ("t", 1): 0}
    (committed,) = [e for e in peer.events if isinstance(e, AutoCommitted)]
    assert committed.error is None and not committed.before_revoke
    # its answer is the machine's own: no OffsetsCommitted reaches the adapter
    assert not any(isinstance(e, OffsetsCommitted) for e in peer.events)
    assert peer.m.get_timer() is not None and peer.m.get_timer() <= 10.0


def test_no_auto_commit_without_a_group_id() -> None:
    cfg = FetcherConfig(client=ClientConfig(bootstrap_servers=[("boot", 9092)]))
    machine = ConsumerMachine(
        FetcherMachine(cfg, rng=random.Random(1)), auto_commit=True, auto_commit_interval=1.0
    )
    assert not machine.auto_commit
    with pytest.raises(IllegalStateError, match="group_id"):
        machine.commit({("t", 0): 1}, now=0.0)


# -------------------------------------------------------------------------- rebalances


def rebalance_away_t0(peer: ConsumerPeer) -> None:
    peer.advance(3.0)  # heartbeat due
    answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.rebalance_in_progress)
    answer_join(peer, generation=2)
    answer_sync(peer, (("t", 1),))  # t-0 goes to another member


def test_the_rebalance_sequence_commit_then_listener_then_done() -> None:
    listener = Listener()
    peer = ConsumerPeer(listener=listener, auto_commit=True)
    peer.join()
    (assigned,) = peer.calls()
    assert (assigned.method, assigned.partitions) == (
        "on_partitions_assigned",
        (("t", 0), ("t", 1)),
    )
    peer.done(assigned)
    fetch_both(peer)
    peer.m.poll(2, now=peer.now)  # t-0 at 2
    peer.events.clear()
    rebalance_away_t0(peer)
    # first the auto-commit of the revoked partition; no listener call until it is answered
    assert peer.calls() == []
    assert peer.answer_commit() == {("t", 0): 2}
    (before,) = [e for e in peer.events if isinstance(e, AutoCommitted)]
    assert before.before_revoke and before.error is None
    (revoked,) = peer.calls()
    assert (revoked.method, revoked.partitions) == ("on_partitions_revoked", (("t", 0),))
    # the revocation is not done until the listener reports back
    assert ("t", 0) in peer.m.assignment()
    peer.done(revoked)
    assert peer.m.assignment() == (("t", 1),)
    (again,) = peer.calls()  # the assignment of generation 2 added nothing
    assert (again.method, again.partitions) == ("on_partitions_assigned", ())
    peer.done(again)
    assert peer.calls() == []


def test_a_raising_listener_is_raised_once_by_the_next_read_and_the_rebalance_goes_on() -> None:
    peer = ConsumerPeer(listener=Listener(fail="on_partitions_assigned"))
    peer.join()
    (assigned,) = peer.calls()
    peer.done(assigned, RuntimeError("boom"))
    assert peer.m.assignment() == (("t", 0), ("t", 1))
    with pytest.raises(RebalanceListenerError, match="on_partitions_assigned") as info:
        peer.m.poll(now=peer.now)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert peer.m.poll(now=peer.now) == []  # once


def test_without_a_listener_the_rebalance_needs_no_adapter() -> None:
    peer = ConsumerPeer()
    peer.join()
    fetch_both(peer)
    rebalance_away_t0(peer)
    assert peer.calls() == []
    assert peer.m.assignment() == (("t", 1),)


def test_lost_partitions_call_the_revoked_callback_when_there_is_no_lost_one() -> None:
    peer = ConsumerPeer(listener=Listener(), auto_commit=True)
    peer.join()
    peer.done(peer.calls()[0])
    fetch_both(peer)
    peer.advance(3.0)
    answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.unknown_member_id)  # out of the group
    (lost,) = peer.calls()
    assert (lost.callback, lost.method) == ("on_partitions_lost", "on_partitions_revoked")
    assert not any(s.req.api_key == ApiKey.OFFSET_COMMIT for s in peer.pending)  # no commit
    peer.done(lost)


class LostListener(Listener):
    """A listener with ``on_partitions_lost`` that raises."""

    def on_partitions_lost(self, lost: Any) -> None:
        raise RuntimeError("lost boom")


def lose(peer: ConsumerPeer) -> ListenerCallRequested:
    """Joined, two records of t-0 read; then the coordinator no longer knows the member."""
    peer.join()
    peer.done(peer.calls()[0])
    fetch_both(peer)
    assert [(tp, len(records)) for tp, records, _ in peer.m.poll(2, now=peer.now)] == [
        (("t", 0), 2)
    ]
    peer.advance(3.0)
    answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.unknown_member_id)
    (lost,) = peer.calls()
    assert (lost.callback, lost.method) == ("on_partitions_lost", "on_partitions_lost")
    return lost


def committed_events(peer: ConsumerPeer) -> list[OffsetsCommitted]:
    return [e for e in peer.events if isinstance(e, OffsetsCommitted)]


def test_a_raising_lost_listener_is_raised_once_and_the_member_joins_again() -> None:
    peer = ConsumerPeer(listener=LostListener())
    lost = lose(peer)
    peer.done(lost, RuntimeError("lost boom"))
    assert peer.m.assignment() == ()  # the loss stands
    with pytest.raises(RebalanceListenerError, match="on_partitions_lost") as info:
        peer.m.poll(now=peer.now)
    assert info.value.callback == "on_partitions_lost"
    assert str(info.value.__cause__) == "lost boom"
    assert peer.m.poll(now=peer.now) == []  # once
    answer_join(peer, generation=3)  # the member joins again by itself
    answer_sync(peer)
    (assigned,) = peer.calls()
    assert assigned.callback == "on_partitions_assigned"
    peer.done(assigned)
    # positions come from the group again: the two records read but not committed
    # before the loss are read again (at least once), nothing is skipped
    answer_offset_fetch(peer, {0: 0, 1: 0})
    peer.answer_fetch(batch(0, 3, epoch=0), hw=3, more={1: (batch(0, 3, epoch=0), 3)})
    got = [(r.partition, r.offset) for _, records, _ in peer.m.poll(now=peer.now) for r in records]
    assert sorted(got) == [(p, o) for p in (0, 1) for o in range(3)]


def test_a_member_out_of_its_generation_commits_nothing_it_owned() -> None:
    """Java's rule (ConsumerCoordinator.sendOffsetCommitRequest): a subscribed consumer
    outside a generation fails its commit locally. Sent with generation -1 the broker
    would store it whenever the group is empty -- offsets of partitions the member lost,
    over what their next owner committed."""
    peer = ConsumerPeer(listener=LostListener())
    lost = lose(peer)
    peer.events.clear()
    qid = peer.m.commit({("t", 0): 2}, now=peer.now)  # while the lost callback runs
    peer.done(lost, RuntimeError("lost boom"))
    qid2 = peer.m.commit({("t", 1): 1}, now=peer.now)  # rejoining, no generation yet
    peer.pump()
    assert not any(s.req.api_key == ApiKey.OFFSET_COMMIT for s in peer.pending)
    failed = {e.query_id: e.error for e in committed_events(peer)}
    assert isinstance(failed[qid], CommitFailedError)
    assert isinstance(failed[qid2], CommitFailedError)
    assert "not in the group generation" in str(failed[qid])
    answer_join(peer, generation=3)
    answer_sync(peer)
    peer.done(peer.calls()[0])
    answer_offset_fetch(peer, {0: 0, 1: 0})
    peer.events.clear()
    qid3 = peer.m.commit({("t", 0): 2}, now=peer.now)  # in generation 3 again: sent
    peer.pump()
    assert peer.answer_commit() == {("t", 0): 2}
    assert [e.error for e in committed_events(peer) if e.query_id == qid3] == [None]


def test_a_member_back_from_a_poll_timeout_joins_at_its_next_poll() -> None:
    """The poll timeout makes the member leave; the next poll queues its JoinGroup, which
    must go out then -- not at the next poll deadline, which every poll moves on (an asyncio
    or trio consumer polling every 0.5 s never joined again)."""
    peer = ConsumerPeer(listener=LostListener(), max_poll_interval=4.0)
    peer.join()
    peer.done(peer.calls()[0])
    fetch_both(peer)
    peer.m.poll(now=peer.now)
    peer.advance(3.0)  # a heartbeat while the application does not poll
    answer(peer, ApiKey.HEARTBEAT, error_code=ErrorCode.none)
    peer.advance(4.5)  # past the poll timeout: LeaveGroup
    assert any(s.req.api_key == ApiKey.LEAVE_GROUP for s in peer.pending)
    (lost,) = peer.calls()
    peer.done(lost, RuntimeError("lost boom"))
    with pytest.raises(RebalanceListenerError, match="on_partitions_lost"):
        peer.m.poll(now=peer.now)
    peer.m.poll(now=peer.now)
    peer.pump()
    assert any(s.req.api_key == ApiKey.JOIN_GROUP for s in peer.pending)


def test_an_auto_commit_while_the_lost_callback_runs_sends_nothing() -> None:
    peer = ConsumerPeer(listener=LostListener(), auto_commit=True)
    lost = lose(peer)
    peer.advance(6.0)  # the auto-commit timer (5 s) passes while the callback runs
    assert not any(s.req.api_key == ApiKey.OFFSET_COMMIT for s in peer.pending)
    peer.done(lost, RuntimeError("lost boom"))
    assert not any(s.req.api_key == ApiKey.OFFSET_COMMIT for s in peer.pending)


# ---------------------------------------------------------------------- leave, states


def test_leave_runs_the_revoke_callback_then_leave_group() -> None:
    peer = ConsumerPeer(listener=Listener())
    peer.join()
    peer.done(peer.calls()[0])
    assert peer.m.leave(now=peer.now)
    peer.pump()
    (revoked,) = peer.calls()
    assert (revoked.method, revoked.partitions) == ("on_partitions_revoked", (("t", 0), ("t", 1)))
    assert not any(s.req.api_key == ApiKey.LEAVE_GROUP for s in peer.pending)
    peer.done(revoked)
    sent = peer.take(ApiKey.LEAVE_GROUP)
    cls = response_type(ApiKey.LEAVE_GROUP, sent.req.version)
    peer.answer(sent, build(cls, throttle_time=NO_TIME, error_code=ErrorCode.none, members=()))
    assert any(isinstance(e, GroupLeft) for e in peer.events)
    assert peer.m.state is ConsumerState.LEAVING


def test_leave_waits_for_a_listener_call_in_progress() -> None:
    peer = ConsumerPeer(listener=Listener())
    peer.join()
    (assigned,) = peer.calls()
    assert peer.m.leave(now=peer.now)
    peer.pump()
    assert peer.calls() == []  # the assignment's call is still out
    peer.done(assigned)
    (revoked,) = peer.calls()
    assert revoked.method == "on_partitions_revoked"


def test_the_state_table_refuses_commands_of_a_closed_consumer() -> None:
    peer = ConsumerPeer(group=False)
    peer.m.close()
    assert peer.m.state is ConsumerState.CLOSED
    assert ALLOWED[ConsumerState.CLOSED] == frozenset({"close"})
    for call in (
        lambda: peer.m.poll(now=1.0),
        lambda: peer.m.take_one(now=1.0),
        lambda: peer.m.assign([("t", 0)], now=1.0),
        lambda: peer.m.seek(("t", 0), 1, now=1.0),
        lambda: peer.m.commit({("t", 0): 1}, now=1.0),
        lambda: peer.m.pause([("t", 0)]),
    ):
        with pytest.raises(ConsumerStoppedError, match="closed"):  # an IllegalStateError
            call()
    peer.m.close()  # twice is harmless
    assert peer.m.get_timer() is None


@pytest.mark.parametrize("group", [False, True])
def test_close_answers_every_query_still_open(group: bool) -> None:
    # A commit in flight when the consumer closes: its request fails with the client, and
    # the retry it would get never comes; its caller must not wait for an answer.
    peer = ConsumerPeer(group=group)
    if group:
        peer.join()
    else:
        answer_coordinator(peer)
    answer_offset_fetch(peer, {0: 0, 1: 0})
    commit = peer.m.commit({("t", 0): 7}, now=peer.now)
    committed = peer.m.fetch_committed([("t", 1)], now=peer.now)
    peer.pump()
    assert any(s.req.api_key == ApiKey.OFFSET_COMMIT for s in peer.pending)
    peer.m.close()
    events = []
    while (event := peer.m.next_event()) is not None:
        events.append(event)
    answers = {e.query_id: e.error for e in events if hasattr(e, "query_id")}
    assert sorted(answers) == sorted([commit, committed])
    for error in answers.values():
        assert isinstance(error, ConsumerStoppedError)
        assert "closed before the answer came" in str(error)


def test_unassigned_partitions_and_bad_limits_are_refused() -> None:
    peer = ConsumerPeer(group=False)
    with pytest.raises(IllegalStateError, match="t-9 is not assigned"):
        peer.m.seek(("t", 9), 0, now=0.0)
    with pytest.raises(KafkaConfigurationError, match="max_records"):
        peer.m.poll(0, now=0.0)


def test_records_given_back_are_handed_out_again_and_count_as_unread() -> None:
    peer = ConsumerPeer()
    peer.join()
    fetch_both(peer)
    runs = peer.m.poll(now=peer.now)
    assert peer.m.consumed() == {("t", 0): 3, ("t", 1): 3}
    # the adapter's deserializer failed on t-0's second record: it and the rest go back
    (tp0, records0, epoch0), rest = runs[0], runs[1:]
    peer.m.give_back([(tp0, records0[1:], epoch0), *rest])
    assert peer.m.consumed() == {("t", 0): 1, ("t", 1): 0}
    assert peer.m.position(("t", 0)) == 1
    again = peer.m.poll(now=peer.now)
    assert [(tp, [r.offset for r in recs]) for tp, recs, _ in again] == [
        (("t", 0), [1, 2]),
        (("t", 1), [0, 1, 2]),
    ]
    # a seek past a record drops what was given back for that partition
    peer.m.give_back(again[:1])
    peer.m.seek(("t", 0), 2, now=peer.now)
    assert peer.m.position(("t", 0)) == 2


# ------------------------------------------------------------------ assignment settled


def join_before_the_topic_is_known(*, leader: str) -> ConsumerPeer:
    """A member whose metadata does not name ``t`` yet joins (the wait for it is over) and
    is handed its assignment: by ``leader``'s, made knowing ``t``, or its own."""
    peer = ConsumerPeer(topics={"u": {0: (1, 0)}})
    answer_coordinator(peer)
    while not peer.has(ApiKey.JOIN_GROUP):
        peer.advance()  # the wait for "t" in metadata runs out
    answer_join(peer, leader=leader)
    answer_sync(peer, (("t", 0), ("t", 1)) if leader != "m-1" else None)
    assert peer.m.client.cluster.partitions_for("t") is None
    assert not peer.m.assignment_settled
    peer.topics["t"] = {0: (1, 0), 1: (1, 0)}
    return peer


def settled_events(peer: ConsumerPeer) -> list[AssignmentSettled]:
    return [e for e in peer.events if isinstance(e, AssignmentSettled)]


def test_an_assignment_that_came_before_the_metadata_settles_when_the_metadata_comes() -> None:
    # Found by the simulator (asyncio, seed 89): a follower's SyncGroup answer came before
    # its metadata named the topic; once the metadata did, nothing settled the assignment,
    # and aiokafka's start() waited its whole request_timeout_ms for a rebalance that
    # never came (the member then missed max_poll_interval and left the group).
    peer = join_before_the_topic_is_known(leader="m-0")
    while peer.m.client.cluster.partitions_for("t") is None:
        peer.advance()
    assert peer.m.assignment_settled
    assert settled_events(peer) == [AssignmentSettled(assignment=(("t", 0), ("t", 1)))]
    assert not peer.has(ApiKey.JOIN_GROUP)  # the generation stands


def test_a_leader_that_assigned_without_the_topic_settles_only_after_it_rejoined() -> None:
    peer = join_before_the_topic_is_known(leader="m-1")
    assert peer.m.assignment() == ()  # it knew no partitions to assign
    while not peer.has(ApiKey.JOIN_GROUP):
        peer.advance()  # the metadata names "t": the leader rejoins
    assert not peer.m.assignment_settled
    answer_join(peer, generation=2)
    answer_sync(peer)
    assert peer.m.assignment_settled
    assert settled_events(peer) == [AssignmentSettled(assignment=(("t", 0), ("t", 1)))]
