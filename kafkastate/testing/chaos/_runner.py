"""One chaos run: cluster + proxy up, workloads and faults together, heal, check, report."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from .._cluster import KafkaCluster
from .._config import free_ports
from .._process import _pdeathsig_prefix
from ._checker import (
    CHECK_NAMES,
    CheckResult,
    Read,
    check_group,
    check_produce,
    check_txn,
    committed_offsets,
    fenced_records,
    mark_killed,
    read_topics,
)
from ._faults import FAULT_KINDS, Fault, FaultInjector, make_schedule, proxy_name
from ._plot import timeline_svg
from ._toxiproxy import Toxiproxy, ensure_toxiproxy
from ._txn import run_budget

__all__ = ["RUNTIMES", "ChaosOptions", "ChaosReport", "run_chaos"]

RUNTIMES = ("asyncio", "trio", "blocking")
BROKERS = 3
PARTITIONS = 6


@dataclass(frozen=True)
class ChaosOptions:
    """What one run does.

    Attributes:
        seed: the fault schedule's seed (with the options, the reproducer).
        records: records per runtime.
        keys: keys per runtime.
        duration: seconds the producers are paced over; the faults fall in this window.
        faults: how many faults.
        runtimes: which kafkastate runtimes run a workload (one process each).
        out: the directory for ack logs, the schedule, broker logs and the report.
        kafka_version: the broker version (default: the harness's).
        kinds: the fault kinds to draw from.
        txn_records: input records of the transactional workload per runtime (0: no
            transactional workload).
        group_records: input records of the consumer-group workload per runtime (0: no
            group workload).
    """

    seed: int
    records: int = 20_000
    keys: int = 500
    duration: float = 60.0
    faults: int = 5
    runtimes: Sequence[str] = RUNTIMES
    out: Path = field(default_factory=lambda: Path("chaos-run"))
    kafka_version: str | None = None
    kinds: Sequence[str] = FAULT_KINDS
    txn_records: int = 3_000
    group_records: int = 6_000

    def command(self) -> str:
        """The command line that replays this run's schedule."""
        return (
            f"python -m kafkastate.testing.chaos --seed {self.seed} --records {self.records}"
            f" --keys {self.keys} --duration {self.duration:g} --faults {self.faults}"
            f" --txn-records {self.txn_records} --group-records {self.group_records}"
            f" --runtimes {','.join(self.runtimes)}"
            + ("" if tuple(self.kinds) == FAULT_KINDS else f" --kinds {','.join(self.kinds)}")
        )


@dataclass
class ChaosReport:
    """A run's outcome.

    Attributes:
        options: what ran.
        results: one checker result per workload.
        timeline: the faults as applied (``Applied`` rows as dicts).
        fault_errors: faults that could not be applied or healed.
        workload_errors: workloads that exited with an error (their output tail).
        elapsed: seconds the run took.
    """

    options: ChaosOptions
    results: list[CheckResult]
    timeline: list[dict[str, object]]
    fault_errors: list[str]
    workload_errors: list[str]
    elapsed: float

    @property
    def ok(self) -> bool:
        """Whether every count is 0 and everything ran."""
        return (
            all(r.ok for r in self.results)
            and not self.fault_errors
            and not self.workload_errors
            and bool(self.results)
        )

    def faults_by_kind(self) -> Counter[str]:
        """How many faults of each kind were applied."""
        return Counter(str(row["kind"]) for row in self.timeline)

    def table(self) -> str:
        """The results as a markdown table, then the faults by kind."""
        head = ["workload", "acked", "failed", "read", *CHECK_NAMES]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.results:
            cells = [r.topic, f"{r.acked:,}", f"{r.failed:,}", f"{r.read:,}"]
            cells += [str(r.counts[name]) for name in CHECK_NAMES]
            lines.append("| " + " | ".join(cells) + " |")
        kinds = self.faults_by_kind()
        lines += [
            "",
            "| fault | count |",
            "|---|---:|",
            *(f"| {kind} | {kinds[kind]} |" for kind in FAULT_KINDS if kinds[kind]),
            f"| **total** | {sum(kinds.values())} |",
        ]
        lines += [
            f"{r.topic}: {r.fenced:,} records of transactions a killed process left open,"
            " aborted when its restart fenced it (read_uncommitted only)"
            for r in self.results
            if r.fenced
        ]
        lines += [
            f"{r.topic}: recovered "
            + ", ".join(f"{what} {n}" for what, n in sorted(r.recoveries.items()))
            for r in self.results
            if r.recoveries
        ]
        lines += [
            f"{r.topic}: {r.zombie_windows:,} zombie windows (two members owned a partition"
            " at once, the older one did no work on it: not a violation)"
            for r in self.results
            if r.zombie_windows
        ]
        return "\n".join(lines)

    def reproducer(self) -> str:
        """Seed, schedule and the command that replays them."""
        return (
            f"seed {self.options.seed}; schedule and timeline in "
            f"{self.options.out / 'faults.json'}\nreplay: {self.options.command()}"
        )


def _topics_admin(
    bootstrap: str, topics: Sequence[str], partitions: int = PARTITIONS, replicas: int = BROKERS
) -> None:
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415
    from confluent_kafka.cimpl import NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    isr = {"min.insync.replicas": str(min(2, replicas))}
    futures = admin.create_topics(
        [NewTopic(t, partitions, replication_factor=replicas, config=isr) for t in topics]
    )
    for future in futures.values():
        future.result(timeout=60)


def _leader_finder(bootstrap: str, topics: Sequence[str], seed: int) -> Callable[[], int | None]:
    """A seeded pick of a workload partition, and its leader now (asked with a short-lived
    confluent-kafka admin client, so none outlives the cluster)."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    rng = random.Random(seed ^ 0x5EED)

    def find() -> int | None:
        topic = rng.choice(list(topics))
        partition = rng.randrange(PARTITIONS)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            meta = admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]
        except Exception:
            return None
        return int(meta.leader) if meta.leader >= 0 else None

    return find


@dataclass
class _Workload:
    """One workload process: its name, command line, the topics it needs, and its check;
    ``log``/``resume`` for the ones a ``client_kill`` may kill (``resume``: the options a
    restarted process needs besides its incarnation and pacing start)."""

    name: str
    argv: list[str]
    topics: list[str]
    read: str | None
    check: Callable[[KafkaCluster, Read | None], CheckResult]
    prefill: tuple[str, int] | None = None
    log: Path | None = None
    resume: Callable[[], list[str]] | None = None


class _Processes:
    """The workload processes; carries out ``client_kill`` faults (from the injector's
    thread, the one that started them)."""

    def __init__(self, workloads: Sequence[_Workload], out: Path) -> None:
        self._workloads = {w.name: w for w in workloads}
        self._out = out
        self.running: dict[str, subprocess.Popen[str]] = {}
        self.incarnations: Counter[str] = Counter()
        self.started = time.monotonic()
        self._logged: dict[str, int] = {}  # log sizes when each process started

    def _log_size(self, name: str) -> int:
        log = self._workloads[name].log
        return log.stat().st_size if log is not None and log.exists() else 0

    def start(self, workload: _Workload, extra: Sequence[str] = ()) -> None:
        """Start (or restart, with ``extra`` options) one workload's process."""
        self._logged[workload.name] = self._log_size(workload.name)
        mode = "a" if self.incarnations[workload.name] else "w"
        with open(self._out / f"workload-{workload.name}.log", mode) as output:
            self.running[workload.name] = subprocess.Popen(
                [
                    *_pdeathsig_prefix(),
                    *(sys.executable, "-m", "kafkastate.testing.chaos._workload"),
                    *workload.argv,
                    *extra,
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def kill_and_restart(self, fault: Fault) -> str:
        """SIGKILL one running transactional or group process (picked by the fault's
        ``target``), mark its log, wait the fault's duration and start it again: same
        transactional.id / group, the next incarnation, paced from the first start."""
        alive = sorted(
            name
            for name, process in self.running.items()
            if self._workloads[name].log is not None and process.poll() is None
        )
        if not alive:
            return "no transactional or group workload running: skipped"
        # rather one that has logged work since it (re)started than one still starting
        working = [name for name in alive if self._log_size(name) > self._logged[name]]
        candidates = working or alive
        name = candidates[fault.params.get("target", 0) % len(candidates)]
        workload, process = self._workloads[name], self.running[name]
        process.kill()
        process.wait()
        if workload.log is not None:  # always: alive only lists workloads with a log
            mark_killed(workload.log, time.monotonic())
        time.sleep(fault.duration)
        self.incarnations[name] += 1
        extra = [
            *("--incarnation", str(self.incarnations[name])),
            *("--paced-from", repr(self.started)),
            *(workload.resume() if workload.resume is not None else []),
        ]
        self.start(workload, extra)
        return f"SIGKILL {name} (pid {process.pid}), restarted after {fault.duration} s"


def _produce_check(
    cluster: KafkaCluster, read: Read | None, *, topic: str, log: Path
) -> CheckResult:
    records, unreadable = read or ([], [])
    return check_produce(topic, records, unreadable, [log])


def _txn_check(
    cluster: KafkaCluster, read: Read | None, *, source: str, sink: str, group: str, log: Path
) -> CheckResult:
    records, unreadable = read or ([], [])
    result = check_txn(
        sink,
        records,
        unreadable,
        input_ends=_ends(cluster.bootstrap, source),
        committed=committed_offsets(cluster.bootstrap, group, source, PARTITIONS),
        txn_logs=[log],
    )
    uncommitted = read_topics(cluster.bootstrap, [sink], isolation="read_uncommitted")
    result.fenced = fenced_records(records, uncommitted[sink][0], [log])
    return result


def _workloads(options: ChaosOptions, out: Path, bootstrap: str, direct: str) -> list[_Workload]:
    """The workloads of a run (``bootstrap``: through the proxy; ``direct``: the brokers'
    own listener, for the runner's reads)."""
    common = ["--bootstrap", bootstrap, "--duration", str(options.duration)]
    found: list[_Workload] = []
    for runtime in options.runtimes:
        topic = f"chaos-produce-{runtime}"
        log = out / f"acks-{runtime}.jsonl"
        found.append(
            _Workload(
                name=f"produce-{runtime}",
                argv=[
                    *("produce", "--runtime", runtime, *common, "--topic", topic),
                    *("--records", str(options.records), "--keys", str(options.keys)),
                    *("--log", str(log)),
                ],
                topics=[topic],
                read=topic,
                check=partial(_produce_check, topic=topic, log=log),
            )
        )
    for runtime in options.runtimes if options.txn_records else ():
        source, sink = f"chaos-txn-in-{runtime}", f"chaos-txn-out-{runtime}"
        group, log = f"chaos-txn-{runtime}", out / f"txn-{runtime}.jsonl"
        found.append(
            _Workload(
                name=f"txn-{runtime}",
                argv=[
                    *("txn", "--runtime", runtime, *common, "--input", source, "--output", sink),
                    *("--group", group, "--transactional-id", group),
                    *("--partitions", str(PARTITIONS), "--log", str(log)),
                ],
                topics=[source, sink],
                read=sink,
                check=partial(_txn_check, source=source, sink=sink, group=group, log=log),
                prefill=(source, options.txn_records),
                log=log,
            )
        )
    for runtime in options.runtimes if options.group_records else ():
        source, group = f"chaos-group-in-{runtime}", f"chaos-group-{runtime}"
        log = out / f"group-{runtime}.jsonl"
        found.append(
            _Workload(
                name=f"group-{runtime}",
                argv=[
                    *("group", "--runtime", runtime, *common, "--topic", source),
                    *("--group", group, "--partitions", str(PARTITIONS), "--log", str(log)),
                    *("--records", str(options.group_records), "--seed", str(options.seed)),
                    *("--lifetime", str(min(max(6.0, options.duration / 8), 30.0))),
                ],
                topics=[source],
                read=None,
                check=partial(_group_check, source=source, group=group, log=log),
                prefill=(source, options.group_records),
                log=log,
                resume=partial(_group_resume, direct, group, source),
            )
        )
    return found


def _group_resume(bootstrap: str, group: str, source: str) -> list[str]:
    """A restarted group process starts from the group's committed offsets (so it knows
    when the input is done even if the dead one committed the end)."""
    committed = committed_offsets(bootstrap, group, source, PARTITIONS)
    done = ",".join(f"{p}:{o}" for p, o in sorted(committed.items()) if o >= 0)
    return ["--resume", done] if done else []


def _group_check(
    cluster: KafkaCluster, read: Read | None, *, source: str, group: str, log: Path
) -> CheckResult:
    return check_group(
        source,
        input_ends=_ends(cluster.bootstrap, source),
        committed=committed_offsets(cluster.bootstrap, group, source, PARTITIONS),
        member_logs=[log],
    )


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def _prefill(bootstrap: str, topic: str, count: int) -> None:
    """Write the transactional workload's input with confluent-kafka (not under test)."""
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )
    for i in range(count):
        while True:
            try:
                producer.produce(topic, f"in{i}".encode(), partition=i % PARTITIONS)
                break
            except BufferError:  # librdkafka's queue (100,000 records) is full: let it drain
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not write the input of {topic}")


def run_chaos(options: ChaosOptions) -> ChaosReport:
    """Run the workloads under the scheduled faults and check the result.

    Args:
        options: the run.

    Returns:
        The report (also written to ``options.out / "report.json"``).

    Raises:
        PrerequisiteError: java, mvn or go (for Toxiproxy's first build) is missing.
    """
    started = time.monotonic()
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    binary = ensure_toxiproxy()
    shutil.rmtree(out / "cluster", ignore_errors=True)
    proxy_ports = dict(zip(range(1, BROKERS + 1), free_ports(BROKERS), strict=True))
    schedule = make_schedule(
        options.seed, options.faults, options.duration * 0.9, BROKERS, options.kinds
    )
    print(f"chaos: seed {options.seed}, {len(schedule)} faults:", flush=True)
    for fault in schedule:
        print(f"  {json.dumps(asdict(fault))}", flush=True)
    with (
        Toxiproxy(binary, out / "toxiproxy.log", seed=options.seed) as proxy,
        KafkaCluster.start(
            options.kafka_version,
            brokers=BROKERS,
            proxy_ports=proxy_ports,
            workdir=out / "cluster",
        ) as cluster,
    ):
        proxy.start()
        for broker in cluster.brokers:
            upstream = broker.proxied_port
            if upstream is None:  # pragma: no cover -- start(proxy_ports=...) sets it
                raise RuntimeError("the cluster has no PROXIED listener")
            proxy.create_proxy(proxy_name(broker.node_id), proxy_ports[broker.node_id], upstream)
        workloads = _workloads(options, out, str(cluster.proxied_bootstrap), cluster.bootstrap)
        topics = [topic for w in workloads for topic in w.topics]
        _topics_admin(cluster.bootstrap, topics)
        for workload in workloads:
            if workload.prefill is not None:
                _prefill(cluster.bootstrap, *workload.prefill)
        processes = _Processes(workloads, out)
        injector = FaultInjector(
            cluster,
            proxy,
            schedule,
            _leader_finder(cluster.bootstrap, topics, options.seed),
            kill_client=processes.kill_and_restart,
        )
        for workload in workloads:
            processes.start(workload)
        injector.run()  # in this thread: the brokers it restarts live as long as it does
        workload_errors: list[str] = []
        budget = run_budget(options.duration)
        for name in list(processes.running):
            worker = processes.running[name]
            try:
                code = worker.wait(timeout=max(1.0, budget - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                worker.kill()
                code = worker.wait()
                workload_errors.append(f"{name}: timed out")
            if code != 0:
                log_tail = (out / f"workload-{name}.log").read_text()[-2000:]
                workload_errors.append(f"{name}: exit {code}\n{log_tail}")
        injector.write(out / "faults.json")
        applied = [asdict(row) for row in injector.timeline]
        (out / "timeline.svg").write_text(
            timeline_svg(
                applied,
                max(injector.now(), options.duration),
                title=f"chaos run, seed {options.seed}: {len(applied)} faults",
            )
        )
        proxy.reset()
        cluster.heal()
        reads = read_topics(cluster.bootstrap, [w.read for w in workloads if w.read])
        results = [w.check(cluster, reads.get(w.read or "")) for w in workloads]
    report = ChaosReport(
        options=options,
        results=results,
        timeline=[asdict(row) for row in injector.timeline],
        fault_errors=injector.errors,
        workload_errors=workload_errors,
        elapsed=round(time.monotonic() - started, 1),
    )
    (out / "report.json").write_text(
        json.dumps(
            {
                "ok": report.ok,
                "seed": options.seed,
                "command": options.command(),
                "elapsed": report.elapsed,
                "results": [
                    {
                        "topic": r.topic,
                        "acked": r.acked,
                        "failed": r.failed,
                        "read": r.read,
                        "fenced": r.fenced,
                        "recoveries": dict(r.recoveries),
                        "zombie_windows": r.zombie_windows,
                        "counts": r.counts,
                        "examples": dict(r.examples),
                    }
                    for r in results
                ],
                "timeline": report.timeline,
                "fault_errors": report.fault_errors,
                "workload_errors": report.workload_errors,
            },
            indent=1,
        )
    )
    return report
