"""What "consumed" means, against the real broker, on every adapter: records fetched but
not yet returned to the application are neither committed nor counted by position();
pause() holds back buffered records too; a newer seek wins over a lookup in flight; stopping
ends iteration; shutdown paths do not raise."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import pytest

from kafkastate.anyio import open_consumer
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer
from tests.adapters.test_consumer import _produce, _topic

pytestmark = pytest.mark.integration


def _filled(bootstrap: str, count: int = 10, partitions: int = 1) -> str:
    topic = _topic(bootstrap, partitions=partitions)
    _produce(bootstrap, topic, count, partitions=partitions)
    return topic


# ---------------------------------------------------------------------------- blocking


def test_sync_iteration_commits_and_positions_only_what_was_returned(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _filled(bootstrap)
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    ) as consumer:
        consumer.assign([tp])
        first = next(consumer)
        second = next(consumer)
        assert (first.offset, second.offset) == (0, 1)
        assert consumer.position(tp) == 2  # nine were fetched; two were returned
        consumer.commit()
        assert consumer.committed(tp) == 2
        rest = consumer.poll(timeout_ms=5000)  # poll hands out what iteration left
        assert [r.offset for r in rest[tp]] == list(range(2, 10))


def test_sync_pause_holds_back_records_fetched_for_iteration(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _filled(bootstrap, 10, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    ) as consumer:
        consumer.assign([tp0, tp1])
        record = next(consumer)
        other = tp1 if record.partition == 0 else tp0
        consumer.pause(TopicPartition(record.topic, record.partition))
        rest = list(consumer)  # stops after consumer_timeout_ms without records
        assert {r.partition for r in rest} == {other.partition}
        assert len(rest) == 5


def test_sync_close_right_after_assign(kafka_cluster: Any) -> None:
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap)
    consumer.assign([TopicPartition("never-read", 0)])
    consumer.close()  # no IO happened yet: nothing to open, nothing raises
    consumer.close()
    with pytest.raises(StopIteration):
        next(consumer)


def test_sync_seek_to_end_wins_over_the_first_lookup(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _filled(bootstrap)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])  # asks for "earliest"
        consumer.seek_to_end(tp)  # before the answer came
        assert consumer.position(tp) == 10
        consumer.seek_to_beginning(tp)
        consumer.seek_to_end(tp)
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0


# ------------------------------------------------------------------ trio, anyio, asyncio


@pytest.mark.anyio
async def test_async_iteration_commits_and_positions_only_what_was_returned(
    kafka_cluster: Any,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _filled(bootstrap)
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with open_consumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([tp])
            with anyio.fail_after(20):
                async for record in consumer:
                    assert record.offset == 0
                    break
                assert await consumer.position(tp) == 1
                await consumer.commit()
                assert await consumer.committed(tp) == 1
                consumer.pause(tp)  # buffered records stay back too
                assert await consumer.getmany(timeout_ms=300) == {}
                consumer.resume(tp)
                rest = await consumer.getmany(timeout_ms=5000)
                assert [r.offset for r in rest[tp]] == list(range(1, 10))

    await main()


@pytest.mark.anyio
async def test_the_block_exception_is_not_wrapped(kafka_cluster: Any) -> None:
    class Boom(Exception):
        pass

    async def main() -> None:
        async with open_consumer(
            bootstrap_servers=kafka_cluster.bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            enable_auto_commit=True,  # a background task in the block
        ):
            raise Boom("from the block")

    with pytest.raises(Boom, match="from the block"):
        await main()


def test_aiokafka_consumer_stop_ends_a_running_iteration(kafka_cluster: Any) -> None:
    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    bootstrap = kafka_cluster.bootstrap
    topic = _filled(bootstrap, 3)

    async def main() -> tuple[list[int], float, float]:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        seen: list[int] = []

        async def read() -> None:
            async for record in consumer:
                seen.append(record.offset)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            with anyio.fail_after(20):
                while len(seen) < 3:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.2)  # the reader now waits for more
            cpu_before = time.process_time()
            await anyio.sleep(2.0)  # idle: a reader that spins burns ~2 s of CPU here
            cpu = time.process_time() - cpu_before
            stopped_at = time.monotonic()
            await consumer.stop()
        return seen, time.monotonic() - stopped_at, cpu

    seen, wait, cpu = anyio.run(main, backend="asyncio")
    assert seen == [0, 1, 2]
    assert wait < 5  # the iteration ended with stop(), not after getone's 60 s
    assert cpu < 1.0  # and it did not spin meanwhile (a loose bound: idle is ~0.01 s)
