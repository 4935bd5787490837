"""The INFO lifecycle lines, on every runtime against the real broker: connected, joined
generation N with the assignment, revoked (on leaving), and fenced (a transactional
producer fenced by a newer one with the same id). docs/observability.md#logging."""

from __future__ import annotations

import logging
import re
import uuid

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.anyio import open_consumer, open_producer
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import KafkaError
from kafkastate.sync import KafkaConsumer, KafkaProducer

pytestmark = pytest.mark.integration


def _topic(bootstrap: str) -> str:
    name = f"logging-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=2)])
    return name


def check_lines(caplog: pytest.LogCaptureFixture, topic: str, group: str, tid: str) -> None:
    lines = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    info = [(name, message) for name, level, message in lines if level == logging.INFO]

    def one(logger: str, pattern: str) -> None:
        found = [m for n, m in info if n == logger and re.search(pattern, m)]
        assert found, (logger, pattern, info)

    one("kafkastate.connection", r"^connected to node -?\d+ at 127\.0\.0\.1:\d+$")
    parts = rf"{topic}-0, {topic}-1"
    one("kafkastate.group", rf"^group {group}: joined generation \d+; assignment {parts}$")
    one("kafkastate.group", rf"^group {group}: revoked {parts} \(leaving\)$")
    one("kafkastate.group", rf"^group {group}: left$")
    one("kafkastate.txn", rf"^transactional id '{tid}' failed for good \(fenced\?\): ")
    # nothing above INFO comes from the core, and no line carries a secret
    assert not [m for _, level, m in lines if level > logging.INFO and "stats" in m]
    assert not [m for _, _, m in lines if "secret-password" in m]


@pytest.mark.anyio
async def test_lifecycle_lines_async(
    bootstrap: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group, tid = _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4()}"
    caplog.set_level(logging.INFO, logger="kafkastate")
    async with open_consumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest"
    ) as consumer:
        with anyio.fail_after(30):
            while len(consumer.assignment()) < 2:
                await consumer.getmany(timeout_ms=100)
    with pytest.raises(KafkaError):
        async with open_producer(bootstrap, transactional_id=tid) as old:
            await old.begin_transaction()
            await old.send(topic, b"old", partition=0)
            async with open_producer(bootstrap, transactional_id=tid):
                pass  # its InitProducerId fences the old one
            await old.commit_transaction()
    check_lines(caplog, topic, group, tid)


def test_lifecycle_lines_blocking(bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    topic, group, tid = _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4()}"
    caplog.set_level(logging.INFO, logger="kafkastate")
    with KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest"
    ) as consumer:
        for _ in range(300):
            consumer.poll(timeout_ms=100)
            if len(consumer.assignment()) == 2:
                break
    old = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"old", partition=0).get(timeout=30)
        newer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        newer.init_transactions()  # fences the old one
        newer.close()
        with pytest.raises(KafkaError):
            old.commit_transaction()
    finally:
        old.close(timeout=5)
    check_lines(caplog, topic, group, tid)
