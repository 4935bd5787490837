"""Compare the fuzz suite's mutation loop with atheris (libFuzzer, coverage-guided) on a
few decoders: inputs per CPU second, and the lines and line-to-line arcs of kafkastate
that the inputs reach (replayed under ``sys.settrace`` afterwards, the same measure for
both). What docs/reliability.md's "Why a mutation loop" cites.

    python tools/fuzz_compare.py [--inputs 20000] [--target records-v2 ...]

atheris is optional (``pip install atheris``; a ``fuzz`` extra); without it only the
mutation loop is measured.
"""

# The decoders are imported late on purpose: atheris must instrument them as they load.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import contextlib
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _targets() -> dict[str, tuple[Callable[[bytes], object], list[bytes]]]:
    """Each target's decoder (only KafkaErrors escape, as in the suite) and seeds."""
    from kafkastate.core.consumer import assignors
    from kafkastate.core.protocol import records
    from tests.core.consumer.test_assignors_fuzz import assignments
    from tests.core.protocol.test_records_fuzz import CORPUS, consume_both
    from tests.core.test_sasl_fuzz import SERVER_FINAL_SEEDS, server_final

    records.set_speedups(False)  # the pure-Python codec: atheris instruments Python code
    return {
        "records-v2": (consume_both, [data for name, data in CORPUS if name.startswith("v2-")]),
        "scram-final": (server_final, SERVER_FINAL_SEEDS),
        "assignment": (assignors.decode_assignment, assignments()),
    }


def _guarded(decode: Callable[[bytes], object]) -> Callable[[bytes], None]:
    from kafkastate.errors import KafkaError

    def run(data: bytes) -> None:
        with contextlib.suppress(KafkaError):
            decode(data)

    return run


def mutation_inputs(target: str, count: int) -> tuple[list[bytes], float]:
    """``count`` inputs of the suite's loop and the CPU seconds it took to make and
    decode them."""
    from tests._support.fuzzing import derive

    decode, seeds = _targets()[target]
    run = _guarded(decode)
    rng = random.Random(f"compare-{target}")
    out = []
    started = time.process_time()
    for i in range(count):
        data = derive(seeds[i % len(seeds)], rng, seeds)
        run(data)
        out.append(data)
    return out, time.process_time() - started


def _atheris_child(target: str, count: int, dump: str) -> None:
    """Run inside the subprocess: libFuzzer drives the instrumented decoder."""
    import atheris

    with atheris.instrument_imports(include=["kafkastate"]):
        decoders = _targets()
    decode, seeds = decoders[target]
    run = _guarded(decode)
    corpus = tempfile.mkdtemp()
    for i, seed in enumerate(seeds):
        Path(corpus, f"seed{i}").write_bytes(seed)
    out = open(dump, "wb")  # noqa: SIM115 - libFuzzer exits the process without unwinding

    def one_input(data: bytes) -> None:
        # each input with the CPU clock before it: the rate leaves out the start-up
        # (instrumenting the imports takes seconds)
        out.write(struct.pack(">Id", len(data), time.process_time()) + data)
        run(data)

    atheris.Setup([sys.argv[0], f"-runs={count}", "-seed=1", "-max_len=4096", corpus], one_input)
    atheris.Fuzz()


def atheris_inputs(target: str, count: int) -> tuple[list[bytes], float]:
    """What atheris fed the decoder in ``count`` runs, and the CPU seconds between its
    first and last input."""
    with tempfile.NamedTemporaryFile(delete=False) as dump:
        path = dump.name
    subprocess.run(
        [sys.executable, __file__, "--atheris-child", target, str(count), path],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    frames = list(_frames(Path(path).read_bytes()))
    os.unlink(path)
    cpu = frames[-1][0] - frames[0][0] if frames else 0.0
    return [data for _, data in frames], cpu


def _frames(data: bytes) -> Iterator[tuple[float, bytes]]:
    pos = 0
    while pos + 12 <= len(data):
        size, cpu = struct.unpack_from(">Id", data, pos)
        yield cpu, data[pos + 12 : pos + 12 + size]
        pos += 12 + size


def reached(target: str, inputs: list[bytes]) -> tuple[int, int]:
    """Lines and arcs of kafkastate the inputs execute."""
    decode = _guarded(_targets()[target][0])
    package = str(ROOT / "kafkastate")
    lines: set[tuple[str, int]] = set()
    arcs: set[tuple[str, int, int]] = set()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        if not name.startswith(package):
            return None
        last = [-1]

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                lines.add((name, frame.f_lineno))
                arcs.add((name, last[0], frame.f_lineno))
                last[0] = frame.f_lineno
            return local

        return local

    sys.settrace(tracer)
    try:
        for data in inputs:
            decode(data)
    finally:
        sys.settrace(None)
    return len(lines), len(arcs)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--atheris-child":
        _atheris_child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=20_000)
    parser.add_argument("--target", action="append", choices=sorted(_targets()))
    args = parser.parse_args()
    try:
        import atheris  # noqa: F401
    except ImportError:
        have_atheris = False
    else:
        have_atheris = True
    print("| Decoder | Fuzzer | Inputs | Inputs per CPU second | Lines reached | Arcs reached |")
    print("|---|---|---:|---:|---:|---:|")
    for target in args.target or sorted(_targets()):
        makers = [("mutation loop", mutation_inputs)]
        if have_atheris:
            makers.append(("atheris", atheris_inputs))
        for label, make in makers:
            inputs, cpu = make(target, args.inputs)
            lines, arcs = reached(target, inputs)
            rate = len(inputs) / cpu if cpu else 0.0
            print(f"| {target} | {label} | {len(inputs):,} | {rate:,.0f} | {lines} | {arcs} |")


if __name__ == "__main__":
    main()
