"""Exactly-once consume-transform-produce with asyncio (aiokafka-style API).

Reads ``--input`` with ``isolation_level="read_committed"``, upper-cases every value, writes
it to ``--output`` (same partition) and commits the input offsets *in the same transaction*
(``send_offsets_to_transaction`` with a plain group id: the consumer is assign-based, so
there is no group membership to fence). Killed at any point and restarted with the same
``--transactional-id``, it goes on exactly where the last committed transaction ended:
``start()`` fences the dead incarnation and aborts its open transaction, and the consumer
resumes from the offsets that transaction committed. Every input record then appears
exactly once in the read_committed view of the output.

    python -m examples.eos_asyncio --bootstrap localhost:9092 --input in --output out \\
        --group eos --transactional-id eos-1 --exit-when-idle 5

``tests/integration/test_transactions_eos.py`` runs it, SIGKILLs it mid-transaction and restarts it.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer
from kafkastate.structs import TopicPartition


def transform(value: bytes) -> bytes:
    """The processing step."""
    return value.upper()


async def run(
    bootstrap: str,
    source: str,
    sink: str,
    group: str,
    transactional_id: str,
    *,
    batch: int = 50,
    pause: float = 0.0,
    exit_when_idle: float | None = None,
) -> int:
    """Pipe ``source`` into ``sink`` exactly once; return how many records were processed
    by this run (after ``exit_when_idle`` seconds without input, or forever)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    # The producer starts first: its init fences an older incarnation and waits until the
    # transaction that one left open is aborted, offsets included. Only then are the
    # committed offsets final.
    await producer.start()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,  # only to store and read offsets: no subscribe, no rebalancing
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    done = 0
    try:
        partitions = [
            TopicPartition(source, p) for p in sorted(await _partitions(consumer, source))
        ]
        consumer.assign(partitions)
        for tp in partitions:
            committed = await consumer.committed(tp)
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
        idle_since = time.monotonic()
        while True:
            records = await consumer.getmany(timeout_ms=500, max_records=batch)
            if not records:
                if exit_when_idle is not None and time.monotonic() - idle_since > exit_when_idle:
                    return done
                continue
            idle_since = time.monotonic()
            async with producer.transaction():
                for tp, recs in records.items():
                    for rec in recs:
                        await producer.send(sink, transform(rec.value), partition=tp.partition)
                    if pause:
                        await asyncio.sleep(pause)  # widen the window a crash can hit
                next_offsets = {tp: recs[-1].offset + 1 for tp, recs in records.items()}
                await producer.send_offsets_to_transaction(next_offsets, group)
            done += sum(len(recs) for recs in records.values())
    finally:
        await consumer.stop()
        await producer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = consumer.partitions_for_topic(topic)
        if found:
            return set(found)
        await consumer.topics()  # asks for metadata
        await asyncio.sleep(0.1)
    raise RuntimeError(f"no metadata for {topic!r}")


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--exit-when-idle", type=float, default=None)
    args = parser.parse_args()
    processed = asyncio.run(
        run(
            args.bootstrap,
            args.input,
            args.output,
            args.group,
            args.transactional_id,
            batch=args.batch,
            pause=args.pause,
            exit_when_idle=args.exit_when_idle,
        )
    )
    print(f"processed {processed}", flush=True)


if __name__ == "__main__":
    main()
