"""``kafkastate stats`` against the real broker: a group's lag per partition and a topic's
log ends (JSON lines, tab-separated rows), a client's run from its stats_cb lines, and the
``--plot`` PNG of each."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from tests.cli.test_cli import kafkastate, ok, one_error_line

pytestmark = pytest.mark.integration

pytest.importorskip("matplotlib", reason="--plot needs matplotlib (pip install kafkastate[plot])")

PNG = b"\x89PNG\r\n\x1a\n"


def _topic(bootstrap: str) -> str:
    name = f"stats-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=2)])
    return name


def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap) as producer:
        for partition, n in per_partition.items():
            for i in range(n):
                producer.send(topic, b"v%d" % i, partition=partition)
        producer.flush()


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG)
    assert len(data) > 10_000  # three drawn panels, not an empty canvas


def test_group_lag_json_and_plot(bootstrap: str, tmp_path: Path) -> None:
    topic, group = _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    _produce(bootstrap, topic, {0: 12, 1: 8})
    # no auto-commit: closing must not commit the positions the consumer reset to meanwhile
    with KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.commit({TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 8})
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:  # what the command finds
        assert len(admin.list_consumer_group_offsets(group)) == 2
    out = tmp_path / "group.png"
    text = ok(kafkastate("stats", "group", group, "-n", "3", "-i", "0.2", "--json",
                         "--plot", str(out), "-b", bootstrap))  # fmt: skip
    samples = [json.loads(line) for line in text.splitlines()]
    assert len(samples) == 3
    assert [s["time"] for s in samples] == sorted(s["time"] for s in samples)
    for s in samples:
        assert s["client"] == "admin"
        assert s["lag"] == 7, s["partitions"]  # 12 - 5 on partition 0, 8 - 8 on partition 1
        assert s["latency_ms"] > 0
        assert s["partitions"] == [
            {"topic": topic, "partition": 0, "end": 12, "committed": 5, "lag": 7},
            {"topic": topic, "partition": 1, "end": 8, "committed": 8, "lag": 0},
        ]
    assert "produced_per_s" not in samples[0]  # a rate needs two readings
    for s in samples[1:]:
        assert s["produced_per_s"] == 0.0  # nothing written while it watched
        assert s["consumed_per_s"] == 0.0
    check_png(out)


def test_topic_rows_when_piped(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    _produce(bootstrap, topic, {0: 3, 1: 4})
    lines = ok(kafkastate("stats", "topic", topic, "-n", "2", "-i", "0.1", "-b", bootstrap))
    rows = [line.split("\t") for line in lines.splitlines()]
    assert [row[1:] for row in rows] == [[topic, "0", "3"], [topic, "1", "4"]] * 2
    assert all(float(row[0]) >= 0 for row in rows)


def test_unknown_topic_is_one_line(bootstrap: str) -> None:
    result = kafkastate("stats", "topic", "no-such-topic-x", "-n", "1", "-b", bootstrap)
    one_error_line(result, 1, "no-such-topic-x")


def _run(bootstrap: str, path: Path) -> None:
    """A producer and a consumer whose stats_cb writes one JSON line per report."""
    topic = _topic(bootstrap)
    with path.open("w") as file:

        def write(stats: dict[str, Any]) -> None:
            file.write(json.dumps(stats) + "\n")

        with KafkaProducer(
            bootstrap_servers=bootstrap, stats_cb=write, statistics_interval_ms=50, linger_ms=2
        ) as producer:
            for i in range(400):
                producer.send(topic, b"x" * 100, key=b"%d" % i)
                if i % 50 == 0:
                    producer.flush()
                    time.sleep(0.06)  # production spans several 50 ms reports, so rates show
            producer.flush()
        with KafkaConsumer(  # no group: its own partitions, from the start
            bootstrap_servers=bootstrap,
            stats_cb=write,
            statistics_interval_ms=50,
            max_poll_records=20,
        ) as consumer:
            # A rate needs two reports, and the consumer counts records as they leave its
            # fetch buffer (all 400 can at its first poll): let its first report come first.
            time.sleep(0.15)
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            consumer.seek_to_beginning()
            seen = 0
            for _ in range(600):
                seen += sum(len(rs) for rs in consumer.poll(timeout_ms=100).values())
                if seen >= 400:
                    break
                time.sleep(0.01)  # consumption spans several 50 ms reports, so rates show
            for _ in range(3):
                consumer.poll(timeout_ms=100)  # reports after the last records too
            assert seen == 400


def test_run_file_json_summary_and_plot(bootstrap: str, tmp_path: Path) -> None:
    stats = tmp_path / "run.jsonl"
    _run(bootstrap, stats)
    text = ok(kafkastate("stats", "run", str(stats), "--json"))
    samples = [json.loads(line) for line in text.splitlines()]
    producer = [s for s in samples if s["client"] == "producer"]
    consumer = [s for s in samples if s["client"] == "consumer"]
    assert producer and consumer
    assert samples[0]["time"] == 0
    # a rate needs two reports of a client: its first has none
    assert "produced_per_s" not in producer[0]
    assert max(s["produced_per_s"] for s in producer[1:]) > 0
    assert max(s["consumed_per_s"] for s in consumer[1:]) > 0
    assert all(s["latency_ms"] >= 0 for s in samples)
    assert max(s["latency_ms"] for s in producer) > 0
    assert all(s["lag"] >= 0 for s in consumer)
    assert consumer[-1]["lag"] == 0  # caught up
    summary = ok(kafkastate("stats", "run", str(stats)))
    rows = {line.split("\t")[0]: line.split("\t") for line in summary.splitlines()}
    assert set(rows) == {"producer", "consumer"}
    assert int(rows["producer"][1]) == len(producer)
    out = tmp_path / "run.png"
    ok(kafkastate("stats", "run", str(stats), "--plot", str(out)))
    check_png(out)


def test_run_file_that_is_not_statistics(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "producer"}\n')
    one_error_line(kafkastate("stats", "run", str(bad)), 1, "line 1", "stats_cb")
