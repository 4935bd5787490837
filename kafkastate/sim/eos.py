"""The transactional simulator's application model: the exactly-once pipeline.

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
  ends the process and a new incarnation starts;
* a **reader** -- an assign-based read_committed ``ConsumerMachine`` over the output topic,
  the downstream consumer whose view the invariants judge.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

import attrs

from kafkastate.core.client import ClientConfig
from kafkastate.core.consumer.consumer import ConsumerMachine
from kafkastate.core.consumer.fetcher import FetcherConfig, FetcherMachine
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.producer.accumulator import (
    AccumulatorConfig,
    RecordId,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.core.producer.producer import (
    MetadataPendingError,
    ProducerConfig,
    ProducerFailed,
    ProducerMachine,
)
from kafkastate.core.producer.transactions import TransactionOperationCompleted
from kafkastate.errors import KafkaError, TransactionFailedError
from kafkastate.sim.host import _Host
from kafkastate.sim.planted import IgnoresAbortedTransactions, ReordersSends, RepeatsRecords
from kafkastate.sim.txnnet import TxnNetwork
from kafkastate.structs import TopicPartition

if TYPE_CHECKING:
    from kafkastate.sim.txnworld import TxnConfig

__all__ = ["GROUP", "INPUT", "OUTPUT", "TICK_MS", "EosApp"]

INPUT: Final = "input"
OUTPUT: Final = "output"
GROUP: Final = "eos-group"
TICK_MS: Final = 100


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


class EosApp(TxnNetwork):
    """The feeder, the pipelines and the reader of the transactional world."""

    config: TxnConfig
    transform: Callable[[bytes], bytes]
    procs: dict[str, _Process]
    newest: dict[str, int]  # pipeline -> newest incarnation
    outcomes: dict[tuple[str, int, int], tuple[str, list[tuple[int, bytes]]]]
    read: dict[int, list[bytes]]
    txn_offsets: dict[tuple[str, int, int], dict[TopicPartition, int]]
    fed: int
    _feed_queue: list[tuple[int, bytes]]
    _fed_ids: dict[RecordId, tuple[int, bytes]]  # what the feeder sent: partition, value

    def _check_read(self, partition: int, offset: int, value: bytes) -> None:
        """T1, on each record the reader gets (the invariants')."""
        raise NotImplementedError

    def _observe(self, topic: str, partition: int, offset: int, value: bytes) -> None:
        """P4, on each record a consumer gets (the invariants')."""
        raise NotImplementedError

    def _fed_acknowledged(self, event: RecordsAcknowledged) -> None:
        """P1 and P4, on each acknowledgement the feeder gets (the invariants')."""
        raise NotImplementedError

    def _request_tag(self, host: str) -> Any:
        proc = self.procs.get(host[:-2])
        return None if proc is None else proc.tag

    def _newest(self, pipe: str) -> _Process | None:
        proc = self.procs.get(f"{pipe}#{self.newest[pipe]}")
        return None if proc is None or proc.phase == "dead" else proc

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
    def _as_producer(host: _Host[Any]) -> ProducerMachine:
        machine: Any = host.machine  # _Host[Any] is typed for the group simulator's consumers
        assert isinstance(machine, ProducerMachine | ReordersSends)
        return cast(ProducerMachine, machine)

    def _add_host(self, name: str, machine: Any) -> _Host[Any]:
        host = _Host[Any](name, machine, 0)
        self.hosts[name] = host
        return host

    def _start_feeder(self) -> None:
        cfg = self.config
        plain = cfg.planted == "producer_without_sequences"
        producer = ProducerConfig(
            client=self._client(),
            accumulator=AccumulatorConfig(
                request_timeout=cfg.request_timeout_ms / 1000,
                delivery_timeout=600.0,
                linger=0.0,
            ),
            enable_idempotence=False if plain else None,
            # one request in flight: a retry duplicates, never reorders (P2, not P3)
            max_in_flight_requests_per_connection=1 if plain else 5,
        )
        machine = ProducerMachine(producer, rng=self._rng("feeder"))
        machine.track_topics([INPUT])
        if cfg.planted == "producer_reorders_sends":
            machine = cast(ProducerMachine, ReordersSends(machine))
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
        machine = ConsumerMachine(FetcherMachine(fetcher, rng=self._rng("reader")))
        machine.assign(
            [TopicPartition(OUTPUT, p) for p in range(self.config.partitions)], now=self._s()
        )
        if self.config.planted == "consumer_ignores_aborted":
            self._add_host("reader", IgnoresAbortedTransactions(machine))
        elif self.config.planted == "consumer_repeats_records":
            self._add_host("reader", RepeatsRecords(machine))
        else:
            self._add_host("reader", machine)
        self._line("reader start")
        self._at(self.now, "reader", ())

    def _start_process(self, pipe: str) -> None:
        cfg = self.config
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

    # ------------------------------------------------------------- application

    def _on_machine_event(self, host: _Host[Any], event: Any) -> bool:
        proc = self.procs.get(host.name[:-2]) if host.name.endswith("/p") else None
        match event:
            case TransactionOperationCompleted() if proc is not None:
                self._on_operation(proc, event)
            case ProducerFailed(error=error) if proc is not None:
                self._kill(proc, f"producer failed: {error!r}", restart_after=self._restart_ms())
                return False
            case RecordsAcknowledged() if host.name == "feeder":
                self.stats["fed acknowledged"] += len(event.record_ids)
                self._fed_acknowledged(event)
            case RecordsFailed(error=error) if host.name == "feeder":
                self.stats["fed failed"] += len(event.record_ids)
                self._line(f"feeder records failed {error!r}")
            case _:
                pass
        return True

    def _restart_ms(self) -> int:
        return 500 * (1 + self.entropy.below(6, "restart"))

    def _wake(self, proc: _Process) -> None:
        if not proc.scheduled and proc.phase != "dead":
            proc.scheduled = True
            self._at(self.now, "proc", (proc.name,))

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
                    self.config.abort_one_in > 0
                    and self.entropy.below(self.config.abort_one_in, "app aborts") == 1
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

    def _begin(self, proc: _Process, ph: _Host[Any], ch: _Host[Any]) -> None:
        pm, cm = self._producer(proc.name), ch.machine
        if OUTPUT not in pm.client.cluster.topics:
            return  # the producer has no metadata yet
        runs = cm.poll(self.config.batch, now=self._s())
        if not runs:
            return
        pm.begin_transaction()
        proc.txn += 1
        proc.values = []
        proc.offsets = {}
        for tp, records, _epoch in runs:
            for record in records:
                self._observe(tp[0], tp[1], record.offset, record.value or b"")
                value = self.transform(record.value or b"")
                tagged = value + f"|{proc.name}.{proc.txn}".encode()
                pm.send(OUTPUT, value=tagged, partition=tp[1], timestamp_ms=0, now=self._s())
                proc.values.append((tp[1], tagged))
            proc.offsets[TopicPartition(*tp)] = records[-1].offset + 1
        self._line(f"{proc.name} txn {proc.txn} begins with {len(proc.values)} records")
        proc.phase = "processing"
        proc.ready_at = self.now + self.config.process_ms
        if not self.config.process_ms:
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
                self._observe(tp[0], tp[1], record.offset, record.value or b"")
                self._check_read(tp[1], record.offset, record.value or b"")
        self._pump(host)
        self._at(self.now + TICK_MS, "reader", ())

    def _feed(self) -> None:
        cfg = self.config
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
                rid = m.send(INPUT, value=value, partition=p, timestamp_ms=0, now=self._s())
                self._fed_ids[rid] = (p, value)
            except MetadataPendingError:
                self._at(self.now + TICK_MS, "feeder", ())
                break
            self._feed_queue.pop(0)
        self._pump(host)
