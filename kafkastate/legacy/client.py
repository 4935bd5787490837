"""kafka-python 0.9.5's ``KafkaClient`` on kafkastate's core client.

The requests go through :class:`~kafkastate.adapters.blocking.io.BlockingClient` (the core
client over blocking sockets), which negotiates today's API versions with each broker; the
0.9.5 request and response namedtuples of :mod:`kafkastate.legacy.common` are a façade over
them. Differences from 0.9.5, all forced by Kafka 4:

* ``send_produce_request`` writes one magic 2 record batch per payload (the messages'
  codec is kept); ``acks=0`` is sent with ``acks=1`` (the core client's blocking
  requests wait for an answer) and, as in 0.9.5, returns no responses.
* ``send_offset_request`` answers one offset per partition (ListOffsets v1+); ``max_offsets``
  is accepted and ignored.
* Offsets live in Kafka (``__consumer_offsets``): ``send_offset_fetch_request`` (0.9.5's
  ZooKeeper variant) and ``send_offset_fetch_request_kafka`` both read them, and
  ``send_offset_commit_request`` writes them, for a group with no members (generation -1).
"""

from __future__ import annotations

import contextlib
import copy as _copy
import functools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kafkastate.adapters.blocking.io import BlockingClient
from kafkastate.core.client import ClientConfig
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.consumer.fetch.offsets import (
    find_coordinator_request,
    list_offsets_request,
    offset_commit_request,
    offset_fetch_request,
    response_topic_name,
)
from kafkastate.core.metadata import MetadataConfig, NodeId
from kafkastate.core.protocol import framing, requests
from kafkastate.core.protocol.records import RecordBatchBuilder, iter_batches
from kafkastate.errors import KafkaConnectionError
from kafkastate.legacy.common import (
    BrokerMetadata,
    ConsumerMetadataResponse,
    FetchResponse,
    KafkaTimeoutError,
    KafkaUnavailableError,
    LeaderNotAvailableError,
    Message,
    MetadataResponse,
    OffsetAndMessage,
    OffsetCommitResponse,
    OffsetFetchResponse,
    OffsetResponse,
    PartitionMetadata,
    ProduceResponse,
    TopicAndPartition,
    TopicMetadata,
    UnknownTopicOrPartitionError,
    check_error,
    error_class,
    seed_errors,
)
from kafkastate.legacy.conn import collect_hosts
from kafkastate.legacy.protocol import message_records
from kafkastate.legacy.util import group_by_topic_and_partition, topic_name

__all__ = ["KafkaClient"]

_COORDINATOR_RETRY = frozenset({14, 15, 16})  # load in progress, not available, moved


class KafkaClient:
    """A connection to a Kafka cluster: metadata, and 0.9.5's request methods.

    Args:
        hosts: ``"host:port,host:port"`` or a list of ``"host:port"`` strings.
        client_id: sent with every request.
        timeout: request timeout in seconds.
        correlation_id: accepted (the core client numbers its requests).

    Raises:
        KafkaUnavailableError: no broker in ``hosts`` answered.
    """

    CLIENT_ID = "kafka-python"

    def __init__(
        self,
        hosts: str | Sequence[str],
        client_id: str = CLIENT_ID,
        timeout: float = 120,
        correlation_id: int = 0,
    ) -> None:
        self.hosts = collect_hosts(hosts, randomize=False)
        self.client_id = client_id
        self.timeout = timeout
        self.correlation_id = correlation_id
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics_to_brokers: dict[TopicAndPartition, BrokerMetadata] = {}
        self.topic_partitions: dict[Any, dict[int, PartitionMetadata]] = {}
        self._topic_ids: dict[str, Any] = {}
        self._client: BlockingClient | None = None
        self._lock = threading.RLock()
        self.reinit()
        self.load_metadata_for_topics()

    # ------------------------------------------------------------ lifecycle

    @property
    def bootstrap_servers(self) -> str:
        """The hosts as ``"host:port,..."``."""
        return ",".join(f"{h}:{p}" for h, p in self.hosts)

    def _blocking(self) -> BlockingClient:
        if self._client is None:
            self.reinit()
        assert self._client is not None
        return self._client

    def close(self) -> None:
        """Close every connection (:meth:`reinit` opens them again)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def copy(self) -> KafkaClient:
        """An unconnected copy (call :meth:`reinit` on it), for another thread or process."""
        c = _copy.copy(self)
        c._client = None
        c._lock = threading.RLock()
        c.brokers = dict(self.brokers)
        c.topics_to_brokers = dict(self.topics_to_brokers)
        c.topic_partitions = {t: dict(p) for t, p in self.topic_partitions.items()}
        c._topic_ids = dict(self._topic_ids)
        return c

    def reinit(self) -> None:
        """Close the connections and start afresh (they open on the next request)."""
        self.close()
        config = ClientConfig(
            bootstrap_servers=self.hosts,
            connection=ConnectionConfig(client_id=self.client_id, request_timeout=self.timeout),
            metadata=MetadataConfig(allow_auto_topic_creation=True),
        )
        self._client = BlockingClient(config, topics=())

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # ------------------------------------------------------------ metadata

    @property
    def topics(self) -> list[Any]:
        """The topics with metadata."""
        return list(self.topic_partitions)

    def _request(self, factory: Callable[[Any], Any], node_id: int | None = None) -> Any:
        try:
            # One request at a time: a consumer's auto-commit timer thread shares the client.
            with self._lock, seed_errors():
                done = self._blocking().request(
                    factory,
                    node_id=None if node_id is None else NodeId(node_id),
                    timeout=self.timeout,
                )
        except KafkaTimeoutError as exc:
            cause = self._blocking().client.last_connection_error
            if cause is None:
                raise
            raise KafkaUnavailableError(
                f"no broker of {self.bootstrap_servers} answered: {cause}"
            ) from exc
        except KafkaConnectionError as exc:
            raise KafkaUnavailableError(
                f"no broker of {self.bootstrap_servers} answered: {exc}"
            ) from exc
        return done.response

    def send_metadata_request(
        self,
        payloads: Sequence[Any] = (),
        fail_on_error: bool = True,
        callback: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Metadata for the topics in ``payloads`` (all topics if empty): a
        :class:`~kafkastate.legacy.common.MetadataResponse` (or ``callback`` of it)."""
        names = [topic_name(t) for t in payloads] or None
        response = self._request(
            lambda v: requests.metadata_request(v, names, allow_auto_topic_creation=True)
        )
        brokers = [
            BrokerMetadata(int(b.node_id), str(b.host), int(b.port)) for b in response.brokers
        ]
        topics = []
        for t in response.topics:
            name = str(t.name)
            self._topic_ids[name] = getattr(t, "topic_id", None)
            parts = [
                PartitionMetadata(
                    name,
                    int(p.partition_index),
                    int(p.leader_id),
                    tuple(int(n) for n in p.replica_nodes),
                    tuple(int(n) for n in p.isr_nodes),
                    int(p.error_code),
                )
                for p in t.partitions
            ]
            topics.append(TopicMetadata(name, int(t.error_code), parts))
        result = MetadataResponse(brokers, topics)
        return callback(result) if callback else result

    def load_metadata_for_topics(self, *topics: Any) -> None:
        """Refresh brokers and partition leaders (of ``topics``, or of every topic).

        Raises:
            UnknownTopicOrPartitionError: a named topic does not exist (and the broker does
                not create topics on demand).
            LeaderNotAvailableError: a named topic is being created.
        """
        wanted = {topic_name(t): t for t in topics}
        response = self.send_metadata_request(list(wanted))
        self.brokers = {b.nodeId: b for b in response.brokers}
        if not topics:
            self.reset_all_metadata()
        for t in response.topics:
            key = wanted.get(t.topic, t.topic)
            self.reset_topic_metadata(key)
            if t.error:
                if topics:
                    check_error(t)
                continue
            self.topic_partitions[key] = {}
            for p in t.partitions:
                self.topic_partitions[key][p.partition] = p
                broker = self.brokers.get(p.leader)
                if broker is not None:
                    self.topics_to_brokers[TopicAndPartition(key, p.partition)] = broker

    def reset_topic_metadata(self, *topics: Any) -> None:
        """Forget what is known of ``topics``."""
        for topic in topics:
            for tp in [tp for tp in self.topics_to_brokers if tp.topic == topic]:
                del self.topics_to_brokers[tp]
            self.topic_partitions.pop(topic, None)

    def reset_all_metadata(self) -> None:
        """Forget every topic's metadata."""
        self.topics_to_brokers.clear()
        self.topic_partitions.clear()

    def has_metadata_for_topic(self, topic: Any) -> bool:
        """True if partitions of ``topic`` are known."""
        return bool(self.topic_partitions.get(topic))

    def get_partition_ids_for_topic(self, topic: Any) -> list[int]:
        """The partition ids of ``topic`` (empty if unknown)."""
        return sorted(self.topic_partitions.get(topic, {}))

    def ensure_topic_exists(self, topic: Any, timeout: float = 30) -> None:
        """Wait until ``topic`` has metadata and every partition a leader (the broker
        creates it on demand if ``auto.create.topics.enable``).

        Raises:
            KafkaTimeoutError: not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(LeaderNotAvailableError, UnknownTopicOrPartitionError):
                self.load_metadata_for_topics(topic)
            parts = self.topic_partitions.get(topic, {})
            if parts and all(p.leader >= 0 for p in parts.values()):
                return
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"unable to create topic {topic!r} within {timeout} s")
            time.sleep(0.1)

    def _leader(self, topic: Any, partition: int) -> int:
        meta = self.topic_partitions.get(topic, {}).get(partition)
        if meta is None or meta.leader < 0:
            self.load_metadata_for_topics(topic)
            meta = self.topic_partitions.get(topic, {}).get(partition)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"{topic!r} partition {partition}")
        if meta.leader < 0:
            raise LeaderNotAvailableError(f"{topic!r} partition {partition}")
        return meta.leader

    def _by_leader(self, payloads: Iterable[Any]) -> dict[int, list[Any]]:
        out: dict[int, list[Any]] = {}
        for p in payloads:
            out.setdefault(self._leader(p.topic, p.partition), []).append(p)
        return out

    def _key(self, topic: Any) -> tuple[str, Any]:
        name = topic_name(topic)
        return name, self._topic_ids.get(name)

    @staticmethod
    def _finish(
        payloads: Sequence[Any],
        results: dict[tuple[str, int], Any],
        fail_on_error: bool,
        callback: Callable[[Any], Any] | None,
    ) -> list[Any]:
        out = []
        for p in payloads:
            r = results[topic_name(p.topic), p.partition]._replace(topic=p.topic)
            if fail_on_error:
                check_error(r)
            out.append(callback(r) if callback else r)
        return out

    def _names_by_id(self) -> dict[Any, str]:
        return {tid: name for name, tid in self._topic_ids.items() if tid is not None}

    # ------------------------------------------------------------ produce / fetch

    def send_produce_request(
        self,
        payloads: Sequence[Any] = (),
        acks: int = 1,
        timeout: float = 1000,
        fail_on_error: bool = True,
        callback: Callable[[Any], Any] | None = None,
    ) -> list[Any]:
        """Produce each :class:`~kafkastate.legacy.common.ProduceRequest`'s messages as one
        record batch to its partition's leader.

        Args:
            payloads: ProduceRequests, at most one per topic-partition.
            acks: 0, 1 or -1 (0 is sent as 1 and returns no responses, see the module).
            timeout: milliseconds the broker may wait for ``acks``.
            fail_on_error: raise the first error instead of returning it in a response.
            callback: applied to each response.

        Returns:
            ProduceResponses (or ``callback`` results) in payload order.

        Raises:
            BrokerResponseError: a partition failed (the seed's class for its code).
            KafkaConfigurationError: two payloads name the same topic-partition.
            UnsupportedCodecError: a message names an unknown codec.
        """
        group_by_topic_and_partition(payloads)
        results: dict[tuple[str, int], Any] = {}
        for leader, group in self._by_leader(payloads).items():
            batches = {}
            for p in group:
                codec, records = message_records(p.messages)
                builder = RecordBatchBuilder(compression=codec)
                now_ms = int(time.time() * 1000)
                for key, value in records:
                    builder.append(now_ms, key, value)
                batches[(*self._key(p.topic), p.partition)] = builder.build()
            response = self._request(
                functools.partial(
                    framing.produce_request,
                    batches=batches,
                    acks=acks or 1,
                    timeout=timeout / 1000,
                ),
                leader,
            )
            names = self._names_by_id()
            for t in response.responses:
                name = response_topic_name(t, names)
                for part in t.partition_responses:
                    index = int(part.index)
                    results[name, index] = ProduceResponse(
                        name, index, int(part.error_code), int(part.base_offset)
                    )
        if acks == 0:
            return []
        return self._finish(payloads, results, fail_on_error, callback)

    def send_fetch_request(
        self,
        payloads: Sequence[Any] = (),
        fail_on_error: bool = True,
        callback: Callable[[Any], Any] | None = None,
        max_wait_time: int = 100,
        min_bytes: int = 4096,
    ) -> list[Any]:
        """Fetch each :class:`~kafkastate.legacy.common.FetchRequest` from its leader.

        Returns:
            FetchResponses (messages: a list of OffsetAndMessage, decompressed, from the
            requested offset on) in payload order.

        Raises:
            BrokerResponseError: a partition failed (with ``fail_on_error``).
        """
        results: dict[tuple[str, int], Any] = {}
        for leader, group in self._by_leader(payloads).items():
            offsets = {(*self._key(p.topic), p.partition): p.offset for p in group}
            wanted = {(topic_name(p.topic), p.partition): p.offset for p in group}
            max_bytes = max(p.max_bytes for p in group)
            response = self._request(
                functools.partial(
                    requests.fetch_request,
                    partitions=offsets,
                    max_wait=max_wait_time / 1000,
                    min_bytes=min_bytes,
                    partition_max_bytes=max_bytes,
                ),
                leader,
            )
            names = self._names_by_id()
            for t in response.responses:
                name = str(getattr(t, "topic", None) or names.get(getattr(t, "topic_id", None), ""))
                for part in t.partitions:
                    index = int(part.partition_index)
                    start = wanted.get((name, index), 0)
                    messages = [
                        OffsetAndMessage(r.offset, Message(0, 0, r.key, r.value))
                        for batch in iter_batches(bytes(part.records or b""))
                        if not batch.is_control
                        for r in batch
                        if r.offset >= start
                    ]
                    results[name, index] = FetchResponse(
                        name, index, int(part.error_code), int(part.high_watermark), messages
                    )
        return self._finish(payloads, results, fail_on_error, callback)

    def send_offset_request(
        self,
        payloads: Sequence[Any] = (),
        fail_on_error: bool = True,
        callback: Callable[[Any], Any] | None = None,
    ) -> list[Any]:
        """ListOffsets for each :class:`~kafkastate.legacy.common.OffsetRequest` (``time``
        -1: the next offset to be written, -2: the earliest, else a timestamp in ms).

        Returns:
            OffsetResponses, ``offsets`` a one-element tuple, in payload order.

        Raises:
            BrokerResponseError: a partition failed (with ``fail_on_error``).
        """
        results: dict[tuple[str, int], Any] = {}
        for leader, group in self._by_leader(payloads).items():
            parts = {(topic_name(p.topic), p.partition): p.time for p in group}
            response = self._request(
                functools.partial(list_offsets_request, parts=parts, isolation=0), leader
            )
            for t in response.topics:
                for part in t.partitions:
                    index = int(part.partition_index)
                    results[str(t.name), index] = OffsetResponse(
                        str(t.name), index, int(part.error_code), (int(part.offset),)
                    )
        return self._finish(payloads, results, fail_on_error, callback)

    # ------------------------------------------------------------ groups

    def send_consumer_metadata_request(
        self,
        payloads: Any = (),
        fail_on_error: bool = True,
        callback: Callable[[Any], Any] | None = None,
    ) -> list[Any]:
        """Find each group's coordinator (``payloads``: group names, or one name).

        Returns:
            ConsumerMetadataResponses in order.
        """
        groups = [payloads] if isinstance(payloads, str | bytes) else list(payloads)
        out = []
        for group in groups:
            name = topic_name(group)
            response = self._request(functools.partial(find_coordinator_request, group=name))
            coordinators = getattr(response, "coordinators", None)
            found = coordinators[0] if coordinators else response
            r = ConsumerMetadataResponse(
                int(found.error_code), int(found.node_id), str(found.host), int(found.port)
            )
            if fail_on_error:
                check_error(r)
            out.append(callback(r) if callback else r)
        return out

    def _coordinator_request(self, group: Any, factory: Callable[[Any], Any]) -> Any:
        # A new group's coordinator may be loading or moving: retry those codes, at the
        # group and the partition level, until the client's timeout.
        deadline = time.monotonic() + self.timeout
        while True:
            (found,) = self.send_consumer_metadata_request([group], fail_on_error=False)
            codes = {found.error}
            if found.error == 0:
                if found.nodeId not in self.brokers:
                    self.load_metadata_for_topics()
                response = self._request(factory, found.nodeId)
                groups = getattr(response, "groups", None)
                top = groups[0] if groups else response
                codes = {int(getattr(top, "error_code", 0) or 0)} | {
                    int(part.error_code) for t in top.topics for part in t.partitions
                }
                if not codes & _COORDINATOR_RETRY:
                    if codes - {0} and not getattr(top, "topics", None):
                        raise error_class(max(codes))(f"group {group!r}")
                    return response
            retry = codes & _COORDINATOR_RETRY
            if not retry or time.monotonic() >= deadline:
                raise error_class(max(codes - {0}))(f"group {group!r}")
            time.sleep(0.1)

    def send_offset_commit_request(
        self,
        group: Any,
        payloads: Sequence[Any] = (),
        fail_on_error: bool = True,
        callback: Callable[[Any], Any] | None = None,
    ) -> list[Any]:
        """Commit each :class:`~kafkastate.legacy.common.OffsetCommitRequest` for ``group``
        (stored in Kafka; the group must have no active members).

        Returns:
            OffsetCommitResponses in payload order.

        Raises:
            BrokerResponseError: a partition failed (with ``fail_on_error``).
        """
        name = topic_name(group)
        parts = {
            (topic_name(p.topic), p.partition): (
                p.offset,
                None if p.metadata is None else str(p.metadata),
                -1,
                "",
                None,
                -1,
            )
            for p in payloads
        }
        for p in payloads:
            if topic_name(p.topic) not in self._topic_ids:
                self.load_metadata_for_topics(p.topic)
        ids = dict(self._topic_ids)
        response = self._coordinator_request(
            name, lambda v: offset_commit_request(v, name, parts, ids)
        )
        names = self._names_by_id()
        results: dict[tuple[str, int], Any] = {}
        for t in response.topics:
            tname = response_topic_name(t, names)
            for part in t.partitions:
                index = int(part.partition_index)
                results[tname, index] = OffsetCommitResponse(tname, index, int(part.error_code))
        return self._finish(payloads, results, fail_on_error, callback)

    def send_offset_fetch_request_kafka(
        self,
        group: Any,
        payloads: Sequence[Any] = (),
        fail_on_error: bool = True,
        callback: Callable[[Any], Any] | None = None,
    ) -> list[Any]:
        """``group``'s committed offset for each
        :class:`~kafkastate.legacy.common.OffsetFetchRequest` (-1: none).

        Returns:
            OffsetFetchResponses in payload order.

        Raises:
            BrokerResponseError: a partition failed (with ``fail_on_error``).
        """
        name = topic_name(group)
        tps = [(topic_name(p.topic), p.partition) for p in payloads]
        ids = dict(self._topic_ids)
        response = self._coordinator_request(
            name, lambda v: offset_fetch_request(v, name, tps, ids)
        )
        groups = getattr(response, "groups", None)
        topics = groups[0].topics if groups else response.topics
        names = self._names_by_id()
        results: dict[tuple[str, int], Any] = {}
        for t in topics:
            tname = response_topic_name(t, names)
            for part in t.partitions:
                index = int(part.partition_index)
                results[tname, index] = OffsetFetchResponse(
                    tname,
                    index,
                    int(part.committed_offset),
                    part.metadata,
                    int(part.error_code),
                )
        return self._finish(payloads, results, fail_on_error, callback)

    send_offset_fetch_request = send_offset_fetch_request_kafka
    """0.9.5 read ZooKeeper here; Kafka 4 has no ZooKeeper: the offsets stored in Kafka."""
