"""The simulated world for transactions: an exactly-once pipeline under faults.

Theory of operation
-------------------
:class:`TxnSim` reuses :class:`~kafkastate.sim.world.Sim`'s scheduler and TCP-like network
(virtual time, per-connection FIFO pipes, holds, resets, pauses, broker crashes -- the very
methods, inherited) over a :class:`~kafkastate.sim.txncluster.TxnCluster`, and runs these
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

import random
import struct
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Final

import attrs

from kafkastate.core.client import ClientConfig, CloseRequested, ConnectRequested
from kafkastate.core.consumer.consumer import ConsumerMachine
from kafkastate.core.consumer.fetcher import FetcherConfig, FetcherMachine
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.producer.accumulator import (
    AccumulatorConfig,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.core.producer.producer import (
    MetadataPendingError,
    ProducerConfig,
    ProducerFailed,
    ProducerMachine,
)
from kafkastate.core.producer.transactions import TRANSITIONS, TransactionOperationCompleted
from kafkastate.core.protocol.framing import FrameDecoder
from kafkastate.errors import KafkaError, TransactionFailedError
from kafkastate.sim.cluster import parse_request
from kafkastate.sim.coordinator import ClassicCoordinator
from kafkastate.sim.entropy import Entropy
from kafkastate.sim.txncluster import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, TxnCluster
from kafkastate.sim.world import InvariantViolation, Sim, _Conn, _Host, _ms_at
from kafkastate.structs import TopicPartition

__all__ = ["TXN_FAULTS", "TXN_PLANTED_BUGS", "TxnConfig", "TxnSim", "run_txn_seed"]

INPUT: Final = "input"
OUTPUT: Final = "output"
GROUP: Final = "eos-group"
TICK_MS: Final = 100
_END_TXN: Final = 26

TXN_PLANTED_BUGS: Final = ("consumer_ignores_aborted", "producer_without_sequences")
"""Deliberately broken variants the harness must catch (its self-test). The third one of
DST.md, TV1 without the client defence, is ``TxnConfig(defence=False)``."""
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


# ----------------------------------------------------------------------------- planted


class _IgnoresAborted(FetcherMachine):
    """Planted: a read_committed consumer that ignores the AbortedTransactions list."""

    def _take(self, done: Any, p: Any, limit: int) -> Any:
        done.aborted.clear()
        return super()._take(done, p, limit)


# ------------------------------------------------------------------------------- hosts


@attrs.define
class _Process:
    """One incarnation of a pipeline process: its two hosts and its application state."""

    pipe: str
    k: int
    tid: str
    inputs: list[TopicPartition]
    phase: str = "init"  # init, idle, offsets, committing, aborting, dead
    op: int | None = None
    txn: int = 0
    values: list[tuple[int, bytes]] = attrs.Factory(list)
    offsets: dict[TopicPartition, int] = attrs.Factory(dict)
    abort_next: bool = False
    ready_at: int = 0  # processing done (phase "processing")
    scheduled: bool = False
    checked: int = 0  # transitions T4 has read

    @property
    def name(self) -> str:
        return f"{self.pipe}#{self.k}"

    @property
    def tag(self) -> tuple[str, int, int]:
        return (self.pipe, self.k, self.txn)


class TxnSim(Sim):
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
        # Sim's network and scheduler state (Sim.__init__ would build a consumer group)
        self.entropy = entropy
        self.config = config  # type: ignore[assignment]  # Sim's network reads faults, latency
        self.tc = config
        self.now = 0
        self.trace: list[str] = []
        self._heap = []
        self._seq = 0
        self.hosts: dict[str, _Host] = {}
        self._conns: dict[int, _Conn] = {}
        self._next_conn = 0
        self._blocked: set[tuple[str, int]] = set()
        self._queued: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
        self._coord_timer: int | None = None
        self._fetch_timer: int | None = None
        self._chaos = True
        self._crashed_brokers: set[int] = set()
        self.stats: dict[str, int] = defaultdict(int)
        # transactions
        self.transform = transform or (lambda value: b"t:" + value)
        self.cluster: TxnCluster = TxnCluster(
            config.brokers, ClassicCoordinator(), txn_node=config.brokers
        )
        self.cluster.create_topic(INPUT, config.partitions)
        self.cluster.create_topic(OUTPUT, config.partitions)
        self.procs: dict[str, _Process] = {}
        self.newest: dict[str, int] = {}  # pipeline -> newest incarnation
        self._draining: set[int] = set()  # closed by the client; what it sent still arrives
        self._held_conns: set[int] = set()
        self._traps: dict[str, bool] = {}  # producer host -> hold its next EndTxn (abort only?)
        self._trap_ms: dict[str, int] = {}
        self._tag_decoders: dict[int, FrameDecoder] = {}
        self._tags: dict[tuple[int, int], Any] = {}
        self._marker_last: dict[tuple[int, int, str], tuple[int, list[bytes]]] = {}
        self._in_air: dict[tuple[int, str], tuple[int, list[bytes]]] = {}  # Sim's pipes
        self._inbox: dict[int, list[bytes]] = {}  # Sim's: arrived while a host was paused
        self._marker_held: dict[int, list[tuple[int, bytes]]] = {}
        self._txn_timer: int | None = None
        self.outcomes: dict[tuple[str, int, int], tuple[str, list[tuple[int, bytes]]]] = {}
        self.read: dict[int, list[bytes]] = defaultdict(list)
        self.txn_offsets: dict[tuple[str, int, int], dict[TopicPartition, int]] = {}
        """The input offsets each client transaction sent (send_offsets_to_transaction)."""
        self.fed = 0  # feeder writes queued so far
        self._feed_queue: list[tuple[int, bytes]] = []
        self._appended_seen = 0
        self._accepted_seen = 0
        self._holders: dict[str, tuple[str, int]] = {}  # transactional id -> (pipe, k)
        self._input_values: dict[int, set[bytes]] = defaultdict(set)
        self._start_feeder()
        self._start_reader()
        for i in range(config.pipelines):
            self._start_process(f"p{i}")
        self._line(f"config {attrs.asdict(config)}")

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Chaos, heal, liveness window; raises InvariantViolation on the first failure."""
        cfg = self.tc
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

    def heal_and_settle(self) -> None:
        """Undo every fault, then give the pipelines time to finish; raises on L1/C3/T2."""
        cfg = self.tc
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

    # ------------------------------------------------------------------- hosts

    def _client(self) -> ClientConfig:
        return ClientConfig(
            bootstrap_servers=[(f"b{n}", 9092) for n in self.cluster.nodes],
            metadata=MetadataConfig(retry_backoff=0.1),
        )

    def _rng(self, name: str) -> random.Random:
        return random.Random(self.entropy.below(1 << 30, f"rng {name}"))

    def _producer(self, name: str) -> ProducerMachine:
        """The producer machine of process ``name`` (``p0#1``)."""
        return self._as_producer(self.hosts[f"{name}/p"])

    @staticmethod
    def _as_producer(host: _Host) -> ProducerMachine:
        machine: Any = host.machine  # _Host is typed for the group simulator's consumers
        assert isinstance(machine, ProducerMachine)
        return machine

    def _add_host(self, name: str, machine: Any) -> _Host:
        host = _Host(name, machine, 0)
        self.hosts[name] = host
        return host

    def _start_feeder(self) -> None:
        cfg = self.tc
        plain = cfg.planted == "producer_without_sequences"
        producer = ProducerConfig(
            client=self._client(),
            accumulator=AccumulatorConfig(
                request_timeout=cfg.request_timeout_ms / 1000,
                delivery_timeout=600.0,
                linger=0.0,
            ),
            enable_idempotence=False if plain else None,
        )
        machine = ProducerMachine(producer, rng=self._rng("feeder"))
        machine.track_topics([INPUT])
        self._add_host("feeder", machine)
        self._line("feeder start")

    def _start_reader(self) -> None:
        fetcher = FetcherConfig(
            client=self._client(),
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            use_fetch_sessions=False,
            fetch_max_wait=0.5,
        )
        cls = _IgnoresAborted if self.tc.planted == "consumer_ignores_aborted" else FetcherMachine
        machine = ConsumerMachine(cls(fetcher, rng=self._rng("reader")))
        machine.assign(
            [TopicPartition(OUTPUT, p) for p in range(self.tc.partitions)], now=self._s()
        )
        self._add_host("reader", machine)
        self._line("reader start")
        self._at(self.now, "reader", ())

    def _start_process(self, pipe: str) -> None:
        cfg = self.tc
        k = self.newest.get(pipe, 0) + 1
        self.newest[pipe] = k
        index = int(pipe[1:])
        inputs = [
            TopicPartition(INPUT, p) for p in range(cfg.partitions) if p % cfg.pipelines == index
        ]
        proc = _Process(pipe=pipe, k=k, tid=f"tx-{pipe}", inputs=inputs)
        self.procs[proc.name] = proc
        producer = ProducerConfig(
            client=self._client(),
            accumulator=AccumulatorConfig(
                request_timeout=cfg.request_timeout_ms / 1000,
                delivery_timeout=max(60.0, 2 * cfg.request_timeout_ms / 1000),
                linger=0.0,
            ),
            transactional_id=proc.tid,
            transaction_timeout=cfg.transaction_timeout_ms / 1000,
            transaction_defence=cfg.defence,
        )
        pm = ProducerMachine(producer, rng=self._rng(f"{proc.name}/p"))
        pm.track_topics([OUTPUT])
        fetcher = FetcherConfig(
            client=self._client(),
            group_id=GROUP,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            use_fetch_sessions=False,
            fetch_max_wait=0.5,
        )
        cm = ConsumerMachine(FetcherMachine(fetcher, rng=self._rng(f"{proc.name}/c")))
        ph = self._add_host(f"{proc.name}/p", pm)
        self._add_host(f"{proc.name}/c", cm)
        self._line(f"{proc.name} start {[tp.partition for tp in inputs]}")
        proc.op = pm.init_transactions(now=self._s())
        self._pump(ph)

    def _kill(self, proc: _Process, why: str, *, restart_after: int | None) -> None:
        if proc.phase == "dead":
            return
        proc.phase = "dead"
        self._line(f"{proc.name} exits: {why}")
        for suffix in ("/p", "/c"):
            host = self.hosts[proc.name + suffix]
            if host.alive:
                self._crash_host(host)
        if proc.txn and proc.tag not in self.outcomes and proc.values:
            self.outcomes[proc.tag] = ("unknown", list(proc.values))
            self.txn_offsets[proc.tag] = dict(proc.offsets)
        if restart_after is not None and self.newest[proc.pipe] == proc.k:
            self._at(self.now + restart_after, "restart_pipe", (proc.pipe, proc.k))

    def _on_restart_pipe(self, pipe: str, k: int) -> None:
        if self.newest[pipe] == k:
            self._start_process(pipe)

    # ----------------------------------------------------------------- pumping

    def _pump(self, host: _Host) -> None:
        """Drain a machine: events, bytes, its next deadline."""
        if not host.alive:
            return
        m = host.machine
        proc = self.procs.get(host.name[:-2]) if host.name.endswith("/p") else None
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
                case TransactionOperationCompleted() if proc is not None:
                    self._on_operation(proc, event)
                case ProducerFailed(error=error) if proc is not None:
                    self._kill(
                        proc, f"producer failed: {error!r}", restart_after=self._restart_ms()
                    )
                    return
                case RecordsAcknowledged() if host.name == "feeder":
                    self.stats["fed acknowledged"] += len(event.record_ids)
                case RecordsFailed(error=error) if host.name == "feeder":
                    self.stats["fed failed"] += len(event.record_ids)
                    self._line(f"feeder records failed {error!r}")
                case _:
                    pass
        if not host.alive:
            return
        for node, data in m.data_to_send():
            conn = host.conns.get(node)
            if conn is not None and conn.open:
                self._send(conn, "up", data)
        timer = m.get_timer()
        if timer is not None:
            due = max(self.now, _ms_at(timer))
            if host.timer_at is None or due < host.timer_at:
                host.timer_at = due
                host.timer_serial += 1
                self._at(due, "timer", (host.name, host.incarnation, host.timer_serial))

    def _restart_ms(self) -> int:
        return 500 * (1 + self.entropy.below(6, "restart"))

    def _wake(self, proc: _Process) -> None:
        if not proc.scheduled and proc.phase != "dead":
            proc.scheduled = True
            self._at(self.now, "proc", (proc.name,))

    # ------------------------------------------------------------- application

    def _on_operation(self, proc: _Process, event: TransactionOperationCompleted) -> None:
        if event.operation_id != proc.op:
            return
        proc.op = None
        error = event.error
        pm = self._producer(proc.name)
        if error is not None and not isinstance(error, TransactionFailedError):
            self._kill(
                proc, f"{event.operation} failed: {error!r}", restart_after=self._restart_ms()
            )
            return
        try:
            if event.operation == "init":
                cm = self.hosts[f"{proc.name}/c"].machine
                cm.assign(proc.inputs, now=self._s())
                self._pump(self.hosts[f"{proc.name}/c"])
                proc.phase = "idle"
                self._line(f"{proc.name} initialised")
            elif error is not None:  # abortable: abort, then read again from the committed
                self._line(f"{proc.name} txn {proc.txn} {event.operation} failed: {error!r}")
                proc.op = pm.abort_transaction(now=self._s())
                proc.phase = "aborting"
            elif event.operation == "send_offsets":
                abort = proc.abort_next or (
                    self.tc.abort_one_in > 0
                    and self.entropy.below(self.tc.abort_one_in, "app aborts") == 1
                )
                proc.abort_next = False
                try:
                    if abort:
                        proc.op = pm.abort_transaction(now=self._s())
                        proc.phase = "aborting"
                    else:
                        proc.op = pm.commit_transaction(now=self._s())
                        proc.phase = "committing"
                except TransactionFailedError as exc:  # failed meanwhile: abort (Java's pattern)
                    self._line(f"{proc.name} txn {proc.txn} cannot commit: {exc!r}")
                    proc.op = pm.abort_transaction(now=self._s())
                    proc.phase = "aborting"
            elif event.operation == "commit":
                self.outcomes[proc.tag] = ("committed", list(proc.values))
                self.txn_offsets[proc.tag] = dict(proc.offsets)
                self._line(f"{proc.name} txn {proc.txn} committed")
                proc.phase = "idle"
            elif event.operation == "abort":
                self.outcomes[proc.tag] = ("aborted", list(proc.values))
                self.txn_offsets[proc.tag] = dict(proc.offsets)
                self._line(f"{proc.name} txn {proc.txn} aborted")
                cm = self.hosts[f"{proc.name}/c"].machine
                cm.seek_to_committed(proc.inputs, now=self._s())
                self._pump(self.hosts[f"{proc.name}/c"])
                proc.phase = "idle"
        except KafkaError as exc:
            self._kill(proc, f"{exc!r}", restart_after=self._restart_ms())
            return
        self._wake(proc)

    def _on_proc(self, name: str) -> None:
        """One turn of a pipeline's loop: poll and start a transaction."""
        proc = self.procs[name]
        proc.scheduled = False
        if proc.phase == "dead":
            return
        ph, ch = self.hosts[f"{name}/p"], self.hosts[f"{name}/c"]
        if ph.paused_until > self.now:
            proc.scheduled = True
            self._at(ph.paused_until, "proc", (name,))
            return
        try:
            try:
                if proc.phase == "idle":
                    self._begin(proc, ph, ch)
                elif proc.phase == "processing" and self.now >= proc.ready_at:
                    self._offsets(proc, self._producer(name))
            except TransactionFailedError as exc:  # a record failed meanwhile: abort
                self._line(f"{name} txn {proc.txn} failed: {exc!r}")
                proc.op = self._producer(name).abort_transaction(now=self._s())
                proc.phase = "aborting"
        except KafkaError as exc:
            self._kill(proc, f"{exc!r}", restart_after=self._restart_ms())
            return
        self._pump(ch)
        self._pump(ph)
        if proc.phase != "dead" and not proc.scheduled:
            proc.scheduled = True
            self._at(self.now + TICK_MS, "proc", (name,))

    def _begin(self, proc: _Process, ph: _Host, ch: _Host) -> None:
        pm, cm = self._producer(proc.name), ch.machine
        if OUTPUT not in pm.client.cluster.topics:
            return  # the producer has no metadata yet
        runs = cm.poll(self.tc.batch, now=self._s())
        if not runs:
            return
        pm.begin_transaction()
        proc.txn += 1
        proc.values = []
        proc.offsets = {}
        for tp, records, _epoch in runs:
            for record in records:
                value = self.transform(record.value or b"")
                tagged = value + f"|{proc.name}.{proc.txn}".encode()
                pm.send(OUTPUT, value=tagged, partition=tp[1], timestamp_ms=0, now=self._s())
                proc.values.append((tp[1], tagged))
            proc.offsets[TopicPartition(*tp)] = records[-1].offset + 1
        self._line(f"{proc.name} txn {proc.txn} begins with {len(proc.values)} records")
        proc.phase = "processing"
        proc.ready_at = self.now + self.tc.process_ms
        if not self.tc.process_ms:
            self._offsets(proc, pm)

    def _offsets(self, proc: _Process, pm: Any) -> None:
        proc.op = pm.send_offsets_to_transaction(dict(proc.offsets), GROUP, now=self._s())
        proc.phase = "offsets"

    def _on_reader(self) -> None:
        host = self.hosts["reader"]
        if host.paused_until > self.now:
            self._at(host.paused_until, "reader", ())
            return
        runs = host.machine.poll(100, now=self._s())
        for tp, records, _epoch in runs:
            for record in records:
                self._check_read(tp[1], record.offset, record.value or b"")
        self._pump(host)
        self._at(self.now + TICK_MS, "reader", ())

    def _feed(self) -> None:
        cfg = self.tc
        for p in range(cfg.partitions):
            for i in range(cfg.records):
                self._feed_queue.append((p, f"{p}:{self.fed + i}".encode()))
        self.fed += cfg.records
        self._on_feeder()

    def feed(self) -> None:
        """Have the feeder write the configured number of records to every input
        partition (for stepwise control: a Hypothesis RuleBasedStateMachine)."""
        self._line("feed")
        self._feed()

    def _on_feed(self) -> None:
        self._line("feed")
        self._feed()

    def _on_feeder(self) -> None:
        host = self.hosts["feeder"]
        m = self._as_producer(host)
        while self._feed_queue:
            p, value = self._feed_queue[0]
            try:
                m.send(INPUT, value=value, partition=p, timestamp_ms=0, now=self._s())
            except MetadataPendingError:
                self._at(self.now + TICK_MS, "feeder", ())
                break
            self._feed_queue.pop(0)
        self._pump(host)

    # ---------------------------------------------------------------- network

    def _client_close(self, conn: _Conn) -> None:
        """The client closed the connection: what it sent still reaches the broker (and
        is processed; the answers are lost), only the other direction is dropped."""
        if not conn.open:
            return
        conn.open = False
        self._draining.add(conn.cid)
        self._queued[conn.cid] = [q for q in self._queued.get(conn.cid, []) if q[0] == "up"]
        self.cluster.drop_held(conn.cid)

    def _close(self, conn: _Conn, *, notify_client: bool) -> None:
        self._draining.discard(conn.cid)
        self._held_conns.discard(conn.cid)
        super()._close(conn, notify_client=notify_client)

    def _send(self, conn: _Conn, direction: str, data: bytes) -> None:
        if direction == "up" and conn.host.endswith("/p"):
            for frame in self._frames(conn, data):
                self._send_one(conn, frame)
            return
        if direction == "up" and conn.cid in self._held_conns:
            self._queued[conn.cid].append((direction, data))
            return
        super()._send(conn, direction, data)

    def _frames(self, conn: _Conn, data: bytes) -> list[bytes]:
        decoder = self._tag_decoders.setdefault(conn.cid, FrameDecoder())
        decoder.feed(data)
        out = []
        while (frame := decoder.next_frame()) is not None:
            out.append(struct.pack(">i", len(frame)) + bytes(frame))
        return out

    def _send_one(self, conn: _Conn, frame: bytes) -> None:
        api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 4)
        proc = self.procs.get(conn.host[:-2])
        if proc is not None:
            self._tags[(conn.cid, correlation_id)] = proc.tag
        trap = self._traps.get(conn.host)
        if api_key == _END_TXN and trap is not None and conn.cid not in self._held_conns:
            committed = bool(parse_request(frame[4:]).body.committed)
            if not (trap and committed):
                del self._traps[conn.host]
                ms = self._trap_ms.pop(conn.host)
                self._held_conns.add(conn.cid)
                self._line(f"fault hold {conn.host} conn {conn.cid} from EndTxn({committed})")
                self.stats["EndTxn held"] += 1
                self._at(self.now + ms, "release_conn", (conn.cid,))
        if conn.cid in self._held_conns:
            self._queued[conn.cid].append(("up", frame))
            return
        super()._send(conn, "up", frame)

    def _on_release_conn(self, cid: int) -> None:
        self._held_conns.discard(cid)
        conn = self._conns[cid]
        for direction, data in self._queued.pop(cid, []):
            if direction == "up" and (conn.open or cid in self._draining):
                super()._send(conn, direction, data)
        self._line(f"release conn {cid}")

    def _on_release(self, name: str, node: int) -> None:
        self._blocked.discard((name, node))
        for conn in list(self._conns.values()):
            if (conn.host, conn.broker) != (name, node) or conn.cid in self._held_conns:
                continue
            if conn.open or conn.cid in self._draining:
                for direction, data in self._queued.pop(conn.cid, []):
                    if conn.open or direction == "up":
                        super()._send(conn, direction, data)

    def _arrive(self, cid: int, direction: str, data: bytes) -> None:
        conn = self._conns[cid]
        if direction == "up" and not conn.open and cid in self._draining:
            if conn.broker not in self.cluster.alive:
                return
            conn.decoder.feed(data)
            while (frame := conn.decoder.next_frame()) is not None:
                request = conn.read(frame, self.now)
                self.stats[f"api {request.api_key} (closed)"] += 1
                if conn.outstanding is not None:
                    conn.backlog.append(request)
                else:
                    self._serve(conn, request)
            return
        super()._arrive(cid, direction, data)

    def _serve(self, conn: _Conn, request: Any) -> None:
        self.cluster.request_tag = self._tags.pop((conn.cid, request.correlation_id), None)
        super()._serve(conn, request)
        self.cluster.request_tag = None
        self._flush_markers()

    def _respond(self, conn: _Conn, request: Any, body: Any) -> None:
        if conn.open or conn.cid not in self._draining:
            super()._respond(conn, request, body)
            return
        if conn.outstanding is request:  # the client is gone: the answer goes nowhere
            conn.outstanding = None
            if conn.backlog:
                self._serve(conn, conn.backlog.pop(0))

    # -- markers: coordinator -> leaders, through their own pipes

    def _flush_markers(self) -> None:
        cluster = self.cluster
        while cluster.markers_out:
            marker = cluster.markers_out.pop(0)
            self._pipe(cluster.txn_node, marker.dst, "marker", marker.frame())
        self._arm_cluster_timers()

    def _pipe(self, src: int, dst: int, kind: str, frame: bytes) -> None:
        if kind == "marker" and dst in self._marker_held:
            self._marker_held[dst].append((src, frame))
            return
        extra = 0
        if "marker_delay" in self.tc.faults and self._chaos:
            extra = self.entropy.below(4, "slow marker") * self.entropy.below(500, "marker ms")
        last = self._marker_last.get((src, dst, kind))
        due = max(0 if last is None else last[0], self.now + self.tc.latency_ms + extra)
        if last is not None and last[0] == due:
            last[1].append(frame)  # one delivery: the pipe stays in order
            return
        frames = [frame]
        self._marker_last[(src, dst, kind)] = (due, frames)
        self._at(due, kind, (src, dst, frames))

    def _on_marker(self, src: int, dst: int, frames: list[bytes]) -> None:
        for frame in frames:
            self._one_marker(src, dst, frame)

    def _on_marker_answer(self, src: int, dst: int, frames: list[bytes]) -> None:
        for frame in frames:
            self._one_marker_answer(src, dst, frame)

    def _one_marker(self, src: int, dst: int, frame: bytes) -> None:
        if dst not in self.cluster.alive:
            self.cluster.marker_lost(frame, now=self._s())  # the coordinator sends it again
            self._arm_cluster_timers()
            return
        self.stats["markers"] += 1
        answer = self.cluster.write_markers(dst, frame[4:])
        self._pipe(dst, src, "marker_answer", answer)

    def _one_marker_answer(self, src: int, dst: int, frame: bytes) -> None:
        del src
        if dst in self.cluster.alive:
            self.cluster.markers_answered(frame[4:])
        self._arm_cluster_timers()

    def _on_release_markers(self, dst: int) -> None:
        for src, frame in self._marker_held.pop(dst, []):
            self._pipe(src, dst, "marker", frame)

    def _arm_cluster_timers(self) -> None:
        super()._arm_cluster_timers()
        due = self.cluster.txn_timer()
        if due is not None:
            t = max(self.now, _ms_at(due))
            if self._txn_timer is None or t < self._txn_timer or self._txn_timer < self.now:
                self._txn_timer = t
                self._at(t, "txn_timer", ())

    def _on_txn_timer(self) -> None:
        self._txn_timer = None
        self.cluster.handle_txn_timer(now=self._s())
        self._flush_markers()

    # ------------------------------------------------------------------- faults

    def _newest(self, pipe: str) -> _Process | None:
        proc = self.procs.get(f"{pipe}#{self.newest[pipe]}")
        return None if proc is None or proc.phase == "dead" else proc

    def _on_fault(self) -> None:
        if not self._chaos:
            return
        cfg = self.tc
        kind = cfg.faults[self.entropy.below(len(cfg.faults), "fault kind")]
        pipe = f"p{self.entropy.below(cfg.pipelines, 'fault pipe')}"
        node = self.cluster.nodes[self.entropy.below(len(self.cluster.nodes), "fault node")]
        self.stats[f"fault {kind}"] += 1
        proc = self._newest(pipe)
        if kind == "hold":
            names = sorted(n for n, h in self.hosts.items() if h.alive)
            name = names[self.entropy.below(len(names), "fault host")]
            if cfg.planted == "producer_without_sequences":
                name = "feeder"  # the self-test aims at the producer under test
            self._hold(name, node, 500 * (1 + self.entropy.below(16, "hold ms")))
        elif kind == "hold_end_txn" and proc is not None:
            self._arm_trap(proc, 1_000 * (1 + self.entropy.below(12, "trap ms")), only_abort=False)
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
                self.cluster.coordinator_node = target
                self._line(f"fault group coordinator -> b{target}")
            else:
                self._txn_move(target)
        elif kind == "marker_delay":
            self._hold_markers(node, 500 * (1 + self.entropy.below(10, "marker hold ms")))
        elif kind == "delay":
            pass  # "delay" acts through _delay on every message
        self._at(self.now + cfg.fault_every_ms, "fault", ())

    def _hold(self, name: str, node: int, ms: int) -> None:
        self._blocked.add((name, node))
        self._line(f"fault hold {name}<->b{node} {ms} ms")
        self._at(self.now + ms, "release", (name, node))

    def _arm_trap(self, proc: _Process, ms: int, *, only_abort: bool) -> None:
        host = f"{proc.name}/p"
        self._traps[host] = only_abort
        self._trap_ms[host] = ms
        self._line(
            f"fault trap: hold {host}'s next EndTxn{'(abort)' if only_abort else ''} {ms} ms"
        )

    def _pause(self, proc: _Process, ms: int) -> None:
        self._line(f"fault pause {proc.name} {ms} ms")
        for suffix in ("/p", "/c"):
            host = self.hosts[proc.name + suffix]
            host.paused_until = self.now + ms
            host.pauses.append((self.now, self.now + ms))

    def _zombie(self, proc: _Process, ms: int) -> None:
        self._line(f"fault zombie: {proc.name} stalls {ms} ms while a new incarnation starts")
        self._pause(proc, ms)
        self._start_process(proc.pipe)

    def _crash_broker(self, node: int, ms: int) -> None:
        self._line(f"fault crash b{node}")
        self.cluster.set_alive(node, False)
        self._crashed_brokers.add(node)
        for conn in list(self._conns.values()):
            if conn.broker == node:
                self._close(conn, notify_client=True)
        self._flush_markers()
        self._at(self.now + ms, "broker_up", (node,))

    def _txn_move(self, node: int) -> None:
        self.cluster.move_txn_coordinator(node)
        self._line(f"fault transaction coordinator -> b{node}")
        self.stats["txn coordinator moves"] += 1
        self._flush_markers()

    def _hold_markers(self, node: int, ms: int) -> None:
        if node not in self._marker_held:
            self._marker_held[node] = []
            self._line(f"fault hold markers to b{node} {ms} ms")
            self._at(self.now + ms, "release_markers", (node,))

    def _on_script(self, action: str, *args: Any) -> None:
        self._line(f"script {action} {args}")
        if action == "hold_end_txn":
            pipe, ms, only_abort = args
            proc = self._newest(pipe)
            if proc is not None:
                self._arm_trap(proc, ms, only_abort=only_abort)
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
            self._hold(*args)
        elif action == "crash_broker":
            self._crash_broker(*args)
        else:
            raise ValueError(f"unknown script action {action!r}")

    def _heal(self) -> None:
        self._chaos = False
        self._line("heal")
        for name, node in sorted(self._blocked):
            self._on_release(name, node)
        for cid in sorted(self._held_conns):
            self._on_release_conn(cid)
        for node in sorted(self._marker_held):
            self._on_release_markers(node)
        self._traps.clear()
        for node in sorted(self._crashed_brokers):
            self._on_broker_up(node)
        for host in self.hosts.values():
            host.paused_until = min(host.paused_until, self.now)
        for pipe in sorted(self.newest):
            if self._newest(pipe) is None:
                self._start_process(pipe)

    # --------------------------------------------------------------- invariants

    def _check_safety(self, kind: str) -> None:
        cluster = self.cluster
        if cluster.violations:
            invariant, message = cluster.violations[0]
            raise InvariantViolation(invariant, message, at=self.now)
        for tp, batch in cluster.appended[self._appended_seen :]:
            if tp[0] == INPUT:
                seen = self._input_values[tp[1]]
                for value in batch.values:
                    if value in seen:
                        raise InvariantViolation(
                            "P2", f"{value!r} written twice to {tp}", at=self.now
                        )
                    seen.add(value)
        self._appended_seen = len(cluster.appended)
        for what, tid, tag in cluster.accepted[self._accepted_seen :]:
            if not isinstance(tag, tuple):
                continue
            holder = self._holders.get(tid)
            if what == "init":
                self._holders[tid] = tag[:2]  # every other incarnation is fenced now
            elif holder is not None and tag[:2] != holder:
                raise InvariantViolation(
                    "T3",
                    f"{tid!r}: {what} of {tag} accepted after incarnation {holder[1]} took the "
                    "transactional id over (a fenced producer's request took effect)",
                    at=self.now,
                )
        self._accepted_seen = len(cluster.accepted)
        for proc in self.procs.values():
            if proc.phase == "dead":
                continue
            txn = self._producer(proc.name).transactions
            assert txn is not None
            for before, after in txn.transitions[proc.checked :]:
                if before not in TRANSITIONS[after]:
                    raise InvariantViolation(
                        "T4", f"{proc.name}: {before.name} -> {after.name}", at=self.now
                    )
            proc.checked = len(txn.transitions)
        self.trace.append(f"{self.now} {kind} {self._state_line()}")

    def _state_line(self) -> str:
        procs = " ".join(
            f"{p.name}:{p.phase}/{p.txn}" for p in self.procs.values() if p.phase != "dead"
        )
        lso = ",".join(
            f"{self.cluster.parts[(OUTPUT, p)].lso()}/{self.cluster.parts[(OUTPUT, p)].end}"
            for p in range(self.tc.partitions)
        )
        return f"{procs} out={lso}"

    def _check_read(self, partition: int, offset: int, value: bytes) -> None:
        """T1: what the reader got is committed and below the LSO."""
        tp = (OUTPUT, partition)
        batch = self.cluster.batch_at(tp, offset)
        if batch is None or batch.status not in ("committed", "plain"):
            status = None if batch is None else batch.status
            raise InvariantViolation(
                "T1",
                f"the read_committed reader got {value!r} at {OUTPUT}-{partition}@{offset} "
                f"of a transaction that is {status}",
                at=self.now,
            )
        if offset >= self.cluster.parts[tp].lso():
            raise InvariantViolation(
                "T1", f"the reader got offset {offset} at or above the LSO of {tp}", at=self.now
            )
        self.read[partition].append(value)

    def _check_offsets(self) -> None:
        """T2 for offsets: the group's committed offset of each input partition is one a
        transaction committed (or whose outcome its client never learned), no lower than
        any the client saw commit, and -- everything processed -- the input's end."""
        group = self.cluster.coordinator.groups.get(GROUP)
        offsets = {} if group is None else group.offsets
        for p in range(self.tc.partitions):
            tp = TopicPartition(INPUT, p)
            actual = offsets.get((INPUT, p), -1)
            known = [
                o[tp]
                for tag, o in self.txn_offsets.items()
                if tp in o and self.outcomes[tag][0] == "committed"
            ]
            possible = {
                o[tp]
                for tag, o in self.txn_offsets.items()
                if tp in o and self.outcomes[tag][0] != "aborted"
            }
            end = self.cluster.parts[(INPUT, p)].end
            if (possible and actual not in possible) or (known and actual < max(known)):
                raise InvariantViolation(
                    "T2",
                    f"committed offset {actual} of {INPUT}-{p} is not one a committed "
                    f"transaction sent (committed: {sorted(set(known))[-3:]})",
                    at=self.now,
                )
            if actual != end and end:
                raise InvariantViolation(
                    "C3", f"{INPUT}-{p}: committed offset {actual}, input end {end}", at=self.now
                )

    def _expected(self, partition: int) -> list[bytes]:
        return [self.transform(v) for v in self.cluster.committed_values((INPUT, partition))]

    def _caught_up(self) -> bool:
        settled = all(
            m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) for m in self.cluster.txns.values()
        )
        return (
            settled
            and not self._feed_queue
            and all(
                [v.rsplit(b"|", 1)[0] for v in self.read[p]] == self._expected(p)
                and self.cluster.parts[(OUTPUT, p)].lso() == self.cluster.parts[(OUTPUT, p)].end
                for p in range(self.tc.partitions)
            )
        )

    def _check_end(self) -> None:
        cluster = self.cluster
        for tp, part in sorted(cluster.parts.items()):
            if part.open:
                raise InvariantViolation(
                    "L1",
                    f"transactions of producers {sorted(part.open)} left open on {tp}: the LSO "
                    f"is stuck at {part.lso()} (end {part.end})",
                    at=self.now,
                )
        for tid, meta in sorted(cluster.txns.items()):
            if meta.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
                raise InvariantViolation(
                    "L1", f"transaction of {tid!r} still {meta.state} after healing", at=self.now
                )
        visible = {p: set(cluster.committed_values((OUTPUT, p))) for p in range(self.tc.partitions)}
        for tag, (outcome, values) in sorted(self.outcomes.items()):
            shown = [v for p, v in values if v in visible[p]]
            if outcome == "committed" and len(shown) != len(values):
                raise InvariantViolation(
                    "T2",
                    f"transaction {tag} committed, but {len(values) - len(shown)} of its "
                    f"{len(values)} records are not visible",
                    at=self.now,
                )
            if outcome == "aborted" and shown:
                raise InvariantViolation(
                    "T2", f"transaction {tag} aborted, but {shown[:3]} are visible", at=self.now
                )
        if self._feed_queue:
            raise InvariantViolation("L1", "the feeder could not write its records", at=self.now)
        self._check_offsets()
        for p in range(self.tc.partitions):
            got = [v.rsplit(b"|", 1)[0] for v in self.read[p]]
            want = self._expected(p)
            if got != want:
                missing = [v for v in want if v not in got]
                doubled = sorted({v for v in got if got.count(v) > 1})
                raise InvariantViolation(
                    "C3",
                    f"{OUTPUT}-{p}: read_committed view has {len(got)} records for {len(want)} "
                    f"inputs; missing {missing[:5]}, duplicated {doubled[:5]}"
                    + ("" if missing or doubled else " (order differs)"),
                    at=self.now,
                )


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
