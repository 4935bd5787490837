"""``metadata_max_idle_ms`` against a real broker, on asyncio and trio: a topic the
producer stopped sending to leaves its metadata (Java ``metadata.max.idle.ms``), a deleted
one is no longer asked for, and a send after expiry fetches the topic again."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.anyio import open_producer

IDLE_MS = 1000
MAX_AGE_MS = 300


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
        async with open_producer(
            bootstrap, metadata_max_idle_ms=IDLE_MS, metadata_max_age_ms=MAX_AGE_MS
        ) as producer:
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
