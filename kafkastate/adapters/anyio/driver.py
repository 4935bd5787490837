"""One async driver, on anyio, for any core machine with the Client's IO surface.

It runs on asyncio and on trio alike. Like :class:`~kafkastate.adapters.blocking.SocketLoop`
it holds no protocol logic (STYLE.md §12): it opens the connections the machine asks for,
writes what the machine has, waits for received bytes, a user command or the machine's
deadline, and feeds everything back. Events other than connect/close requests go to the
``on_event`` callback of the API object that owns the driver.

Tasks, all in one task group owned by the ``async with`` block (nothing starts in
``__init__``):

* the pump: ``handle_timer`` → drain events → write ``data_to_send()`` → sleep until the
  machine's ``get_timer()`` deadline or a :meth:`AsyncDriver.wake`;
* one task per node: connect (``anyio.connect_tcp``, TLS if asked), report
  ``connection_made``/``connection_failed``, then read and feed ``receive_data`` until EOF, an
  error, or the machine's CloseRequested cancels it;
* one writer per connected node: the pump only appends the machine's bytes to the node's
  outbox, so a broker that reads slowly (a full socket buffer) holds up its own writer,
  never the pump or the other nodes;
* one short task per TokenRequested: it awaits the user's token provider and reports the
  token (or the provider's exception) to the machine, which decides what follows.

``now`` is always ``anyio.current_time()``: the event loop's clock (``loop.time()`` on
asyncio, ``trio.current_time()`` on trio), so trio's ``MockClock`` works (STYLE.md §5).
"""

from __future__ import annotations

import asyncio
import math
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Protocol

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

from kafkastate.adapters._common import (
    READ_MIN,
    fetch_token,
    next_read_size,
    no_brokers_error,
    report_statistics,
    tls_failure,
    tls_hangup,
)
from kafkastate.adapters.blocking import IOMachine
from kafkastate.core.client import Client, CloseRequested, ConnectRequested, TokenRequested
from kafkastate.core.metadata import NodeId
from kafkastate.core.report import StatisticsReported

__all__ = ["REFUSAL_CHECK", "AsyncDriver", "EventMachine", "wait_for_cluster"]

REFUSAL_CHECK = 0.1


class EventMachine(IOMachine, Protocol):
    """An :class:`~kafkastate.adapters.blocking.IOMachine` that also has ``next_event``."""

    def next_event(self) -> Any: ...


class _Outbox:
    """Bytes waiting to be written to one node, and the writer's wake-up."""

    __slots__ = ("data", "ready")

    def __init__(self, new_event: Callable[[], anyio.Event]) -> None:
        self.data = bytearray()
        self.ready = new_event()


class AsyncDriver:
    """The sockets, timers and wake-ups of one core machine, as anyio tasks.

    Use as an async context manager; the background tasks live exactly as long as the
    ``async with`` block. Call :meth:`wake` after every command given to the machine so its
    output is written without waiting for the next deadline.

    Args:
        machine: a ProducerMachine, a Client... anything with the Client's IO surface.
        on_event: called, in the pump task, with every event that is not a
            ConnectRequested or CloseRequested. It must not block.
        ssl_context: TLS for every connection, or None for plaintext.
        connect_timeout: seconds for TCP connect plus TLS handshake
            (``socket.connection.setup.timeout.ms``).
        timers_when_due: run ``handle_timer`` only when ``get_timer()`` says it is due,
            not on every wake-up. For machines whose commands do their own work (the
            producer: a send that opens or fills a batch has already stepped), where a
            full timer pass per wake-up would be wasted.
        token_provider: the ``sasl_oauth_token_provider`` asked on TokenRequested.
        stats_cb: called with the machine's statistics reports (``stats_cb`` option).
    """

    def __init__(
        self,
        machine: EventMachine,
        *,
        on_event: Callable[[Any], None],
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = 10.0,
        timers_when_due: bool = False,
        token_provider: Any = None,
        stats_cb: Callable[[Any], Any] | None = None,
    ) -> None:
        self._machine = machine
        self._token_provider = token_provider
        self._stats_cb = stats_cb
        self._timers_when_due = timers_when_due
        self._on_event = on_event
        self._ssl = ssl_context
        self._connect_timeout = connect_timeout
        self._streams: dict[NodeId, anyio.abc.ByteStream] = {}
        self._outboxes: dict[NodeId, _Outbox] = {}
        self._scopes: dict[NodeId, anyio.CancelScope] = {}
        self._wakeup: anyio.Event | None = None
        # anyio.Event() asks sniffio for the backend on every call; the pump and the
        # writers make one per pass (per batch), so the backend's class is looked up once
        self._new_event: Callable[[], anyio.Event] = anyio.Event
        self._tg: anyio.abc.TaskGroup | None = None
        self.now: Callable[[], float] = anyio.current_time
        """The clock the machine is driven with: ``anyio.current_time`` (while running,
        the event loop's own clock function, without anyio's per-call lookup)."""
        self.cancel_point: Callable[[], Awaitable[None]] | None = None
        """While running on trio, ``trio.lowlevel.checkpoint_if_cancelled``: what a call
        that returns without waiting awaits first, so that it is a cancel point as every
        trio call is (a schedule point only when cancelled). None on asyncio, where a call
        that does not suspend is not cancelled either (aiokafka's ``getone`` on buffered
        records)."""

    @property
    def connected_nodes(self) -> frozenset[NodeId]:
        """The nodes with an open stream now."""
        return frozenset(self._streams)

    def start_soon(
        self, func: Callable[..., Coroutine[Any, Any, None]], *args: Any, name: str
    ) -> None:
        """Run ``func(*args)`` in the driver's task group: cancelled when the driver exits;
        an exception it raises fails the driver's ``async with``.

        Raises:
            RuntimeError: the driver is not running.
        """
        if self._tg is None:
            raise RuntimeError("the driver is not running")
        self._tg.start_soon(func, *args, name=name)

    def wake(self) -> None:
        """Make the pump run now (after a command, or bytes that arrived)."""
        if self._wakeup is not None:
            self._wakeup.set()

    async def __aenter__(self) -> AsyncDriver:
        if self._tg is not None:
            raise RuntimeError("this driver is already running")
        self._wakeup = anyio.Event()
        self._new_event = type(self._wakeup)  # the running backend's Event class
        self.now = _event_loop_clock()
        self.cancel_point = _cancel_point()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._pump, name="kafkastate pump")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg = self._tg
        assert tg is not None  # __aexit__ only follows a successful __aenter__
        # Whatever the owner did to the machine last (close, abort) may have queued
        # CloseRequested events: honour them, then stop every task.
        self._process_events()
        tg.cancel_scope.cancel()
        try:
            # The owner's exception (or cancellation) is not the tasks' business: it
            # propagates as is, not wrapped in an ExceptionGroup. Only a failed task raises
            # from here.
            await tg.__aexit__(None, None, None)
            return None
        finally:
            self._tg = None
            self._wakeup = None

    # ------------------------------------------------------------------ the pump

    async def _pump(self) -> None:
        machine = self._machine
        lazy = self._timers_when_due
        new_event = self._new_event
        while True:
            # A fresh event before looking at the machine: a wake() from here on is not lost.
            self._wakeup = wakeup = new_event()
            now = self.now()
            deadline = machine.get_timer() if lazy else None
            if not lazy or (deadline is not None and deadline <= now):
                machine.handle_timer(now=now)
                deadline = None
            handled = self._process_events()
            self._write()
            if deadline is None or handled:
                # handling events may have set a timer (a consumer's commit before a
                # revocation, a rejoin's backoff...): the deadline read before is stale
                deadline = machine.get_timer()
            with anyio.CancelScope(deadline=math.inf if deadline is None else deadline):
                await wakeup.wait()

    def _process_events(self) -> int:
        """Drain the machine's events; how many there were."""
        machine = self._machine
        handled = 0
        while (event := machine.next_event()) is not None:
            handled += 1
            match event:
                case ConnectRequested(node_id=node, host=host, port=port, attempt=attempt):
                    self._start_node(node, host, port, attempt)
                case CloseRequested(node_id=node):
                    self._stop_node(node)
                case TokenRequested():
                    assert self._tg is not None
                    self._tg.start_soon(self._fetch_token, name="kafkastate token provider")
                case StatisticsReported(stats=stats):
                    report_statistics(self._stats_cb, stats)
                case _:
                    self._on_event(event)
        return handled

    async def _fetch_token(self) -> None:
        machine = self._machine
        try:
            token, extensions = await fetch_token(self._token_provider)
        except Exception as exc:
            machine.token_failed(exc, now=self.now())
        else:
            machine.token_received(token, now=self.now(), extensions=extensions)
        self.wake()

    def _write(self) -> None:
        outboxes = self._outboxes
        for node, data in self._machine.data_to_send():
            box = outboxes.get(node)
            if box is None:
                continue  # closed meanwhile; the machine has been or will be told
            box.data += data
            box.ready.set()

    # ------------------------------------------------------------------ per node

    def _start_node(self, node: NodeId, host: str, port: int, attempt: int) -> None:
        assert self._tg is not None
        self._stop_node(node)
        scope = anyio.CancelScope()
        self._scopes[node] = scope
        self._tg.start_soon(
            self._run_node, node, host, port, attempt, scope, name=f"kafkastate node {node}"
        )

    def _stop_node(self, node: NodeId) -> None:
        self._streams.pop(node, None)
        self._outboxes.pop(node, None)
        scope = self._scopes.pop(node, None)
        if scope is not None:
            scope.cancel()

    async def _run_node(
        self, node: NodeId, host: str, port: int, attempt: int, scope: anyio.CancelScope
    ) -> None:
        machine = self._machine
        stream: anyio.abc.ByteStream | None = None
        failure: BaseException | None = None
        with scope:
            try:
                try:
                    with anyio.fail_after(self._connect_timeout):
                        if self._ssl is None:
                            stream = await anyio.connect_tcp(host, port)
                        else:
                            stream = await anyio.connect_tcp(
                                host,
                                port,
                                ssl_context=self._ssl,
                                # Brokers may close without a TLS close_notify.
                                tls_standard_compatible=False,
                            )
                except (OSError, TimeoutError, anyio.BrokenResourceError, ssl.SSLError) as exc:
                    failure = tls_failure(exc, host, port, handshake=self._ssl is not None)
                except anyio.EndOfStream:  # (tls_standard_compatible=False: EOF in handshake)
                    failure = tls_hangup(host, port)
                if stream is None:
                    if self._scopes.get(node) is scope and failure is not None:
                        del self._scopes[node]
                        machine.connection_failed(
                            node, now=self.now(), error=failure, attempt=attempt
                        )
                        self.wake()
                    return
                if self._scopes.get(node) is not scope:
                    return  # closed or superseded as the connect finished: not this node's
                self._streams[node] = stream
                box = self._outboxes[node] = _Outbox(self._new_event)
                # (a connect that finished as the machine gave the attempt up: the
                # machine ignores it, and the CloseRequested it queued cancels this task)
                machine.connection_made(node, now=self.now(), attempt=attempt)
                self.wake()
                peer = (host, port)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._write_node, node, stream, box, peer)
                    await self._read(node, stream, scope, peer)
                    tg.cancel_scope.cancel()
            finally:
                if stream is not None:
                    if self._streams.get(node) is stream:
                        del self._streams[node]
                        self._outboxes.pop(node, None)
                    await anyio.aclose_forcefully(stream)

    async def _write_node(
        self, node: NodeId, stream: anyio.abc.ByteStream, box: _Outbox, peer: tuple[str, int]
    ) -> None:
        while True:
            await box.ready.wait()
            box.ready = self._new_event()  # before taking the data: a later append sets it
            while box.data:
                data = bytes(box.data)
                box.data.clear()
                try:
                    await stream.send(data)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                    if self._streams.get(node) is stream:
                        self._stop_node(node)
                        error = tls_failure(exc, *peer, handshake=False)
                        self._machine.connection_lost(node, now=self.now(), error=error)
                        self.wake()
                    return

    async def _read(
        self,
        node: NodeId,
        stream: anyio.abc.ByteStream,
        scope: anyio.CancelScope,
        peer: tuple[str, int],
    ) -> None:
        machine = self._machine
        size = READ_MIN
        transport = _asyncio_transport(stream)
        while True:
            error: BaseException | None = None
            if transport is not None:
                transport.max_size = size  # what its next recv() asks for
            try:
                data = await stream.receive(size)
            except anyio.EndOfStream:
                data = b""
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                # (TLS 1.3: a broker refusing our certificate says so on the first read)
                data, error = b"", tls_failure(exc, *peer, handshake=False)
            if self._scopes.get(node) is not scope:
                return  # the machine asked to close this node; it knows
            if error is not None:
                self._stop_node(node)
                machine.connection_lost(node, now=self.now(), error=error)
            else:
                if not data:
                    self._stop_node(node)
                machine.receive_data(node, data, now=self.now())
            self.wake()
            if not data:
                return
            size = next_read_size(size, len(data))


async def wait_for_cluster(
    driver: AsyncDriver, client: Client, changed: Callable[[], anyio.Event], timeout: float
) -> None:
    """Wait until a bootstrap server answered a Metadata request (what aiokafka's
    ``start()`` and kafka-python's constructors wait for).

    Args:
        driver: the running driver of ``client``'s machine.
        client: the machine's client.
        changed: the owner's current "something happened" event (set on MetadataUpdated,
            then replaced).
        timeout: seconds.

    Raises:
        NoBrokersAvailable: no bootstrap server answered in time (a KafkaConnectionError).
        AuthenticationFailedError: the bootstrap servers refused the SASL credentials or
            the TLS handshake (:class:`~kafkastate.errors.SslAuthenticationError`,
            :class:`~kafkastate.errors.SecurityProtocolMismatchError`), raised once every
            bootstrap server refused, without waiting out ``timeout``.
    """
    if client.cluster.brokers:
        return
    client.request_metadata_update()
    driver.wake()
    with anyio.move_on_after(timeout):
        while not client.cluster.brokers:
            refused = client.authentication_refused
            if refused is not None:
                raise refused  # the credentials were refused: waiting cannot help
            # a refusal sets no event: look again every REFUSAL_CHECK seconds
            with anyio.move_on_after(REFUSAL_CHECK):
                await changed().wait()
        return
    raise no_brokers_error(client, timeout)


def _cancel_point() -> Callable[[], Awaitable[None]] | None:
    """trio's ``checkpoint_if_cancelled`` when running on trio (see
    :attr:`AsyncDriver.cancel_point`), else None."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not on asyncio
        trio = sys.modules.get("trio")
        if trio is not None:
            point: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint_if_cancelled
            return point
    return None


def _asyncio_transport(stream: anyio.abc.ByteStream) -> Any:
    """The asyncio transport under ``stream`` (TLS unwrapped), or None (trio, or an anyio
    that no longer keeps one).

    On asyncio the socket is read by the transport, not by ``receive``: each time it is
    readable the selector transport calls ``recv(max_size)``, 256 KiB in CPython, and
    anyio's ``receive(n)`` only splits what came. So the size :func:`next_read_size` chose
    is set as the transport's ``max_size`` before each read: 256 KiB reads of small
    responses, shrunk to what came, fragmented glibc's heap as trio's 1 MiB reads had (an
    asyncio process's RSS grew with every connect/close cycle on three brokers;
    docs/reliability.md#resource-bounds). ``max_size`` is a class attribute of CPython's
    socket transports, read through the instance on every read; where a transport has
    none, nothing is set.
    """
    inner: object = stream
    while isinstance(inner, TLSStream):
        inner = inner.transport_stream
    transport = getattr(inner, "_transport", None)  # anyio's asyncio SocketStream
    if transport is None or not isinstance(getattr(transport, "max_size", None), int):
        return None
    return transport


def _event_loop_clock() -> Callable[[], float]:
    """``anyio.current_time`` without its per-call backend lookup (it is on the hot path,
    once per record): the loop's ``time``, or ``time.monotonic`` itself where that method
    is asyncio's own (which only calls it; a frame less per call)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not on asyncio
        pass
    else:
        if type(loop).time is asyncio.BaseEventLoop.time:
            return time.monotonic
        return loop.time
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            # what trio.current_time() asks on every call: the run's clock (a MockClock
            # too), which stays the same for the whole run
            clock: Callable[[], float] = trio.lowlevel.current_clock().current_time
        except RuntimeError:  # not inside trio.run
            clock = trio.current_time
        return clock
    return anyio.current_time
