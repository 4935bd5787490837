"""A consumer-group member in a process of its own, for tests/integration/test_groups.py.

    python -m tests.integration.group_member ADAPTER BOOTSTRAP TOPIC GROUP_ID [--strategy S]
        [--instance-id ID] [--protocol classic|consumer] [--session-ms MS]

ADAPTER is ``asyncio`` (AIOKafkaConsumer), ``trio`` / ``anyio`` (open_consumer on trio /
asyncio), ``sync`` (KafkaConsumer) or ``kafka-python`` (the independent client). The member
reads from the earliest offset, commits each batch it was handed right after printing it,
and prints one JSON object per line on stdout (flushed), in the order things happened:

* ``{"event": "assigned" | "revoked" | "lost", "partitions": [p, ...]}`` -- from its
  rebalance listener;
* ``{"event": "records", "items": [[p, offset], ...]}`` -- records handed to it;
* ``{"event": "committed", "offsets": {p: offset}}`` / ``{"event": "commit_failed"}``;
* ``{"event": "closed"}`` -- after a clean shutdown.

It stops cleanly (commit, leave the group) when its stdin closes or says ``stop``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.errors import CommitFailedError, KafkaError


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def stop_flag() -> threading.Event:
    flag = threading.Event()

    def watch() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        flag.set()

    threading.Thread(target=watch, daemon=True).start()
    return flag


class Listener(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked: Any) -> None:
        emit(event="revoked", partitions=sorted(tp.partition for tp in revoked))

    def on_partitions_assigned(self, assigned: Any) -> None:
        emit(event="assigned", partitions=sorted(tp.partition for tp in assigned))

    def on_partitions_lost(self, lost: Any) -> None:
        emit(event="lost", partitions=sorted(tp.partition for tp in lost))


def report(batch: Any) -> dict[Any, int]:
    items = [[tp.partition, r.offset] for tp, records in batch.items() for r in records]
    if items:
        emit(event="records", items=items)
    return {tp: records[-1].offset + 1 for tp, records in batch.items() if records}


def group_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": args.bootstrap,
        "group_id": args.group,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "group_instance_id": args.instance_id,
    }
    if args.protocol == "consumer":
        options["group_protocol"] = "consumer"
    else:
        options["session_timeout_ms"] = args.session_ms
        options["heartbeat_interval_ms"] = min(1000, args.session_ms // 3)
        options["partition_assignment_strategy"] = [args.strategy]
    return options


async def run_async(args: argparse.Namespace, stop: threading.Event) -> None:
    from kafkastate.anyio import open_consumer  # noqa: PLC0415
    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    options = group_options(args)
    if args.adapter == "asyncio":
        consumer: Any = AIOKafkaConsumer(**options)
        await consumer.start()
        consumer.subscribe([args.topic], listener=Listener())
        try:
            await loop(consumer, stop)
        finally:
            await consumer.stop()
    else:
        async with open_consumer(args.topic, listener=Listener(), **options) as consumer:
            await loop(consumer, stop)
    emit(event="closed")


async def loop(consumer: Any, stop: threading.Event) -> None:
    while not stop.is_set():
        batch = await consumer.getmany(timeout_ms=200)
        offsets = report(batch)
        if offsets:
            try:
                await consumer.commit(offsets)
            except CommitFailedError:
                emit(event="commit_failed")
                continue
            emit(event="committed", offsets={tp.partition: o for tp, o in offsets.items()})


def run_sync(args: argparse.Namespace, stop: threading.Event) -> None:
    from kafkastate.sync import KafkaConsumer  # noqa: PLC0415

    with KafkaConsumer(**group_options(args)) as consumer:
        consumer.subscribe([args.topic], listener=Listener())
        sync_loop(consumer, stop, CommitFailedError)
    emit(event="closed")


def run_kafka_python(args: argparse.Namespace, stop: threading.Event) -> None:
    import kafka  # noqa: PLC0415
    from kafka.errors import CommitFailedError as KafkaPythonCommitFailed  # noqa: PLC0415

    assignors = {
        "range": kafka.coordinator.assignors.range.RangePartitionAssignor,
        "roundrobin": kafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor,
    }
    options = group_options(args)
    options["partition_assignment_strategy"] = [assignors[args.strategy]]

    class KafkaPythonListener(kafka.ConsumerRebalanceListener):  # type: ignore[misc]
        on_partitions_revoked = Listener.on_partitions_revoked
        on_partitions_assigned = Listener.on_partitions_assigned

    consumer = kafka.KafkaConsumer(**options)
    consumer.subscribe([args.topic], listener=KafkaPythonListener())
    sync_loop(consumer, stop, KafkaPythonCommitFailed)
    consumer.close()
    emit(event="closed")


def sync_loop(consumer: Any, stop: threading.Event, commit_failed: type[Exception]) -> None:
    while not stop.is_set():
        batch = consumer.poll(timeout_ms=200)
        offsets = report(batch)
        if offsets:
            try:
                consumer.commit({tp: _offset(consumer, o) for tp, o in offsets.items()})
            except commit_failed:
                emit(event="commit_failed")
                continue
            emit(event="committed", offsets={tp.partition: o for tp, o in offsets.items()})


def _offset(consumer: Any, offset: int) -> Any:
    if type(consumer).__module__.startswith("kafka."):
        from kafka.structs import OffsetAndMetadata  # noqa: PLC0415

        return OffsetAndMetadata(offset, "", -1)
    return offset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("adapter", choices=["asyncio", "trio", "anyio", "sync", "kafka-python"])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--strategy", default="range")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--protocol", default="classic")
    parser.add_argument("--session-ms", type=int, default=6000)
    args = parser.parse_args()
    stop = stop_flag()
    try:
        if args.adapter in ("asyncio", "anyio"):
            import asyncio  # noqa: PLC0415

            asyncio.run(run_async(args, stop))
        elif args.adapter == "trio":
            import trio  # noqa: PLC0415

            trio.run(run_async, args, stop)
        elif args.adapter == "sync":
            run_sync(args, stop)
        else:
            run_kafka_python(args, stop)
    except KafkaError as exc:
        emit(event="error", error=repr(exc))
        raise


if __name__ == "__main__":
    main()
