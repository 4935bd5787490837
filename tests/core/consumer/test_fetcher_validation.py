"""KIP-320 in the FetcherMachine, byte level against a scripted cluster: after a leader
change the position is validated with OffsetForLeaderEpoch; a truncated log moves the
position back (reset policy) or fails the partition with LogTruncationError (``none``)."""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.client import ClientConfig
from kafkastate.core.consumer.fetcher import (
    FetcherConfig,
    FetcherMachine,
    PositionsResolved,
    PositionState,
    RecordsFetched,
)
from kafkastate.core.consumer.group import GroupConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.protocol.records import RecordBatchBuilder
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, response_type
from kafkastate.errors import (
    LogTruncationError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)
from tests._support.peer import ScriptedCluster, Sent, response_frame

TP = ("t", 0)
TS = 1_700_000_000_000


def batch(base: int, count: int, *, epoch: int) -> bytes:
    builder = RecordBatchBuilder(base_offset=base, partition_leader_epoch=epoch)
    for i in range(count):
        builder.append(TS, None, b"v%d" % (base + i))
    return builder.build()


class FetcherPeer(ScriptedCluster):
    """A scripted cluster around a FetcherMachine: t-0 led by node 1 at epoch 0. The
    partition is assigned before any metadata: what waits for it (the first ListOffsets,
    the OffsetFetch) must go out as soon as it arrives."""

    def __init__(
        self, *, partitions: int = 1, group: GroupConfig | None = None, **config: Any
    ) -> None:
        cfg = FetcherConfig(
            client=ClientConfig(
                bootstrap_servers=[("boot", 9092)],
                metadata=MetadataConfig(retry_backoff=0.1),
            ),
            retry_backoff=0.1,
            **config,
        )
        topics = {"t": {i: (1, 0) for i in range(partitions)}}
        machine = FetcherMachine(cfg, rng=random.Random(3), group=group)
        super().__init__(machine, topics=topics)
        if group is None:
            self.m.assign([("t", i) for i in range(partitions)], now=0.0)
        else:
            self.m.subscribe(["t"], now=0.0)
        self.advance(0.0)  # bootstrap: connect, ApiVersions, Metadata

    def move_leader(self, node: int, epoch: int) -> None:
        """The partition's leader moves; the machine learns it from its next Fetch error."""
        self.topics["t"][0] = (node, epoch)

    def answer_list(self, offset: int, *, epoch: int) -> None:
        """Answer the pending ListOffsets: ``offset`` for every partition it names."""
        sent = self.take(ApiKey.LIST_OFFSETS)
        cls = response_type(ApiKey.LIST_OFFSETS, sent.req.version)
        parts = tuple(
            build(
                nested_type(cls, "ListOffsetsPartitionResponse"),
                partition_index=asked.partition_index,
                error_code=ErrorCode.none,
                timestamp=-1,
                offset=offset,
                leader_epoch=epoch,
            )
            for asked in sent.req.body.topics[0].partitions
        )
        topic = build(nested_type(cls, "ListOffsetsTopicResponse"), name="t", partitions=parts)
        self.answer(sent, build(cls, throttle_time=datetime.timedelta(0), topics=(topic,)))

    def answer_fetch(
        self,
        records: bytes = b"",
        *,
        code: int = 0,
        hw: int = 0,
        more: dict[int, tuple[bytes, int]] | None = None,
    ) -> Sent:
        """Answer the pending Fetch: partition 0 gets ``records`` (or ``code``) and high
        watermark ``hw``; ``more`` maps other partitions to (records, high watermark)."""
        sent = self.take(ApiKey.FETCH)
        cls = response_type(ApiKey.FETCH, sent.req.version)
        answers = {0: (records, hw), **(more or {})}
        parts = tuple(
            build(
                nested_type(cls, "PartitionData"),
                partition_index=index,
                error_code=ErrorCode(code if index == 0 else 0),
                high_watermark=high,
                last_stable_offset=high,
                log_start_offset=0,
                aborted_transactions=(),
                preferred_read_replica=-1,
                records=data,
            )
            for index, (data, high) in answers.items()
        )
        topic_id = {n: i for i, n in self.topic_ids().items()}["t"]
        topic = build(
            nested_type(cls, "FetchableTopicResponse"),
            topic="t",
            topic_id=topic_id,
            partitions=parts,
        )
        body = build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            session_id=0,
            responses=(topic,),
            node_endpoints=(),
        )
        self.answer(sent, body)
        return sent

    def answer_validation(self, end_offset: int, epoch: int, *, code: int = 0) -> Sent:
        sent = self.take(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        cls = response_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, sent.req.version)
        part = build(
            nested_type(cls, "EpochEndOffset"),
            error_code=ErrorCode(code),
            partition=0,
            leader_epoch=epoch,
            end_offset=end_offset,
        )
        topic = build(nested_type(cls, "OffsetForLeaderTopicResult"), topic="t", partitions=(part,))
        self.answer(sent, build(cls, throttle_time=datetime.timedelta(0), topics=(topic,)))
        return sent

    def has(self, api_key: int) -> bool:
        """Whether a request of that API waits for an answer."""
        return any(s.req.api_key == api_key for s in self.pending)

    def fetch_offset(self) -> tuple[int, int]:
        """(node, fetch offset) of the pending Fetch."""
        sent = self.take(ApiKey.FETCH)
        (topic,) = sent.req.body.topics
        (part,) = topic.partitions
        return sent.node, int(part.fetch_offset)

    def consumed(self) -> list[int]:
        """Offsets :meth:`poll` hands out; then what the machine sends next is pending."""
        offsets = [r.offset for _tp, rs, _e in self.m.poll(100, now=self.now) for r in rs]
        self.pump()
        return offsets


def after_leader_change(reset: str = "earliest") -> FetcherPeer:
    """Records 0-4 read at leader epoch 0 from node 1; then node 2 leads at epoch 1 and
    the next Fetch to node 1 says NOT_LEADER_OR_FOLLOWER."""
    peer = FetcherPeer(auto_offset_reset=reset)
    if reset == "none":
        peer.m.seek(TP, 0, now=peer.now)
        peer.pump()
    else:
        peer.answer_list(0, epoch=0)
    peer.answer_fetch(batch(0, 5, epoch=0), hw=5)
    assert peer.consumed() == [0, 1, 2, 3, 4]
    peer.move_leader(2, 1)
    peer.answer_fetch(code=6)  # NOT_LEADER_OR_FOLLOWER: refresh metadata
    assert not peer.has(ApiKey.FETCH)  # not to node 1 again before the new metadata
    peer.advance()  # the metadata refresh is due: node 2 leads at epoch 1
    return peer


def test_a_leader_change_validates_the_position_before_fetching_again() -> None:
    peer = after_leader_change()
    sent = peer.take(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    assert sent.node == 2 and sent.req.version >= 3
    assert sent.req.body.replica_id == -1
    (topic,) = sent.req.body.topics
    (part,) = topic.partitions
    assert (topic.topic, part.partition) == TP
    assert (part.leader_epoch, part.current_leader_epoch) == (0, 1)
    assert peer.m.position_state(TP) is PositionState.AWAIT_VALIDATION
    assert peer.m.position(TP) is None
    assert not peer.has(ApiKey.FETCH)  # not before the answer
    peer.answer_validation(5, 0)  # epoch 0 ends at 5 on the new leader: nothing lost
    assert any(isinstance(e, PositionsResolved) for e in peer.events)
    assert peer.m.position(TP) == 5
    assert peer.fetch_offset() == (2, 5)


def test_truncation_moves_the_position_back_to_the_divergence_with_a_reset_policy() -> None:
    peer = after_leader_change()
    peer.answer_validation(3, 0)  # the new leader's log has epoch 0 only up to offset 3
    assert peer.m.position_state(TP) is PositionState.FETCHING
    assert peer.m.position(TP) == 3
    assert peer.fetch_offset() == (2, 3)
    peer.answer_fetch(batch(3, 2, epoch=1), hw=5)
    assert peer.consumed() == [3, 4]  # the new leader's records 3-4, read again


def test_truncation_with_reset_none_fails_the_partition_until_a_seek() -> None:
    peer = after_leader_change("none")
    peer.answer_validation(3, 0)
    assert peer.m.position_state(TP) is PositionState.FAILED
    with pytest.raises(LogTruncationError) as info:
        peer.m.poll(10, now=peer.now)
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("t", 0, 5)
    assert (err.divergent_offset, err.divergent_epoch) == (3, 0)
    assert "t-0" in str(err) and "auto_offset_reset is 'none'" in str(err)
    assert not peer.has(ApiKey.FETCH)
    peer.m.seek(TP, 3, now=peer.now)
    peer.pump()
    assert peer.fetch_offset() == (2, 3)


def test_an_epoch_unknown_to_the_new_leader_resets_by_policy() -> None:
    peer = after_leader_change()
    peer.answer_validation(-1, -1)  # UNDEFINED_EPOCH_OFFSET
    assert peer.m.position_state(TP) is PositionState.AWAIT_RESET
    peer.answer_list(2, epoch=1)  # earliest on the new leader
    assert peer.fetch_offset() == (2, 2)


def test_an_unknown_epoch_with_reset_none_is_a_truncation_without_divergence() -> None:
    peer = after_leader_change("none")
    peer.answer_validation(-1, -1)
    with pytest.raises(LogTruncationError, match="divergence unknown") as info:
        peer.m.poll(10, now=peer.now)
    assert info.value.divergent_offset is None and info.value.divergent_epoch is None


def test_a_fenced_validation_refreshes_metadata_and_asks_again() -> None:
    peer = after_leader_change()
    peer.move_leader(2, 2)  # moved again meanwhile
    peer.answer_validation(-1, -1, code=74)  # FENCED_LEADER_EPOCH
    assert peer.m.position_state(TP) is PositionState.AWAIT_VALIDATION
    peer.advance()
    sent = peer.take(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    (part,) = sent.req.body.topics[0].partitions
    assert (part.leader_epoch, part.current_leader_epoch) == (0, 2)
    peer.answer_validation(5, 0)
    assert peer.fetch_offset() == (2, 5)


def test_a_validation_error_that_is_not_retriable_fails_the_partition() -> None:
    peer = after_leader_change()
    peer.answer_validation(-1, -1, code=29)  # TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(TopicAuthorizationFailedError, match="OffsetForLeaderEpoch for t-0"):
        peer.m.poll(10, now=peer.now)


def test_brokers_without_offset_for_leader_epoch_v3_skip_the_check() -> None:
    ranges = dict(CLIENT_VERSIONS)
    ranges[ApiKey.OFFSET_FOR_LEADER_EPOCH] = (0, 2)
    peer = FetcherPeer(auto_offset_reset="earliest")
    peer.api_ranges = ranges  # every connection is opened after this line
    peer.answer_list(0, epoch=0)
    peer.answer_fetch(batch(0, 5, epoch=0), hw=5)
    assert peer.consumed() == [0, 1, 2, 3, 4]
    peer.move_leader(2, 1)
    peer.answer_fetch(code=6)
    peer.advance()
    assert not peer.has(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    assert peer.fetch_offset() == (2, 5)


def test_a_seek_needs_no_validation_and_a_seek_during_validation_wins() -> None:
    peer = after_leader_change()
    peer.m.seek(TP, 1, now=peer.now)  # the application moves on before the answer
    peer.pump()
    peer.answer_validation(3, 0)  # stale: about the old position
    assert peer.m.position(TP) == 1
    assert peer.fetch_offset() == (2, 1)


def test_same_leader_epoch_means_no_validation() -> None:
    peer = FetcherPeer(auto_offset_reset="earliest")
    peer.answer_list(0, epoch=0)
    peer.answer_fetch(batch(0, 2, epoch=0), hw=2)
    assert peer.consumed() == [0, 1]
    assert not peer.has(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    assert peer.fetch_offset() == (1, 2)


def answer_coordinator(peer: FetcherPeer) -> None:
    sent = peer.take(ApiKey.FIND_COORDINATOR)
    cls = response_type(ApiKey.FIND_COORDINATOR, sent.req.version)
    found = build(
        nested_type(cls, "Coordinator"),
        key="g",
        node_id=1,
        host="b1",
        port=9092,
        error_code=ErrorCode.none,
        error_message=None,
    )
    peer.answer(sent, build(cls, throttle_time=datetime.timedelta(0), coordinators=(found,)))


def test_a_committed_offset_with_an_epoch_is_validated_and_commits_carry_the_epoch() -> None:
    peer = FetcherPeer(group_id="g")
    # FindCoordinator names node 1 before metadata knows it; the OffsetFetch goes out as
    # soon as the metadata does (no retry backoff, no second FindCoordinator).
    answer_coordinator(peer)
    assert not peer.has(ApiKey.FIND_COORDINATOR)
    sent = peer.take(ApiKey.OFFSET_FETCH)
    cls = response_type(ApiKey.OFFSET_FETCH, sent.req.version)
    topic_id = {n: i for i, n in peer.topic_ids().items()}["t"]
    part = build(
        nested_type(cls, "OffsetFetchResponsePartitions"),
        partition_index=0,
        committed_offset=5,
        committed_leader_epoch=0,
        metadata="",
        error_code=ErrorCode.none,
    )
    topic = build(
        nested_type(cls, "OffsetFetchResponseTopics"), topic_id=topic_id, partitions=(part,)
    )
    group = build(
        nested_type(cls, "OffsetFetchResponseGroup"),
        group_id="g",
        topics=(topic,),
        error_code=ErrorCode.none,
    )
    peer.answer(sent, build(cls, throttle_time=datetime.timedelta(0), groups=(group,)))
    # Records may have been lost while nobody consumed: check offset 5 of epoch 0 first.
    assert peer.m.position_state(TP) is PositionState.AWAIT_VALIDATION
    validation = peer.take(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    (vpart,) = validation.req.body.topics[0].partitions
    assert (vpart.leader_epoch, vpart.current_leader_epoch) == (0, 0)
    peer.answer_validation(4, 0)  # epoch 0 ends at 4 now: truncated, back to 4
    assert peer.fetch_offset() == (1, 4)
    peer.answer_fetch(batch(4, 3, epoch=2), hw=7)
    assert peer.consumed() == [4, 5, 6]
    # Committing the position sends the epoch of the record before it.
    peer.m.commit({TP: 7, ("t", 1): 3}, now=peer.now)
    peer.pump()
    commit = peer.take(ApiKey.OFFSET_COMMIT)
    epochs = {
        p.partition_index: p.committed_leader_epoch
        for t in commit.req.body.topics
        for p in t.partitions
    }
    assert epochs == {0: 2, 1: -1}  # t-1 is not assigned: its epoch is unknown


# -------------------------------------------------------------- prefetch and deadlines


def test_a_partition_is_refetched_as_soon_as_it_is_drained_not_before() -> None:
    peer = FetcherPeer(auto_offset_reset="earliest", fetch_max_wait=0.5)
    peer.answer_list(0, epoch=0)
    sent = peer.take(ApiKey.FETCH)
    assert sent.req.body.max_wait == datetime.timedelta(milliseconds=500)
    peer.answer_fetch(batch(0, 4, epoch=0), hw=4)
    assert not peer.has(ApiKey.FETCH)  # data waits for the application: no prefetch on top
    runs = peer.m.poll(3, now=peer.now)  # part of it
    peer.pump()
    assert [r.offset for _tp, rs, _e in runs for r in rs] == [0, 1, 2]
    assert not peer.has(ApiKey.FETCH)
    assert peer.consumed() == [3]  # drained: the next Fetch goes out at once
    assert peer.fetch_offset() == (1, 4)


def test_an_unanswered_fetch_fails_at_request_timeout_plus_max_wait_and_resumes() -> None:
    peer = FetcherPeer(auto_offset_reset="earliest", fetch_max_wait=0.5)
    peer.answer_list(0, epoch=0)
    assert peer.has(ApiKey.FETCH)
    start = peer.now
    timer = peer.m.get_timer()
    # the Client's request timeout is 30 s by default; the broker may hold a Fetch 0.5 s
    assert timer is not None and timer == pytest.approx(start + 30.5)
    peer.advance()  # the deadline passes: the connection is dropped, metadata refreshed
    for _ in range(5):
        if peer.has(ApiKey.FETCH):
            break
        peer.advance()
    assert peer.fetch_offset() == (1, 0)  # the same position again, from a new connection


def test_partitions_at_their_end_wait_while_another_is_drained() -> None:
    """A Fetch of caught-up partitions alone would be held by the broker for fetch_max_wait
    while the partition being drained could not be fetched (one Fetch per node)."""
    peer = FetcherPeer(partitions=2, auto_offset_reset="earliest")
    peer.answer_list(0, epoch=0)
    # t-0: everything there is (hw 3); t-1: the first 5 of 10 records
    peer.answer_fetch(batch(0, 3, epoch=0), hw=3, more={1: (batch(0, 5, epoch=0), 10)})
    runs = peer.m.poll(4, now=peer.now)  # t-0 drained, t-1 begun
    peer.pump()
    assert [(tp, len(rs)) for tp, rs, _e in runs] == [(("t", 0), 3), (("t", 1), 1)]
    assert not peer.has(ApiKey.FETCH)  # t-0 is at its end and t-1 still has data here
    runs = peer.m.poll(100, now=peer.now)
    peer.pump()
    assert [(tp, len(rs)) for tp, rs, _e in runs] == [(("t", 1), 4)]
    sent = peer.take(ApiKey.FETCH)  # t-1 drained: one Fetch for both
    (topic,) = sent.req.body.topics
    assert sorted((p.partition, p.fetch_offset) for p in topic.partitions) == [(0, 3), (1, 5)]


def test_a_paused_partition_holds_nothing_back() -> None:
    peer = FetcherPeer(partitions=2, auto_offset_reset="earliest")
    peer.answer_list(0, epoch=0)
    peer.answer_fetch(batch(0, 3, epoch=0), hw=3, more={1: (batch(0, 5, epoch=0), 10)})
    peer.m.poll(4, now=peer.now)  # t-0 drained, t-1 begun
    peer.pump()
    assert not peer.has(ApiKey.FETCH)
    peer.m.pause([("t", 1)])  # its data stays buffered, but nobody drains it now
    peer.pump()
    sent = peer.take(ApiKey.FETCH)
    (topic,) = sent.req.body.topics
    assert [(p.partition, p.fetch_offset) for p in topic.partitions] == [(0, 3)]


class PiecewisePeer(FetcherPeer):
    """A FetcherPeer whose answers reach the machine ``piece`` bytes at a time (0: whole),
    checking that the pieces before the last leave it quiet: no event, nothing to send."""

    piece = 0

    def _answer(self, node: int, req: Any, body: Any) -> None:
        if not self.piece:
            super()._answer(node, req, body)
            return
        frame = response_frame(req.correlation_id, body)
        for start in range(0, len(frame), self.piece):
            self.m.receive_data(node, frame[start : start + self.piece], now=self.now)
            if start + self.piece < len(frame):
                assert self.m.next_event() is None
                assert self.m.data_to_send() == []


def test_a_fetch_response_arriving_in_pieces_is_taken_in_once_whole() -> None:
    peer = PiecewisePeer(partitions=3, auto_offset_reset="earliest")
    peer.answer_list(0, epoch=0)
    peer.piece = 7
    peer.answer_fetch(
        batch(0, 3, epoch=0),
        hw=3,
        more={1: (batch(0, 2, epoch=0), 2), 2: (batch(0, 4, epoch=0), 6)},
    )
    assert any(isinstance(e, RecordsFetched) for e in peer.events)
    runs = peer.m.poll(100, now=peer.now)
    peer.pump()
    assert [(tp, len(rs)) for tp, rs, _e in runs] == [(("t", 0), 3), (("t", 1), 2), (("t", 2), 4)]
    sent = peer.take(ApiKey.FETCH)  # all drained: the next Fetch, as after a whole answer
    (topic,) = sent.req.body.topics
    assert [(p.partition, p.fetch_offset) for p in topic.partitions] == [(0, 3), (1, 2), (2, 4)]


def test_a_timer_due_while_pieces_arrive_still_runs() -> None:
    """A piece of a response does not step the machine, unless the Client has a deadline
    that passed: that runs as it would have."""
    peer = PiecewisePeer(auto_offset_reset="earliest", fetch_max_wait=0.5)
    peer.answer_list(0, epoch=0)
    peer.answer_fetch(batch(0, 2, epoch=0), hw=2)
    assert peer.consumed() == [0, 1]
    sent = peer.take(ApiKey.FETCH)
    deadline = peer.m.get_timer()
    assert deadline is not None
    peer.now = deadline  # the Fetch's request timeout passes as the answer's first bytes come
    frame = response_frame(sent.req.correlation_id, _empty_fetch(sent))
    assert sent.node in peer.open
    peer.m.receive_data(sent.node, frame[:5], now=peer.now)
    peer.pump()
    assert sent.node not in peer.open  # the Fetch expired: its connection was dropped


def _empty_fetch(sent: Sent) -> Any:
    cls = response_type(ApiKey.FETCH, sent.req.version)
    return build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(),
        node_endpoints=(),
    )


# ------------------------------------------------------------------ stale answers


def test_a_lookup_answered_after_a_newer_seek_is_dropped() -> None:
    peer = FetcherPeer(auto_offset_reset="earliest")
    first = peer.take(ApiKey.LIST_OFFSETS)
    (asked,) = first.req.body.topics[0].partitions
    assert asked.timestamp == -2  # earliest
    peer.m.seek_to([TP], -1, now=peer.now)  # seek_to_end while the lookup is out
    peer.answer_list(0, epoch=0)  # the earliest answer comes back: stale
    assert peer.m.position(TP) is None
    second = peer.take(ApiKey.LIST_OFFSETS)
    (asked,) = second.req.body.topics[0].partitions
    assert asked.timestamp == -1  # latest, asked once the stale one was back
    peer.answer_list(10, epoch=0)
    assert peer.m.position(TP) == 10
    assert peer.fetch_offset() == (1, 10)


def test_out_of_range_with_reset_none_is_offset_out_of_range() -> None:
    peer = FetcherPeer(auto_offset_reset="none")
    peer.m.seek(TP, 50, now=peer.now)
    peer.pump()
    peer.answer_fetch(code=1)  # OFFSET_OUT_OF_RANGE
    with pytest.raises(
        OffsetOutOfRangeError, match="offset 50 is out of range for partition t-0"
    ) as info:
        peer.m.poll(10, now=peer.now)
    # aiokafka's and kafka-python's form: the partitions and offsets in args[0]
    assert info.value.args == ({TP: 50},)


# ------------------------------------------------------------ too large to fetch


def test_a_batch_cut_short_by_the_fetch_limits_raises_record_too_large() -> None:
    """Brokers since KIP-74 send a first batch whole even over the limits; one that sends
    only a piece (very old brokers) must not stall the partition silently."""
    peer = FetcherPeer(auto_offset_reset="earliest", max_partition_fetch_bytes=64)
    peer.answer_list(0, epoch=0)
    whole = batch(0, 3, epoch=0)
    peer.answer_fetch(whole[:50], hw=3)  # the first 50 bytes of a larger batch
    with pytest.raises(
        RecordTooLargeError, match=r"offset 0 of t-0 .*max_partition_fetch_bytes \(64\)"
    ):
        peer.m.poll(10, now=peer.now)
