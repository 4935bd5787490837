"""The anyio consumer: ``async with open_consumer(...) as consumer`` on asyncio or trio.

The :class:`Consumer` gives commands to a
:class:`~kafkastate.core.consumer.fetcher.FetcherMachine`; an
:class:`~kafkastate.adapters.anyio.driver.AsyncDriver` does the IO in the task group the
``async with`` block owns. Fetching runs in the background: records are prefetched per
partition while the application works, and :meth:`Consumer.getmany` hands out what is there
(or waits for the first data up to its timeout).

The consumer either reads the partitions it is given (:meth:`Consumer.assign`) or subscribes
to topics (or a pattern). With a ``group_id`` a subscription joins the consumer group, which
assigns the partitions (classic protocol or KIP-848); the machine's group events run here, one
at a time, in a task of their own: commit before a revoke (auto-commit), the application's
rebalance listener, then ``revocation_done``/``assignment_done``. Without a ``group_id`` a
subscription reads every partition of the topics and picks up partitions added later
(aiokafka's behaviour without a group).
"""

from __future__ import annotations

import inspect
import logging
import math
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import anyio
import anyio.lowlevel

from kafkastate.adapters._common import machine_built, machine_rng, resolve, tls_context
from kafkastate.adapters._records import one_consumer_record, to_consumer_records
from kafkastate.adapters.anyio.driver import REFUSAL_CHECK, AsyncDriver, wait_for_cluster
from kafkastate.adapters.anyio.observe import Observed
from kafkastate.core.client import MetadataUpdated
from kafkastate.core.config import (
    check_consumer,
    close_serializers,
    consumer_machine,
    deserializer_of,
)
from kafkastate.core.consumer.consumer import (
    AssignmentSettled,
    AutoCommitted,
    ConsumerMachine,
    ListenerCallRequested,
)
from kafkastate.core.consumer.fetcher import (
    EARLIEST,
    LATEST,
    CommittedOffsets,
    GroupFailed,
    GroupLeft,
    OffsetsCommitted,
    OffsetsListed,
    PositionsResolved,
    PositionState,
    RecordsFetched,
)
from kafkastate.errors import (
    ConsumerStoppedError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
)
from kafkastate.otel_metrics import metrics_export_of
from kafkastate.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from kafkastate.tracing import Tracing, tracing_of

__all__ = ["Consumer", "open_consumer", "running_consumer"]

log = logging.getLogger("kafkastate.consumer")

_OUTSIDE: Final = " (use the consumer inside its `async with open_consumer(...)` block)"
"""What a call outside the consumer's block is told (after :meth:`Consumer._running`'s
refusal)."""

Deserializer = Callable[[bytes | None], Any] | Any
"""``f(bytes) -> value``, or an object with ``deserialize(topic, headers, data)``."""


class Consumer(Observed):
    """Reads records through a running :class:`AsyncDriver`; made by :func:`open_consumer`.

    Every decision (what is handed out, what a commit stores, when auto-commit fires, how a
    rebalance is sequenced) is the :class:`~kafkastate.core.consumer.consumer.ConsumerMachine`'s;
    this class gives it commands, waits for its answers and runs the rebalance listener
    when it asks.

    Args:
        machine: the consumer machine.
        key_deserializer: turns key bytes into the record's key (``f(bytes)``, or an object
            with ``deserialize(topic, headers, data)``), or None.
        value_deserializer: the same for values.
        request_timeout: seconds an offset query may take before KafkaTimeoutError.
        tracing: traces every record handed out (OpenTelemetry), or None.
    """

    def __init__(
        self,
        machine: ConsumerMachine,
        *,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        request_timeout: float = 30.0,
        tracing: Tracing | None = None,
    ) -> None:
        self.machine: Final = machine
        """The sans-IO machine."""
        self._key_deserializer = deserializer_of(key_deserializer)
        self._value_deserializer = deserializer_of(value_deserializer)
        self._timeout = request_timeout
        self._driver: AsyncDriver | None = None
        self._tracing = tracing
        self._data = anyio.Event()  # set when records arrive; replaced after each wait
        self._changed = anyio.Event()  # set on metadata and answers
        self._answers: dict[int, Any] = {}
        self._calls: deque[ListenerCallRequested] = deque()
        self._call_wake = anyio.Event()
        self._left = anyio.Event()
        # no deserializers and no tracing: records go out as the machine decoded them
        self._as_fetched = (
            self._key_deserializer is None and self._value_deserializer is None and tracing is None
        )
        self.next_ready: Callable[[], ConsumerRecord | None] = (
            machine.next_record if self._as_fetched else self.ready_record
        )
        """``next_ready()``: the next record of any partition if one is at hand and
        no turn for other tasks is due, else None (then await :meth:`getone`) -- the
        per-record path of :meth:`getone` and iteration in one call
        (:meth:`ConsumerMachine.next_record
        <kafkastate.core.consumer.consumer.ConsumerMachine.next_record>` itself when
        records go out as fetched). aiokafka's face calls it first."""
        self._cancel_point: Callable[[], Awaitable[None]] | None = None  # the driver's

    # ----------------------------------------------------------- assignment

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read exactly these partitions (replacing any assignment or subscription).

        Raises:
            KafkaConfigurationError: a malformed partition.
        """
        driver = self._running()
        self.machine.assign(partitions, now=driver.now())
        driver.wake()

    def subscribe(
        self,
        topics: Sequence[str] = (),
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Subscribe to ``topics``, or to every topic whose name matches ``pattern`` from
        its start (``re.match``, as aiokafka; topics created later join when metadata
        shows them).

        With a ``group_id`` the consumer joins the group, which assigns the partitions;
        ``listener`` (a :class:`~kafkastate.abc.ConsumerRebalanceListener`) hears of every
        change. Without one it reads every partition of the topics, including partitions
        added later.

        Raises:
            KafkaConfigurationError: an empty or malformed topic list, both topics and a
                pattern, a bad pattern or listener, or a listener without a ``group_id``.
        """
        driver = self._running()
        self.machine.subscribe(topics, pattern=pattern, listener=listener, now=driver.now())
        driver.wake()

    def subscription(self) -> frozenset[str]:
        """The subscribed topics (empty with a manual assignment)."""
        return frozenset(self.machine.subscription())

    def unsubscribe(self) -> None:
        """Drop the subscription and the assignment. A group member leaves the group (its
        partitions revoked first: auto-commit, the listener); :meth:`subscribe` joins
        again.

        Raises:
            IllegalStateError: a ``group_protocol="consumer"`` (KIP-848) member (not
                supported yet).
        """
        driver = self._running()
        self.machine.unsubscribe(now=driver.now())
        driver.wake()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group metadata, for a transactional producer's
        ``send_offsets_to_transaction`` (KIP-447: offsets of a member that fell out of the
        generation are refused).

        Raises:
            IllegalStateError: no ``group_id``.
        """
        return self.machine.group_metadata()

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions being read."""
        return frozenset(TopicPartition(*tp) for tp in self.machine.assignment())

    # -------------------------------------------------------------- reading

    async def getmany(
        self,
        *partitions: tuple[str, int],
        timeout_ms: float = 0,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, waiting up to ``timeout_ms`` for the first ones.

        Args:
            partitions: only these partitions (default: all assigned).
            timeout_ms: how long to wait when nothing is there yet.
            max_records: at most this many (default ``max_poll_records``).

        Returns:
            Records per partition, each list in offset order; empty on timeout.

        Raises:
            KafkaError: a partition failed (NoOffsetForPartitionError, an authorization
                error, corrupt data, RecordTooLargeError...), or the group member failed.
            RebalanceListenerError: the rebalance listener raised (once per failure).
        """
        driver = self._running()
        cancel_point = self._cancel_point
        if cancel_point is not None:
            await cancel_point()  # (as in getone: before taking records)
        machine = self.machine
        deadline = driver.now() + timeout_ms / 1000
        while True:
            data = self._data
            runs = machine.poll(max_records, partitions, now=driver.now())
            driver.wake()  # drained partitions are fetched again at once
            if runs:
                return to_consumer_records(
                    runs, machine, self._key_deserializer, self._value_deserializer, self._tracing
                )
            if driver.now() >= deadline:
                # Yield even when nothing is waited for: ``while not await getmany(): ...``
                # (timeout_ms=0, aiokafka's default) must let the connection task run.
                await anyio.lowlevel.checkpoint()
                return {}
            await self._wait_for(data, deadline - driver.now())
            if self._driver is not driver:
                raise ConsumerStoppedError("the consumer was stopped while waiting for records")

    async def _wait_for(self, data: anyio.Event, seconds: float) -> None:
        """Wait up to ``seconds`` for ``data``; while no broker is known, raise what the
        core says if every bootstrap server refused this client (TLS, SASL): waiting
        cannot help then."""
        client = self.machine.client
        while True:
            refused = client.authentication_refused
            if refused is not None:
                raise refused
            step = seconds if client.cluster.brokers else min(seconds, REFUSAL_CHECK)
            with anyio.move_on_after(step):
                await data.wait()
                return
            seconds -= step
            if seconds <= 0:
                return

    async def getone(self, *partitions: tuple[str, int]) -> ConsumerRecord:
        """The next record (of these partitions), waiting as long as it takes.

        A record already fetched is returned without waiting (on trio the call is a cancel
        point first, as every trio call is); after each batch the consumer took from the
        fetcher (at most ``max_poll_records`` records) the next call first lets other
        tasks run once (see :meth:`ready_record`).

        Raises:
            KafkaError: a partition failed.
            RebalanceListenerError: the rebalance listener raised.
        """
        cancel_point = self._cancel_point
        if cancel_point is not None:
            await cancel_point()  # (before taking a record: a cancellation loses nothing)
        if not partitions:
            record = self.next_ready()
            if record is not None:
                return record
        return await self._getone(partitions)

    async def _getone(self, partitions: Sequence[tuple[str, int]]) -> ConsumerRecord:
        """:meth:`getone` when no record was at hand: the turn, if due, then wait."""
        driver = self._running()
        machine = self.machine
        if machine.turn_due:
            machine.turn_taken()
            # (before taking a record: a cancellation here loses nothing)
            await anyio.lowlevel.checkpoint()
        while True:
            record = self.ready_record(partitions)
            if record is not None:
                return record
            data = self._data  # (no await since the machine had nothing: no wake-up lost)
            machine.turn_taken()  # waiting lets the others run
            driver.wake()
            await self._wait_for(data, math.inf)
            if self._driver is not driver:
                raise ConsumerStoppedError("the consumer was stopped while waiting for records")

    def ready_record(self, partitions: Sequence[tuple[str, int]] = ()) -> ConsumerRecord | None:
        """The next record (of ``partitions``) if one is at hand, without waiting: the
        synchronous part of :meth:`getone`. Its position moves past it.

        Fairness (the machine's ``turn_due``): when handing out made the machine take a
        batch from the fetcher (its Fetch for the drained partitions is then due: the
        driver is woken to write it), this returns None until :meth:`getone` has let other
        tasks run once, before taking anything. A loop of ``getone`` / ``async for`` thus
        yields to the event loop at least once per ``max_poll_records`` records, not only
        when the buffer runs dry.

        Returns:
            The record, or None: nothing fetched yet, or a turn for other tasks is due
            (await :meth:`getone`).

        Raises:
            KafkaError: a partition failed.
            RebalanceListenerError: the rebalance listener raised.
        """
        machine = self.machine
        if machine.turn_due:
            return None
        driver = self._driver
        if driver is None:
            driver = self._running()  # raises
        pulls = machine.pulls
        run = machine.take_one(partitions, now=driver.now())
        if machine.pulls != pulls:
            driver.wake()  # drained partitions are fetched again at once (a Fetch to write)
        if run is None:
            return None
        if self._as_fetched:
            return run[1][0]
        return one_consumer_record(
            run, machine, self._key_deserializer, self._value_deserializer, self._tracing
        )

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record; iteration ends when the consumer is stopped.

        Raises:
            StopAsyncIteration: the consumer stopped (the ``async with`` block ended, or
                ``stop()``).
        """
        cancel_point = self._cancel_point
        try:
            if cancel_point is not None:
                await cancel_point()  # (as in getone)
            record = self.next_ready()
            if record is not None:
                return record
            return await self._getone(())
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    # ------------------------------------------------------------ positions

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Read ``partition`` from ``offset`` next.

        Raises:
            IllegalStateError: the partition is not assigned.
            KafkaConfigurationError: a negative offset.
        """
        driver = self._running()
        self.machine.seek(partition, offset, now=driver.now())
        driver.wake()

    async def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Read from the log start (all assigned partitions if none given)."""
        self._seek_to(partitions, EARLIEST)

    async def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Read only records written from now on (all assigned if none given)."""
        self._seek_to(partitions, LATEST)

    async def seek_to_committed(self, *partitions: tuple[str, int]) -> None:
        """Go back to the group's committed offsets (all assigned if none given); where
        nothing is committed, to ``auto_offset_reset``.

        Raises:
            IllegalStateError: no group_id, or a partition is not assigned.
        """
        driver = self._running()
        self.machine.seek_to_committed(partitions, now=driver.now())
        driver.wake()

    def _seek_to(self, partitions: Sequence[tuple[str, int]], timestamp: int) -> None:
        driver = self._running()
        self.machine.seek_to(partitions, timestamp, now=driver.now())
        driver.wake()

    async def position(self, partition: tuple[str, int]) -> int:
        """The offset of the next record to be returned, waiting while it is being looked
        up (committed offset or reset) up to ``request_timeout_ms``.

        Raises:
            IllegalStateError: not assigned.
            KafkaTimeoutError: no position in time.
            KafkaError: the lookup failed (NoOffsetForPartitionError...).
        """
        driver = self._running()
        machine = self.machine
        deadline = driver.now() + self._timeout
        while True:
            changed = self._changed
            position = machine.position(partition)
            if position is not None:
                return position
            if machine.fetcher.position_state(machine.check_partition(partition)) is (
                PositionState.FAILED
            ):
                machine.fetcher.poll(0, now=driver.now())  # raises the partition's error
            if driver.now() >= deadline:
                raise KafkaTimeoutError(
                    f"no position for {partition[0]}-{partition[1]} in {self._timeout:g} s"
                )
            with anyio.move_on_after(deadline - driver.now()):
                await changed.wait()

    def highwater(self, partition: tuple[str, int]) -> int | None:
        """The high watermark of the last fetch, or None before one."""
        return self.machine.fetcher.highwater(self.machine.check_partition(partition))

    def last_stable_offset(self, partition: tuple[str, int]) -> int | None:
        """The last stable offset of the last fetch, or None before one."""
        return self.machine.fetcher.last_stable_offset(self.machine.check_partition(partition))

    def last_poll_timestamp(self, partition: tuple[str, int]) -> int | None:
        """When the last fetch response for ``partition`` arrived, like aiokafka (ms since the
        epoch; None before one): set together with :meth:`highwater`."""
        at = self.machine.fetcher.last_fetch_time(self.machine.check_partition(partition))
        if at is None:
            return None
        return int((time.time() - (self._running().now() - at)) * 1000)

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop fetching and returning records of these partitions."""
        self.machine.pause(partitions)

    def resume(self, *partitions: tuple[str, int]) -> None:
        """Undo :meth:`pause`."""
        driver = self._running()
        self.machine.resume(partitions, now=driver.now())
        driver.wake()

    def paused(self) -> frozenset[TopicPartition]:
        """The paused partitions."""
        return frozenset(TopicPartition(*tp) for tp in self.machine.paused())

    # -------------------------------------------------------- offset queries

    async def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        found = await self._list({(tp[0], tp[1]): EARLIEST for tp in partitions})
        return {tp: o.offset for tp, o in found.items()}

    async def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """The log end offset of each partition (the LSO with read_committed)."""
        found = await self._list({(tp[0], tp[1]): LATEST for tp in partitions})
        return {tp: o.offset for tp, o in found.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset at or after each timestamp (ms); None where there is none.

        Raises:
            KafkaConfigurationError: a negative timestamp.
            KafkaTimeoutError: no answer within ``request_timeout_ms``.
        """
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise KafkaConfigurationError(f"timestamp for {tp} must be ms >= 0, got {ts!r}")
        found = await self._list({(tp[0], tp[1]): ts for tp, ts in timestamps.items()})
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, o in found.items():
            epoch = None if o.leader_epoch < 0 else o.leader_epoch
            out[tp] = None if o.offset < 0 else OffsetAndTimestamp(o.offset, o.timestamp, epoch)
        return out

    async def committed(self, partition: tuple[str, int]) -> int | None:
        """The group's committed offset for ``partition``, or None.

        Raises:
            IllegalStateError: no group_id.
        """
        found = await self.committed_offsets([partition])
        meta = found.get(TopicPartition(*partition))
        return None if meta is None else meta.offset

    async def committed_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        driver = self._running()
        qid = self.machine.fetch_committed(partitions, now=driver.now())
        answer = await self._answer(qid)
        assert isinstance(answer, CommittedOffsets)
        if answer.error is not None:
            raise answer.error
        return {
            TopicPartition(*tp): None if v is None else OffsetAndMetadata(v[0], v[1] or "")
            for tp, v in answer.offsets.items()
        }

    async def commit(
        self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit offsets for the group: by default every assigned partition's position.

        Raises:
            IllegalStateError: no group_id.
            TypeError: ``offsets`` is not a mapping.
            KafkaConfigurationError: a malformed partition or offset (a ValueError).
            KafkaError: the commit failed (the broker's error).
        """
        driver = self._running()
        qid = self.machine.commit(offsets, now=driver.now())
        if qid is None:
            return
        answer = await self._answer(qid)
        assert isinstance(answer, OffsetsCommitted)
        if answer.error is not None:
            raise answer.error

    # ------------------------------------------------------------- metadata

    async def wait_for_cluster(self, timeout: float) -> None:
        """Wait until a bootstrap server answered a Metadata request (aiokafka's
        ``start()`` does this; :func:`open_consumer` does not).

        Args:
            timeout: seconds.

        Raises:
            NoBrokersAvailable: no bootstrap server answered in time (a
                KafkaConnectionError).
            AuthenticationFailedError: the bootstrap servers refused the SASL credentials.
        """
        await wait_for_cluster(self._running(), self.machine.client, lambda: self._changed, timeout)

    async def wait_for_assignment(self, timeout: float) -> bool:
        """Wait until the subscription has its assignment
        (:attr:`~kafkastate.core.consumer.consumer.ConsumerMachine.assignment_settled`):
        the group's first assignment handed out, or without a group every subscribed
        topic's partitions known. aiokafka's ``start()`` does this.

        Args:
            timeout: seconds.

        Returns:
            Whether it settled in time (False: the topics may not exist yet).

        Raises:
            KafkaError: the group member failed (JoinGroup refused...).
            RebalanceListenerError: the listener raised.
        """
        driver = self._running()
        driver.wake()
        deadline = driver.now() + timeout
        machine = self.machine
        while not machine.assignment_settled:
            machine.raise_pending_error()  # the listener raised
            if machine.group_error is not None:
                raise machine.group_error  # JoinGroup refused (InvalidSessionTimeout...)
            changed = self._changed
            if driver.now() >= deadline:
                return False
            with anyio.move_on_after(deadline - driver.now()):
                await changed.wait()
        return True

    async def topics(self) -> frozenset[str]:
        """Every topic in the cluster (asks the cluster once)."""
        seen = self.machine.want_metadata(None, now=self._running().now())
        try:
            await self._wait_metadata(seen, lambda: True)
            return frozenset(self.machine.client.cluster.topics)
        finally:
            self.machine.metadata_done()

    async def partitions_for_topic(self, topic: str) -> frozenset[int] | None:
        """The partitions of ``topic``, or None if it does not exist."""
        client = self.machine.client
        seen = self.machine.want_metadata([topic], now=self._running().now())
        await self._wait_metadata(seen, lambda: topic in client.cluster.topics)
        found = client.cluster.partitions_for(topic)
        return None if found is None else frozenset(found)

    # ------------------------------------------------------------- plumbing

    async def _wait_metadata(self, seen: Any, ready: Callable[[], bool]) -> None:
        driver = self._running()
        driver.wake()
        deadline = driver.now() + self._timeout
        while self.machine.client.cluster is seen or not ready():
            changed = self._changed
            if driver.now() >= deadline:
                raise KafkaTimeoutError(f"no metadata within {self._timeout:g} s")
            with anyio.move_on_after(deadline - driver.now()):
                await changed.wait()

    async def _list(self, timestamps: dict[tuple[str, int], int]) -> dict[TopicPartition, Any]:
        driver = self._running()
        qid = self.machine.list_offsets(timestamps, now=driver.now())
        answer = await self._answer(qid)
        assert isinstance(answer, OffsetsListed)
        if answer.error is not None:
            raise answer.error
        return {TopicPartition(*tp): o for tp, o in answer.offsets.items()}

    async def _answer(self, qid: int) -> Any:
        driver = self._running()
        driver.wake()
        deadline = driver.now() + self._timeout
        while qid not in self._answers:
            changed = self._changed
            if driver.now() >= deadline:
                raise KafkaTimeoutError(
                    f"no answer within {self._timeout:g} s (request_timeout_ms)"
                )
            with anyio.move_on_after(deadline - driver.now()):
                await changed.wait()
        return self._answers.pop(qid)

    def _running(self) -> AsyncDriver:
        """The driver, or the typed refusal of a consumer whose block has ended.

        Raises:
            ConsumerStoppedError: the consumer is closed, or not running.
        """
        driver = self._driver
        if driver is None:
            self.machine.ensure_open(advice=_OUTSIDE)  # closed: the core's refusal
            # the machine is open but nothing runs it (a driver that crashed)
            raise ConsumerStoppedError(f"the consumer is not running{_OUTSIDE}")
        return driver

    def _attach(self, driver: AsyncDriver | None) -> None:
        self._driver = driver
        if driver is not None:
            self._cancel_point = driver.cancel_point

    def _handle_event(self, event: Any) -> None:
        match event:
            case RecordsFetched():
                self._wake_readers()
            case (
                OffsetsListed(query_id=qid)
                | CommittedOffsets(query_id=qid)
                | OffsetsCommitted(query_id=qid)
            ):
                self._answers[qid] = event
            case ListenerCallRequested():
                self._calls.append(event)
                self._call_wake.set()
                return
            case AutoCommitted(error=error) if error is not None:
                log.warning("auto-commit of %s failed: %s", sorted(event.offsets), error)
                return
            case GroupFailed(error=error):
                log.error("the group member failed: %s", error)
                self._wake_readers()  # getmany raises it
            case GroupLeft():
                self._left.set()
                return
            case MetadataUpdated() | PositionsResolved() | AssignmentSettled():
                pass
            case _:
                return
        self._changed.set()
        self._changed = anyio.Event()

    def _wake_readers(self) -> None:
        self._data.set()
        self._data = anyio.Event()

    # ------------------------------------------------------------ the group

    async def _run_listener(self) -> None:
        """The listener task: runs the calls the machine asks for, one at a time, each to
        its end (a coroutine callback is awaited), and reports back."""
        while True:
            while not self._calls:
                self._call_wake = anyio.Event()
                await self._call_wake.wait()
            call = self._calls.popleft()
            error: BaseException | None = None
            try:
                result = getattr(self.machine.listener, call.method)(
                    {TopicPartition(*tp) for tp in call.partitions}
                )
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                log.exception("rebalance listener %s raised", call.method)
                error = exc
            driver = self._driver
            if driver is None:
                return
            self.machine.listener_done(call.call_id, error=error, now=driver.now())
            driver.wake()
            if error is not None:
                self._wake_readers()  # the next read raises it

    async def _close(self, timeout: float, *, commit: bool) -> None:
        """On leaving the block: the final auto-commit (``commit``), then the listener's
        revoke for what is owned and LeaveGroup (answered, or ``timeout`` passes).

        Raises:
            KafkaError: the final commit of a consumer without group membership failed.
        """
        driver = self._driver
        if driver is None:
            return
        machine = self.machine
        try:
            if commit:
                qid = machine.final_commit(now=driver.now())
                if qid is not None:
                    answer = await self._answer(qid)
                    if answer.error is not None:
                        raise answer.error
        except KafkaError as exc:
            if machine.final_commit_failed(exc) is not None:
                raise
            log.warning("the final auto-commit failed: %s", exc)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(timeout):
                if machine.leave(now=driver.now()):
                    driver.wake()
                    await self._left.wait()


def open_consumer(*topics: str, **options: Any) -> AbstractAsyncContextManager[Consumer]:
    """Run a consumer for the duration of an ``async with`` block (asyncio or trio).

    With a ``group_id``, subscribing (``topics`` here, or :meth:`Consumer.subscribe`) joins
    the consumer group: heartbeats run in the background and the group assigns the
    partitions. When the block ends normally the consumer commits (with auto-commit), runs
    the listener's revoke for what it owns, and leaves the group.

    Args:
        topics: topics to subscribe to (or call :meth:`Consumer.subscribe` /
            :meth:`Consumer.assign`).
        options: any consumer option of :data:`kafkastate.core.config.OPTIONS` (the
            kafka-python / aiokafka keyword, or the Java property name), with kafkastate's
            defaults: ``bootstrap_servers``, ``group_id``, ``key_deserializer``,
            ``value_deserializer``, ``enable_auto_commit`` (off here), ``listener`` (a
            :class:`~kafkastate.abc.ConsumerRebalanceListener` for ``topics``),
            ``group_protocol`` (``"consumer"``: KIP-848), ``auto_offset_reset``,
            ``isolation_level``, ``fetch_*``, TLS, SASL... (docs/options.md lists them all).

    Returns:
        An async context manager whose block runs the :class:`Consumer` it yields.

    Raises:
        KafkaConfigurationError: a bad option value, or options that contradict each other
            (checked at once, before anything starts).
        TypeError: an unknown option.
    """
    resolved = resolve("consumer", "kafkastate", options, owner="open_consumer")
    check_consumer(resolved)
    if resolved["listener"] is not None and not topics:
        raise KafkaConfigurationError("listener= needs topics to subscribe to")
    subscription = (topics, None, resolved["listener"]) if topics else None
    return running_consumer(resolved, subscription)


@asynccontextmanager
async def running_consumer(
    options: Mapping[str, Any],
    subscription: tuple[Sequence[str], Any, Any] | None = None,
    *,
    wait_for_cluster: bool = False,
) -> AsyncIterator[Consumer]:
    """A :class:`Consumer` of resolved options (:func:`kafkastate.core.config.resolve`),
    running for the ``async with`` block: the driver's tasks, the listener's task for a
    group member, and on the way out the final auto-commit (only when the block ended
    normally), the listener's revoke and LeaveGroup, then the connections closed.

    Args:
        options: resolved consumer options.
        subscription: ``(topics, pattern, listener)`` to subscribe with first, or None.
        wait_for_cluster: wait for a bootstrap server (``request_timeout_ms``) before
            subscribing, as aiokafka's ``start()`` does.
    """
    machine = consumer_machine(options, rng=machine_rng())
    machine_built(machine)
    request_timeout = machine.config.client.connection.request_timeout
    consumer = Consumer(
        machine,
        key_deserializer=options["key_deserializer"],
        value_deserializer=options["value_deserializer"],
        request_timeout=request_timeout,
        tracing=tracing_of(options),
    )
    driver = AsyncDriver(
        machine,
        on_event=consumer._handle_event,
        ssl_context=tls_context(options),
        token_provider=options["sasl_oauth_token_provider"],
        connect_timeout=machine.config.client.socket_connection_setup_timeout,
        # The machine's commands and reads step for themselves, and get_timer() names
        # everything time brings on (the auto-commit too): a full timer pass (which looks
        # at every assigned partition) on every wake-up, once per socket read, is wasted.
        timers_when_due=True,
        stats_cb=options["stats_cb"],
    )
    export = metrics_export_of(options, consumer.metrics)
    try:
        # No task group of our own: the body's exception must come out as it is, not in an
        # ExceptionGroup (the driver's task group, which runs the listener, takes care).
        async with driver:
            consumer._attach(driver)
            completed = cancelled = False
            try:
                if machine.member is not None:
                    driver.start_soon(consumer._run_listener, name="kafkastate rebalance")
                if wait_for_cluster:
                    await consumer.wait_for_cluster(request_timeout)
                if subscription is not None:
                    topics, pattern, listener = subscription
                    consumer.subscribe(list(topics), pattern=pattern, listener=listener)
                yield consumer
                completed = True
            except anyio.get_cancelled_exc_class():
                # The cancellation reaches the driver's tasks too: nothing goes out any
                # more, so waiting for a LeaveGroup answer would only wait out the
                # timeout. The coordinator drops the member after session_timeout_ms.
                cancelled = True
                raise
            finally:
                try:
                    await consumer._close(0.0 if cancelled else request_timeout, commit=completed)
                finally:
                    machine.close()
                    consumer._attach(None)
                    close_serializers(options)  # kafka-python's Deserializer.close()
    finally:
        consumer._data.set()
        consumer._changed.set()
        if export is not None:
            export.close()
