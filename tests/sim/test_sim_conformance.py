"""The simulator's broker model against real Kafka (DST.md A3.9).

Each scenario of :mod:`kafkastate.sim.conformance` (join and leave, session expiry, static
members under KIP-345, a cooperative rebalance, stale-generation commits, transaction
fencing, abort and timeout, KIP-848 reconciliation, fencing and static members) runs
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
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin, BlockingConnection
from kafkastate.admin import ConfigResource, ConfigResourceType
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.sim.conformance import (
    SCENARIOS,
    SimDriver,
    run_scenario,
    served_versions,
)
from kafkastate.sync import KafkaAdminClient
from tests._support.coordinators import wait_for_coordinators

GOLDEN = Path(__file__).with_name("conformance_golden.json")
TOPIC = "conform"


class RealDriver:
    """A real broker: a connection per client and request in flight, real sleeps."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._idle: dict[str, list[BlockingConnection]] = {}
        self._threads: dict[Hashable, tuple[threading.Thread, dict[str, Any]]] = {}
        self._tickets = 0

    def connection(self, client: str) -> BlockingConnection:
        idle = self._idle.setdefault(client, [])
        if idle:
            return idle.pop()
        return BlockingConnection.open(self.host, self.port, timeout=20)

    def submit(self, client: str, request: Any) -> Hashable:
        conn = self.connection(client)
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["answer"] = conn.request(request, timeout=60)
            finally:
                self._idle[client].append(conn)

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

    def close(self) -> None:
        for thread, _box in self._threads.values():
            thread.join(30)
        for conns in self._idle.values():
            for conn in conns:
                conn.close()


@pytest.fixture(scope="module")
def real_broker(kafka_cluster: Any) -> Iterator[tuple[str, int, dict[int, int], str]]:
    """The harness's broker, with a topic and both coordinators ready."""
    host, port = kafka_cluster.bootstrap.rsplit(":", 1)
    topic = f"{TOPIC}-{uuid.uuid4().hex[:6]}"
    with BlockingAdmin(kafka_cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=4)])
    with BlockingConnection.open(host, int(port), timeout=20) as conn:
        versions = conn.versions
        assert versions is not None
        wait_for_coordinators(conn, versions)
        broker = {key: versions.version_for(key) for key in served_versions()}
    yield host, int(port), broker, topic


def _simulated(name: str, versions: dict[int, int]) -> dict[str, Any]:
    return run_scenario(name, SimDriver({TOPIC: 4}), versions, group="g", topic=TOPIC)


def _diff(model: dict[str, Any], kafka: dict[str, Any]) -> str:
    lines = []
    for step in dict.fromkeys([*kafka, *model]):
        if model.get(step) != kafka.get(step):
            lines.append(f"{step}:\n  kafka: {kafka.get(step)}\n  model: {model.get(step)}")
    return "\n".join(lines)


@pytest.mark.kafka_needs("single_broker")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_model_answers_like_kafka(name: str, real_broker: Any) -> None:
    host, port, broker, topic = real_broker
    versions = served_versions(broker)
    group = f"g-{uuid.uuid4().hex[:8]}"
    if name.startswith("kip848"):
        # KIP-1263 batches target assignments (one per consumer.assignment.interval.ms, 1 s
        # by default): the model computes each at once, as the broker does with 0
        setting = {"consumer.assignment.interval.ms": "0"}
        admin = KafkaAdminClient(bootstrap_servers=f"{host}:{port}")
        try:
            admin.alter_configs(
                [ConfigResource(ConfigResourceType.GROUP, group, configs=setting)],
                incremental=True,
            )
        finally:
            admin.close()
    driver = RealDriver(host, port)
    try:
        kafka = run_scenario(name, driver, versions, group=group, topic=topic)
    finally:
        driver.close()
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
