"""The simulated world for the admin client: the real
:class:`~kafkastate.core.admin.AdminMachine` against model brokers whose controller,
group coordinator and partition leaders move under it.

Theory of operation
-------------------
:class:`AdminSim` runs on the group world's scheduler, TCP-like network and host driver
(virtual time, per-connection FIFO pipes, delays, resets, broker crashes -- the very
classes) over an :class:`AdminCluster`, a :class:`~kafkastate.sim.cluster.SimCluster` that
also serves CreateTopics and DeleteRecords and can move what the admin client routes to:

* **controller moves** (``controller_move``): an election of ``election_ms`` during which
  every broker answers CreateTopics with NOT_CONTROLLER (in KRaft any broker forwards it to
  the active controller, KIP-590, so the client retries at any broker);
* **coordinator moves** (``coordinator_move``): the group coordinator moves to another
  broker, the old one answers NOT_COORDINATOR and the new one
  COORDINATOR_LOAD_IN_PROGRESS for ``load_ms`` while it loads the group's offsets;
* **leader moves** (``leader_move``): every partition's leader shifts to the next broker
  (leader epoch + 1); the old leader answers ListOffsets and DeleteRecords with
  NOT_LEADER_OR_FOLLOWER;
* **disconnects** (``reset``), **broker crashes** (``crash_broker``, which move what the
  broker led) and **delays** (``delay``) from the shared network.

One host runs the admin machine; its application starts one operation at a time, each
naming a resource that fails for good (a topic that exists, a partition out of range) next
to resources that must succeed: create_topics, list_offsets,
delete_records and list_consumer_group_offsets.

Invariants, after every event unless marked (E) end of run:
A1 every operation completes by its deadline (its ``timeout``); A2 each named resource
has one outcome, its value or a typed KafkaError (a timeout names the last error as its
cause); A3 one resource's failure does not hide another's success: a resource that fails
for good gets its own error and no other resource gets it, and each value is the model's
(a created topic exists with the partitions asked, an offset is the log's, a low watermark
the log start after the deletion, a group's offsets the committed ones); R1 after a
broker answered NOT_COORDINATOR for a group (and the client read it), the next request for
that group goes to the coordinator a FindCoordinator answer named since; R2 after a broker
answered NOT_LEADER_OR_FOLLOWER for a partition, the next request for it goes to a leader a
Metadata answer named since; R3 CreateTopics is applied only by an active controller, each
topic once; L1 (E) once the faults heal, every operation of a last round succeeds.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import random
import struct
from collections.abc import Hashable, Mapping
from typing import Any, Final

import attrs
from kio.schema.errors import ErrorCode

from kafkastate.core.admin import AdminConfig, AdminMachine, AdminOperationCompleted
from kafkastate.core.admin.types import CreatedTopic, ListedOffset, NewTopic, OffsetSpec
from kafkastate.core.client import ClientConfig
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, response_type
from kafkastate.errors import (
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkastate.sim.cluster import SERVED_VERSIONS, Request, SimCluster
from kafkastate.sim.coordinator import ClassicCoordinator, SimGroup
from kafkastate.sim.entropy import Entropy, SeededEntropy
from kafkastate.sim.host import HostDriver, _Host
from kafkastate.sim.network import _Conn
from kafkastate.sim.scheduler import InvariantViolation
from kafkastate.structs import OffsetAndMetadata, TopicPartition

__all__ = ["ADMIN_FAULTS", "AdminCluster", "AdminSim", "AdminSimConfig", "run_admin_seed"]

ADMIN_FAULTS: Final = (
    "delay",
    "reset",
    "crash_broker",
    "controller_move",
    "coordinator_move",
    "leader_move",
)
CREATE_TOPICS: Final = 19
DELETE_RECORDS: Final = 21
EXISTING: Final = "existing"
"""The topic every run starts with (``partitions`` partitions, ``RECORDS`` records each)."""
RECORDS: Final = 10
GROUPS: Final = ("g0", "g1")
_NOT_LEADER: Final = 6
_NOT_COORDINATOR: Final = 16
_LOAD_IN_PROGRESS: Final = 14
_NOT_CONTROLLER: Final = 41
_ALREADY_EXISTS: Final = 36
_OUT_OF_RANGE: Final = 1
_NO_TIME: Final = datetime.timedelta(0)
_ROUTING_ERRORS: Final = {
    _NOT_LEADER: "NOT_LEADER_OR_FOLLOWER",
    _LOAD_IN_PROGRESS: "COORDINATOR_LOAD_IN_PROGRESS",
    _NOT_COORDINATOR: "NOT_COORDINATOR",
    _NOT_CONTROLLER: "NOT_CONTROLLER",
}
"""The answers that send the admin client elsewhere (counted in ``stats``)."""
_OPS: Final = ("create_topics", "list_offsets", "delete_records", "list_group_offsets")


@attrs.frozen(kw_only=True)
class AdminSimConfig:
    """One admin run's options (drawn per seed by :meth:`draw`, or given)."""

    brokers: int = 3
    partitions: int = 3
    operations: int = 40  # started during the chaos phase, one at a time
    timeout_ms: int = 6_000  # each operation's deadline
    request_timeout_ms: int = 2_000
    retry_backoff_ms: int = 100
    election_ms: int = 400  # a controller election: NOT_CONTROLLER meanwhile
    load_ms: int = 400  # a new coordinator loading its groups
    chaos_ms: int = 20_000
    faults: tuple[str, ...] = ()
    fault_every_ms: int = 600
    latency_ms: int = 1

    @classmethod
    def draw(cls, entropy: Entropy) -> AdminSimConfig:
        """A swarm configuration: sizes, timeouts and the fault kinds of this run (each on
        with probability 1/2)."""
        faults = tuple(f for f in ADMIN_FAULTS if entropy.below(2, f"fault {f}"))
        return cls(
            brokers=2 + entropy.below(3, "brokers"),
            partitions=1 + entropy.below(3, "partitions"),
            timeout_ms=3_000 + 1_000 * entropy.below(5, "timeout"),
            request_timeout_ms=1_000 + 500 * entropy.below(3, "request timeout"),
            retry_backoff_ms=50 + 50 * entropy.below(4, "backoff"),
            election_ms=100 + 200 * entropy.below(4, "election"),
            load_ms=100 + 200 * entropy.below(4, "load"),
            faults=faults,
            fault_every_ms=300 + 300 * entropy.below(4, "fault rate"),
            latency_ms=1 + entropy.below(5, "latency"),
        )


class AdminCluster(SimCluster):
    """The simulated cluster with a controller, coordinator loads, movable leaders,
    CreateTopics and DeleteRecords.

    Args:
        brokers: how many brokers.
    """

    served: Mapping[int, tuple[int, int]] = {
        **SERVED_VERSIONS,
        CREATE_TOPICS: (5, 7),
        DELETE_RECORDS: (1, 2),
    }

    def __init__(self, brokers: int) -> None:
        super().__init__(brokers, ClassicCoordinator())
        self.controller = 1
        self.electing_until = -math.inf
        self.loading_until = -math.inf
        self.shift = 0  # leaders: the first live broker from partition + shift
        self.log_start: dict[tuple[str, int], int] = {}
        self.created: dict[str, int] = {}  # topic -> the controller that created it

    # ------------------------------------------------------------------ faults

    def leader(self, topic: str, partition: int) -> int | None:
        n = len(self.nodes)
        for i in range(n):
            node = self.nodes[(partition + self.shift + i) % n]
            if node in self.alive:
                return node
        return None

    def move_leaders(self) -> None:
        """Every partition's leader moves to the next live broker (leader epoch + 1)."""
        before = {tp: self.leader(*tp) for tp in self.logs}
        self.shift += 1
        for tp, old in before.items():
            if self.leader(*tp) != old:
                self.leader_epochs[tp] += 1

    def move_coordinator(self, now: float, load: float) -> None:
        """The group coordinator moves to the next live broker, which loads for ``load``."""
        live = sorted(self.alive)
        if len(live) > 1:
            after = [n for n in live if n > self.coordinator_node]
            self.coordinator_node = (after or live)[0]
            self.loading_until = now + load

    def elect(self, now: float, election: float) -> None:
        """A controller election of ``election`` seconds; then the next live broker leads."""
        live = sorted(self.alive)
        after = [n for n in live if n > self.controller]
        self.controller = (after or live or [self.controller])[0]
        self.electing_until = now + election

    def set_alive(self, node: int, alive: bool) -> None:
        super().set_alive(node, alive)
        if not alive and node == self.controller and self.alive:
            self.controller = min(self.alive)

    # ---------------------------------------------------------------- requests

    def handle(self, node: int, token: Hashable, request: Request, now: float) -> list[Any]:
        key, version, body = request.api_key, request.version, request.body
        if key == CREATE_TOPICS:
            return [self._create_topics(version, body, now)]
        if key == DELETE_RECORDS:
            return [self._delete_records(node, version, body)]
        if (
            key == ApiKey.OFFSET_FETCH
            and node == self.coordinator_node
            and now < self.loading_until
        ):
            cls = response_type(key, version)
            answer = build(
                cls, throttle_time=_NO_TIME, topics=(), error_code=ErrorCode(_LOAD_IN_PROGRESS)
            )
            return [answer]
        answers = super().handle(node, token, request, now)
        if key == ApiKey.LIST_OFFSETS:
            return [self._from_log_start(a) for a in answers]
        return answers

    def _offset_fetch(self, version: int, body: Any) -> Any:
        if body.topics is not None:
            return super()._offset_fetch(version, body)
        # every partition the group committed (the admin's "all of them")
        group = self.coordinator.groups.get(body.group_id)
        offsets = {} if group is None else group.offsets
        cls = response_type(ApiKey.OFFSET_FETCH, version)
        topic_cls = nested_type(cls, "OffsetFetchResponseTopic")
        part_cls = nested_type(cls, "OffsetFetchResponsePartition")
        topics = []
        for name in sorted({t for t, _ in offsets}):
            parts = tuple(
                build(
                    part_cls,
                    partition_index=p,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=ErrorCode(0),
                )
                for (t, p), offset in sorted(offsets.items())
                if t == name
            )
            topics.append(build(topic_cls, name=name, partitions=parts))
        return build(cls, throttle_time=_NO_TIME, topics=tuple(topics), error_code=ErrorCode(0))

    def _create_topics(self, version: int, body: Any, now: float) -> Any:
        cls = response_type(CREATE_TOPICS, version)
        result = nested_type(cls, "CreatableTopicResult")
        out = []
        for t in body.topics:
            name = str(t.name)
            if now < self.electing_until:
                code = _NOT_CONTROLLER  # R3: nothing is applied during an election
            elif name in self.topics:
                code = _ALREADY_EXISTS
            else:
                code = 0
                if name in self.created:
                    raise InvariantViolation("R3", f"topic {name} created twice", at=_ms(now))
                self.create_topic(name, int(t.num_partitions))
                self.created[name] = self.controller
            out.append(
                build(
                    result,
                    name=name,
                    topic_id=None,
                    error_code=ErrorCode(code),
                    error_message=None,
                    topic_config_error_code=0,
                    num_partitions=int(t.num_partitions) if code == 0 else -1,
                    replication_factor=int(t.replication_factor) if code == 0 else -1,
                    configs=None,
                )
            )
        return build(cls, throttle_time=_NO_TIME, topics=tuple(out))

    def _delete_records(self, node: int, version: int, body: Any) -> Any:
        cls = response_type(DELETE_RECORDS, version)
        topic_cls = nested_type(cls, "DeleteRecordsTopicResult")
        part_cls = nested_type(cls, "DeleteRecordsPartitionResult")
        topics = tuple(
            build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    self._delete_below(node, part_cls, str(t.name), p) for p in t.partitions
                ),
            )
            for t in body.topics
        )
        return build(cls, throttle_time=_NO_TIME, topics=topics)

    def _delete_below(self, node: int, part_cls: type[Any], topic: str, asked: Any) -> Any:
        """One partition of a DeleteRecords at ``node``: the log start moves up to the
        offset asked (-1: the high watermark), at the leader only."""
        tp = (topic, int(asked.partition_index))
        log = self.logs.get(tp)
        low, code = -1, 0
        if log is None:
            code = 3
        elif self.leader(*tp) != node:
            code = _NOT_LEADER
        else:
            offset = log.end if int(asked.offset) == -1 else int(asked.offset)
            if offset > log.end:
                code = _OUT_OF_RANGE
            else:
                low = self.log_start[tp] = max(self.log_start.get(tp, 0), offset)
        return build(part_cls, partition_index=tp[1], low_watermark=low, error_code=ErrorCode(code))

    def _from_log_start(self, answer: Any) -> Any:
        """ListOffsets' EARLIEST (offset 0 in the base model) is the log start here."""
        topics = []
        for t in answer.topics:
            parts = []
            for p in t.partitions:
                start = self.log_start.get((str(t.name), int(p.partition_index)), 0)
                if int(p.error_code) == 0 and int(p.offset) == 0:
                    p = dataclasses.replace(p, offset=start)
                parts.append(p)
            topics.append(dataclasses.replace(t, partitions=tuple(parts)))
        return dataclasses.replace(answer, topics=tuple(topics))


def _answer_codes(body: Any) -> list[int]:
    """The error codes of an answer: its own and its topics' partitions' (or topics')."""
    codes = [int(body.error_code)] if hasattr(body, "error_code") else []
    for t in getattr(body, "topics", None) or ():
        if hasattr(t, "error_code"):
            codes.append(int(t.error_code))
        codes += [int(p.error_code) for p in getattr(t, "partitions", None) or ()]
    return codes


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


@attrs.define
class _Call:
    """The operation in flight: what it asked and what each resource must come to."""

    op_id: int
    kind: str
    started: int  # ms
    deadline: int  # ms
    expect: dict[Any, Any]  # key -> an error type it must fail with, or None (a value)
    args: dict[Any, Any]


class _Watched:
    """The admin machine as the host driver sees it, telling the world which answers the
    client reads (R1, R2 judge what it sends after reading them)."""

    def __init__(self, machine: AdminMachine, world: AdminSim, host: str) -> None:
        self.machine = machine
        self._world = world
        self._host = host

    def __getattr__(self, name: str) -> Any:
        return getattr(self.machine, name)

    def receive_data(self, node: Any, data: bytes, *, now: float) -> None:
        host = self._world.hosts[self._host]
        conn = host.conns.get(node)
        if conn is not None:
            pos = 0
            while pos + 8 <= len(data):
                size, correlation = struct.unpack_from(">ii", data, pos)
                self._world._read_answer(conn.cid, correlation)
                pos += 4 + size
        self.machine.receive_data(node, data, now=now)


class AdminSim(HostDriver[_Host[Any]]):
    """One simulated admin run.

    Args:
        entropy: every decision's source.
        config: the run's options.
        cluster: the brokers (default: an :class:`AdminCluster` of ``config.brokers``; the
            harness's self-test passes a broken one).
    """

    config: AdminSimConfig
    cluster: AdminCluster

    def __init__(
        self, entropy: Entropy, config: AdminSimConfig, cluster: AdminCluster | None = None
    ) -> None:
        super().__init__(entropy, config, cluster or AdminCluster(config.brokers))
        cluster = self.cluster
        cluster.create_topic(EXISTING, config.partitions)
        cluster.created[EXISTING] = cluster.controller
        for p in range(config.partitions):
            cluster.append(EXISTING, p, [b"v%d" % i for i in range(RECORDS)])
        self.committed: dict[str, dict[tuple[str, int], int]] = {}
        for i, group in enumerate(GROUPS):
            offsets = {(EXISTING, p): 3 + i + p for p in range(config.partitions)}
            cluster.coordinator.groups[group] = SimGroup(group, offsets=dict(offsets))
            self.committed[group] = offsets
        rng = random.Random(entropy.below(1 << 30, "rng admin"))
        machine = AdminMachine(
            AdminConfig(
                client=ClientConfig(
                    bootstrap_servers=[(f"b{n}", 9092) for n in cluster.nodes],
                    connection=ConnectionConfig(request_timeout=config.request_timeout_ms / 1000),
                    metadata=MetadataConfig(retry_backoff=0.05),
                ),
                retry_backoff=config.retry_backoff_ms / 1000,
            ),
            rng=rng,
        )
        self.admin = machine
        self.hosts["admin"] = _Host("admin", _Watched(machine, self, "admin"), 0)
        self.call: _Call | None = None
        self.started = 0
        self.done: list[tuple[str, dict[Any, Any]]] = []
        self.outcomes: dict[str, int] = {}
        # answers sent, by (connection, correlation id): what reading them tells the client
        self._answers: dict[tuple[int, int], list[tuple[str, Any, int]]] = {}
        self._stale: dict[tuple[str, Any], int] = {}  # (kind, group or tp) -> the old broker
        self._fresh = 0
        self._line(f"config {attrs.asdict(config)}")

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Chaos, heal, a last round; raises InvariantViolation on the first failure."""
        cfg = self.config
        if cfg.faults:
            self._at(cfg.fault_every_ms, "fault", ())
        self._at(0, "app", ())
        self._run_until(cfg.chaos_ms)
        self._heal()
        self.cluster.electing_until = self.cluster.loading_until = -math.inf
        self._settle()
        self.done.clear()
        for kind in _OPS:  # L1: after the faults, each kind succeeds
            self._start(kind)
            self._settle()
            kind_done, results = self.done[-1]
            for key, value in results.items():
                if isinstance(value, KafkaTimeoutError):
                    raise InvariantViolation(
                        "L1", f"{kind_done}[{key!r}] timed out after the heal: {value}", at=self.now
                    )

    def _settle(self) -> None:
        limit = self.now + 4 * self.config.timeout_ms
        while self.call is not None and self.now < limit:
            self._run_until(self.now + 100)
        if self.call is not None:
            raise InvariantViolation("A1", f"{self.call.kind} never completed", at=self.now)

    def _on_app(self) -> None:
        if not self._chaos:
            return
        if self.call is None and self.started < self.config.operations:
            kind = _OPS[self.entropy.below(len(_OPS), "operation")]
            self._start(kind)
        self._at(self.now + self.config.chaos_ms // self.config.operations, "app", ())

    def _start(self, kind: str) -> None:
        cfg = self.config
        now = self._s()
        timeout = cfg.timeout_ms / 1000
        parts = [TopicPartition(EXISTING, p) for p in range(cfg.partitions)]
        m = self.admin
        expect: dict[Any, Any]
        args: dict[Any, Any] = {}
        if kind == "create_topics":
            self._fresh += 1
            fresh = f"t{self._fresh}"
            op = m.create_topics(
                [NewTopic(fresh, 2, 1), NewTopic(EXISTING, 1, 1)], now=now, timeout=timeout
            )
            expect = {fresh: None, EXISTING: TopicAlreadyExistsError}
        elif kind == "list_offsets":
            specs: dict[Any, int] = {
                tp: OffsetSpec.LATEST if tp.partition % 2 else OffsetSpec.EARLIEST for tp in parts
            }
            # a partition the topic does not have (a missing topic would stay in the
            # client's metadata and be refreshed at every backoff from then on)
            missing = TopicPartition(EXISTING, cfg.partitions + 7)
            specs[missing] = OffsetSpec.LATEST
            op = m.list_offsets(specs, now=now, timeout=timeout)
            expect = {tp: None for tp in parts}
            expect[missing] = UnknownTopicOrPartitionError
            args = specs
        elif kind == "delete_records":
            before: dict[Any, int] = {
                tp: 1 + self.entropy.below(RECORDS, "delete to") for tp in parts
            }
            before[TopicPartition(EXISTING, cfg.partitions + 5)] = 1
            op = m.delete_records(before, now=now, timeout=timeout)
            expect = {tp: None for tp in parts}
            expect[TopicPartition(EXISTING, cfg.partitions + 5)] = UnknownTopicOrPartitionError
            args = before
        else:
            group = GROUPS[self.started % len(GROUPS)]
            op = m.list_consumer_group_offsets(group, now=now, timeout=timeout)
            expect = {group: None}
        self.started += 1
        self.call = _Call(int(op), kind, self.now, self.now + cfg.timeout_ms, expect, args)
        self._line(f"admin {kind} #{op} until {self.call.deadline}")
        self._pump(self.hosts["admin"])

    # --------------------------------------------------------------- the machine

    def _on_machine_event(self, host: _Host[Any], event: Any) -> bool:
        if isinstance(event, AdminOperationCompleted):
            self._completed(event)
        return True

    def _completed(self, event: AdminOperationCompleted) -> None:
        call = self.call
        if call is None or int(event.op_id) != call.op_id:
            raise InvariantViolation("A2", f"an operation nobody started: {event}", at=self.now)
        self.call = None
        if self.now > call.deadline:  # A1
            raise InvariantViolation(
                "A1", f"{call.kind} completed at {self.now}, after {call.deadline}", at=self.now
            )
        results = dict(event.results)
        if list(results) != list(call.expect):  # A2: one outcome per resource, in order
            raise InvariantViolation(
                "A2",
                f"{call.kind}: results for {list(results)}, asked {list(call.expect)}",
                at=self.now,
            )
        for key, value in results.items():
            self._judge(call, key, value)
        self.done.append((call.kind, results))
        self._line(f"admin {call.kind} done {sorted(type(v).__name__ for v in results.values())}")

    def _judge(self, call: _Call, key: Any, value: Any) -> None:
        """A2 and A3 for one resource's outcome."""
        want = call.expect[key]
        kind = call.kind
        name = "timeout" if isinstance(value, KafkaTimeoutError) else type(value).__name__
        self.outcomes[f"{kind} {name}"] = self.outcomes.get(f"{kind} {name}", 0) + 1
        if isinstance(value, KafkaTimeoutError):
            if not isinstance(value.__cause__, (KafkaError, type(None))):
                raise InvariantViolation("A2", f"{kind}[{key!r}]: {value!r} no cause", at=self.now)
            return
        if isinstance(value, KafkaError):
            fails = want is not None and isinstance(value, want)
            # our own create whose answer was lost: its retry finds the topic there
            ours = (
                kind == "create_topics"
                and want is None
                and isinstance(value, TopicAlreadyExistsError)
                and key in self.cluster.topics
            )
            if not (fails or ours):
                raise InvariantViolation(
                    "A3", f"{kind}[{key!r}] failed with {value!r}, expected {want}", at=self.now
                )
            return
        if want is not None:
            raise InvariantViolation(
                "A3", f"{kind}[{key!r}] = {value!r}: it must fail with {want.__name__}", at=self.now
            )
        cluster = self.cluster
        ok = True
        if kind == "create_topics":
            ok = isinstance(value, CreatedTopic) and cluster.topics.get(key) == value.num_partitions
        elif kind == "list_offsets":
            tp = (key.topic, key.partition)
            spec = call.args[key]
            expected = cluster.logs[tp].end if spec == OffsetSpec.LATEST else None
            if expected is None:
                expected = cluster.log_start.get(tp, 0)
            ok = isinstance(value, ListedOffset) and value.offset == expected
        elif kind == "delete_records":
            tp = (key.topic, key.partition)
            ok = value == cluster.log_start.get(tp, 0) and value >= call.args[key]
        else:
            offsets = value
            ok = {
                (tp.topic, tp.partition): v.offset
                for tp, v in offsets.items()
                if isinstance(v, OffsetAndMetadata)
            } == self.committed[key]
        if not ok:
            raise InvariantViolation(
                "A3", f"{kind}[{key!r}] = {value!r}: not the model's", at=self.now
            )

    # ------------------------------------------------------------ routing (R1, R2)

    def _serve(self, conn: _Conn, request: Any) -> None:
        for what in self._resources(request):
            old = self._stale.get(what)
            if old == conn.broker:
                raise InvariantViolation(
                    "R1" if what[0] == "group" else "R2",
                    f"{what[1]!r} asked again at broker {old}, which answered that it is no "
                    "longer its coordinator or leader, before any answer named it again",
                    at=self.now,
                )
        super()._serve(conn, request)

    def _respond(self, conn: _Conn, request: Any, body: Any) -> None:
        for code in _answer_codes(body):
            if code in _ROUTING_ERRORS:
                self.stats[f"answer {_ROUTING_ERRORS[code]}"] += 1
        marks = self._marks(conn.broker, request, body)
        if marks:
            self._answers[(conn.cid, request.correlation_id)] = marks
        super()._respond(conn, request, body)

    def _read_answer(self, cid: int, correlation: int) -> None:
        """The client reads an answer: what it learns of coordinators and leaders."""
        for verdict, what, node in self._answers.pop((cid, correlation), ()):
            if verdict == "stale":
                self._stale[what] = node
            elif self._stale.get(what) == node:
                del self._stale[what]  # named again: asking there is right

    def _resources(self, request: Any) -> list[tuple[str, Any]]:
        if request.api_key == ApiKey.OFFSET_FETCH:
            return [("group", str(request.body.group_id))]
        if request.api_key in (ApiKey.LIST_OFFSETS, DELETE_RECORDS):
            return [
                ("partition", (str(t.name), int(p.partition_index)))
                for t in request.body.topics
                for p in t.partitions
            ]
        return []

    def _marks(self, broker: int, request: Any, body: Any) -> list[tuple[str, Any, int]]:
        """(``"stale"`` or ``"named"``, resource, broker) that this answer tells."""
        key = request.api_key
        if key == ApiKey.OFFSET_FETCH and int(body.error_code) == _NOT_COORDINATOR:
            return [("stale", ("group", str(request.body.group_id)), broker)]
        if key == ApiKey.FIND_COORDINATOR:
            return [
                ("named", ("group", str(c.key)), int(c.node_id))
                for c in getattr(body, "coordinators", ())
                if int(c.error_code) == 0
            ]
        if key in (ApiKey.LIST_OFFSETS, DELETE_RECORDS):
            return [
                ("stale", ("partition", (str(t.name), int(p.partition_index))), broker)
                for t in body.topics
                for p in t.partitions
                if int(p.error_code) == _NOT_LEADER
            ]
        if key == ApiKey.METADATA:
            return [
                ("named", ("partition", (str(t.name), int(p.partition_index))), int(p.leader_id))
                for t in body.topics
                for p in t.partitions
            ]
        return []

    # ------------------------------------------------------------------ faults

    def _check_safety(self, kind: str) -> None:
        del kind

    def _on_fault(self) -> None:
        if not self._chaos:
            return
        cfg = self.config
        self._at(self.now + cfg.fault_every_ms, "fault", ())
        kind = self._draw_fault()
        if kind is None:
            return
        self._drew_fault(kind)
        cluster = self.cluster
        now = self._s()
        if kind == "controller_move":
            cluster.elect(now, cfg.election_ms / 1000)
            self._line(f"fault election until {cluster.electing_until}: b{cluster.controller}")
        elif kind == "coordinator_move":
            cluster.move_coordinator(now, cfg.load_ms / 1000)
            self._line(f"fault coordinator b{cluster.coordinator_node}")
        elif kind == "leader_move":
            cluster.move_leaders()
            self._line(f"fault leaders shift {cluster.shift}")
        elif kind == "reset":
            host = self.hosts["admin"]
            conns = sorted(host.conns.values(), key=lambda c: c.cid)
            if conns:
                conn = conns[self.entropy.below(len(conns), "fault conn")]
                self._line(f"fault reset conn {conn.cid} b{conn.broker}")
                self._close(conn, notify_client=True)
        elif kind == "crash_broker" and len(cluster.alive) > 1:
            node = sorted(cluster.alive)[self.entropy.below(len(cluster.alive), "fault node")]
            self._broker_down(node)
            self._at(self.now + 500 * (1 + self.entropy.below(4, "down ms")), "broker_up", (node,))
        # "delay" is the network's own (it slows pipes while the chaos lasts)


def run_admin_seed(seed: int, config: AdminSimConfig | None = None) -> AdminSim:
    """One admin run of ``seed`` (its configuration drawn unless given); raises
    InvariantViolation on the first failure.

    Args:
        seed: the run's seed.
        config: the options, or None to draw them from the seed.

    Returns:
        The finished run (its trace, statistics and outcomes).
    """
    entropy = SeededEntropy(seed)
    sim = AdminSim(entropy, config if config is not None else AdminSimConfig.draw(entropy))
    sim.run()
    return sim
