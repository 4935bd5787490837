"""The simulator's network: TCP-like connections between hosts and the simulated brokers.

Frames on one connection, in one direction, arrive in order (``delivery = max(last delivery
on that pipe, now + delay)``); reordering happens only across connections. A blocked link
(a network partition, or ``hold``) keeps frames queued until it is released; a reset closes
the connection at both ends and drops what was in flight. Frames due at the same
millisecond on a pipe travel as one delivery, and a paused host's arrivals wait in one inbox
per connection, so tie-breaks never reorder a pipe; a broker reading a connection's
requests out of order fails the run (invariant NET).

The broker side: a broker reads a connection's next request only once it answered the one
before (a held Fetch or a parked JoinGroup holds up the rest), as Kafka does. The cluster's
own deadlines (the group coordinator's timers, held Fetches) are events here too.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from kafkastate.core.metadata import NodeId
from kafkastate.core.protocol.framing import FrameDecoder
from kafkastate.sim.cluster import SimCluster, parse_request, response_frame
from kafkastate.sim.entropy import Entropy
from kafkastate.sim.scheduler import InvariantViolation, Scheduler, WorldConfig, _ms_at

if TYPE_CHECKING:
    from kafkastate.sim.host import _Host

__all__ = ["Network"]

H = TypeVar("H", bound="_Host[Any]")


@attrs.define
class _Conn:
    cid: int
    host: str
    node: NodeId  # as the client's machine names it (negative for bootstrap servers)
    broker: int
    open: bool = True
    outstanding: Any = None  # the request the broker is answering
    backlog: list[Any] = attrs.Factory(list)  # requests read after it
    decoder: FrameDecoder = attrs.Factory(FrameDecoder)
    last: dict[str, int] = attrs.Factory(lambda: {"up": 0, "down": 0})
    correlation: int = -1  # the last request id the broker read (they only grow)

    def read(self, frame: memoryview | bytes, at: int) -> Any:
        """The broker reads one request frame; a request older than the last one means
        the simulated network reordered a pipe (invariant NET: TCP never does)."""
        request = parse_request(bytes(frame))
        if request.correlation_id <= self.correlation:
            raise InvariantViolation(
                "NET",
                f"connection {self.cid}: request {request.correlation_id} arrived after "
                f"{self.correlation}",
                at=at,
            )
        self.correlation = request.correlation_id
        return request


def _token(token: Any) -> tuple[int, Any]:
    """``(connection id, request)`` of a request token."""
    cid, request = token
    return int(cid), request


class Network(Scheduler, Generic[H]):
    """Connections, pipes, holds, resets and broker crashes over a :class:`SimCluster`;
    the hosts' end is :class:`~kafkastate.sim.host.HostDriver`'s."""

    def __init__(self, entropy: Entropy, config: WorldConfig, cluster: SimCluster) -> None:
        super().__init__(entropy, config)
        self.cluster = cluster
        self.hosts: dict[str, H] = {}
        self._conns: dict[int, _Conn] = {}
        self._next_conn = 0
        self._blocked: set[tuple[str, int]] = set()  # (host, node) links held
        self._queued: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
        # per (connection, direction): the delivery already due at the pipe's last time
        self._in_air: dict[tuple[int, str], tuple[int, list[bytes]]] = {}
        self._inbox: dict[int, list[bytes]] = {}  # arrived while the host was paused
        self._coord_timer: tuple[int, int] | None = None  # (due ms, its event)
        self._fetch_timer: tuple[int, int] | None = None
        self._chaos = True
        self._crashed_brokers: set[int] = set()
        self.stats: dict[str, int] = defaultdict(int)
        self.fault_log: list[tuple[int, str]] = []
        """The fault schedule as drawn: ``(ms, kind)`` per fault tick of the chaos phase."""

    def _pump(self, host: H) -> None:
        """Let a host's machine act on what just happened (the host driver's)."""
        raise NotImplementedError

    # ------------------------------------------------------------------- pipes

    def _delay(self, label: str) -> int:
        cfg = self.config
        extra = 0
        if "delay" in cfg.faults and self._chaos:
            extra = self.entropy.below(4, f"slow {label}") * self.entropy.below(200, label)
        return cfg.latency_ms + extra

    def _send(self, conn: _Conn, direction: str, data: bytes) -> None:
        """Put ``data`` on the connection's pipe. Frames due at the same millisecond on one
        pipe travel as one delivery: separate same-time events could be reordered by
        tie-breaks, and a TCP pipe never reorders."""
        if self._blocked and (conn.host, conn.broker) in self._blocked:
            self._queued[conn.cid].append((direction, data))
            return
        due = max(conn.last[direction], self.now + self._delay(direction))
        conn.last[direction] = due
        key = (conn.cid, direction)
        last = self._in_air.get(key)
        if last is not None and last[0] == due:
            last[1].append(data)
            return
        chunks = [data]
        self._in_air[key] = (due, chunks)
        self._at(due, "deliver", (conn.cid, direction, chunks))

    def _resend(self, conn: _Conn, direction: str, data: bytes) -> None:
        """Send again what a released hold kept back."""
        self._send(conn, direction, data)

    def _client_close(self, conn: _Conn) -> None:
        """The client's machine closed the connection (here: like a reset)."""
        self._close(conn, notify_client=False)

    def _close(self, conn: _Conn, *, notify_client: bool) -> None:
        if not conn.open:
            return
        conn.open = False
        self._queued.pop(conn.cid, None)
        self._inbox.pop(conn.cid, None)
        self.cluster.drop_held(conn.cid)
        host = self.hosts.get(conn.host)
        if notify_client and host is not None and host.alive and host.conns.get(conn.node) is conn:
            del host.conns[conn.node]
            host.machine.connection_lost(conn.node, now=self._s())
            self._pump(host)

    def _on_deliver(self, cid: int, direction: str, chunks: list[bytes]) -> None:
        key = (cid, direction)
        last = self._in_air.get(key)
        if last is not None and last[1] is chunks:
            del self._in_air[key]
        self._arrive(cid, direction, b"".join(chunks))

    def _arrive(self, cid: int, direction: str, data: bytes) -> None:
        """Bytes reach the end of one pipe: the broker or the client host."""
        conn = self._conns[cid]
        if not conn.open:
            return
        if direction == "up":
            self._broker_reads(conn, data)
            return
        host = self.hosts.get(conn.host)
        if host is None or not host.alive:
            return
        inbox = self._inbox.get(cid)
        if inbox is not None or host.paused_until > self.now:
            # A paused host reads nothing; what arrives waits in order, in one inbox per
            # connection (separate deferred deliveries could be reordered by tie-breaks).
            if inbox is None:
                inbox = self._inbox[cid] = []
                self._at(host.paused_until, "inbox", (cid,))
            inbox.append(data)
            return
        host.machine.receive_data(conn.node, data, now=self._s())
        self._pump(host)

    def _broker_reads(self, conn: _Conn, data: bytes, *, note: str = "") -> None:
        """The broker end of ``conn`` reads ``data``: the requests it completes are served
        in order."""
        if conn.broker not in self.cluster.alive:
            return
        conn.decoder.feed(data)
        while (frame := conn.decoder.next_frame()) is not None:
            request = conn.read(frame, self.now)
            self.stats[f"api {request.api_key}{note}"] += 1
            if conn.outstanding is not None:
                conn.backlog.append(request)  # a broker reads on after it answered
            else:
                self._serve(conn, request)

    def _on_inbox(self, cid: int) -> None:
        host = self.hosts.get(self._conns[cid].host)
        if host is not None and host.alive and host.paused_until > self.now:
            self._at(host.paused_until, "inbox", (cid,))  # paused for longer
            return
        data = b"".join(self._inbox.pop(cid, []))
        if data:
            self._arrive(cid, "down", data)

    # ------------------------------------------------------------------ brokers

    def _serve(self, conn: _Conn, request: Any) -> None:
        """The broker handles one request of ``conn``; like Kafka, it takes the
        connection's next request only once this one is answered (a held Fetch or a parked
        JoinGroup holds up the rest: responses on a connection stay in order)."""
        conn.outstanding = request
        for body in self.cluster.handle(conn.broker, (conn.cid, request), request, self._s()):
            self._respond(conn, request, body)
        self._coordinator_out()
        self._arm_cluster_timers()

    def _respond(self, conn: _Conn, request: Any, body: Any) -> None:
        if conn.open:
            self._send(conn, "down", response_frame(request, body))
        if conn.outstanding is request:
            conn.outstanding = None
            if conn.backlog and conn.open:
                self._serve(conn, conn.backlog.pop(0))

    def _coordinator_out(self) -> None:
        for reply in self.cluster.coordinator.take_replies():
            cid, request = _token(reply.token)
            self._respond(self._conns[cid], request, reply.response)

    def _move_coordinator(self, node: int) -> None:
        """The group coordinator moves to broker ``node``: the groups are unloaded (parked
        requests answered NOT_COORDINATOR) and loaded there from their last records."""
        self.cluster.move_group_coordinator(node, now=self._s())
        self._coordinator_out()
        self._arm_cluster_timers()

    def _arm_cluster_timers(self) -> None:
        """One event for the coordinator's deadline and one for the held Fetches' (one
        that an earlier deadline replaces is taken off the schedule)."""
        due = self.cluster.coordinator.get_timer()
        if due is not None:
            t = _ms_at(due)
            if self._coord_timer is None or t < self._coord_timer[0]:
                if self._coord_timer is not None:
                    self._cancel(self._coord_timer[1])
                self._coord_timer = (t, self._at(t, "coordinator", ()))
        held = self.cluster.next_fetch_deadline()
        if held is not None:
            t = _ms_at(held)
            if self._fetch_timer is None or t < self._fetch_timer[0]:
                if self._fetch_timer is not None:
                    self._cancel(self._fetch_timer[1])
                self._fetch_timer = (t, self._at(t, "fetches", ()))

    def _on_coordinator(self) -> None:
        self._coord_timer = None
        self._coordinator_timer()
        self._coordinator_out()
        self._arm_cluster_timers()

    def _coordinator_timer(self) -> None:
        """The group coordinator's deadlines (the invariants look at what they do)."""
        self.cluster.coordinator.handle_timer(now=self._s())

    def _on_fetches(self) -> None:
        self._fetch_timer = None
        for token, request, body in self.cluster.due_fetches(self._s()):
            self._respond(self._conns[_token(token)[0]], request, body)
        self._arm_cluster_timers()

    # ------------------------------------------------------------------- faults

    def _draw_fault(self) -> str | None:
        """A fault tick: which of the run's fault kinds happens now; ``None`` (the zero
        draw, so a shrinker can take single faults out of the schedule) for none."""
        faults = self.config.faults
        pick = self.entropy.below(len(faults) + 1, "fault kind")
        return None if pick == 0 else faults[pick - 1]

    def _drew_fault(self, kind: str) -> None:
        """Note a drawn fault in the schedule (and the run's statistics)."""
        self.fault_log.append((self.now, kind))
        self.stats[f"fault {kind}"] += 1

    def _hold(self, name: str, node: int, ms: int) -> None:
        """Block the link between host ``name`` and broker ``node`` for ``ms``."""
        self._blocked.add((name, node))
        self._at(self.now + ms, "release", (name, node))

    def _releasable(self, conn: _Conn) -> bool:
        """Whether a released link sends again what ``conn`` had queued."""
        return conn.open

    def _on_release(self, name: str, node: int) -> None:
        self._blocked.discard((name, node))
        for conn in list(self._conns.values()):
            if (conn.host, conn.broker) == (name, node) and self._releasable(conn):
                for direction, data in self._queued.pop(conn.cid, []):
                    if conn.open or direction == "up":
                        self._resend(conn, direction, data)

    def _broker_down(self, node: int) -> None:
        """Broker ``node`` crashes: its connections reset."""
        self._line(f"fault crash b{node}")
        self.cluster.set_alive(node, False)
        self._crashed_brokers.add(node)
        for conn in list(self._conns.values()):
            if conn.broker == node:
                self._close(conn, notify_client=True)

    def _on_broker_up(self, node: int) -> None:
        if node not in self.cluster.alive:
            self._line(f"b{node} back")
            self.cluster.set_alive(node, True)
            self._crashed_brokers.discard(node)

    def _heal(self) -> None:
        """Undo the network's faults: links released, brokers back, pauses over."""
        self._chaos = False
        self._line("heal")
        for name, node in sorted(self._blocked):
            self._on_release(name, node)
        self._heal_more()
        for node in sorted(self._crashed_brokers):
            self._on_broker_up(node)
        for host in self.hosts.values():
            host.paused_until = min(host.paused_until, self.now)

    def _heal_more(self) -> None:
        """A world's own faults to undo before the brokers come back."""
