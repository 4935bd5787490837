"""A replica moved between a broker's log directories (``alter_replica_log_dirs``) on a
broker the harness starts with two of them (``KafkaCluster.start(log_dirs=2)``), on asyncio
and trio.

``describe_log_dirs`` shows the partition in the other directory once the move is done;
the witness is the disk: the partition's directory (``<topic>-<partition>``) is in the new
log directory and no longer in the old one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from kafkastate.admin import LogDirDescription, NewTopic
from kafkastate.anyio import open_admin, open_producer
from kafkastate.structs import TopicPartition, TopicPartitionReplica
from kafkastate.testing import HarnessError, KafkaCluster, PrerequisiteError
from kafkastate.testing.pytest_plugin import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture(scope="module")
def two_dir_cluster() -> Iterator[KafkaCluster]:
    """One broker with two log directories (it needs the local JVM harness: an existing
    cluster's directories are not this machine's to look at)."""
    try:
        cluster = KafkaCluster.start(log_dirs=2)
    except PrerequisiteError as exc:
        unavailable(exc)
    with cluster:
        yield cluster


def _holding(dirs: list[LogDirDescription], tp: TopicPartition) -> list[str]:
    return [d.path for d in dirs if tp in d.replicas]


async def test_a_replica_moves_to_the_other_log_dir(two_dir_cluster: KafkaCluster) -> None:
    (broker,) = two_dir_cluster.brokers
    first, second = (str(d) for d in broker.log_dirs)
    topic = f"logdirs-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    bootstrap = two_dir_cluster.bootstrap
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await admin.wait_for_topics([topic], timeout=15)
        async with open_producer(bootstrap) as producer:
            await producer.send(topic, b"moved", partition=0)
        node = broker.node_id

        (dirs,) = (await admin.describe_log_dirs([node])).values()
        assert sorted(d.path for d in dirs) == sorted([first, second])
        (source,) = _holding(dirs, tp)
        target = second if source == first else first
        assert (Path(source) / f"{topic}-0").is_dir()

        replica = TopicPartitionReplica(topic, 0, node)
        moved = await admin.alter_replica_log_dirs({replica: target})
        assert moved == {replica: None}

        with anyio.fail_after(60):
            while True:
                (dirs,) = (await admin.describe_log_dirs([node], [tp])).values()
                held = _holding(dirs, tp)
                future = [d for d in dirs if tp in d.replicas and d.replicas[tp].is_future]
                if held == [target] and not future:
                    break
                await anyio.sleep(0.2)
        replica_info = next(d for d in dirs if d.path == target).replicas[tp]
        assert replica_info.size > 0  # the record came along

        # the witness: the partition's directory on disk is in the new log dir only
        assert (Path(target) / f"{topic}-0").is_dir()
        assert not (Path(source) / f"{topic}-0").exists()


def test_the_harness_refuses_no_log_dir() -> None:
    with pytest.raises(HarnessError, match="log_dirs"):
        KafkaCluster.start(log_dirs=0)
