"""Shared pieces of the decoder fuzz tests (tests/core/**/test_*_fuzz.py).

* :func:`fuzz_count` / :data:`FUZZ` — how many inputs a run feeds each decoder: a few
  thousand in the default suite, ``KAFKASTATE_FUZZ_EXAMPLES`` in ``nox -s fuzz``.
* :func:`run_mutations` — the volume loop: seeded structure-aware mutations of valid
  encodings (bit flips, interesting bytes, truncations, insertions, length-field
  corruption, huge counts), each input under a time bound; only a ``KafkaError`` may
  escape the decoder.
* :func:`build_entity` — a random *valid* kio entity of any response schema, so the
  response fuzzer starts from real encodings of every API and version the client speaks.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import random
import resource
import signal
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
from tests._support.mutation import mutate

DEFAULT_EXAMPLES = 2_000
"""Inputs per decoder in the default suite (a few seconds each)."""

PER_INPUT_SECONDS = 2.0
"""The time bound of one input: past it the decoder hangs (generous for a shared CPU)."""

RSS_GROWTH_LIMIT = 512 * 1024 * 1024
"""A run whose peak RSS grows by more than this allocated from a declared length."""


def fuzz_count(default: int = DEFAULT_EXAMPLES) -> int:
    """Inputs per decoder: ``KAFKASTATE_FUZZ_EXAMPLES`` if set (the nox ``fuzz`` session)."""
    return int(os.environ.get("KAFKASTATE_FUZZ_EXAMPLES", default))


# Hypothesis runs the structure-exploring strategies; the volume comes from run_mutations
# (Hypothesis spends ~1 ms per example on its own bookkeeping).
FUZZ = settings(
    max_examples=max(100, fuzz_count() // 100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class InputTimeout(Exception):
    """One input ran past :data:`PER_INPUT_SECONDS`."""


@contextmanager
def time_bound(seconds: float = PER_INPUT_SECONDS) -> Iterator[None]:
    """Raise :class:`InputTimeout` inside the block once ``seconds`` of wall time pass."""

    def on_alarm(signum: int, frame: object) -> None:
        raise InputTimeout(f"input ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    # pytest-timeout arms the same timer: put its remainder back afterwards.
    outer, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            left = max(outer - (time.monotonic() - started), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def check_one(decode: Callable[[bytes], object], data: bytes) -> None:
    """Decode ``data``; only a valid result or a :class:`KafkaError` is allowed.

    Raises:
        AssertionError: any other exception (chained), naming the input bytes.
    """
    try:
        decode(data)
    except KafkaError:
        pass
    except Exception as exc:  # the bug being hunted: report the bytes
        raise AssertionError(f"{type(exc).__name__} on input {data!r}") from exc


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


def derive(data: bytes, rng: random.Random) -> bytes:
    """One fuzz input from a valid encoding: mutations, length corruption or random bytes."""
    roll = rng.random()
    if roll < 0.55:
        return mutate(data, rng)
    if roll < 0.80:
        return corrupt_length(data, rng)
    if roll < 0.92:
        return data[: rng.randrange(len(data) + 1)]
    return rng.randbytes(rng.randint(0, 64))


def run_mutations(
    decode: Callable[[bytes], object],
    seeds: Sequence[bytes],
    *,
    count: int,
    seed: str,
) -> int:
    """Feed ``count`` inputs derived from ``seeds`` to ``decode``; return the count.

    Every input runs under :func:`time_bound`; the peak RSS may not grow by more than
    :data:`RSS_GROWTH_LIMIT` over the run.
    """
    rng = random.Random(seed)
    rss_before = _peak_rss()
    started = time.monotonic()
    for i in range(count):
        data = derive(seeds[i % len(seeds)], rng)
        with time_bound():
            check_one(decode, data)
    grown = _peak_rss() - rss_before
    assert grown <= RSS_GROWTH_LIMIT, f"peak RSS grew by {grown} bytes during {seed}"
    if os.environ.get("KAFKASTATE_FUZZ_REPORT"):
        elapsed = time.monotonic() - started
        print(f"\nfuzz {seed}: {count} inputs in {elapsed:.1f} s")
    return count


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


def build_entity(cls: type[Any], rng: random.Random, depth: int = 0) -> Any:
    """A random valid instance of the kio entity ``cls`` (arrays of 0-3 elements)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        optional = is_optional(field)
        width = 0 if depth > 3 else rng.randint(0, 3)
        if isinstance(kind, EntityTupleField):
            if optional and rng.random() < 0.3:
                values[field.name] = None
            else:
                items = (build_entity(kind.type_, rng, depth + 1) for _ in range(width))
                values[field.name] = tuple(items)
        elif isinstance(kind, EntityField):
            if optional and rng.random() < 0.3:
                values[field.name] = None
            else:
                values[field.name] = build_entity(kind.type_, rng, depth + 1)
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = field.metadata["kafka_type"]
            if optional and rng.random() < 0.3:
                values[field.name] = None
            else:
                values[field.name] = tuple(_scalar(kafka_type, False, rng) for _ in range(width))
        else:
            values[field.name] = _scalar(field.metadata["kafka_type"], optional, rng)
    return cls(**values)


def assert_well_typed(entity: Any) -> None:
    """A decoded kio entity holds None only where its schema is nullable (what the
    caller's code assumes: ``for t in response.topics``)."""
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if value is None:
            assert is_optional(field), f"{type(entity).__name__}.{field.name} decoded as None"
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            for item in value:
                assert_well_typed(item)
        elif isinstance(kind, EntityField):
            assert_well_typed(value)
        elif isinstance(kind, PrimitiveTupleField):
            assert None not in value, f"{type(entity).__name__}.{field.name} holds None"
