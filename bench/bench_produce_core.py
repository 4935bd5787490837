"""Core-only producer send path: CPU per record of ``ProducerMachine.send``, no broker.

A producer machine (linger 5 ms, batch.size 16 KiB, acks=1, no idempotence) talks to the
scripted two-broker cluster of the core tests (``tests/_support/peer.py``: Metadata and
ApiVersions answered in memory) on one topic of 8 partitions. Each round sends N records of
100 B JSON-like values, unkeyed (the sticky partitioner) or keyed (1,024 distinct keys),
in chunks of 1,000: only the ``send`` calls are timed (process CPU time); between chunks
the driver's clock moves 1 ms, the timer runs and every Produce request is answered, so
batches drain and buffer memory frees as with a broker. Variants run interleaved, round by
round (``--repeat``, default 7; the minimum counts), with the C accelerator
(``kafkastate.core.protocol._speedups``) and with the pure-Python reference path
(``records.set_speedups(False)``), so ratios between them come from the same minutes of a
shared machine.

    PYTHONPATH=. python bench/bench_produce_core.py            # ~20 s
    PYTHONPATH=. python bench/bench_produce_core.py --records 50000 --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkastate.core.producer import ProducerMachine  # noqa: E402
from kafkastate.core.protocol import records  # noqa: E402
from tests.core.producer.test_producer_machine import (  # noqa: E402
    PeerCluster,
    machine,
    produce_response,
)

TS = 1_700_000_000_000
CHUNK = 1000
POOL = 1024
WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"kafka", b"topic", b"offset"]


def values(size: int) -> list[bytes]:
    out = []
    for i in range(POOL):
        body = b'{"id": %d, "w": "%s", "pad": "' % (i, WORDS[i % len(WORDS)])
        out.append((body + b"x" * size)[: size - 2] + b'"}')
    return out


def new_peer() -> PeerCluster:
    m: ProducerMachine = machine(linger=0.005, batch_size=16384, acks=1)
    peer = PeerCluster(m, topics={"t": {p: (1 + p % 2, 0) for p in range(8)}})
    peer.start()
    return peer


def drain(peer: PeerCluster, offsets: dict[Any, int]) -> None:
    """Let the timer run and answer every Produce request (untimed)."""
    ids = peer.topic_ids()

    def answer(part: Any) -> tuple[int, int]:
        at = offsets.get((part.topic, part.partition), 0)
        offsets[(part.topic, part.partition)] = at + len(part.values)
        return 0, at

    peer.advance(peer.now + 0.001)
    while produces := peer.produces():
        for sent in produces:
            peer.answer(sent, produce_response(sent, answer, ids))
    peer.events.clear()


def one_round(n: int, vals: list[bytes], keys: list[bytes] | list[None]) -> float:
    """CPU seconds of the ``send`` calls for ``n`` records."""
    peer = new_peer()
    m = peer.m
    send = m.send
    offsets: dict[Any, int] = {}
    spent = 0.0
    clock = time.process_time
    gc.collect()
    for base in range(0, n, CHUNK):
        now = peer.now
        t0 = clock()
        for i in range(base, min(n, base + CHUNK)):
            send("t", value=vals[i & 1023], key=keys[i & 1023], timestamp_ms=TS, now=now)
        spent += clock() - t0
        drain(peer, offsets)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    vals = values(100)
    keyed = [b"key-%d" % i for i in range(POOL)]
    unkeyed: list[None] = [None] * POOL
    variants = {
        (kind, path): (keys, path == "C")
        for kind, keys in (("unkeyed", unkeyed), ("keyed", keyed))
        for path in (("C", "Python") if records.SPEEDUPS_AVAILABLE else ("Python",))
    }
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(args.repeat):
        for name, (keys, c) in variants.items():
            previous = records.set_speedups(c)
            try:
                best[name] = min(best[name], one_round(args.records, vals, keys))
            finally:
                records.set_speedups(previous)
    print(f"ProducerMachine.send, 100 B values, 8 partitions, min of {args.repeat} rounds")
    print("| records | path | µs CPU / record | records/s (CPU) |")
    print("| --- | --- | ---: | ---: |")
    for (kind, path), spent in best.items():
        per = spent / args.records
        print(f"| {kind} | {path} | {per * 1e6:.2f} | {1 / per:,.0f} |")


if __name__ == "__main__":
    main()
