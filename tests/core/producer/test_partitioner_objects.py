"""kafka-python 3.0's partitioner objects (kafkastate.partitioner and the core's
HashPartitioner / StickyHashPartitioner): the ``partition(topic, key, key_bytes, value,
value_bytes, cluster)`` form, KIP-480's ``on_new_batch`` as the producer machine calls it,
kafka-python's own objects driven by the core, and murmur2's unsigned value."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

import kafka.partitioner
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastate import partitioner as kp
from kafkastate.core.producer.partitioner import (
    ClusterView,
    Partitioner,
    PartitionerError,
    default_partition,
)
from kafkastate.core.producer.partitioner import murmur2 as java_murmur2
from tests.core.producer.test_partitioner import FOUR, cluster
from tests.core.producer.test_producer_machine import (
    PeerCluster,
    machine,
    parts_of,
    produce_response,
)

VIEW = ClusterView(FOUR)


@given(st.binary(max_size=64))
def test_murmur2_is_kafka_pythons_unsigned_value(data: bytes) -> None:
    assert kp.murmur2(data) == kafka.partitioner.murmur2(data)
    assert kp.murmur2(data) & 0x7FFFFFFF == java_murmur2(data) & 0x7FFFFFFF  # same choice


def test_cluster_view_has_kafka_pythons_methods() -> None:
    half = cluster({0: 1, 1: None})
    view = ClusterView(half)
    assert view.topics() == {"t"}
    assert view.partitions_for_topic("t") == {0, 1}
    assert view.available_partitions_for_topic("t") == {0}
    assert view.partitions_for_topic("nope") is None
    assert view.available_partitions_for_topic("nope") is None
    assert view.leader_for_partition(("t", 0)) == 1
    assert view.leader_for_partition(("t", 1)) is None


@given(st.binary(min_size=1, max_size=32))
def test_default_partitioner_keyed_is_kafka_pythons(key: bytes) -> None:
    ours = kp.DefaultPartitioner().partition("t", key, key, b"v", b"v", VIEW)
    theirs = kafka.partitioner.DefaultPartitioner().partition("t", key, key, b"v", b"v", VIEW)
    assert ours == theirs == default_partition(key, 4)


def test_default_partitioner_keyless_is_random_among_available() -> None:
    half = ClusterView(cluster({0: 1, 1: None, 2: 1}))
    p = kp.DefaultPartitioner(random.Random(3))
    seen = Counter(p.partition("t", None, None, b"v", b"v", half) for _ in range(300))
    assert set(seen) == {0, 2}
    with pytest.raises(ValueError, match="Topic nope not found in ClusterMetadata"):
        p.partition("nope", None, None, b"v", b"v", half)


def test_sticky_partitioner_sticks_until_on_new_batch() -> None:
    p = kp.StickyPartitioner(random.Random(5))
    first = p.partition("t", None, None, b"v", b"v", VIEW)
    assert {p.partition("t", None, None, b"v", b"v", VIEW) for _ in range(20)} == {first}
    p.on_new_batch("t", VIEW, first)
    second = p.partition("t", None, None, b"v", b"v", VIEW)
    assert second != first  # rotated off the full partition
    p.on_new_batch("t", VIEW, first)  # stale: the sticky partition moved already
    assert p.partition("t", None, None, b"v", b"v", VIEW) == second
    assert p.partition("t", b"k", b"k", b"v", b"v", VIEW) == default_partition(b"k", 4)
    assert isinstance(p, kp.Partitioner)


def test_sticky_partitioner_leaves_a_partition_without_leader() -> None:
    p = kp.StickyPartitioner(random.Random(1))
    first = p.partition("t", None, None, None, None, VIEW)
    leaders: dict[int, int | None] = {0: 1, 1: 1, 2: 1, 3: 1}
    leaders[first] = None
    moved = p.partition("t", None, None, None, None, ClusterView(cluster(leaders)))
    assert moved != first


class _Recorder(kp.Partitioner):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def partition(  # noqa: PLR0917
        self, topic: str, key: Any, key_bytes: Any, value: Any, value_bytes: Any, cluster: Any
    ) -> int:
        self.calls.append((topic, key, key_bytes, value, value_bytes))
        assert cluster.partitions_for_topic(topic) == {0, 1, 2, 3}
        return 3


def test_core_partitioner_calls_an_object_with_kafka_pythons_arguments() -> None:
    rec = _Recorder()
    core = Partitioner(rng=random.Random(1), custom=rec)
    assert core.partition("t", b"k", FOUR, value=b"v") == 3
    assert core.partition("t", None, FOUR) == 3
    assert core.partition("t", b"k", FOUR, explicit=1) == 1  # an explicit partition wins
    # kafkastate sees serialized records only: key and value are the bytes
    assert rec.calls == [("t", b"k", b"k", b"v", b"v"), ("t", None, None, None, None)]
    assert not core.wants_batch_hint


def test_core_partitioner_refuses_what_an_object_returns_or_raises() -> None:
    class Bad(kp.Partitioner):
        def partition(self, *args: Any) -> int:  # type: ignore[override]
            return 9

    with pytest.raises(PartitionerError, match="returned 9"):
        Partitioner(rng=random.Random(1), custom=Bad()).partition("t", None, FOUR)

    class Raises(kp.Partitioner):
        def partition(self, *args: Any) -> int:  # type: ignore[override]
            raise ValueError("boom")

    with pytest.raises(PartitionerError, match="raised ValueError: boom") as caught:
        Partitioner(rng=random.Random(1), custom=Raises()).partition("t", None, FOUR)
    assert isinstance(caught.value.__cause__, ValueError)


@pytest.mark.parametrize(
    "make", [lambda: kp.StickyPartitioner(random.Random(2)), kafka.partitioner.StickyPartitioner]
)
def test_on_new_batch_runs_when_a_keyless_record_would_open_a_batch(make: Any) -> None:
    # kafka-python's own StickyPartitioner works too: the view has its cluster methods
    sticky = make()
    core = Partitioner(rng=random.Random(1), custom=sticky)
    assert core.wants_batch_hint
    first = core.partition("t", None, FOUR, opens_batch=lambda p: False)
    assert core.partition("t", None, FOUR, opens_batch=lambda p: False) == first
    asked: list[int] = []

    def opens(p: int) -> bool:
        asked.append(p)
        return True

    rotated = core.partition("t", None, FOUR, opens_batch=opens)
    assert asked == [first] and rotated != first  # the record opening the batch moved
    # keyed records never ask
    assert core.partition("t", b"k", FOUR, opens_batch=opens) == default_partition(b"k", 4)
    assert asked == [first]


def test_the_producer_machine_rotates_a_sticky_partitioner_per_batch() -> None:
    sticky = kp.StickyPartitioner(random.Random(4))
    topics = {"t": {p: (1 + p % 2, 0) for p in range(4)}}
    peer = PeerCluster(machine(batch_size=200, linger=5.0, partitioner=sticky), topics)
    peer.start()
    ids = peer.topic_ids()
    values = [b"%02d" % n + b"x" * 58 for n in range(12)]
    where: dict[bytes | None, int] = {}

    def answer_all() -> None:  # a partition sends its next batch once one is acknowledged
        for sent in peer.produces():
            for part in parts_of(sent, ids):
                where.update(dict.fromkeys(part.values, part.partition))
            peer.answer(sent, produce_response(sent, lambda p: (0, 0), ids))

    for n, value in enumerate(values):
        peer.m.send("t", value=value, timestamp_ms=n, now=peer.now)
        peer.pump()
        answer_all()
    peer.advance()  # the linger of the last, partial batch
    answer_all()
    order = [where[v] for v in values]
    runs = [len(list(g)) for _, g in itertools.groupby(order)]
    # each batch filled before the partitioner moved on (KIP-480), to another partition
    assert len(runs) >= 3 and len(set(runs[:-1])) == 1 and runs[-1] <= runs[0]
