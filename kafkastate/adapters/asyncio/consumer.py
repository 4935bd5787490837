"""aiokafka's ``AIOKafkaConsumer`` on asyncio.

It runs the async adapter's consumer (:func:`kafkastate.adapters.anyio.consumer.running_consumer`,
on asyncio) in a background task that ``start()`` creates and ``stop()`` ends; every call
goes straight to that :class:`~kafkastate.adapters.anyio.consumer.Consumer` and its
:class:`~kafkastate.core.consumer.consumer.ConsumerMachine`, which decides. As in aiokafka,
``start()`` waits for a bootstrap server to answer (up to ``request_timeout_ms``) and raises
``KafkaConnectionError`` (``NoBrokersAvailable``) if none does; aiokafka options kafkastate
does not implement (Kerberos, OAuth token providers) raise ``KafkaConfigurationError``
naming them; ``loop`` and ``api_version`` are accepted and ignored. Options are resolved by
:mod:`kafkastate.core.config` (docs/options.md).
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafkastate.adapters._common import resolve
from kafkastate.adapters.anyio.consumer import Consumer, running_consumer
from kafkastate.adapters.asyncio.background import Background, Lifecycle, deprecated_arguments
from kafkastate.core.config import check_consumer
from kafkastate.core.consumer.consumer import check_subscription
from kafkastate.core.consumer.fetch.state import checked_partitions
from kafkastate.errors import ConsumerStoppedError, IllegalStateError
from kafkastate.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndTimestamp,
    TopicPartition,
)

__all__ = ["AIOKafkaConsumer"]


class AIOKafkaConsumer(Lifecycle):
    """An asyncio consumer with aiokafka's interface.

    Give partitions with :meth:`assign`, or topics / a pattern (here or in
    :meth:`subscribe`). With a ``group_id`` a subscription joins the consumer group (the
    classic protocol, or KIP-848 with ``group_protocol="consumer"``), which assigns the
    partitions; heartbeats and rebalances run in the background, and a
    :class:`~kafkastate.abc.ConsumerRebalanceListener` hears of every change. Without a
    ``group_id`` a subscription reads every partition of the topics. The few aiokafka
    options kafkastate lacks (Kerberos, OAuth) raise ``KafkaConfigurationError``
    naming them.

    Args:
        topics: topics to read every partition of.
        options: aiokafka's keyword options, with aiokafka's defaults (``bootstrap_servers``,
            ``group_id``, ``key_deserializer``, ``value_deserializer``, ``fetch_*``,
            ``enable_auto_commit`` (on), ``auto_commit_interval_ms``,
            ``partition_assignment_strategy`` (round robin), ``session_timeout_ms``
            (10 s), ``rebalance_timeout_ms`` (the session timeout),
            ``request_timeout_ms`` (40 s), ``isolation_level``, TLS, SASL...); also
            ``group_protocol="consumer"`` (KIP-848) and the Java property names. Every
            option, its default per library and its check: docs/options.md
            (:data:`kafkastate.core.config.OPTIONS`). ``consumer_timeout_ms`` and
            ``api_version`` are accepted without effect (fetching is driven by the
            broker's answers; versions are negotiated).

    Raises:
        KafkaConfigurationError: a bad option value, or an aiokafka option kafkastate does
            not implement (Kerberos...), named (a ValueError).
        TypeError: an option aiokafka does not have either.
    """

    def __init__(self, *topics: str, loop: Any = None, **options: Any) -> None:
        deprecated_arguments("AIOKafkaConsumer", loop, options)
        self._options = resolve("consumer", "aiokafka", options, owner="AIOKafkaConsumer")
        check_consumer(self._options)  # checked now, as aiokafka does
        self._topics = topics
        self._background: Background[Consumer] = Background("AIOKafkaConsumer")
        self._consumer: Consumer | None = None
        self._pending: tuple[Any, Any, Any] | None = None  # subscribe() before start()
        self._assigned: list[TopicPartition] | None = None  # assign() before start()
        self._stopped = False

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # (getattr: a constructor that raised leaves nothing to warn about)
        if getattr(self, "_consumer", None) is not None and not getattr(self, "_stopped", True):
            _warn(f"Unclosed AIOKafkaConsumer {self!r}", ResourceWarning, source=self)

    async def start(self) -> None:
        """Start the background task that owns the connections, subscribe to the topics
        given to the constructor, and wait for a bootstrap server to answer (as aiokafka
        does).

        Raises:
            NoBrokersAvailable: no bootstrap server answered within ``request_timeout_ms``
                (a KafkaConnectionError, as aiokafka raises).
            AuthenticationFailedError: the bootstrap servers refused the SASL credentials.
            RuntimeError: already started.
        """
        subscription = self._pending
        if subscription is None and self._topics:
            subscription = (self._topics, None, None)
        assigned, self._pending, self._assigned = self._assigned, None, None
        # (the task holds no reference to self: an unclosed consumer can be collected)
        self._consumer = await self._background.start(
            functools.partial(_run, self._options, subscription, assigned)
        )
        self._observed = self._consumer

    async def stop(self) -> None:
        """Commit (with auto-commit on) and close the connections. A pending
        :meth:`getmany` returns ``{}``; a pending or later :meth:`getone`, a later
        :meth:`getmany` or iteration raise :class:`~kafkastate.errors.ConsumerStoppedError`
        (aiokafka's rules)."""
        self._stopped = self._stopped or self._consumer is not None
        try:
            await self._background.stop()
        finally:
            self._consumer = None

    def _running(self) -> Consumer:
        consumer = self._consumer
        if consumer is None:
            if self._stopped:
                raise ConsumerStoppedError("AIOKafkaConsumer was stopped")
            raise IllegalStateError("AIOKafkaConsumer is not started: call `await start()`")
        return consumer

    def _reading(self) -> Consumer:
        if self._stopped:
            raise ConsumerStoppedError("AIOKafkaConsumer was stopped")
        return self._running()

    # The rest delegates to kafkastate.anyio.Consumer.

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read exactly these partitions (before :meth:`start` too, as aiokafka allows).

        Raises:
            IllegalStateError: subscribed through the group.
            KafkaConfigurationError: a malformed partition.
        """
        if self._consumer is None and not self._stopped:
            if self._pending is not None or self._topics:
                raise IllegalStateError(
                    "assign() while subscribed: manual assignment and subscription are "
                    "mutually exclusive; call unsubscribe() first"
                )
            self._assigned = [TopicPartition(*tp) for tp in checked_partitions(partitions)]
            return
        self._running().assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        """The partitions being read."""
        return set(self._running().assignment())

    def subscribe(
        self, topics: Sequence[str] = (), pattern: str | None = None, listener: Any = None
    ) -> None:
        """Subscribe to ``topics`` or to the topics matching ``pattern`` (``re.match``);
        with a ``group_id`` the group assigns their partitions and ``listener`` (a
        :class:`~kafkastate.abc.ConsumerRebalanceListener`) hears of every change.

        Raises:
            KafkaConfigurationError: bad topics, both or neither of topics and pattern, a
                bad pattern or listener.
        """
        if self._consumer is None:
            # before start(), as aiokafka allows: checked now, applied by start()
            if self._assigned is not None:
                raise IllegalStateError(
                    "subscribe() after assign(): manual assignment and subscription are "
                    "mutually exclusive; call unsubscribe() first"
                )
            check_subscription(
                topics, pattern, listener, group=self._options["group_id"] is not None
            )
            self._pending = (topics, pattern, listener)
            return
        self._running().subscribe(topics, pattern=pattern, listener=listener)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group metadata, for ``send_offsets_to_transaction``."""
        return self._running().group_metadata()

    def subscription(self) -> set[str]:
        """The subscribed topics."""
        return set(self._running().subscription())

    def unsubscribe(self) -> None:
        """Drop the subscription; a group member leaves the group (its partitions revoked
        first: auto-commit, the listener) and :meth:`subscribe` joins again."""
        if self._consumer is None and not self._stopped:
            self._pending = self._assigned = None  # before start(): nothing applied yet
            self._topics = ()
            return
        self._running().unsubscribe()

    async def getone(self, *partitions: tuple[str, int]) -> ConsumerRecord:
        """The next record (of these partitions).

        Raises:
            ConsumerStoppedError: the consumer is stopped, or stopped meanwhile.
        """
        consumer = self._consumer
        if consumer is None or self._stopped:
            consumer = self._reading()  # raises
        # at hand: one call, no second coroutine (asyncio cancels at a suspension only)
        record = consumer.ready_record(partitions) if partitions else consumer.next_ready()
        if record is not None:
            return record
        return await consumer.getone(*partitions)

    async def getmany(
        self, *partitions: tuple[str, int], timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Fetched records per partition, waiting up to ``timeout_ms`` for the first;
        ``{}`` if the consumer is stopped meanwhile.

        Raises:
            ConsumerStoppedError: the consumer was stopped before the call.
        """
        consumer = self._reading()
        try:
            return await consumer.getmany(
                *partitions, timeout_ms=timeout_ms, max_records=max_records
            )
        except ConsumerStoppedError:
            return {}  # stopped while it waited (aiokafka)

    def __aiter__(self) -> AIOKafkaConsumer:
        if self._stopped:
            raise ConsumerStoppedError("AIOKafkaConsumer was stopped")
        return self

    async def __anext__(self) -> ConsumerRecord:
        consumer = self._consumer
        if consumer is None:
            raise StopAsyncIteration  # stopped: aiokafka ends the iteration too
        try:
            record = consumer.next_ready()  # at hand: one call
        except ConsumerStoppedError:  # (with deserializers: ready_record)
            raise StopAsyncIteration from None  # stop() is under way
        if record is not None:
            return record
        return await consumer.__anext__()  # ends the iteration when stop() comes meanwhile

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._running().seek(partition, offset)

    async def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Read from the log start."""
        await self._running().seek_to_beginning(*partitions)

    async def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Read only new records."""
        await self._running().seek_to_end(*partitions)

    async def seek_to_committed(self, *partitions: tuple[str, int]) -> None:
        """Go back to the committed offsets.

        Raises:
            IllegalStateError: no group_id, or a partition is not assigned.
        """
        await self._running().seek_to_committed(*partitions)

    async def position(self, partition: tuple[str, int]) -> int:
        """The offset of the next record to be returned."""
        return await self._running().position(partition)

    async def committed(self, partition: tuple[str, int]) -> int | None:
        """The group's committed offset, or None."""
        return await self._running().committed(partition)

    async def commit(self, offsets: Mapping[tuple[str, int], Any] | None = None) -> None:
        """Commit offsets (default: the positions of every assigned partition)."""
        await self._running().commit(offsets)

    def highwater(self, partition: tuple[str, int]) -> int | None:
        """The high watermark of the last fetch."""
        return self._running().highwater(partition)

    def last_stable_offset(self, partition: tuple[str, int]) -> int | None:
        """The last stable offset of the last fetch."""
        return self._running().last_stable_offset(partition)

    def last_poll_timestamp(self, partition: tuple[str, int]) -> int | None:
        """When the last fetch response for ``partition`` arrived (ms since the epoch)."""
        return self._running().last_poll_timestamp(partition)

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop fetching these partitions."""
        self._running().pause(*partitions)

    def resume(self, *partitions: tuple[str, int]) -> None:
        """Undo :meth:`pause`."""
        self._running().resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return set(self._running().paused())

    async def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int]:
        """The log start offsets."""
        return await self._running().beginning_offsets(partitions)

    async def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """The log end offsets."""
        return await self._running().end_offsets(partitions)

    async def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offsets at or after the timestamps (ms)."""
        return await self._running().offsets_for_times(timestamps)

    async def topics(self) -> set[str]:
        """Every topic in the cluster."""
        return set(await self._running().topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` from the metadata at hand (aiokafka: no request)."""
        found = self._running().machine.client.cluster.partitions_for(topic)
        return None if found is None else set(found)


async def _run(
    options: dict[str, Any],
    subscription: tuple[Any, Any, Any] | None,
    assigned: list[TopicPartition] | None,
    ready: asyncio.Future[Consumer],
    stopping: asyncio.Event,
) -> None:
    """The background task of a started :class:`AIOKafkaConsumer`."""
    async with running_consumer(options, subscription, wait_for_cluster=True) as consumer:
        if assigned is not None:
            consumer.assign(assigned)
        if subscription is not None:
            # aiokafka's start(): assignment() is there when it returns (a JoinGroup error
            # raises here); topics that do not exist yet do not hold it up longer than
            # request_timeout_ms.
            await consumer.wait_for_assignment(options["request_timeout_ms"] / 1000)
        ready.set_result(consumer)
        await stopping.wait()
