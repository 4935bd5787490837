"""Exactly-once consume-transform-produce with trio (``kafkastate.trio``).

The trio twin of ``examples/eos_asyncio.py``: read ``--input`` ``read_committed``,
upper-case every value into ``--output`` (same partition), and commit the input offsets in
the same transaction with ``send_offsets_to_transaction`` (a plain group id: the consumer
is assign-based). Killed and restarted with the same ``--transactional-id``, it resumes
where the last committed transaction ended; ``open_producer(transactional_id=...)`` fences
the dead incarnation and aborts what it left open before any offset is read.

    python -m examples.eos_trio --bootstrap localhost:9092 --input in --output out \\
        --group eos --transactional-id eos-1 --exit-when-idle 5
"""

from __future__ import annotations

import argparse

import trio

from kafkastate.trio import open_consumer, open_producer


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
    """Pipe ``source`` into ``sink`` exactly once; return how many records this run
    processed (after ``exit_when_idle`` seconds without input, or never)."""
    done = 0
    # The producer first: entering it fences an older incarnation and waits until its
    # open transaction (offsets included) is aborted; the committed offsets are final then.
    async with (
        open_producer(bootstrap, transactional_id=transactional_id) as producer,
        open_consumer(
            bootstrap_servers=bootstrap,
            group_id=group,  # to store and read offsets only: no subscribe, no rebalancing
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        ) as consumer,
    ):
        found = await consumer.partitions_for_topic(source)
        if not found:
            raise RuntimeError(f"no topic {source!r}")
        partitions = [(source, p) for p in sorted(found)]
        consumer.assign(partitions)
        for tp in partitions:
            committed = await consumer.committed(tp)
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
        idle_since = trio.current_time()
        while True:
            records = await consumer.getmany(timeout_ms=500, max_records=batch)
            if not records:
                idle = trio.current_time() - idle_since
                if exit_when_idle is not None and idle > exit_when_idle:
                    return done
                continue
            idle_since = trio.current_time()
            async with producer.transaction():
                for tp, recs in records.items():
                    for rec in recs:
                        await producer.enqueue(sink, transform(rec.value), partition=tp.partition)
                    if pause:
                        await trio.sleep(pause)  # widen the window a crash can hit
                next_offsets = {tp: recs[-1].offset + 1 for tp, recs in records.items()}
                await producer.send_offsets_to_transaction(next_offsets, group)
            done += sum(len(recs) for recs in records.values())


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
    processed = trio.run(
        lambda: run(
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
