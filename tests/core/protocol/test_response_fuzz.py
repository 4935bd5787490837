"""Fuzzing the response path: framing, response headers, and the body of every response
type the client parses (every API key and version of CLIENT_VERSIONS).

Inputs go through the decoders in the order BrokerConnection uses them: FrameDecoder,
decode_response_header (v0/v1 by the response's flexibility, v0 for ApiVersions) and
decode_body (the _guard length walk, then kio's native reader). Seeds are valid encodings
of random valid entities; inputs are their mutations (tests/_support/fuzzing.py), framed
with a correct size prefix so the body decoders see them. The only allowed outcomes are a
result or a KafkaError. ``nox -s fuzz`` raises the counts (docs/reliability.md).
"""

from __future__ import annotations

import random
import signal
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastate.core.connection import BrokerConnection, ConnectionConfig
from kafkastate.core.protocol.framing import (
    FrameDecoder,
    decode_body,
    decode_response_header,
    encode_body,
    response_header_version,
)
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, api_name, response_type
from kafkastate.errors import RemoteProtocolError
from tests._support import campaign, fuzzing
from tests._support.fuzzing import (
    FUZZ,
    assert_well_typed,
    build_entity,
    check_one,
    fuzz_count,
    run_mutations,
    time_bound,
)
from tests._support.peer import api_versions_response, parse_request, response_frame, split_frames

API_KEYS = sorted(CLIENT_VERSIONS)
SEEDS_PER_VERSION = 3
CORRELATION_ID = 7


def header(api_key: int, flexible: bool) -> bytes:
    head = struct.pack(">i", CORRELATION_ID)
    return head + b"\x00" if response_header_version(api_key, flexible) else head


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def decode_response(api_key: int, version: int, wire: bytes) -> Any:
    """What BrokerConnection does with the bytes of one response (connection.py
    ``_handle_frame``): frame, header, body."""
    cls = response_type(api_key, version)
    decoder = FrameDecoder()
    decoder.feed(wire)
    payload = decoder.next_frame()
    if payload is None:
        return None
    view = memoryview(payload)
    _cid, offset = decode_response_header(view, response_header_version(api_key, cls.__flexible__))
    entity = decode_body(cls, view, offset)
    assert_well_typed(entity)
    return entity


def payloads(api_key: int, version: int) -> list[bytes]:
    """Valid header + body encodings of random valid entities."""
    cls = response_type(api_key, version)
    out = []
    for seed in range(SEEDS_PER_VERSION):
        entity = build_entity(cls, random.Random(f"{api_key}-{version}-{seed}"))
        out.append(header(api_key, cls.__flexible__) + encode_body(entity))
    return out


def versions(api_key: int) -> range:
    lo, hi = CLIENT_VERSIONS[api_key]
    return range(lo, hi + 1)


@pytest.mark.parametrize("api_key", API_KEYS, ids=api_name)
def test_seeds_decode_to_the_encoded_entity(api_key: int) -> None:
    for version in versions(api_key):
        cls = response_type(api_key, version)
        entity = build_entity(cls, random.Random(version))
        wire = frame(header(api_key, cls.__flexible__) + encode_body(entity))
        assert decode_response(api_key, version, wire) == entity


@pytest.mark.fuzz_loop
@pytest.mark.parametrize("api_key", API_KEYS, ids=api_name)
def test_mutated_responses(api_key: int) -> None:
    """Every version of this API: mutations of valid encodings, correctly framed."""
    for version in versions(api_key):
        seeds = payloads(api_key, version)
        # The default suite splits a small budget over the versions; the long run gives
        # every API key KAFKASTATE_FUZZ_EXAMPLES inputs.
        count = campaign.share(fuzz_count(default=60), len(versions(api_key)))
        run_mutations(
            lambda data, v=version: decode_response(api_key, v, frame(data)),
            seeds,
            count=count,
            seed=f"response-{api_name(api_key)}-v{version}",
        )


@pytest.mark.parametrize("api_key", API_KEYS, ids=api_name)
def test_every_truncation_of_a_response(api_key: int) -> None:
    version = CLIENT_VERSIONS[api_key][1]
    (data, *_) = payloads(api_key, version)
    for cut in range(len(data)):
        check_one(lambda d: decode_response(api_key, version, frame(d)), data[:cut])


@given(st.sampled_from(API_KEYS), st.data(), st.binary(max_size=300))
@FUZZ
def test_arbitrary_bodies(api_key: int, data: st.DataObject, body: bytes) -> None:
    version = data.draw(st.sampled_from(versions(api_key)))
    flexible = response_type(api_key, version).__flexible__
    check_one(
        lambda d: decode_response(api_key, version, frame(d)), header(api_key, flexible) + body
    )


@given(st.sampled_from(API_KEYS), st.data())
@FUZZ
def test_hypothesis_chosen_edits(api_key: int, data: st.DataObject) -> None:
    """Hypothesis picks the version, the seed and the edits (byte writes, a truncation)."""
    version = data.draw(st.sampled_from(versions(api_key)))
    seeds = payloads(api_key, version)
    buf = bytearray(data.draw(st.sampled_from(seeds)))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    check_one(lambda d: decode_response(api_key, version, frame(d)), bytes(buf))


# ------------------------------------------------------------------ headers and framing


@pytest.mark.fuzz_loop
@pytest.mark.parametrize("version", [0, 1])
def test_mutated_response_headers(version: int) -> None:
    seeds = [
        struct.pack(">i", 5),
        struct.pack(">i", -1) + b"\x00",
        struct.pack(">i", 9) + b"\x02\x00\x01\xff\x01\x03abc",
    ]

    def decode(data: bytes) -> tuple[int, int]:
        correlation_id, offset = decode_response_header(memoryview(data), version)
        assert 4 <= offset <= len(data)
        return correlation_id, offset

    run_mutations(decode, seeds, count=fuzz_count(), seed=f"header-v{version}")


def split_feed(stream: bytes, rng: random.Random, max_frame_size: int) -> list[bytes]:
    decoder = FrameDecoder(max_frame_size)
    frames = []
    pos = 0
    while pos < len(stream):
        step = rng.randint(1, 40)
        decoder.feed(stream[pos : pos + step])
        pos += step
        while (got := decoder.next_frame()) is not None:
            frames.append(got)
    assert decoder.buffered <= len(stream)
    return frames


@pytest.mark.fuzz_loop
def test_frame_decoder_split_points_and_mutations() -> None:
    """Valid streams give the same frames at any split point; mutated streams (size
    prefixes included) give frames or a RemoteProtocolError, never more than was fed."""
    rng = random.Random("framing")
    bodies = [b"", b"\x00" * 3, bytes(range(200)), b"x" * 1000]
    stream = b"".join(frame(b) for b in bodies)
    for _ in range(50):
        assert split_feed(stream, rng, 1 << 20) == bodies
    run_mutations(
        lambda data: split_feed(data, random.Random(len(data)), 4096),
        [stream, frame(b"abc") * 3],
        count=fuzz_count(),
        seed="frame-decoder",
    )


def test_frame_decoder_rejects_huge_and_negative_sizes_before_buffering() -> None:
    for size in (-1, -(2**31), 2**31 - 1, 100 * 1024 * 1024 + 1):
        decoder = FrameDecoder()
        decoder.feed(struct.pack(">i", size))
        with pytest.raises(RemoteProtocolError, match="invalid frame size"):
            decoder.next_frame()


# ------------------------------------------------------------------ through BrokerConnection


def handshaking() -> tuple[BrokerConnection, int, int]:
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0.0)
    (req,) = [parse_request(f) for f in split_frames(conn.data_to_send())]
    return conn, req.correlation_id, req.version


@pytest.mark.fuzz_loop
def test_connection_handshake_with_mutated_api_versions() -> None:
    """The connection's own path for the first response (``_on_api_versions``: error code
    peeked, KIP-511 v0 fallback, version table built): only KafkaErrors escape."""
    _conn, cid, version = handshaking()
    valid = response_frame(cid, api_versions_response(version))[4:]

    def feed(payload: bytes) -> None:
        conn, _cid, _version = handshaking()
        conn.receive_data(frame(payload), now=1.0)
        while conn.next_event() is not None:
            pass

    feed(valid)
    run_mutations(
        feed,
        [valid],
        count=fuzz_count(fuzzing.DEFAULT_EXAMPLES // 4),
        seed="connection-api-versions",
    )


# ------------------------------------------------------------------ crashers found

# Each one decoded to an entity with None in a field the schema does not let be null (a
# -1 / compact 0 length): the caller's ``for k in response.api_keys`` then raised
# TypeError out of receive_data. Found by test_mutated_responses once it checked the
# decoded entities (assert_well_typed); the length guard now rejects them by field name.
NULL_ARRAY_CRASHERS = [
    (ApiKey.PRODUCE, range(3, 9), b"\x00\x00\x00\x07\xff\xff\xff\xffz\xaa6B", "responses"),
    (
        ApiKey.SASL_HANDSHAKE,
        range(2),
        b"\x00\x00\x00\x07\x00:\xff\xff\xff\xff\x00\x02_-\x00\x08_cacca8.cca.cca8.",
        "mechanisms",
    ),
    (
        ApiKey.API_VERSIONS,
        range(3, 5),
        b"\x00\x00\x00\x07\x00\x10\x00\x00\x00\x00\x01\x80\x00\x00\x00\x00\x00\x01\x00\x01\x00d"
        b"\x8b\xde\x13\x04\x00,\x04\x11-0\xc3\xa9a0a\xc3\xa9\xc3\xa9\xc3\xa9.\xfb\xa4\xac\xde\n#"
        b"\x87\xf7\xc6a\xf5\xc2|\xf5j_.\x00\x01\x80\x00\x00\x07ca\xad",
        "api_keys",
    ),
    (ApiKey.LIST_OFFSETS, range(6, 12), b"\x00\x00\x00\x07\x00j9\x01\x00\x00\x00", "topics"),
]


@pytest.mark.parametrize(
    ("api_key", "versions_", "data", "field"),
    NULL_ARRAY_CRASHERS,
    ids=[api_name(key) for key, *_ in NULL_ARRAY_CRASHERS],
)
def test_regression_null_array_in_non_nullable_field(
    api_key: int, versions_: range, data: bytes, field: str
) -> None:
    for version in versions_:
        with pytest.raises(RemoteProtocolError, match=f"array {field} is null but not nullable"):
            decode_response(api_key, version, frame(data))


def test_regression_api_versions_with_null_api_keys_closes_with_a_typed_error() -> None:
    """The ApiVersions crasher above with error code 0, through the connection: it used
    to raise TypeError from receive_data while building the version table."""
    conn, cid, version = handshaking()
    assert version >= 3
    payload = cid.to_bytes(4, "big") + b"\x00\x00" + NULL_ARRAY_CRASHERS[2][2][6:]
    with pytest.raises(RemoteProtocolError, match="api_keys"):
        conn.receive_data(frame(payload), now=1.0)


# ------------------------------------------------------------------ the harness itself


def test_harness_fails_on_a_hang_a_foreign_exception_and_keeps_the_outer_timer() -> None:
    def hang(data: bytes) -> None:
        while True:
            pass

    def foreign(data: bytes) -> None:
        raise IndexError(data)

    with pytest.raises(AssertionError, match="InputTimeout"), time_bound(0.05):
        check_one(hang, b"")
    with pytest.raises(AssertionError, match=r"IndexError on input b'\\x01'"):
        check_one(foreign, b"\x01")
    previous = signal.signal(signal.SIGPROF, lambda *_: None)
    try:
        signal.setitimer(signal.ITIMER_PROF, 5.0)
        with time_bound(1):
            pass
        assert 0 < signal.getitimer(signal.ITIMER_PROF)[0] <= 5.1  # the clock ticks
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_harness_fails_on_a_memory_blow_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """An input that allocates past the headroom fails the run with its bytes."""
    monkeypatch.setattr(fuzzing, "MEMORY_HEADROOM", 64 * 1024 * 1024)

    def blow_up(data: bytes) -> None:
        b"x" * (256 * 1024 * 1024)

    with pytest.raises(AssertionError, match="MemoryError on input"):
        fuzzing.run_mutations(blow_up, [b"seed"], count=1, seed="blow-up")
    b"x" * (256 * 1024 * 1024)  # the cap is gone after the run


def test_regression_tagged_field_size_disagrees_with_its_value() -> None:
    """Found by ``nox -s fuzz`` (100,000 inputs on ApiVersions): tag 2 of an ApiVersions v3
    body declared 12 bytes but its value (an empty array) took 1. kio ignores the size of
    a known tag, so it parsed the 11 bytes the length guard had skipped as more tags and
    returned ``supported_features=None``; the guard now refuses the mismatch."""
    data = (
        b"\x00\x00\x00\x07\x00k\x03\x80\x00\x00\x01\x80\x00\x00\x00\x00\x00\x01\x00\x01\x00d"
        b"\x8b\xde\x13\x04\x00,\x04\x11-0\xc3\xa9a0a\xc3\xa9\xc3\xa9\xc3\xa9._.\x00\x01\x80\x00"
        b"\x00\x07ca-b0_\x00\x00\xff\xff\x00\x04_0-\x80\x00\x80\x00\x00\x01\x08\x00\x00\x00\x00"
        b"\x00\x00\x00\x01\x02\x0c\x01\x00\x00\x00\xa9cb\x00\x00\xff\xff\x00\x03\x01\x01"
    )
    for version in (3, 4):
        with pytest.raises(RemoteProtocolError, match="tagged field 2 does not fill its 12"):
            decode_response(ApiKey.API_VERSIONS, version, frame(data))
