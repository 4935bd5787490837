"""The simulator's host driver: it runs a kafkastate machine on a simulated host through the
same surface the runtime adapters drive -- ``next_event`` (``ConnectRequested``,
``CloseRequested`` and the machine's own events), ``data_to_send``, ``receive_data``,
``connection_made``/``connection_failed``/``connection_lost``, ``get_timer`` and
``handle_timer`` -- and nothing else. A paused host (a GC-like stall) handles nothing until
its pause ends; a crashed host's connections go with it.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from kafkastate.core.client import CloseRequested, ConnectRequested
from kafkastate.core.metadata import NodeId
from kafkastate.sim.network import H, Network, _Conn
from kafkastate.sim.scheduler import InvariantViolation, _ms_at

__all__ = ["HostDriver"]

M = TypeVar("M")


class _Host(Generic[M]):
    """One simulated host: the machine it runs and its connections, timer and stalls."""

    def __init__(self, name: str, machine: M, incarnation: int) -> None:
        self.name = name
        self.machine = machine
        self.incarnation = incarnation
        self.conns: dict[NodeId, _Conn] = {}
        self.timer_at: int | None = None
        self.alive = True
        self.paused_until = 0
        self.last_timer = -1
        self.timer_serial = 0
        self.timer_event: int | None = None  # the scheduled timer event, until it runs
        self.pauses: list[tuple[int, int]] = []  # stalls: (start, end) ms
        self.connecting: dict[NodeId, int] = {}  # the latest connect attempt per node
        self.spins = 0


class HostDriver(Network[H]):
    """Drives each host's machine: its IO requests, bytes and deadline."""

    def _pump(self, host: H) -> None:
        """Drain the machine: events, bytes, what the application does about them, its next
        deadline."""
        if not host.alive or not self._drain(host):
            return
        self._after_drain(host)
        timer = host.machine.get_timer()
        if timer is not None:
            due = max(self.now, _ms_at(timer))
            if host.timer_at is None or due < host.timer_at:
                host.timer_at = due  # the one timer event that counts
                host.timer_serial += 1
                if host.timer_event is not None:
                    self._cancel(host.timer_event)  # the later one it replaces
                host.timer_event = self._at(
                    due, "timer", (host.name, host.incarnation, host.timer_serial)
                )

    def _drain(self, host: H) -> bool:
        """The machine's events and bytes; False if the host stopped (its process died)."""
        m = host.machine
        while (event := m.next_event()) is not None:
            match event:
                case ConnectRequested(node_id=node, host=address):
                    broker = int(address.removeprefix("b"))
                    host.connecting[node] = attempt = host.connecting.get(node, 0) + 1
                    self._at(
                        self.now + self._delay("connect"),
                        "connect",
                        (host.name, host.incarnation, node, broker, attempt),
                    )
                case CloseRequested(node_id=node):
                    host.connecting[node] = host.connecting.get(node, 0) + 1
                    conn = host.conns.pop(node, None)
                    if conn is not None:
                        self._client_close(conn)
                case _:
                    if not self._on_machine_event(host, event):
                        return False
        if not host.alive:
            return False
        for node, data in m.data_to_send():
            conn = host.conns.get(node)
            if conn is not None and conn.open:
                self._send(conn, "up", data)
        return True

    def _on_machine_event(self, host: H, event: Any) -> bool:
        """One of the machine's own events, for the application; False stops the pump."""
        del host, event
        return True

    def _after_drain(self, host: H) -> None:
        """What the application does once the machine is drained."""

    def _live(self, name: str, incarnation: int) -> H | None:
        host = self.hosts.get(name)
        if host is None or not host.alive or host.incarnation != incarnation:
            return None
        return host

    def _deferred(self, host: H, kind: str, args: tuple[Any, ...]) -> bool:
        """A paused host handles nothing until its pause ends (a GC-like stall)."""
        if host.paused_until > self.now:
            self._at(host.paused_until, kind, args)
            return True
        return False

    def _on_connect(
        self, name: str, incarnation: int, node: NodeId, broker: int, attempt: int
    ) -> None:
        host = self._live(name, incarnation)
        args = (name, incarnation, node, broker, attempt)
        if (
            host is None
            or host.connecting.get(node) != attempt
            or self._deferred(host, "connect", args)
        ):
            return
        if broker not in self.cluster.alive or (name, broker) in self._blocked:
            self._line(f"{name} connect b{broker} failed")
            host.machine.connection_failed(node, now=self._s())
        else:
            self._next_conn += 1
            conn = _Conn(self._next_conn, name, node, broker)
            self._conns[conn.cid] = conn
            host.conns[node] = conn
            host.machine.connection_made(node, now=self._s())
        self._pump(host)

    def _on_timer(self, name: str, incarnation: int, serial: int) -> None:
        host = self._live(name, incarnation)
        if host is None or serial != host.timer_serial:
            return
        host.timer_event = None
        if self._deferred(host, "timer", (name, incarnation, serial)):
            return
        host.timer_at = None
        host.spins = host.spins + 1 if host.last_timer == self.now else 0
        host.last_timer = self.now
        if host.spins > 100:
            raise InvariantViolation(
                "SPIN", f"{name}: a deadline handle_timer never clears (a busy loop)", at=self.now
            )
        host.machine.handle_timer(now=self._s())
        self._pump(host)

    def _stall(self, host: H, ms: int) -> None:
        """Stall the host's process for ``ms``."""
        host.paused_until = self.now + ms
        host.pauses.append((self.now, self.now + ms))

    def _crash_host(self, host: H) -> None:
        self._line(f"fault crash {host.name}")
        host.alive = False
        if host.timer_event is not None:
            self._cancel(host.timer_event)  # a dead host's timer would find nothing to do
            host.timer_event = None
        for conn in list(host.conns.values()):
            self._close(conn, notify_client=False)
        host.conns.clear()
