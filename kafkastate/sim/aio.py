"""Your asyncio (or trio) consumer code in the simulation: :func:`run_async`.

Theory of operation
-------------------
The group world of :class:`~kafkastate.sim.world.Sim` (brokers, the group coordinator, the
TCP-like network, the faults, the invariants) without its model application: each member is
*your* ``async def member(m: SimMember)``, which builds real clients
(:class:`kafkastate.asyncio.AIOKafkaConsumer`, ``kafkastate.anyio.open_consumer``...) and
runs its processing loop, listener and commits. Nothing of the client is copied: the
adapter's own driver runs, on an event loop whose parts are the simulator's.

* :class:`SimEventLoop` -- an ``asyncio`` selector event loop whose ``time()`` is the
  simulator's virtual clock and whose selector, instead of waiting for sockets, runs the
  simulator's events until one of them makes a task ready or the loop's next timer is due
  (virtual time jumps there). A loop with nothing ready, no timer and no event left is
  stuck: invariant ``STUCK``.
* Its ``getaddrinfo`` names the simulated brokers (``b0``, ``b1``...) and its
  ``create_connection`` opens a connection of the simulated network (:class:`_SimTransport`
  under anyio's own stream): bytes written go up the connection's pipe, bytes the broker
  answers come down it, a reset or a broker crash ends it as a real reset would
  (``ConnectionResetError``), a blocked link or a crashed broker refuses the connect.
* On trio (``backend="trio"``), :mod:`kafkastate.sim.triosim` does the same with trio's own
  hooks: a clock, a socket factory and a hostname resolver.
* The machines the adapter builds draw their randomness from the seed, and the simulator
  sees the consumer machines (:data:`kafkastate.adapters._common.MACHINE_HOOKS`).

So a run is a function of the seed and the code, as the model application's runs are: the
same seed gives the same trace, and the same trace hash.

A member's process can stall or die, as the model application's can:

* ``pause`` (a GC-like stall): none of the member's code runs for the drawn time -- its
  consumer's driver (heartbeats, commits, fetches), its listener and its processing loop
  included. Every task and callback carries the member it belongs to (the context its
  member function started in), and the runtime's queue of runnable work
  (:class:`_RunQueue`: asyncio's ready handles, trio's run queue) sets the member's work
  aside while it is paused; what arrives for it waits in its connections' inboxes, its
  timers fire late, when the pause ends.
* ``crash_member``: the member's work is set aside for good -- no ``finally``, no close, no
  LeaveGroup -- and its connections drop; the member function is started again (a new
  incarnation, :attr:`SimMember.incarnation`) after a drawn time, as a supervisor would,
  and at the heal. :attr:`SimMember.crashed` tells your ``final`` which incarnations died
  (what they processed after their last commit is processed again: at least once). A
  crashed incarnation's work is let go -- cancelled, its effects on nothing -- only once
  the run is over.

Members start when the run starts; after ``chaos_ms`` of faults (network delays, held
links, resets, broker crashes, coordinator moves, and the member's own process: pauses and
crashes) everything heals, and the run waits until the group is Stable,
every partition is assigned, and the group's committed offsets reached the end of every
partition (or fails with ``L1``). Then :attr:`SimMember.running` turns False: your loop
ends, its consumer leaves the group. ``check(sim)`` runs after every event, ``final(sim)``
at the end; an AssertionError in either -- or raised by a member, its listener included --
fails the run as ``USER``, any other exception from a member as ``APP``. The simulator's
own invariants of the coordinator's side hold too (G0, G1, G2, G5, G7), and G6: every
commit the coordinator accepts comes from a member that owns the partition (by what your
consumers' machines received).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import selectors
import socket
from collections.abc import Awaitable, Callable, Mapping
from contextvars import Context, ContextVar
from typing import Any, Final, Protocol, cast

import anyio
import attrs

from kafkastate.adapters._common import MACHINE_HOOKS
from kafkastate.core.consumer.consumer import ConsumerMachine
from kafkastate.core.consumer.group import GroupMember
from kafkastate.core.metadata import NodeId
from kafkastate.sim.app import GROUP, TOPIC, _GroupHost
from kafkastate.sim.coordinator import GroupState
from kafkastate.sim.entropy import Entropy, SeededEntropy
from kafkastate.sim.network import _Conn
from kafkastate.sim.scheduler import InvariantViolation, _ms_at
from kafkastate.sim.world import FAULTS, Sim, SimConfig

__all__ = ["ASYNC_FAULTS", "AsyncSim", "SimEventLoop", "SimMember", "run_async"]

ASYNC_FAULTS: Final = FAULTS
"""The fault kinds a run of your code uses: every one of :data:`~kafkastate.sim.world.FAULTS`."""
STOP_MS: Final = 60_000
"""How long members get to end once :attr:`SimMember.running` turned False."""
_BROKER_NET: Final = "10.99.0."  # broker ``bN`` is 10.99.0.N on the simulated network

Member = Callable[["SimMember"], Awaitable[None]]
Check = Callable[["AsyncSim"], None]

_HOST: ContextVar[_AsyncHost | None] = ContextVar("kafkastate_sim_host", default=None)


@attrs.define(eq=False)
class SimMember:
    """What your member function is given: who it is and what to connect to."""

    name: str
    """``m0``, ``m1``..."""
    bootstrap_servers: str
    """The simulated brokers (``b0:9092,...``)."""
    topic: str
    """The topic the records are written to."""
    group_id: str
    """The consumer group."""
    config: SimConfig
    """The run's options (drawn from the seed, or fixed)."""
    random: random.Random
    """This member's own seeded randomness (processing times...)."""
    _sim: AsyncSim = attrs.field(repr=False)
    _host: _AsyncHost = attrs.field(repr=False)

    @property
    def running(self) -> bool:
        """True until the run is over; then end your loop (leave the consumer's block)."""
        return not self._sim.stopping

    @property
    def incarnation(self) -> int:
        """0 for the member's first start, 1 after its first crash..."""
        return self._host.incarnation

    @property
    def crashed(self) -> bool:
        """True once the simulator crashed this incarnation (its code ran no more)."""
        return not self._host.alive

    def consumer_options(self, **options: Any) -> dict[str, Any]:
        """aiokafka's keyword options for a consumer of this run's group (timeouts, assignor
        and static membership as the seed drew them), with ``options`` over them.

        Returns:
            Options for ``AIOKafkaConsumer(**...)`` or ``open_consumer(**...)``.
        """
        cfg = self.config
        out: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "group_id": self.group_id,
            "auto_offset_reset": "earliest",
            "partition_assignment_strategy": [cfg.assignor],
            "session_timeout_ms": cfg.session_ms,
            "heartbeat_interval_ms": cfg.heartbeat_ms,
            "max_poll_interval_ms": cfg.max_poll_ms,
            "request_timeout_ms": max(40_000, cfg.session_ms + 5_000),
            "retry_backoff_ms": 100,
            "enable_incremental_fetch_sessions": False,  # the brokers answer full fetches
        }
        if cfg.static:
            out["group_instance_id"] = f"static-{self.name}"
        out.update(options)
        return out


class _Receiver(Protocol):
    """A connection's client end: what the network delivers to."""

    def deliver(self, data: bytes) -> None: ...

    def lost(self, exc: Exception) -> None: ...


class _Endpoint:
    """A member's end of its connections, where the network delivers (the host driver's
    ``machine``: bytes in, resets)."""

    member = None  # no group machine of the simulator's to read: the member is yours

    def __init__(self) -> None:
        self.receivers: dict[NodeId, _Receiver] = {}

    def receive_data(self, node: NodeId, data: bytes, *, now: float) -> None:
        receiver = self.receivers.get(node)
        if receiver is not None:
            receiver.deliver(data)

    def connection_lost(self, node: NodeId, *, now: float) -> None:
        receiver = self.receivers.pop(node, None)
        if receiver is not None:
            receiver.lost(ConnectionResetError(f"connection {node} reset"))


class _AsyncHost(_GroupHost):
    """A member: your code's task and its connections."""

    def __init__(self, name: str, incarnation: int) -> None:
        self.endpoint = _Endpoint()
        super().__init__(name, cast(ConsumerMachine, self.endpoint), incarnation)
        self.running = False  # your member function has not returned yet
        self.consumers: list[ConsumerMachine] = []  # the machines your code's consumers run
        self.held: list[Any] = []  # its runnable work, set aside while paused or crashed
        self.frozen = False  # paused: until the pause's end releases what was set aside


class _RunQueue(collections.deque[Any]):
    """A runtime's queue of runnable work -- asyncio's ready handles, trio's run queue --
    that sets a paused or crashed member's work aside (:meth:`AsyncSim._frozen`). Work is
    only ever added by ``append`` (``call_soon``, a due timer, trio's ``reschedule``)."""

    def __init__(self, sim: AsyncSim, context_of: Callable[[Any], Context]) -> None:
        super().__init__()
        self.sim = sim
        self.context_of = context_of

    def append(self, item: Any) -> None:
        host = self.context_of(item).get(_HOST)
        if host is not None and self.sim._frozen(host):
            host.held.append(item)
        else:
            super().append(item)

    def hold(self, host: _AsyncHost) -> None:
        """Set aside what of ``host``'s is runnable now."""
        keep = []
        for item in self:
            if self.context_of(item).get(_HOST) is host:
                host.held.append(item)
            else:
                keep.append(item)
        self.clear()
        self.extend(keep)


class _Connect:
    """One connect of a member's, until the network answers it."""

    def __init__(self, sim: AsyncSim, host: _AsyncHost, broker: int) -> None:
        self.sim, self.host, self.broker = sim, host, broker
        self.conn: _Conn | None = None
        self.error: OSError | None = None
        self.answered = anyio.Event()
        self.abandoned = False

    async def wait(self) -> _Conn:
        """The connection, once the broker accepted it.

        Raises:
            ConnectionRefusedError: a crashed broker, or a held link.
        """
        self.sim._at(self.sim.now + self.sim._delay("connect"), "member_connect", (self,))
        try:
            await self.answered.wait()
        except BaseException:
            self.abandoned = True  # (a connect timeout): what the broker answers is dropped
            if self.conn is not None:
                self.sim._client_close(self.conn)
            raise
        if self.conn is None:
            raise self.error or ConnectionRefusedError(f"b{self.broker}")
        return self.conn

    def close(self, conn: _Conn) -> None:
        """The member closed the connection."""
        self.host.endpoint.receivers.pop(conn.node, None)
        if not self.host.alive:
            return  # a crashed incarnation's code, let go after the run: it reaches nothing
        self.host.conns.pop(conn.node, None)
        self.sim._client_close(conn)
        self.sim._line(f"{self.host.name} closed conn {conn.cid}")

    def write(self, conn: _Conn, data: bytes) -> None:
        """The member wrote ``data``."""
        if conn.open and self.host.alive:
            self.sim._send(conn, "up", data)


class _SimTransport(asyncio.Transport):
    """One simulated TCP connection under anyio's asyncio stream (what
    ``create_connection`` returns on a real loop)."""

    def __init__(self, connect: _Connect, conn: _Conn, protocol: Any) -> None:
        super().__init__({"peername": (f"{_BROKER_NET}{conn.broker}", 9092)})
        self.connect, self.conn, self.protocol = connect, conn, protocol
        self.closing = False
        connect.host.endpoint.receivers[conn.node] = self

    def deliver(self, data: bytes) -> None:
        self.protocol.data_received(data)

    def lost(self, exc: Exception) -> None:
        """The network ended the connection (a reset, the broker crashed)."""
        if not self.closing:
            self.closing = True
            self.protocol.connection_lost(exc)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing:
            raise RuntimeError("the connection is closed")
        self.connect.write(self.conn, bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.connect.close(self.conn)
        loop = self.connect.sim._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon(self.protocol.connection_lost, None)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self.closing

    def can_write_eof(self) -> bool:
        return False


class _SimSelector(selectors.DefaultSelector):
    """The loop's selector: rather than wait for sockets, it runs the simulator."""

    def __init__(self, sim: AsyncSim) -> None:
        super().__init__()
        self.sim = sim
        self.ready: Callable[[], bool] = lambda: False

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        limit = None if timeout is None else _ms_at(self.sim.now / 1000 + timeout)
        if not self.sim._advance(limit, self.ready):
            raise _Stuck
        return super().select(0)  # the loop's own self-pipe, if anything woke it


class _Stuck(Exception):
    """Nothing can happen any more (after a failure: members that never end)."""


class SimEventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop in the simulator's virtual time, over its network."""

    def __init__(self, sim: AsyncSim) -> None:
        selector = _SimSelector(sim)
        super().__init__(selector)
        # the loop's ready handles, a paused or crashed member's set aside
        queue = sim._queue = _RunQueue(sim, lambda handle: handle._context)
        self._ready = queue
        selector.ready = lambda: bool(queue)
        self._sim = sim

    def time(self) -> float:
        return self._sim.now / 1000

    async def getaddrinfo(  # type: ignore[override]
        self,
        host: bytes | str | None,
        port: bytes | str | int | None,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int]]]:
        return self._sim._resolve(host, port)

    async def create_connection(  # type: ignore[override]
        self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str, port: int, **_: Any
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        connect = self._sim._connecting(host)
        conn = await connect.wait()
        protocol = protocol_factory()
        transport = _SimTransport(connect, conn, protocol)
        protocol.connection_made(transport)
        return transport, protocol


class AsyncSim(Sim):
    """One run of your member code (see the module docstring).

    Args:
        entropy: every decision's source.
        config: the run's options (``faults`` of :data:`ASYNC_FAULTS` only).
        member: your ``async def member(m: SimMember)``.
        check: your invariant after every event.
        final: your invariant at the end.
        backend: ``"asyncio"`` (:class:`SimEventLoop`) or ``"trio"`` (trio with the
            simulator's clock and sockets, :mod:`kafkastate.sim.triosim`).
    """

    def __init__(
        self,
        entropy: Entropy,
        config: SimConfig,
        *,
        member: Member,
        check: Check | None = None,
        final: Check | None = None,
        backend: str = "asyncio",
    ) -> None:
        unsupported = [f for f in config.faults if f not in ASYNC_FAULTS]
        if unsupported or config.script or config.planted:
            raise ValueError(
                f"a run of your code has the faults {ASYNC_FAULTS}, no script nor planted "
                f"bug (got faults {unsupported}, script {config.script!r}, planted "
                f"{config.planted!r})"
            )
        if backend not in ("asyncio", "trio"):
            raise ValueError(f"backend must be 'asyncio' or 'trio', not {backend!r}")
        self.backend = backend
        self._member = member
        self._final = final
        self._starting: list[_AsyncHost] = []  # members to start (the spawner's work)
        self._to_spawn: anyio.Event | None = None  # set: the spawner has members to start
        self.stopping = False
        """True once the run is over (members end their loops)."""
        self._failure: InvariantViolation | None = None
        self._failed: anyio.Event | None = None
        self._members: Any = None  # the task group of the members
        self._loop: SimEventLoop | None = None
        self._queue: _RunQueue | None = None  # the runtime's runnable work (its backend's)
        self._over = False  # the run is over: nobody's work is set aside any more
        self._crashed: list[_AsyncHost] = []  # crashed incarnations, their work set aside
        self._kept: list[Any] = []  # the loop's tasks at each crash (see _crash_host)
        super().__init__(entropy, config, check=cast(Any, check))

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Run the members: chaos, heal, settle, stop; raises InvariantViolation on the
        first failure."""
        if self.backend == "trio":
            from kafkastate.sim.triosim import run_on_trio  # noqa: PLC0415

            run_on_trio(self)
        else:
            self._run_on_asyncio()
        if self._failure is not None:
            raise self._failure

    def _run_on_asyncio(self) -> None:
        loop = self._loop = SimEventLoop(self)
        try:
            loop.run_until_complete(self._main())
        except _Stuck:
            pass  # (a failure's members that never end: the failure is what counts)
        except BaseException:
            # a bug of the simulator's: the members' tasks are in no state to go on (their
            # async generators closed, a consumer's loop can spin with virtual time frozen)
            loop.close()
            raise
        with contextlib.suppress(_Stuck):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    async def _main(self) -> None:
        """The run, in a task of the loop (asyncio or trio, through anyio)."""
        hooks = MACHINE_HOOKS.set(self)
        self._failed = anyio.Event()
        try:
            async with anyio.create_task_group() as members:
                self._members = members
                try:
                    await self._phases()
                except InvariantViolation as exc:
                    self._fail(exc)
                self._let_go()
                members.cancel_scope.cancel()  # a failed run's members, crashed ones
        finally:
            MACHINE_HOOKS.reset(hooks)

    async def _phases(self) -> None:
        cfg = self.config
        for t in range(cfg.chaos_ms // 8, cfg.chaos_ms, cfg.chaos_ms // 8):
            self._at(t, "write", ())  # records keep coming while the faults happen
        if cfg.faults:
            self._at(cfg.fault_every_ms, "fault", ())
        self._spawn_starting()
        self._members.start_soon(self._spawner, name="spawner")
        await self._wait(cfg.chaos_ms / 1000)
        self._heal()
        deadline = self.now + 3 * cfg.max_poll_ms + 2 * cfg.session_ms + 10_000
        while self.now < deadline and not (self._settled() and self._all_committed()):
            await self._wait(min(1.0, (deadline - self.now) / 1000))
        self._check_stable_coverage()
        if not self._settled():
            raise InvariantViolation(
                "L1", f"the group did not settle: {self._group()}", at=self.now
            )
        if not self._all_committed():
            raise InvariantViolation(
                "L1", f"the group did not commit every record: {self._commits()}", at=self.now
            )
        self.stopping = True
        self._line("stop")
        with anyio.move_on_after(STOP_MS / 1000):
            while self._running():
                await self._wait(0.1)
        self._raise_failure()
        if self._running():
            raise InvariantViolation(
                "APP",
                f"{self._running()} still running {STOP_MS} ms after running turned False",
                at=self.now,
            )
        if self._final is not None:
            try:
                self._final(self)
            except AssertionError as exc:
                raise InvariantViolation("USER", str(exc), at=self.now) from exc

    async def _wait(self, seconds: float) -> None:
        """Sleep in virtual time; a failure ends the run at once."""
        assert self._failed is not None
        with anyio.move_on_after(seconds):
            await self._failed.wait()
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _fail(self, exc: InvariantViolation) -> None:
        """The run failed: nothing happens in the world any more (virtual time still moves
        for your code's timeouts as it ends)."""
        if self._failure is None:
            self._failure = exc
            self._heap.clear()
            if self._failed is not None:
                self._failed.set()

    def _running(self) -> list[str]:
        return sorted(
            name
            for name, host in self.hosts.items()
            if isinstance(host, _AsyncHost) and host.running and host.alive
        )

    def _advance(self, limit: int | None, ready: Callable[[], bool]) -> bool:
        """The event loop waits until virtual ``limit`` ms (None: no timer): run the
        simulator's events until one makes a task ready, or move virtual time to
        ``limit``. False if nothing can happen any more."""
        while True:
            due = self._heap[0][0] if self._heap else None
            if due is None or (limit is not None and due > limit):
                if limit is None:
                    if self._failure is None:
                        self._fail(InvariantViolation("STUCK", "every task waits", at=self.now))
                        return True  # the run's task wakes to the failure
                    return False
                self.now = max(self.now, limit)
                return True
            try:
                self._run_until(due)
            except InvariantViolation as exc:
                self._fail(exc)
                return True
            if ready():
                return True

    # ------------------------------------------------------------------ members

    def _start_host(self, name: str) -> None:
        old = self.hosts.get(name)
        host = _AsyncHost(name, 0 if old is None else old.incarnation + 1)
        self.hosts[name] = host
        self._line(f"{name} start #{host.incarnation}")
        self._starting.append(host)
        if self._to_spawn is not None:
            # (a restart comes from a simulator event, which the event loop runs outside
            # any task, where no task can be started: the spawner task starts it)
            self._to_spawn.set()

    async def _spawner(self) -> None:
        """Starts the members that crashed and start again, in a task of the run."""
        while True:
            self._spawn_starting()
            self._to_spawn = anyio.Event()
            await self._to_spawn.wait()

    def _spawn_starting(self) -> None:
        for host in self._starting:
            self._spawn(host)
        self._starting.clear()

    def _spawn(self, host: _AsyncHost) -> None:
        member = SimMember(
            name=host.name,
            bootstrap_servers=",".join(f"b{n}:9092" for n in self.cluster.nodes),
            topic=TOPIC,
            group_id=GROUP,
            config=self.config,
            random=random.Random(self.entropy.below(1 << 30, f"random {host.name}")),
            sim=self,
            host=host,
        )
        host.running = True
        self._members.start_soon(self._run_member, host, member, name=f"member {host.name}")

    async def _run_member(self, host: _AsyncHost, member: SimMember) -> None:
        # (a member started again after a crash is spawned from a simulator event, outside
        # the run's task: its context gets the hooks here)
        MACHINE_HOOKS.set(self)
        _HOST.set(host)
        try:
            await self._member(member)
        except Exception as exc:
            if not host.alive:
                return  # a crashed incarnation, let go after the run: what it does is void
            self._line(f"{host.name} raised {exc!r}")
            failure = InvariantViolation(*_blame(host.name, exc), at=self.now)
            failure.__cause__ = exc
            self._fail(failure)
        else:
            if host.alive:
                self._line(f"{host.name} ended")
        finally:
            host.running = False

    # ------------------------------------------------------------------ process faults

    def _frozen(self, host: _AsyncHost) -> bool:
        """Whether ``host``'s code may not run now: its process is paused or crashed."""
        return not self._over and (host.frozen or not host.alive)

    def _stall(self, host: _GroupHost, ms: int) -> None:
        """A GC-like pause: none of the member's code runs until it ends."""
        super()._stall(host, ms)
        if isinstance(host, _AsyncHost) and self._queue is not None:
            host.frozen = True
            self._queue.hold(host)
            self._at(host.paused_until, "resume", (host.name, host.incarnation))

    def _on_resume(self, name: str, incarnation: int) -> None:
        host = self._live(name, incarnation)
        if isinstance(host, _AsyncHost) and host.frozen and host.paused_until <= self.now:
            self._release(host)  # (paused again meanwhile: that pause's resume does it)

    def _release(self, host: _AsyncHost) -> None:
        """The pause is over: what of ``host``'s was set aside runs now, in order (before
        anything that wakes it later)."""
        host.frozen = False
        held, host.held = host.held, []
        if held:
            self._line(f"{host.name} resumes")
        assert self._queue is not None
        for item in held:
            self._queue.append(item)

    def _crash_host(self, host: _GroupHost) -> None:
        """The member's process dies: its work is set aside for good (no close, no
        LeaveGroup), its connections drop; :meth:`Sim._on_restart` starts it again."""
        super()._crash_host(host)
        if isinstance(host, _AsyncHost):
            host.endpoint.receivers.clear()
            self._crashed.append(host)
            if self._queue is not None:
                self._queue.hold(host)
            if self._loop is not None:
                # asyncio keeps only weak references to tasks: a dead member's blocked tasks
                # and objects would be collected, and its async generators' finally blocks
                # run (a consumer closed, in another task's cancel scope). Keep them all.
                self._kept.extend(asyncio.all_tasks(self._loop))

    def _heal(self) -> None:
        super()._heal()  # pauses end, crashed members start again
        for host in self.hosts.values():
            if isinstance(host, _AsyncHost) and host.alive and host.frozen:
                self._release(host)

    def _let_go(self) -> None:
        """The run is over: crashed incarnations' work runs again, to be cancelled (their
        connections are gone; nothing they do reaches the world)."""
        self._over = True
        for host in [*self._crashed, *self.hosts.values()]:
            if isinstance(host, _AsyncHost) and host.held:
                held, host.held = host.held, []
                assert self._queue is not None
                for item in held:
                    self._queue.append(item)

    def rng(self) -> random.Random:
        """A machine's randomness, from the seed (the adapter's MACHINE_HOOKS)."""
        host = _HOST.get()
        name = "outside" if host is None else host.name
        return random.Random(self.entropy.below(1 << 30, f"rng {name}"))

    def built(self, machine: Any) -> None:
        """A consumer machine your code built (the adapter's MACHINE_HOOKS)."""
        host = _HOST.get()
        if host is not None:
            host.consumers.append(machine)

    def _check_safety(self, kind: str) -> None:
        # G6's bookkeeping from the machines of your code's consumers (the checks read a
        # host's own machine, which for your code is the network endpoint), then the checks
        for host in self.hosts.values():
            if isinstance(host, _AsyncHost) and host.alive:
                for machine in host.consumers:
                    member = machine.member
                    if isinstance(member, GroupMember):
                        self._note_received(host, member)
        super()._check_safety(kind)

    # ------------------------------------------------------------------ network

    def _broker_named(self, name: str) -> int | None:
        """The broker a host name or address names (``b1``, ``10.99.0.1``)."""
        for prefix in ("b", _BROKER_NET):
            number = name.removeprefix(prefix)
            if number != name and number.isdigit() and int(number) in self.cluster.nodes:
                return int(number)
        return None

    def _resolve(
        self, host: bytes | str | None, port: bytes | str | int | None
    ) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int]]]:
        """getaddrinfo: the simulated brokers' addresses.

        Raises:
            socket.gaierror: not a simulated broker.
        """
        name = host.decode() if isinstance(host, bytes) else str(host)
        broker = self._broker_named(name)
        if broker is None:
            raise socket.gaierror(socket.EAI_NONAME, f"{name} is not a simulated broker")
        address = (f"{_BROKER_NET}{broker}", int(port or 0))
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)]

    def _connecting(self, address: str) -> _Connect:
        """A member's connect to ``address``.

        Raises:
            ConnectionRefusedError: not a member's, or not a simulated broker's address.
        """
        host = _HOST.get()
        broker = self._broker_named(address)
        if host is None or broker is None:
            raise ConnectionRefusedError(f"{address}: only members reach the simulated brokers")
        return _Connect(self, host, broker)

    def _on_member_connect(self, connect: _Connect) -> None:
        host, broker = connect.host, connect.broker
        if connect.abandoned or (host.alive and self._deferred(host, "member_connect", (connect,))):
            return
        if (
            not host.alive
            or broker not in self.cluster.alive
            or (host.name, broker) in self._blocked
        ):
            self._line(f"{host.name} connect b{broker} refused")
            connect.error = ConnectionRefusedError(f"b{broker} refused the connection")
        else:
            self._next_conn += 1
            conn = connect.conn = _Conn(self._next_conn, host.name, NodeId(self._next_conn), broker)
            self._conns[conn.cid] = conn
            host.conns[conn.node] = conn
            self._line(f"{host.name} connected b{broker} conn {conn.cid}")
        connect.answered.set()

    def _pump(self, host: _GroupHost) -> None:
        """Nothing to drain: the member's own loop reads what arrived."""

    def _ownership(self) -> str:
        return ""  # what your members own is theirs: the trace shows the coordinator's side

    # ------------------------------------------------------------------ liveness

    def _settled(self) -> bool:
        group = self.cluster.coordinator.groups.get(GROUP)
        return (
            group is not None
            and group.state is GroupState.STABLE
            and len(group.members) == len(self._running())
        )

    def _all_committed(self) -> bool:
        group = self.cluster.coordinator.groups.get(GROUP)
        return group is not None and all(
            group.offsets.get((TOPIC, p), 0) >= self.written for p in range(self.config.partitions)
        )

    def _group(self) -> str:
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None:
            return "no group"
        return f"{group.state.name} generation {group.generation}, {len(group.members)} members"

    def _commits(self) -> dict[int, int]:
        group = self.cluster.coordinator.groups.get(GROUP)
        offsets = {} if group is None else group.offsets
        return {p: offsets.get((TOPIC, p), 0) for p in range(self.config.partitions)}


def _blame(name: str, exc: BaseException) -> tuple[str, str]:
    """``(invariant, message)`` for a member that raised: USER if an AssertionError is
    behind it (a listener's too), APP otherwise."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AssertionError):
            return "USER", f"{name}: {seen}"
        seen = seen.__cause__ or seen.__context__
    return "APP", f"{name} raised {exc!r}"


def async_config(entropy: Entropy, overrides: Mapping[str, Any]) -> SimConfig:
    """The run's options: drawn from ``entropy`` (faults of :data:`ASYNC_FAULTS` only),
    ``overrides`` over them."""
    drawn = SimConfig.draw(entropy)
    drawn = attrs.evolve(drawn, faults=tuple(f for f in drawn.faults if f in ASYNC_FAULTS))
    return attrs.evolve(drawn, **overrides)


def run_async(
    seed: int,
    member: Member,
    *,
    check: Check | None = None,
    final: Check | None = None,
    backend: str = "asyncio",
    **overrides: Any,
) -> AsyncSim:
    """Run your member code in the group world of ``seed``; the same arguments give the
    same run, event for event.

    Args:
        seed: picks sizes, timeouts, faults, delays.
        member: ``async def member(m: SimMember)``, run once per member.
        check: your invariant, after every event.
        final: your invariant, at the end.
        backend: ``"asyncio"`` or ``"trio"``.
        overrides: :class:`~kafkastate.sim.world.SimConfig` fields to fix.

    Returns:
        The finished run (``trace``, ``trace_hash()``, ``written``...).

    Raises:
        InvariantViolation: the first invariant that failed (``USER``, ``APP``, ``L1``...).
    """
    entropy = SeededEntropy(seed)
    sim = AsyncSim(
        entropy,
        async_config(entropy, overrides),
        member=member,
        check=check,
        final=final,
        backend=backend,
    )
    sim.run()
    return sim
