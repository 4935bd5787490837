"""Framing: headers byte-exact, cross-checked with kio's header entities; fuzzed decoding."""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional
from kio.static.primitive import i16, i32

from kafkastate.core.protocol.framing import (
    EncodedRequest,
    FrameDecoder,
    decode_body,
    decode_response_header,
    encode_body,
    encode_request,
    lenient_timestamps,
    produce_request,
    produce_request_body,
    request_header_bytes,
    response_header_version,
)
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type, response_type
from kafkastate.errors import KafkaConfigurationError, RemoteProtocolError
from tests._support.peer import api_versions_response, parse_request, response_frame

client_ids = st.none() | st.text(max_size=40)


@given(
    st.integers(0, 32767),
    st.integers(0, 32767),
    st.integers(-(2**31), 2**31 - 1),
    client_ids,
    st.booleans(),
)
def test_request_header_matches_kio(
    api_key: int, version: int, cid: int, client_id: str | None, flexible: bool
) -> None:
    ours = request_header_bytes(api_key, version, cid, client_id, flexible=flexible)
    cls = RequestHeaderV2 if flexible else RequestHeaderV1
    header = cls(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(cid),
        client_id=client_id,
    )
    buf = io.BytesIO()
    entity_writer(cls)(buf, header)
    assert ours == buf.getvalue()
    decoded, size = entity_reader(cls)(ours, 0)
    assert decoded == header and size == len(ours)


def test_request_header_v1_bytes() -> None:
    assert request_header_bytes(3, 12, 7, "ab", flexible=False) == (
        b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x02ab"
    )
    assert request_header_bytes(3, 12, 7, None, flexible=True) == (
        b"\x00\x03\x00\x0c\x00\x00\x00\x07\xff\xff\x00"
    )


def test_encode_request_frame_parses_back() -> None:
    req = request_type(ApiKey.API_VERSIONS, 3)(
        client_software_name="kafkastate", client_software_version="1"
    )
    frame = encode_request(req, correlation_id=42, client_id="c")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    got = parse_request(frame[4:])
    assert (got.api_key, got.version, got.correlation_id, got.client_id) == (18, 3, 42, "c")
    assert got.body == req


def test_api_versions_response_header_is_always_v0() -> None:
    assert response_header_version(ApiKey.API_VERSIONS, True) == 0
    assert response_header_version(ApiKey.METADATA, True) == 1
    assert response_header_version(ApiKey.METADATA, False) == 0


@given(st.integers(-(2**31), 2**31 - 1), st.lists(st.binary(max_size=20), max_size=4))
def test_response_header_v1_skips_tagged_fields(cid: int, tags: list[bytes]) -> None:
    # Build a v1 header with unknown tagged fields by hand, then a body marker.
    def uvarint(n: int) -> bytes:
        out = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                out.append(b | 0x80)
            else:
                out.append(b)
                return bytes(out)

    tagged = uvarint(len(tags)) + b"".join(
        uvarint(i) + uvarint(len(t)) + t for i, t in enumerate(tags)
    )
    frame = memoryview(struct.pack(">i", cid) + tagged + b"BODY")
    got_cid, offset = decode_response_header(frame, 1)
    assert got_cid == cid and bytes(frame[offset:]) == b"BODY"
    if not tags:
        header, size = entity_reader(ResponseHeaderV1)(bytes(frame), 0)
        assert header.correlation_id == cid and size == offset


@settings(max_examples=100)
@given(st.lists(st.binary(max_size=50), max_size=8), st.data())
def test_frame_decoder_any_split(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, max(len(stream), 1)), max_size=10)))
    dec = FrameDecoder()
    out = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        dec.feed(stream[prev:cut] if cut >= prev else b"")
        prev = max(prev, cut)
        while (f := dec.next_frame()) is not None:
            out.append(f)
    assert out == payloads
    assert dec.buffered == 0


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=40), max_size=6), st.data())
def test_frame_decoder_reads_held_whole_or_fed_again(
    payloads: list[bytes], data: st.DataObject
) -> None:
    """A read kept as given (bytes fed to an empty decoder) and then fed more before it is
    drained, or drained part-way (1.5 frames), or fed as bytearray/memoryview: the frames
    come out in order and ``buffered`` counts exactly what was fed and not yet taken."""
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec = FrameDecoder()
    out: list[bytes] = []
    prev = taken = 0
    for cut in [*cuts, len(stream)]:
        chunk = stream[prev:cut]
        kind = data.draw(st.sampled_from([bytes, bytearray, memoryview]))
        dec.feed(kind(chunk))
        prev = cut
        for _ in range(data.draw(st.integers(0, 2))):  # drain none, one or two frames
            frame = dec.next_frame()
            if frame is None:
                break
            out.append(frame)
            taken += 4 + len(frame)
        assert dec.buffered == prev - taken
    while (f := dec.next_frame()) is not None:
        out.append(f)
    assert out == payloads
    assert dec.buffered == 0


@pytest.mark.parametrize("size", [-1, -(2**31), 2**31 - 1])
def test_frame_decoder_rejects_bad_sizes(size: int) -> None:
    dec = FrameDecoder(max_frame_size=1024)
    dec.feed(struct.pack(">i", size))
    with pytest.raises(RemoteProtocolError, match="frame size"):
        dec.next_frame()


def _rich_metadata(version: int) -> Any:
    cls = response_type(ApiKey.METADATA, version)
    broker = nested_type(cls, "MetadataResponseBroker")
    topic = nested_type(cls, "MetadataResponseTopic")
    partition = nested_type(cls, "MetadataResponsePartition")
    parts = tuple(
        build(
            partition,
            error_code=ErrorCode.none,
            partition_index=i32(p),
            leader_id=BrokerId(1),
            leader_epoch=i32(3),
            replica_nodes=(BrokerId(1), BrokerId(2)),
            isr_nodes=(BrokerId(1),),
            offline_replicas=(),
        )
        for p in range(4)
    )
    return build(
        cls,
        throttle_time=datetime.timedelta(0),
        brokers=tuple(
            build(broker, node_id=BrokerId(n), host="127.0.0.1", port=i32(9090 + n), rack="r")
            for n in (1, 2)
        ),
        cluster_id="cluster",
        controller_id=BrokerId(1),
        topics=tuple(
            build(
                topic,
                error_code=ErrorCode.none,
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                is_internal=False,
                partitions=parts,
                topic_authorized_operations=i32(-2147483648),
            )
            for t in range(3)
        ),
    )


def test_rich_metadata_round_trips() -> None:
    for version in (1, 12):
        frame = memoryview(response_frame(5, _rich_metadata(version))[4:])
        _cid, offset = decode_response_header(frame, response_header_version(3, version >= 9))
        body = decode_body(response_type(ApiKey.METADATA, version), frame, offset)
        assert body == _rich_metadata(version)


def test_fuzz_response_decoding_only_raises_remote_protocol_error() -> None:
    """Mutated and truncated valid frames: only RemoteProtocolError may escape."""
    rng = random.Random(1234)
    valid = [
        (ApiKey.API_VERSIONS, 3, response_frame(5, api_versions_response(3))[4:]),
        (ApiKey.API_VERSIONS, 0, response_frame(5, api_versions_response(0))[4:]),
        (ApiKey.METADATA, 12, response_frame(5, _rich_metadata(12))[4:]),
        (ApiKey.METADATA, 1, response_frame(5, _rich_metadata(1))[4:]),
    ]
    for _ in range(4000):
        api_key, version, frame = rng.choice(valid)
        base = bytearray(frame)
        op = rng.randrange(3)
        if op == 0:
            base = base[: rng.randrange(len(base))]
        elif op == 1:
            for _ in range(rng.randint(1, 4)):
                base[rng.randrange(len(base))] = rng.randrange(256)
        else:
            base[rng.randrange(len(base)) :] = rng.randbytes(rng.randrange(30))
        view = memoryview(bytes(base))
        header_version = response_header_version(api_key, version >= 9)
        try:
            _cid, offset = decode_response_header(view, header_version)
            decode_body(response_type(api_key, version), view, offset)
        except RemoteProtocolError:
            pass


@settings(max_examples=300)
@given(st.binary(max_size=64), st.integers(0, 1))
def test_fuzz_random_bytes(blob: bytes, header_version: int) -> None:
    view = memoryview(blob)
    try:
        _cid, offset = decode_response_header(view, header_version)
        decode_body(response_type(ApiKey.METADATA, 12), view, offset)
    except RemoteProtocolError:
        pass


def test_absurd_array_length_is_an_error_not_an_abort() -> None:
    # Found by the fuzzer: kio's native reader tried to allocate ~31 GB for this array
    # length and the process aborted. The length guard must refuse it first.
    blob = b"3 w\xf6\xec\xcc\xa4\xe6\x0e\xe0(\xa7\t\xcej\xa7\xae-\xf3\xde\xc1\xa6u\xca\xb7"
    with pytest.raises(RemoteProtocolError, match="MetadataResponse"):
        decode_body(response_type(ApiKey.METADATA, 12), memoryview(blob), 0)
    for version in (0, 9, 13):
        huge = b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff" if version < 9 else b"\xff\xff\xff\x0f"
        with pytest.raises(RemoteProtocolError):
            decode_body(response_type(ApiKey.METADATA, version), memoryview(huge * 3), 0)


# ------------------------------------------- timestamps the broker does not know (-1)

_START = datetime.datetime.fromtimestamp(1.5, datetime.UTC)  # 1500 ms: a marker to replace


def _describe_transactions_body(start: bytes) -> bytes:
    """A DescribeTransactions v0 body for one Empty id, its start time's 8 bytes ``start``."""
    cls = response_type(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    state = build(
        nested_type(cls, "TransactionState"),
        error_code=ErrorCode.none,
        transactional_id="only-init",
        transaction_state="Empty",
        transaction_timeout=datetime.timedelta(seconds=60),
        transaction_start_time=_START,
        producer_id=7,
        producer_epoch=0,
        topics=(),
    )
    body = encode_body(build(cls, throttle_time=datetime.timedelta(0), transaction_states=(state,)))
    marker = struct.pack(">q", 1500)
    assert body.count(marker) == 1
    return body.replace(marker, start)


def test_an_unknown_transaction_start_time_decodes_to_none() -> None:
    # the broker's answer for an id that only ran init_transactions: TransactionStartTimeMs -1
    cls = response_type(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    body = decode_body(cls, memoryview(_describe_transactions_body(struct.pack(">q", -1))), 0)
    assert isinstance(body, cls)
    (state,) = body.transaction_states
    assert (state.transaction_state, state.transaction_start_time) == ("Empty", None)
    assert (state.producer_id, state.topics) == (7, ())


def test_a_known_timestamp_still_decodes_and_equals_the_kio_entity() -> None:
    cls = response_type(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    raw = _describe_transactions_body(struct.pack(">q", 1500))
    body = decode_body(cls, memoryview(raw), 0)
    (state,) = body.transaction_states
    assert state.transaction_start_time == _START
    kio_body, _ = entity_reader(cls)(raw, 0)
    assert body == kio_body and kio_body == body and hash(body) == hash(kio_body)


def test_a_negative_timestamp_other_than_minus_one_is_malformed() -> None:
    cls = response_type(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    raw = _describe_transactions_body(struct.pack(">q", -2))
    with pytest.raises(RemoteProtocolError, match="DescribeTransactionsResponse"):
        decode_body(cls, memoryview(raw), 0)


def _timestamps(cls: type[Any]) -> list[tuple[str, bool]]:
    """(field path, nullable) of every timestamp field of ``cls`` and its nested entities."""
    out: list[tuple[str, bool]] = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if f.metadata.get("kafka_type") == "datetime_i64":
            out.append((f"{cls.__name__}.{f.name}", is_optional(f)))
        elif isinstance(kind, (EntityField, EntityTupleField)):
            out += _timestamps(kind.type_)
    return out


def test_every_response_timestamp_field_decodes_minus_one_to_none() -> None:
    found = []
    for key, name in api_key_map.items():
        for version in schema_name_map.get(name, ()):
            cls = response_type(int(key), version)
            paths = _timestamps(cls)
            found += [path for path, _ in paths]
            assert all(nullable for _, nullable in _timestamps(lenient_timestamps(cls))), cls
            if all(nullable for _, nullable in paths):
                assert lenient_timestamps(cls) is cls  # nothing to change: kio's own class
    # the schemas this is about (the delegation tokens' times of a refused request, too)
    assert "TransactionState.transaction_start_time" in found
    assert "CreateDelegationTokenResponse.expiry_timestamp" in found


def test_a_refused_delegation_token_without_times_decodes() -> None:
    cls = response_type(38, 2)  # CreateDelegationToken: the times are -1 when refused
    when = datetime.datetime.fromtimestamp(1.5, datetime.UTC)
    body = encode_body(
        build(
            cls,
            error_code=ErrorCode.delegation_token_auth_disabled,
            principal_type="User",
            principal_name="",
            issue_timestamp=when,
            expiry_timestamp=when,
            max_timestamp=when,
            token_id="",
            hmac=b"",
            throttle_time=datetime.timedelta(0),
        )
    )
    raw = body.replace(struct.pack(">q", 1500), struct.pack(">q", -1))
    decoded = decode_body(cls, memoryview(raw), 0)
    assert (decoded.issue_timestamp, decoded.expiry_timestamp, decoded.max_timestamp) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_guard_accepts_valid_api_versions(version: int) -> None:
    frame = response_frame(1, api_versions_response(version))[4:]
    view = memoryview(frame)
    _cid, offset = decode_response_header(view, 0)
    body = decode_body(response_type(ApiKey.API_VERSIONS, version), view, offset)
    assert len(body.api_keys) > 20


# ------------------------------------------------- the hand-written Produce encoder


def _kio_produce_body(
    version: int,
    batches: dict[tuple[str, uuid.UUID | None, int], bytes],
    acks: int,
    timeout_ms: int,
    transactional_id: str | None,
) -> bytes:
    cls = request_type(ApiKey.PRODUCE, version)
    topic_cls = nested_type(cls, "TopicProduceData")
    part_cls = nested_type(cls, "PartitionProduceData")
    by_topic: dict[tuple[str, uuid.UUID | None], list[Any]] = {}
    for (topic, topic_id, partition), records in batches.items():
        by_topic.setdefault((topic, topic_id), []).append(
            part_cls(index=i32(partition), records=records)
        )
    entity = build(
        cls,
        transactional_id=transactional_id,
        acks=i16(acks),
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(
            build(topic_cls, name=name, topic_id=tid, partition_data=tuple(parts))
            for (name, tid), parts in by_topic.items()
        ),
    )
    return encode_body(entity)


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(3, 13),
    batches=st.dictionaries(
        st.tuples(
            st.sampled_from(["t", "a-topic", "é" * 3, "x" * 200]),
            st.integers(0, 2**31 - 1),
        ),
        st.binary(max_size=300),
        max_size=6,
    ),
    acks=st.sampled_from([-1, 0, 1]),
    timeout_ms=st.integers(0, 2**31 - 1),
    transactional_id=st.none() | st.text(max_size=130),
)
def test_produce_body_is_what_kio_writes(
    version: int,
    batches: dict[tuple[str, int], bytes],
    acks: int,
    timeout_ms: int,
    transactional_id: str | None,
) -> None:
    ids = {"t": uuid.UUID(int=1), "a-topic": uuid.UUID(int=2), "é" * 3: uuid.UUID(int=3)}
    ids["x" * 200] = uuid.UUID(int=4)
    keyed = {(t, ids[t], p): records for (t, p), records in batches.items()}
    ours = produce_request_body(
        version, keyed, acks=acks, timeout=timeout_ms / 1000, transactional_id=transactional_id
    )
    assert ours == _kio_produce_body(version, keyed, acks, timeout_ms, transactional_id)
    entity = decode_body(request_type(ApiKey.PRODUCE, version), memoryview(ours), 0)
    assert len(entity.topic_data) == len({t for t, _ in batches})


def test_produce_request_is_an_encoded_request_of_the_negotiated_version() -> None:
    table = ApiVersionTable({ApiKey.PRODUCE: (3, 11)})
    request = produce_request(table, {("t", None, 0): b"rec"}, acks=1, timeout=2.0)
    assert isinstance(request, EncodedRequest)
    cls = type(request)
    assert (cls.__api_key__, cls.__version__, cls.__flexible__) == (0, 11, True)
    capped = produce_request(table, {("t", None, 0): b"rec"}, max_version=8)
    assert (type(capped).__version__, type(capped).__flexible__) == (8, False)
    assert encode_body(request) == request.body
    with pytest.raises(KafkaConfigurationError, match="needs the id"):
        produce_request_body(13, {("t", None, 0): b""})
