"""kafka-python 0.9.5's ``kafka.context``: commit/rollback of a SimpleConsumer's offsets."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from kafkastate.errors import KafkaError
from kafkastate.legacy.common import OffsetCommitRequest, OffsetOutOfRangeError

__all__ = ["OffsetCommitContext"]

log = logging.getLogger(__name__)


class OffsetCommitContext:
    """Commit/rollback around a :class:`~kafkastate.legacy.consumer.simple.SimpleConsumer`
    with ``auto_commit=False``: on a clean exit the consumer commits up to (and is
    positioned at) the high-water mark set with :meth:`mark`; on an exception, or with no
    mark, it goes back to the offsets it had on entry.

    Args:
        consumer: the SimpleConsumer.
    """

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.initial_offsets: dict[int, int] | None = None
        self.high_water_mark: dict[int, int] | None = None
        self.logger = log

    def mark(self, partition: int, offset: int) -> None:
        """Set the high-water mark of ``partition``: ``offset`` is processed.

        Raises:
            KafkaError: called outside the ``with`` block.
        """
        if self.high_water_mark is None:
            raise KafkaError("OffsetCommitContext.mark() outside its with block")
        self.high_water_mark[partition] = max(offset, self.high_water_mark.get(partition, -1))

    def __bool__(self) -> bool:
        return bool(self.high_water_mark)

    def __enter__(self) -> OffsetCommitContext:
        self.initial_offsets = dict(self.consumer.offsets)
        self.high_water_mark = {}
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
        self.high_water_mark = None
        self.initial_offsets = None
        if exc_type is OffsetOutOfRangeError or (
            exc_type is not None and issubclass(exc_type, OffsetOutOfRangeError)
        ):
            self.handle_out_of_range()
            return True
        return False

    def commit(self) -> None:
        """Commit up to the high-water mark (and position there), else roll back."""
        if not self.high_water_mark:
            self.rollback()
            return
        offsets = {p: o + 1 for p, o in self.high_water_mark.items()}
        self.commit_partition_offsets(offsets)
        self.update_consumer_offsets(offsets)

    def rollback(self) -> None:
        """Position the consumer at the offsets it had on entry."""
        if self.initial_offsets is not None:
            self.update_consumer_offsets(self.initial_offsets)

    def commit_partition_offsets(self, partition_offsets: dict[int, int]) -> None:
        """Commit these ``{partition: offset}`` for the consumer's group."""
        reqs = [
            OffsetCommitRequest(self.consumer.topic, p, o, None)
            for p, o in partition_offsets.items()
        ]
        self.consumer.client.send_offset_commit_request(self.consumer.group, reqs)

    def update_consumer_offsets(self, partition_offsets: dict[int, int]) -> None:
        """Position the consumer at these ``{partition: offset}``."""
        for partition, offset in partition_offsets.items():
            self.consumer.offsets[partition] = offset
        self.consumer.seek(0, 1)

    def handle_out_of_range(self) -> None:
        """Seek every partition to its earliest offset."""
        self.consumer.seek(0, 0)
