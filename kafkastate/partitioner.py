"""kafka-python 3.0's partitioners (``kafka.partitioner``), for a producer's
``partitioner`` option.

``Partitioner`` is the interface (``partition(topic, key, key_bytes, value, value_bytes,
cluster)``); ``DefaultPartitioner`` hashes keys with murmur2 (the Java client's choice)
and picks keyless records' partitions at random; ``StickyPartitioner`` keeps a topic's
keyless records on one partition until the producer calls its ``on_new_batch`` (KIP-480).
The decisions are the core's (:mod:`kafkastate.core.producer.partitioner`); this module
only gives them kafka-python's names and draws their randomness from the OS. A plain
callable ``(key_bytes, all_partitions, available_partitions)`` (kafka-python 2.x) works as
a ``partitioner`` too. Leaving ``partitioner`` unset gives the Java client's uniform
sticky partitioning (KIP-794).
"""

from __future__ import annotations

import random

from kafkastate.core.producer.partitioner import (
    ClusterView,
    HashPartitioner,
    StickyHashPartitioner,
)
from kafkastate.core.producer.partitioner import PluggablePartitioner as Partitioner
from kafkastate.core.producer.partitioner import murmur2 as _java_murmur2

__all__ = ["ClusterView", "DefaultPartitioner", "Partitioner", "StickyPartitioner", "murmur2"]


class DefaultPartitioner(HashPartitioner):
    """kafka-python 3.0's ``DefaultPartitioner``: murmur2 of the key (the Java client's
    partition), a random partition with a leader for a keyless record.

    Args:
        rng: the randomness for keyless records (default: the OS's).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng=random.SystemRandom() if rng is None else rng)


class StickyPartitioner(StickyHashPartitioner, DefaultPartitioner):
    """kafka-python 3.0's ``StickyPartitioner`` (KIP-480): keyed records as
    :class:`DefaultPartitioner`, keyless ones on one partition per topic until
    ``on_new_batch``.

    Args:
        rng: the randomness for the sticky choice (default: the OS's).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng=random.SystemRandom() if rng is None else rng)


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """MurmurHash2 of ``data`` as kafka-python returns it: unsigned (0 .. 2**32 - 1).

    The Java client's (and :func:`kafkastate.core.producer.murmur2`'s) value is the same
    32 bits read as a signed int; the partition chosen from either is the same.

    Args:
        data: the serialized key.

    Returns:
        The hash.
    """
    return _java_murmur2(data) & 0xFFFFFFFF
