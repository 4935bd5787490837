"""Your trio consumer code in the simulation: :class:`~kafkastate.sim.aio.AsyncSim` with
``backend="trio"``.

Theory of operation
-------------------
trio runs with a clock of the simulator's (:class:`SimClock`: ``trio.current_time()`` is
virtual time) and trio's own testing hooks for the network: a socket factory
(``trio.socket.set_custom_socket_factory``) whose sockets are connections of the simulated
network (:class:`SimSocket`, under anyio's own trio stream), and a hostname resolver that
names the simulated brokers. A driver task waits until every other task is blocked
(``trio.testing.wait_all_tasks_blocked``), then runs the simulator's next events if they
are due before trio's next deadline -- they may wake tasks: bytes arrived, a connect
answered -- or else moves virtual time to that deadline, as ``MockClock``'s autojump does.
The adapter's code is the real one: ``kafkastate.trio.open_consumer`` and its driver.

A paused or crashed member's tasks wait aside: trio's run queue is replaced by the
simulator's :class:`~kafkastate.sim.aio._RunQueue`, which keeps a task of a frozen member
(by the context its member function started in) out of the queue until the pause ends (or,
crashed, until the run is over). To trio such a task looks blocked, so the driver's
``wait_all_tasks_blocked`` still returns.
"""

from __future__ import annotations

import math
import random
import socket
from typing import Any

import trio
import trio.testing

from kafkastate.sim.aio import AsyncSim, _Connect, _RunQueue
from kafkastate.sim.network import _Conn
from kafkastate.sim.scheduler import _ms_at

__all__ = ["SimClock", "SimSocket", "run_on_trio"]

_SHUFFLE = "_ALLOW_DETERMINISTIC_SCHEDULING"
"""trio's switch to a full shuffle of each batch of ready tasks (see :func:`run_on_trio`)."""


class SimClock(trio.abc.Clock):
    """trio's clock: the simulator's virtual time (the driver task moves it)."""

    def __init__(self, sim: AsyncSim) -> None:
        self.sim = sim

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self.sim.now / 1000

    def deadline_to_sleep_time(self, deadline: float) -> float:
        # trio never waits this long: the driver task waits for every task to block (a
        # shorter "cushion" of 0 s), then moves virtual time itself
        return max(0.0, deadline - self.current_time())


class SimSocket(trio.socket.SocketType):
    """A trio socket that is a connection of the simulated network."""

    def __init__(self, sim: AsyncSim, family: int) -> None:
        super().__init__()
        self.sim = sim
        self._family = family
        self.connect_: _Connect | None = None
        self.conn: _Conn | None = None
        self.inbox = bytearray()
        self.error: OSError | None = None
        self.closed = False
        self.arrived = trio.Event()

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AddressFamily(self._family)

    @property
    def type(self) -> socket.SocketKind:
        return socket.SOCK_STREAM

    @property
    def proto(self) -> int:
        return 0

    def setsockopt(self, *args: Any) -> None:
        pass

    def fileno(self) -> int:
        return -1 if self.closed else 1_000_000 + (self.conn.cid if self.conn else 0)

    def getpeername(self) -> Any:
        return None if self.conn is None else (f"b{self.conn.broker}", 9092)

    async def connect(self, address: Any) -> None:
        self.connect_ = self.sim._connecting(str(address[0]))
        self.conn = await self.connect_.wait()
        self.connect_.host.endpoint.receivers[self.conn.node] = self

    # what the network delivers
    def deliver(self, data: bytes) -> None:
        self.inbox += data
        self.arrived.set()

    def lost(self, exc: Exception) -> None:
        self.error = exc if isinstance(exc, OSError) else OSError(str(exc))
        self.arrived.set()

    async def recv(self, bufsize: int, flags: int = 0) -> bytes:
        while not self.inbox and self.error is None and not self.closed:
            self.arrived = trio.Event()
            await self.arrived.wait()
        await trio.lowlevel.checkpoint()
        if self.closed:
            raise trio.ClosedResourceError
        if self.inbox:
            data = bytes(self.inbox[:bufsize])
            del self.inbox[:bufsize]
            return data
        assert self.error is not None
        raise self.error

    async def send(self, data: Any, flags: int = 0) -> int:
        await trio.lowlevel.checkpoint()
        if self.closed:
            raise trio.ClosedResourceError
        if self.error is not None:
            raise self.error
        assert self.connect_ is not None and self.conn is not None
        self.connect_.write(self.conn, bytes(data))
        return len(data)

    def shutdown(self, flag: int) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.arrived.set()
        if self.connect_ is not None and self.conn is not None:
            self.connect_.close(self.conn)


class _Factory(trio.abc.SocketFactory):
    def __init__(self, sim: AsyncSim) -> None:
        self.sim = sim

    def socket(
        self,
        family: socket.AddressFamily | int = socket.AF_INET,
        type: socket.SocketKind | int = socket.SOCK_STREAM,
        proto: int = 0,
    ) -> trio.socket.SocketType:
        return SimSocket(self.sim, int(family))


class _Resolver(trio.abc.HostnameResolver):
    def __init__(self, sim: AsyncSim) -> None:
        self.sim = sim

    async def getaddrinfo(  # noqa: PLR0917 (trio's signature)
        self,
        host: bytes | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[tuple[Any, Any, int, str, Any]]:
        return list(self.sim._resolve(host, port))

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        raise OSError("no reverse lookups in the simulation")


def run_on_trio(sim: AsyncSim) -> None:
    """Run ``sim``'s members on trio (see the module docstring).

    trio picks the order in which the tasks that became ready together run from its own
    random generator (trio._core._run._r: the one trio's Hypothesis plugin seeds, too);
    it is seeded from the run's entropy here, so a seed explores one order and replays it.
    How trio uses it is pinned too: its Hypothesis plugin (loaded with Hypothesis, as
    under pytest) and pytest-trio switch trio to shuffling each batch of ready tasks,
    where otherwise it only reverses half of them -- the same seed then made another run
    in a plain script than under pytest. A run always shuffles, as under pytest.
    """
    run = trio._core._run
    scheduling: random.Random | None = getattr(run, "_r", None)
    state = None if scheduling is None else scheduling.getstate()
    shuffled = getattr(run, _SHUFFLE, None)
    if scheduling is not None:
        scheduling.seed(sim.entropy.below(1 << 30, "trio scheduling"))
    if shuffled is not None:
        setattr(run, _SHUFFLE, True)
    try:
        trio.run(_main, sim, clock=SimClock(sim))
    finally:
        if scheduling is not None and state is not None:
            scheduling.setstate(state)
        if shuffled is not None:
            setattr(run, _SHUFFLE, shuffled)


async def _main(sim: AsyncSim) -> None:
    trio.socket.set_custom_socket_factory(_Factory(sim))
    trio.socket.set_custom_hostname_resolver(_Resolver(sim))
    # trio's run queue (a deque its reschedule appends to), a frozen member's tasks set aside
    runner = trio._core._run.GLOBAL_RUN_CONTEXT.runner
    queue = sim._queue = _RunQueue(sim, lambda task: task.context)
    queue.extend(runner.runq)
    runner.runq = queue
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drive, sim, nursery.cancel_scope)
        await sim._main()
        nursery.cancel_scope.cancel()


async def _drive(sim: AsyncSim, everything: trio.CancelScope) -> None:
    """Whenever every other task waits: the simulator's next events, or trio's next
    deadline."""
    while True:
        await trio.testing.wait_all_tasks_blocked()
        gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
        limit = None if math.isinf(gap) else _ms_at(sim.now / 1000 + gap)
        if not sim._advance(limit, lambda: True):
            everything.cancel()  # a failed run whose members never end
            return
