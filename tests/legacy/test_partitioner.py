"""kafkastate.legacy partitioners (and the seed's other paths to them)."""

from __future__ import annotations

import pytest

from kafkastate.core.producer.partitioner import default_partition
from kafkastate.legacy import partition, partitionner
from kafkastate.legacy.common import KafkaConfigurationError
from kafkastate.legacy.partitioner import (
    HashedPartitioner,
    LegacyPartitioner,
    Murmur2Partitioner,
    Partitioner,
    RoundRobinPartitioner,
    murmur2,
)
from kafkastate.legacy.partitionner import hashed as partitionner_hashed


def test_murmur2_matches_the_java_client() -> None:
    # Values from the Java client's UtilsTest / kafka-python's test_partitioner.
    assert murmur2(b"") == 275646681
    assert murmur2("abc") == murmur2(b"abc")
    for key in (b"key1", b"key2", b"a much longer key than the others"):
        assert Murmur2Partitioner(list(range(7))).partition(key) == default_partition(key, 7)


def test_murmur2_picks_from_the_given_partitions() -> None:
    p = Murmur2Partitioner([3, 5, 9])
    assert p.partition(b"k") in (3, 5, 9)
    assert p.partition(b"k", [10]) == 10


def test_legacy_partitioner_is_the_default_hash() -> None:
    assert HashedPartitioner is LegacyPartitioner
    assert LegacyPartitioner([0, 1, 2]).partition(b"key") == [0, 1, 2][hash(b"key") % 3]


def test_round_robin_cycles_and_follows_new_partitions() -> None:
    rr = RoundRobinPartitioner([0, 1, 2])
    assert [rr.partition(None) for _ in range(4)] == [0, 1, 2, 0]
    assert [rr.partition(None, [5, 6]) for _ in range(3)] == [5, 6, 5]


def test_no_partitions_is_a_clear_error() -> None:
    for cls in (Murmur2Partitioner, LegacyPartitioner, RoundRobinPartitioner):
        with pytest.raises(KafkaConfigurationError):
            cls([]).partition(b"k")


def test_base_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        Partitioner([0]).partition(b"k")


def test_the_seeds_other_paths() -> None:
    assert partitionner.HashedPartitioner is HashedPartitioner
    assert partition.RoundRobinPartitioner is RoundRobinPartitioner
    assert partitionner_hashed.Murmur2Partitioner is Murmur2Partitioner
