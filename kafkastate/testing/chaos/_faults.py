"""The fault schedule (seeded, so a run replays) and the injector that carries it out.

A schedule is a list of :class:`Fault`: when it starts (seconds after the workloads start),
what it is, which broker it hits (a ``leader_kill``/``controller_kill`` finds its broker when
it fires) and how long it lasts before it is healed. Faults do not overlap: the window is cut
into one slot per fault. The injector records what it actually did (:class:`Applied`),
which is the run's fault timeline.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._cluster import KafkaCluster
from .._errors import HarnessError
from ._toxiproxy import Toxiproxy

__all__ = [
    "FAULT_KINDS",
    "Applied",
    "Fault",
    "FaultInjector",
    "active_controller",
    "make_schedule",
    "proxy_name",
]

FAULT_KINDS = (
    "leader_kill",  # SIGKILL the leader of a workload partition, restart it after `duration`
    "pause",  # SIGSTOP a broker for `duration` (a GC pause), then SIGCONT
    "controller_kill",  # SIGKILL the active KRaft controller, restart it after `duration`
    "partition",  # disable one broker's proxy: clients cannot reach it for `duration`
    "latency",  # every proxy adds `latency_ms` (+ jitter) each way
    "bandwidth",  # every proxy is limited to `rate_kb` KB/s each way
    "reset_peer",  # one broker's connections are reset (TCP RST) after `timeout_ms`
    "client_kill",  # SIGKILL a transactional or group workload process, restart it after
    # `duration` (it reuses its transactional.id / group and must recover)
)


@dataclass(frozen=True)
class Fault:
    """One planned fault.

    Attributes:
        at: seconds after the workloads start.
        kind: one of :data:`FAULT_KINDS`.
        duration: seconds until it is healed.
        node: the broker it hits; ``None`` for the leader/controller kinds (found when the
            fault fires), for the kinds that hit every proxy and for ``client_kill``.
        params: the toxic's attributes (milliseconds, KB/s); for ``client_kill``,
            ``target``: a seeded number that picks the workload process among those running.
    """

    at: float
    kind: str
    duration: float
    node: int | None = None
    params: dict[str, int] = field(default_factory=dict)


@dataclass
class Applied:
    """What the injector did: the fault timeline's rows.

    Attributes:
        kind: the fault kind.
        node: the broker it hit (``None``: every proxy).
        started: seconds after the workloads started.
        healed: when it was healed (``None``: not yet, or healing failed).
        detail: what was done, for the reproducer.
    """

    kind: str
    node: int | None
    started: float
    healed: float | None = None
    detail: str = ""


def make_schedule(
    seed: int,
    count: int,
    window: float,
    brokers: int,
    kinds: Sequence[str] = FAULT_KINDS,
) -> list[Fault]:
    """A seeded, non-overlapping fault schedule over ``window`` seconds.

    Kinds come round-robin from a seeded shuffle, so any ``len(kinds)`` consecutive faults
    have every kind once.

    Args:
        seed: the seed (the run's reproducer).
        count: how many faults.
        window: seconds the faults are spread over.
        brokers: how many brokers (nodes 1..brokers).
        kinds: which fault kinds to draw from.

    Returns:
        The faults, in time order.
    """
    rng = random.Random(seed)
    order = list(kinds)
    faults: list[Fault] = []
    slot = window / max(count, 1)
    for i in range(count):
        if i % len(order) == 0:
            rng.shuffle(order)
        kind = order[i % len(order)]
        at = i * slot + rng.uniform(0.05, 0.2) * slot
        duration = max(1.0, rng.uniform(0.25, 0.5) * slot)
        node: int | None = None
        params: dict[str, int] = {}
        if kind in ("pause", "partition", "reset_peer"):
            node = rng.randint(1, brokers)
        if kind == "latency":
            params = {"latency": rng.choice((50, 150, 400)), "jitter": rng.choice((0, 50))}
        elif kind == "bandwidth":
            params = {"rate": rng.choice((16, 64, 256))}
        elif kind == "reset_peer":
            params = {"timeout": rng.choice((0, 100, 500))}
        elif kind == "client_kill":
            params = {"target": rng.randrange(1 << 16)}
        faults.append(
            Fault(at=round(at, 2), kind=kind, duration=round(duration, 2), node=node, params=params)
        )
    return faults


def proxy_name(node: int) -> str:
    """The Toxiproxy proxy in front of broker ``node``."""
    return f"broker-{node}"


def active_controller(cluster: KafkaCluster) -> int | None:
    """The KRaft quorum's leader, read from the nodes' ``quorum-state`` files (the newest
    epoch any node has written), or ``None`` if none names one."""
    best: tuple[int, int] | None = None
    for broker in cluster.brokers:
        for state_file in broker.node_dir.glob("data/__cluster_metadata-0/quorum-state"):
            try:
                state = json.loads(state_file.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
            if leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
    return None if best is None else best[0]


class FaultInjector:
    """Carries out a schedule in the calling thread (:meth:`run`): apply each fault at its
    time, heal it after its duration, record the timeline.

    It runs in the caller's thread, not a thread of its own, because the harness ties each
    broker JVM to the thread that started it (``setpriv --pdeathsig``): a broker restarted
    from a short-lived thread is SIGKILLed by the kernel when that thread ends.

    Args:
        cluster: the harness cluster (its brokers are killed, paused and restarted).
        proxy: the Toxiproxy in front of every broker (proxies named by :func:`proxy_name`).
        schedule: the faults.
        find_leader: returns the broker that leads a workload partition now (or ``None``).
        kill_client: carries out a ``client_kill`` (SIGKILL a workload process, wait the
            fault's duration, restart it) and says what it did; ``None``: the kind is
            skipped.
        restart_timeout: seconds a killed broker has to come back.
    """

    def __init__(
        self,
        cluster: KafkaCluster,
        proxy: Toxiproxy,
        schedule: Sequence[Fault],
        find_leader: Callable[[], int | None],
        *,
        kill_client: Callable[[Fault], str] | None = None,
        restart_timeout: float = 120.0,
    ) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.schedule = list(schedule)
        self.timeline: list[Applied] = []
        self.errors: list[str] = []
        self._find_leader = find_leader
        self._kill_client = kill_client
        self._restart_timeout = restart_timeout
        self._t0 = time.monotonic()

    def now(self) -> float:
        """Seconds since :meth:`run` started."""
        return time.monotonic() - self._t0

    def run(self, *, started: float | None = None) -> None:
        """Apply and heal every fault of the schedule, in time order; a fault that cannot be
        applied is recorded in :attr:`errors` and everything is healed before the next.

        Args:
            started: the ``time.monotonic()`` the schedule's times count from (default: now).
        """
        self._t0 = time.monotonic() if started is None else started
        for fault in self.schedule:
            time.sleep(max(0.0, fault.at - self.now()))
            try:
                self._apply(fault)
            except Exception as exc:  # a fault that could not be applied is reported, not fatal
                self.errors.append(f"{fault.kind} at {fault.at}: {exc!r}")
                self._heal_all()

    def _apply(self, fault: Fault) -> None:
        node = fault.node
        if fault.kind == "leader_kill":
            node = self._find_leader()
        elif fault.kind == "controller_kill":
            node = active_controller(self.cluster)
        applied = Applied(kind=fault.kind, node=node, started=round(self.now(), 2))
        self.timeline.append(applied)
        if fault.kind in ("latency", "bandwidth", "reset_peer"):
            self._toxic(fault, node, applied)
        elif fault.kind == "client_kill":
            applied.detail = (
                "no client to kill: skipped"
                if self._kill_client is None
                else self._kill_client(fault)
            )
        elif node is None:
            applied.detail = "no broker to hit: skipped"
            return
        else:
            self._on_broker(fault, node, applied)
        applied.healed = round(self.now(), 2)

    def _on_broker(self, fault: Fault, node: int, applied: Applied) -> None:
        broker = self.cluster.broker(node)
        if fault.kind in ("leader_kill", "controller_kill"):
            broker.kill()
            applied.detail = f"SIGKILL node {node}, restart after {fault.duration} s"
            time.sleep(fault.duration)
            broker.start(timeout=self._restart_timeout)
        elif fault.kind == "pause":
            broker.pause()
            applied.detail = f"SIGSTOP node {node} for {fault.duration} s"
            try:
                time.sleep(fault.duration)
            finally:
                broker.resume()
        elif fault.kind == "partition":
            self.proxy.set_enabled(proxy_name(node), False)
            applied.detail = f"proxy of node {node} disabled for {fault.duration} s"
            try:
                time.sleep(fault.duration)
            finally:
                self.proxy.set_enabled(proxy_name(node), True)
        else:
            raise HarnessError(f"unknown fault kind {fault.kind!r}")

    def _toxic(self, fault: Fault, node: int | None, applied: Applied) -> None:
        kind = fault.kind
        targets = [node] if node is not None else [b.node_id for b in self.cluster.brokers]
        streams = ("downstream",) if kind == "reset_peer" else ("downstream", "upstream")
        added: list[tuple[str, str]] = []
        try:
            for target in targets:
                for stream in streams:
                    name = f"{kind}-{stream}"
                    self.proxy.add_toxic(
                        proxy_name(target), name, kind, fault.params, stream=stream
                    )
                    added.append((proxy_name(target), name))
            where = f"node {node}" if node is not None else "every proxy"
            applied.detail = f"{kind} {fault.params} on {where} for {fault.duration} s"
            time.sleep(fault.duration)
        finally:
            for proxy, name in added:
                self.proxy.remove_toxic(proxy, name)

    def _heal_all(self) -> None:
        try:
            self.proxy.reset()
            self.cluster.heal(timeout=self._restart_timeout)
        except Exception as exc:
            self.errors.append(f"heal: {exc!r}")

    def write(self, path: Path) -> None:
        """Write the schedule and the timeline as JSON (the reproducer's half)."""
        path.write_text(
            json.dumps(
                {
                    "schedule": [asdict(f) for f in self.schedule],
                    "timeline": [asdict(a) for a in self.timeline],
                    "errors": self.errors,
                },
                indent=1,
            )
        )
