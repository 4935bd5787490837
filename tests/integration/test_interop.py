"""Bytes we encode are read by an independent client through a real broker, and vice versa.

kafka-python (a test-only dependency) is the independent implementation here.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.compression import Compression
from kafkastate.core.protocol.records import RecordBatchBuilder, iter_batches
from kafkastate.core.protocol.requests import NewTopic

pytestmark = pytest.mark.integration

kafka = pytest.importorskip("kafka", reason="interop tests need kafka-python (dev extra)")

CODECS = {
    Compression.NONE: None,
    Compression.GZIP: "gzip",
    Compression.SNAPPY: "snappy",
    Compression.LZ4: "lz4",
    Compression.ZSTD: "zstd",
}


@pytest.fixture
def topic(kafka_cluster: Any) -> Any:
    name = f"interop-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(kafka_cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=1)])
        yield name
        admin.delete_topics([name], wait=False)


@pytest.mark.parametrize("codec", list(CODECS), ids=lambda c: c.name)
def test_ours_read_by_kafka_python(kafka_cluster: Any, topic: str, codec: Compression) -> None:
    now = int(time.time() * 1000)
    expected = [
        (f"k{i}".encode(), bytes([i % 251]) * (10 + i), now + i, [("h", f"{i}".encode())])
        for i in range(50)
    ]
    expected.append((None, None, now + 50, []))  # null key and tombstone
    builder = RecordBatchBuilder(compression=codec)
    for key, value, ts, headers in expected:
        builder.append(ts, key, value, headers)
    with BlockingAdmin(kafka_cluster.bootstrap) as admin:
        assert admin.produce(topic, 0, builder.build()) == 0

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=kafka_cluster.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        got = []
        for message in consumer:
            got.append((message.key, message.value, message.timestamp, list(message.headers)))
            if len(got) == len(expected):
                break
    finally:
        consumer.close()
    assert got == [(k, v, ts, h) for k, v, ts, h in expected]


@pytest.mark.parametrize("codec", list(CODECS), ids=lambda c: c.name)
def test_kafka_python_read_by_ours(kafka_cluster: Any, topic: str, codec: Compression) -> None:
    producer = kafka.KafkaProducer(
        bootstrap_servers=kafka_cluster.bootstrap,
        compression_type=CODECS[codec],
        linger_ms=50,
        acks="all",
    )
    sent = []
    try:
        for i in range(40):
            key = None if i % 7 == 0 else f"key{i}".encode()
            value = f"value-{i}".encode() * (i % 5 + 1)
            headers = [("n", str(i).encode())] if i % 2 else []
            producer.send(topic, key=key, value=value, headers=headers, partition=0)
            sent.append((key, value, tuple(headers)))
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)

    got = []
    seen_codecs = set()
    offset = 0
    with BlockingAdmin(kafka_cluster.bootstrap) as admin:
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            data, _hw = admin.fetch(topic, 0, offset)
            for batch in iter_batches(data):
                seen_codecs.add(batch.compression)
                for record in batch:
                    got.append((record.key, record.value, record.headers))
                offset = batch.next_offset
    assert got == sent
    assert seen_codecs == {codec}
