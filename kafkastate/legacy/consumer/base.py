"""kafka-python 0.9.5's ``Consumer`` base class: partitions, group offsets, auto-commit.

Offsets are committed to and fetched from Kafka (``__consumer_offsets``) through the
:class:`~kafkastate.legacy.client.KafkaClient`, for a group that has no members (0.9.5's
consumers never joined a group). Without a group nothing is committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from kafkastate.errors import KafkaError
from kafkastate.legacy.common import (
    KafkaConfigurationError,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetRequest,
    UnknownTopicOrPartitionError,
)
from kafkastate.legacy.util import ReentrantTimer

__all__ = [
    "AUTO_COMMIT_INTERVAL",
    "AUTO_COMMIT_MSG_COUNT",
    "FETCH_BUFFER_SIZE_BYTES",
    "FETCH_DEFAULT_BLOCK_TIMEOUT",
    "FETCH_MAX_WAIT_TIME",
    "FETCH_MIN_BYTES",
    "ITER_TIMEOUT_SECONDS",
    "MAX_FETCH_BUFFER_SIZE_BYTES",
    "Consumer",
]

log = logging.getLogger(__name__)

AUTO_COMMIT_MSG_COUNT = 100
AUTO_COMMIT_INTERVAL = 5000
FETCH_DEFAULT_BLOCK_TIMEOUT = 1
FETCH_MAX_WAIT_TIME = 100
FETCH_MIN_BYTES = 4096
FETCH_BUFFER_SIZE_BYTES = 4096
MAX_FETCH_BUFFER_SIZE_BYTES = FETCH_BUFFER_SIZE_BYTES * 8
ITER_TIMEOUT_SECONDS = 60
NO_MESSAGES_WAIT_TIME_SECONDS = 0.1
FULL_QUEUE_WAIT_TIME_SECONDS = 0.1


class Consumer:
    """Base class of :class:`SimpleConsumer` and :class:`MultiProcessConsumer`.

    Args:
        client: a :class:`~kafkastate.legacy.client.KafkaClient`.
        group: the group whose offsets are used (None: start at offset 0, commit nothing).
        topic: the topic.
        partitions: the partitions to read (default: all).
        auto_commit: commit every ``auto_commit_every_n`` messages and every
            ``auto_commit_every_t`` ms (each resets the other, as does :meth:`commit`);
            also start from the group's committed offsets.
        auto_commit_every_n: messages between commits (None: never by count).
        auto_commit_every_t: ms between commits (None: never by time), on a timer thread.

    Raises:
        KafkaConfigurationError: a partition is not an int.
        UnknownTopicOrPartitionError: the topic does not exist.
    """

    def __init__(  # noqa: PLR0917 -- 0.9.5's positional signature
        self,
        client: Any,
        group: Any,
        topic: Any,
        partitions: Iterable[int] | None = None,
        auto_commit: bool = True,
        auto_commit_every_n: int | None = AUTO_COMMIT_MSG_COUNT,
        auto_commit_every_t: int | None = AUTO_COMMIT_INTERVAL,
    ) -> None:
        self.client = client
        self.topic = topic
        self.group = group
        self.client.load_metadata_for_topics(topic)
        self.offsets: dict[int, int] = {}
        if partitions is None:
            partitions = self.client.get_partition_ids_for_topic(topic)
        partitions = list(partitions)
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in partitions):
            raise KafkaConfigurationError(f"partitions must be ints, got {partitions!r}")
        if not partitions:
            raise UnknownTopicOrPartitionError(f"no partitions for topic {topic!r}")
        self.commit_lock = threading.RLock()
        self.commit_timer: ReentrantTimer | None = None
        self.count_since_commit = 0
        self.auto_commit = auto_commit
        self.auto_commit_every_n = auto_commit_every_n
        self.auto_commit_every_t = auto_commit_every_t
        if auto_commit and group is not None:
            self.fetch_last_known_offsets(partitions)
        else:
            for p in partitions:
                self.offsets[p] = 0
        if auto_commit and auto_commit_every_t:
            self.commit_timer = ReentrantTimer(auto_commit_every_t, self.commit)
            self.commit_timer.start()
        self.partition_info = False
        self.fetch_offsets = self.offsets.copy()

    def provide_partition_info(self) -> None:
        """Return ``(partition, message)`` pairs instead of messages from now on."""
        self.partition_info = True

    def fetch_last_known_offsets(self, partitions: Iterable[int] | None = None) -> None:
        """Start each partition at the group's committed offset (0 where there is none).

        Raises:
            KafkaConfigurationError: the consumer has no group.
        """
        if self.group is None:
            raise KafkaConfigurationError("fetch_last_known_offsets needs a group, not None")
        if partitions is None:
            partitions = self.client.get_partition_ids_for_topic(self.topic)
        responses = self.client.send_offset_fetch_request_kafka(
            self.group, [OffsetFetchRequest(self.topic, p) for p in partitions], fail_on_error=False
        )
        for resp in responses:
            self.offsets[resp.partition] = max(resp.offset, 0)
        self.fetch_offsets = self.offsets.copy()

    def commit(self, partitions: Iterable[int] | None = None) -> bool | None:
        """Commit the offsets of the messages handed out (of ``partitions``, default all).

        Returns:
            True on success, False on failure (logged), None if there was nothing to commit.
        """
        with self.commit_lock:
            if self.commit_timer is not None:
                self.commit_timer.stop()
                self.commit_timer.start()
            if self.count_since_commit == 0 or self.group is None:
                return None
            chosen = list(self.offsets) if partitions is None else list(partitions)
            reqs = [OffsetCommitRequest(self.topic, p, self.offsets[p], None) for p in chosen]
            try:
                self.client.send_offset_commit_request(self.group, reqs)
            except KafkaError as exc:
                log.error("%s saw an error committing offsets: %s", type(self).__name__, exc)
                return False
            self.count_since_commit = 0
            return True

    def _auto_commit(self) -> None:
        if not self.auto_commit or self.auto_commit_every_n is None:
            return
        if self.count_since_commit >= self.auto_commit_every_n:
            self.commit()

    def pending(self, partitions: Iterable[int] | None = None) -> int:
        """How many messages are after the consumer's offsets (of ``partitions``)."""
        chosen = list(self.offsets) if partitions is None else list(partitions)
        resps = self.client.send_offset_request(
            [OffsetRequest(self.topic, p, -1, 1) for p in chosen]
        )
        return sum(resp.offsets[0] - self.offsets[resp.partition] for resp in resps)

    def stop(self) -> None:
        """Stop the auto-commit timer and commit what was handed out."""
        if self.commit_timer is not None:
            self.commit_timer.stop()
            self.commit_timer = None
        self.commit()
        self.auto_commit = False
