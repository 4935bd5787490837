"""The blocking consumer behind :class:`kafkastate.sync.KafkaConsumer`.

Like kafka-python's, it does its IO in the caller's thread: :meth:`KafkaConsumer.poll` (and
every call that needs an answer from the cluster) runs a
:class:`~kafkastate.adapters.blocking.SocketLoop` around the
:class:`~kafkastate.core.consumer.fetcher.FetcherMachine` until it has what it needs or its
timeout passes.

A group member must also keep talking to its coordinator while the application works between
polls (heartbeats, the rebalance protocol): once it subscribes with a ``group_id``, a
background thread turns the same loop whenever no call is running (one lock guards the
machine; the thread wakes for the machine's deadlines and at least every 100 ms to read what
arrived). Everything that runs application code -- rebalance listeners, commit callbacks --
is left for the application's thread: listeners run inside :meth:`KafkaConsumer.poll`, as in
kafka-python and Java, so a rebalance completes only when the application polls (within
``max_poll_interval_ms``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from kafkastate.adapters._common import (
    check_ms,
    no_brokers_error,
    report_statistics,
    resolve,
    tls_context,
)
from kafkastate.adapters._records import one_consumer_record, to_consumer_records
from kafkastate.adapters.blocking import SocketLoop
from kafkastate.core import report
from kafkastate.core.client import CloseRequested
from kafkastate.core.config import (
    close_serializers,
    consumer_machine,
    deserializer_of,
    options_dict,
)
from kafkastate.core.consumer.consumer import (
    AutoCommitted,
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
    PositionState,
)
from kafkastate.core.report import Report, StatisticsReported
from kafkastate.errors import (
    ConsumerStoppedError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceListenerError,
)
from kafkastate.otel_metrics import metrics_export_of
from kafkastate.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from kafkastate.tracing import tracing_of

__all__ = ["KafkaConsumer"]

log = logging.getLogger("kafkastate.sync")

CommitCallback = Callable[[dict[TopicPartition, Any], Any], Any]
"""``callback(offsets, error)``: a commit's outcome (``error`` None on success)."""

# How often the background thread of a group member reads what arrived, at the longest.
_BACKGROUND_TICK: Final = 0.1

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(
    method: Callable[Concatenate[KafkaConsumer, _P], _R],
) -> Callable[Concatenate[KafkaConsumer, _P], _R]:
    """Run the method holding the consumer's lock (the machine is not thread-safe, and a
    group member's background thread turns the loop between calls)."""

    @functools.wraps(method)
    def locked(consumer: KafkaConsumer, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with consumer._lock:
            return method(consumer, *args, **kwargs)

    return locked


class KafkaConsumer:
    """kafka-python's ``KafkaConsumer`` on kafkastate's fetcher: give partitions with
    :meth:`assign`, or subscribe to topics (or a pattern). With a ``group_id`` a
    subscription joins the consumer group (classic protocol, or KIP-848 with
    ``group_protocol="consumer"``); without one it reads every partition of the topics.

    As kafka-python's, the constructor waits for a bootstrap server to answer unless
    ``api_version`` is given.

    Args:
        topics: topics to read every partition of (or call :meth:`assign`).
        options: kafka-python's keyword options, with kafka-python's defaults
            (``bootstrap_servers``, ``group_id``, ``key_deserializer``,
            ``value_deserializer``, ``auto_offset_reset``, ``enable_auto_commit`` (on: every
            ``auto_commit_interval_ms`` on the consumer's timer -- inside :meth:`poll`, and
            for a group member between polls too -- before partitions are revoked, and on
            :meth:`close`), ``default_offset_commit_callback``, ``max_poll_records``,
            ``fetch_*``, ``consumer_timeout_ms`` (iteration stops after this long without a
            record), ``partition_assignment_strategy`` (range, then round robin),
            ``bootstrap_timeout_ms`` (the constructor's wait; kafka-python 2's
            ``api_version_auto_timeout_ms`` wins), ``api_version`` (when given, the
            constructor does not wait), TLS (``ssl_context`` or ``ssl_cafile``,
            ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``),
            SASL...); also ``group_protocol="consumer"`` (KIP-848) and the Java property
            names. Every option, its default per library and its check: docs/options.md
            (:data:`kafkastate.core.config.OPTIONS`).

    Raises:
        KafkaConfigurationError: a bad value, or a kafka-python option kafkastate does not
            implement (Kerberos...), named (a ValueError).
        TypeError: an option kafka-python does not have either.
        NoBrokersAvailable: no bootstrap server answered within ``bootstrap_timeout_ms``
            (a KafkaConnectionError and a KafkaTimeoutError).
        AuthenticationFailedError: the bootstrap server refused the SASL credentials.
    """

    def __init__(self, *topics: str, **options: Any) -> None:
        self._loop: SocketLoop | None = None
        self._closed = True  # until the loop exists: close() then does nothing
        self._lock = threading.RLock()
        self._background: threading.Thread | None = None
        self._stopping = threading.Event()
        resolved = resolve("consumer", "kafka-python", options, owner="KafkaConsumer")
        self._resolved = resolved
        self.config: dict[str, Any] = options_dict("consumer", "kafka-python", options)
        """kafka-python's option dict: every option by name, as given or defaulted."""
        tls = tls_context(resolved)
        self._machine = consumer_machine(resolved, rng=random.SystemRandom())
        self._tracing = tracing_of(resolved)
        config = self._machine.config
        key_deserializer = deserializer_of(resolved["key_deserializer"])
        value_deserializer = deserializer_of(resolved["value_deserializer"])
        request_timeout_ms = resolved["request_timeout_ms"]
        consumer_timeout_ms = resolved["consumer_timeout_ms"]
        default_offset_commit_callback = resolved["default_offset_commit_callback"]
        bootstrap_wait = resolved["bootstrap_timeout_ms"] / 1000
        api_version = resolved["api_version"]
        # Listener calls the machine asked for, run by the application's thread in poll().
        self._calls: deque[ListenerCallRequested] = deque()
        self._callbacks: list[tuple[CommitCallback, dict[TopicPartition, Any], Any]] = []
        self._left = False
        self._in_background = False
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._timeout = request_timeout_ms / 1000
        self._consumer_timeout = consumer_timeout_ms / 1000
        self._default_callback = default_offset_commit_callback
        self._answers: dict[int, Any] = {}
        self._abandoned: set[int] = set()  # queries whose caller stopped waiting
        self._loop = SocketLoop(
            self._machine,
            ssl_context=tls,
            connect_timeout=config.client.socket_connection_setup_timeout,
            token_provider=resolved["sasl_oauth_token_provider"],
        )
        self._closed = False
        # read unlocked from the metric reader's thread: poll() holds the lock while it
        # waits, and a report read mid-update is skipped (kafkastate.otel_metrics)
        self._export = metrics_export_of(
            resolved, lambda: report.consumer_metrics(self._machine, time.monotonic())
        )
        try:
            if topics:
                self.subscribe(list(topics))
            if api_version is None:
                self._wait_for_cluster(bootstrap_wait)
        except BaseException:
            self.close(autocommit=False)
            raise

    # ------------------------------------------------------------ assignment

    @_locked
    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read exactly these partitions (a manual assignment)."""
        self._open()
        self._machine.assign(partitions, now=time.monotonic())

    @_locked
    def assignment(self) -> set[TopicPartition]:
        """The partitions being read."""
        return {TopicPartition(*tp) for tp in self._machine.assignment()}

    @_locked
    def subscribe(
        self,
        topics: Sequence[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Subscribe to ``topics``, or to the topics whose name matches ``pattern`` from its
        start (``re.match``, as kafka-python). With a ``group_id`` the group assigns their
        partitions and ``listener`` (a :class:`~kafkastate.abc.ConsumerRebalanceListener`,
        plain callbacks) hears of every change, inside :meth:`poll`. Without one every
        partition of the topics is read (partitions added later included).

        Raises:
            KafkaConfigurationError: bad topics, both or neither of topics and pattern, a bad
                pattern or listener, or a listener without a ``group_id``.
        """
        self._open()
        self._machine.subscribe(topics, pattern=pattern, listener=listener, now=time.monotonic())
        if self._machine.member is not None and self._background is None:
            self._background = threading.Thread(
                target=self._run_background, name="kafkastate group member", daemon=True
            )
            self._background.start()

    @_locked
    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group metadata, for a transactional producer's
        ``send_offsets_to_transaction`` (KIP-447 fencing of zombies' offsets).

        Returns:
            The snapshot; ``ConsumerGroupMetadata(None)`` (generation -1, member id "")
            without a ``group_id``, as kafka-python.
        """
        if self._machine.fetcher.config.group_id is None:
            # kafka-python's snapshot of no group (send_offsets_to_transaction refuses it)
            return ConsumerGroupMetadata(None)  # type: ignore[arg-type]
        return self._machine.group_metadata()

    @_locked
    def bootstrap(self, timeout_ms: float | None = None, refresh: bool = False) -> None:
        """Wait until a bootstrap server answered (kafka-python 3.0's ``bootstrap``): the
        cluster's brokers are known afterwards.

        Args:
            timeout_ms: how long to wait; None waits without bound.
            refresh: ask the cluster again even when it has answered before.

        Raises:
            NoBrokersAvailable: none answered within ``timeout_ms`` (a KafkaTimeoutError).
            AuthenticationFailedError: the server refused the SASL credentials.
            ConsumerStoppedError: the consumer is closed (an IllegalStateError).
        """
        self._open()
        if refresh or not self._machine.client.cluster.brokers:
            self._wait_for_cluster(math.inf if timeout_ms is None else timeout_ms / 1000, refresh)

    @_locked
    def subscription(self) -> set[str]:
        """The subscribed topics."""
        return set(self._machine.subscription())

    @_locked
    def unsubscribe(self) -> None:
        """Drop the subscription and the assignment. A group member leaves the group: its
        partitions are revoked first (auto-commit, the listener) in the next
        :meth:`poll`, then LeaveGroup goes out; :meth:`subscribe` joins again.

        Raises:
            IllegalStateError: a ``group_protocol="consumer"`` (KIP-848) member (not
                supported yet).
        """
        self._open()
        self._machine.unsubscribe(now=time.monotonic())

    # -------------------------------------------------------------- reading

    @_locked
    def poll(
        self, timeout_ms: float = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Fetch records, waiting up to ``timeout_ms`` for the first ones.

        Args:
            timeout_ms: how long to wait when nothing is there yet.
            max_records: at most this many (default ``max_poll_records``).
            update_offsets: accepted without effect (kafka-python's; positions always move
                past the records returned).

        Returns:
            Records per partition; empty if none came in time.

        Raises:
            KafkaError: a partition failed (NoOffsetForPartitionError...), or the group
                member failed.
            RebalanceListenerError: the rebalance listener raised (the rebalance went on).
        """
        self._open()
        self._after_io()
        deadline = time.monotonic() + timeout_ms / 1000
        machine = self._machine
        while True:
            self._run_listener_calls()
            runs = machine.poll(max_records, now=time.monotonic())
            if runs:
                # Write the Fetch that handing out queued for the drained partitions now,
                # so that it is answered while the application works (kafka-python sends
                # its fetches before returning too). What else the machine asked for (a
                # connection) waits for the next call: the core ignores a connect report
                # that went stale meanwhile.
                if self._loop is not None:
                    self._loop.flush()
                return to_consumer_records(
                    runs, machine, self._key_deserializer, self._value_deserializer, self._tracing
                )
            if time.monotonic() >= deadline:
                return {}
            self._turn(deadline)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    @_locked
    def __next__(self) -> ConsumerRecord:
        """The next record, one at a time: the position moves past it only now.

        Raises:
            StopIteration: no record came within ``consumer_timeout_ms``, or the consumer is
                closed (as kafka-python's).
        """
        machine = self._machine
        deadline = time.monotonic() + self._consumer_timeout
        while True:
            if self._closed:
                raise StopIteration
            self._after_io()
            self._run_listener_calls()
            run = machine.take_one(now=time.monotonic())
            if run is not None:
                return one_consumer_record(
                    run, machine, self._key_deserializer, self._value_deserializer, self._tracing
                )
            now = time.monotonic()
            if now >= deadline:
                raise StopIteration
            self._turn(min(deadline, now + 3600.0))

    # ------------------------------------------------------------ positions

    @_locked
    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._open()
        self._machine.seek(partition, offset, now=time.monotonic())

    @_locked
    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Read from the log start (every assigned partition if none given)."""
        self._open()
        self._machine.seek_to(partitions, EARLIEST, now=time.monotonic())

    @_locked
    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Read only what is written from now on (every assigned partition if none given)."""
        self._open()
        self._machine.seek_to(partitions, LATEST, now=time.monotonic())

    @_locked
    def position(self, partition: tuple[str, int], timeout_ms: float | None = None) -> int:
        """The offset of the next record :meth:`poll` returns, looking it up if needed.

        Raises:
            KafkaTimeoutError: no position within ``timeout_ms`` (default
                ``request_timeout_ms``).
        """
        self._open()
        machine = self._machine
        tp = machine.check_partition(partition)
        wait = self._timeout if timeout_ms is None else timeout_ms / 1000
        deadline = time.monotonic() + wait
        while True:
            position = machine.position(tp)
            if position is not None:
                return position
            if machine.fetcher.position_state(tp) is PositionState.FAILED:
                machine.fetcher.poll(0, now=time.monotonic())  # raises its error
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"no position for {tp[0]}-{tp[1]} within {wait:g} s")
            self._turn(deadline)

    @_locked
    def highwater(self, partition: tuple[str, int]) -> int | None:
        """The high watermark of the last fetch, or None before one."""
        return self._machine.fetcher.highwater(self._machine.check_partition(partition))

    @_locked
    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop fetching and returning these partitions' records."""
        self._machine.pause(partitions)

    @_locked
    def resume(self, *partitions: tuple[str, int]) -> None:
        """Undo :meth:`pause`."""
        self._machine.resume(partitions, now=time.monotonic())

    @_locked
    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {TopicPartition(*tp) for tp in self._machine.paused()}

    # -------------------------------------------------------- offset queries

    @_locked
    def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        """The log start offset of each partition.

        Raises:
            KafkaTimeoutError: no answer within ``timeout_ms`` (default
                ``request_timeout_ms``).
        """
        found = self._list({(tp[0], tp[1]): EARLIEST for tp in partitions}, timeout_ms)
        return {tp: o.offset for tp, o in found.items()}

    @_locked
    def end_offsets(
        self, partitions: Iterable[tuple[str, int]], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        """The log end offset of each partition (the LSO with read_committed).

        Raises:
            KafkaTimeoutError: no answer within ``timeout_ms`` (default
                ``request_timeout_ms``).
        """
        found = self._list({(tp[0], tp[1]): LATEST for tp in partitions}, timeout_ms)
        return {tp: o.offset for tp, o in found.items()}

    @_locked
    def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset at or after each timestamp (ms), or None where there is none.

        Raises:
            KafkaConfigurationError: a negative timestamp.
            KafkaTimeoutError: no answer within ``timeout_ms`` (default
                ``request_timeout_ms``).
        """
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise KafkaConfigurationError(f"timestamp for {tp} must be ms >= 0, got {ts!r}")
        found = self._list({(tp[0], tp[1]): ts for tp, ts in timestamps.items()}, timeout_ms)
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, o in found.items():
            epoch = None if o.leader_epoch < 0 else o.leader_epoch
            out[tp] = None if o.offset < 0 else OffsetAndTimestamp(o.offset, o.timestamp, epoch)
        return out

    @_locked
    def committed(
        self, partition: tuple[str, int], metadata: bool = False, timeout_ms: float | None = None
    ) -> Any:
        """The group's committed offset (or OffsetAndMetadata with ``metadata=True``), or
        None.

        Raises:
            IllegalStateError: no group_id.
            KafkaTimeoutError: no answer within ``timeout_ms`` (default
                ``request_timeout_ms``).
        """
        self._open()
        wait = self._wait(timeout_ms)
        qid = self._machine.fetch_committed([partition], now=time.monotonic())
        answer = self._answer(qid, wait)
        assert isinstance(answer, CommittedOffsets)
        if answer.error is not None:
            raise answer.error
        value = answer.offsets.get((partition[0], partition[1]))
        if value is None:
            return None
        return OffsetAndMetadata(value[0], value[1] or "") if metadata else value[0]

    @_locked
    def commit(
        self, offsets: Mapping[tuple[str, int], Any] | None = None, timeout_ms: float | None = None
    ) -> None:
        """Commit offsets and wait. By default, per assigned partition, the offset after the
        last record returned to the application (by :meth:`poll` or iteration).

        Raises:
            IllegalStateError: no group_id.
            TypeError: ``offsets`` is not a mapping.
            KafkaConfigurationError: a malformed partition or offset (a ValueError).
            KafkaTimeoutError: no answer within ``timeout_ms`` (default
                ``request_timeout_ms``).
            KafkaError: the commit failed.
        """
        self._open()
        wait = self._wait(timeout_ms)
        qid = self._machine.commit(offsets, now=time.monotonic())
        if qid is None:
            return
        answer = self._answer(qid, wait)
        assert isinstance(answer, OffsetsCommitted)
        if answer.error is not None:
            raise answer.error

    @_locked
    def commit_async(
        self,
        offsets: Mapping[tuple[str, int], Any] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Start a commit; ``callback(offsets, result)`` (default:
        ``default_offset_commit_callback``) runs from a later call that does IO, such as
        :meth:`poll` (``result`` is None or the error), as in kafka-python.

        Raises:
            IllegalStateError: no group_id.
            TypeError: ``offsets`` is not a mapping.
            KafkaConfigurationError: a malformed partition or offset (a ValueError).
        """
        self._open()
        qid = self._machine.commit(offsets, now=time.monotonic())
        if callback is None:
            callback = self._default_callback
        if qid is not None and callback is not None:
            self._answers[qid] = callback

    # ------------------------------------------------------------- metadata

    @_locked
    def topics(self) -> set[str]:
        """Every topic in the cluster."""
        self._open()
        seen = self._machine.want_metadata(None, now=time.monotonic())
        try:
            self._wait_metadata(seen, lambda: True)
            return set(self._machine.client.cluster.topics)
        finally:
            self._machine.metadata_done()

    @_locked
    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic``, or None if it does not exist."""
        self._open()
        client = self._machine.client
        seen = self._machine.want_metadata([topic], now=time.monotonic())
        self._wait_metadata(seen, lambda: topic in client.cluster.topics)
        found = client.cluster.partitions_for(topic)
        return None if found is None else set(found)

    # -------------------------------------------------------------- closing

    def close(self, autocommit: bool = True, timeout_ms: float | None = None) -> None:
        """Commit what the application was given (with auto-commit on and ``autocommit``),
        leave the group (the listener's revoke for what is owned, then LeaveGroup), and
        close the connections. Twice is harmless.

        Raises:
            KafkaTimeoutError: the commit had no answer within ``timeout_ms`` (default
                ``request_timeout_ms``); the consumer is closed all the same.
            KafkaError: the commit failed (a consumer without group membership); the
                consumer is closed all the same. A group member that can no longer commit
                logs it: whoever owns its partitions next reads from the last commit.
        """
        with self._lock:
            if self._closed:
                return
            try:
                if autocommit:
                    wait = self._wait(timeout_ms)
                    qid = self._machine.final_commit(now=time.monotonic())
                    try:
                        if qid is not None:
                            answer = self._answer(qid, wait)
                            if answer.error is not None:
                                raise answer.error
                    except KafkaError as exc:
                        if self._machine.final_commit_failed(exc) is not None:
                            raise
                        log.warning("the final auto-commit failed: %s", exc)
            finally:
                try:
                    self._leave_group(self._wait(timeout_ms)[0])
                finally:
                    self._shut()
        self._stopping.set()
        thread = self._background
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _shut(self) -> None:
        self._closed = True
        close_serializers(self._resolved)
        if self._export is not None:
            self._export.close()
        self._calls.clear()
        machine = self._machine
        machine.close()
        loop = self._loop
        # Only closes now: a connection the machine asked for before (and this thread
        # never got round to opening) must not be opened for a closed machine. Commits
        # still out were answered by close() (ConsumerStoppedError): their callbacks run.
        while (event := machine.next_event()) is not None:
            if isinstance(event, CloseRequested) and loop is not None:
                loop.forget(event.node_id)
            elif isinstance(event, OffsetsCommitted) and callable(
                callback := self._answers.pop(event.query_id, None)
            ):
                offsets = {TopicPartition(*tp): o for tp, o in event.offsets.items()}
                self._callbacks.append((callback, offsets, event.error))
        if loop is not None:
            loop.close()
        self._after_io()  # (those answered while closing too)

    def _leave_group(self, timeout: float) -> None:
        if self._loop is None or not self._machine.leave(now=time.monotonic()):
            return
        deadline = time.monotonic() + timeout
        while True:
            self._handle_events()
            self._run_listener_calls(report=True)
            if self._left or time.monotonic() >= deadline:
                return
            self._turn(deadline)

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @_locked
    def metrics(self, raw: bool = False) -> Report:
        """Counters, rates, latencies and lag, grouped as kafka-python groups them
        (``{group: {name: value}}``, the Java client's names: docs/observability.md),
        whatever ``metrics_enabled`` says.

        Args:
            raw: accepted for compatibility; ignored.
        """
        return report.consumer_metrics(self._machine, time.monotonic())

    @_locked
    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot for liveness probes (:func:`kafkastate.core.report.health`):
        connected brokers, coordinator, assignment, last fetch, error state."""
        return report.health(self._machine, time.monotonic())

    # ------------------------------------------------------------- plumbing

    def _open(self) -> None:
        if self._closed:
            # the core's type for a closed consumer: an IllegalStateError, as kafka-python's
            raise ConsumerStoppedError("KafkaConsumer is closed")

    def _turn(self, deadline: float | None) -> None:
        """One turn of the IO loop: handle events, write, wait for data or ``deadline``."""
        loop = self._loop
        assert loop is not None
        self._handle_events()
        loop.flush()
        loop.poll(deadline)
        self._handle_events()
        loop.flush()
        if not self._in_background:
            self._after_io()

    def _after_io(self) -> None:
        """In the application's thread: run the commit callbacks whose answers came."""
        while self._callbacks:
            callback, offsets, error = self._callbacks.pop(0)
            try:
                callback(offsets, error)
            except Exception:  # a user callback: logged, never fatal
                log.exception("a commit callback raised")

    def _run_background(self) -> None:
        """A group member's thread: between calls, turn the loop for the machine's deadlines
        (heartbeats, auto-commit...) and what arrived; never runs application code."""
        while not self._stopping.is_set():
            with self._lock:
                if self._closed:
                    return
                timer = self._machine.get_timer()
            wait = _BACKGROUND_TICK
            if timer is not None:
                wait = min(wait, max(0.0, timer - time.monotonic()))
            if self._stopping.wait(wait):
                return
            with self._lock:
                if self._closed:
                    return
                self._in_background = True
                try:
                    self._turn(time.monotonic())
                except Exception:
                    log.exception("the group member's background turn failed")
                finally:
                    self._in_background = False

    def _run_listener_calls(self, *, report: bool = False) -> None:
        """In the application's thread: the listener calls the machine asked for, in order.
        A callback that raised is raised by the next read (``report``: logged instead)."""
        while self._calls:
            call = self._calls.popleft()
            error: BaseException | None = None
            try:
                result = getattr(self._machine.listener, call.method)(
                    {TopicPartition(*tp) for tp in call.partitions}
                )
                if inspect.isawaitable(result):
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
                    raise TypeError("the blocking consumer cannot await a coroutine listener")
            except Exception as exc:
                log.exception("rebalance listener %s raised", call.method)
                error = exc
            self._machine.listener_done(call.call_id, error=error, now=time.monotonic())
            self._handle_events()
        if report:
            try:
                self._machine.raise_pending_error()
            except RebalanceListenerError as exc:
                log.error("%s", exc)

    def _handle_events(self) -> None:
        loop = self._loop
        assert loop is not None
        machine = self._machine
        while (event := machine.next_event()) is not None:
            if loop.serve(event):
                continue
            match event:
                case ListenerCallRequested():
                    self._calls.append(event)
                case AutoCommitted(offsets=committed, error=error):
                    if error is not None:
                        log.warning("auto-commit of %s failed: %s", sorted(committed), error)
                    if self._default_callback is not None and not event.before_revoke:
                        done = {TopicPartition(*tp): o for tp, o in committed.items()}
                        self._callbacks.append((self._default_callback, done, error))
                case OffsetsCommitted(query_id=qid) if callable(self._answers.get(qid)):
                    callback = self._answers.pop(qid)
                    offsets = {TopicPartition(*tp): o for tp, o in event.offsets.items()}
                    self._callbacks.append((callback, offsets, event.error))
                case (
                    OffsetsListed(query_id=qid)
                    | CommittedOffsets(query_id=qid)
                    | OffsetsCommitted(query_id=qid)
                ):
                    if qid in self._abandoned:  # its caller timed out
                        self._abandoned.discard(qid)
                    else:
                        self._answers[qid] = event
                case GroupFailed(error=error):
                    log.error("the group member failed: %s", error)  # poll() raises it
                case GroupLeft():
                    self._left = True
                case StatisticsReported(stats=stats):
                    report_statistics(self._resolved["stats_cb"], stats)
                case _:
                    pass

    def _wait(self, timeout_ms: float | None) -> tuple[float, str]:
        """Seconds a call given ``timeout_ms`` waits for its answer, and the option's name.

        Raises:
            KafkaConfigurationError: a bad ``timeout_ms`` (checked before any request).
        """
        if timeout_ms is None:
            return self._timeout, "request_timeout_ms"
        check_ms(timeout_ms=timeout_ms)
        return timeout_ms / 1000, "timeout_ms"

    def _answer(self, qid: int, limit: tuple[float, str] | None = None) -> Any:
        """Turn the loop until query ``qid`` is answered.

        Raises:
            KafkaTimeoutError: not within ``limit`` (from :meth:`_wait`; default
                ``request_timeout_ms``).
        """
        wait, what = self._wait(None) if limit is None else limit
        deadline = time.monotonic() + wait
        while qid not in self._answers or callable(self._answers[qid]):
            if time.monotonic() >= deadline:
                self._abandoned.add(qid)  # a late answer is dropped, not kept
                raise KafkaTimeoutError(f"no answer within {wait:g} s ({what})")
            self._turn(deadline)
        return self._answers.pop(qid)

    def _wait_for_cluster(self, timeout: float, refresh: bool = False) -> None:
        """Wait until a bootstrap server answered a Metadata request (a new one with
        ``refresh``).

        Raises:
            NoBrokersAvailable: none did within ``timeout`` seconds.
            AuthenticationFailedError: because it refused the SASL credentials.
        """
        client = self._machine.client
        seen = client.cluster if refresh else None
        client.request_metadata_update()
        deadline = None if math.isinf(timeout) else time.monotonic() + timeout
        while not client.cluster.brokers or client.cluster is seen:
            refused = client.authentication_refused
            if refused is not None:
                raise refused  # the credentials were refused: waiting cannot help
            if deadline is not None and time.monotonic() >= deadline:
                raise no_brokers_error(client, timeout)
            self._turn(deadline)

    def _list(
        self, timestamps: dict[tuple[str, int], int], timeout_ms: float | None
    ) -> dict[TopicPartition, Any]:
        self._open()
        wait = self._wait(timeout_ms)
        qid = self._machine.list_offsets(timestamps, now=time.monotonic())
        answer = self._answer(qid, wait)
        assert isinstance(answer, OffsetsListed)
        if answer.error is not None:
            raise answer.error
        return {TopicPartition(*tp): o for tp, o in answer.offsets.items()}

    def _wait_metadata(self, seen: Any, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self._timeout
        while self._machine.client.cluster is seen or not ready():
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"no metadata within {self._timeout:g} s")
            self._turn(deadline)
