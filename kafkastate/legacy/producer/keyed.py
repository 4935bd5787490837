"""kafka-python 0.9.5's ``KeyedProducer``: the partitioner picks a key's partition."""

from __future__ import annotations

from typing import Any

from kafkastate.legacy.common import ProduceResponse
from kafkastate.legacy.partitioner.base import Partitioner
from kafkastate.legacy.partitioner.hashed import HashedPartitioner
from kafkastate.legacy.producer.base import Producer
from kafkastate.legacy.util import topic_name

__all__ = ["KeyedProducer"]


class KeyedProducer(Producer):
    """A producer that sends each key to the partition its partitioner picks.

    Args:
        args: see :class:`~kafkastate.legacy.producer.base.Producer`.
        partitioner: a :class:`~kafkastate.legacy.partitioner.base.Partitioner` subclass
            (default ``HashedPartitioner``: Python's ``hash()``, one process only; use
            ``Murmur2Partitioner`` to agree with other clients).
        kwargs: see :class:`~kafkastate.legacy.producer.base.Producer`.

    Raises:
        TypeError: ``partitioner`` is not a Partitioner subclass.
    """

    def __init__(
        self, *args: Any, partitioner: type[Partitioner] | None = None, **kwargs: Any
    ) -> None:
        if partitioner is None:
            partitioner = HashedPartitioner
        if not (isinstance(partitioner, type) and issubclass(partitioner, Partitioner)):
            raise TypeError(f"partitioner must be a Partitioner subclass, got {partitioner!r}")
        self.partitioner_class = partitioner
        self.partitioners: dict[Any, Partitioner] = {}
        super().__init__(*args, **kwargs)

    def _next_partition(self, topic: Any, key: bytes) -> int:
        name = topic_name(topic)
        if name not in self.partitioners:
            if not self.client.has_metadata_for_topic(topic):
                self.client.ensure_topic_exists(topic)
            partitions = self.client.get_partition_ids_for_topic(topic)
            self.partitioners[name] = self.partitioner_class(partitions)
        return self.partitioners[name].partition(key)

    def send_messages(self, topic: Any, key: bytes, *msg: bytes | None) -> list[ProduceResponse]:  # type: ignore[override]
        """Send ``msg`` with ``key`` to the key's partition.

        Returns:
            Sync: ``[ProduceResponse]``; async: ``[]``.

        Raises:
            TypeError: a message or the key is not bytes.
            BrokerResponseError: sync with ``sync_fail_on_error``: the send failed.
        """
        return self._send_messages(topic, self._next_partition(topic, key), *msg, key=key)

    def send(self, topic: Any, key: bytes, msg: bytes | None) -> list[ProduceResponse]:
        """One message: ``send_messages(topic, key, msg)`` (deprecated in 0.9.5)."""
        return self.send_messages(topic, key, msg)

    def __repr__(self) -> str:
        return f"<KeyedProducer batch={self.async_send}>"
