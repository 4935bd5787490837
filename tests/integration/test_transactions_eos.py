"""The exactly-once pipelines (examples/eos_asyncio.py, examples/eos_trio.py) SIGKILLed
mid-transaction and restarted, against a real broker: every input record is transformed
exactly once in the read_committed view of the output (read with kafka-python, an
independent client)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer, KafkaProducer

pytestmark = pytest.mark.integration

kafka = pytest.importorskip("kafka")

ROOT = Path(__file__).resolve().parents[2]
N = 600
PARTITIONS = 3


def _pipeline(
    example: str, bootstrap: str, source: str, sink: str, *extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            f"examples.{example}",
            "--bootstrap",
            bootstrap,
            "--input",
            source,
            "--output",
            sink,
            "--group",
            f"eos-{source}",
            "--transactional-id",
            f"eos-{source}",
            "--batch",
            "25",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _read(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation,
        consumer_timeout_ms=4000,
    )
    try:
        return [r.value for r in consumer]
    finally:
        consumer.close()


def _open_transaction(committed: Any, uncommitted: Any, tps: list[TopicPartition]) -> bool:
    """Whether some partition has records past its last stable offset: a transaction
    with data written is open right now."""
    stable = committed.end_offsets(tps)
    high = uncommitted.end_offsets(tps)
    return any(high[tp] > stable[tp] for tp in tps)


@pytest.mark.parametrize("example", ["eos_asyncio", "eos_trio"])
def test_eos_pipeline_survives_sigkill_mid_transaction(kafka_cluster: Any, example: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    source = f"eos-in-{uuid.uuid4().hex[:8]}"
    sink = f"eos-out-{source[7:]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics(
            [
                NewTopic(name=source, num_partitions=PARTITIONS),
                NewTopic(name=sink, num_partitions=PARTITIONS),
            ]
        )
    inputs = [f"rec-{i:05d}".encode() for i in range(N)]
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i, value in enumerate(inputs):
            producer.send(source, value, partition=i % PARTITIONS)
        producer.flush()

    tps = [TopicPartition(sink, p) for p in range(PARTITIONS)]
    committed = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = KafkaConsumer(bootstrap_servers=bootstrap)
    first = _pipeline(example, bootstrap, source, sink, "--pause", "0.3")
    killed_open = False
    try:
        deadline = time.monotonic() + 90
        # let a few transactions commit, then kill while one is open with data written
        while time.monotonic() < deadline and first.poll() is None:
            stable = sum(committed.end_offsets(tps).values())
            if stable > 3 * 25 and _open_transaction(committed, uncommitted, tps):
                first.send_signal(signal.SIGKILL)
                killed_open = True
                break
            time.sleep(0.02)
        assert killed_open, "the pipeline finished (or hung) before it could be killed"
        first.wait(timeout=10)
        assert first.returncode == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
        committed.close()
        uncommitted.close()

    second = _pipeline(example, bootstrap, source, sink, "--exit-when-idle", "6")
    try:
        out, _ = second.communicate(timeout=180)
    finally:
        if second.poll() is None:
            os.kill(second.pid, signal.SIGKILL)
    assert second.returncode == 0, out
    assert "processed" in out

    expected = sorted(v.upper() for v in inputs)
    visible = _read(bootstrap, sink, "read_committed")
    assert sorted(visible) == expected  # every input exactly once
    # and the crash did leave records of an aborted transaction behind: the read_committed
    # view hid them
    written = _read(bootstrap, sink, "read_uncommitted")
    assert len(written) > N
