"""The partitioner: murmur2 against Java vectors and kafka-python, keyed, explicit, custom and
uniform sticky (KIP-794) choices."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from aiokafka.partitioner import DefaultPartitioner as AiokafkaDefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kafkastate.core.metadata import ClusterMetadata, NodeId, PartitionMetadata, TopicMetadata
from kafkastate.core.producer.partitioner import (
    Partitioner,
    PartitionerError,
    default_partition,
    murmur2,
    murmur2_python,
)
from kafkastate.core.protocol import records
from kafkastate.errors import (
    KafkaConfigurationError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

# Java Utils.murmur2 results (clients/src/test/.../UtilsTest.testMurmur2 and the Java client).
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


def cluster(leaders: dict[int, int | None], topic: str = "t") -> ClusterMetadata:
    """A snapshot of one topic; ``leaders`` maps partition -> leader node (None: leaderless)."""
    parts = {
        p: PartitionMetadata(
            partition=p,
            leader=None if leader is None else NodeId(leader),
            leader_epoch=0,
            replicas=(),
            isr=(),
        )
        for p, leader in leaders.items()
    }
    return ClusterMetadata(
        topics={topic: TopicMetadata(name=topic, topic_id=None, partitions=parts)}
    )


FOUR = cluster({0: 1, 1: 2, 2: 1, 3: 2})


# ------------------------------------------------------------------------------- murmur2


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS)
def test_murmur2_java_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert kafka_python_murmur2(data) == expected & 0xFFFFFFFF  # an independent port agrees


@given(st.binary(max_size=300))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    h = murmur2(data)
    assert -(2**31) <= h < 2**31
    assert h & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert murmur2(bytearray(data)) == h
    assert murmur2(memoryview(data)) == h


@pytest.mark.usefixtures("c_accelerator")
@given(st.binary(max_size=300))
def test_compiled_murmur2_is_the_reference(data: bytes) -> None:
    # murmur2 takes the C accelerator's hash for bytes while it is on; murmur2_python is
    # the reference it must equal (every length modulo 4, every byte value)
    assert records._speedups.murmur2(data) == murmur2_python(data) == murmur2(data)
    assert records._speedups.murmur2(memoryview(data)) == murmur2_python(data)


@pytest.mark.usefixtures("c_accelerator")
def test_murmur2_follows_the_speedups_switch() -> None:
    previous = records.set_speedups(False)
    try:
        assert records._c_murmur2 is None
        assert murmur2(b"21") == -973932308  # the Python reference
        p = Partitioner(rng=random.Random(1))
        for i in range(50):  # the keyed hot path hashes with the reference too
            key = b"key-%d" % i
            assert p.key_partition("t", key, FOUR) == default_partition(key, 4)
    finally:
        records.set_speedups(previous)
    assert records._c_murmur2 is records._speedups.murmur2
    with pytest.raises(TypeError):
        records._speedups.murmur2("a str")  # type: ignore[arg-type]


@given(st.binary(max_size=40), st.integers(min_value=1, max_value=12))
def test_key_partition_is_partition(key: bytes, n: int) -> None:
    # the keyed hot path gives what partition() gives, or None (never another answer)
    c = cluster(dict.fromkeys(range(n), 1))
    p = Partitioner(rng=random.Random(1))
    assert p.key_partition("t", key, c) == p.partition("t", key, c) == default_partition(key, n)
    assert p.key_partition("t", key, c) == default_partition(key, n)  # cached for c


def test_key_partition_leaves_the_unusual_to_partition() -> None:
    p = Partitioner(rng=random.Random(1))
    assert p.key_partition("nope", b"k", FOUR) is None  # partition() raises
    denied = ClusterMetadata(
        topics={"t": TopicMetadata(name="t", topic_id=None, partitions={}, error_code=29)}
    )
    assert p.key_partition("t", b"k", denied) is None
    empty = ClusterMetadata(topics={"t": TopicMetadata(name="t", topic_id=None, partitions={})})
    assert p.key_partition("t", b"k", empty) is None
    assert p.key_partition("t", bytearray(b"k"), FOUR) is None  # type: ignore[arg-type]
    assert p.key_partition("t", b"foobar", FOUR) == default_partition(b"foobar", 4)
    grown = cluster({i: 1 for i in range(7)})  # a new snapshot: the count is read again
    assert p.key_partition("t", b"foobar", grown) == default_partition(b"foobar", 7)
    custom = Partitioner(rng=random.Random(1), custom=lambda k, a, av: 0)
    assert custom.key_partition("t", b"foobar", FOUR) is None


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=1, max_value=500))
def test_default_partition_matches_aiokafka(key: bytes, n: int) -> None:
    partitions = list(range(n))
    expected = AiokafkaDefaultPartitioner()(key, partitions, partitions)
    assert default_partition(key, n) == expected
    assert default_partition(key, n) == (murmur2(key) & 0x7FFFFFFF) % n


def test_default_partition_java_to_positive() -> None:
    # murmur2(b"21") is negative: toPositive masks the sign bit, it does not negate.
    assert default_partition(b"21", 1000) == (-973932308 & 0x7FFFFFFF) % 1000 == 340
    assert abs(-973932308) % 1000 == 308  # what an abs()-based port would wrongly pick
    with pytest.raises(KafkaConfigurationError, match="num_partitions"):
        default_partition(b"k", 0)


# ------------------------------------------------------------------------ keyed / explicit


def test_keyed_records_hash_over_all_partitions() -> None:
    # a leaderless partition still receives its keys: the key -> partition map must not move
    c = cluster({0: 1, 1: None, 2: 1, 3: 1})
    p = Partitioner(rng=random.Random(1))
    for i in range(200):
        key = f"key-{i}".encode()
        assert p.partition("t", key, c) == default_partition(key, 4)
    assert p.partition("t", b"foobar", c) == p.partition("t", b"foobar", c)


def test_explicit_partition_wins() -> None:
    p = Partitioner(rng=random.Random(1), custom=lambda k, a, av: 0)
    assert p.partition("t", b"foobar", FOUR, explicit=3) == 3
    assert p.partition("t", None, FOUR, explicit=2) == 2
    assert p.sticky_partition("t") is None  # the sticky path was not taken


def test_explicit_partition_out_of_range() -> None:
    p = Partitioner(rng=random.Random(1))
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 4 of topic 't'") as info:
        p.partition("t", None, FOUR, explicit=4)
    assert info.value.retriable  # metadata may lag a partition increase: refresh and retry
    for bad in (-1, True, "1", 1.0):
        with pytest.raises(KafkaConfigurationError, match="non-negative int"):
            p.partition("t", None, FOUR, explicit=bad)  # type: ignore[arg-type]


def test_unknown_topic_and_topic_errors() -> None:
    p = Partitioner(rng=random.Random(1))
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope' is not in the metadata"):
        p.partition("nope", b"k", FOUR)
    denied = ClusterMetadata(
        topics={"t": TopicMetadata(name="t", topic_id=None, partitions={}, error_code=29)}
    )
    with pytest.raises(TopicAuthorizationFailedError):
        p.partition("t", b"k", denied)
    empty = ClusterMetadata(topics={"t": TopicMetadata(name="t", topic_id=None, partitions={})})
    with pytest.raises(UnknownTopicOrPartitionError):
        p.partition("t", None, empty)


# --------------------------------------------------------------------------------- sticky


def test_sticky_holds_until_batch_size_then_switches() -> None:
    p = Partitioner(rng=random.Random(7), batch_size=1000)
    first = p.partition("t", None, FOUR)
    assert p.sticky_partition("t") == first
    for _ in range(9):
        p.on_append("t", first, 100, batch_full=True)
        assert p.partition("t", None, FOUR) == first  # 900 bytes < batch.size
    p.on_append("t", first, 100, batch_full=True)  # 1000 bytes: switch
    assert p.sticky_partition("t") is None
    p.partition("t", None, FOUR)
    assert p.sticky_partition("t") is not None


def test_sticky_waits_for_a_full_batch_up_to_twice_batch_size() -> None:
    p = Partitioner(rng=random.Random(7), batch_size=1000)
    first = p.partition("t", None, FOUR)
    p.on_append("t", first, 1500, batch_full=False)
    assert p.sticky_partition("t") == first  # over batch.size but the batch has room
    p.on_append("t", first, 499, batch_full=False)
    assert p.sticky_partition("t") == first
    p.on_append("t", first, 1, batch_full=False)  # 2000 = 2 x batch.size: switch anyway
    assert p.sticky_partition("t") is None


def test_on_append_ignores_other_partitions_and_topics() -> None:
    p = Partitioner(rng=random.Random(7), batch_size=10)
    first = p.partition("t", None, FOUR)
    p.on_append("t", (first + 1) % 4, 1000)
    p.on_append("other", first, 1000)
    assert p.sticky_partition("t") == first


def test_sticky_choices_are_uniform_and_deterministic() -> None:
    def run(seed: int) -> list[int]:
        p = Partitioner(rng=random.Random(seed), batch_size=1)
        out = []
        for _ in range(4000):
            part = p.partition("t", None, FOUR)
            out.append(part)
            p.on_append("t", part, 1)
        return out

    choices = run(42)
    assert choices == run(42)
    assert choices != run(43)
    counts = Counter(choices)
    assert sorted(counts) == [0, 1, 2, 3]
    # chi-square with 3 degrees of freedom: 16.27 is the 0.1 % critical value
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 16.27, counts


def test_sticky_only_chooses_available_partitions() -> None:
    c = cluster({0: None, 1: 2, 2: None, 3: 1})
    p = Partitioner(rng=random.Random(3), batch_size=1)
    seen: Counter[int] = Counter()
    for _ in range(500):
        part = p.partition("t", None, c)
        seen[part] += 1
        p.on_append("t", part, 1)
    assert set(seen) == {1, 3}


def test_sticky_uses_all_partitions_when_none_is_available() -> None:
    c = cluster({0: None, 1: None, 2: None})
    p = Partitioner(rng=random.Random(3), batch_size=1)
    seen = set()
    for _ in range(300):
        part = p.partition("t", None, c)
        seen.add(part)
        p.on_append("t", part, 1)
    assert seen == {0, 1, 2}


def test_sticky_partition_that_lost_its_leader_is_abandoned() -> None:
    p = Partitioner(rng=random.Random(5), batch_size=10_000)
    first = p.partition("t", None, FOUR)
    leaders: dict[int, int | None] = {0: 1, 1: 2, 2: 1, 3: 2}
    leaders[first] = None
    moved = p.partition("t", None, cluster(leaders))
    assert moved != first
    assert p.sticky_partition("t") == moved
    # if no partition has a leader there is nothing better: stay
    nobody = cluster(dict.fromkeys(range(4)))
    assert p.partition("t", None, nobody) == moved


def test_batch_size_zero_switches_every_record() -> None:
    p = Partitioner(rng=random.Random(5), batch_size=0)
    part = p.partition("t", None, FOUR)
    p.on_append("t", part, 1, batch_full=True)
    assert p.sticky_partition("t") is None


def test_sticky_is_per_topic() -> None:
    c = ClusterMetadata(topics={**FOUR.topics, **cluster({0: 1, 1: 1}, topic="u").topics})
    p = Partitioner(rng=random.Random(5), batch_size=100)
    a = p.partition("t", None, c)
    b = p.partition("u", None, c)
    p.on_append("u", b, 100)
    assert p.sticky_partition("t") == a
    assert p.sticky_partition("u") is None


# --------------------------------------------------------------------------------- custom


def test_custom_partitioner_gets_aiokafka_arguments() -> None:
    calls = []

    def custom(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        calls.append((key, all_partitions, available))
        return all_partitions[-1]

    c = cluster({0: 1, 1: None, 2: 1})
    p = Partitioner(rng=random.Random(1), custom=custom)
    assert p.partition("t", b"k", c) == 2
    assert p.partition("t", None, c) == 2  # keyless records go to it too
    assert calls == [(b"k", [0, 1, 2], [0, 2]), (None, [0, 1, 2], [0, 2])]
    assert p.custom is custom


def test_aiokafka_default_partitioner_as_custom() -> None:
    p = Partitioner(rng=random.Random(1), custom=AiokafkaDefaultPartitioner())
    for i in range(50):
        key = str(i).encode()
        assert p.partition("t", key, FOUR) == default_partition(key, 4)


@pytest.mark.parametrize("returned", [4, -1, "1", None, 1.0, True])
def test_custom_partitioner_invalid_return_is_refused(returned: object) -> None:
    def bad(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        return returned  # type: ignore[return-value]

    p = Partitioner(rng=random.Random(1), custom=bad)
    with pytest.raises(PartitionerError, match="returned") as info:
        p.partition("t", b"k", FOUR)
    assert repr(returned) in str(info.value)
    assert "bad" in str(info.value)
    assert info.value.partitioner is bad
    assert info.value.topic == "t"


def test_custom_partitioner_exception_is_wrapped() -> None:
    def boom(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        raise ZeroDivisionError("oops")

    p = Partitioner(rng=random.Random(1), custom=boom)
    with pytest.raises(PartitionerError, match=r"boom.*ZeroDivisionError: oops") as info:
        p.partition("t", b"k", FOUR)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert not info.value.retriable


def test_custom_partitioner_returning_numpy_like_int() -> None:
    class Index:
        def __index__(self) -> int:
            return 1

    p = Partitioner(rng=random.Random(1), custom=lambda k, a, av: Index())  # type: ignore[arg-type,return-value]
    assert p.partition("t", b"k", FOUR) == 1


def test_custom_partitioner_must_be_callable() -> None:
    with pytest.raises(KafkaConfigurationError, match="not callable"):
        Partitioner(rng=random.Random(1), custom=42)  # type: ignore[arg-type]
