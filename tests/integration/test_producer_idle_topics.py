"""``metadata_max_idle_ms`` against a real broker, on asyncio and trio: a topic the
producer stopped sending to leaves its metadata (Java ``metadata.max.idle.ms``), a deleted
one is no longer asked for, a send after expiry fetches the topic again, and partitions_for
keeps asking for a topic while it waits (also on the blocking IO thread)."""

from __future__ import annotations

import threading
import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import attrs
import pytest

from kafkastate.adapters.anyio.producer import Producer, running_producer
from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.adapters.blocking.thread import ProducerThread
from kafkastate.core.config import producer_config, resolve

IDLE_MS = 1000  # below the option's minimum (Java's 5000): set on the core config
MAX_AGE_MS = 300


def _resolved(bootstrap: str, **options: Any) -> tuple[dict[str, Any], Any]:
    """Resolved options, and their core config with ``metadata_max_idle`` of IDLE_MS."""
    resolved = resolve(
        "producer", "kafkastate", {"bootstrap_servers": bootstrap, **options}, owner="test"
    )
    return resolved, attrs.evolve(producer_config(resolved), metadata_max_idle=IDLE_MS / 1000)


def open_producer(bootstrap: str, **options: Any) -> AbstractAsyncContextManager[Producer]:
    """``kafkastate.anyio.open_producer`` with ``metadata_max_idle`` of IDLE_MS."""
    return running_producer(*_resolved(bootstrap, **options))


def _topics(bootstrap: str, *names: str) -> None:
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=1) for name in names])


@pytest.mark.anyio
async def test_idle_topics_leave_the_producer_metadata(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    tag = uuid.uuid4().hex[:8]
    keep, gone, back = f"idle-keep-{tag}", f"idle-gone-{tag}", f"idle-back-{tag}"
    _topics(bootstrap, keep, gone, back)
    with anyio.fail_after(60):
        async with open_producer(bootstrap, metadata_max_age_ms=MAX_AGE_MS) as producer:
            m = producer.machine
            for topic in (keep, gone, back):
                await producer.send(topic, b"first")
            assert set(m.tracked_topics) == {keep, gone, back}
            # keep is sent to every 100 ms; the other two go idle and leave at a refresh
            sent = 0
            while set(m.tracked_topics) != {keep}:
                await producer.send(keep, b"more")
                sent += 1
                assert sent < 100, f"idle topics never left: {m.tracked_topics}"
                await anyio.sleep(0.1)
            assert sent * 0.1 >= IDLE_MS / 1000 * 0.8  # not before they were idle
            assert m.client.metadata.topics == (keep,)
            assert gone not in m.client.cluster.topics and back not in m.client.cluster.topics

            # A deleted topic the producer no longer uses is not asked for: the refreshes
            # that follow name only keep, and nothing is left stale (an unknown topic of
            # interest would ask for a refresh every retry backoff).
            with BlockingAdmin(bootstrap) as admin:
                admin.delete_topics([gone])
            for _ in range(10):  # over several refreshes (every MAX_AGE_MS)
                await producer.send(keep, b"more")
                await anyio.sleep(0.1)
                assert m.client.metadata.topics == (keep,)
                assert m.client.metadata.stale_topics == ()
                assert gone not in m.client.cluster.topics

            # A send after expiry fetches the topic again, waits for it, and lands.
            meta = await producer.send(back, b"again")
            assert (meta.topic, meta.partition, meta.offset) == (back, 0, 1)
            assert set(m.tracked_topics) == {keep, back}
            assert back in m.client.cluster.topics


@pytest.mark.anyio
async def test_partitions_for_keeps_waiting_for_a_topic_created_after_the_idle_limit(
    kafka_cluster: Any,
) -> None:
    # Java's waitOnMetadata re-adds its topic on every wake-up: a partitions_for waiting
    # longer than metadata.max.idle.ms for a topic that does not exist yet keeps asking
    # for it, so it sees the topic once it is created.
    bootstrap = kafka_cluster.bootstrap
    late = f"idle-late-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(60):
        async with (
            open_producer(
                bootstrap, allow_auto_create_topics=False, max_block_ms=20000
            ) as producer,
            anyio.create_task_group() as tg,
        ):

            async def create_later() -> None:
                await anyio.sleep(3 * IDLE_MS / 1000)  # well past the idle limit
                await anyio.to_thread.run_sync(_topics, bootstrap, late)

            tg.start_soon(create_later)
            assert await producer.partitions_for(late) == frozenset({0})


def test_partitions_for_keeps_waiting_on_the_blocking_producer_thread(kafka_cluster: Any) -> None:
    # The same on the blocking faces' IO thread (KafkaProducer.partitions_for).
    bootstrap = kafka_cluster.bootstrap
    late = f"idle-late-{uuid.uuid4().hex[:8]}"
    _, config = _resolved(bootstrap, allow_auto_create_topics=False, max_block_ms=20000)
    io = ProducerThread(config, ssl_context=None, name="test-producer-io")
    io.start()
    creator = threading.Timer(3 * IDLE_MS / 1000, _topics, (bootstrap, late))
    creator.start()
    try:
        assert io.partitions_for(late, 20.0) == {0}
    finally:
        creator.join()
        io.close(5.0)
