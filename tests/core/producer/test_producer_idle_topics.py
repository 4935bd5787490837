"""``metadata.max.idle.ms``: a topic the producer stopped sending to leaves its metadata.

Java's ``ProducerMetadata.retainTopic``: a topic not sent to for ``metadata_max_idle``
(nothing appended, nothing pending for it) is dropped from the topics of interest at the
next metadata update, so the following Metadata requests no longer name it; a later send
asks for it again and waits for its metadata as a first send does. Driven by hand: the
scripted peer cluster answers Metadata, the tests answer Produce; time stepped with
``now=``.
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest

from kafkastate.core.config import producer_config, resolve
from kafkastate.core.producer import RecordsAcknowledged, RecordsAdmitted, RecordsFailed
from kafkastate.core.producer.accumulator import RECORD_OVERHEAD
from kafkastate.core.producer.producer import ProducerConfig, ProducerMachine
from kafkastate.core.protocol.versions import ApiKey
from kafkastate.errors import KafkaConfigurationError, KafkaTimeoutError
from tests.core.producer.test_producer_machine import TS, PeerCluster, machine
from tests.core.producer.test_producer_wait import answer_all

IDLE = 10.0
MAX_AGE = 3.0


def idle_peer(*, topics: Any = None, max_block: float | None = 2.0, **kw: Any) -> PeerCluster:
    """A started producer (acks=1, no linger) with ``metadata_max_idle`` of IDLE seconds
    and a metadata refresh every MAX_AGE seconds; topics ``a`` and ``b`` by default."""
    base = machine(acks=1, linger=0.0, metadata_max_idle=IDLE, **kw).config
    client = attrs.evolve(
        base.client, metadata=attrs.evolve(base.client.metadata, metadata_max_age=MAX_AGE)
    )
    config = attrs.evolve(
        base, client=client, accumulator=attrs.evolve(base.accumulator, max_block=max_block)
    )
    if topics is None:
        topics = {"a": {0: (1, 0)}, "b": {0: (2, 0)}}
    peer = PeerCluster(ProducerMachine(config, rng=random.Random(7)), topics=topics)
    peer.start()
    return peer


def send(peer: PeerCluster, topic: str, value: bytes = b"x") -> Any:
    rid = peer.m.send(topic, value=value, timestamp_ms=TS, now=peer.now)
    peer.pump()
    return rid


def run_until(peer: PeerCluster, until: float) -> None:
    """Step the machine's timers (metadata refreshes, retries) up to ``until``."""
    while True:
        timer = peer.m.get_timer()
        if timer is None or timer > until:
            break
        peer.advance()
    peer.now = max(peer.now, until)


def acked(peer: PeerCluster) -> list[tuple[str, tuple[int, ...]]]:
    return [(e.topic, e.record_ids) for e in peer.events if isinstance(e, RecordsAcknowledged)]


def test_a_topic_idle_past_the_limit_leaves_the_next_metadata_request() -> None:
    peer = idle_peer()
    m = peer.m
    send(peer, "a")
    answer_all(peer, {})  # a: acknowledged at 0
    run_until(peer, 5.0)
    send(peer, "b")
    answer_all(peer, {})  # b: acknowledged at 5
    assert peer.metadata_topics[-1] == ("a", "b")
    # refreshes every 3 s: the one at 9 keeps a (idle for 9 s), the one at 12 drops it
    run_until(peer, 11.0)
    assert m.tracked_topics == ("a", "b")
    run_until(peer, 12.0)
    assert m.tracked_topics == ("b",)
    assert "a" not in m.client.cluster.topics
    assert m.client.metadata.topics == ("b",)
    before = len(peer.metadata_topics)
    run_until(peer, 15.0)  # b idle since 5: the refresh at 15 still names it, then drops it
    assert peer.metadata_topics[before:] == [("b",)]
    assert m.tracked_topics == ()
    run_until(peer, 18.0)
    assert peer.metadata_topics[-1] == ()
    assert acked(peer) == [("a", (0,)), ("b", (1,))]


def test_the_idle_clock_counts_from_the_last_send_not_the_first() -> None:
    peer = idle_peer()
    for at in (0.0, 4.0, 8.0):
        run_until(peer, at)
        send(peer, "a")
        answer_all(peer, {})
    run_until(peer, 17.0)  # 9 s after the last send
    assert "a" in peer.m.tracked_topics
    run_until(peer, 22.0)
    assert "a" not in peer.m.tracked_topics


def test_a_topic_with_records_in_flight_is_kept_until_their_outcome() -> None:
    peer = idle_peer()
    m = peer.m
    send(peer, "b")
    answer_all(peer, {})  # a connection to node 2, which answers the refreshes below
    send(peer, "a")  # to node 1: in flight, unanswered
    assert [s.req.api_key for s in peer.pending] == [ApiKey.PRODUCE]
    asked = len(peer.metadata_topics)
    run_until(peer, 25.0)  # well past the idle limit: several refreshes
    assert len(peer.metadata_topics) - asked >= 6
    assert [s.req.api_key for s in peer.pending] == [ApiKey.PRODUCE]  # all answered
    assert m.tracked_topics == ("a",)  # b went idle
    assert peer.metadata_topics[-1] == ("a",)
    answer_all(peer, {})  # the outcome at 25: the topic counts as used until then
    assert acked(peer) == [("b", (0,)), ("a", (1,))]
    run_until(peer, 34.0)
    assert "a" in m.tracked_topics
    run_until(peer, 38.0)
    assert "a" not in m.tracked_topics


def test_a_topic_with_a_send_waiting_for_its_metadata_is_kept() -> None:
    peer = idle_peer(max_block=60.0)  # the held send waits longer than the idle limit
    m = peer.m
    rid = send(peer, "late")  # not in the cluster yet: held for its metadata
    assert m.is_waiting(rid)
    run_until(peer, 30.0)
    assert "late" in m.tracked_topics
    assert peer.metadata_topics[-1] == ("late",)  # a and b were never sent to: gone
    peer.topics["late"] = {0: (1, 0)}
    run_until(peer, 31.0)
    assert not m.is_waiting(rid)
    answer_all(peer, {})
    assert acked(peer) == [("late", (rid,))]


def test_a_topic_with_a_send_waiting_for_buffer_memory_is_kept() -> None:
    # room for about two records: the third send waits for memory
    peer = idle_peer(max_block=60.0, buffer_memory=2 * (100 + RECORD_OVERHEAD) + 100)
    m = peer.m
    send(peer, "a", b"v" * 100)
    send(peer, "a", b"v" * 100)
    rid = send(peer, "b", b"v" * 100)
    assert m.is_waiting(rid)
    run_until(peer, 25.0)
    assert m.tracked_topics == ("a", "b")
    answer_all(peer, {})  # memory freed at 25: b's send goes in, then out
    assert not m.is_waiting(rid)
    answer_all(peer, {})
    assert [topic for topic, _ in acked(peer)] == ["a", "a", "b"]
    run_until(peer, 34.0)
    assert m.tracked_topics == ("a", "b")
    run_until(peer, 38.0)
    assert m.tracked_topics == ()


def test_a_send_after_expiry_asks_for_the_topic_again_and_succeeds() -> None:
    peer = idle_peer()
    m = peer.m
    send(peer, "a")
    answer_all(peer, {})
    run_until(peer, 13.0)
    assert "a" not in m.tracked_topics and "a" not in m.client.cluster.topics
    asked = len(peer.metadata_topics)
    rid = send(peer, "a")
    # The first send after expiry waits for the metadata it asks for at once (a new topic
    # of interest skips the backoff), then goes out.
    assert peer.metadata_topics[asked:] == [("a",)]
    assert not m.is_waiting(rid)
    assert [e.record_ids for e in peer.events if isinstance(e, RecordsAdmitted)] == [(rid,)]
    answer_all(peer, {})
    assert acked(peer)[-1] == ("a", (rid,))
    assert m.tracked_topics == ("a",)


def test_a_deleted_topic_stops_being_asked_for() -> None:
    peer = idle_peer()
    m = peer.m
    send(peer, "a")
    answer_all(peer, {})
    del peer.topics["a"]  # deleted: every answer names it unknown (a refresh per backoff)
    run_until(peer, 2.0)
    assert peer.metadata_topics[-1] == ("a", "b")
    run_until(peer, 12.0)
    assert "a" not in m.tracked_topics
    before = len(peer.metadata_topics)
    run_until(peer, 30.0)
    after = peer.metadata_topics[before:]
    assert all("a" not in asked for asked in after if asked)
    # only the periodic refreshes (every MAX_AGE), no longer one per retry backoff
    assert len(after) <= 18.0 / MAX_AGE + 1


def test_a_send_that_failed_waiting_for_metadata_expires_after_its_outcome() -> None:
    peer = idle_peer(max_block=2.0)
    m = peer.m
    send(peer, "never")  # no such topic: fails at max_block (2 s)
    run_until(peer, 3.0)
    (failed,) = [e for e in peer.events if isinstance(e, RecordsFailed)]
    assert isinstance(failed.error, KafkaTimeoutError)
    run_until(peer, 11.0)  # 9 s after the failure
    assert "never" in m.tracked_topics
    run_until(peer, 15.0)
    assert "never" not in m.tracked_topics
    assert "never" not in (m.client.metadata.topics or ())


def test_the_option_defaults_to_five_minutes_and_converts_ms() -> None:
    default = producer_config(resolve("producer", "kafkastate", {}, owner="test"))
    assert default.metadata_max_idle == 300.0
    given = resolve("producer", "kafkastate", {"metadata_max_idle_ms": 5500}, owner="t")
    assert producer_config(given).metadata_max_idle == 5.5
    by_prop = {"metadata.max.idle.ms": 60000}
    resolved = resolve("producer", "kafkastate", by_prop, owner="t")
    assert producer_config(resolved).metadata_max_idle == 60.0


@pytest.mark.parametrize("bad", [0, -1, 1000, 4999, 5000.0, True, "300000", None])
def test_bad_values_are_refused_with_a_typed_error(bad: Any) -> None:
    with pytest.raises(KafkaConfigurationError, match="metadata_max_idle_ms"):
        resolve("producer", "kafkastate", {"metadata_max_idle_ms": bad}, owner="t")


@pytest.mark.parametrize("bad", [0, -1.0, True, "1"])
def test_the_core_config_refuses_bad_values_too(bad: Any) -> None:
    client = machine().config.client
    with pytest.raises(KafkaConfigurationError, match="metadata_max_idle"):
        ProducerConfig(client=client, metadata_max_idle=bad)


def test_the_core_config_takes_any_positive_duration() -> None:
    # Java's 5000 ms minimum is the option layer's; the core (tests, the simulator) may
    # use less.
    client = machine().config.client
    assert ProducerConfig(client=client, metadata_max_idle=0.5).metadata_max_idle == 0.5


@pytest.mark.parametrize("flavour", ["aiokafka", "kafka-python", "kafkastate"])
def test_every_producer_face_accepts_the_option(flavour: str) -> None:
    given = {"metadata_max_idle_ms": 5000}  # Java's minimum
    assert producer_config(resolve("producer", flavour, given, owner="t")).metadata_max_idle == 5


def test_a_topic_whose_first_metadata_comes_late_is_kept_by_that_answer() -> None:
    # Java's ProducerMetadata.newTopics: the answer that first brings a topic keeps it,
    # however long it took; its idle clock starts then. Here the Metadata answer naming
    # "late" waits behind unanswered Produce requests on both brokers for longer than the
    # idle limit.
    peer = idle_peer(request_timeout=60.0, delivery_timeout=120.0)
    m = peer.m
    send(peer, "a")
    send(peer, "b")
    assert len(peer.produces()) == 2
    peer.topics["late"] = {0: (1, 0)}
    m.track_topics(["late"], now=peer.now)
    peer.advance(peer.now)
    assert peer.metadata_topics[-1] == ("a", "b", "late")
    peer.now = 15.0  # past the idle limit, no answer yet
    answer_all(peer, {})  # the produces, then the Metadata answer queued behind them
    assert m.client.cluster.partitions_for("late") == (0,)
    assert "late" in m.tracked_topics
    run_until(peer, 24.0)  # idle for 9 s since its metadata came
    assert "late" in m.tracked_topics
    run_until(peer, 28.0)
    assert "late" not in m.tracked_topics


def test_track_topics_without_now_before_any_step_keeps_the_topic() -> None:
    # A machine first driven at a large clock value (loop.time(), an uptime): a topic
    # tracked with now=None (the machine's last now: none yet) is kept by the answer that
    # brings it.
    config = machine(acks=1, linger=0.0, metadata_max_idle=IDLE).config
    peer = PeerCluster(ProducerMachine(config, rng=random.Random(7)))
    peer.now = 5000.0
    peer.m.track_topics(["t"])
    peer.advance(peer.now)
    assert peer.m.client.cluster.partitions_for("t") == (0, 1)
    assert peer.m.tracked_topics == ("t",)
