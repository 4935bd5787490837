"""Shared pieces of the decoder fuzz tests (tests/core/**/test_*_fuzz.py).

* :func:`fuzz_count` / :data:`FUZZ` — how many inputs a run feeds each decoder: a few
  thousand in the default suite, ``KAFKASTATE_FUZZ_EXAMPLES`` in ``nox -s fuzz``.
* :func:`run_mutations` — the volume loop: seeded structure-aware mutations of valid
  encodings (bit flips, interesting bytes, truncations, insertions, length-field
  corruption, huge counts, splices of two seeds), each input under a time bound and an
  RSS bound; only a ``KafkaError`` may escape the decoder. With
  ``KAFKASTATE_FUZZ_REPORT=<path>`` each loop draws its inputs from a fresh stream and
  appends its figures (stream, inputs, time, outcomes) to that file as a JSON line;
  ``KAFKASTATE_FUZZ_RESUME=1`` runs only the inputs the loop still lacks there
  (tests/_support/campaign.py); ``KAFKASTATE_FUZZ_STREAM=<n>`` replays stream ``n``.
* :func:`build_entity` — a random *valid* kio entity of any response schema, so the
  response fuzzer starts from real encodings of every API and version the client speaks.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import random
import re
import resource
import signal
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from kafkastate.errors import KafkaError
from tests._support import campaign
from tests._support.mutation import mutate

DEFAULT_EXAMPLES = 500
"""Inputs per decoder in the default suite (well under a second each)."""

PER_INPUT_SECONDS = 2.0
"""The time bound of one input, in CPU seconds of this process (``ITIMER_PROF``): past it
the decoder hangs. CPU time, not wall time, so a loaded machine does not make a hang of a
starved process."""

WATCHDOG_TICK = 0.1
"""The loop's timer fires every this many CPU seconds and fails an input it has seen
running for :data:`PER_INPUT_SECONDS` (so a hang is caught within 2.1 s of CPU) instead of
being re-armed around every input: two system calls per input saved."""

RSS_WINDOW = 64
"""The loop reads its peak RSS after every this many inputs (a power of two) and keeps
them: a window that grew it past :data:`RSS_GROWTH_LIMIT` fails naming those inputs. The
peak only rises, so sampling misses no growth; one ``getrusage`` per input saved."""

GENERATOR = 1
"""The version of the input generator (``derive``, ``mutate``, ``corrupt_length``,
``splice`` and the tests' own ``derive_input``): part of every loop's definition. Bump it
when a change draws different inputs from the same seeds and stream, so earlier campaign
lines stop counting towards the loop's total (docs/reliability.md)."""

RSS_GROWTH_LIMIT = 512 * 1024 * 1024
"""A run whose peak RSS grows by more than this allocated from a declared length."""

MEMORY_HEADROOM = 1024 * 1024 * 1024
"""Address space one input may add (``RLIMIT_AS`` over the loop's own): past it the
allocation fails with MemoryError, which fails the run naming the input. The decoders'
declared caps are far below (1 MiB decompressed per batch in these tests, 100 MiB frames)."""


def fuzz_count(default: int = DEFAULT_EXAMPLES) -> int:
    """Inputs per decoder: ``KAFKASTATE_FUZZ_EXAMPLES`` if set (the nox ``fuzz`` session)."""
    return int(os.environ.get("KAFKASTATE_FUZZ_EXAMPLES", default))


# Hypothesis runs the structure-exploring strategies; the volume comes from run_mutations
# (Hypothesis spends ~1 ms per example on its own bookkeeping).
FUZZ = settings(
    max_examples=max(25, fuzz_count(2_500) // 100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class InputTimeout(Exception):
    """One input ran past :data:`PER_INPUT_SECONDS`."""


def _on_alarm(signum: int, frame: object) -> None:
    raise InputTimeout("input ran past its time bound")


@contextmanager
def _alarm_handler(
    handler: Callable[[int, Any], None] = _on_alarm,
) -> Iterator[Callable[[float, float], None]]:
    """Install the SIGPROF handler once; yield ``arm(seconds, every)``, which
    (re)starts the CPU timer, repeating every ``every`` (0 stops it). A timer armed outside
    is put back afterwards."""
    previous = signal.signal(signal.SIGPROF, handler)
    outer, interval = signal.setitimer(signal.ITIMER_PROF, 0)
    started = time.process_time()

    def arm(seconds: float, every: float) -> None:
        signal.setitimer(signal.ITIMER_PROF, seconds, every)

    try:
        yield arm
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        if outer:
            left = max(outer - (time.process_time() - started), 0.001)
            signal.setitimer(signal.ITIMER_PROF, left, interval)


@contextmanager
def time_bound(seconds: float = PER_INPUT_SECONDS) -> Iterator[None]:
    """Raise :class:`InputTimeout` inside the block once it used ``seconds`` of CPU."""
    with _alarm_handler() as arm:
        arm(seconds, 0.0)
        yield


@contextmanager
def memory_bound(headroom: int | None = None) -> Iterator[None]:
    """Cap the address space at its present size plus ``headroom`` (default
    :data:`MEMORY_HEADROOM`) inside the block."""
    headroom = MEMORY_HEADROOM if headroom is None else headroom
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            size = int(statm.read().split()[0]) * resource.getpagesize()
    except OSError:  # not Linux: the peak-RSS check alone
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + headroom if hard == resource.RLIM_INFINITY else min(size + headroom, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def check_one(decode: Callable[[bytes], object], data: bytes) -> str:
    """Decode ``data``; only a valid result or a :class:`KafkaError` is allowed.

    Returns:
        The outcome: ``"ok"`` or the KafkaError's class name and message.

    Raises:
        AssertionError: any other exception (chained), naming the input bytes.
    """
    try:
        decode(data)
    except KafkaError as exc:
        return f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # the bug being hunted: report the bytes
        raise AssertionError(f"{type(exc).__name__} on input {data!r}") from exc
    return "ok"


def check_each(data: bytes, *decoders: Callable[[bytes], object]) -> None:
    """:func:`check_one` of ``data`` with every decoder."""
    for decode in decoders:
        check_one(decode, data)


def corrupt_length(data: bytes, rng: random.Random) -> bytes:
    """Overwrite an aligned 1/2/4-byte field with a huge, negative or off-by-one value:
    the shape of a corrupt length or count field."""
    if len(data) < 4:
        return mutate(data, rng)
    out = bytearray(data)
    width = rng.choice((1, 2, 4, 4))
    at = rng.randrange(len(out) - width + 1)
    if width == 1:
        out[at] = rng.choice((0x00, 0x7F, 0x80, 0xFF, out[at] + 1 & 0xFF, out[at] - 1 & 0xFF))
    elif width == 2:
        value = rng.choice((0x7FFF, -0x8000, -1, -2, 0))
        struct.pack_into(">h", out, at, value)
    else:
        old = struct.unpack_from(">i", out, at)[0]
        value = rng.choice((0x7FFFFFFF, -0x80000000, -1, -2, 1 << 24, old + 1, old - 1))
        struct.pack_into(">i", out, at, max(-(2**31), min(2**31 - 1, value)))
    return bytes(out)


def splice(data: bytes, other: bytes, rng: random.Random) -> bytes:
    """The head of one valid encoding joined to the tail of another (libFuzzer's
    CrossOver): fields of one message at the offsets of another's."""
    return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]


def derive(data: bytes, rng: random.Random, seeds: Sequence[bytes] = ()) -> bytes:
    """One fuzz input from a valid encoding: mutations, length corruption, a truncation,
    a splice with another seed, or random bytes."""
    roll = rng.random()
    if roll < 0.50:
        return mutate(data, rng)
    if roll < 0.75:
        return corrupt_length(data, rng)
    if roll < 0.87:
        return data[: rng.randrange(len(data) + 1)]
    if roll < 0.93 and seeds:
        return splice(data, rng.choice(seeds), rng)
    return rng.randbytes(rng.randint(0, 64))


Deriver = Callable[[bytes, random.Random, Sequence[bytes]], bytes]

_DIGITS = re.compile(r"-?\d+")
MAX_DISTINCT = 100_000
"""Distinct outcomes remembered per run (the figure saturates there)."""


@dataclasses.dataclass
class FuzzRun:
    """What one :func:`run_mutations` loop saw (a line of the campaign report)."""

    decoder: str
    stream: int = campaign.LEGACY_STREAM
    definition: str = ""
    target: int = 0
    inputs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    ok: int = 0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)
    outcomes: set[str] = dataclasses.field(default_factory=set)
    rss_growth: int = 0
    failure: str | None = None

    def record(self, outcome: str) -> None:
        if outcome == "ok":
            self.ok += 1
            return
        kind = outcome.partition(":")[0]
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if len(self.outcomes) < MAX_DISTINCT:
            # "RemoteProtocolError: array topics of 123 bytes..." -> one shape per message
            self.outcomes.add(_DIGITS.sub("N", outcome[:200]))

    def as_json(self) -> dict[str, Any]:
        return {
            "decoder": self.decoder,
            "definition": self.definition,
            "stream": self.stream,
            "target": self.target,
            "inputs": self.inputs,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "ok": self.ok,
            "errors": dict(sorted(self.errors.items())),
            "distinct_outcomes": len(self.outcomes) + (1 if self.ok else 0),
            "rss_growth": self.rss_growth,
            "failure": self.failure,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}",
        }


def _report(run: FuzzRun) -> None:
    """``KAFKASTATE_FUZZ_REPORT=1`` prints the run; a path appends it there as JSON
    (what tools/gen_fuzz_table.py turns into docs/reliability.md's table)."""
    target = os.environ.get("KAFKASTATE_FUZZ_REPORT")
    if not target:
        return
    rate = run.inputs / run.cpu_seconds if run.cpu_seconds else 0.0
    print(
        f"\nfuzz {run.decoder} stream {run.stream}: {run.inputs} inputs in {run.seconds:.1f} s"
        f" ({rate:.0f} per CPU second)"
    )
    if target != "1":
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps(run.as_json()) + "\n")


def definition(seeds: Sequence[bytes], derive_input: Deriver) -> str:
    """What a loop's inputs are drawn from: :data:`GENERATOR`, the deriving function and
    the seed encodings (a campaign counts only the lines of a loop's current one)."""
    name = f"{derive_input.__module__}.{derive_input.__qualname__}"
    digest = hashlib.sha256(f"{GENERATOR}:{name}".encode())
    for seed in seeds:
        digest.update(len(seed).to_bytes(8, "big"))
        digest.update(seed)
    return digest.hexdigest()[:16]


def stream_rng(decoder: str, stream: int) -> random.Random:
    """The generator of one stream of a loop's inputs (stream 0: seeded by the decoder's
    name alone, as every run was before streams)."""
    return random.Random(decoder if stream == campaign.LEGACY_STREAM else f"{decoder}/{stream}")


def draw_inputs(
    seeds: Sequence[bytes], rng: random.Random, derive_input: Deriver
) -> Iterator[bytes]:
    """A loop's inputs in order: input ``i`` derived from seed ``i mod len(seeds)``, all
    drawn from one generator (:func:`stream_rng`)."""
    count = len(seeds)
    i = 0
    while True:
        yield derive_input(seeds[i % count], rng, seeds)
        i += 1


def _plan(decoder: str, definition_: str, target: int) -> campaign.Plan:
    """The run's stream and count from the environment: a report file makes a campaign
    (a fresh stream per run; with ``KAFKASTATE_FUZZ_RESUME`` only the missing inputs)."""
    chosen = os.environ.get("KAFKASTATE_FUZZ_STREAM")
    stream = int(chosen) if chosen else None
    report = os.environ.get("KAFKASTATE_FUZZ_REPORT", "")
    if report in ("", "1"):
        stream = campaign.LEGACY_STREAM if stream is None else stream
        return campaign.Plan(stream=stream, count=target, target=target, done=0)
    runs = campaign.by_loop(campaign.read(Path(report))).get(decoder, [])
    return campaign.plan(
        runs,
        definition=definition_,
        target=target,
        resume=bool(os.environ.get("KAFKASTATE_FUZZ_RESUME")),
        draw=random.SystemRandom(),
        stream=stream,
    )


class _Watchdog:
    """The loop's SIGPROF handler: the timer repeats every :data:`WATCHDOG_TICK`; an input
    index seen at enough consecutive ticks has used :data:`PER_INPUT_SECONDS` of CPU."""

    def __init__(self) -> None:
        self.index = -1
        self._seen = -1
        self._ticks = 0
        self._limit = round(PER_INPUT_SECONDS / WATCHDOG_TICK)

    def __call__(self, signum: int, frame: object) -> None:
        if self.index != self._seen:
            # the input started within the last tick: nothing proven yet
            self._seen, self._ticks = self.index, 0
            return
        self._ticks += 1  # one more whole tick spent on this input
        if self._ticks >= self._limit:
            self._ticks = 0
            raise InputTimeout(f"input ran past its time bound of {PER_INPUT_SECONDS} s of CPU")


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT interrupts the loop even where it was ignored: a campaign started as a
    background job of a non-interactive shell inherits SIGINT ignored (POSIX), and then
    ``kill -INT`` -- how a campaign is stopped at its deadline -- did nothing, so the
    interrupted loop never wrote the line that counts its inputs."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_mutations(
    decode: Callable[[bytes], object],
    seeds: Sequence[bytes],
    *,
    count: int,
    seed: str,
    derive_input: Deriver = derive,
) -> int:
    """Feed up to ``count`` inputs derived from ``seeds`` to ``decode``; return how many
    ran (fewer when resuming a campaign that already has some).

    Every input runs under a :data:`PER_INPUT_SECONDS` CPU bound (no hang) and within
    :data:`MEMORY_HEADROOM` of address space (no memory blow-up: MemoryError fails the run
    naming the input); the process's peak RSS is read every :data:`RSS_WINDOW` inputs too,
    and a window that grew it by more than :data:`RSS_GROWTH_LIMIT` fails the run naming
    that window's inputs. A failure names the input's stream and index as well: the same
    stream (``KAFKASTATE_FUZZ_STREAM``) replays it.
    """
    definition_ = definition(seeds, derive_input)
    plan = _plan(seed, definition_, count)
    run = FuzzRun(seed, stream=plan.stream, definition=definition_, target=plan.target)
    if plan.count == 0:
        if os.environ.get("KAFKASTATE_FUZZ_REPORT"):
            print(f"\nfuzz {seed}: {plan.done} of {plan.target} inputs already run")
        return 0
    rng = stream_rng(seed, plan.stream)
    window = [b""] * RSS_WINDOW
    last = RSS_WINDOW - 1
    rss_before = _peak_rss()
    watchdog = _Watchdog()
    started = time.monotonic()
    cpu_started = time.process_time()
    i, data = 0, b""
    try:
        with _interruptible(), _alarm_handler(watchdog) as arm, memory_bound():
            arm(WATCHDOG_TICK, WATCHDOG_TICK)
            inputs = draw_inputs(seeds, rng, derive_input)
            for i in range(plan.count):
                data = next(inputs)
                watchdog.index = i
                run.record(check_one(decode, data))
                run.inputs += 1
                window[i & last] = data
                if i & last == last:
                    _check_rss(rss_before, window, i)
            _check_rss(rss_before, window[: run.inputs & last], run.inputs - 1)
    except KeyboardInterrupt:
        run.failure = "interrupted"  # the campaign's deadline: the inputs so far count
        raise
    except BaseException as exc:
        run.failure = f"input {i} of stream {plan.stream}: {type(exc).__name__}: {exc}"[:2000]
        raise
    finally:
        run.seconds = time.monotonic() - started
        run.cpu_seconds = time.process_time() - cpu_started
        run.rss_growth = _peak_rss() - rss_before
        _report(run)
    return run.inputs


def _check_rss(before: int, window: Sequence[bytes], last: int) -> None:
    grown = _peak_rss() - before
    if grown > RSS_GROWTH_LIMIT:
        first = last - len(window) + 1
        raise AssertionError(
            f"peak RSS grew by {grown} bytes within inputs {first}..{last}: {list(window)!r}"
        )


# ------------------------------------------------------------------ valid entities

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}
_ERROR_CODES = list(ErrorCode)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _scalar(kafka_type: str, optional: bool, rng: random.Random) -> Any:
    if optional and rng.random() < 0.3:
        return None
    if kafka_type in _INT_RANGES:
        lo, hi = _INT_RANGES[kafka_type]
        return (
            rng.choice((0, 1, -1, lo, hi, rng.randint(lo, hi))) if lo < 0 else rng.randint(lo, hi)
        )
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":
        return rng.uniform(-1e6, 1e6)
    if kafka_type == "error_code":
        return rng.choice(_ERROR_CODES)
    if kafka_type == "string":
        return "".join(rng.choice("abcé-_.0") for _ in range(rng.randint(0, 12)))
    if kafka_type in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 24))
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kafka_type == "timedelta_i32":
        return datetime.timedelta(milliseconds=rng.randint(0, 2**31 - 1))
    if kafka_type == "timedelta_i64":
        return datetime.timedelta(milliseconds=rng.randint(0, 2**40))
    if kafka_type == "datetime_i64":
        return _EPOCH + datetime.timedelta(milliseconds=rng.randint(0, 2**42))
    raise AssertionError(f"no generator for kafka_type {kafka_type!r}")


_ENTITY_TUPLE, _ENTITY, _PRIMITIVE_TUPLE, _PRIMITIVE = range(4)

_Plan = tuple[tuple[str, int, Any, bool], ...]
_PLANS: dict[type[Any], _Plan] = {}


def _plan_of(cls: type[Any]) -> _Plan:
    """Each field of the kio entity ``cls``: name, shape (one of the four above), the
    entity type (entities) or ``kafka_type`` (primitives), nullable. Worked out once per
    class: kio's ``classify_field`` and ``is_optional`` walk the type hints on every
    call, which was most of what building and checking entities cost the fuzz loops."""
    plan = _PLANS.get(cls)
    if plan is None:
        shapes: list[tuple[str, int, Any, bool]] = []
        for field in dataclasses.fields(cls):
            kind = classify_field(field)
            if isinstance(kind, EntityTupleField):
                shape, of = _ENTITY_TUPLE, kind.type_
            elif isinstance(kind, EntityField):
                shape, of = _ENTITY, kind.type_
            elif isinstance(kind, PrimitiveTupleField):
                shape, of = _PRIMITIVE_TUPLE, field.metadata["kafka_type"]
            else:
                shape, of = _PRIMITIVE, field.metadata["kafka_type"]
            shapes.append((field.name, shape, of, is_optional(field)))
        plan = _PLANS[cls] = tuple(shapes)
    return plan


def build_entity(cls: type[Any], rng: random.Random, depth: int = 0) -> Any:
    """A random valid instance of the kio entity ``cls`` (arrays of 0-3 elements).

    The draws from ``rng`` (their order and kind) are part of every fuzz loop's inputs:
    any change here must keep them, or bump :data:`GENERATOR`."""
    values: dict[str, Any] = {}
    for name, shape, of, optional in _plan_of(cls):
        width = 0 if depth > 3 else rng.randint(0, 3)
        if shape == _PRIMITIVE:
            values[name] = _scalar(of, optional, rng)
        elif optional and rng.random() < 0.3:
            values[name] = None
        elif shape == _ENTITY_TUPLE:
            values[name] = tuple([build_entity(of, rng, depth + 1) for _ in range(width)])
        elif shape == _ENTITY:
            values[name] = build_entity(of, rng, depth + 1)
        else:
            values[name] = tuple([_scalar(of, False, rng) for _ in range(width)])
    return cls(**values)


def assert_well_typed(entity: Any) -> None:
    """A decoded kio entity holds None only where its schema is nullable (what the
    caller's code assumes: ``for t in response.topics``)."""
    for name, shape, _of, optional in _plan_of(type(entity)):
        value = getattr(entity, name)
        if value is None:
            assert optional, f"{type(entity).__name__}.{name} decoded as None"
        elif shape == _ENTITY_TUPLE:
            for item in value:
                assert_well_typed(item)
        elif shape == _ENTITY:
            assert_well_typed(value)
        elif shape == _PRIMITIVE_TUPLE:
            assert None not in value, f"{type(entity).__name__}.{name} holds None"
