"""Partitioning: which partition of a topic a record goes to.

Theory of operation
-------------------
Four cases, tried in this order (Java ``KafkaProducer.partition``):

1. An explicit partition in the record wins. It must exist in the current metadata; one
   outside it raises :class:`~kafkastate.errors.UnknownTopicOrPartitionError` (retriable:
   the topic may have grown and metadata not caught up -- the adapter refreshes metadata
   and retries until ``max.block.ms``, as the Java producer's ``waitOnMetadata`` does).
2. A custom partitioner, if configured, decides every other record. Two forms: a
   callable with aiokafka's (and kafka-python 2.x's) signature,
   ``partitioner(key_bytes, all_partitions, available_partitions) -> int``, or an object
   with kafka-python 3.0's ``partition(topic, key, key_bytes, value, value_bytes,
   cluster)`` (:class:`PluggablePartitioner`; ``cluster`` is a :class:`ClusterView`; the
   core has only serialized records, so ``key`` and ``value`` are the bytes too). Such an
   object may have KIP-480's ``on_new_batch(topic, cluster, prev_partition)``: for a
   keyless record that would open a new batch on the partition it chose, the hook is
   called and the partitioner asked again, so the record that opens the batch lands on
   the partition rotated to (kafka-python 3.0's ``KafkaProducer.send``). Whatever a
   partitioner returns is checked; an exception it raises is wrapped. Either way the
   record is refused with :class:`PartitionerError` -- never dropped, never sent to a
   partition it did not mean.
3. A record with a key goes to ``toPositive(murmur2(key)) % partition_count``, exactly the
   Java default, so the same key lands on the same partition whichever client wrote it.
4. A record without a key goes to the topic's *sticky* partition (KIP-794 "uniform sticky",
   the Java default since 3.3). The sticky partition changes once ``batch.size`` bytes
   were produced to it and its batch is full, or unconditionally after twice that, so the
   switch falls on a batch boundary (Java ``BuiltInPartitioner.updatePartitionInfo``).
   The next sticky partition is drawn uniformly, with the seeded ``rng``, among the
   partitions that have a leader, or among all of them when none has.

The accumulator reports appended bytes through :meth:`Partitioner.on_append`; only bytes
appended to the topic's current sticky partition by the sticky path count.

Left out: KIP-794's *adaptive* mode (``partitioner.adaptive.partitioning.enable``,
weighting partitions by their queue sizes, and ``partitioner.availability.timeout.ms``).
One deviation from Java's non-adaptive mode: a sticky partition that has lost its leader
while another partition has one is abandoned at the next record instead of collecting
records that cannot be sent.

Pure: randomness only from the ``random.Random`` handed in; no clock.
"""

from __future__ import annotations

import abc
import operator
import random
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol import records as _records
from kafkastate.errors import (
    KafkaConfigurationError,
    PartitionerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)

__all__ = [
    "ClusterView",
    "CustomPartitioner",
    "HashPartitioner",
    "Partitioner",
    "PartitionerError",
    "PluggablePartitioner",
    "StickyHashPartitioner",
    "default_partition",
    "murmur2",
    "murmur2_python",
]

CustomPartitioner = Callable[[bytes | None, list[int], list[int]], int]
"""aiokafka's partitioner signature: ``(key_bytes, all_partitions, available_partitions)``,
both lists sorted, returning one of ``all_partitions``."""

_M32: Final = 0xFFFFFFFF
_MURMUR_SEED: Final = 0x9747B28C
_MURMUR_M: Final = 0x5BD1E995


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Hash ``data`` with MurmurHash2 exactly as the Java client's ``Utils.murmur2``.

    Compiled where the C accelerator is built and on
    (:func:`kafkastate.core.protocol.records.set_speedups`); :func:`murmur2_python` is the
    reference.

    Args:
        data: the serialized key.

    Returns:
        The hash as a signed 32-bit integer (Java ``int``).
    """
    c_murmur2 = _records._c_murmur2
    if c_murmur2 is not None and type(data) is bytes:
        return c_murmur2(data)
    return murmur2_python(data)


def murmur2_python(data: bytes | bytearray | memoryview) -> int:
    """:func:`murmur2` in pure Python: the reference of the compiled one.

    Args:
        data: the serialized key.

    Returns:
        The hash as a signed 32-bit integer (Java ``int``).
    """
    m = _MURMUR_M
    length = len(data)
    h = _MURMUR_SEED ^ length
    words = length >> 2
    if words:
        # Java reads each 4-byte group little-endian.
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * m) & _M32
            k ^= k >> 24
            k = (k * m) & _M32
            h = ((h * m) & _M32) ^ k
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def default_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """Partition of a keyed record under the Java default partitioner.

    Args:
        key: the serialized key.
        num_partitions: the topic's partition count (> 0).

    Returns:
        ``(murmur2(key) & 0x7fffffff) % num_partitions`` (Java ``Utils.toPositive``).

    Raises:
        KafkaConfigurationError: ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise KafkaConfigurationError(f"num_partitions must be > 0, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class ClusterView:
    """The metadata as kafka-python 3.0 hands it to a partitioner object (its
    ``ClusterMetadata`` methods a partitioner uses), over one snapshot.

    Args:
        cluster: the snapshot.
    """

    __slots__ = ("_cluster",)

    def __init__(self, cluster: ClusterMetadata) -> None:
        self._cluster = cluster

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        """Returns:
        The topics in the metadata (without internal ones unless asked)."""
        return {
            name
            for name, t in self._cluster.topics.items()
            if t.error_code == 0 and not (exclude_internal_topics and t.is_internal)
        }

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """Returns:
        The topic's partitions, or None for a topic not in the metadata."""
        partitions = self._cluster.partitions_for(topic)
        return None if partitions is None else set(partitions)

    def available_partitions_for_topic(self, topic: str) -> set[int] | None:
        """Returns:
        The topic's partitions that have a leader, or None for a topic not in the
        metadata."""
        partitions = self._cluster.partitions_for(topic)
        if partitions is None:
            return None
        return {p for p in partitions if self._cluster.leader_for(topic, p) is not None}

    def leader_for_partition(self, partition: tuple[str, int]) -> int | None:
        """Returns:
        The partition's leader's node id, or None (unknown partition, or no leader)."""
        leader = self._cluster.leader_for(partition[0], partition[1])
        return None if leader is None else int(leader)


class PluggablePartitioner(abc.ABC):
    """kafka-python 3.0's partitioner interface (``kafka.partitioner.Partitioner``): give
    an instance as the producer's ``partitioner``."""

    @abc.abstractmethod
    def partition(  # noqa: PLR0917 -- kafka-python's positional signature
        self,
        topic: str,
        key: Any,
        key_bytes: bytes | None,
        value: Any,
        value_bytes: bytes | None,
        cluster: ClusterView,
    ) -> int:
        """Choose the partition of a record without an explicit one.

        Args:
            topic: the record's topic.
            key: the key (the serialized key in kafkastate, which sees only bytes).
            key_bytes: the serialized key, or None.
            value: the value (the serialized value in kafkastate).
            value_bytes: the serialized value, or None.
            cluster: the metadata (:class:`ClusterView`).

        Returns:
            One of the topic's partitions.
        """


class HashPartitioner(PluggablePartitioner):
    """kafka-python 3.0's ``DefaultPartitioner``: a keyed record goes where the Java
    client puts it (murmur2), a keyless one to a partition drawn at random among those
    with a leader (among all when none has one).

    Args:
        rng: the randomness for keyless records.
    """

    def __init__(self, *, rng: random.Random) -> None:
        self._rng = rng

    def partition(  # noqa: PLR0917 -- kafka-python's positional signature
        self,
        topic: str,
        key: Any,
        key_bytes: bytes | None,
        value: Any,
        value_bytes: bytes | None,
        cluster: ClusterView,
    ) -> int:
        """See :meth:`PluggablePartitioner.partition`.

        Raises:
            ValueError: the topic is not in ``cluster`` (as kafka-python).
        """
        every = cluster.partitions_for_topic(topic)
        if not every:
            raise ValueError(f"Topic {topic} not found in ClusterMetadata")
        if key_bytes is not None:
            ordered = sorted(every)
            return ordered[default_partition(key_bytes, len(ordered))]
        return self._keyless(topic, every, cluster.available_partitions_for_topic(topic) or set())

    def _keyless(self, topic: str, every: set[int], available: set[int]) -> int:
        """A keyless record's partition: at random among ``available``, else ``every``."""
        pool = sorted(available or every)
        return pool[self._rng.randrange(len(pool))]


class StickyHashPartitioner(HashPartitioner):
    """kafka-python 3.0's ``StickyPartitioner`` (KIP-480): keyed records as
    :class:`HashPartitioner`; keyless records of a topic stay on one partition until
    :meth:`on_new_batch` (the producer calls it when such a record would open a new
    batch) draws another, different when it can.

    Args:
        rng: the randomness for the sticky choice.
    """

    def __init__(self, *, rng: random.Random) -> None:
        super().__init__(rng=rng)
        self._sticky: dict[str, int] = {}

    def _keyless(self, topic: str, every: set[int], available: set[int]) -> int:
        current = self._sticky.get(topic)
        if current is not None and current in (available or every):
            return current
        return self._draw(topic, every, available, avoid=None)

    def on_new_batch(self, topic: str, cluster: ClusterView, prev_partition: int) -> None:
        """Move the topic's keyless records off ``prev_partition`` (KIP-480); a stale call
        (the sticky partition already moved) does nothing.

        Args:
            topic: the topic.
            cluster: the metadata.
            prev_partition: the partition whose batch was full.
        """
        if self._sticky.get(topic) != prev_partition:
            return
        every = cluster.partitions_for_topic(topic)
        if every:
            available = cluster.available_partitions_for_topic(topic) or set()
            self._draw(topic, every, available, avoid=prev_partition)

    def _draw(self, topic: str, every: set[int], available: set[int], avoid: int | None) -> int:
        if available:
            pool = sorted(p for p in available if p != avoid) or sorted(available)
        else:
            pool = sorted(every)  # nothing has a leader: any, avoid or not
        chosen = pool[self._rng.randrange(len(pool))]
        self._sticky[topic] = chosen
        return chosen


@attrs.define(slots=True)
class _Sticky:
    partition: int
    produced: int = 0
    # The metadata snapshot in which ``partition`` was last seen with a leader: while it is
    # still the current one, nothing needs checking again (the hot path of keyless sends).
    checked_in: ClusterMetadata | None = None


def sticky_state_class() -> type:
    """The class of :meth:`Partitioner.sticky_lane`'s state, whose slots the accumulator's
    compiled hot path (``_speedups.lane_sticky``) reads and writes."""
    return _Sticky


class Partitioner:
    """Chooses partitions: explicit, custom, murmur2 by key, or uniform sticky.

    Args:
        rng: seeded randomness for the sticky choice (adapters pass
            ``random.SystemRandom()``, the simulator a seeded ``random.Random``).
        batch_size: bytes to produce to a sticky partition before switching (``batch.size``;
            values below 1 count as 1, like Java).
        custom: for records without an explicit partition, an aiokafka-style callable or
            a kafka-python 3.0 partitioner object (``partition(topic, key, key_bytes,
            value, value_bytes, cluster)``), or None for the built-in behaviour.
    """

    # Slots: the accumulator's compiled keyed hot path (records._c_lane_hashed) reads
    # ``_custom`` and ``_counts`` where the interpreter keeps them.
    __slots__ = (
        "__dict__",
        "_counts",
        "_custom",
        "_method",
        "_on_new_batch",
        "_rng",
        "_sticky",
        "_sticky_bytes",
    )

    def __init__(
        self,
        *,
        rng: random.Random,
        batch_size: int = 16384,
        custom: CustomPartitioner | PluggablePartitioner | None = None,
    ) -> None:
        method = None if isinstance(custom, str | bytes) else getattr(custom, "partition", None)
        if custom is not None and not callable(custom) and not callable(method):
            raise KafkaConfigurationError(f"partitioner {custom!r} is not callable")
        self._rng = rng
        self._sticky_bytes = max(1, batch_size)
        self._custom = custom
        self._method: Callable[..., Any] | None = method if callable(method) else None
        hook = getattr(custom, "on_new_batch", None) if self._method is not None else None
        self._on_new_batch: Callable[[str, ClusterView, int], Any] | None = (
            hook if callable(hook) else None
        )
        self._sticky: dict[str, _Sticky] = {}
        # topic -> (the metadata snapshot, its partition count): key_partition's cache
        self._counts: dict[str, tuple[ClusterMetadata, int]] = {}

    @property
    def custom(self) -> CustomPartitioner | PluggablePartitioner | None:
        """The custom partitioner, or None."""
        return self._custom

    @property
    def wants_batch_hint(self) -> bool:
        """Whether :meth:`partition` should be told, for keyless records, whether a
        partition's open batch would take the record (``opens_batch``): the custom
        partitioner has KIP-480's ``on_new_batch``."""
        return self._on_new_batch is not None

    def forget(self, topics: Sequence[str]) -> None:
        """Drop the sticky partitions and cached partition counts of ``topics`` (the
        producer no longer sends to them; a later record starts afresh).

        Args:
            topics: topic names.
        """
        for topic in topics:
            self._sticky.pop(topic, None)
            self._counts.pop(topic, None)

    def sticky_lane(self, topic: str) -> tuple[_Sticky, int] | None:
        """The topic's sticky state and switch threshold, for the accumulator's hot path
        (:meth:`Accumulator.append_sticky`), or None before its first keyless record.

        While the partition's batch has room, :meth:`on_append` switches only once
        ``produced`` reaches twice the threshold: below that the caller may add to
        ``produced`` itself; otherwise it must call :meth:`on_append`.

        Args:
            topic: the topic.

        Returns:
            ``(state, threshold)`` or None.
        """
        s = self._sticky.get(topic)
        return None if s is None else (s, self._sticky_bytes)

    def sticky_partition(self, topic: str) -> int | None:
        """The topic's current sticky partition, or None before its first keyless record.

        Args:
            topic: the topic.

        Returns:
            The partition keyless records go to now, if one was chosen.
        """
        s = self._sticky.get(topic)
        return None if s is None else s.partition

    def key_partition(self, topic: str, key: bytes, cluster: ClusterMetadata) -> int | None:
        """The hot path of a keyed record without an explicit partition: what
        :meth:`partition` would return, or None whenever it might differ or raise (a custom
        partitioner, a topic the metadata does not know or reports an error for).

        Args:
            topic: the topic.
            key: the serialized key (``bytes``).
            cluster: the current metadata snapshot.

        Returns:
            ``murmur2(key)`` over the topic's partition count (the Java default
            partitioner), or None: call :meth:`partition`.
        """
        if self._custom is not None or type(key) is not bytes:
            return None
        counted = self._counts.get(topic)
        if counted is None or counted[0] is not cluster:
            t = cluster.topics.get(topic)
            if t is None or t.error_code != 0:
                return None
            n = len(t.partitions)
            if not n:
                return None
            counted = self._counts[topic] = (cluster, n)
        c_murmur2 = _records._c_murmur2
        h = murmur2_python(key) if c_murmur2 is None else c_murmur2(key)
        return (h & 0x7FFFFFFF) % counted[1]

    def partition(
        self,
        topic: str,
        key: bytes | None,
        cluster: ClusterMetadata,
        *,
        explicit: int | None = None,
        value: bytes | bytearray | memoryview | None = None,
        opens_batch: Callable[[int], bool] | None = None,
    ) -> int:
        """Choose the partition for one record.

        Args:
            topic: the record's topic.
            key: the serialized key, or None.
            cluster: the current metadata snapshot.
            explicit: the partition the user asked for, or None.
            value: the serialized value, for a partitioner object.
            opens_batch: for a keyless record when :attr:`wants_batch_hint`: whether the
                record would open a new batch on a partition (KIP-480's hook then runs).

        Returns:
            The partition index.

        Raises:
            KafkaConfigurationError: ``explicit`` is negative or not an int.
            UnknownTopicOrPartitionError: the topic is not in ``cluster`` (or has no
                partitions), or ``explicit`` is not one of its partitions. Retriable: the
                adapter may refresh metadata and try again until ``max.block.ms``.
            BrokerResponseError: metadata reported an error for the topic (for example
                :class:`~kafkastate.errors.TopicAuthorizationFailedError`).
            PartitionerError: the custom partitioner raised or returned an invalid value.
        """
        if explicit is None and key is None and self._custom is None:
            s = self._sticky.get(topic)
            if s is not None and s.checked_in is cluster:
                return s.partition
        elif explicit is not None and (
            isinstance(explicit, bool) or not isinstance(explicit, int) or explicit < 0
        ):
            raise KafkaConfigurationError(
                f"partition must be a non-negative int, got {explicit!r} (topic {topic!r})"
            )
        partitions = self._partitions(topic, cluster)
        if explicit is not None:
            if explicit not in partitions:
                raise UnknownTopicOrPartitionError(
                    f"partition {explicit} of topic {topic!r} is not in the metadata "
                    f"({len(partitions)} partitions)",
                    topic=topic,
                    partition=explicit,
                )
            return explicit
        if self._method is not None:
            view = ClusterView(cluster)
            chosen = self._call_object(topic, key, value, partitions, view)
            hook = self._on_new_batch
            if key is None and hook is not None and opens_batch is not None and opens_batch(chosen):
                self._call(hook, topic, topic, view, chosen)  # KIP-480: rotate, ask again
                chosen = self._call_object(topic, key, value, partitions, view)
            return chosen
        if self._custom is not None:
            return self._call_custom(self._custom, topic, key, partitions, cluster)  # type: ignore[arg-type]
        if key is not None:
            return default_partition(key, len(partitions))
        return self._sticky_choice(topic, partitions, cluster)

    def on_append(
        self, topic: str, partition: int, appended_bytes: int, *, batch_full: bool = True
    ) -> None:
        """Count bytes appended to a keyless record's sticky partition; maybe switch.

        Called by the accumulator after appending a record whose partition came from the
        sticky path. Bytes for any other partition than the topic's sticky one are ignored.

        Args:
            topic: the record's topic.
            partition: where it was appended.
            appended_bytes: how much the partition's batches grew.
            batch_full: whether the partition's last batch can take no more records. A
                switch waits for it (so no half-filled batch is left behind) until twice
                ``batch.size`` was produced.
        """
        s = self._sticky.get(topic)
        if s is None or s.partition != partition:
            return
        s.produced += appended_bytes
        if (s.produced >= self._sticky_bytes and batch_full) or (
            s.produced >= 2 * self._sticky_bytes
        ):
            # The next sticky partition is drawn at the topic's next keyless record, when
            # the metadata then current says which partitions have a leader.
            s.checked_in = None  # stale for whoever kept it (the accumulator's lane)
            del self._sticky[topic]

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _partitions(topic: str, cluster: ClusterMetadata) -> tuple[int, ...]:
        t = cluster.topics.get(topic)
        if t is not None and t.error_code != 0:
            cls = error_for_code(t.error_code)
            raise cls(f"the metadata answered {cls.__name__} for topic {topic!r}", topic=topic)
        partitions = cluster.partitions_for(topic)
        if not partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} is not in the metadata", topic=topic
            )
        return partitions

    @staticmethod
    def _available(topic: str, partitions: Sequence[int], cluster: ClusterMetadata) -> list[int]:
        return [p for p in partitions if cluster.leader_for(topic, p) is not None]

    def _sticky_choice(
        self, topic: str, partitions: tuple[int, ...], cluster: ClusterMetadata
    ) -> int:
        s = self._sticky.get(topic)
        if s is not None and s.partition in partitions:
            if cluster.leader_for(topic, s.partition) is not None:
                s.checked_in = cluster
                return s.partition
            available = self._available(topic, partitions, cluster)
            if not available:
                return s.partition  # nothing better to switch to
        else:
            available = self._available(topic, partitions, cluster)
        pool = available or list(partitions)
        chosen = pool[self._rng.randrange(len(pool))]
        checked = cluster if cluster.leader_for(topic, chosen) is not None else None
        if s is not None:
            s.checked_in = None  # replaced: stale for whoever kept it
        self._sticky[topic] = _Sticky(partition=chosen, checked_in=checked)
        return chosen

    def _call_custom(
        self,
        custom: CustomPartitioner,
        topic: str,
        key: bytes | None,
        partitions: tuple[int, ...],
        cluster: ClusterMetadata,
    ) -> int:
        all_partitions = list(partitions)
        available = self._available(topic, partitions, cluster)
        result = self._call(custom, topic, key, all_partitions, available)
        return self._checked(result, topic, partitions)

    def _call_object(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | bytearray | memoryview | None,
        partitions: tuple[int, ...],
        view: ClusterView,
    ) -> int:
        assert self._method is not None
        data = None if value is None else bytes(value)
        result = self._call(self._method, topic, topic, key, key, data, data, view)
        return self._checked(result, topic, partitions)

    def _call(self, fn: Callable[..., Any], topic: str, *args: Any) -> Any:
        """``fn(*args)``, with what it raises wrapped in a PartitionerError."""
        try:
            return fn(*args)
        except Exception as exc:
            custom = self._custom
            raise PartitionerError(
                f"partitioner {custom!r} raised {type(exc).__name__}: {exc} (topic {topic!r})",
                partitioner=custom,
                topic=topic,
            ) from exc

    def _checked(self, result: Any, topic: str, partitions: tuple[int, ...]) -> int:
        custom = self._custom
        try:
            index = None if isinstance(result, bool) else operator.index(result)
        except TypeError:
            index = None
        if index is None or index not in partitions:
            raise PartitionerError(
                f"partitioner {custom!r} returned {result!r}, which is not a partition of "
                f"topic {topic!r} (partitions {partitions[0]}..{partitions[-1]})",
                partitioner=custom,
                topic=topic,
            )
        return index
