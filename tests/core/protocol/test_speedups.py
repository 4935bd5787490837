"""The C accelerator (``_speedups.c``) against the pure-Python reference in ``records.py``.

Every check runs both codecs on the same input and wants the same outcome: equal records of
the same types, identical encoded bytes, or the same error type. Inputs: Hypothesis round trips
(headers, null keys and values, every codec, offsets and timestamps beyond what one varint
byte holds, negative deltas, offsets past int64), hand-made edge cases (overlong varints,
10-byte timestamp deltas, bad UTF-8), seeded mutations of valid batches in the manner of
``test_records_fuzz.py`` and a crash probe in a subprocess.

``implementation`` (tests/conftest.py) is what ``test_records.py`` and ``test_records_fuzz.py``
use to run all their tests once per codec.

A long mutation campaign, by hand (a crash shows as a signal in the exit status)::

    python -m tests.core.protocol.test_speedups --campaign 200000 --seed 1
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import random
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastate.core.protocol import records
from kafkastate.core.protocol.compression import Compression, compress
from kafkastate.core.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    Record,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    iter_batches,
)
from kafkastate.errors import CorruptRecordError, KafkaConfigurationError, UnsupportedCodecError
from tests._support.mutation import mutate

# Where the build is missing: a skip, or an error under KAFKASTATE_REQUIRE_BROKER / CI
# (tests/conftest.py).
needs_c = pytest.mark.usefixtures("c_accelerator")

TS = 1_700_000_000_000
INT64_MAX = 2**63 - 1


@contextlib.contextmanager
def codec(c: bool) -> Iterator[None]:
    previous = records.set_speedups(c)
    try:
        yield
    finally:
        records.set_speedups(previous)


def both(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``fn()`` under the Python codec, then under the C codec."""
    with codec(False):
        py = fn()
    with codec(True):
        c = fn()
    return py, c


def typed(recs: list[Any]) -> list[tuple[Any, ...]]:
    """Records (or consumer records) with the type of every field, so ``1 == True``-style
    coincidences cannot hide."""
    out = []
    for r in recs:
        out.append((type(r), tuple(r), tuple(type(f) for f in r)))
        headers = r[5] if len(r) == 6 else r[8]  # a Record has 6 fields
        out.append(tuple((type(k), type(v)) for k, v in headers))
    return out


def decode(data: bytes, *, check_crcs: bool = True) -> tuple[str, Any]:
    """What a consumer sees: every batch's records, or the type of the error (and, per
    batch, what decoding straight into consumer records gives: the same records or the same
    error type)."""
    try:
        out = []
        for batch in iter_batches(data, check_crcs=check_crcs, max_decompressed_size=1 << 20):
            out.append(outcome(lambda: typed(batch.consumer_records(_Consumer, "t", 1))))  # noqa: B023
            out.append(typed(batch.records()))
            if batch.is_control:
                out.append((batch.control_type, batch.marker))
        return ("ok", out)
    except (CorruptRecordError, UnsupportedCodecError) as exc:
        return ("error", type(exc))


def same_decode(data: bytes, *, check_crcs: bool = True) -> tuple[str, Any]:
    py, c = both(lambda: decode(data, check_crcs=check_crcs))
    assert py == c, data.hex()
    return py


# -- wire helpers (independent of the builder) -------------------------------------------------


def varint(n: int, *, pad: int = 0) -> bytes:
    """Zigzag varint of ``n``, padded with ``pad`` redundant bytes (an overlong encoding)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    if pad:
        out[-1] |= 0x80
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


def raw_batch(
    section: bytes,
    count: int,
    *,
    base_offset: int = 0,
    base_ts: int = TS,
    attributes: int = 0,
    max_ts: int = TS,
) -> bytes:
    """A v2 batch around an arbitrary records section, compressed per ``attributes``, valid CRC."""
    body = compress(attributes & 7, section) if attributes & 7 else section
    tail = struct.pack(
        ">Hiqqqhii", attributes, max(count - 1, 0), base_ts, max_ts, -1, -1, -1, count
    )
    head = struct.pack(">qiibI", base_offset, 49 + len(body), -1, 2, crc32c.crc32c(tail + body))
    return head + tail + body


def raw_record(
    body_fields: bytes, *, length_adjust: int = 0, length_pad: int = 0, attributes: bytes = b"\0"
) -> bytes:
    body = attributes + body_fields
    return varint(len(body) + length_adjust, pad=length_pad) + body


# -- the switch --------------------------------------------------------------------------------


@needs_c
def test_switch() -> None:
    assert records.SPEEDUPS_AVAILABLE
    assert records.speedups_enabled()  # the default where built
    with codec(False):
        assert not records.speedups_enabled()
        assert records.set_speedups(True) is False
        assert records.speedups_enabled()
    assert records.speedups_enabled()


@needs_c
def test_c_records_are_real_records() -> None:
    b = RecordBatchBuilder(base_offset=7)
    b.append(TS, b"k", b"v", [("h", b"x")])
    (batch,) = iter_batches(b.build())
    with codec(True):
        (rec,) = batch.records()
    with codec(False):
        (ref,) = batch.records()
    assert type(rec) is Record and rec == ref and hash(rec) == hash(ref)
    assert rec.timestamp_type is TimestampType.CREATE_TIME
    assert rec._asdict() == ref._asdict() and repr(rec) == repr(ref)
    assert rec.headers == (("h", b"x"),) and rec[:2] == (7, TS)


# -- round trips -------------------------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=300) | st.sampled_from([b"k" * 9000])
headers_st = st.lists(
    st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=80)), max_size=3
)
record_st = st.tuples(
    st.integers(-(2**61), 2**61) | st.integers(-100, 100),  # timestamp delta from TS
    maybe_bytes,
    maybe_bytes,
    headers_st | st.sampled_from([(), None]),
)


@needs_c
@given(
    recs=st.lists(record_st, min_size=1, max_size=25),
    compression=st.sampled_from(list(Compression)),
    timestamp_type=st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
    base_offset=st.integers(0, INT64_MAX) | st.integers(0, 1000),
    gaps=st.lists(st.integers(1, 2**20) | st.just(1), min_size=25, max_size=25),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_round_trip_same_bytes_and_records(
    recs: list[tuple[int, bytes | None, bytes | None, Any]],
    compression: Compression,
    timestamp_type: TimestampType,
    base_offset: int,
    gaps: list[int],
) -> None:
    def encode() -> bytes:
        b = RecordBatchBuilder(
            compression=compression, timestamp_type=timestamp_type, base_offset=base_offset
        )
        delta = -1
        for (tsd, key, value, headers), gap in zip(recs, gaps, strict=False):
            delta += gap
            b.append_with_offset_delta(delta, TS + tsd, key, value, headers)
        assert b.record_count == len(recs)
        if not compression:
            assert len(b.build()) == b.size_in_bytes()
        return b.build()

    data_py, data_c = both(encode)
    assert data_py == data_c
    assert same_decode(data_c)[0] == "ok"
    py, c = both(lambda: [r for batch in iter_batches(data_c) for r in batch.records()])
    assert typed(py) == typed(c)
    offsets = list(itertools.accumulate(gaps[: len(recs)], initial=base_offset - 1))[1:]
    assert [r.offset for r in c] == offsets  # may pass int64: then a Python int, as in Python
    assert [(r.key, r.value, r.headers) for r in c] == [
        (key, value, tuple(headers or ())) for _, key, value, headers in recs
    ]
    if timestamp_type is TimestampType.CREATE_TIME:
        assert [r.timestamp for r in c] == [TS + r[0] for r in recs]


@needs_c
def test_multi_byte_varints_and_big_fields() -> None:
    def build() -> bytes:
        b = RecordBatchBuilder(base_offset=INT64_MAX - 3)
        for i in range(10):
            key = b"k" * (i * 900)
            b.append_with_offset_delta(i * 300_000, TS - i * 10**12, key, b"v" * 20_000)
        return b.build()

    py_data, data = both(build)
    assert py_data == data
    assert same_decode(data)[0] == "ok"
    py, c = both(lambda: next(iter_batches(data)).records())
    assert typed(py) == typed(c)
    assert c[-1].offset == INT64_MAX - 3 + 9 * 300_000  # beyond int64, as in Python
    assert c[-1].timestamp == TS - 9 * 10**12 and c[-1].key == b"k" * 8100


# -- hand-made edge cases ----------------------------------------------------------------------

FIELDS_OK = varint(0) + varint(0) + varint(-1) + varint(1) + b"v" + varint(0)


@needs_c
@pytest.mark.parametrize(
    ("name", "section", "count", "kwargs", "ok"),
    [
        ("empty", b"", 0, {}, True),
        ("plain", raw_record(FIELDS_OK), 1, {}, True),
        ("overlong length", raw_record(FIELDS_OK, length_pad=3), 1, {}, True),
        (
            "overlong null key",
            raw_record(varint(0) + varint(0) + varint(-1, pad=1) + varint(-1) + varint(0)),
            1,
            {},
            True,
        ),
        (
            "overlong null value and header count",
            raw_record(varint(0) + varint(0) + varint(-1) + varint(-1, pad=4) + varint(0, pad=2)),
            1,
            {},
            True,
        ),
        (
            "overlong timestamp delta (10 bytes)",
            raw_record(varint(-5, pad=9) + varint(3) + varint(-1) + varint(-1) + varint(0)),
            1,
            {},
            True,
        ),
        (
            "timestamp delta beyond 64 bits",
            raw_record(b"\xff" * 9 + b"\x7f" + varint(0) + varint(-1) + varint(-1) + varint(0)),
            1,
            {},
            True,
        ),
        (
            "even timestamp delta beyond 64 bits",
            raw_record(b"\xfe" + b"\xff" * 8 + b"\x7e" + varint(0) + varint(-1) * 2 + varint(0)),
            1,
            {},
            True,
        ),
        (
            "timestamp below int64",
            raw_record(varint(-(2**62)) + varint(0) + varint(-1) + varint(-1) + varint(0)),
            1,
            {"base_ts": -(2**63)},
            True,
        ),
        (
            "offset beyond int64",
            raw_record(varint(0) + varint(2**33) + varint(-1) + varint(-1) + varint(0)),
            1,
            {"base_offset": INT64_MAX},
            True,
        ),
        (
            "negative offset delta",
            raw_record(varint(0) + varint(-(2**33)) + varint(-1) + varint(-1) + varint(0)),
            1,
            {"base_offset": 5},
            True,
        ),
        (
            "headers",
            raw_record(
                varint(0)
                + varint(1)
                + varint(1)
                + b"k"
                + varint(0)
                + varint(3)
                + varint(0)
                + varint(-1)
                + varint(2)
                + "é".encode()
                + varint(2)
                + b"xy"
                + varint(1)
                + b"a"
                + varint(0)
            ),
            1,
            {},
            True,
        ),
        ("varint too long", b"\xff" * 12, 1, {}, False),
        ("varlong too long", b"\x0e\x00" + b"\xff" * 11 + b"\x00", 1, {}, False),
        ("length too small", raw_record(FIELDS_OK, length_adjust=-1), 1, {}, False),
        ("length too large", raw_record(FIELDS_OK, length_adjust=1), 1, {}, False),
        ("negative length", raw_record(FIELDS_OK, length_adjust=-100), 1, {}, False),
        ("count too large", raw_record(FIELDS_OK), 2, {}, False),
        ("count far too large", raw_record(FIELDS_OK), 2**31 - 1, {}, False),
        ("count too small", raw_record(FIELDS_OK) * 2, 1, {}, False),
        (
            "negative key length",
            raw_record(varint(0) + varint(0) + varint(-2) + varint(-1) + varint(0)),
            1,
            {},
            False,
        ),
        (
            "negative value length",
            raw_record(varint(0) + varint(0) + varint(-1) + varint(-7) + varint(0)),
            1,
            {},
            False,
        ),
        (
            "key past the end",
            raw_record(varint(0) + varint(0) + varint(50) + b"k" + varint(-1) + varint(0)),
            1,
            {},
            False,
        ),
        (
            "value past the end",
            raw_record(varint(0) + varint(0) + varint(-1) + varint(2**30) + varint(0)),
            1,
            {},
            False,
        ),
        (
            "negative header count",
            raw_record(varint(0) + varint(0) + varint(-1) + varint(-1) + varint(-1)),
            1,
            {},
            False,
        ),
        (
            "huge header count",
            raw_record(varint(0) + varint(0) + varint(-1) + varint(-1) + varint(2**31 - 1)),
            1,
            {},
            False,
        ),
        (
            "negative header key length",
            raw_record(varint(0) * 2 + varint(-1) * 2 + varint(1) + varint(-1)),
            1,
            {},
            False,
        ),
        (
            "negative header value length",
            raw_record(varint(0) * 2 + varint(-1) * 2 + varint(1) + varint(0) + varint(-4)),
            1,
            {},
            False,
        ),
        (
            "header key not UTF-8",
            raw_record(varint(0) * 2 + varint(-1) * 2 + varint(1) + varint(1) + b"\xff" + b"\x01"),
            1,
            {},
            False,
        ),
        (
            "header key a UTF-8 surrogate",
            raw_record(
                varint(0) * 2 + varint(-1) * 2 + varint(1) + varint(3) + b"\xed\xa0\x80" + b"\x01"
            ),
            1,
            {},
            False,
        ),
        ("cut inside the attributes", b"\x02\x00", 1, {}, False),
        ("cut after the length", b"\x0e", 1, {}, False),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_edge_cases(
    name: str, section: bytes, count: int, kwargs: dict[str, int], ok: bool
) -> None:
    for attributes in (0, 0x08, Compression.LZ4, Compression.ZSTD):
        data = raw_batch(section, count, attributes=attributes, **kwargs)
        kind, _ = same_decode(data)
        assert kind == ("ok" if ok else "error"), (name, attributes)
        # the same batch followed by another: the record section no longer ends the buffer
        same_decode(data + raw_batch(raw_record(FIELDS_OK), 1))


@needs_c
@pytest.mark.parametrize(
    ("section", "count", "match"),
    [
        (raw_record(FIELDS_OK) * 2, 1, "do not end where the batch does"),
        (raw_record(FIELDS_OK), 2, "data ends inside a record"),
        (raw_record(FIELDS_OK, length_adjust=1), 1, "does not match its length"),
        (b"\xff" * 12, 1, "varint longer than 5 bytes"),
        (b"\x0e\x00" + b"\xff" * 11 + b"\x00", 1, "varint longer than 10 bytes"),
    ],
)
def test_c_error_messages(section: bytes, count: int, match: str) -> None:
    data = raw_batch(section, count, base_offset=99)
    for c in (False, True):
        with codec(c), pytest.raises(CorruptRecordError, match=rf"offset 99: .*{match}"):
            for batch in iter_batches(data):
                batch.records()


@needs_c
def test_c_module_refuses_bad_arguments() -> None:
    from kafkastate.core.protocol import _speedups  # noqa: PLC0415 (only where built)

    create = TimestampType.CREATE_TIME
    with pytest.raises(TypeError):
        _speedups.parse_records(bytearray(10), 0, 0, 0, 0, 0, create, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bounds"):
        _speedups.parse_records(b"abc", 0, 4, 0, 0, 0, create, None)
    with pytest.raises(ValueError, match="bounds"):
        _speedups.parse_records(b"abc", 2, 1, 0, 0, 0, create, None)
    with pytest.raises(TypeError):
        _speedups.parse_records(b"abc", 0, 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _speedups.setup(int, ValueError)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.append_record((), 0, 0, None, None, ())  # type: ignore[arg-type]
    # a negative count reads nothing, as range() does in Python
    assert _speedups.parse_records(b"abc", 3, 3, -1, 0, 0, create, None) == []


# -- encoding: same bytes, same errors ---------------------------------------------------------


class Weird:
    """Neither bytes-like nor sized."""


surrogate_key = "\ud800"
bad_values = [
    "str",
    12,
    Weird(),
    bytearray(b"ba"),
    memoryview(b"mv"),
    memoryview(b"abcd")[::2],  # not contiguous
]
key_st = st.none() | st.binary(max_size=70) | st.sampled_from(bad_values)
header_value_st = st.none() | st.binary(max_size=70) | st.sampled_from(bad_values)
header_key_st = st.text(max_size=5) | st.sampled_from([surrogate_key, b"bytes", 3, None])
pair_st = st.tuples(header_key_st, header_value_st) | st.lists(header_key_st, max_size=3).map(tuple)


class AsIterator(list[Any]):
    """Headers to pass as an iterator (fresh for each codec's run)."""


headers_arg_st = (
    st.lists(pair_st, max_size=10)
    | st.lists(pair_st, max_size=3).map(tuple)
    | st.sampled_from([None, (), [], {"a": b"b"}, "ab", 5])
    | st.lists(st.tuples(st.just("k"), st.just(b"v")), max_size=3).map(AsIterator)
    | st.lists(st.lists(header_value_st, min_size=2, max_size=2), max_size=2)
)
timestamp_st = st.integers(TS - 10**6, TS + 10**6) | st.sampled_from(
    [1.5e12, 2**64, -(2**63) - TS, True]
)


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # every type, to compare them
        return ("error", type(exc))


@needs_c
@given(
    st.lists(
        st.tuples(timestamp_st, key_st, key_st, headers_arg_st),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([Compression.NONE, Compression.LZ4]),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_append_same_bytes_and_errors(
    appends: list[tuple[Any, ...]], compression: Compression
) -> None:
    def run() -> list[Any]:
        b = RecordBatchBuilder(compression=compression)
        steps: list[Any] = []
        for ts, key, value, headers in appends:
            if isinstance(headers, AsIterator):
                headers = iter(headers)
            steps.append(outcome(lambda: b.append(ts, key, value, headers)))  # noqa: B023
            steps.append((b.record_count, b.size_in_bytes()))
        steps.append(outcome(b.build))
        return steps

    py, c = both(run)
    assert py == c
    for kind, err in py[::2]:
        # the builder's own contract: only KafkaConfigurationError
        assert kind == "ok" or err is KafkaConfigurationError


@needs_c
def test_append_leaves_the_builder_unchanged_on_error() -> None:
    for c in (False, True):
        with codec(c):
            b = RecordBatchBuilder()
            b.append(TS, None, b"first", [("a", b"b")])
            before = (b.record_count, b.size_in_bytes(), b.build())
            for bad in (
                (TS, "k", b"v", ()),
                (1.5, None, b"v", ()),
                (TS, None, b"v", [("a", "str")]),
                (TS, None, b"v", [(surrogate_key, b"x")]),
                (TS, None, b"v", [("a", b"b", b"c")]),
                (TS, None, Weird(), ()),
            ):
                with pytest.raises(KafkaConfigurationError):
                    b.append(*bad)
                assert (b.record_count, b.size_in_bytes(), b.build()) == before


@needs_c
def test_encode_matches_the_spec_bytes() -> None:
    def build() -> bytes:
        b = RecordBatchBuilder()
        b.append(TS, b"key", b"value", [("a", b"b"), ("n", None)])
        b.append(TS + 1, None, None)
        b.append(TS - 200, bytearray(b"K" * 70), memoryview(b"V" * 200), ())
        return b.build()

    headers = varint(2) + varint(1) + b"a" + varint(1) + b"b" + varint(1) + b"n" + varint(-1)
    expected = (
        raw_record(varint(0) + varint(0) + varint(3) + b"key" + varint(5) + b"value" + headers)
        + raw_record(varint(1) + varint(1) + varint(-1) + varint(-1) + varint(0))
        + raw_record(
            varint(-200) + varint(2) + varint(70) + b"K" * 70 + varint(200) + b"V" * 200 + b"\0"
        )
    )
    py, c = both(build)
    assert py == c
    assert c[RECORD_BATCH_OVERHEAD:] == expected


# -- mutations: same outcome, never a crash ----------------------------------------------------


def seed_batches(rng: random.Random) -> list[bytes]:
    """Valid inputs to mutate: batches of every codec, control batches, two batches in a row."""
    seeds = []
    for compression in Compression:
        b = RecordBatchBuilder(compression=compression, base_offset=rng.randrange(1 << 40))
        delta = 0
        for i in range(rng.randint(1, 8)):
            key = None if rng.random() < 0.3 else rng.randbytes(rng.choice([0, 3, 70]))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 10, 200]))
            headers = [(f"h{j}é", rng.choice([None, b"x" * j])) for j in range(rng.randint(0, 3))]
            delta += rng.choice([1, 1, 100])  # offset gaps: two-byte offset deltas
            b.append_with_offset_delta(delta, TS + rng.randint(-99, 99) * i, key, value, headers)
        seeds.append(b.build())
    seeds.append(
        build_control_batch(
            ControlRecordType.COMMIT,
            producer_id=3,
            producer_epoch=1,
            coordinator_epoch=5,
            timestamp_ms=TS,
        )
    )
    seeds.append(seeds[0] + seeds[1])
    return seeds


def rewrap(batch: bytes, section: bytes, count_delta: int) -> bytes:
    """A mutated records section back in a batch with a valid CRC, so the parser sees it."""
    (attributes,) = struct.unpack_from(">H", batch, 21)
    (count,) = struct.unpack_from(">i", batch, 57)
    (base_offset,) = struct.unpack_from(">q", batch, 0)
    (base_ts, max_ts) = struct.unpack_from(">qq", batch, 27)
    return raw_batch(
        section,
        count + count_delta,
        base_offset=base_offset,
        base_ts=base_ts,
        max_ts=max_ts,
        attributes=attributes & 0x3F,
    )


def cases(rng: random.Random, n: int) -> Iterator[tuple[bytes, bool]]:
    """``n`` mutated inputs with their check_crcs flag."""
    seeds = seed_batches(rng)
    plain = [s for s in seeds if not struct.unpack_from(">H", s, 21)[0] & 7]
    sections = [s[RECORD_BATCH_OVERHEAD:] for s in plain if struct.unpack_from(">i", s, 57)[0]]
    for i in range(n):
        kind = i % 3
        if kind == 0:
            yield mutate(rng.choice(seeds), rng), False
        elif kind == 1:
            yield mutate(rng.choice(seeds), rng), True
        else:
            template = rng.choice(seeds)
            section = mutate(rng.choice(sections), rng)
            data = rewrap(template, section, rng.choice([0, 0, 0, -1, 1]))
            if rng.random() < 0.3:
                data += rng.choice(seeds)  # the section no longer ends the buffer
            yield data, True


def campaign(n: int, seed: int) -> tuple[int, int, list[str]]:
    """Run ``n`` cases; return (ok, errors, mismatches as hex inputs)."""
    ok = errors = 0
    mismatches = []
    for data, check in cases(random.Random(seed), n):
        py, c = both(lambda: decode(data, check_crcs=check))  # noqa: B023
        if py != c:
            mismatches.append(data.hex())
        elif py[0] == "ok":
            ok += 1
        else:
            errors += 1
    return ok, errors, mismatches


@needs_c
@pytest.mark.parametrize("seed", range(4))
def test_mutations_same_outcome(seed: int) -> None:
    ok, errors, mismatches = campaign(600, seed)
    assert not mismatches
    assert ok > 30 and errors > 100  # the mutations reach both outcomes


@needs_c
@given(st.binary(max_size=300), st.integers(-1, 60), st.sampled_from([0, 0x08, 1, 4]))
@settings(max_examples=300, deadline=None)
def test_arbitrary_record_sections(section: bytes, count: int, attributes: int) -> None:
    same_decode(raw_batch(section, count, attributes=attributes, base_offset=INT64_MAX - 10))


@needs_c
def test_crash_probe_in_a_subprocess() -> None:
    """A short campaign in a child process: a crash in C kills the child, not the test run."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.core.protocol.test_speedups",
            "--campaign",
            "3000",
            "--seed",
            "7",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "mismatches 0" in proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description="C vs Python record codec mutation campaign")
    parser.add_argument("--campaign", type=int, default=200_000, help="number of cases")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not records.SPEEDUPS_AVAILABLE:
        sys.exit("the compiled module kafkastate.core.protocol._speedups is not built")
    ok, errors, mismatches = campaign(args.campaign, args.seed)
    print(f"cases {args.campaign} decoded {ok} rejected {errors} mismatches {len(mismatches)}")
    for m in mismatches[:10]:
        print(m)
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()


# ------------------------------------------------------------------- consumer records


class _Consumer(tuple[Any, ...]):
    """A 13-field tuple subclass standing for kafkastate.structs.ConsumerRecord."""

    __slots__ = ()


# (key, value, headers) of each record of a batch
consumer_batches_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=40)),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=20,
)


@needs_c
@given(
    batches=consumer_batches_st,
    append_time=st.booleans(),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_consumer_tuples_same_in_c_and_python(
    batches: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    append_time: bool,
) -> None:
    builder = RecordBatchBuilder(
        base_offset=40,
        timestamp_type=TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME,
    )
    for key, value, headers in batches:
        builder.append(TS, key, value, headers)
    (batch,) = iter_batches(builder.build())
    recs = batch.records()

    def make() -> list[Any]:
        return records.consumer_tuples(_Consumer, recs, "topic", 3, 9)

    py, c = both(make)
    assert [type(x) for x in c] == [_Consumer] * len(recs)
    assert [tuple(x) for x in py] == [tuple(x) for x in c]
    assert all(type(x[5]) is int for x in c)  # the enum's value, not the enum
    first = c[0]
    assert first[:4] == ("topic", 3, 9, 40)
    key, value, headers = batches[0]
    assert first[10] == (-1 if key is None else len(key))
    assert first[11] == (-1 if value is None else len(value))
    size = sum(len(k) + (0 if v is None else len(v)) for k, v in headers) if headers else -1
    assert first[12] == size


@needs_c
def test_consumer_tuples_without_headers_are_not_tracked_by_the_gc() -> None:
    builder = RecordBatchBuilder(base_offset=0)
    builder.append(TS, b"k", b"v", [])
    builder.append(TS, None, b"v", [("h", b"x")])
    (batch,) = iter_batches(builder.build())
    with codec(True):
        plain, with_headers = records.consumer_tuples(_Consumer, batch.records(), "t", 0, 0)
    # Only atomic fields: no cycle can run through it (CPython untracks such tuples itself,
    # lazily); this spares the cyclic GC walking every record a consumer holds.
    assert not gc.is_tracked(plain)
    assert gc.is_tracked(with_headers)


@given(
    batches=consumer_batches_st,
    append_time=st.booleans(),
    epoch=st.integers(-1, 2**31 - 1),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_consumer_records_decode_straight_into_consumer_tuples(
    batches: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    append_time: bool,
    epoch: int,
) -> None:
    """``Batch.consumer_records`` (one object per record in C) gives what ``records()``
    then ``consumer_tuples`` give, in both codecs, with the batch's leader epoch."""
    builder = RecordBatchBuilder(
        base_offset=7,
        timestamp_type=TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME,
        partition_leader_epoch=epoch,
    )
    for key, value, headers in batches:
        builder.append(TS, key, value, headers)
    (batch,) = iter_batches(builder.build())

    def two_steps() -> list[Any]:
        return records.consumer_tuples(_Consumer, batch.records(), "topic", 3, epoch)

    py, c = both(lambda: batch.consumer_records(_Consumer, "topic", 3))
    reference, _ = both(two_steps)
    assert typed(py) == typed(c) == typed(reference)
    assert all(type(x) is _Consumer and type(x[5]) is int for x in c)
    assert [x[2] for x in c] == [epoch] * len(batches)


@needs_c
def test_consumer_records_without_headers_are_not_tracked_by_the_gc() -> None:
    builder = RecordBatchBuilder(base_offset=0)
    builder.append(TS, b"k", b"v", [])
    builder.append(TS, None, b"v", [("h", b"x")])
    (batch,) = iter_batches(builder.build())
    with codec(True):
        plain, with_headers = batch.consumer_records(_Consumer, "t", 0)
    assert not gc.is_tracked(plain)
    assert gc.is_tracked(with_headers)


@needs_c
def test_parse_records_refuses_a_consumer_class_that_is_not_a_tuple() -> None:
    parse = records._speedups.parse_records
    create = TimestampType.CREATE_TIME
    with pytest.raises(TypeError, match="tuple subclass"):
        parse(b"", 0, 0, 0, 0, 0, create, None, dict, "t", 0, 0)
    with pytest.raises(TypeError, match="8 or 12 arguments"):
        parse(b"", 0, 0, 0, 0, 0, create, None, _Consumer)  # type: ignore[call-overload]
    assert parse(b"", 0, 0, 0, 0, 0, create, None, _Consumer, "t", 0, 0) == []


@needs_c
def test_consumer_tuples_refuse_what_is_not_records() -> None:
    consumer_records = records._speedups.consumer_records
    with pytest.raises(TypeError, match="tuple subclass"):
        consumer_records(dict, [], "t", 0, 0)
    with pytest.raises(TypeError, match="list of records"):
        consumer_records(_Consumer, (), "t", 0, 0)
    with pytest.raises(TypeError, match="Record tuples"):
        consumer_records(_Consumer, [(1, 2)], "t", 0, 0)
    bad = Record(0, TS, TimestampType.CREATE_TIME, None, None, [("h", b"")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="headers must be a tuple"):
        consumer_records(_Consumer, [bad], "t", 0, 0)


@needs_c
def test_append_value_is_append_then_size_in_bytes() -> None:
    """The producer's hot path (``append_value``) builds what ``append`` + ``size_in_bytes``
    build, byte for byte, with either codec -- deltas of every width, a value of every
    varint length, and a timestamp before the batch's base."""
    values = [b"", b"v", b"x" * 63, b"y" * 64, b"z" * 300]
    stamps = [TS, TS + 1, TS - 5, TS + 2**31, TS]

    def built(hot: bool) -> tuple[bytes, list[int]]:
        builder = RecordBatchBuilder()
        sizes = []
        for ts, value in zip(stamps, values, strict=True):
            if hot:
                sizes.append(builder.append_value(ts, value))
            else:
                builder.append(ts, None, value)
                sizes.append(builder.size_in_bytes())
        return builder.build(), sizes

    for c in (False, True):
        with codec(c):
            assert built(True) == built(False)
    with codec(True), pytest.raises(KafkaConfigurationError):
        builder = RecordBatchBuilder()
        builder.append_value(TS, b"first")
        builder.append_value(1.5, b"float")  # type: ignore[arg-type]
    assert builder.record_count == 1  # the refused record left nothing behind


@needs_c
@given(st.lists(st.tuples(timestamp_st, key_st, key_st, headers_arg_st), min_size=1, max_size=8))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_append_run_is_append_in_a_loop(appends: list[tuple[Any, ...]]) -> None:
    """``append_run`` (the bulk appends' compiled loop) and ``append`` for what it leaves
    build the bytes of ``append`` called record by record, with either codec."""

    def builds(rec: tuple[Any, ...]) -> bool:
        b = RecordBatchBuilder()
        return outcome(lambda: b.append(*rec))[0] == "ok" and outcome(b.build)[0] == "ok"

    with codec(False):
        valid = [rec for rec in appends if builds(rec)]

    def one_by_one() -> bytes:
        b = RecordBatchBuilder()
        for rec in valid:
            b.append(*rec)
        return b.build()

    def in_runs() -> tuple[bytes, int, int]:
        b = RecordBatchBuilder()
        i = taken = 0
        while i < len(valid):
            stop = b.append_run(valid, i)
            taken += stop - i
            if stop < len(valid):
                b.append(*valid[stop])
            i = stop + 1
        return b.build(), b.record_count, taken

    with codec(False):
        kind, expected = outcome(one_by_one)
    if not valid or kind != "ok":  # (timestamp deltas beyond int64)
        return
    for c in (False, True):
        with codec(c):
            built, count, taken = in_runs()
            assert (built, count) == (expected, len(valid))
            assert taken == 0 or c  # the Python codec has no compiled loop


@needs_c
def test_append_run_takes_the_common_shapes_and_stops_at_the_others() -> None:
    rows: list[Any] = [
        (TS, None, b"a", ()),
        (TS + 1, b"k", b"b", [("h", b"x")]),
        (TS + 2, None, None, None),
        (TS, bytearray(b"k"), b"c", ()),  # not bytes: append() checks it
        (TS - 1, b"k", b"d", ()),
    ]
    with codec(True):
        b = RecordBatchBuilder()
        assert b.append_run(rows, 0) == 0  # the first record sets the base timestamp
        b.append(*rows[0])
        assert b.append_run(rows, 1) == 3
        b.append(*rows[3])
        assert b.append_run(rows, 4) == 5
        size = b.size_in_bytes()
        with pytest.raises(KafkaConfigurationError):
            b.append_run([(TS, None, b"v", [(b"not str", b"x")])], 0)
        assert (b.record_count, b.size_in_bytes()) == (5, size)  # unchanged
        (batch,) = list(iter_batches(b.build()))
        records = batch.records()  # type: ignore[union-attr]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, TS, None, b"a"),
        (1, TS + 1, b"k", b"b"),
        (2, TS + 2, None, None),
        (3, TS, b"k", b"c"),
        (4, TS - 1, b"k", b"d"),
    ]
