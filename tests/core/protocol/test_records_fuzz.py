"""Fuzzing the record decoders: malformed input may only raise CorruptRecordError or
UnsupportedCodecError, never struct.error, IndexError, ValueError, zlib.error, a codec
library's exception or MemoryError.

Seeded ``random.Random`` mutations (byte flips, interesting values, truncation, insertion,
deletion, duplication) of valid batches and legacy sets for every codec, with CRC checks on
and off; "structure-aware" mutations of the decompressed records section re-wrapped with a
valid CRC, so the record parser sees them even with ``check_crcs=True``; and Hypothesis over
raw bytes and chosen edits. Small in the default suite; ``nox -s fuzz`` scales it.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct
import zlib
from collections.abc import Sequence

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastate.core.protocol.compression import Compression, compress, decompress
from kafkastate.core.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
    build_legacy_message_set,
    iter_batches,
)
from kafkastate.errors import CorruptRecordError, UnsupportedCodecError
from tests._support.fuzzing import derive, fuzz_count, run_mutations, time_bound
from tests._support.mutation import mutate

# Every test runs twice: on the pure-Python record codec, then on the C accelerator.
pytestmark = pytest.mark.usefixtures("implementation")

ALLOWED = (CorruptRecordError, UnsupportedCodecError)
TS = 1_700_000_000_000
# KAFKASTATE_FUZZ_SCALE=N multiplies the work for a long local run; KAFKASTATE_FUZZ_EXAMPLES
# (nox -s fuzz) sets the inputs per decoder, split over the seeds of each test.
SCALE = int(os.environ.get("KAFKASTATE_FUZZ_SCALE", "1"))
EXAMPLES = os.environ.get("KAFKASTATE_FUZZ_EXAMPLES")
MUTATIONS = 40 * SCALE if EXAMPLES is None else max(150, int(EXAMPLES) // 16)
FUZZ = settings(
    max_examples=25 * SCALE if EXAMPLES is None else max(150, int(EXAMPLES) // 100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def consume(data: bytes, *, check_crcs: bool) -> None:
    """Decode everything a consumer would touch; let only the allowed errors through."""
    with time_bound():
        _consume(data, check_crcs=check_crcs)


def _consume(data: bytes, *, check_crcs: bool) -> None:
    with contextlib.suppress(*ALLOWED):
        _decode_all(data, check_crcs=check_crcs)


def _decode_all(data: bytes, *, check_crcs: bool) -> None:
    for batch in iter_batches(data, check_crcs=check_crcs, max_decompressed_size=1 << 20):
        repr(batch)
        _ = (batch.base_offset, batch.last_offset, batch.next_offset, batch.compression)
        _ = (batch.timestamp_type, batch.is_transactional, batch.is_control)
        _ = (batch.producer_id, batch.delete_horizon_ms, batch.record_count)
        for record in batch:
            _ = (record.offset, record.timestamp, record.key, record.value, record.headers)
        if batch.is_control:
            _ = (batch.control_type, batch.marker)


def v2_batch(compression: Compression, seed: int) -> bytes:
    rng = random.Random(seed)
    b = RecordBatchBuilder(
        compression=compression,
        producer_id=rng.randrange(1000),
        producer_epoch=1,
        base_sequence=0,
        base_offset=rng.randrange(1 << 40),
    )
    for i in range(rng.randint(1, 12)):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 200))
        headers = [(f"h{j}", rng.choice([None, b"x" * j])) for j in range(rng.randint(0, 2))]
        b.append(TS + rng.randint(-100, 10_000) * i, key, value, headers)
    return b.build()


def legacy_set(magic: int, compression: Compression, seed: int) -> bytes:
    rng = random.Random(seed)
    messages = [
        (TS + i, rng.choice([None, b"key"]), rng.randbytes(rng.randint(0, 60)))
        for i in range(rng.randint(1, 6))
    ]
    return build_legacy_message_set(
        messages, magic=magic, base_offset=rng.randrange(1 << 30), compression=compression
    )


def corpus() -> list[tuple[str, bytes]]:
    seeds: list[tuple[str, bytes]] = []
    for codec in Compression:
        seeds.append((f"v2-{codec.name}", v2_batch(codec, int(codec))))
    for marker in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        seeds.append(
            (
                f"control-{marker.name}",
                build_control_batch(
                    marker, producer_id=3, producer_epoch=1, coordinator_epoch=5, timestamp_ms=TS
                ),
            )
        )
    for magic in (0, 1):
        for codec in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
            seeds.append(
                (f"legacy{magic}-{codec.name}", legacy_set(magic, codec, magic * 10 + codec))
            )
    seeds.append(
        ("mixed", seeds[0][1] + legacy_set(1, Compression.GZIP, 99) + v2_batch(Compression.LZ4, 7))
    )
    return seeds


CORPUS = corpus()


@pytest.mark.parametrize(("name", "data"), CORPUS, ids=[name for name, _ in CORPUS])
def test_seed_corpus_is_valid(name: str, data: bytes) -> None:
    batches = list(iter_batches(data))
    assert batches and all(batch.records() is not None for batch in batches)


def consume_both(data: bytes) -> None:
    """One input as a consumer with ``check_crcs`` off, then on; the error of the
    second decode that failed is the input's outcome."""
    refused: Exception | None = None
    for check_crcs in (False, True):
        try:
            _decode_all(data, check_crcs=check_crcs)
        except ALLOWED as exc:
            refused = exc
    if refused is not None:
        raise refused


def derive_batch(data: bytes, rng: random.Random, seeds: Sequence[bytes]) -> bytes:
    """Byte-level inputs (:func:`derive`) half the time; otherwise the records section
    (decompressed) is mutated and re-wrapped with a valid CRC, so the record parser,
    not the CRC check, meets the damage."""
    if rng.random() < 0.5 or len(data) < 61:
        return derive(data, rng, seeds)
    magic = data[16]
    if magic == 2:
        records = decompress(data[22] & 0x07, data[61:])
        return rewrap_v2(data, mutate(records, rng), rng.choice([0, 0, 0, -1, 1]))
    codec = data[17] & 0x07
    if codec == Compression.NONE:
        return derive(data, rng, seeds)
    return rewrap_legacy(magic, Compression(codec), mutate(legacy_inner(data), rng))


def legacy_inner(wrapper: bytes) -> bytes:
    """The decompressed message set inside the first (compressed) legacy message."""
    pos = 18 + 8 * (wrapper[16] == 1)
    (key_size,) = struct.unpack_from(">i", wrapper, pos)
    pos += 4 + max(key_size, 0)
    (value_size,) = struct.unpack_from(">i", wrapper, pos)
    value = wrapper[pos + 4 : pos + 4 + value_size]
    return decompress(wrapper[17] & 0x07, value, lz4_broken_header_checksum=wrapper[16] == 0)


@pytest.mark.fuzz_loop
@pytest.mark.parametrize(("name", "data"), CORPUS, ids=[name for name, _ in CORPUS])
def test_random_mutations(name: str, data: bytes, implementation: str) -> None:
    """The volume loop of one format and codec: KAFKASTATE_FUZZ_EXAMPLES inputs in
    ``nox -s fuzz``, each decoded with CRC checks off and on."""
    run_mutations(
        consume_both,
        [data],
        count=fuzz_count(MUTATIONS),
        seed=f"records-{implementation}-{name}",
        derive_input=derive_batch,
    )


@pytest.mark.parametrize(("name", "data"), CORPUS, ids=[name for name, _ in CORPUS])
def test_every_truncation(name: str, data: bytes) -> None:
    for cut in range(len(data)):
        consume(data[:cut], check_crcs=True)
        consume(data[cut:], check_crcs=False)


def rewrap_v2(batch: bytes, records: bytes, count_delta: int = 0) -> bytes:
    """Put a (mutated) records section back into a v2 batch with a valid CRC."""
    attributes = struct.unpack_from(">H", batch, 21)[0]
    codec = attributes & 0x07
    body = compress(codec, records)
    tail = bytearray(batch[21:61])
    count = struct.unpack_from(">i", tail, 36)[0] + count_delta
    struct.pack_into(">i", tail, 36, count)
    crc = crc32c.crc32c(bytes(tail) + body)
    head = bytearray(batch[:21])
    struct.pack_into(">iibI", head, 8, 49 + len(body), -1, 2, crc)
    return bytes(head) + bytes(tail) + body


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_structure_aware_v2_mutations(codec: Compression) -> None:
    rng = random.Random(f"structure-{codec.name}")
    base = RecordBatchBuilder(compression=Compression.NONE)
    for i in range(6):
        base.append(TS + i, b"k" if i % 2 else None, b"v" * (i * 30), [("a", b"b")] * (i % 3))
    plain = base.build()
    records = plain[61:]
    template = v2_batch(codec, 1)  # gives the codec bits; its records are replaced
    for _ in range(MUTATIONS * 2):
        mutated = rewrap_v2(template, mutate(records, rng), rng.choice([0, 0, 0, -1, 1]))
        consume(mutated, check_crcs=True)


def rewrap_legacy(magic: int, codec: Compression, inner: bytes) -> bytes:
    body = bytearray([magic, codec])
    if magic == 1:
        body += struct.pack(">q", TS)
    wrapped = compress(codec, inner)
    body += struct.pack(">i", -1) + struct.pack(">i", len(wrapped)) + wrapped
    return struct.pack(">qiI", 50, 4 + len(body), zlib.crc32(bytes(body))) + bytes(body)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4], ids=lambda c: c.name
)
def test_structure_aware_legacy_mutations(magic: int, codec: Compression) -> None:
    rng = random.Random(f"legacy-{magic}-{codec.name}")
    inner = legacy_set(magic, Compression.NONE, 5)
    for _ in range(MUTATIONS):
        consume(rewrap_legacy(magic, codec, mutate(inner, rng)), check_crcs=True)
        consume(rewrap_legacy(magic, codec, mutate(inner, rng)), check_crcs=False)


@given(st.binary(max_size=400))
@FUZZ
def test_arbitrary_bytes(data: bytes) -> None:
    consume(data, check_crcs=False)
    consume(data, check_crcs=True)


@given(st.binary(min_size=49, max_size=400), st.integers(0, 7), st.integers(-2, 100))
@FUZZ
def test_arbitrary_records_section_with_valid_crc(records: bytes, codec: int, count: int) -> None:
    tail = struct.pack(">Hiqqqhii", codec, max(count - 1, 0), TS, TS, -1, -1, -1, count)
    head = struct.pack(">qiibI", 0, 49 + len(records), -1, 2, crc32c.crc32c(tail + records))
    consume(head + tail + records, check_crcs=True)


@given(st.data())
@FUZZ
def test_hypothesis_chosen_edits(data: st.DataObject) -> None:
    _, seed = data.draw(st.sampled_from(CORPUS))
    buf = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    consume(bytes(buf), check_crcs=False)


# ------------------------------------------------------------------ transaction markers


def control_batch(key: bytes | None, value: bytes | None, codec: Compression) -> bytes:
    """A transactional control batch whose one record has the given key and value."""
    b = RecordBatchBuilder(
        compression=codec,
        producer_id=3,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
        base_offset=40,
    )
    b.append(TS, key, value, [])
    return b.build()


MARKER_KEYS = [struct.pack(">hh", 0, 0), struct.pack(">hh", 0, 1), struct.pack(">hh", 0, 7)]
MARKER_VALUE = struct.pack(">hi", 0, 5)


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_mutated_control_records(codec: Compression) -> None:
    """Transaction markers (KIP-98) whose key and value are mutated before the batch is
    built, so the CRC is valid and the marker parser sees the damage."""
    rng = random.Random(f"control-{codec.name}")
    for i in range(MUTATIONS):
        key = MARKER_KEYS[i % len(MARKER_KEYS)]
        key = None if rng.random() < 0.05 else mutate(key, rng)
        value = None if rng.random() < 0.05 else mutate(MARKER_VALUE, rng)
        consume(control_batch(key, value, codec), check_crcs=True)


def test_mutated_control_batch_records_section() -> None:
    rng = random.Random("control-section")
    marker = build_control_batch(
        ControlRecordType.ABORT,
        producer_id=3,
        producer_epoch=1,
        coordinator_epoch=5,
        timestamp_ms=TS,
    )
    for _ in range(MUTATIONS):
        consume(
            rewrap_v2(marker, mutate(marker[61:], rng), rng.choice([0, 0, 1, -1])), check_crcs=True
        )


@given(st.binary(max_size=12), st.binary(max_size=12), st.sampled_from(list(Compression)))
@FUZZ
def test_arbitrary_control_record_key_and_value(key: bytes, value: bytes, codec: int) -> None:
    consume(control_batch(key, value, Compression(codec)), check_crcs=True)
