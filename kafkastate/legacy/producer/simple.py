"""kafka-python 0.9.5's ``SimpleProducer``: round-robin over a topic's partitions."""

from __future__ import annotations

import random
from typing import Any

from kafkastate.legacy.common import ProduceResponse
from kafkastate.legacy.producer.base import Producer
from kafkastate.legacy.util import topic_name

__all__ = ["SimpleProducer"]


class SimpleProducer(Producer):
    """A round-robin producer: each :meth:`send_messages` call goes to the topic's next
    partition (all its messages to that one).

    Args:
        args: see :class:`~kafkastate.legacy.producer.base.Producer`.
        random_start: start at a random partition (True) or at partition 0.
        kwargs: see :class:`~kafkastate.legacy.producer.base.Producer`.
    """

    def __init__(self, *args: Any, random_start: bool = True, **kwargs: Any) -> None:
        self.partition_cycles: dict[Any, tuple[list[int], int]] = {}
        self.random_start = random_start
        super().__init__(*args, **kwargs)

    def _next_partition(self, topic: Any) -> int:
        name = topic_name(topic)  # b"t" and "t" share one cycle
        if name not in self.partition_cycles:
            if not self.client.has_metadata_for_topic(topic):
                self.client.ensure_topic_exists(topic)
            partitions = self.client.get_partition_ids_for_topic(topic)
            start = random.randrange(len(partitions)) if self.random_start else 0
            self.partition_cycles[name] = (partitions, start)
        partitions, i = self.partition_cycles[name]
        self.partition_cycles[name] = (partitions, i + 1)
        return partitions[i % len(partitions)]

    def send_messages(self, topic: Any, *msg: bytes | None) -> list[ProduceResponse]:  # type: ignore[override]
        """Send ``msg`` to the topic's next partition.

        Returns:
            Sync: ``[ProduceResponse]``; async: ``[]``.

        Raises:
            TypeError: a message is not bytes.
            BrokerResponseError: sync with ``sync_fail_on_error``: the send failed.
        """
        return super().send_messages(topic, self._next_partition(topic), *msg)

    def __repr__(self) -> str:
        return f"<SimpleProducer batch={self.async_send}>"
