"""kafka-python 0.9.5's round-robin partitioner."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from kafkastate.legacy.partitioner.base import Partitioner

__all__ = ["RoundRobinPartitioner"]


class RoundRobinPartitioner(Partitioner):
    """Cycles through the partitions, whatever the key."""

    def __init__(self, partitions: Sequence[int] | None = None) -> None:
        super().__init__(partitions)
        self.iterpart: Iterator[int] = itertools.cycle(self.partitions)

    def _set_partitions(self, partitions: Sequence[int]) -> None:
        self.partitions = list(partitions)
        self.iterpart = itertools.cycle(self.partitions)

    def partition(self, key: Any, partitions: Sequence[int] | None = None) -> int:
        """The next partition (a new ``partitions`` list restarts the cycle).

        Raises:
            KafkaConfigurationError: no partitions.
        """
        if partitions and list(partitions) != self.partitions:
            self._set_partitions(partitions)
        self._choices(None)
        return next(self.iterpart)
