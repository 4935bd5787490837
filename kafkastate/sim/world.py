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
stable, P4 each record read is the value written at its offset, PI a member that has not
polled for ``max_poll_interval`` owns nothing, G2 a Stable group's assignments give every
partition to exactly one member, C2 every record consumed, L1 the group settles with
every partition owned once, D1 determinism, TIME virtual time never runs backwards, NET
a broker reads each connection's requests in order (the harness's own network: frames due
at the same millisecond on a pipe travel as one delivery, and a paused host's arrivals
wait in one inbox per connection, so tie-breaks never reorder a pipe).

Layout, by job (shared with the transactional world, :mod:`kafkastate.sim.txnworld`):
:mod:`~kafkastate.sim.scheduler` (virtual time, the event heap, the trace),
:mod:`~kafkastate.sim.network` (connections, pipes, holds, resets, the brokers' end),
:mod:`~kafkastate.sim.host` (the host driver: a machine driven through the adapters'
surface), :mod:`~kafkastate.sim.app` (the consumer application model),
:mod:`~kafkastate.sim.invariants` and :mod:`~kafkastate.sim.planted` (the self-test's
bugs, from public surface only). This module keeps the configuration, the faults and
:class:`Sim`, which stacks them.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Final, cast

import attrs

from kafkastate.core.client import ClientConfig
from kafkastate.core.consumer.assignors import ASSIGNORS
from kafkastate.core.consumer.consumer import ConsumerMachine
from kafkastate.core.consumer.fetcher import FetcherConfig, FetcherMachine, GroupFailed
from kafkastate.core.consumer.group import GroupConfig
from kafkastate.core.consumer.group848 import ConsumerGroupConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.errors import FencedInstanceIdError
from kafkastate.sim.app import AUTO_COMMIT_MS, GROUP, TOPIC, _AppListener, _GroupHost
from kafkastate.sim.cluster import SimCluster
from kafkastate.sim.coordinator import ClassicCoordinator
from kafkastate.sim.entropy import Entropy
from kafkastate.sim.invariants import GroupInvariants
from kafkastate.sim.planted import (
    CommitsOthers,
    CommitsPlan,
    DropsLastPartition,
    GreedyCooperative,
    IgnoresPollInterval,
    SkipsRecords,
    SkipsRevocation,
    hasty_sessions,
    hides_the_tail,
    lenient_commits,
    skips_generations,
    stalls_rebalances,
    syncs_while_preparing,
)
from kafkastate.sim.scheduler import InvariantViolation

__all__ = [
    "FAULTS",
    "PLANTED_BUGS",
    "PLANTED_CATCHES",
    "InvariantViolation",
    "Sim",
    "SimConfig",
    "run_seed",
]

PLANTED_BUGS: Final = (
    "coordinator_ignores_generation",
    "assign_before_revoke",
    "cooperative_moves_owned",
    "ignores_max_poll_interval",
    "assignor_drops_partition",
    "coordinator_skips_generation",
    "coordinator_expires_early",
    "consumer_commits_unowned",
    "consumer_skips_records",
    "broker_hides_tail",
    "coordinator_stalls_rebalances",
    "coordinator_syncs_while_preparing",
    "consumer_commits_before_assignment",
)
"""Deliberately broken variants the harness must catch (its self-test)."""
PLANTED_CATCHES: Final = {
    "coordinator_ignores_generation": "G5",
    "assign_before_revoke": "G4",
    "cooperative_moves_owned": "G3",
    "ignores_max_poll_interval": "PI",
    "assignor_drops_partition": "G2",
    "coordinator_skips_generation": "G1",
    "coordinator_expires_early": "G7",
    "consumer_commits_unowned": "G6",
    "consumer_skips_records": "C1",
    "broker_hides_tail": "C2",
    "coordinator_stalls_rebalances": "L1",
    "coordinator_syncs_while_preparing": "G0",
    "consumer_commits_before_assignment": "G6",
}
"""The invariant that must catch each planted bug (and no other before it)."""
FAULTS: Final = (
    "delay",
    "hold",
    "pause",
    "crash_member",
    "crash_broker",
    "reset",
    "coordinator_move",
)


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
        if planted in ("assign_before_revoke", "assignor_drops_partition"):
            assignor = "range"
        session = 6_000 + 2_000 * entropy.below(5, "session")
        faults = tuple(f for f in FAULTS if entropy.below(2, f"fault {f}"))
        if planted == "ignores_max_poll_interval" and "pause" not in faults:
            faults = (*faults, "pause")
        if planted == "coordinator_ignores_generation":
            faults = ("hold", "pause")  # what makes zombies, whose commits it must refuse
        if planted == "coordinator_stalls_rebalances":
            faults = ("crash_member",)  # a rebalance after the first generation
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


# --------------------------------------------------------------------------------- sim


class Sim(GroupInvariants):
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
        super().__init__(entropy, config, self._make_cluster(config))
        self._make_listener = listener
        self._user_check = check
        self.cluster.create_topic(TOPIC, config.partitions)
        self.consumed: dict[tuple[str, int], set[int]] = defaultdict(set)
        self._generation = 0
        self._generations_seen = 0
        # member (instance id or member id) -> generation -> its assignment then
        self._assigned: dict[str, dict[int, set[tuple[str, int]]]] = {}
        # member (instance id or member id) -> the generations whose assignment it received
        self._received: dict[str, set[int]] = {}
        for p in range(config.partitions):
            self.cluster.append(TOPIC, p, [f"{p}:{i}".encode() for i in range(config.records)])
        self.written = config.records
        for i in range(config.members):
            self._start_host(f"m{i}")
        self._line(f"config {attrs.asdict(config)}")

    def _make_cluster(self, config: SimConfig) -> SimCluster:
        """The cluster and its group coordinator (planted bugs applied)."""
        coordinator = ClassicCoordinator(
            min_session_timeout=6.0, initial_rebalance_delay=config.initial_delay_ms / 1000
        )
        if config.planted == "coordinator_ignores_generation":
            lenient_commits(coordinator)
        elif config.planted == "coordinator_skips_generation":
            skips_generations(coordinator)
        elif config.planted == "coordinator_expires_early":
            hasty_sessions(coordinator)
        elif config.planted == "coordinator_stalls_rebalances":
            stalls_rebalances(coordinator)
        elif config.planted == "coordinator_syncs_while_preparing":
            syncs_while_preparing(coordinator)
        cluster = SimCluster(config.brokers, coordinator)
        if config.planted == "broker_hides_tail":
            hides_the_tail(cluster)
        return cluster

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
        rng = random.Random(self.entropy.below(1 << 30, f"rng {name}"))
        inner = FetcherMachine(fetcher, rng=rng, group=self._group_config(name))
        # The application commits what it processed before a revocation exactly when its
        # consumer auto-commits; its periodic commits are the auto-commit's timer.
        machine = ConsumerMachine(
            inner,
            max_poll_records=50,
            auto_commit=cfg.commit_on_revoke,
            auto_commit_interval=AUTO_COMMIT_MS / 1000,
        )
        if cfg.planted == "assign_before_revoke":
            machine = cast(ConsumerMachine, SkipsRevocation(machine, self._s))
        elif cfg.planted == "ignores_max_poll_interval":
            machine = cast(ConsumerMachine, IgnoresPollInterval(machine))
        elif cfg.planted == "consumer_skips_records":
            machine = cast(ConsumerMachine, SkipsRecords(machine))
        elif cfg.planted == "consumer_commits_unowned":
            machine = cast(ConsumerMachine, CommitsOthers(machine, cfg.partitions, TOPIC))
        elif cfg.planted == "consumer_commits_before_assignment":
            machine = cast(ConsumerMachine, CommitsPlan(machine))
        host = _GroupHost(name, machine, incarnation)
        if self._make_listener is not None:
            host.listener = self._make_listener(name)
        host.app.last_poll = self.now
        self.hosts[name] = host
        self._owned_serial += 1  # a host started: the ownership view changes
        machine.subscribe([TOPIC], listener=_AppListener(host.listener), now=self._s())
        self._line(f"{name} start #{incarnation}")
        self._pump(host)
        self._turn_at(host, self.now)

    def _group_config(self, name: str) -> GroupConfig | ConsumerGroupConfig:
        """Host ``name``'s group membership settings."""
        cfg = self.config
        assignor: Any = ASSIGNORS[cfg.assignor]()
        if cfg.planted == "cooperative_moves_owned":
            assignor = GreedyCooperative()
        elif cfg.planted == "assignor_drops_partition":
            assignor = DropsLastPartition()
        return GroupConfig(
            group_id=GROUP,
            assignors=(assignor,),
            session_timeout=cfg.session_ms / 1000,
            heartbeat_interval=cfg.heartbeat_ms / 1000,
            max_poll_interval=cfg.max_poll_ms / 1000,
            request_timeout=max(10.0, cfg.session_ms / 1000),
            group_instance_id=f"static-{name}" if cfg.static else None,
        )

    restarted_on: tuple[type[Exception], ...] = (FencedInstanceIdError,)
    """Errors fatal for a consumer, as in Java, that its application meets by starting the
    consumer again a second later, as a supervisor would. FENCED_INSTANCE_ID: a static
    member meets it when a coordinator failover loads its instance under the member id of
    the last record, not the one it joined with since (the new consumer takes the instance
    over)."""

    def _on_machine_event(self, host: _GroupHost, event: Any) -> bool:
        super()._on_machine_event(host, event)
        if isinstance(event, GroupFailed) and isinstance(event.error, self.restarted_on):
            self._crash_host(host)
            self._at(self.now + 1_000, "restart", (host.name,))
            return False
        return True

    # ------------------------------------------------------------------- faults

    def _on_fault(self) -> None:
        if not self._chaos:
            return
        cfg = self.config
        kind = self._draw_fault()
        if kind is None:  # a quiet tick
            self._at(self.now + cfg.fault_every_ms, "fault", ())
            return
        names = sorted(self.hosts)
        name = names[self.entropy.below(len(names), "fault host")]
        host = self.hosts[name]
        node = self.cluster.nodes[self.entropy.below(len(self.cluster.nodes), "fault node")]
        self._drew_fault(kind)
        if kind == "hold":
            self._line(f"fault hold {name}<->b{node}")
            self._hold(name, node, 500 * (1 + self.entropy.below(20, "hold ms")))
        elif kind == "pause" and host.alive:
            ms = 1_000 * (1 + self.entropy.below(cfg.session_ms // 1000 + 4, "pause ms"))
            self._stall(host, ms)
            self._line(f"fault pause {name} {ms} ms")
        elif kind == "crash_member" and host.alive:
            self._crash_host(host)
            self._at(
                self.now + 1_000 * (1 + self.entropy.below(cfg.session_ms // 500, "down")),
                "restart",
                (name,),
            )
        elif kind == "crash_broker" and node in self.cluster.alive and len(self.cluster.alive) > 1:
            self._broker_down(node)
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
            self._move_coordinator(live[self.entropy.below(len(live), "coordinator")])
            self._line(f"fault coordinator -> b{self.cluster.coordinator_node}")
        self._at(self.now + cfg.fault_every_ms, "fault", ())

    def _broker_down(self, node: int) -> None:
        if node == self.cluster.coordinator_node and len(self.cluster.alive) > 1:
            # the coordinator's broker crashes: its groups fail over to the next live one
            # (loaded from their last records) before its connections reset
            self._move_coordinator(min(self.cluster.alive - {node}))
        super()._broker_down(node)

    def _on_script(self, action: str, *args: Any) -> None:
        self._line(f"script {action} {args}")
        if action == "pause":
            name, ms = args
            self._stall(self.hosts[name], ms)
        elif action == "crash":
            self._crash_host(self.hosts[args[0]])
        elif action in ("restart", "add"):
            self._start_host(args[0])
        elif action == "hold":
            self._hold(*args)
        elif action == "coordinator_move":
            self._move_coordinator(args[0])
        else:
            raise ValueError(f"unknown script action {action!r}")

    def _on_restart(self, name: str) -> None:
        if self._chaos or not self.hosts[name].alive:
            self._start_host(name)

    def _heal(self) -> None:
        super()._heal()
        for name, host in sorted(self.hosts.items()):
            if not host.alive:
                self._start_host(name)


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
