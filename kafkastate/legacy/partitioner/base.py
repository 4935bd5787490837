"""kafka-python 0.9.5's partitioner base class."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Partitioner"]


class Partitioner:
    """Base class for a partitioner: picks a partition for a key.

    Args:
        partitions: the topic's partition ids.
    """

    def __init__(self, partitions: Sequence[int] | None = None) -> None:
        self.partitions = list(partitions) if partitions is not None else []

    def partition(self, key: Any, partitions: Sequence[int] | None = None) -> int:
        """The partition for ``key``, among ``partitions`` (default: the constructor's).

        Raises:
            NotImplementedError: always, in the base class.
        """
        raise NotImplementedError("partition needs to be implemented by a subclass")

    def _choices(self, partitions: Sequence[int] | None) -> Sequence[int]:
        choices = partitions or self.partitions
        if not choices:
            from kafkastate.legacy.common import KafkaConfigurationError  # noqa: PLC0415

            raise KafkaConfigurationError("a partitioner needs at least one partition")
        return choices
