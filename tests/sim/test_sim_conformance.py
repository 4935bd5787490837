"""The simulator's broker model against real Kafka (DST.md A3.9).

Each scenario of :mod:`kafkastate.sim.conformance` (join and leave, session expiry, static
members under KIP-345, a cooperative rebalance, stale-generation commits, transaction
fencing, abort and timeout, KIP-848 reconciliation, fencing, static members, session expiry
and batched target assignments (KIP-1263), and -- on
the three-broker cluster -- a classic and a KIP-848 group's coordinator moving twice) runs
against the simulated cluster and against the broker the harness starts; the normalised
answers must be the same, step by step. A difference is a bug in the model (or a Kafka
version it does not model).

The real broker's answers are also kept in ``conformance_golden.json`` (refreshed when the
real-broker test passes with ``KAFKASTATE_UPDATE_GOLDEN=1``), so that the model is checked
against them in every run, with or without a broker.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin, BlockingConnection
from kafkastate.admin import ConfigResource, ConfigResourceType, ElectionType
from kafkastate.core.protocol.requests import NewTopic, build, nested_type
from kafkastate.core.protocol.versions import ApiKey, request_type
from kafkastate.sim.conformance import (
    BROKERS,
    SCENARIOS,
    SimDriver,
    offset_commit,
    run_scenario,
    served_versions,
)
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient
from kafkastate.testing import metadata
from tests._support.coordinators import wait_for_coordinators

GOLDEN = Path(__file__).with_name("conformance_golden.json")
TOPIC = "conform"
OFFSETS = TopicPartition("__consumer_offsets", 0)
"""The group coordinators' partition (the harness's brokers have one)."""
NOT_COORDINATOR, LOADING = 16, 14


class RealDriver:
    """A real cluster: a connection per client, broker and request in flight, real sleeps.

    Args:
        host: the bootstrap broker's host.
        port: its port.
        addresses: every broker's address by node id (for more than one broker).
        group: the scenario's group (what :meth:`move_coordinator` waits for).
        topic: the scenario's topic (what :meth:`move_coordinator`'s probe write commits).
    """

    def __init__(
        self,
        host: str,
        port: int,
        addresses: dict[int, tuple[str, int]] | None = None,
        group: str = "",
        topic: str = TOPIC,
    ) -> None:
        self.host, self.port = host, port
        self.addresses = addresses or {}
        self.group, self.topic = group, topic
        self._idle: dict[tuple[str, int | None], list[BlockingConnection]] = {}
        self._threads: dict[Hashable, tuple[threading.Thread, dict[str, Any]]] = {}
        self._tickets = 0

    def connection(self, client: str, node: int | None = None) -> BlockingConnection:
        idle = self._idle.setdefault((client, node), [])
        if idle:
            return idle.pop()
        host, port = (self.host, self.port) if node is None else self.addresses[node]
        return BlockingConnection.open(host, port, timeout=20)

    def submit(self, client: str, request: Any, node: int | None = None) -> Hashable:
        conn = self.connection(client, node)
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["answer"] = conn.request(request, timeout=60)
            finally:
                self._idle[(client, node)].append(conn)

        self._tickets += 1
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        self._threads[self._tickets] = (thread, box)
        return self._tickets

    def answer(self, ticket: Hashable, *, wait: float) -> Any | None:
        thread, box = self._threads[ticket]
        thread.join(wait)
        if thread.is_alive():
            return None
        del self._threads[ticket]
        return box["answer"]

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def configure_group(self, group: str, configs: Mapping[str, str]) -> None:
        """IncrementalAlterConfigs (SET) of the group's configs, at the bootstrap broker."""
        admin = KafkaAdminClient(bootstrap_servers=f"{self.host}:{self.port}")
        try:
            admin.alter_configs(
                [ConfigResource(ConfigResourceType.GROUP, group, configs=dict(configs))],
                incremental=True,
            )
        finally:
            admin.close()

    def move_coordinator(self) -> None:
        """Reorder ``__consumer_offsets``'s replicas so that the next broker comes first,
        elect the preferred leader, and wait until the new coordinator answers for the
        group and commits a write, and the old one refuses it (how long the load and the
        followers take is timing, not compared)."""
        bootstrap = f"{self.host}:{self.port}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            leader, replicas = _offsets_partition(admin)
            nodes = sorted(self.addresses)
            target = nodes[(nodes.index(leader) + 1) % len(nodes)]
            order = [target, *(r for r in replicas if r != target)]
            assert admin.alter_partition_reassignments({OFFSETS: order}) == {OFFSETS: None}
            _until(lambda: _offsets_partition(admin)[1] == order, "the replicas reordered")
            admin.elect_leaders(ElectionType.PREFERRED, [OFFSETS])
            _until(lambda: _offsets_partition(admin)[0] == target, f"broker {target} leading")
        finally:
            admin.close()
        _until(lambda: self._probe(target) not in (LOADING, NOT_COORDINATOR), "the new one")
        _until(lambda: self._write(target) == 0, "a write at the new one committed")
        _until(lambda: self._probe(leader) == NOT_COORDINATOR, "the old one to refuse")

    def _probe(self, node: int) -> int:
        """OffsetFetch of the group at ``node`` (a read): its error code."""
        conn = self.connection("probe", node)
        try:
            cls = request_type(ApiKey.OFFSET_FETCH, 7)  # one group, topics by name
            topic = build(
                nested_type(cls, "OffsetFetchRequestTopic"), name=TOPIC, partition_indexes=(0,)
            )
            request = build(cls, group_id=self.group, topics=(topic,), require_stable=False)
            answer = conn.request(request, timeout=20)
        finally:
            self._idle[("probe", node)].append(conn)
        return int(answer.error_code)

    def _write(self, node: int) -> int:
        """A simple OffsetCommit (generation -1) of a probe group at ``node``: its error code.

        The new coordinator answers reads (the probe's OffsetFetch) at once, but defers the
        first write after the load -- even one that writes no record, like a heartbeat that
        changes nothing -- until the partition's high watermark reaches the loaded log's end
        (``CoordinatorRuntime``: ``lastCommittedOffset() < lastWrittenOffset()``), which
        takes as long as the followers take to fetch from the new leader. A committed write
        of another group in the same partition (the harness has one) waits that out, so
        that the scenario's next request is not parked by replication timing."""
        conn = self.connection("probe", node)
        try:
            # version 8: topics by name, no member epoch
            request = offset_commit(8, f"{self.group}-probe", self.topic, "", -1, offset=0)
            answer = conn.request(request, timeout=30)
        finally:
            self._idle[("probe", node)].append(conn)
        (part_answer,) = answer.topics[0].partitions
        return int(part_answer.error_code)

    def close(self) -> None:
        for thread, _box in self._threads.values():
            thread.join(30)
        for conns in self._idle.values():
            for conn in conns:
                conn.close()


def _offsets_partition(admin: KafkaAdminClient) -> tuple[int, list[int]]:
    """The leader and replicas of ``__consumer_offsets`` partition 0."""
    (described,) = admin.describe_topics([OFFSETS.topic])
    (part,) = [p for p in described["partitions"] if p["partition_index"] == OFFSETS.partition]
    return int(part["leader_id"]), [int(r) for r in part["replica_nodes"]]


def _until(check: Any, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"waited {limit} s for {what}"
        time.sleep(0.2)


def _prepared(bootstrap: str) -> tuple[str, int, dict[int, int], str]:
    """A cluster's first broker, the versions it serves of the sessions' APIs, and a new
    four-partition topic; both coordinators ready."""
    host, port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
    topic = f"{TOPIC}-{uuid.uuid4().hex[:6]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=4)])
    with BlockingConnection.open(host, int(port), timeout=20) as conn:
        versions = conn.versions
        assert versions is not None
        wait_for_coordinators(conn, versions)
        broker = {key: versions.version_for(key) for key in served_versions()}
    return host, int(port), broker, topic


@pytest.fixture(scope="module")
def real_broker(kafka_cluster: Any) -> Iterator[tuple[str, int, dict[int, int], str]]:
    """The harness's broker, with a topic and both coordinators ready."""
    yield _prepared(kafka_cluster.bootstrap)


@pytest.fixture(scope="module")
def real_cluster3(
    kafka_cluster3: Any,
) -> Iterator[tuple[str, int, dict[int, int], str, dict[int, tuple[str, int]]]]:
    """The harness's three-broker cluster, with a topic and the coordinators ready."""
    host, port, broker, topic = _prepared(kafka_cluster3.bootstrap)
    addresses = metadata(host, port).brokers
    assert len(addresses) >= 3, f"a three-broker cluster lists {sorted(addresses)}"
    yield host, port, broker, topic, addresses


def _simulated(name: str, versions: dict[int, int]) -> dict[str, Any]:
    driver = SimDriver({TOPIC: 4}, brokers=BROKERS.get(name, 1))
    return run_scenario(name, driver, versions, group="g", topic=TOPIC)


def _diff(model: dict[str, Any], kafka: dict[str, Any]) -> str:
    lines = []
    for step in dict.fromkeys([*kafka, *model]):
        if model.get(step) != kafka.get(step):
            lines.append(f"{step}:\n  kafka: {kafka.get(step)}\n  model: {model.get(step)}")
    return "\n".join(lines)


@pytest.mark.kafka_needs("single_broker")
@pytest.mark.parametrize("name", sorted(set(SCENARIOS) - set(BROKERS)))
def test_the_model_answers_like_kafka(name: str, real_broker: Any) -> None:
    host, port, broker, topic = real_broker
    versions = served_versions(broker)
    group = f"g-{uuid.uuid4().hex[:8]}"
    driver = RealDriver(host, port)
    try:
        kafka = run_scenario(name, driver, versions, group=group, topic=topic)
    finally:
        driver.close()
    _compare(name, versions, kafka, topic)


@pytest.mark.parametrize("name", sorted(BROKERS))
def test_the_model_answers_like_a_kafka_cluster(name: str, real_cluster3: Any) -> None:
    """Scenarios that need three brokers (the coordinator moves), on the harness's
    three-broker cluster; the cluster stays whole (leadership moves, no broker stops)."""
    host, port, broker, topic, addresses = real_cluster3
    versions = served_versions(broker)
    group = f"g-{uuid.uuid4().hex[:8]}"
    driver = RealDriver(host, port, addresses, group=group, topic=topic)
    try:
        kafka = run_scenario(name, driver, versions, group=group, topic=topic)
    finally:
        driver.close()
    _compare(name, versions, kafka, topic)


def _compare(name: str, versions: dict[int, int], kafka: dict[str, Any], topic: str) -> None:
    """The model's recording equals Kafka's (recorded as golden on request)."""
    kafka = json.loads(json.dumps(kafka).replace(topic, TOPIC))
    model = _simulated(name, versions)
    assert model == kafka, f"the model differs from Kafka:\n{_diff(model, kafka)}"
    if os.environ.get("KAFKASTATE_UPDATE_GOLDEN"):
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        golden[name] = {"versions": {str(k): v for k, v in versions.items()}, "steps": kafka}
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_model_answers_like_recorded_kafka(name: str) -> None:
    """No broker needed: the answers a real broker gave, recorded, against the model."""
    golden = json.loads(GOLDEN.read_text())
    assert name in golden, f"no recorded answers for {name}: run with KAFKASTATE_UPDATE_GOLDEN=1"
    recorded = golden[name]
    versions = {int(k): v for k, v in recorded["versions"].items()}
    model = _simulated(name, versions)
    assert model == recorded["steps"], f"the model differs:\n{_diff(model, recorded['steps'])}"
