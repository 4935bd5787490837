"""The simulated world: virtual time, a TCP-like network, the cluster, consumer hosts running
kafkastate's real machines, the application model, faults, and the invariants.

Theory of operation
-------------------
One discrete-event loop (:class:`Sim`) over a heap of ``(time ms, tiebreak, sequence,
event)``. Virtual time jumps from event to event. Every decision -- network delays, which
faults happen and when, processing times, same-time tie-breaks -- is an
:class:`~kafkastate.sim.entropy.Entropy` draw whose zero is benign, so a run is a function
of the seed (or the tape) and the code: :attr:`Sim.trace` lines and their hash
(:meth:`Sim.trace_hash`) are identical on every replay (invariant D1).

The network is TCP-like: frames on one connection, in one direction, arrive in order
(``delivery = max(last delivery on that pipe, now + delay)``); reordering happens only across
connections. A blocked link (a network partition, or ``hold``) keeps frames queued until it
is released; a reset closes the connection at both ends and drops what was in flight.

Each consumer host runs a :class:`~kafkastate.core.consumer.consumer.ConsumerMachine` over a
:class:`~kafkastate.core.consumer.fetcher.FetcherMachine` with a classic
:class:`~kafkastate.core.consumer.group.GroupMember` -- the very code the adapters run, policy
included: the auto-commit before a revocation and the rebalance sequence around the listener
are the machine's -- and a small application: it polls, "processes" each batch for a drawn
time, commits what it processed, and runs the listener calls the machine asks for (taking
``revoke_ms`` over a revocation).

Phases: chaos (faults drawn from the swarm configuration), heal (every fault undone, crashed
nodes restarted), then a liveness window in which the group must settle (L1) and consume
every record (C2). Safety invariants are checked after every event; a violation stops the
run with :class:`InvariantViolation` naming it.

Invariants (../shared/DST.md A3.6): G0 legal coordinator transitions, G1 generations move by
+1, G3 no partition owned by two live members, G4 callback order (and eager members revoke
before JoinGroup), G5 the coordinator accepts only commits its rules allow, G6 an accepted
commit comes from the partition's owner in that generation, G7 a member is removed by
session expiry no earlier than its session allows, C1 no skipped offsets while ownership is
stable, PI a member that has not polled for ``max_poll_interval`` owns nothing, C2 every
record consumed, L1 the group settles with every partition owned once, D1 determinism, NET
a broker reads each connection's requests in order (the harness's own network: frames due
at the same millisecond on a pipe travel as one delivery, and a paused host's arrivals
wait in one inbox per connection, so tie-breaks never reorder a pipe).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Final

import attrs

from kafkastate.core.client import ClientConfig, CloseRequested, ConnectRequested
from kafkastate.core.consumer.assignors import (
    ASSIGNORS,
    Assignment,
    CooperativeStickyAssignor,
    RebalanceProtocol,
    decode_assignment,
)
from kafkastate.core.consumer.consumer import (
    AutoCommitted,
    ConsumerMachine,
    ListenerCallRequested,
)
from kafkastate.core.consumer.fetcher import (
    FetcherConfig,
    FetcherMachine,
    GroupFailed,
    OffsetsCommitted,
)
from kafkastate.core.consumer.group import GroupConfig, GroupMember, MemberState
from kafkastate.core.metadata import MetadataConfig, NodeId
from kafkastate.core.protocol.framing import FrameDecoder
from kafkastate.errors import KafkaError
from kafkastate.sim.cluster import SimCluster, parse_request, response_frame
from kafkastate.sim.coordinator import ClassicCoordinator, GroupState
from kafkastate.sim.entropy import Entropy
from kafkastate.structs import TopicPartition

__all__ = ["PLANTED_BUGS", "InvariantViolation", "Sim", "SimConfig", "run_seed"]

GROUP: Final = "sim-group"
TOPIC: Final = "events"
TICK_MS: Final = 100  # how often an idle application polls
AUTO_COMMIT_MS: Final = 2_000  # the application's commit period
PLANTED_BUGS: Final = (
    "coordinator_ignores_generation",
    "assign_before_revoke",
    "cooperative_moves_owned",
    "ignores_max_poll_interval",
)
"""Deliberately broken variants the harness must catch (its self-test)."""
FAULTS: Final = (
    "delay",
    "hold",
    "pause",
    "crash_member",
    "crash_broker",
    "reset",
    "coordinator_move",
)


class InvariantViolation(AssertionError):
    """A safety or liveness invariant failed; ``invariant`` is its id (G3, C2...)."""

    def __init__(self, invariant: str, message: str, *, at: int) -> None:
        super().__init__(f"{invariant} at t={at} ms: {message}")
        self.invariant = invariant
        self.at = at


@attrs.frozen(kw_only=True)
class SimConfig:
    """One run's options (drawn per seed by :meth:`draw`, or given)."""

    brokers: int = 1
    partitions: int = 4
    members: int = 3
    records: int = 20  # per partition, written at the start; as many again during chaos
    assignor: str = "range"
    static: bool = False
    session_ms: int = 10_000
    heartbeat_ms: int = 2_000
    max_poll_ms: int = 20_000
    chaos_ms: int = 40_000
    faults: tuple[str, ...] = ()
    fault_every_ms: int = 4_000
    latency_ms: int = 1
    commit_on_revoke: bool = True
    planted: str | None = None
    initial_delay_ms: int = 0  # group.initial.rebalance.delay.ms
    revoke_ms: int = 0  # how long the application's revoke callback works
    script: tuple[tuple[Any, ...], ...] = ()
    """Faults at fixed times, for scenarios: ``(ms, "pause", host, ms)``, ``(ms, "crash",
    host)``, ``(ms, "restart", host)``, ``(ms, "add", host)``, ``(ms, "hold", host, broker,
    ms)``, ``(ms, "coordinator_move", broker)``."""

    @classmethod
    def draw(cls, entropy: Entropy, *, planted: str | None = None) -> SimConfig:
        """A swarm configuration: sizes, protocol and timeouts, and the fault kinds this
        run uses (each on with probability 1/2 here; zero draws give the plain default)."""
        names = ["range", "roundrobin", "sticky", "cooperative-sticky"]
        assignor = names[entropy.below(len(names), "assignor")]
        if planted == "cooperative_moves_owned":
            assignor = "cooperative-sticky"
        if planted == "assign_before_revoke":
            assignor = "range"
        session = 6_000 + 2_000 * entropy.below(5, "session")
        faults = tuple(f for f in FAULTS if entropy.below(2, f"fault {f}"))
        if planted == "ignores_max_poll_interval" and "pause" not in faults:
            faults = (*faults, "pause")
        if planted == "coordinator_ignores_generation":
            faults = ("hold", "pause")  # what makes zombies, whose commits it must refuse
        return cls(
            brokers=1 + entropy.below(3, "brokers"),
            partitions=2 + entropy.below(5, "partitions"),
            members=2 + entropy.below(3, "members"),
            assignor=assignor,
            static=bool(entropy.below(2, "static")),
            session_ms=session,
            heartbeat_ms=session // 3 - 500 * entropy.below(2, "heartbeat"),
            max_poll_ms=session + 4_000 + 2_000 * entropy.below(4, "max poll"),
            faults=faults,
            fault_every_ms=2_000 + 1_000 * entropy.below(4, "fault rate"),
            latency_ms=1 + entropy.below(5, "latency"),
            commit_on_revoke=not entropy.below(4, "no commit on revoke"),
            planted=planted,
        )


# ----------------------------------------------------------------------------- planted


class _NoRevokeMember(GroupMember):
    """Planted: an eager member that joins again without revoking first."""

    def _prepare(self, now: float) -> None:
        del now
        self._rejoin = False
        self.state = MemberState.PREPARING


class _NoPollTimeoutMember(GroupMember):
    """Planted: a member that ignores ``max_poll_interval``."""

    def _poll_deadline(self) -> float | None:
        return None


class _GreedyCooperative(CooperativeStickyAssignor):
    """Planted: a "cooperative" assignor that hands out partitions still owned elsewhere
    (a plain round robin that ignores ownership)."""

    def assign(self, partitions_per_topic: Any, subscriptions: Any) -> dict[str, Assignment]:
        members = sorted(subscriptions)
        everything = [
            (t, p) for t in sorted(partitions_per_topic) for p in range(partitions_per_topic[t])
        ]
        shift = sum(len(s.owned_partitions) for s in subscriptions.values())
        out: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
        for i, tp in enumerate(everything):
            out[members[(i + shift) % len(members)]].append(tp)
        return {m: Assignment(partitions=tuple(sorted(tps))) for m, tps in out.items()}


# ------------------------------------------------------------------------------- hosts


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


@attrs.define
class _App:
    """The application around one machine: what it owns and is doing."""

    owned: set[tuple[str, int]] = attrs.Factory(set)
    busy_until: int = 0
    next_commit: int = 0
    last_poll: int = 0
    last_offset: dict[tuple[str, int], int] = attrs.Factory(dict)
    processed: dict[tuple[str, int], int] = attrs.Factory(dict)
    revoke_until: int | None = None
    calls: list[ListenerCallRequested] = attrs.Factory(list)  # the machine's, in order
    history: list[tuple[str, tuple[str, int]]] = attrs.Factory(list)  # callbacks per tp
    history_checked: int = 0  # how much of it G4 has read
    callback_state: dict[tuple[str, int], str] = attrs.Factory(dict)


class _AppListener:
    """What the machine is given as the listener: the simulator runs each call itself
    (bookkeeping, then the application's listener under test)."""

    def __init__(self, user: Any) -> None:
        if callable(getattr(user, "on_partitions_lost", None)):
            self.on_partitions_lost = self.on_partitions_revoked

    def on_partitions_revoked(self, revoked: Any) -> None:
        raise AssertionError("the simulator runs listener calls itself")

    def on_partitions_assigned(self, assigned: Any) -> None:
        raise AssertionError("the simulator runs listener calls itself")


class _Host:
    def __init__(self, name: str, machine: ConsumerMachine, incarnation: int) -> None:
        self.name = name
        self.machine = machine
        self.app = _App()
        self.incarnation = incarnation
        self.conns: dict[NodeId, _Conn] = {}
        self.timer_at: int | None = None
        self.alive = True
        self.paused_until = 0
        self.listener: Any = None  # the application's, when a test gives one
        self.last_timer = -1
        self.timer_serial = 0
        self.pauses: list[tuple[int, int]] = []  # stalls: (start, end) ms
        self.connecting: dict[NodeId, int] = {}  # the latest connect attempt per node
        self.spins = 0


# --------------------------------------------------------------------------------- sim


class Sim:
    """One simulated run.

    Args:
        entropy: every decision's source.
        config: the run's options.
        listener: the application's rebalance listener under test: called with a member's
            name when it starts (again after a crash), it returns an object with
            ``on_partitions_revoked``/``on_partitions_assigned`` (and optionally
            ``on_partitions_lost``), plain methods taking a set of ``TopicPartition``, run
            when that member's listener would run.
        check: the application's own invariant, called with the Sim after every event; an
            AssertionError fails the run as invariant ``USER``.
    """

    def __init__(
        self,
        entropy: Entropy,
        config: SimConfig,
        *,
        listener: Callable[[str], Any] | None = None,
        check: Callable[[Sim], None] | None = None,
    ) -> None:
        self.entropy = entropy
        self.config = config
        self._make_listener = listener
        self._user_check = check
        self.now = 0
        self.trace: list[str] = []
        self._heap: list[tuple[int, int, int, str, tuple[Any, ...]]] = []
        self._seq = 0
        coordinator = ClassicCoordinator(
            min_session_timeout=6.0, initial_rebalance_delay=config.initial_delay_ms / 1000
        )
        if config.planted == "coordinator_ignores_generation":
            real = coordinator.commit_error

            def lenient(group_id: str, generation: int, member_id: str, inst: str | None) -> int:
                code = real(group_id, generation, member_id, inst)
                return 0 if code in (22, 25) else code  # fencing of generation and member off

            coordinator.commit_error = lenient  # type: ignore[method-assign,assignment]
        self.cluster = SimCluster(config.brokers, coordinator)
        self.cluster.create_topic(TOPIC, config.partitions)
        self.hosts: dict[str, _Host] = {}
        self._conns: dict[int, _Conn] = {}
        self._next_conn = 0
        self._blocked: set[tuple[str, int]] = set()  # (host, node) links held
        self._queued: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
        # per (connection, direction): the delivery already due at the pipe's last time
        self._in_air: dict[tuple[int, str], tuple[int, list[bytes]]] = {}
        self._inbox: dict[int, list[bytes]] = {}  # arrived while the host was paused
        self._coord_timer: int | None = None
        self._fetch_timer: int | None = None
        self.consumed: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.written = 0
        self._generation = 0
        self._generations_seen = 0
        # member (instance id or member id) -> generation -> its assignment then
        self._assigned: dict[str, dict[int, set[tuple[str, int]]]] = {}
        self._chaos = True
        self._crashed_brokers: set[int] = set()
        self.stats: dict[str, int] = defaultdict(int)
        for p in range(config.partitions):
            self.cluster.append(TOPIC, p, [f"{p}:{i}".encode() for i in range(config.records)])
        self.written = config.records
        for i in range(config.members):
            self._start_host(f"m{i}")
        self._line(f"config {attrs.asdict(config)}")

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Chaos, heal, liveness window; raises InvariantViolation on the first failure."""
        cfg = self.config
        if cfg.faults:
            self._at(cfg.fault_every_ms, "fault", ())
        for t, action, *args in cfg.script:
            self._at(t, "script", (action, *args))
        for t in range(cfg.chaos_ms // 8, cfg.chaos_ms, cfg.chaos_ms // 8):
            self._at(t, "write", ())  # records keep coming while the faults happen
        self._run_until(cfg.chaos_ms)
        self._heal()
        window = 3 * cfg.max_poll_ms + 2 * cfg.session_ms + 10_000
        deadline = self.now + window
        while self.now < deadline:
            self._run_until(min(deadline, self.now + 1_000))
            if self._settled() and self._all_consumed():
                break
        self._check_liveness()

    # -- stepwise control, for a Hypothesis RuleBasedStateMachine (faults by rule)

    def run_for(self, ms: int) -> None:
        """Advance virtual time by ``ms``, checking the safety invariants after each event."""
        self._run_until(self.now + ms)

    def act(self, action: str, *args: Any) -> None:
        """Apply one scripted action now (see :attr:`SimConfig.script`)."""
        self._on_script(action, *args)

    def write(self) -> None:
        """Append the configured number of records to every partition."""
        self._on_write()

    def heal_and_settle(self) -> None:
        """Undo every fault, then run the liveness window; raises on L1/C2."""
        cfg = self.config
        self._heal()
        deadline = self.now + 3 * cfg.max_poll_ms + 2 * cfg.session_ms + 10_000
        while self.now < deadline:
            self._run_until(min(deadline, self.now + 1_000))
            if self._settled() and self._all_consumed():
                break
        self._check_liveness()

    def trace_hash(self) -> str:
        """sha256 of the trace: equal for equal (seed, config, code) -- D1."""
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()

    def _run_until(self, until: int) -> None:
        while self._heap and self._heap[0][0] <= until:
            t, _tb, _seq, kind, args = heapq.heappop(self._heap)
            self.now = t
            try:
                getattr(self, f"_on_{kind}")(*args)
            except InvariantViolation:
                raise
            except AssertionError as exc:  # the coordinator model's own transition check
                raise InvariantViolation("G0", str(exc), at=self.now) from exc
            self._check_safety(kind)
        self.now = max(self.now, until)

    def _at(self, t: int, kind: str, args: tuple[Any, ...]) -> None:
        tiebreak = self.entropy.below(4, "tiebreak") if self.config.faults else 0
        self._seq += 1
        heapq.heappush(self._heap, (max(t, self.now), tiebreak, self._seq, kind, args))

    def _line(self, text: str) -> None:
        self.trace.append(f"{self.now} {text}")

    # -------------------------------------------------------------------- hosts

    def _start_host(self, name: str) -> None:
        cfg = self.config
        old = self.hosts.get(name)
        incarnation = 0 if old is None else old.incarnation + 1
        client = ClientConfig(
            bootstrap_servers=[(f"b{n}", 9092) for n in self.cluster.nodes],
            metadata=MetadataConfig(retry_backoff=0.1),
        )
        fetcher = FetcherConfig(
            client=client,
            group_id=GROUP,
            auto_offset_reset="earliest",
            use_fetch_sessions=False,
            fetch_max_wait=0.5,
        )
        assignor: Any = ASSIGNORS[cfg.assignor]()
        if cfg.planted == "cooperative_moves_owned":
            assignor = _GreedyCooperative()
        group = GroupConfig(
            group_id=GROUP,
            assignors=(assignor,),
            session_timeout=cfg.session_ms / 1000,
            heartbeat_interval=cfg.heartbeat_ms / 1000,
            max_poll_interval=cfg.max_poll_ms / 1000,
            request_timeout=max(10.0, cfg.session_ms / 1000),
            group_instance_id=f"static-{name}" if cfg.static else None,
        )
        rng = random.Random(self.entropy.below(1 << 30, f"rng {name}"))
        inner = FetcherMachine(fetcher, rng=rng, group=group)
        if cfg.planted == "assign_before_revoke":
            setattr(inner, "member", _NoRevokeMember(group))  # noqa: B010
        elif cfg.planted == "ignores_max_poll_interval":
            setattr(inner, "member", _NoPollTimeoutMember(group))  # noqa: B010
        # The application commits what it processed before a revocation exactly when its
        # consumer auto-commits; its periodic commits are the auto-commit's timer.
        machine = ConsumerMachine(
            inner,
            max_poll_records=50,
            auto_commit=cfg.commit_on_revoke,
            auto_commit_interval=AUTO_COMMIT_MS / 1000,
        )
        host = _Host(name, machine, incarnation)
        if self._make_listener is not None:
            host.listener = self._make_listener(name)
        host.app.last_poll = self.now
        self.hosts[name] = host
        machine.subscribe([TOPIC], listener=_AppListener(host.listener), now=self._s())
        self._line(f"{name} start #{incarnation}")
        self._pump(host)
        self._at(self.now, "app", (name, incarnation))

    def _s(self) -> float:
        return self.now / 1000

    def _pump(self, host: _Host) -> None:
        """Drain the machine: events, bytes, listener calls, its next deadline."""
        if not host.alive:
            return
        m = host.machine
        self._drain(host)
        self._group_step(host)
        timer = m.get_timer()
        if timer is not None:
            due = max(self.now, _ms_at(timer))
            if host.timer_at is None or due < host.timer_at:
                host.timer_at = due  # the one timer event that counts (earlier ones lapse)
                host.timer_serial += 1
                self._at(due, "timer", (host.name, host.incarnation, host.timer_serial))

    def _drain(self, host: _Host) -> None:
        """The machine's events and bytes."""
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
                        self._close(conn, notify_client=False)
                case ListenerCallRequested():
                    host.app.calls.append(event)
                case OffsetsCommitted(error=error) | AutoCommitted(error=error):
                    self.stats["commit ok" if error is None else "commit failed"] += 1
                case GroupFailed(error=error):
                    self._line(f"{host.name} group failed {error!r}")
                case _:
                    pass
        for node, data in m.data_to_send():
            conn = host.conns.get(node)
            if conn is not None and conn.open:
                self._send(conn, "up", data)

    def _group_step(self, host: _Host) -> None:
        """Run the listener calls the machine asked for, in order (a revocation takes the
        application ``revoke_ms``), with the application's bookkeeping."""
        app, m = host.app, host.machine
        while app.calls:
            call = app.calls[0]
            if call.callback != "on_partitions_assigned":
                if self.config.revoke_ms and app.revoke_until is None:
                    app.revoke_until = self.now + self.config.revoke_ms
                    self._at(app.revoke_until, "revoked", (host.name, host.incarnation))
                if app.revoke_until is not None and self.now < app.revoke_until:
                    return  # the listener is still working
                app.revoke_until = None
                lost = call.callback == "on_partitions_lost"
                self._call_listener(host, call)
                for tp in call.partitions:
                    app.history.append(("lost" if lost else "revoked", tp))
                    app.owned.discard(tp)
                    app.last_offset.pop(tp, None)
                    app.processed.pop(tp, None)
                self._line(f"{host.name} revoked {list(call.partitions)} lost={lost}")
            else:
                self._call_listener(host, call)
                for tp in call.partitions:
                    app.history.append(("assigned", tp))
                    app.last_offset.pop(tp, None)
                app.owned = set(m.assignment())
                self._line(f"{host.name} assigned {list(m.assignment())} gen={m.member.generation}")
            app.calls.pop(0)
            m.listener_done(call.call_id, error=None, now=self._s())
            self._drain(host)  # what finishing the step set off (it may ask the next call)

    def _call_listener(self, host: _Host, call: ListenerCallRequested) -> None:
        listener = host.listener
        if listener is None:
            return
        try:
            getattr(listener, call.method)({TopicPartition(*tp) for tp in call.partitions})
        except Exception as exc:
            raise InvariantViolation(
                "LISTENER", f"{host.name}: {call.callback} raised {exc!r}", at=self.now
            ) from exc

    # ------------------------------------------------------------------ network

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
        if (conn.host, conn.broker) in self._blocked:
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

    # ------------------------------------------------------------------- events

    def _live(self, name: str, incarnation: int) -> _Host | None:
        host = self.hosts.get(name)
        if host is None or not host.alive or host.incarnation != incarnation:
            return None
        return host

    def _deferred(self, host: _Host, kind: str, args: tuple[Any, ...]) -> bool:
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
            if conn.broker not in self.cluster.alive:
                return
            conn.decoder.feed(data)
            while (frame := conn.decoder.next_frame()) is not None:
                request = conn.read(frame, self.now)
                self.stats[f"api {request.api_key}"] += 1
                if conn.outstanding is not None:
                    conn.backlog.append(request)  # a broker reads on after it answered
                else:
                    self._serve(conn, request)
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

    def _on_inbox(self, cid: int) -> None:
        host = self.hosts.get(self._conns[cid].host)
        if host is not None and host.alive and host.paused_until > self.now:
            self._at(host.paused_until, "inbox", (cid,))  # paused for longer
            return
        data = b"".join(self._inbox.pop(cid, []))
        if data:
            self._arrive(cid, "down", data)

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

    def _arm_cluster_timers(self) -> None:
        due = self.cluster.coordinator.get_timer()
        if due is not None:
            t = _ms_at(due)
            if self._coord_timer is None or t < self._coord_timer:
                self._coord_timer = t
                self._at(t, "coordinator", ())
        held = self.cluster.next_fetch_deadline()
        if held is not None:
            t = _ms_at(held)
            if self._fetch_timer is None or t < self._fetch_timer:
                self._fetch_timer = t
                self._at(t, "fetches", ())

    def _on_coordinator(self) -> None:
        self._coord_timer = None
        group = self.cluster.coordinator.groups.get(GROUP)
        deadlines = (
            {}
            if group is None
            else {m: member.heartbeat_deadline for m, member in group.members.items()}
        )
        phase_over = group is not None and any(
            t is not None and t <= self._s() for t in (group.join_deadline, group.sync_deadline)
        )  # members that missed a join or sync deadline go too, whatever their session says
        self.cluster.coordinator.handle_timer(now=self._s())
        after = self._members_at_generation()
        for member_id, deadline in deadlines.items():
            if member_id not in after:
                self.stats["session expired"] += 1
                if self._s() < deadline and not phase_over:  # G7: not before its session ends
                    raise InvariantViolation(
                        "G7", f"{member_id} expired {deadline - self._s():.3f} s early", at=self.now
                    )
        self._coordinator_out()
        self._arm_cluster_timers()

    def _on_fetches(self) -> None:
        self._fetch_timer = None
        for token, request, body in self.cluster.due_fetches(self._s()):
            self._respond(self._conns[_token(token)[0]], request, body)
        self._arm_cluster_timers()

    def _on_timer(self, name: str, incarnation: int, serial: int) -> None:
        host = self._live(name, incarnation)
        if host is None or serial != host.timer_serial:
            return
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

    def _on_app(self, name: str, incarnation: int) -> None:
        """One turn of the application: poll, process, commit."""
        host = self._live(name, incarnation)
        if host is None or self._deferred(host, "app", (name, incarnation)):
            return
        app, m = host.app, host.machine
        if self.now < app.busy_until:
            self._at(app.busy_until, "app", (name, incarnation))
            return
        self._check_poll_interval(host)
        app.last_poll = self.now
        try:
            runs = m.poll(50, now=self._s())
        except KafkaError as exc:
            self._line(f"{name} poll error {exc!r}")
            runs = []
        took = 0
        for tp, records, _epoch in runs:
            for record in records:
                last = app.last_offset.get(tp)
                if last is not None and record.offset != last + 1:
                    raise InvariantViolation(
                        "C1", f"{name} skipped from {last} to {record.offset} on {tp}", at=self.now
                    )
                app.last_offset[tp] = record.offset
                self.consumed[tp].add(record.offset)
                took += 1
            app.processed[tp] = records[-1].offset + 1
        periodic = not self.config.commit_on_revoke  # else the auto-commit's timer does it
        if took or (periodic and app.processed and self.now >= app.next_commit):
            # after each batch, and every 2 s anyway
            m.commit(dict(app.processed), now=self._s())
            app.next_commit = self.now + AUTO_COMMIT_MS
        if took:
            self._line(f"{name} polled {took}")
            stall = self.entropy.below(10, "processing")
            app.busy_until = self.now + 10 * stall
            if (
                "pause" in self.config.faults
                and self._chaos
                and self.entropy.below(6, "slow app") == 1
            ):
                app.busy_until = (
                    self.now + self.config.max_poll_ms + self.config.heartbeat_ms + 5_000
                )
                self._line(f"{name} processes slowly until {app.busy_until}")
        self._pump(host)
        self._at(max(app.busy_until, self.now + TICK_MS), "app", (name, incarnation))

    def _on_write(self) -> None:
        cfg = self.config
        for p in range(cfg.partitions):
            self.cluster.append(
                TOPIC,
                p,
                [f"{p}:{i}".encode() for i in range(self.written, self.written + cfg.records)],
            )
        self.written += cfg.records
        self._line("write")
        for token, request, body in self.cluster.due_fetches(self._s()):
            conn = self._conns[_token(token)[0]]
            if conn.open:
                self._send(conn, "down", response_frame(request, body))

    # ------------------------------------------------------------------- faults

    def _on_fault(self) -> None:
        if not self._chaos:
            return
        cfg = self.config
        kind = cfg.faults[self.entropy.below(len(cfg.faults), "fault kind")]
        names = sorted(self.hosts)
        name = names[self.entropy.below(len(names), "fault host")]
        host = self.hosts[name]
        node = self.cluster.nodes[self.entropy.below(len(self.cluster.nodes), "fault node")]
        self.stats[f"fault {kind}"] += 1
        if kind == "hold":
            self._blocked.add((name, node))
            self._line(f"fault hold {name}<->b{node}")
            self._at(
                self.now + 500 * (1 + self.entropy.below(20, "hold ms")), "release", (name, node)
            )
        elif kind == "pause" and host.alive:
            ms = 1_000 * (1 + self.entropy.below(cfg.session_ms // 1000 + 4, "pause ms"))
            host.paused_until = self.now + ms
            host.pauses.append((self.now, self.now + ms))
            self._line(f"fault pause {name} {ms} ms")
        elif kind == "crash_member" and host.alive:
            self._crash_host(host)
            self._at(
                self.now + 1_000 * (1 + self.entropy.below(cfg.session_ms // 500, "down")),
                "restart",
                (name,),
            )
        elif kind == "crash_broker" and node in self.cluster.alive and len(self.cluster.alive) > 1:
            self._line(f"fault crash b{node}")
            self.cluster.set_alive(node, False)
            self._crashed_brokers.add(node)
            for conn in list(self._conns.values()):
                if conn.broker == node:
                    self._close(conn, notify_client=True)
            self._at(
                self.now + 1_000 * (1 + self.entropy.below(10, "broker down")), "broker_up", (node,)
            )
        elif kind == "reset":
            found = [c for c in host.conns.values() if c.broker == node]
            if found:
                conn = found[0]
                self._line(f"fault reset {name}<->b{node}")
                self._close(conn, notify_client=True)
        elif kind == "coordinator_move" and len(self.cluster.alive) > 1:
            live = sorted(self.cluster.alive)
            self.cluster.coordinator_node = live[self.entropy.below(len(live), "coordinator")]
            self._line(f"fault coordinator -> b{self.cluster.coordinator_node}")
        self._at(self.now + cfg.fault_every_ms, "fault", ())

    def _crash_host(self, host: _Host) -> None:
        self._line(f"fault crash {host.name}")
        host.alive = False
        for conn in list(host.conns.values()):
            self._close(conn, notify_client=False)
        host.conns.clear()

    def _on_script(self, action: str, *args: Any) -> None:
        self._line(f"script {action} {args}")
        if action == "pause":
            name, ms = args
            self.hosts[name].paused_until = self.now + ms
            self.hosts[name].pauses.append((self.now, self.now + ms))
        elif action == "crash":
            self._crash_host(self.hosts[args[0]])
        elif action in ("restart", "add"):
            self._start_host(args[0])
        elif action == "hold":
            name, broker, ms = args
            self._blocked.add((name, broker))
            self._at(self.now + ms, "release", (name, broker))
        elif action == "coordinator_move":
            self.cluster.coordinator_node = args[0]
        else:
            raise ValueError(f"unknown script action {action!r}")

    def _on_revoked(self, name: str, incarnation: int) -> None:
        host = self._live(name, incarnation)
        if host is not None:
            self._pump(host)

    def _on_restart(self, name: str) -> None:
        if self._chaos or not self.hosts[name].alive:
            self._start_host(name)

    def _on_release(self, name: str, node: int) -> None:
        self._blocked.discard((name, node))
        for conn in list(self._conns.values()):
            if (conn.host, conn.broker) == (name, node) and conn.open:
                for direction, data in self._queued.pop(conn.cid, []):
                    self._send(conn, direction, data)

    def _on_broker_up(self, node: int) -> None:
        if node not in self.cluster.alive:
            self._line(f"b{node} back")
            self.cluster.set_alive(node, True)
            self._crashed_brokers.discard(node)

    def _heal(self) -> None:
        self._chaos = False
        self._line("heal")
        for name, node in sorted(self._blocked):
            self._on_release(name, node)
        for node in sorted(self._crashed_brokers):
            self._on_broker_up(node)
        for name, host in sorted(self.hosts.items()):
            host.paused_until = min(host.paused_until, self.now)
            if not host.alive:
                self._start_host(name)

    # --------------------------------------------------------------- invariants

    def _members_at_generation(self) -> dict[str, int]:
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None:
            return {}
        return {m: group.generation for m in group.members}

    def live_owners(self) -> dict[str, set[tuple[str, int]]]:
        """Hosts the coordinator has at its current generation, with what their
        application owns."""
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None:
            return {}
        out = {}
        for name, host in self.hosts.items():
            member = host.machine.member
            if (
                host.alive
                and isinstance(member, GroupMember)
                and member.member_id in group.members
                and member.generation == group.generation
            ):
                out[name] = host.app.owned
        return out

    def _check_safety(self, kind: str) -> None:
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is not None:
            # every generation begun is the one before + 1 (several may begin in one event:
            # a join completing, then the group emptying)
            for generation in group.generations[self._generations_seen :]:
                if generation != self._generation + 1:
                    raise InvariantViolation(
                        "G1", f"generation {self._generation} -> {generation}", at=self.now
                    )
                self._generation = generation
            self._generations_seen = len(group.generations)
        owners = self.live_owners()
        seen: dict[tuple[str, int], str] = {}
        for name, owned in sorted(owners.items()):
            for tp in sorted(owned):
                if tp in seen:
                    raise InvariantViolation(
                        "G3", f"{tp} owned by {seen[tp]} and {name} in one generation", at=self.now
                    )
                seen[tp] = name
        for host in self.hosts.values():
            member = host.machine.member
            if (
                host.alive
                and isinstance(member, GroupMember)
                and member.config.rebalance_protocol is RebalanceProtocol.EAGER
                and "join" in member._in_flight
                and host.app.owned
            ):
                raise InvariantViolation(
                    "G4",
                    f"{host.name} sent JoinGroup owning {sorted(host.app.owned)} (eager)",
                    at=self.now,
                )
            self._check_callback_order(host)
        self._check_commits()
        self.trace.append(f"{self.now} {kind} gen={self._generation} {self._ownership()}")
        if self._user_check is not None:
            try:
                self._user_check(self)
            except AssertionError as exc:
                raise InvariantViolation("USER", str(exc), at=self.now) from exc

    def _check_callback_order(self, host: _Host) -> None:
        """G4 per partition: assigned, then revoked or lost, then assigned... (only the
        callbacks since the last check are read)."""
        app = host.app
        for what, tp in app.history[app.history_checked :]:
            before = app.callback_state.get(tp, "revoked")
            if (what == "assigned") == (before == "assigned"):
                raise InvariantViolation(
                    "G4", f"{host.name}: {what} {tp} after {before}", at=self.now
                )
            app.callback_state[tp] = "assigned" if what == "assigned" else "revoked"
        app.history_checked = len(app.history)

    def _check_commits(self) -> None:
        """G5/G6: every commit the coordinator accepted since the last check came from a
        member of the current generation, for a partition it was assigned in this
        generation or the one before (cooperative members commit what they revoke after
        the new generation started)."""
        coordinator = self.cluster.coordinator
        group = coordinator.groups.get(GROUP)
        if group is None:
            return
        for member_id, member in group.members.items():
            if member.assignment and group.state is GroupState.STABLE:
                # by instance id when static: a restarted static member has a new member id
                history = self._assigned.setdefault(member.instance_id or member_id, {})
                if group.generation not in history:
                    history[group.generation] = set(decode_assignment(member.assignment).partitions)
        while coordinator.accepted:
            member_id, generation, tp, current = coordinator.accepted.pop(0)
            if generation < 0:
                continue  # a manual commit to an empty group
            if generation != current:
                raise InvariantViolation(
                    "G5",
                    f"a commit of generation {generation} accepted in generation {current}",
                    at=self.now,
                )
            committer = group.members.get(member_id)
            history = self._assigned.get(
                member_id if committer is None else committer.instance_id or member_id, {}
            )
            if generation not in history:
                continue  # not seen stable yet
            earlier = [g for g in history if g < generation]
            allowed = history[generation] | (history[max(earlier)] if earlier else set())
            if tp not in allowed:
                raise InvariantViolation(
                    "G6", f"{member_id} committed {tp} it does not own", at=self.now
                )

    def _check_poll_interval(self, host: _Host) -> None:
        """PI: an application that has not polled for max_poll_interval owns nothing (time
        the whole process stood still does not count: its member could not act either)."""
        since = host.app.last_poll
        stalled = sum(max(0, min(end, self.now) - max(start, since)) for start, end in host.pauses)
        idle = self.now - since - stalled  # a stalled process cannot notice anything
        limit = self.config.max_poll_ms + self.config.heartbeat_ms + 2_000
        if idle > limit and host.app.owned and not host.machine.rebalancing:
            raise InvariantViolation(
                "PI",
                f"{host.name} did not poll for {idle} ms and still owns {sorted(host.app.owned)}",
                at=self.now,
            )

    def _ownership(self) -> str:
        return " ".join(
            f"{n}:{sorted(p for _t, p in h.app.owned)}"
            for n, h in sorted(self.hosts.items())
            if h.alive
        )

    def _settled(self) -> bool:
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None or group.state is not GroupState.STABLE:
            return False
        owners = self.live_owners()
        alive = [h for h in self.hosts.values() if h.alive]
        every = sorted(tp for owned in owners.values() for tp in owned)
        wanted = [(TOPIC, p) for p in range(self.config.partitions)]
        return len(owners) == len(alive) == len(group.members) and every == wanted

    def _all_consumed(self) -> bool:
        return all(
            len(self.consumed[(TOPIC, p)]) >= self.written for p in range(self.config.partitions)
        )

    def _check_liveness(self) -> None:
        if not self._settled():
            raise InvariantViolation(
                "L1", f"the group did not settle: {self._ownership()}", at=self.now
            )
        missing = {
            p: self.written - len(self.consumed[(TOPIC, p)])
            for p in range(self.config.partitions)
            if len(self.consumed[(TOPIC, p)]) < self.written
        }
        if missing:
            raise InvariantViolation("C2", f"records never consumed: {missing}", at=self.now)


def _ms_at(seconds: float) -> int:
    """The first virtual millisecond at which a machine's deadline ``seconds`` is due."""
    t = math.ceil(seconds * 1000)
    while t / 1000 < seconds:
        t += 1
    return t


def _token(token: Any) -> tuple[int, Any]:
    """``(connection id, request)`` of a request token."""
    cid, request = token
    return int(cid), request


def run_seed(
    seed: int,
    *,
    planted: str | None = None,
    listener: Callable[[str], Any] | None = None,
    check: Callable[[Sim], None] | None = None,
    **overrides: Any,
) -> Sim:
    """Run the swarm configuration of ``seed`` to its end; the same arguments give the same
    run, event for event (that is the replay).

    Args:
        seed: picks everything: sizes, timeouts, faults, delays.
        planted: one of :data:`PLANTED_BUGS`, for the harness's self-test.
        listener: see :class:`Sim`.
        check: see :class:`Sim`.
        overrides: :class:`SimConfig` fields to fix instead of drawing them (``faults``,
            ``members``...).

    Returns:
        The finished Sim (its ``trace``, ``consumed`` records, ``stats``).

    Raises:
        InvariantViolation: the first invariant that failed (its ``invariant`` id).
    """
    from kafkastate.sim.entropy import SeededEntropy  # noqa: PLC0415

    entropy = SeededEntropy(seed)
    config = attrs.evolve(SimConfig.draw(entropy, planted=planted), **overrides)
    sim = Sim(entropy, config, listener=listener, check=check)
    sim.run()
    return sim
