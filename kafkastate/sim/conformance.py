"""Conformance scenarios: the same scripted conversation against the simulator's broker
model and against a real broker (DST.md A3.9).

Theory of operation
-------------------
A *scenario* is a function of a :class:`Session`: it sends hand-built group and transaction
requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, InitProducerId,
AddPartitionsToTxn, EndTxn) in the name of a few clients, lets time pass, and records each
answer under a step label. The session talks to a :class:`Driver`: :class:`SimDriver` hands
the requests to the simulated cluster (:class:`~kafkastate.sim.txncluster.TxnCluster` with
its :class:`~kafkastate.sim.coordinator.ClassicCoordinator`) in virtual time; the test suite's
real driver sends them over kafkastate's blocking connections to a broker the harness
started, and sleeps for real. The two recordings, normalised, must be equal; a difference is
a bug in the model (or a Kafka version it does not model).

Normalisation (:func:`normalise`): member ids and producer ids become ``m1``, ``m2``, ...
and ``p1``, ... in order of first appearance (the broker makes them up), throttle times and
error messages are dropped, assignments and subscriptions are decoded, member lists are
sorted (the broker keeps members in a hash map, so its order is arbitrary). A request that is
not answered within the driver's grace period is recorded as ``"parked"`` (a JoinGroup
waiting for the other members, a follower's SyncGroup waiting for the leader's); the scenario
collects its answer later with :meth:`Session.collect`. CONCURRENT_TRANSACTIONS (and a
coordinator still loading) is retried, as a client does, and not recorded: how often a
broker answers it depends on how fast its markers are written.

Scenarios keep to what a broker shows deterministically: a dynamic member's join
and leave, session expiry (timeouts with a wide margin on both sides), static members'
restart and replacement (KIP-345), a cooperative two-round rebalance, commits with a stale
generation and during CompletingRebalance, transaction fencing, abort and timeout, and
KIP-848 groups (ConsumerGroupHeartbeat: reconciliation when a second member joins, fenced
and stale epochs, leaving, static members' -2 leave and takeover, session expiry, KIP-1263's
batched target assignments), answered by the model's
:class:`~kafkastate.sim.coordinator848.ConsumerCoordinator`. KIP-848 topic ids are
normalised like member ids (``t1``...).

A scenario may need group configs (:data:`GROUP_CONFIGS`: KIP-848 groups' own
``consumer.session.timeout.ms`` and ``consumer.assignment.interval.ms``); the session sets
them before the first request (:meth:`Driver.configure_group`: IncrementalAlterConfigs at a
real broker, :meth:`~kafkastate.sim.coordinator848.ConsumerCoordinator.configure_group` in
the model).

Two scenarios need three brokers (:data:`BROKERS`): ``coordinator_move`` moves the group's
coordinator twice (:meth:`Driver.move_coordinator`: the real driver reorders the replicas of
``__consumer_offsets`` and elects the preferred leader; the model's
:meth:`~kafkastate.sim.cluster.SimCluster.move_group_coordinator`), once while a rebalance is being
prepared and once while it completes. Group requests go to the broker the last
FindCoordinator named (:meth:`Session.find_coordinator`, recorded with the node as ``n1``,
``n2``... by first appearance), so the steps between a move and the next FindCoordinator
show what the old coordinator answers; ``kip848_coordinator_move`` does the same to a KIP-848
group, once while a member revokes and once after a static member left for now (-2). How
long a new coordinator takes to load (and its followers to catch up) is timing: the real
driver's move returns once the new coordinator answers for the group and has committed a
write (Kafka defers every write after a load until the high watermark reaches the loaded
log's end), and the old one refuses it; COORDINATOR_LOAD_IN_PROGRESS is retried, as a
client does, not recorded.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Final, Protocol

from kafkastate.core.consumer.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, request_type
from kafkastate.sim.cluster import Request
from kafkastate.sim.coordinator848 import ConsumerCoordinator
from kafkastate.sim.txncluster import (
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    TXN_SERVED_VERSIONS,
    TxnCluster,
)
from kafkastate.structs import TopicPartition

__all__ = [
    "BROKERS",
    "GROUP_CONFIGS",
    "PARKED",
    "SCENARIOS",
    "Driver",
    "Session",
    "SimDriver",
    "normalise",
    "offset_commit",
    "run_scenario",
    "served_versions",
]

PARKED: Final = "parked"
"""What a request not answered within the grace period is recorded as."""
SESSION_TIMEOUT: Final = 6.0
"""The members' ``session.timeout.ms``: the broker's smallest (``group.min.session.timeout.ms``)."""
REBALANCE_TIMEOUT: Final = 20.0
"""The members' ``max.poll.interval.ms`` (JoinGroup's rebalance timeout)."""
METADATA_VERSION: Final = 12
"""Metadata version a session asks topic ids with."""
OFFSET_COMMIT_848: Final = 9
"""The OffsetCommit version a KIP-848 member commits with (member epochs)."""
SESSION_848: Final = 6.0
"""``kip848_session_expiry``'s group ``consumer.session.timeout.ms`` (the harness's broker
lowers ``group.consumer.min.session.timeout.ms`` to it)."""
ASSIGNMENT_INTERVAL: Final = 3.0
"""``kip848_assignment_batching``'s group ``consumer.assignment.interval.ms``."""
GRACE: Final = 2.0
"""Seconds a real broker gets to answer before a request counts as parked."""
PATIENCE: Final = 15.0
"""Seconds a real broker gets to answer a request that must be answered."""
_LOADING: Final = 14
"""COORDINATOR_LOAD_IN_PROGRESS: a group request meeting it is sent again (a client does)."""
_RETRIED: Final = frozenset({14, 15, 51})
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE (a broker that just started),
CONCURRENT_TRANSACTIONS (a transaction still completing): a client retries them."""
_DROPPED: Final = frozenset({"throttle_time", "error_message"})
_MEMBER_FIELDS: Final = frozenset({"member_id", "leader"})


def offset_commit(
    version: int,
    group: str,
    topic: str,
    member_id: str,
    epoch: int,
    *,
    offset: int,
    instance: str | None = None,
) -> Any:
    """OffsetCommit ``version`` (topics by name) of ``topic``'s partition 0 at ``offset``,
    for ``member_id`` at generation or member ``epoch`` (-1 and ``""``: a simple commit),
    with no retention or commit timestamp where the version has them."""
    cls = request_type(ApiKey.OFFSET_COMMIT, version)
    part = build(
        nested_type(cls, "OffsetCommitRequestPartition"),
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
        commit_timestamp=-1,
    )
    topic_entry = build(
        nested_type(cls, "OffsetCommitRequestTopic"), name=topic, topic_id=None, partitions=(part,)
    )
    return build(
        cls,
        group_id=group,
        generation_id_or_member_epoch=epoch,
        generation_id=epoch,
        member_id=member_id,
        group_instance_id=instance,
        retention_time=datetime.timedelta(milliseconds=-1),
        topics=(topic_entry,),
    )


class Driver(Protocol):
    """Where a session's requests go: the simulated cluster or a real broker."""

    def submit(self, client: str, request: Any, node: int | None = None) -> Hashable:
        """Send ``request`` for ``client`` to broker ``node`` (None: the bootstrap
        broker); returns a ticket for its answer."""
        ...

    def move_coordinator(self) -> None:
        """Move the group coordinator to the next broker (node ids in a cycle); return
        once the new one answers for the groups and the old one refuses them."""
        ...

    def configure_group(self, group: str, configs: Mapping[str, str]) -> None:
        """Set group configs of ``group`` (IncrementalAlterConfigs, SET)."""
        ...

    def answer(self, ticket: Hashable, *, wait: float) -> Any | None:
        """The answer to ``ticket`` if it came within ``wait`` seconds (a real broker's
        grace period; the model answers at once or not until something happens), else
        None."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass (virtual or real)."""
        ...


class SimDriver:
    """The simulated cluster, in virtual time.

    Args:
        topics: topics to create, name -> partitions.
        brokers: how many brokers (the coordinators start on broker 1).
    """

    def __init__(self, topics: Mapping[str, int], *, brokers: int = 1) -> None:
        coordinator = ConsumerCoordinator()
        self.coordinator = coordinator
        self.cluster = TxnCluster(brokers, coordinator, txn_node=1)
        coordinator.topics = self.cluster.topics
        for name, partitions in topics.items():
            self.cluster.create_topic(name, partitions)
        self.now = 0.0
        self._answers: dict[Hashable, Any] = {}
        self._tickets = 0

    def submit(self, client: str, request: Any, node: int | None = None) -> Hashable:
        self._tickets += 1
        token = (client, self._tickets)
        api_key, version = int(request.__api_key__), int(request.__version__)
        parsed = Request(api_key, version, self._tickets, request)
        for answer in self.cluster.handle(node or 1, token, parsed, self.now):
            self._answers[token] = answer
        self._settle()
        return token

    def answer(self, ticket: Hashable, *, wait: float) -> Any | None:
        del wait
        return self._answers.pop(ticket, None)

    def configure_group(self, group: str, configs: Mapping[str, str]) -> None:
        self.coordinator.configure_group(group, configs)

    def move_coordinator(self) -> None:
        nodes = self.cluster.nodes
        current = nodes.index(self.cluster.coordinator_node)
        self.cluster.move_group_coordinator(nodes[(current + 1) % len(nodes)], now=self.now)
        self._settle()

    def sleep(self, seconds: float) -> None:
        until = self.now + seconds
        while True:
            due = [
                t
                for t in (self.cluster.coordinator.get_timer(), self.cluster.txn_timer())
                if t is not None and t <= until
            ]
            if not due:
                break
            self.now = max(self.now, min(due))
            self.cluster.coordinator.handle_timer(now=self.now)
            self.cluster.handle_txn_timer(now=self.now)
            self._settle()
        self.now = until

    def _settle(self) -> None:
        """Answers of parked requests; markers written and answered at once."""
        for reply in self.cluster.coordinator.take_replies():
            self._answers[reply.token] = reply.response
        while self.cluster.markers_out:
            marker = self.cluster.markers_out.pop(0)
            answer = self.cluster.write_markers(marker.dst, marker.frame()[4:])
            self.cluster.markers_answered(answer[4:])


def normalise(value: Any, names: dict[str, str]) -> Any:
    """A response (or part of one) as plain data with made-up ids replaced by symbols
    (``names`` maps each id seen so far to its symbol and grows)."""
    if isinstance(value, tuple | list):
        items = [normalise(v, names) for v in value]
        if items and all(isinstance(v, dict) and "member_id" in v for v in items):
            items.sort(key=lambda v: str(v["member_id"]))  # the broker's order is a hash's
        return items
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is None:
        if isinstance(value, datetime.timedelta):
            return int(value.total_seconds() * 1000)
        if isinstance(value, bytes):
            return value.hex()
        if isinstance(value, uuid.UUID):
            return _symbol(names, "t", str(value))  # a topic id (the broker makes them up)
        return value if value is None or isinstance(value, str | bool) else int(value)
    out: dict[str, Any] = {}
    for field in fields:
        if field in _DROPPED or field.startswith("_"):
            continue
        item = getattr(value, field)
        if field in _MEMBER_FIELDS and item:
            out[field] = _symbol(names, "m", str(item))
        elif field == "producer_id" and int(item) >= 0:
            out[field] = _symbol(names, "p", str(int(item)))
        elif field == "assignment" and isinstance(item, bytes):
            got = decode_assignment(bytes(item)).partitions if item else ()
            out[field] = sorted([topic, p] for topic, p in got)
        elif field == "metadata" and isinstance(item, bytes):
            sub = decode_subscription(bytes(item))
            out[field] = {
                "topics": list(sub.topics),
                "owned": sorted([topic, p] for topic, p in sub.owned_partitions),
                "user_data": None if sub.user_data is None else bytes(sub.user_data).hex(),
            }
        else:
            out[field] = normalise(item, names)
    return out


def _code(answer: Any) -> int:
    """An answer's error code: its own, or its first partition's (OffsetCommit)."""
    code = getattr(answer, "error_code", None)
    if code is None:
        topics = getattr(answer, "topics", None) or ()
        parts = [p for t in topics for p in t.partitions]
        code = parts[0].error_code if parts else 0
    return int(code)


def _symbol(names: dict[str, str], prefix: str, raw: str) -> str:
    if raw not in names:
        names[raw] = f"{prefix}{sum(1 for s in names.values() if s.startswith(prefix)) + 1}"
    return names[raw]


class Session:
    """One scenario's conversation: requests by client name, answers recorded by step.

    Args:
        driver: where the requests go.
        versions: the version to speak per API key.
        group: the group id.
        topic: a topic with four partitions, for assignments, commits and transactions.
    """

    def __init__(
        self, driver: Driver, versions: Mapping[int, int], *, group: str, topic: str
    ) -> None:
        self.driver = driver
        self.versions = versions
        self.group = group
        self.topic = topic
        self.ids: dict[str, str] = {}
        """client -> its member id (the last one the coordinator gave it)."""
        self.generation: dict[str, int] = {}
        self.producers: dict[str, tuple[int, int]] = {}
        """client -> (producer id, epoch)."""
        self.steps: dict[str, Any] = {}
        self._names: dict[str, str] = {}
        self._parked: dict[str, tuple[str, Hashable, int]] = {}
        self._topic_uuid: Any = None
        self.epochs: dict[str, int] = {}
        """client -> its last KIP-848 member epoch."""
        self.node: int | None = None
        """The broker group requests go to: the one the last FindCoordinator named (None:
        the bootstrap broker)."""
        self.session_timeout = SESSION_TIMEOUT
        """The ``session.timeout.ms`` JoinGroup asks for, in seconds."""

    # -- plumbing

    def _cls(self, api_key: int) -> type[Any]:
        return request_type(api_key, self.versions[api_key])

    def _send(self, step: str, client: str, request: Any) -> Any | None:
        for _attempt in range(50):
            ticket = self.driver.submit(client, request, self.node)
            answer = self.driver.answer(ticket, wait=GRACE)
            if answer is None:
                self._parked[step] = (client, ticket, int(request.__api_key__))
                self.steps[step] = PARKED
                return None
            if _code(answer) != _LOADING:
                break
            self.driver.sleep(0.1)  # a coordinator still loading the group: again
        return self._record(step, client, answer)

    def _record(self, step: str, client: str, answer: Any) -> Any:
        if hasattr(answer, "generation_id") and hasattr(answer, "leader"):  # JoinGroup
            if answer.member_id:
                self.ids[client] = str(answer.member_id)
            if int(answer.error_code) == 0:
                self.generation[client] = int(answer.generation_id)
        kip848 = hasattr(answer, "member_epoch") and int(answer.error_code) == 0
        if kip848 and int(answer.member_epoch) > 0:
            self.epochs[client] = int(answer.member_epoch)
        self.steps[step] = normalise(answer, self._names)
        return answer

    def collect(self, step: str) -> Any:
        """Record the answer of a request that was parked at ``step`` (as ``step + " ->"``)."""
        if step not in self._parked:
            return None  # answered at once (where the other side parked it: a difference)
        client, ticket, _api = self._parked.pop(step)
        answer = self.driver.answer(ticket, wait=PATIENCE)
        if answer is None:
            self.steps[f"{step} ->"] = "still parked"
            return None
        return self._record(f"{step} ->", client, answer)

    def sleep(self, seconds: float) -> None:
        """Let time pass (no step recorded)."""
        self.driver.sleep(seconds)

    # -- the coordinator

    def find_coordinator(self, step: str) -> None:
        """FindCoordinator for the group (retrying what a client retries); group requests
        go to the broker it names from now on. Recorded: the error code and the node as a
        symbol (``n1``...: node ids depend on the cluster)."""
        request = build(
            self._cls(ApiKey.FIND_COORDINATOR),
            key=self.group,
            key_type=0,
            coordinator_keys=(self.group,),
        )
        for _attempt in range(50):
            answer = self.driver.answer(self.driver.submit("find", request), wait=PATIENCE)
            if answer is None:
                raise TimeoutError(f"no FindCoordinator answer for {self.group!r}")
            entry = (getattr(answer, "coordinators", None) or (answer,))[0]
            code = int(entry.error_code)
            if code not in _RETRIED:
                break
            self.driver.sleep(0.1)
        node = None
        if code == 0:
            self.node = int(entry.node_id)
            node = _symbol(self._names, "n", f"node {self.node}")
        self.steps[step] = {"error_code": code, "node": node}

    def move_coordinator(self) -> None:
        """Move the group's coordinator to another broker (no step recorded)."""
        self.driver.move_coordinator()

    def offset_fetch(self, step: str, client: str) -> Any | None:
        """OffsetFetch of the topic's four partitions."""
        cls = self._cls(ApiKey.OFFSET_FETCH)
        topic = build(
            nested_type(cls, "OffsetFetchRequestTopic"),
            name=self.topic,
            partition_indexes=(0, 1, 2, 3),
        )
        request = build(cls, group_id=self.group, topics=(topic,), require_stable=False)
        return self._send(step, client, request)

    # -- group requests

    def join(
        self,
        step: str,
        client: str,
        *,
        instance: str | None = None,
        new: bool = False,
        protocol: str = "range",
        owned: tuple[int, ...] = (),
        user_data: bytes | None = None,
    ) -> Any | None:
        """JoinGroup with the client's member id (``new``: without one), subscribed to the
        topic, owning partitions ``owned`` of it."""
        cls = self._cls(ApiKey.JOIN_GROUP)
        subscription = Subscription(
            topics=(self.topic,),
            user_data=user_data,
            owned_partitions=tuple(TopicPartition(self.topic, p) for p in owned),
        )
        proto = build(
            nested_type(cls, "JoinGroupRequestProtocol"),
            name=protocol,
            metadata=encode_subscription(subscription),
        )
        request = build(
            cls,
            group_id=self.group,
            session_timeout=datetime.timedelta(seconds=self.session_timeout),
            rebalance_timeout=datetime.timedelta(seconds=REBALANCE_TIMEOUT),
            member_id="" if new else self.ids.get(client, ""),
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=(proto,),
            reason=None,
        )
        return self._send(step, client, request)

    def sync(
        self,
        step: str,
        client: str,
        *,
        plan: Mapping[str, tuple[int, ...]] | None = None,
        instance: str | None = None,
        generation: int | None = None,
        protocol: str = "range",
    ) -> Any | None:
        """SyncGroup (the leader's carries ``plan``: client -> partitions)."""
        cls = self._cls(ApiKey.SYNC_GROUP)
        entry = nested_type(cls, "SyncGroupRequestAssignment")
        assignments = tuple(
            build(entry, member_id=self.ids[c], assignment=self._assignment(ps))
            for c, ps in (plan or {}).items()
        )
        request = build(
            cls,
            group_id=self.group,
            generation_id=self.generation[client] if generation is None else generation,
            member_id=self.ids[client],
            group_instance_id=instance,
            protocol_type="consumer",
            protocol_name=protocol,
            assignments=assignments,
        )
        return self._send(step, client, request)

    def _identity(
        self, client: str, generation: int | None, member_id: str | None
    ) -> tuple[int, str]:
        """The generation and member id a request carries: the client's, unless given."""
        return (
            self.generation.get(client, -1) if generation is None else generation,
            self.ids.get(client, "") if member_id is None else member_id,
        )

    def heartbeat(
        self,
        step: str,
        client: str,
        *,
        instance: str | None = None,
        generation: int | None = None,
        member_id: str | None = None,
    ) -> Any | None:
        """Heartbeat at the client's generation (or ``generation``)."""
        gen, member = self._identity(client, generation, member_id)
        request = build(
            self._cls(ApiKey.HEARTBEAT),
            group_id=self.group,
            generation_id=gen,
            member_id=member,
            group_instance_id=instance,
        )
        return self._send(step, client, request)

    def commit(
        self,
        step: str,
        client: str,
        *,
        generation: int | None = None,
        instance: str | None = None,
        member_id: str | None = None,
        offset: int = 5,
    ) -> Any | None:
        """OffsetCommit of partition 0 at the client's generation (or ``generation``)."""
        gen, member = self._identity(client, generation, member_id)
        version = self.versions[ApiKey.OFFSET_COMMIT]
        request = offset_commit(
            version, self.group, self.topic, member, gen, offset=offset, instance=instance
        )
        return self._send(step, client, request)

    def leave(self, step: str, client: str, *, instance: str | None = None) -> Any | None:
        """LeaveGroup of the client's member."""
        cls = self._cls(ApiKey.LEAVE_GROUP)
        identity = build(
            nested_type(cls, "MemberIdentity"),
            member_id=self.ids.get(client, ""),
            group_instance_id=instance,
            reason=None,
        )
        return self._send(step, client, build(cls, group_id=self.group, members=(identity,)))

    def _assignment(self, partitions: tuple[int, ...]) -> bytes:
        return encode_assignment(Assignment(partitions=tuple((self.topic, p) for p in partitions)))

    # -- KIP-848 requests

    def _topic_id(self) -> Any:
        """The topic's id (Metadata; the broker makes ids up, normalised as ``t1``)."""
        if self._topic_uuid is None:
            cls = request_type(ApiKey.METADATA, METADATA_VERSION)
            topic = build(nested_type(cls, "MetadataRequestTopic"), name=self.topic, topic_id=None)
            request = build(
                cls,
                topics=(topic,),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            answer = self.driver.answer(self.driver.submit("metadata", request), wait=PATIENCE)
            if answer is None:
                raise TimeoutError(f"no Metadata answer for {self.topic!r}")
            self._topic_uuid = next(t.topic_id for t in answer.topics)
        return self._topic_uuid

    def member_id848(self, client: str) -> str:
        """The client's member id (KIP-1082: the client makes it up)."""
        return self.ids.setdefault(client, str(uuid.uuid4()))

    def heartbeat848(
        self,
        step: str,
        client: str,
        *,
        epoch: int | None = None,
        owned: tuple[int, ...] = (),
        instance: str | None = None,
        member_id: str | None = None,
    ) -> Any | None:
        """ConsumerGroupHeartbeat at member ``epoch`` (by default the client's last one)
        owning partitions ``owned`` (a full request, as kafkastate's member sends; -1 / -2
        leave)."""
        if epoch is None:
            epoch = self.epochs.get(client, 0)
        cls = self._cls(ApiKey.CONSUMER_GROUP_HEARTBEAT)
        leaving = epoch < 0
        tp_cls = nested_type(cls, "TopicPartitions")
        request = build(
            cls,
            group_id=self.group,
            member_id=self.member_id848(client) if member_id is None else member_id,
            member_epoch=epoch,
            instance_id=instance,
            rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=REBALANCE_TIMEOUT),
            subscribed_topic_names=None if leaving else (self.topic,),
            subscribed_topic_regex=None,
            server_assignor="uniform" if epoch == 0 else None,
            topic_partitions=None
            if leaving
            else ((build(tp_cls, topic_id=self._topic_id(), partitions=owned),) if owned else ()),
        )
        return self._send(step, client, request)

    def commit848(self, step: str, client: str, *, epoch: int | None = None) -> Any | None:
        """OffsetCommit v9 of partition 0 at member ``epoch`` (by default the client's)."""
        if epoch is None:
            epoch = self.epochs.get(client, 0)
        request = offset_commit(
            OFFSET_COMMIT_848, self.group, self.topic, self.member_id848(client), epoch, offset=5
        )
        return self._send(step, client, request)

    # -- transaction requests

    def _txn(self, step: str, client: str, request: Any, code: Callable[[Any], int]) -> Any:
        """Send, retrying what a client retries (:data:`_RETRIED`)."""
        for _attempt in range(50):
            ticket = self.driver.submit(client, request)
            answer = self.driver.answer(ticket, wait=PATIENCE)
            if answer is None:
                self.steps[step] = PARKED
                return None
            if code(answer) not in _RETRIED:
                return self._record(step, client, answer)
            self.driver.sleep(0.1)
        self.steps[step] = f"{code(answer)} forever"
        return None

    def init_producer(
        self, step: str, client: str, *, tid: str, timeout: float = 60.0, own: bool = False
    ) -> Any | None:
        """InitProducerId for ``tid`` (``own``: with the client's producer id and epoch,
        KIP-360)."""
        pid, epoch = self.producers.get(client, (-1, -1)) if own else (-1, -1)
        request = build(
            self._cls(ApiKey.INIT_PRODUCER_ID),
            transactional_id=tid,
            transaction_timeout=datetime.timedelta(seconds=timeout),
            producer_id=pid,
            producer_epoch=epoch,
            enable2_pc=False,
            keep_prepared_txn=False,
        )
        answer = self._txn(step, client, request, lambda a: int(a.error_code))
        if answer is not None and int(answer.error_code) == 0:
            self.producers[client] = (int(answer.producer_id), int(answer.producer_epoch))
        return answer

    def add_partitions(self, step: str, client: str, *, tid: str) -> Any | None:
        """AddPartitionsToTxn of partitions 0 and 1."""
        cls = self._cls(ADD_PARTITIONS_TO_TXN)
        pid, epoch = self.producers.get(client, (-1, -1))
        topic = build(
            nested_type(cls, "AddPartitionsToTxnTopic"), name=self.topic, partitions=(0, 1)
        )
        request = build(
            cls,
            transactions=(),
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(topic,),
        )

        def code(answer: Any) -> int:
            return max(
                int(p.partition_error_code)
                for t in answer.results_by_topic_v3_and_below
                for p in t.results_by_partition
            )

        return self._txn(step, client, request, code)

    def end_txn(self, step: str, client: str, *, tid: str, commit: bool) -> Any | None:
        """EndTxn (commit or abort) with the client's producer id and epoch."""
        pid, epoch = self.producers.get(client, (-1, -1))
        request = build(
            self._cls(END_TXN),
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
        )
        return self._txn(step, client, request, lambda a: int(a.error_code))


# -- the scenarios ----------------------------------------------------------------------------


def join_and_leave(s: Session) -> None:
    """Two dynamic members through two generations (KIP-394 rejoin), a parked JoinGroup
    and SyncGroup, commits at the current and a stale generation, a leave."""
    s.join("A join (no id)", "A")
    s.join("A join", "A")
    s.sync("A sync 1", "A", plan={"A": (0, 1, 2, 3)})
    s.heartbeat("A heartbeat 1", "A")
    s.commit("A commit 1", "A")
    s.join("B join (no id)", "B")
    s.join("B join", "B")  # parked until A rejoins
    s.heartbeat("A heartbeat while B waits", "A")
    s.commit("A commit while B waits", "A")
    s.join("A rejoin", "A")
    s.collect("B join")
    s.commit("A commit, old generation", "A", generation=1)
    s.commit("A commit while completing", "A")
    s.sync("B sync 2", "B")  # parked until the leader's SyncGroup
    s.sync("A sync 2", "A", plan={"A": (0, 1), "B": (2, 3)})
    s.collect("B sync 2")
    s.sync("B sync again in Stable", "B")
    s.commit("A commit 2", "A")
    s.heartbeat("B heartbeat 2", "B")
    s.leave("B leaves", "B")
    s.heartbeat("A heartbeat after B left", "A")
    s.heartbeat("B heartbeat after leaving", "B")
    s.commit("B commit after leaving", "B")
    s.join("A rejoin alone", "A")
    s.commit("unknown member commits", "C", generation=2, member_id="nobody")
    s.commit("generation -1 commit, group not empty", "C", generation=-1, member_id="")


def session_expiry(s: Session) -> None:
    """B stops heartbeating: its session ends, A is told to rebalance, B is gone."""
    s.join("A join (no id)", "A")
    s.join("A join", "A")
    s.sync("A sync 1", "A", plan={"A": (0, 1, 2, 3)})
    s.join("B join (no id)", "B")
    s.join("B join", "B")
    s.join("A rejoin", "A")
    s.collect("B join")
    s.sync("B sync", "B")
    s.sync("A sync 2", "A", plan={"A": (0, 1), "B": (2, 3)})
    s.collect("B sync")
    for i in range(2):  # A keeps its session; B's ends about 6 s after its last request
        s.sleep(SESSION_TIMEOUT / 2 - 0.5)
        s.heartbeat(f"A heartbeat +{i + 1}", "A")
    s.sleep(SESSION_TIMEOUT / 2 - 0.5)  # 7.5 s: B's session ended 1.5 s ago
    s.heartbeat("A heartbeat after B expired", "A")
    s.heartbeat("B heartbeat after expiry", "B")
    s.commit("B commit after expiry", "B")
    s.join("A rejoin alone", "A")
    s.sync("A sync 3", "A", plan={"A": (0, 1, 2, 3)})
    s.commit("A commit 3", "A")


def static_members(s: Session) -> None:
    """KIP-345: a static member restarts (a new process, same group.instance.id) and
    replaces its old member id without a rebalance; the old id is fenced; a changed
    protocol rebalances; a static member leaving by instance id."""
    s.join("A join", "A", instance="ia")
    s.sync("A sync 1", "A", instance="ia", plan={"A": (0, 1, 2, 3)})
    s.join("B join", "B", instance="ib")
    s.heartbeat("A heartbeat while B waits", "A", instance="ia")
    s.join("A rejoin", "A", instance="ia")
    s.collect("B join")
    s.sync("B sync", "B", instance="ib")
    s.sync("A sync 2", "A", instance="ia", plan={"A": (0, 1), "B": (2, 3)})
    s.collect("B sync")
    old_a = s.ids["A"]
    s.join("A restarts (same instance, no id)", "A2", instance="ia")
    s.sync("A2 sync", "A2", instance="ia")
    s.heartbeat("old A heartbeat", "A", instance="ia", member_id=old_a)
    s.commit("old A commit", "A", instance="ia", member_id=old_a)
    s.sync("old A sync", "A", instance="ia")
    s.heartbeat("A2 heartbeat", "A2", instance="ia")
    s.heartbeat("B heartbeat (no rebalance)", "B", instance="ib")
    s.heartbeat("A2 heartbeat without its instance id", "A2")
    s.join("B restarts with new metadata", "B2", instance="ib", user_data=b"changed")
    s.heartbeat("A2 heartbeat after B's restart", "A2", instance="ia")
    s.heartbeat("old B heartbeat", "B", instance="ib")
    s.leave("A2 leaves", "A2", instance="ia")
    s.collect("B restarts with new metadata")
    s.heartbeat("B2 heartbeat after A2 left", "B2", instance="ib")
    s.join("B2 rejoin", "B2", instance="ib", user_data=b"changed")


def cooperative(s: Session) -> None:
    """A cooperative (incremental) two-round rebalance: A gives up partitions 2 and 3 in
    the first round, B gets them in the second."""
    coop = "cooperative-sticky"
    s.join("A join (no id)", "A", protocol=coop)
    s.join("A join", "A", protocol=coop)
    s.sync("A sync 1", "A", protocol=coop, plan={"A": (0, 1, 2, 3)})
    s.join("B join (no id)", "B", protocol=coop)
    s.join("B join", "B", protocol=coop)
    s.heartbeat("A heartbeat while B waits", "A")
    s.join("A rejoin owning 0-3", "A", protocol=coop, owned=(0, 1, 2, 3))
    s.collect("B join")
    s.sync("B sync round 1", "B", protocol=coop)
    s.sync("A sync round 1", "A", protocol=coop, plan={"A": (0, 1), "B": ()})
    s.collect("B sync round 1")
    s.commit("A commits a revoked partition at generation 2", "A")
    s.join("A rejoin after revoking", "A", protocol=coop, owned=(0, 1))
    s.heartbeat("B heartbeat round 2", "B")
    s.commit("B commit while preparing", "B")
    s.join("B rejoin", "B", protocol=coop)
    s.collect("A rejoin after revoking")
    s.commit("B commit while completing", "B")
    s.commit("A commit, old generation", "A", generation=2)
    s.sync("B sync round 2", "B", protocol=coop)
    s.sync("A sync round 2", "A", protocol=coop, plan={"A": (0, 1), "B": (2, 3)})
    s.collect("B sync round 2")
    s.commit("B commit 3", "B")


def transactions(s: Session) -> None:
    """Transaction fence, abort, a second end and timeout at the transaction coordinator."""
    s.init_producer("T1 init", "T1", tid="tx-a")
    s.add_partitions("T1 add", "T1", tid="tx-a")
    s.end_txn("T1 abort", "T1", tid="tx-a", commit=False)
    s.end_txn("T1 abort again (a retry)", "T1", tid="tx-a", commit=False)
    s.end_txn("T1 commit after abort", "T1", tid="tx-a", commit=True)
    s.add_partitions("T1 add, next transaction", "T1", tid="tx-a")
    s.end_txn("T1 commit", "T1", tid="tx-a", commit=True)
    s.add_partitions("T1 add, third transaction", "T1", tid="tx-a")
    s.init_producer("T1' init (fences T1)", "T1'", tid="tx-a")
    s.add_partitions("fenced T1 add", "T1", tid="tx-a")
    s.end_txn("fenced T1 commit", "T1", tid="tx-a", commit=True)
    s.end_txn("T1' commit without partitions", "T1'", tid="tx-a", commit=True)
    s.init_producer("T2 init, 1 s timeout", "T2", tid="tx-b", timeout=1.0)
    s.add_partitions("T2 add", "T2", tid="tx-b")
    s.sleep(4.0)  # the coordinator aborts it (and bumps the epoch)
    s.end_txn("T2 commit after its timeout", "T2", tid="tx-b", commit=True)
    s.init_producer("T2 init again (KIP-360)", "T2", tid="tx-b", own=True, timeout=1.0)


def kip848_reconciliation(s: Session) -> None:
    """KIP-848: A joins and gets every partition; B joins and waits while A is asked to
    revoke half (A's epoch stays until it reports them gone); B gets them only then;
    commits at the current and other epochs; fenced and unknown epochs and members; B
    leaves and A gets everything back. Epochs are each member's last one (as answered)."""
    s.heartbeat848("A joins", "A", epoch=0)
    s.heartbeat848("A heartbeat owning 0-3", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B joins", "B", epoch=0)
    s.heartbeat848("B heartbeat, nothing free", "B")
    s.heartbeat848("A heartbeat, asked to revoke", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("A heartbeat, not revoked yet", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B heartbeat while A revokes", "B")
    s.commit848("A commits at its epoch", "A")
    s.commit848("A commits at an older epoch", "A", epoch=s.epochs["A"] - 1)
    s.commit848("A commits at a newer epoch", "A", epoch=s.epochs["A"] + 1)
    a_before = s.epochs["A"]
    s.heartbeat848("A heartbeat, revoked", "A", owned=(0, 1))
    s.heartbeat848("B heartbeat, partitions free", "B")
    s.heartbeat848("B heartbeat owning them", "B", owned=(2, 3))
    s.commit848("B commits at its epoch", "B")
    s.heartbeat848("B heartbeat, older epoch", "B", epoch=s.epochs["B"] - 1, owned=(2, 3))
    s.heartbeat848("B heartbeat, newer epoch", "B", epoch=s.epochs["B"] + 1, owned=(2, 3))
    s.heartbeat848("B heartbeat after the fenced ones", "B", owned=(2, 3))
    s.heartbeat848("unknown member", "C", epoch=1)
    s.heartbeat848("A heartbeat, previous epoch", "A", epoch=a_before, owned=(0, 1))
    s.heartbeat848("B leaves", "B", epoch=-1)
    s.heartbeat848("A heartbeat after B left", "A", owned=(0, 1))
    s.heartbeat848("B heartbeat after leaving", "B", owned=(2, 3))
    s.commit848("B commits after leaving", "B")
    s.heartbeat848("A heartbeat owning 0-3 again", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B joins again (same id)", "B", epoch=0)


def kip848_static(s: Session) -> None:
    """KIP-848 static members: a temporary leave (epoch -2) keeps the assignment, a new
    member id of the instance takes it over without a rebalance; the old id is fenced; a
    third id is refused while the instance is held; leaving for good."""
    s.heartbeat848("S1 joins", "S1", epoch=0, instance="is")
    s.heartbeat848("D joins", "D", epoch=0)
    s.heartbeat848("S1 heartbeat", "S1", owned=(0, 1, 2, 3), instance="is")
    s.heartbeat848("S1 revoked", "S1", owned=(0, 1), instance="is")
    s.heartbeat848("D heartbeat", "D")
    s.heartbeat848("D heartbeat owning 2-3", "D", owned=(2, 3))
    s.heartbeat848("S1 leaves for now (-2)", "S1", epoch=-2, instance="is")
    s.heartbeat848("D heartbeat after S1 left", "D", owned=(2, 3))
    s.heartbeat848("S2 joins as the instance", "S2", epoch=0, instance="is")
    s.heartbeat848("old S1 heartbeat", "S1", epoch=s.epochs["S1"], owned=(0, 1), instance="is")
    s.heartbeat848("S3 joins while S2 holds it", "S3", epoch=0, instance="is")
    s.heartbeat848("D heartbeat, no rebalance", "D", owned=(2, 3))
    s.heartbeat848("-2 without instance id", "D", epoch=-2)
    s.heartbeat848("S2 leaves for good", "S2", epoch=-1, instance="is")
    s.heartbeat848("D heartbeat after S2 left", "D", owned=(2, 3))
    s.heartbeat848("S2 heartbeat after leaving", "S2", epoch=1, owned=(0, 1), instance="is")


def coordinator_move(s: Session) -> None:
    """Three brokers: the group's coordinator moves while a rebalance is being prepared
    (B's JoinGroup parked), and again while one completes (B's SyncGroup parked). The old
    coordinator answers the parked requests, and everything after, NOT_COORDINATOR; the new
    one has the group as its last record left it -- Stable at the last synced generation,
    without the member that had joined but not synced, the generation begun but not synced
    gone (its number is taken again), the committed offsets kept."""
    s.session_timeout = 30.0  # a move takes a real cluster a few seconds
    s.find_coordinator("find coordinator")
    s.join("A join (no id)", "A")
    s.join("A join", "A")
    s.sync("A sync 1", "A", plan={"A": (0, 1, 2, 3)})
    s.commit("A commit 1", "A")
    s.join("B join (no id)", "B")
    s.join("B join", "B")  # parked until A rejoins
    s.heartbeat("A heartbeat while B waits", "A")
    s.move_coordinator()
    s.collect("B join")
    s.heartbeat("A heartbeat at the old coordinator", "A")
    s.commit("A commit at the old coordinator", "A", offset=6)
    s.find_coordinator("find coordinator after the move")
    s.heartbeat("A heartbeat at the new coordinator", "A")
    s.offset_fetch("offsets at the new coordinator", "A")
    s.commit("A commit 1 at the new coordinator", "A", offset=7)
    s.join("B rejoins with its member id", "B")
    s.join("B join again (no id)", "B", new=True)
    s.join("B join 2", "B")  # parked until A rejoins
    s.join("A rejoin", "A")
    s.collect("B join 2")
    s.sync("B sync 2", "B")  # parked until the leader's SyncGroup
    s.sync("A sync 2", "A", plan={"A": (0, 1), "B": (2, 3)})
    s.collect("B sync 2")
    s.commit("B commit 2", "B", offset=8)
    s.join("A rejoin (leader, Stable)", "A")  # parked until B rejoins
    s.heartbeat("B heartbeat while A waits", "B")
    s.join("B rejoin", "B")
    s.collect("A rejoin (leader, Stable)")
    s.sync("B sync 3", "B")  # parked until the leader's SyncGroup
    s.move_coordinator()
    s.collect("B sync 3")
    s.find_coordinator("find coordinator after the second move")
    s.sync("A sync 3 at the new coordinator", "A", plan={"A": (0, 1), "B": (2, 3)})
    s.heartbeat("B heartbeat at generation 3", "B")
    s.heartbeat("B heartbeat at generation 2", "B", generation=2)
    s.commit("B commit at generation 2", "B", generation=2, offset=9)
    s.sync("B sync at generation 2", "B", generation=2)
    s.join("A rejoin after the second move", "A")  # parked until B rejoins
    s.join("B rejoin after the second move", "B")
    s.collect("A rejoin after the second move")
    s.sync("B sync 3 again", "B")
    s.sync("A sync 3 again", "A", plan={"A": (0, 1), "B": (2, 3)})
    s.collect("B sync 3 again")
    s.commit("A commit 3", "A", offset=10)
    s.offset_fetch("offsets at the end", "B")


def _hand_over_and_leave(s: Session) -> None:
    """A reports partitions 2-3 revoked, B (waiting for them) gets them, and leaves."""
    s.heartbeat848("A heartbeat, revoked", "A", owned=(0, 1))
    s.heartbeat848("B heartbeat, partitions free", "B")
    s.heartbeat848("B heartbeat owning them", "B", owned=(2, 3))
    s.heartbeat848("B leaves", "B", epoch=-1)


def kip848_coordinator_move(s: Session) -> None:
    """Three brokers, KIP-848: the group's coordinator moves while a member revokes (A has
    half of its partitions pending revocation, B waits for them), and again after a static
    member left for now (-2). At the old broker heartbeats and commits get NOT_COORDINATOR;
    the new one has the group as its records left it: the epochs, the target assignment,
    the revocation under way, the static member's held assignment, the committed offset.
    (Two members at a time: which partitions the server-side assignor picks among three is
    its own business.)"""
    s.find_coordinator("find coordinator")
    s.heartbeat848("A joins", "A", epoch=0)
    s.heartbeat848("A heartbeat owning 0-3", "A", owned=(0, 1, 2, 3))
    s.commit848("A commits", "A")
    s.heartbeat848("B joins", "B", epoch=0)
    s.heartbeat848("A heartbeat, asked to revoke", "A", owned=(0, 1, 2, 3))
    s.move_coordinator()
    s.heartbeat848("A heartbeat at the old coordinator", "A", owned=(0, 1, 2, 3))
    s.commit848("A commits at the old coordinator", "A")
    s.find_coordinator("find coordinator after the move")
    s.heartbeat848("A heartbeat at the new coordinator, not revoked", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B heartbeat at the new coordinator, nothing free", "B")
    s.commit848("A commits at the new coordinator", "A")
    s.commit848("A commits at an older epoch", "A", epoch=s.epochs["A"] - 1)
    s.offset_fetch("offsets at the new coordinator", "A")
    _hand_over_and_leave(s)
    s.heartbeat848("A heartbeat after B left", "A", owned=(0, 1))
    s.heartbeat848("A heartbeat owning 0-3 again", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("S joins", "S", epoch=0, instance="is")
    s.heartbeat848("A heartbeat, asked to revoke for S", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("A heartbeat, revoked for S", "A", owned=(0, 1))
    s.heartbeat848("S heartbeat, partitions free", "S", instance="is")
    s.heartbeat848("S heartbeat owning them", "S", owned=(2, 3), instance="is")
    s.heartbeat848("S leaves for now (-2)", "S", epoch=-2, instance="is")
    s.move_coordinator()
    s.find_coordinator("find coordinator after the second move")
    s.heartbeat848("A heartbeat after the second move", "A", owned=(0, 1))
    s.heartbeat848("S2 joins as the instance", "S2", epoch=0, instance="is")
    s.heartbeat848("S2 heartbeat owning 2-3", "S2", owned=(2, 3), instance="is")
    s.heartbeat848("old S heartbeat", "S", epoch=s.epochs["S"], owned=(2, 3), instance="is")
    s.heartbeat848("B heartbeat after leaving", "B", owned=(2, 3))
    s.heartbeat848("A heartbeat, no rebalance", "A", owned=(0, 1))
    s.commit848("A commits at the end", "A")
    s.offset_fetch("offsets at the end", "A")


def kip848_session_expiry(s: Session) -> None:
    """KIP-848 session expiry: the group's ``consumer.session.timeout.ms`` is 6 s. B stops
    heartbeating once it has its partitions; A heartbeats every 1 to 4.5 s. Two seconds
    before B's session ends B is still a member (its commit is accepted: a commit does not
    extend a session) and A's assignment unchanged; 2.5 s after, B is gone and A takes
    everything at the next group epoch; B's late heartbeat and commit find no member."""
    s.heartbeat848("A joins", "A", epoch=0)
    s.heartbeat848("A heartbeat owning 0-3", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B joins", "B", epoch=0)
    s.heartbeat848("A heartbeat, asked to revoke", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("A heartbeat, revoked", "A", owned=(0, 1))
    s.heartbeat848("B heartbeat, partitions free", "B")
    s.heartbeat848("B heartbeat owning them (its last)", "B", owned=(2, 3))
    for i, pause in enumerate((1.5, 1.5, 1.0)):  # 1.5, 3 and 4 s after B's last
        s.sleep(pause)
        s.heartbeat848(f"A heartbeat before B's session ends ({i + 1})", "A", owned=(0, 1))
    s.commit848("B commits 2 s before its session ends", "B")
    s.sleep(SESSION_848 / 2 + 1.5)  # 8.5 s after B's last: its session ended 2.5 s ago
    s.heartbeat848("A heartbeat after B expired", "A", owned=(0, 1))
    s.heartbeat848("A heartbeat owning 0-3 again", "A", owned=(0, 1, 2, 3))
    s.sleep(SESSION_848 / 2 + 1.0)  # B silent for 13 s, A for 4.5 s
    s.heartbeat848("B heartbeat after expiry", "B", owned=(2, 3))
    s.commit848("B commits after expiry", "B")
    s.heartbeat848("A heartbeat, nothing changed", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B joins again (same id)", "B", epoch=0)
    s.heartbeat848("A heartbeat, asked to revoke again", "A", owned=(0, 1, 2, 3))


def kip848_assignment_batching(s: Session) -> None:
    """KIP-1263: the group's ``consumer.assignment.interval.ms`` is 3 s. The first target is
    computed at once; B joins within the interval and gets the last assignment epoch with
    nothing, A keeps everything; the first heartbeat 5 s later computes the new target and
    the usual revocation follows. B leaves right after that second target: A's heartbeat
    within the interval keeps its half, the first one after it gets everything."""
    s.heartbeat848("A joins (the group's first target: at once)", "A", epoch=0)
    s.heartbeat848("A heartbeat owning 0-3", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B joins within the interval", "B", epoch=0)
    s.heartbeat848("A heartbeat within the interval", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B heartbeat within the interval", "B")
    s.commit848("B commits at the last assignment epoch", "B")
    s.sleep(ASSIGNMENT_INTERVAL + 2.0)
    s.heartbeat848("A heartbeat after the interval, asked to revoke", "A", owned=(0, 1, 2, 3))
    s.heartbeat848("B heartbeat while A revokes", "B")
    _hand_over_and_leave(s)
    s.heartbeat848("A heartbeat within the interval after B left", "A", owned=(0, 1))
    s.sleep(ASSIGNMENT_INTERVAL + 2.0)
    s.heartbeat848("A heartbeat after the interval, B's partitions", "A", owned=(0, 1))
    s.heartbeat848("A heartbeat owning 0-3 at the end", "A", owned=(0, 1, 2, 3))


SCENARIOS: Final[dict[str, Callable[[Session], None]]] = {
    "join_and_leave": join_and_leave,
    "session_expiry": session_expiry,
    "static_members": static_members,
    "cooperative": cooperative,
    "transactions": transactions,
    "kip848_reconciliation": kip848_reconciliation,
    "kip848_static": kip848_static,
    "kip848_session_expiry": kip848_session_expiry,
    "kip848_assignment_batching": kip848_assignment_batching,
    "coordinator_move": coordinator_move,
    "kip848_coordinator_move": kip848_coordinator_move,
}
"""Every scenario, by name."""

BROKERS: Final[Mapping[str, int]] = {"coordinator_move": 3, "kip848_coordinator_move": 3}
"""Scenarios that need more than one broker: name -> brokers."""

_AT_ONCE: Final = {"consumer.assignment.interval.ms": "0"}
GROUP_CONFIGS: Final[Mapping[str, Mapping[str, str]]] = {
    # the other KIP-848 scenarios keep to one thing at a time: each target at once
    "kip848_reconciliation": _AT_ONCE,
    "kip848_static": _AT_ONCE,
    "kip848_coordinator_move": _AT_ONCE,
    "kip848_session_expiry": {
        **_AT_ONCE,
        "consumer.session.timeout.ms": str(round(SESSION_848 * 1000)),
    },
    "kip848_assignment_batching": {
        "consumer.assignment.interval.ms": str(round(ASSIGNMENT_INTERVAL * 1000))
    },
}
"""Group configs a scenario's group gets before its first request: name -> configs."""


def served_versions(broker: Mapping[int, int] | None = None) -> dict[int, int]:
    """The versions a session speaks: the model's highest, capped by a broker's."""
    keys = (
        ApiKey.FIND_COORDINATOR,
        ApiKey.OFFSET_FETCH,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.INIT_PRODUCER_ID,
        ADD_PARTITIONS_TO_TXN,
        END_TXN,
    )
    out = {}
    model = {**TXN_SERVED_VERSIONS, ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1)}
    for key in (*keys, ApiKey.CONSUMER_GROUP_HEARTBEAT):
        high = model[key][1]
        out[key] = high if broker is None else min(high, broker[key])
    return out


def run_scenario(
    name: str, driver: Driver, versions: Mapping[int, int], *, group: str, topic: str
) -> dict[str, Any]:
    """Run scenario ``name`` against ``driver``; the normalised answers by step."""
    if name in GROUP_CONFIGS:
        driver.configure_group(group, GROUP_CONFIGS[name])
    session = Session(driver, versions, group=group, topic=topic)
    SCENARIOS[name](session)
    return session.steps
