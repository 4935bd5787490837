"""Reassignments and leader elections (``open_admin``) on the harness's three-broker
cluster, on asyncio and trio.

A reassignment held back by a replication throttle is listed while it runs and cancelled;
one that only reorders replicas completes, and a preferred election then moves the
leadership to the new first replica. The witness is the cluster's Metadata (another API
than the ones changing it): the replica set and the leader it reports."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from kafkastate.admin import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ElectionType,
    NewTopic,
    PartitionReassignment,
)
from kafkastate.anyio import open_admin, open_producer
from kafkastate.errors import ElectionNotNeededError, KafkaError
from kafkastate.structs import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

THROTTLED = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


async def eventually(check: Callable[[], Awaitable[bool]], limit: float = 30) -> None:
    with anyio.fail_after(limit):
        while not await check():
            await anyio.sleep(0.2)


async def _throttle(admin: Any, brokers: list[int], topic: str, on: bool) -> None:
    """Throttle (or stop throttling) the topic's replication to 1 byte/s on every broker."""
    value = "1" if on else None
    changes = [
        ConfigResource(ConfigResourceType.BROKER, str(b), dict.fromkeys(THROTTLED, value))
        for b in brokers
    ]
    replicas = "*" if on else None
    changes.append(
        ConfigResource(
            ConfigResourceType.TOPIC,
            topic,
            {
                "leader.replication.throttled.replicas": AlterConfigOp(
                    value=replicas,
                    op=AlterConfigOpType.SET if on else AlterConfigOpType.DELETE,
                ),
                "follower.replication.throttled.replicas": AlterConfigOp(
                    value=replicas,
                    op=AlterConfigOpType.SET if on else AlterConfigOpType.DELETE,
                ),
            },
        )
    )
    results = await admin.incremental_alter_configs(changes)
    assert all(r is None for r in results.values()), results


async def test_reassignments_are_listed_cancelled_completed_and_leaders_elected(
    kafka_cluster3: Any,
) -> None:
    topic = f"reassign-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    async with open_admin(kafka_cluster3.bootstrap, request_timeout_ms=30000) as admin:
        brokers = sorted(b.node_id for b in (await admin.describe_cluster()).brokers)
        first, second, third = brokers[:3]
        created = await admin.create_topics(
            [NewTopic(topic, replica_assignments={0: [first, second]})]
        )
        assert not isinstance(created[topic], Exception), created

        async def placed(replicas: tuple[int, ...], leader: int | None = None) -> bool:
            found = (await admin.describe_topics([topic]))[topic]
            if isinstance(found, Exception):
                return False
            (p,) = found.partitions
            return p.replicas == replicas and (leader is None or p.leader == leader)

        await eventually(lambda: placed((first, second), first))
        async with open_producer(kafka_cluster3.bootstrap, acks="all") as producer:
            for _ in range(40):
                await producer.send(topic, b"x" * 4096, partition=0)

        # a reassignment onto the third broker, held back by a 1 byte/s throttle
        await _throttle(admin, brokers, topic, on=True)
        try:
            moved = await admin.alter_partition_reassignments({tp: [third, first]})
            assert moved == {tp: None}
            ongoing = await admin.list_partition_reassignments()
            assert ongoing[tp] == PartitionReassignment(
                replicas=ongoing[tp].replicas,
                adding_replicas=(third,),
                removing_replicas=(second,),
            )
            assert set(ongoing[tp].replicas) == {first, second, third}
            assert await admin.list_partition_reassignments([tp]) == ongoing
            cancelled = await admin.alter_partition_reassignments({tp: None})
            assert cancelled == {tp: None}
        finally:
            await _throttle(admin, brokers, topic, on=False)
        assert await admin.list_partition_reassignments([tp]) == {}
        await eventually(lambda: placed((first, second)))

        # a cancel with nothing under way, and a partition that does not exist
        nothing = await admin.alter_partition_reassignments(
            {tp: None, TopicPartition(topic, 7): [first]}
        )
        assert all(isinstance(e, KafkaError) for e in nothing.values()), nothing

        # reordering needs no copy: it completes, then a preferred election follows it
        assert await admin.alter_partition_reassignments({tp: [second, first]}) == {tp: None}
        await eventually(lambda: placed((second, first)))
        elected = await admin.elect_leaders(ElectionType.PREFERRED, [tp])
        if isinstance(elected[tp], ElectionNotNeededError):  # the controller was faster
            elected[tp] = None
        assert elected == {tp: None}
        await eventually(lambda: placed((second, first), second))
        again = await admin.elect_leaders(ElectionType.PREFERRED, [tp])
        assert isinstance(again[tp], ElectionNotNeededError)
        # every partition: the controller answers for those it looked at
        everything = await admin.elect_leaders(ElectionType.PREFERRED)
        assert all(v is None or isinstance(v, KafkaError) for v in everything.values())
        assert everything.get(tp) is None or isinstance(everything[tp], ElectionNotNeededError)
        await admin.delete_topics([topic])
