"""kafka-python 0.9.5's ``KafkaConsumer`` (``kafka.consumer.kafka``) on kafkastate's
blocking consumer.

0.9.5's KafkaConsumer did not join a group: it read the partitions it was given (all of a
topic's for a name) and stored offsets marked with :meth:`KafkaConsumer.task_done` for its
``group_id``. Here fetching is :class:`kafkastate.sync.KafkaConsumer` with a manual
assignment, and offsets are committed to Kafka through the
:class:`~kafkastate.legacy.client.KafkaClient` it owns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from kafkastate.adapters.blocking.consumer import KafkaConsumer as _BlockingConsumer
from kafkastate.errors import NoOffsetForPartitionError
from kafkastate.legacy.client import KafkaClient
from kafkastate.legacy.common import (
    ConsumerTimeout,
    KafkaConfigurationError,
    KafkaMessage,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetOutOfRangeError,
    OffsetRequest,
    seed_errors,
)
from kafkastate.legacy.util import topic_name

__all__ = ["DEFAULT_CONSUMER_CONFIG", "KafkaConsumer", "OffsetsStruct"]

log = logging.getLogger(__name__)


class OffsetsStruct(NamedTuple):
    """The consumer's offsets, each ``{(topic, partition): offset}``."""

    fetch: dict[tuple[Any, int], int]
    highwater: dict[tuple[Any, int], int | None]
    commit: dict[tuple[Any, int], int | None]
    task_done: dict[tuple[Any, int], int | None]


DEFAULT_CONSUMER_CONFIG: dict[str, Any] = {
    "client_id": __name__,
    "group_id": None,
    "bootstrap_servers": [],
    "socket_timeout_ms": 30 * 1000,
    "fetch_message_max_bytes": 1024 * 1024,
    "auto_offset_reset": "largest",
    "fetch_min_bytes": 1,
    "fetch_wait_max_ms": 100,
    "refresh_leader_backoff_ms": 200,
    "deserializer_class": lambda msg: msg,
    "auto_commit_enable": False,
    "auto_commit_interval_ms": 60 * 1000,
    "auto_commit_interval_messages": None,
    "consumer_timeout_ms": -1,
    # Deprecated names, accepted as 0.9.5 did.
    "metadata_broker_list": None,
}

_RESET = {"largest": "latest", "smallest": "earliest"}


class KafkaConsumer:
    """A simpler Kafka consumer (0.9.5): see :meth:`configure` for every option.

    Args:
        topics: what :meth:`set_topic_partitions` accepts.
        configs: options (:meth:`configure`).

    Raises:
        KafkaConfigurationError: an unknown option, or no ``bootstrap_servers``.
    """

    DEFAULT_CONFIG = DEFAULT_CONSUMER_CONFIG

    def __init__(self, *topics: Any, **configs: Any) -> None:
        self._client: KafkaClient | None = None
        self._consumer: _BlockingConsumer | None = None
        self.configure(**configs)
        self.set_topic_partitions(*topics)

    def configure(self, **configs: Any) -> None:
        """Configure the consumer (see the seed for each option's meaning): client_id,
        group_id, bootstrap_servers, socket_timeout_ms, fetch_message_max_bytes,
        auto_offset_reset (``'smallest'``/``'largest'``), fetch_min_bytes,
        fetch_wait_max_ms, refresh_leader_backoff_ms, deserializer_class,
        auto_commit_enable, auto_commit_interval_ms, auto_commit_interval_messages,
        consumer_timeout_ms.

        Raises:
            KafkaConfigurationError: an unknown option, or no ``bootstrap_servers``.
        """
        unknown = set(configs) - set(DEFAULT_CONSUMER_CONFIG)
        if unknown:
            raise KafkaConfigurationError(f"Unknown configuration key(s): {sorted(unknown)}")
        self._config = {k: configs.get(k, v) for k, v in DEFAULT_CONSUMER_CONFIG.items()}
        if self._config["metadata_broker_list"] and not self._config["bootstrap_servers"]:
            self._config["bootstrap_servers"] = self._config["metadata_broker_list"]
        if self._config["auto_commit_enable"] and not self._config["group_id"]:
            raise KafkaConfigurationError(
                "KafkaConsumer configured to auto-commit without required consumer group (group_id)"
            )
        if not self._config["bootstrap_servers"]:
            raise KafkaConfigurationError("bootstrap_servers required to configure KafkaConsumer")
        self.close()
        self._client = KafkaClient(
            self._config["bootstrap_servers"],
            client_id=self._config["client_id"],
            timeout=self._config["socket_timeout_ms"] / 1000,
        )
        reset = self._config["auto_offset_reset"]
        with seed_errors():
            self._consumer = _BlockingConsumer(
                bootstrap_servers=self._client.bootstrap_servers,
                client_id=self._config["client_id"],
                enable_auto_commit=False,
                auto_offset_reset=_RESET.get(reset, "none"),
                max_partition_fetch_bytes=self._config["fetch_message_max_bytes"],
                fetch_min_bytes=self._config["fetch_min_bytes"],
                fetch_max_wait_ms=self._config["fetch_wait_max_ms"],
            )
        self._topics: list[tuple[Any, int]] = []
        self._offsets = OffsetsStruct({}, {}, {}, {})
        self._queue: list[KafkaMessage] = []
        self._uncommitted = 0
        self._next_commit = time.monotonic() + self._config["auto_commit_interval_ms"] / 1000

    def _clients(self) -> tuple[KafkaClient, _BlockingConsumer]:
        if self._client is None or self._consumer is None:
            raise KafkaConfigurationError("KafkaConsumer is closed: call configure() again")
        return self._client, self._consumer

    def set_topic_partitions(self, *topics: Any) -> None:
        """Set what to consume, in any of the seed's forms: a topic name (all its
        partitions), ``(topic, partition)``, ``(topic, partition, offset)``,
        ``{topic: partition}``, ``{topic: [partitions]}``, ``{topic: (partitions,)}``,
        ``{(topic, partition): offset}``.

        Raises:
            KafkaConfigurationError: an argument of another shape.
            UnknownTopicOrPartitionError: a topic does not exist.
        """
        client, consumer = self._clients()
        self._topics = []
        self._offsets = OffsetsStruct({}, {}, {}, {})
        explicit: dict[tuple[Any, int], int] = {}

        def add(topic: Any, partition: int, offset: int | None = None) -> None:
            if not isinstance(partition, int) or isinstance(partition, bool):
                raise KafkaConfigurationError(f"partition must be an int, got {partition!r}")
            self._topics.append((topic, partition))
            if offset is not None:
                explicit[(topic, partition)] = offset

        for arg in topics:
            if isinstance(arg, str | bytes):
                client.load_metadata_for_topics(arg)
                for p in client.get_partition_ids_for_topic(arg):
                    add(arg, p)
            elif isinstance(arg, tuple) and len(arg) in (2, 3):
                add(*arg)
            elif isinstance(arg, dict):
                for key, value in arg.items():
                    if isinstance(key, tuple) and len(key) == 2:
                        add(key[0], key[1], value)
                    elif isinstance(value, int):
                        add(key, value)
                    elif isinstance(value, list | tuple):
                        for p in value:
                            add(key, p)
                    else:
                        raise KafkaConfigurationError(f"unknown topic/partition form {arg!r}")
            else:
                raise KafkaConfigurationError(f"unknown topic/partition form {arg!r}")
        for tp in self._topics:
            self._offsets.highwater[tp] = None
            self._offsets.task_done[tp] = None
            self._offsets.commit[tp] = None
        if self._config["group_id"] and self._topics:
            resps = client.send_offset_fetch_request_kafka(
                self._config["group_id"],
                [OffsetFetchRequest(t, p) for t, p in self._topics],
                fail_on_error=False,
            )
            for r in resps:
                key = (r.topic, r.partition)
                self._offsets.commit[key] = r.offset if r.offset >= 0 else None
        with seed_errors():
            consumer.assign([(topic_name(t), p) for t, p in self._topics])
            for tp in self._topics:
                start = explicit.get(tp, self._offsets.commit.get(tp))
                if start is None:
                    start = self._reset_offset(tp)
                self._offsets.fetch[tp] = start
                consumer.seek((topic_name(tp[0]), tp[1]), start)
        self._queue = []

    def _reset_offset(self, tp: tuple[Any, int]) -> int:
        reset = self._config["auto_offset_reset"]
        if reset not in _RESET:
            raise OffsetOutOfRangeError(f"no offset for {tp} and auto_offset_reset is {reset!r}")
        return self.get_partition_offsets(tp[0], tp[1], -2 if reset == "smallest" else -1, 1)[0]

    def get_partition_offsets(
        self, topic: Any, partition: int, request_time_ms: int, max_num_offsets: int
    ) -> tuple[int, ...]:
        """Offsets of ``topic``/``partition`` before ``request_time_ms`` (-1: the next to
        be written, -2: the earliest); one offset (today's ListOffsets returns one).

        Raises:
            BrokerResponseError: the broker answered with an error.
        """
        client, _ = self._clients()
        (resp,) = client.send_offset_request(
            [OffsetRequest(topic, partition, request_time_ms, max_num_offsets)]
        )
        return tuple(resp.offsets)

    def offsets(self, group: str | None = None) -> Any:
        """A copy of the offsets: one group (``'fetch'``, ``'highwater'``, ``'commit'``,
        ``'task_done'``) or all as an :class:`OffsetsStruct`.

        Raises:
            KafkaConfigurationError: an unknown group.
        """
        if group is None:
            return OffsetsStruct(*(dict(d) for d in self._offsets))
        if group not in OffsetsStruct._fields:
            raise KafkaConfigurationError(
                f"offsets group must be one of {OffsetsStruct._fields}, not {group!r}"
            )
        return dict(getattr(self._offsets, group))

    def fetch_messages(self) -> Iterator[KafkaMessage]:
        """Fetch what is available now for every partition.

        Returns:
            A generator of KafkaMessage (value after ``deserializer_class``).

        Raises:
            OffsetOutOfRangeError: an offset is out of range and ``auto_offset_reset`` is
                neither ``'smallest'`` nor ``'largest'``.
        """
        _, consumer = self._clients()
        wait = self._config["fetch_wait_max_ms"]
        try:
            with seed_errors():
                batches = consumer.poll(timeout_ms=wait)
        except NoOffsetForPartitionError as exc:
            raise OffsetOutOfRangeError(str(exc)) from exc
        topics = {topic_name(t): t for t, _ in self._topics}
        deserialize = self._config["deserializer_class"]
        for tp, records in batches.items():
            topic = topics.get(tp.topic, tp.topic)
            key = (topic, tp.partition)
            for r in records:
                self._offsets.fetch[key] = r.offset + 1
                self._offsets.highwater[key] = consumer.highwater((tp.topic, tp.partition))
                yield KafkaMessage(topic, tp.partition, r.offset, r.key, deserialize(r.value))

    def next(self) -> KafkaMessage:
        """The next message, waiting up to ``consumer_timeout_ms`` (forever if -1).

        Raises:
            ConsumerTimeout: no message within ``consumer_timeout_ms``.
        """
        timeout = self._config["consumer_timeout_ms"]
        deadline = None if timeout < 0 else time.monotonic() + timeout / 1000
        while not self._queue:
            self._queue.extend(self.fetch_messages())
            self._maybe_auto_commit()
            if not self._queue and deadline is not None and time.monotonic() >= deadline:
                raise ConsumerTimeout(f"no message within {timeout} ms")
        return self._queue.pop(0)

    def __iter__(self) -> KafkaConsumer:
        return self

    def __next__(self) -> KafkaMessage:
        return self.next()

    def task_done(self, message: KafkaMessage) -> bool:
        """Mark ``message`` consumed: :meth:`commit` stores the offset after it.

        Returns:
            False if its partition is not one this consumer reads, else True.
        """
        key = (message.topic, message.partition)
        if key not in self._offsets.task_done:
            log.error("unrecognized topic/partition in task_done message: %s:%d", *key)
            return False
        prev = self._offsets.task_done[key]
        if prev is not None and message.offset != prev + 1:
            log.warning(
                "marking task_done on a non-continuous offset: %d != %d + 1", message.offset, prev
            )
        self._offsets.task_done[key] = message.offset
        self._uncommitted += 1
        self._maybe_auto_commit()
        return True

    def _maybe_auto_commit(self) -> None:
        if not self._config["auto_commit_enable"]:
            return
        every_n = self._config["auto_commit_interval_messages"]
        if (every_n and self._uncommitted >= every_n) or time.monotonic() >= self._next_commit:
            self.commit()

    def commit(self) -> bool:
        """Store the offsets after the messages marked with :meth:`task_done` for
        ``group_id``.

        Returns:
            True if offsets were committed, False if there were none new.

        Raises:
            KafkaConfigurationError: no ``group_id``.
            BrokerResponseError: the commit failed.
        """
        client, _ = self._clients()
        if not self._config["group_id"]:
            raise KafkaConfigurationError(
                "Attempted to commit offsets without a configured consumer group (group_id)"
            )
        self._next_commit = time.monotonic() + self._config["auto_commit_interval_ms"] / 1000
        commits = []
        for (topic, partition), done in self._offsets.task_done.items():
            if done is None or done + 1 == self._offsets.commit[(topic, partition)]:
                continue
            commits.append(OffsetCommitRequest(topic, partition, done + 1, None))
        if not commits:
            return False
        client.send_offset_commit_request(self._config["group_id"], commits)
        for c in commits:
            self._offsets.commit[(c.topic, c.partition)] = c.offset
        self._uncommitted = 0
        return True

    def close(self) -> None:
        """Close the consumer's connections."""
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
            self._consumer = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __repr__(self) -> str:
        return f"<KafkaConsumer topics=({', '.join(f'{t}-{p}' for t, p in self._topics)})>"
