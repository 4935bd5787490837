"""The operator's commands of the ``kafkastate`` console script (``quotas``, ``users``,
``reassignments``, ``elect-leaders``, ``transactions``, ``cluster --features`` /
``--quorum``), run in a subprocess against the suite's real broker.

Witnesses: kafka-python (an independent client) names in its ``describe_metadata_quorum``
the leader ``cluster --quorum`` shows; a transaction left open by kafkastate's producer is what
``transactions find-hanging`` and ``producers`` list and ``abort`` ends (a read_committed
consumer then reads past it)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kafka import KafkaAdminClient as Witness  # kafka-python: an independent client

from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer, KafkaProducer
from tests.cli.test_cli import kafkastate, ok, one_error_line

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def b(kafka_cluster: Any) -> list[str]:
    return ["-b", kafka_cluster.bootstrap]


def _rows(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.splitlines() if line]


def test_cluster_features_and_quorum(b: list[str], kafka_cluster: Any) -> None:
    features = json.loads(ok(kafkastate("cluster", "--features", "--json", *b)))
    assert "metadata.version" in [f["feature"] for f in features]
    rows = _rows(ok(kafkastate("cluster", "--quorum", *b)))
    (leader,) = [r for r in rows if r[2] == "yes"]
    witness = Witness(bootstrap_servers=kafka_cluster.bootstrap)
    try:
        theirs = witness.describe_metadata_quorum()["topics"][0]["partitions"][0]
    finally:
        witness.close()
    assert int(leader[0]) == theirs["leader_id"] and leader[1] == "voter"


def test_quotas_set_list_remove(b: list[str]) -> None:
    client = _name("cli-q")
    ok(kafkastate("quotas", "set", "producer_byte_rate=2048", "--client-id", client, *b))
    deadline = time.monotonic() + 15
    while not (rows := _rows(ok(kafkastate("quotas", "list", "--client-id", client, *b)))):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert rows == [[f"client-id={client}", "producer_byte_rate", "2048.0"]]
    ok(kafkastate("quotas", "remove", "producer_byte_rate", "--client-id", client, *b))
    while _rows(ok(kafkastate("quotas", "list", "--client-id", client, *b))):
        assert time.monotonic() < deadline + 15
        time.sleep(0.1)
    one_error_line(kafkastate("quotas", "set", "x=1", *b), 2, "--client-id")
    one_error_line(kafkastate("quotas", "set", "producer_byte_rate=fast", "--user", "u", *b), 2)


def test_users_set_list_delete(b: list[str]) -> None:
    user = _name("cli-user")
    ok(kafkastate("users", "set", user, "--password", "s3cret", "--iterations", "8192", *b))
    rows = _rows(ok(kafkastate("users", "list", user, *b)))
    assert rows == [[user, "SCRAM-SHA-256", "8192"]]
    assert user in [r[0] for r in _rows(ok(kafkastate("users", "list", *b)))]
    ok(kafkastate("users", "delete", user, *b))
    one_error_line(kafkastate("users", "list", user, *b), 1, user)
    one_error_line(kafkastate("users", "delete", user, *b), 1, "deleting the credential")


def test_reassignments_and_elections(b: list[str]) -> None:
    topic = _name("cli-reassign")
    ok(kafkastate("topics", "create", topic, "-p", "2", *b))
    assert _rows(ok(kafkastate("reassignments", "list", *b))) == []
    one_error_line(kafkastate("reassignments", "cancel", f"{topic}:0", *b), 1, "cancelling")
    one_error_line(kafkastate("reassignments", "start", f"{topic}:0", "99", *b), 1, "reassignment")
    one_error_line(kafkastate("reassignments", "list", "--bad", *b), 2)
    rows = _rows(ok(kafkastate("elect-leaders", f"{topic}:0", f"{topic}:1", *b)))
    assert rows == [[topic, "0", "not needed"], [topic, "1", "not needed"]]
    one_error_line(kafkastate("elect-leaders", "no-colon", *b), 2, "topic:partition")


def test_transactions_find_hanging_producers_abort(b: list[str], kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, tid = _name("cli-txn"), _name("cli-tid")
    ok(kafkastate("topics", "create", topic, *b))
    # (a slow machine runs these commands for minutes: the transaction must outlive them)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=tid, transaction_timeout_ms=600_000
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"left open", partition=0).get(timeout=15)
        listed = _rows(ok(kafkastate("transactions", "list", *b)))
        assert [tid, "Ongoing"] in [[r[0], r[2]] for r in listed]
        (described,) = _rows(ok(kafkastate("transactions", "describe", tid, *b)))
        assert described[1] == "Ongoing" and described[5] == f"{topic}:0"
        hanging = json.loads(
            ok(kafkastate("transactions", "find-hanging", "--older-than-ms", "0", "--json", *b))
        )
        # (the message shows what the coordinator says of it, start time included)
        assert tid in [h["transactional id"] for h in hanging], (
            hanging,
            ok(kafkastate("transactions", "describe", tid, "--json", *b)),
        )
        assert tid not in ok(kafkastate("transactions", "find-hanging", *b))
        (active,) = _rows(ok(kafkastate("transactions", "producers", f"{topic}:0", *b)))
        pid, epoch, coordinator_epoch = active[2], active[3], active[4]
        ok(
            kafkastate(
                "transactions", "abort", f"{topic}:0", "--producer-id", pid,
                "--producer-epoch", epoch, "--coordinator-epoch", coordinator_epoch, *b,
            )
        )  # fmt: skip
        # a read_committed consumer reads past the aborted records at once
        with KafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            assert [r.value for r in consumer] == []
            assert consumer.position(consumer.assignment().pop()) >= 1
    finally:
        producer.close(timeout=5)
