"""kafka-python 0.9.5's hashing partitioners.

``Murmur2Partitioner`` agrees with the Java client (and with kafkastate's producers): the
same key lands on the same partition whatever the client. ``LegacyPartitioner`` (alias
``HashedPartitioner``, the ``KeyedProducer`` default in 0.9.5) uses Python's ``hash()``, as
0.9.5 did: stable within one process only, since Python randomises ``bytes`` hashing per
process (``PYTHONHASHSEED``) -- 0.9.5's issue 374. Prefer ``Murmur2Partitioner``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkastate.core.producer.partitioner import murmur2 as _murmur2
from kafkastate.legacy.partitioner.base import Partitioner

__all__ = ["HashedPartitioner", "LegacyPartitioner", "Murmur2Partitioner", "murmur2"]


def murmur2(key: Any) -> int:
    """MurmurHash2 of ``key`` as the Java client's ``Utils.murmur2`` (signed 32-bit).

    Args:
        key: bytes; anything else is ``str()``-ed and UTF-8 encoded first.
    """
    if not isinstance(key, bytes | bytearray | memoryview):
        key = str(key).encode("utf-8")
    return _murmur2(key)


class Murmur2Partitioner(Partitioner):
    """Picks ``partitions[(murmur2(key) & 0x7fffffff) % len(partitions)]``, as the Java
    client's default partitioner."""

    def partition(self, key: Any, partitions: Sequence[int] | None = None) -> int:
        """The partition for ``key``.

        Raises:
            KafkaConfigurationError: no partitions.
        """
        choices = self._choices(partitions)
        return choices[(murmur2(key) & 0x7FFFFFFF) % len(choices)]


class LegacyPartitioner(Partitioner):
    """DEPRECATED (0.9.5's issue 374): picks ``partitions[hash(key) % len(partitions)]``,
    stable only within one Python process."""

    def partition(self, key: Any, partitions: Sequence[int] | None = None) -> int:
        """The partition for ``key``.

        Raises:
            KafkaConfigurationError: no partitions.
        """
        choices = self._choices(partitions)
        return choices[hash(key) % len(choices)]


HashedPartitioner = LegacyPartitioner
