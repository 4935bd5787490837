"""Core-only record batch throughput: kafkastate (C accelerator and pure Python) vs aiokafka.

Encodes N records of 100 B and 1 KiB JSON-like values (null keys, no headers, timestamps a
few per millisecond) into batches of ``--batch-bytes`` (default 16 KiB, the Java
``batch.size``), with every codec, then decodes the concatenated batches and reads every
record's value, the way a consumer hands records out. kafkastate runs twice, with its optional
C accelerator (``kafkastate.core.protocol._speedups``, if built) and with its pure-Python
codec (``records.set_speedups(False)``); aiokafka (``aiokafka.record``: its Cython extension
if built, else its pure-Python code; the output says which) does the same work in the same
process, all three interleaved run by run so they see the same machine state. Best of
``--repeat`` runs of process CPU time; records/s, MB/s of value payload, and the ratios
kafkastate / aiokafka.

kafkastate's decode verifies every batch's CRC32C (``iter_batches`` default, ``check.crcs``);
aiokafka's ``MemoryRecords`` does not unless asked (its consumer calls ``validate_crc()``
when ``check_crcs`` is on): ``--aiokafka-crc`` adds that call.

    python bench/bench_records.py            # full run, markdown table on stdout
    python bench/bench_records.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import platform
import random
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

try:
    import kafkastate  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from kafkastate.core.protocol import records
from kafkastate.core.protocol.compression import Compression
from kafkastate.core.protocol.records import RecordBatchBuilder, iter_batches

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
    from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords

TS = 1_700_000_000_000
# CPU time of this process, not wall time: the benchmark is CPU-bound and single-threaded, and
# on a shared machine other processes' load would otherwise count against whoever ran then.
_clock = time.process_time
RECORD_OVERHEAD = 10  # rough per-record framing, to size batches by count for both libraries


WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"kafka", b"topic", b"offset"]


def make_values(n: int, size: int) -> list[bytes]:
    """JSON-ish values from a seeded generator: compressible about 2-4x, like real events."""
    rng = random.Random(size)
    values = []
    for i in range(n):
        text = b'{"id": %d, "user": "%s%d", "tags": [' % (
            i,
            rng.choice(WORDS),
            rng.randrange(10**6),
        )
        while len(text) < size:
            text += b'"%s", %d, ' % (rng.choice(WORDS), rng.randrange(10**4))
        values.append(text[: size - 2] + b"]}")
    return values


def ks_encode(values: list[bytes], per_batch: int, codec: int) -> list[bytes]:
    out = []
    for start in range(0, len(values), per_batch):
        b = RecordBatchBuilder(compression=Compression(codec))
        append = b.append
        for i, value in enumerate(values[start : start + per_batch]):
            append(TS + (i >> 3), None, value)
        out.append(b.build())
    return out


def aio_encode(values: list[bytes], per_batch: int, codec: int) -> list[bytes]:
    out = []
    for start in range(0, len(values), per_batch):
        b = AioBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        append = b.append
        for i, value in enumerate(values[start : start + per_batch]):
            append(i, timestamp=TS + (i >> 3), key=None, value=value, headers=[])
        out.append(bytes(b.build()))
    return out


def ks_decode(data: bytes) -> int:
    n = 0
    for batch in iter_batches(data):
        for record in batch:
            n += len(record.value)  # type: ignore[arg-type]
    return n


def aio_decode(data: bytes, check_crc: bool = False) -> int:
    n = 0
    batches = AioMemoryRecords(data)
    while (batch := batches.next_batch()) is not None:
        if check_crc and not batch.validate_crc():
            raise ValueError("CRC mismatch")
        for record in batch:
            n += len(record.value)
    return n


def with_speedups(enabled: bool, fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """``fn(*args)`` run with kafkastate's C accelerator on or off."""

    def run() -> Any:
        previous = records.set_speedups(enabled)
        try:
            return fn(*args)
        finally:
            records.set_speedups(previous)

    return run


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = _clock()
        fn()
        best = min(best, _clock() - start)
    return best


def interleaved(repeat: int, *fns: Callable[[], Any]) -> list[float]:
    """Best time of each function, running them in turn."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            gc.collect()
            start = _clock()
            fn()
            best[i] = min(best[i], _clock() - start)
    return best


def value_handout(repeat: int) -> list[tuple[str, float, float]]:
    """ns per value: slicing a record's value as bytes vs memoryview, then a typical use."""
    rows = []
    for size in (100, 1024):
        buf = bytes(range(97, 123)) * (size * 1000 // 26 + 1)
        offsets = range(0, size * 1000, size)

        def as_bytes(buf: bytes = buf, size: int = size, offsets: range = offsets) -> None:
            for o in offsets:
                buf[o : o + size].decode()

        mv = memoryview(buf)

        def as_view(mv: memoryview = mv, size: int = size, offsets: range = offsets) -> None:
            for o in offsets:
                str(mv[o : o + size], "utf-8")  # a memoryview has no .decode()

        def bytes_only(buf: bytes = buf, size: int = size, offsets: range = offsets) -> None:
            for o in offsets:
                buf[o : o + size]

        def view_only(mv: memoryview = mv, size: int = size, offsets: range = offsets) -> None:
            for o in offsets:
                mv[o : o + size]

        rows.append(
            (
                f"{size} B slice",
                best_of(repeat, bytes_only) / 1000 * 1e9,
                best_of(repeat, view_only) / 1000 * 1e9,
            )
        )
        rows.append(
            (
                f"{size} B slice + decode to str",
                best_of(repeat, as_bytes) / 1000 * 1e9,
                best_of(repeat, as_view) / 1000 * 1e9,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and repeats")
    parser.add_argument("--records", type=int, default=None, help="records per case")
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument(
        "--aiokafka-crc",
        action="store_true",
        help="aiokafka decode also validates each batch's CRC, as its consumer does by default",
    )
    args = parser.parse_args()
    repeat = args.repeat or (2 if args.quick else 5)
    have_c = records.SPEEDUPS_AVAILABLE

    impl = "Cython extension" if "_crecords" in AioBuilder.__module__ else "pure Python"
    print(
        f"# Record batch encode/decode, core only ({platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()})\n"
    )
    print(
        f"kafkastate C accelerator: {'built' if have_c else 'NOT BUILT (C columns n/a)'}; "
        f"aiokafka record code: {impl} (`{AioBuilder.__module__}`), CRC "
        f"{'validated' if args.aiokafka_crc else 'not validated'} on decode; "
        f"batch size {args.batch_bytes} B; best of {repeat} (process CPU time).\n"
    )
    print(
        "| value | codec | op | ks C rec/s | ks C MB/s | ks Python rec/s | aiokafka rec/s "
        "| aiokafka MB/s | ratio C/aio | ratio Python/aio |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for size in (100, 1024):
        default_n = 200_000 if size == 100 else 50_000
        n = args.records or (default_n // 10 if args.quick else default_n)
        values = make_values(n, size)
        per_batch = max(1, args.batch_bytes // (size + RECORD_OVERHEAD))
        for codec in Compression:
            flavours = [False, True] if have_c else [False]
            encoded = [with_speedups(c, ks_encode, values, per_batch, codec)() for c in flavours]
            assert all(e == encoded[0] for e in encoded)  # C and Python: the same bytes
            ks_data = b"".join(encoded[0])
            aio_data = b"".join(aio_encode(values, per_batch, codec))
            for c in flavours:
                assert with_speedups(c, ks_decode, ks_data)() == n * size
            assert aio_decode(aio_data, args.aiokafka_crc) == n * size
            # Interleaved, so every contender sees the same machine load.
            enc = interleaved(
                repeat,
                partial(aio_encode, values, per_batch, codec),
                *(with_speedups(c, ks_encode, values, per_batch, codec) for c in flavours),
            )
            dec = interleaved(
                repeat,
                partial(aio_decode, aio_data, args.aiokafka_crc),
                *(with_speedups(c, ks_decode, ks_data) for c in flavours),
            )
            for op, times in (("encode", enc), ("decode", dec)):
                aio, py = times[0], times[1]
                c_cells = (
                    f"{n / times[2]:,.0f} | {n * size / times[2] / 1e6:,.1f}"
                    if have_c
                    else "n/a | n/a"
                )
                c_ratio = f"{aio / times[2]:.2f}" if have_c else "n/a"
                print(
                    f"| {size} B | {codec.name.lower()} | {op} | {c_cells} | {n / py:,.0f} | "
                    f"{n / aio:,.0f} | {n * size / aio / 1e6:,.1f} | {c_ratio} | {aio / py:.2f} |"
                )
            sys.stdout.flush()
    print("\n## Handing values out: bytes vs memoryview (ns per value)\n")
    print("| case | bytes | memoryview |")
    print("|---|---:|---:|")
    for case, as_bytes, as_view in value_handout(repeat):
        print(f"| {case} | {as_bytes:.0f} | {as_view:.0f} |")


if __name__ == "__main__":
    main()
