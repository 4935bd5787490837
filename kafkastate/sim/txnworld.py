"""The simulated world for transactions: an exactly-once pipeline under faults.

Theory of operation
-------------------
:class:`TxnSim` runs on the group world's scheduler and TCP-like network
(virtual time, per-connection FIFO pipes, holds, resets, pauses, broker crashes -- the very
classes) over a :class:`~kafkastate.sim.txncluster.TxnCluster`, and runs these
hosts, each on kafkastate's own machines:

* a **feeder** -- an idempotent :class:`~kafkastate.core.producer.producer.ProducerMachine`
  writing unique values (``p:i``) to the input topic, a few records at a time;
* **pipelines** -- each a process with a transactional ``ProducerMachine`` (its
  :class:`~kafkastate.core.producer.transactions.TransactionManager`) and an assign-based
  read_committed consumer (the :class:`~kafkastate.core.consumer.consumer.ConsumerMachine`
  over a :class:`~kafkastate.core.consumer.fetcher.FetcherMachine`, as the adapters run it)
  over its share of the input partitions. The application is the exactly-once loop of
  ``examples/eos_asyncio.py``: init_transactions, then poll; begin; send each record's
  transform to the same output partition; send_offsets_to_transaction; commit (or, now and
  then, abort on purpose); after an abort, seek to the committed offsets. A fatal error
  ends the process and a new incarnation starts; a *zombie* fault starts a new incarnation
  while the old one is stalled, so two live incarnations share a transactional id;
* a **reader** -- an assign-based read_committed ``ConsumerMachine`` over the output topic,
  the downstream consumer whose view the invariants judge.

Two network details matter for transactions. A connection the *client* closes (after a
request timeout) still delivers what was already sent -- TCP sends the FIN after the data
-- so the broker may process a request whose client gave up on it; only a reset (or a
crash) drops what is in flight. And transaction markers travel from the coordinator to
the partition leaders as WriteTxnMarkers frames on their own pipes, so they can be
delayed and held like anything else.

Every request a pipeline sends is tagged with the client transaction it belongs to
(``(pipeline, incarnation, n)``) when it leaves the host; the cluster keeps the tags of
the requests that made up each coordinator transaction. That is how T5 sees a late
EndTxn of transaction n end transaction n+1.

Layout: the scheduler, network and host driver are the group world's
(:mod:`~kafkastate.sim.scheduler`, :mod:`~kafkastate.sim.network`,
:mod:`~kafkastate.sim.host`); :mod:`~kafkastate.sim.txnnet` adds half-closed
connections, request tags, EndTxn traps and marker pipes; :mod:`~kafkastate.sim.eos` is the
application model; :mod:`~kafkastate.sim.invariants` the checks. This module keeps the
configuration, the faults and :class:`TxnSim`, which stacks them.

Invariants (../shared/DST.md A3.6), after every event unless marked (E) end of run:
T1 the reader never gets a record of an aborted or still open transaction, nor one at or
above the LSO; T2 (E) every transaction the client saw commit is visible whole, none it
saw abort is visible at all; T3 the epoch per transactional id never decreases, and once an
incarnation's InitProducerId took the transactional id over, no AddPartitionsToTxn,
AddOffsetsToTxn or EndTxn of an older one takes effect; T4 every
transition of each TransactionManager is in its table (``TRANSITIONS``); T5 no
coordinator transaction, marker or transactional offset mixes requests of two client
transactions; G0 coordinator transitions per A2.9; P2 no value twice in an input
partition (the feeder's idempotence); C3 (E) the reader's view of each output partition
is the transform of each input record exactly once, in order; L1 (E) after the faults
heal, no transaction is left open (the LSO moves on) and every input is processed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, Final

import attrs

from kafkastate.sim.coordinator import ClassicCoordinator
from kafkastate.sim.entropy import Entropy
from kafkastate.sim.eos import INPUT, OUTPUT, _Process
from kafkastate.sim.invariants import TxnInvariants
from kafkastate.sim.planted import (
    aborts_on_commit,
    loses_acked_writes,
    misnumbers_fetches,
    unfenced_transactions,
)
from kafkastate.sim.txncluster import TxnCluster

__all__ = [
    "TXN_FAULTS",
    "TXN_PLANTED_BUGS",
    "TXN_PLANTED_CATCHES",
    "TxnConfig",
    "TxnSim",
    "run_txn_seed",
]

TXN_PLANTED_BUGS: Final = (
    "consumer_ignores_aborted",
    "producer_without_sequences",
    "broker_loses_acked_writes",
    "producer_reorders_sends",
    "broker_misnumbers_fetches",
    "coordinator_ignores_epoch",
    "consumer_repeats_records",
    "broker_aborts_committed",
)
"""Deliberately broken variants the harness must catch (its self-test). The third one of
DST.md, TV1 without the client defence, is ``TxnConfig(defence=False)``."""
TXN_PLANTED_CATCHES: Final = {
    "consumer_ignores_aborted": "T1",
    "producer_without_sequences": "P2",
    "broker_loses_acked_writes": "P1",
    "producer_reorders_sends": "P3",
    "broker_misnumbers_fetches": "P4",
    "coordinator_ignores_epoch": "T3",
    "consumer_repeats_records": "C3",
    "broker_aborts_committed": "T2",
}
"""The invariant that must catch each planted bug (and no other before it); TV1 without
the defence is T5's."""
TXN_FAULTS: Final = (
    "delay",
    "hold",
    "hold_end_txn",
    "reset",
    "pause",
    "crash_pipeline",
    "zombie",
    "crash_broker",
    "coordinator_move",
    "marker_delay",
)


@attrs.frozen(kw_only=True)
class TxnConfig:
    """One transactional run's options (drawn per seed by :meth:`draw`, or given)."""

    brokers: int = 3
    partitions: int = 2
    pipelines: int = 1
    records: int = 6  # per input partition per write
    writes: int = 4  # writes during chaos (after the first)
    batch: int = 4  # records per transaction at most
    chaos_ms: int = 30_000
    faults: tuple[str, ...] = ()
    fault_every_ms: int = 3_000
    latency_ms: int = 1
    request_timeout_ms: int = 4_000
    transaction_timeout_ms: int = 15_000
    abort_one_in: int = 5  # the application aborts about one transaction in this many
    process_ms: int = 0  # how long the application works between its sends and the commit
    defence: bool = True  # ProducerConfig.transaction_defence
    planted: str | None = None
    script: tuple[tuple[Any, ...], ...] = ()
    """Actions at fixed times: ``(ms, "hold_end_txn", pipe, ms, only_abort)``, ``(ms,
    "abort_next", pipe)``, ``(ms, "txn_move", broker)``, ``(ms, "hold_markers", broker,
    ms)``, ``(ms, "crash", pipe)``, ``(ms, "zombie", pipe, ms)``, ``(ms, "pause", pipe,
    ms)``, ``(ms, "hold", host, broker, ms)``, ``(ms, "crash_broker", broker, ms)``."""

    @classmethod
    def draw(
        cls, entropy: Entropy, *, planted: str | None = None, defence: bool = True
    ) -> TxnConfig:
        """A swarm configuration: sizes, timeouts and the fault kinds of this run (each on
        with probability 1/2; zero draws give the plain default)."""
        faults = tuple(f for f in TXN_FAULTS if entropy.below(2, f"fault {f}"))
        if planted == "producer_without_sequences":
            faults = tuple(sorted({*faults, "hold", "reset"}, key=TXN_FAULTS.index))
        if not defence:
            faults = tuple(sorted({*faults, "hold_end_txn"}, key=TXN_FAULTS.index))
        if planted == "coordinator_ignores_epoch":
            faults = ("zombie",)  # two live incarnations of one transactional id
        extra: dict[str, Any] = {}
        if planted == "producer_without_sequences":
            extra = {"writes": 14, "records": 2}  # the feeder sends often: retries overlap faults
        return cls(
            **extra,
            brokers=1 + entropy.below(3, "brokers"),
            partitions=1 + entropy.below(3, "partitions"),
            pipelines=1 + entropy.below(2, "pipelines"),
            batch=1 + entropy.below(5, "batch"),
            faults=faults,
            fault_every_ms=1_500 + 500 * entropy.below(4, "fault rate"),
            latency_ms=1 + entropy.below(5, "latency"),
            request_timeout_ms=3_000 + 1_000 * entropy.below(3, "request timeout"),
            transaction_timeout_ms=10_000 + 5_000 * entropy.below(3, "transaction timeout"),
            abort_one_in=3 + entropy.below(4, "abort rate"),
            process_ms=200 * entropy.below(6, "process ms"),
            defence=defence,
            planted=planted,
        )


class TxnSim(TxnInvariants):
    """One simulated transactional run.

    Args:
        entropy: every decision's source.
        config: the run's options.
        transform: the pipeline's processing step (input value -> output value; the
            default prefixes ``t:``); C3 expects exactly this of every input.
    """

    def __init__(
        self,
        entropy: Entropy,
        config: TxnConfig,
        *,
        transform: Callable[[bytes], bytes] | None = None,
    ) -> None:
        super().__init__(
            entropy,
            config,
            TxnCluster(config.brokers, ClassicCoordinator(), txn_node=config.brokers),
        )
        if config.planted == "broker_loses_acked_writes":
            loses_acked_writes(self.cluster, INPUT)
        elif config.planted == "broker_misnumbers_fetches":
            misnumbers_fetches(self.cluster, INPUT)
        elif config.planted == "coordinator_ignores_epoch":
            unfenced_transactions(self.cluster)
        elif config.planted == "broker_aborts_committed":
            aborts_on_commit(self.cluster, OUTPUT)
        self.tc = config  # the name it had when TxnSim extended the group world's Sim
        self.transform = transform or (lambda value: b"t:" + value)
        self.cluster.create_topic(INPUT, config.partitions)
        self.cluster.create_topic(OUTPUT, config.partitions)
        self.procs = {}
        self.newest = {}
        self.outcomes = {}
        self.read = defaultdict(list)
        self.txn_offsets = {}
        """The input offsets each client transaction sent (send_offsets_to_transaction)."""
        self.fed = 0  # feeder writes queued so far
        self._feed_queue = []
        self._fed_ids = {}
        self._start_feeder()
        self._start_reader()
        for i in range(config.pipelines):
            self._start_process(f"p{i}")
        self._line(f"config {attrs.asdict(config)}")

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Chaos, heal, liveness window; raises InvariantViolation on the first failure."""
        cfg = self.config
        if cfg.faults:
            self._at(cfg.fault_every_ms, "fault", ())
        for t, action, *args in cfg.script:
            self._at(t, "script", (action, *args))
        self._feed()
        step = cfg.chaos_ms // (cfg.writes + 1)
        for i in range(1, cfg.writes + 1):
            self._at(i * step, "feed", ())
        self._run_until(cfg.chaos_ms)
        self.heal_and_settle()

    def act(self, action: str, *args: Any) -> None:
        """Apply one scripted action now (see :attr:`TxnConfig.script`)."""
        self._on_script(action, *args)

    def heal_and_settle(self) -> None:
        """Undo every fault, then give the pipelines time to finish; raises on L1/C3/T2."""
        cfg = self.config
        self._heal()
        # L1: done within a quiet window (it restarts while the reader makes progress)
        window = 2 * cfg.transaction_timeout_ms + 30_000
        deadline, cap = self.now + window, self.now + 20 * window
        progress = -1
        while self.now < deadline:
            self._run_until(min(deadline, self.now + 1_000))
            if self._caught_up():
                break
            read = sum(len(v) for v in self.read.values())
            if read > progress:
                progress = read
                deadline = min(cap, max(deadline, self.now + window))
        self._check_end()

    def _on_fault(self) -> None:
        if not self._chaos:
            return
        cfg = self.config
        kind = self._draw_fault()
        if kind is None:  # a quiet tick
            self._at(self.now + cfg.fault_every_ms, "fault", ())
            return
        pipe = f"p{self.entropy.below(cfg.pipelines, 'fault pipe')}"
        node = self.cluster.nodes[self.entropy.below(len(self.cluster.nodes), "fault node")]
        self._drew_fault(kind)
        proc = self._newest(pipe)
        if kind == "hold":
            names = sorted(n for n, h in self.hosts.items() if h.alive)
            name = names[self.entropy.below(len(names), "fault host")]
            if cfg.planted == "producer_without_sequences":
                name = "feeder"  # the self-test aims at the producer under test
            self._hold_link(name, node, 500 * (1 + self.entropy.below(16, "hold ms")))
        elif kind == "hold_end_txn" and proc is not None:
            ms = 1_000 * (1 + self.entropy.below(12, "trap ms"))
            self._arm_trap(f"{proc.name}/p", ms, only_abort=False)
        elif kind == "reset":
            names = sorted(n for n, h in self.hosts.items() if h.alive and h.conns)
            if names:
                host = self.hosts[names[self.entropy.below(len(names), "fault host")]]
                conns = sorted(host.conns.values(), key=lambda c: c.cid)
                conn = conns[self.entropy.below(len(conns), "fault conn")]
                self._line(f"fault reset {host.name} conn {conn.cid}")
                self._close(conn, notify_client=True)
        elif kind == "pause" and proc is not None:
            self._pause(
                proc,
                # up to 1.5 transaction timeouts: the coordinator's timeout abort (KIP-588)
                1_000
                * (1 + self.entropy.below(cfg.transaction_timeout_ms * 3 // 2000, "pause ms")),
            )
        elif kind == "crash_pipeline" and proc is not None:
            self._kill(proc, "crashed (fault)", restart_after=self._restart_ms())
        elif kind == "zombie" and proc is not None:
            self._zombie(proc, 1_000 * (1 + self.entropy.below(10, "zombie ms")))
        elif kind == "crash_broker" and node in self.cluster.alive and len(self.cluster.alive) > 1:
            self._crash_broker(node, 1_000 * (1 + self.entropy.below(8, "broker down")))
        elif kind == "coordinator_move" and len(self.cluster.alive) > 1:
            live = sorted(self.cluster.alive)
            target = live[self.entropy.below(len(live), "coordinator")]
            if self.entropy.below(2, "which coordinator"):
                # the EOS group fails over as the group world's do: loaded from its records
                self._move_coordinator(target)
                self._line(f"fault group coordinator -> b{target}")
            else:
                self._txn_move(target)
        elif kind == "marker_delay":
            self._hold_markers(node, 500 * (1 + self.entropy.below(10, "marker hold ms")))
        elif kind == "delay":
            pass  # "delay" acts through _delay on every message
        self._at(self.now + cfg.fault_every_ms, "fault", ())

    def _hold_link(self, name: str, node: int, ms: int) -> None:
        self._line(f"fault hold {name}<->b{node} {ms} ms")
        self._hold(name, node, ms)

    def _pause(self, proc: _Process, ms: int) -> None:
        self._line(f"fault pause {proc.name} {ms} ms")
        for suffix in ("/p", "/c"):
            self._stall(self.hosts[proc.name + suffix], ms)

    def _zombie(self, proc: _Process, ms: int) -> None:
        self._line(f"fault zombie: {proc.name} stalls {ms} ms while a new incarnation starts")
        self._pause(proc, ms)
        self._start_process(proc.pipe)

    def _crash_broker(self, node: int, ms: int) -> None:
        self._broker_down(node)
        self._flush_markers()
        self._at(self.now + ms, "broker_up", (node,))

    def _on_script(self, action: str, *args: Any) -> None:
        self._line(f"script {action} {args}")
        if action == "hold_end_txn":
            pipe, ms, only_abort = args
            proc = self._newest(pipe)
            if proc is not None:
                self._arm_trap(f"{proc.name}/p", ms, only_abort=only_abort)
        elif action == "abort_next":
            proc = self._newest(args[0])
            if proc is not None:
                proc.abort_next = True
        elif action == "txn_move":
            self._txn_move(args[0])
        elif action == "hold_markers":
            self._hold_markers(*args)
        elif action == "crash":
            proc = self._newest(args[0])
            if proc is not None:
                self._kill(proc, "crashed (script)", restart_after=1_000)
        elif action == "zombie":
            proc = self._newest(args[0])
            if proc is not None:
                self._zombie(proc, args[1])
        elif action == "pause":
            proc = self._newest(args[0])
            if proc is not None:
                self._pause(proc, args[1])
        elif action == "hold":
            self._hold_link(*args)
        elif action == "crash_broker":
            self._crash_broker(*args)
        else:
            raise ValueError(f"unknown script action {action!r}")

    def _heal(self) -> None:
        super()._heal()
        for pipe in sorted(self.newest):
            if self._newest(pipe) is None:
                self._start_process(pipe)


def run_txn_seed(
    seed: int,
    *,
    planted: str | None = None,
    defence: bool = True,
    transform: Callable[[bytes], bytes] | None = None,
    **overrides: Any,
) -> TxnSim:
    """Run the transactional swarm configuration of ``seed`` to its end.

    Args:
        seed: picks everything: sizes, timeouts, faults, delays.
        planted: one of :data:`TXN_PLANTED_BUGS`, for the harness's self-test.
        defence: the client's KIP-890 defence (False: the harness must find the anomaly).
        transform: the pipeline's processing step (see :class:`TxnSim`).
        overrides: :class:`TxnConfig` fields to fix instead of drawing them.

    Returns:
        The finished TxnSim.

    Raises:
        InvariantViolation: the first invariant that failed.
    """
    from kafkastate.sim.entropy import SeededEntropy  # noqa: PLC0415

    entropy = SeededEntropy(seed)
    config = attrs.evolve(TxnConfig.draw(entropy, planted=planted, defence=defence), **overrides)
    sim = TxnSim(entropy, config, transform=transform)
    sim.run()
    return sim
