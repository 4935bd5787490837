"""BrokerConnection driven without sockets: bytes in, events out, time stepped by hand."""

from __future__ import annotations

import datetime
import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kafkastate.core import connection
from kafkastate.core.connection import (
    BrokerConnection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionReady,
    ConnectionReauthenticated,
    ConnectionState,
    RequestFailed,
    ResponseReceived,
)
from kafkastate.core.protocol.framing import encode_body
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, request_type
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    LocalProtocolError,
    RemoteProtocolError,
    SecurityProtocolMismatchError,
    SslAuthenticationError,
    UnsupportedVersionError,
)
from tests._support.peer import (
    ScramServer,
    api_versions_response,
    parse_request,
    response,
    response_frame,
    split_frames,
)

API_MAX = CLIENT_VERSIONS[ApiKey.API_VERSIONS][1]


def drain(conn: BrokerConnection) -> list[Any]:
    events = []
    while (ev := conn.next_event()) is not None:
        events.append(ev)
    return events


def sent(conn: BrokerConnection) -> list[Any]:
    return [parse_request(f) for f in split_frames(conn.data_to_send())]


def ready_connection(**config: Any) -> BrokerConnection:
    conn = BrokerConnection(ConnectionConfig(**config))
    conn.connection_made(now=0.0)
    (req,) = sent(conn)
    conn.receive_data(response_frame(req.correlation_id, api_versions_response(req.version)), now=0)
    assert isinstance(drain(conn)[0], ConnectionReady)
    return conn


def metadata_request(version: int = 12) -> Any:
    return request_type(ApiKey.METADATA, version)(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def metadata_response(version: int = 12) -> Any:
    return response(
        ApiKey.METADATA,
        version,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id="c",
        controller_id=1,
        topics=(),
    )


def test_handshake_sends_api_versions_with_kip511_fields() -> None:
    conn = BrokerConnection(ConnectionConfig(client_id="me", client_software_version="1.2.3"))
    assert conn.state is ConnectionState.IDLE
    conn.connection_made(now=5.0)
    assert conn.state is ConnectionState.API_VERSIONS
    (req,) = sent(conn)
    assert (req.api_key, req.version, req.client_id) == (18, API_MAX, "me")
    assert req.body.client_software_name == "kafkastate"
    assert req.body.client_software_version == "1.2.3"
    assert conn.get_timer() == 5.0 + 30.0


def test_ready_event_carries_negotiated_versions() -> None:
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0)
    (req,) = sent(conn)
    broker = {0: (0, 9), 1: (4, 11), 3: (0, 12), 18: (0, 3)}
    conn.receive_data(
        response_frame(req.correlation_id, api_versions_response(req.version, ranges=broker)),
        now=1,
    )
    (ev,) = drain(conn)
    assert isinstance(ev, ConnectionReady)
    assert ev.versions.version_for(ApiKey.PRODUCE) == 9
    assert ev.versions.version_for(ApiKey.FETCH) == 11
    assert conn.state is ConnectionState.READY
    assert conn.get_timer() is None


def test_api_versions_unsupported_version_retries_at_named_version() -> None:
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0)
    (first,) = sent(conn)
    assert first.version == API_MAX
    # An old broker answers in v0 with UNSUPPORTED_VERSION and its own range for key 18.
    refusal = api_versions_response(
        0, error=ErrorCode.unsupported_version, ranges={18: (0, 2), 3: (0, 9)}
    )
    conn.receive_data(response_frame(first.correlation_id, refusal), now=1)
    assert drain(conn) == []
    (retry,) = sent(conn)
    assert retry.version == 2
    conn.receive_data(
        response_frame(retry.correlation_id, api_versions_response(2, ranges={3: (0, 9)})), now=2
    )
    (ev,) = drain(conn)
    assert isinstance(ev, ConnectionReady)
    assert ev.versions.version_for(ApiKey.METADATA) == 9


def test_api_versions_refused_twice_closes_with_typed_error() -> None:
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0)
    (first,) = sent(conn)
    refusal = api_versions_response(0, error=ErrorCode.unsupported_version, ranges={18: (0, 1)})
    conn.receive_data(response_frame(first.correlation_id, refusal), now=1)
    (retry,) = sent(conn)
    refusal = api_versions_response(0, error=ErrorCode.unsupported_version, ranges={18: (0, 1)})
    conn.receive_data(response_frame(retry.correlation_id, refusal), now=1)
    (ev,) = drain(conn)
    assert isinstance(ev, ConnectionClosed)
    assert isinstance(ev.error, UnsupportedVersionError)
    assert conn.state is ConnectionState.CLOSED


def test_requests_before_ready_are_queued_then_sent() -> None:
    conn = BrokerConnection(ConnectionConfig())
    cid = conn.send_request(metadata_request(), now=0)
    assert conn.queued_count == 1
    conn.connection_made(now=0)
    (av,) = sent(conn)
    assert av.api_key == 18
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=1)
    (md,) = sent(conn)
    assert (md.api_key, md.correlation_id) == (3, cid)
    conn.receive_data(response_frame(cid, metadata_response()), now=2)
    ready, got = drain(conn)
    assert isinstance(ready, ConnectionReady)
    assert isinstance(got, ResponseReceived)
    assert got.correlation_id == cid
    assert got.response.cluster_id == "c"


def test_a_repeated_request_is_framed_like_a_fresh_one() -> None:
    # a request equal to the last of its class reuses its encoded body (not its header)
    conn = ready_connection()
    other = request_type(ApiKey.METADATA, 12)(
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    requests = [metadata_request(), metadata_request(), other, metadata_request()]
    cids = [conn.send_request(r, now=1) for r in requests]
    frames = split_frames(conn.data_to_send())
    got = [parse_request(f) for f in frames]
    assert [r.correlation_id for r in got] == cids
    assert [r.body for r in got] == requests
    after_cid = [f[8:] for f in frames]  # api key, version, correlation id come first
    assert after_cid[0] == after_cid[1] == after_cid[3] != after_cid[2]


def test_max_in_flight_holds_requests_back_in_order() -> None:
    conn = ready_connection(max_in_flight=2)
    ids = [conn.send_request(metadata_request(), now=1) for _ in range(4)]
    assert [r.correlation_id for r in sent(conn)] == ids[:2]
    assert conn.in_flight_count == 2 and conn.queued_count == 2
    assert not conn.can_send()
    conn.receive_data(response_frame(ids[0], metadata_response()), now=2)
    assert [r.correlation_id for r in sent(conn)] == [ids[2]]
    conn.receive_data(response_frame(ids[1], metadata_response()), now=2)
    conn.receive_data(response_frame(ids[2], metadata_response()), now=2)
    assert [r.correlation_id for r in sent(conn)] == [ids[3]]
    events = drain(conn)
    assert [e.correlation_id for e in events] == ids[:3]


def test_request_timeout_deadline_is_exact_and_closes_connection() -> None:
    conn = ready_connection(request_timeout=10.0, max_in_flight=1)
    first = conn.send_request(metadata_request(), now=100.0)
    second = conn.send_request(metadata_request(), now=101.0)  # queued, not on the wire
    assert conn.get_timer() == 110.0
    conn.handle_timer(now=109.999)
    assert drain(conn) == []
    conn.handle_timer(now=110.0)
    events = drain(conn)
    assert isinstance(events[0], RequestFailed) and events[0].correlation_id == first
    assert isinstance(events[0].error, KafkaTimeoutError)
    assert isinstance(events[1], RequestFailed) and events[1].correlation_id == second
    assert isinstance(events[1].error, KafkaConnectionError)
    assert isinstance(events[2], ConnectionClosed)
    assert isinstance(events[2].error, KafkaTimeoutError)
    assert conn.state is ConnectionState.CLOSED
    conn.handle_timer(now=200.0)  # idempotent after close
    assert drain(conn) == []


def test_queued_request_times_out_alone() -> None:
    conn = BrokerConnection(ConnectionConfig(request_timeout=5.0))
    cid = conn.send_request(metadata_request(), now=0.0)
    assert conn.get_timer() == 5.0
    conn.handle_timer(now=5.0)
    (ev,) = drain(conn)
    assert isinstance(ev, RequestFailed) and ev.correlation_id == cid
    assert isinstance(ev.error, KafkaTimeoutError)
    assert conn.state is ConnectionState.IDLE


def test_handshake_timeout_closes() -> None:
    conn = BrokerConnection(ConnectionConfig(request_timeout=3.0))
    conn.connection_made(now=10.0)
    conn.handle_timer(now=13.0)
    (ev,) = drain(conn)
    assert isinstance(ev, ConnectionClosed) and isinstance(ev.error, KafkaTimeoutError)


def test_eof_fails_in_flight_and_closes() -> None:
    conn = ready_connection()
    cid = conn.send_request(metadata_request(), now=1)
    conn.receive_data(b"", now=2)
    failed, closed = drain(conn)
    assert isinstance(failed, RequestFailed) and failed.correlation_id == cid
    assert isinstance(failed.error, KafkaConnectionError)
    assert isinstance(closed, ConnectionClosed)
    with pytest.raises(LocalProtocolError):
        conn.send_request(metadata_request(), now=3)


def test_correlation_mismatch_is_remote_protocol_error() -> None:
    conn = ready_connection()
    cid = conn.send_request(metadata_request(), now=1)
    with pytest.raises(RemoteProtocolError, match="correlation id"):
        conn.receive_data(response_frame(cid + 7, metadata_response()), now=2)
    assert conn.state is ConnectionState.ERROR
    events = drain(conn)
    assert isinstance(events[-1], ConnectionClosed)
    assert isinstance(events[-1].error, RemoteProtocolError)
    conn.receive_data(b"more", now=3)  # ignored once terminal


def test_unsolicited_and_garbage_frames() -> None:
    conn = ready_connection()
    with pytest.raises(RemoteProtocolError, match="unsolicited"):
        conn.receive_data(response_frame(0, metadata_response()), now=1)
    conn = ready_connection()
    conn.send_request(metadata_request(), now=1)
    with pytest.raises(RemoteProtocolError, match="frame size"):
        conn.receive_data(b"\xff\xff\xff\xff", now=1)
    conn = ready_connection()
    cid = conn.send_request(metadata_request(), now=1)
    bad = b"\x00\x00\x00\x06" + cid.to_bytes(4, "big") + b"\x00\x07"
    with pytest.raises(RemoteProtocolError, match="MetadataResponse"):
        conn.receive_data(bad, now=1)


def test_a_small_response_seen_before_is_the_same_answer_on_any_connection() -> None:
    # decoded once per process (class and bytes are the key): the answer is equal to a
    # fresh decoding, on another connection too, and malformed bytes still raise every time
    connection._DECODED.clear()
    got = []
    first, second = ready_connection(), ready_connection()
    for conn in (first, second, first):
        cid = conn.send_request(metadata_request(), now=1)
        conn.data_to_send()
        conn.receive_data(response_frame(cid, metadata_response()), now=2)
        (event,) = drain(conn)
        got.append(event.response)
    assert got == [metadata_response()] * 3
    assert got[1] is got[0]  # kept, not decoded again
    kept = dict(connection._DECODED)
    bad = b"\x00\x07"  # a truncated MetadataResponse
    for _ in range(2):
        conn = ready_connection()
        cid = conn.send_request(metadata_request(), now=1)
        frame = (4 + len(bad)).to_bytes(4, "big") + cid.to_bytes(4, "big") + bad
        with pytest.raises(RemoteProtocolError, match="MetadataResponse"):
            conn.receive_data(frame, now=1)
    assert kept == connection._DECODED  # nothing kept of the malformed bodies


def test_a_small_request_encoded_before_is_sent_as_encoded_then() -> None:
    # encoded once per process (the entity is the key): another connection sends the
    # same bytes kio writes for it
    connection._ENCODED.clear()
    bodies = []
    for _ in range(2):
        conn = ready_connection()
        conn.send_request(metadata_request(), now=1)
        (req,) = sent(conn)
        bodies.append(req.body)
    assert bodies == [metadata_request()] * 2
    assert connection._ENCODED[metadata_request()] == encode_body(metadata_request())


def test_unsupported_api_fails_request_with_both_ranges() -> None:
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0)
    (av,) = sent(conn)
    ranges = {18: (0, 4), 3: (0, 12)}  # no CreateTopics offered
    conn.receive_data(
        response_frame(av.correlation_id, api_versions_response(av.version, ranges=ranges)), now=0
    )
    drain(conn)
    req = request_type(ApiKey.CREATE_TOPICS, 7)(
        topics=(), timeout=datetime.timedelta(seconds=1), validate_only=False
    )
    cid = conn.send_request(req, now=1)
    (ev,) = drain(conn)
    assert isinstance(ev, RequestFailed) and ev.correlation_id == cid
    assert isinstance(ev.error, UnsupportedVersionError)
    assert "CreateTopics" in str(ev.error) and "none" in str(ev.error)
    assert sent(conn) == []


def test_close_fails_everything_once() -> None:
    conn = ready_connection()
    conn.send_request(metadata_request(), now=1)
    conn.close()
    conn.close()
    failed, closed = drain(conn)
    assert isinstance(failed, RequestFailed)
    assert closed == ConnectionClosed(error=None)
    assert conn.data_to_send() == b""


def test_acks0_style_request_expects_no_response() -> None:
    conn = ready_connection()
    conn.send_request(metadata_request(), now=1, expect_response=False)
    assert conn.in_flight_count == 0
    assert len(sent(conn)) == 1
    assert conn.get_timer() is None


def _script(conn: BrokerConnection, chunks: list[bytes]) -> list[Any]:
    out = []
    for chunk in chunks:
        conn.receive_data(chunk, now=1)
        out.extend(drain(conn))
    return out


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_split_points_do_not_change_events(data: st.DataObject) -> None:
    def run(split: list[int] | None) -> list[Any]:
        conn = ready_connection()
        ids = [conn.send_request(metadata_request(), now=1) for _ in range(3)]
        stream = b"".join(response_frame(i, metadata_response()) for i in ids)
        if split is None:
            chunks = [stream]
        else:
            cuts = sorted(set(split))
            bounds = [0, *[c for c in cuts if 0 < c < len(stream)], len(stream)]
            chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
        return _script(conn, chunks)

    whole = run(None)
    split = data.draw(st.lists(st.integers(min_value=0, max_value=400), max_size=20))
    assert run(split) == whole
    bytewise = run(list(range(400)))
    assert bytewise == whole


# ------------------------------------------------------------------ SASL


def _sasl_connection(mechanism: str, **extra: Any) -> tuple[BrokerConnection, Any]:
    conn = BrokerConnection(
        ConnectionConfig(sasl_mechanism=mechanism, **extra), rng=random.Random(7)
    )
    conn.connection_made(now=0)
    (av,) = sent(conn)
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=0)
    assert conn.state is ConnectionState.SASL_HANDSHAKE
    (hs,) = sent(conn)
    assert (hs.api_key, hs.version, hs.body.mechanism) == (17, 1, mechanism)
    return conn, hs


def _handshake_ok(conn: BrokerConnection, hs: Any) -> Any:
    conn.receive_data(
        response_frame(
            hs.correlation_id, response(17, 1, error_code=ErrorCode.none, mechanisms=())
        ),
        now=0,
    )
    (auth,) = sent(conn)
    assert auth.api_key == 36
    return auth


def _auth_response(version: int, auth_bytes: bytes, error: ErrorCode = ErrorCode.none) -> Any:
    fields: dict[str, Any] = {
        "error_code": error,
        "error_message": None if error == ErrorCode.none else "Authentication failed",
        "auth_bytes": auth_bytes,
    }
    if version >= 1:
        fields["session_lifetime"] = datetime.timedelta(0)
    return response(36, version, **fields)


def test_sasl_plain_success() -> None:
    conn, hs = _sasl_connection("PLAIN", sasl_username="alice", sasl_password="pw")
    auth = _handshake_ok(conn, hs)
    assert auth.body.auth_bytes == b"\0alice\0pw"
    conn.receive_data(response_frame(auth.correlation_id, _auth_response(auth.version, b"")), now=0)
    (ev,) = drain(conn)
    assert isinstance(ev, ConnectionReady)


def test_the_sasl_exchange_is_never_kept_process_wide() -> None:
    # credentials, proofs and tokens stay out of the caches of repeated bodies
    connection._DECODED.clear()
    connection._ENCODED.clear()
    for _ in range(2):
        conn, hs = _sasl_connection("PLAIN", sasl_username="alice", sasl_password="pw")
        auth = _handshake_ok(conn, hs)
        reply = _auth_response(auth.version, b"")
        conn.receive_data(response_frame(auth.correlation_id, reply), now=0)
        assert isinstance(drain(conn)[-1], ConnectionReady)
    sasl = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
    assert not [e for e in connection._ENCODED if type(e).__api_key__ in sasl]
    assert not [cls for cls, _body in connection._DECODED if cls.__api_key__ in sasl]
    assert connection._DECODED  # (the ApiVersions answer is kept)


def test_sasl_bad_password_fails_at_once() -> None:
    conn, hs = _sasl_connection("PLAIN", sasl_username="alice", sasl_password="wrong")
    auth = _handshake_ok(conn, hs)
    refusal = _auth_response(auth.version, b"", ErrorCode.sasl_authentication_failed)
    conn.receive_data(response_frame(auth.correlation_id, refusal), now=0)
    (ev,) = drain(conn)
    assert isinstance(ev, ConnectionClosed)
    assert isinstance(ev.error, AuthenticationFailedError)
    assert "Authentication failed" in str(ev.error)
    assert conn.get_timer() is None and sent(conn) == []


def test_sasl_mechanism_not_enabled() -> None:
    conn, hs = _sasl_connection("SCRAM-SHA-512", sasl_username="a", sasl_password="b")
    refusal = response(
        17, 1, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=("PLAIN",)
    )
    conn.receive_data(response_frame(hs.correlation_id, refusal), now=0)
    (ev,) = drain(conn)
    assert isinstance(ev.error, AuthenticationFailedError)
    assert "PLAIN" in str(ev.error)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("good_signature", [True, False])
def test_sasl_scram_exchange(mechanism: str, good_signature: bool) -> None:
    server = ScramServer(mechanism, "secret")
    conn, hs = _sasl_connection(mechanism, sasl_username="alice", sasl_password="secret")
    first = _handshake_ok(conn, hs)
    challenge = server.first(first.body.auth_bytes)
    conn.receive_data(
        response_frame(first.correlation_id, _auth_response(first.version, challenge)), now=0
    )
    (final,) = sent(conn)
    ok, server_final = server.final(final.body.auth_bytes, corrupt_signature=not good_signature)
    assert ok, "client proof must verify against the password"
    conn.receive_data(
        response_frame(final.correlation_id, _auth_response(final.version, server_final)), now=0
    )
    (ev,) = drain(conn)
    if good_signature:
        assert isinstance(ev, ConnectionReady)
    else:
        assert isinstance(ev, ConnectionClosed)
        assert isinstance(ev.error, AuthenticationFailedError)
        assert "signature" in str(ev.error)


def test_scram_requires_rng() -> None:
    conn = BrokerConnection(
        ConnectionConfig(sasl_mechanism="SCRAM-SHA-256", sasl_username="a", sasl_password="b")
    )
    conn.connection_made(now=0)
    (av,) = sent(conn)
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=0)
    (ev,) = drain(conn)
    assert isinstance(ev, ConnectionClosed) and "random source" in str(ev.error)


def test_oauthbearer_message() -> None:
    conn, hs = _sasl_connection(
        "OAUTHBEARER", sasl_oauth_token="tok.en.sig", sasl_oauth_extensions={"cluster": "x"}
    )
    auth = _handshake_ok(conn, hs)
    assert auth.body.auth_bytes == b"n,,\x01auth=Bearer tok.en.sig\x01cluster=x\x01\x01"
    conn.receive_data(response_frame(auth.correlation_id, _auth_response(auth.version, b"")), now=0)
    assert isinstance(drain(conn)[0], ConnectionReady)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"request_timeout": 0}, "request_timeout"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"client_software_name": "bad name"}, "KIP-511"),
    ],
)
def test_config_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ConnectionConfig(**kwargs)


def test_connection_made_twice_is_local_error() -> None:
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0)
    with pytest.raises(LocalProtocolError):
        conn.connection_made(now=0)
    with pytest.raises(LocalProtocolError, match="before connection_made"):
        BrokerConnection(ConnectionConfig()).receive_data(b"x", now=0)


# ------------------------------------------------------------ KIP-368 re-authentication


def auth_ok(req: Any, lifetime: float = 0.0) -> bytes:
    """A successful SaslAuthenticate answer to ``req`` naming a session lifetime (KIP-368)."""
    body = response(
        36,
        req.version,
        error_code=ErrorCode.none,
        error_message=None,
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(seconds=lifetime),
    )
    return response_frame(req.correlation_id, body)


def _plain_ready_with_lifetime(lifetime: float, now: float) -> BrokerConnection:
    conn, hs = _sasl_connection("PLAIN", sasl_username="u", sasl_password="p")
    auth = _handshake_ok(conn, hs)
    conn.receive_data(auth_ok(auth, lifetime), now=now)
    (ready,) = drain(conn)
    assert isinstance(ready, ConnectionReady) and ready.sasl_session_lifetime == lifetime
    return conn


def test_reauthentication_drains_in_flight_then_reauthenticates() -> None:
    conn = _plain_ready_with_lifetime(100.0, now=10.0)
    fraction = 0.85 + 0.1 * random.Random(7).random()  # the rng's first draw (PLAIN uses none)
    assert conn.get_timer() == pytest.approx(10.0 + 100.0 * fraction)
    reauth_at = conn.get_timer()
    assert reauth_at is not None
    first = conn.send_request(metadata_request(), now=reauth_at - 1.0)
    (written,) = sent(conn)
    assert written.correlation_id == first
    conn.handle_timer(now=reauth_at)
    assert conn.state is ConnectionState.REAUTHENTICATING
    assert sent(conn) == []  # waits for the in-flight request
    second = conn.send_request(metadata_request(), now=reauth_at)
    assert sent(conn) == []  # new requests wait too
    conn.receive_data(response_frame(first, metadata_response()), now=reauth_at + 1)
    (hs,) = sent(conn)
    assert (hs.api_key, hs.body.mechanism) == (ApiKey.SASL_HANDSHAKE, "PLAIN")
    auth = _handshake_ok(conn, hs)
    assert auth.body.auth_bytes == b"\0u\0p"
    conn.receive_data(auth_ok(auth, 100), now=reauth_at + 2)
    assert conn.state is ConnectionState.READY
    (queued,) = sent(conn)
    assert queued.correlation_id == second
    conn.receive_data(response_frame(second, metadata_response()), now=reauth_at + 3)
    events = drain(conn)
    assert [(type(e), getattr(e, "correlation_id", None)) for e in events] == [
        (ResponseReceived, first),
        (ConnectionReauthenticated, None),
        (ResponseReceived, second),
    ]
    timer = conn.get_timer()
    assert timer is not None and timer > reauth_at + 2 + 80  # next re-auth scheduled


def test_reauthentication_failure_closes() -> None:
    conn = _plain_ready_with_lifetime(50.0, now=0.0)
    reauth_at = conn.get_timer()
    assert reauth_at is not None
    conn.handle_timer(now=reauth_at)
    (hs,) = sent(conn)
    auth = _handshake_ok(conn, hs)
    refusal = _auth_response(auth.version, b"", ErrorCode.sasl_authentication_failed)
    conn.receive_data(response_frame(auth.correlation_id, refusal), now=reauth_at + 1)
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed)
    assert isinstance(closed.error, AuthenticationFailedError)


def test_no_reauthentication_without_session_lifetime() -> None:
    conn, hs = _sasl_connection("PLAIN", sasl_username="u", sasl_password="p")
    auth = _handshake_ok(conn, hs)
    conn.receive_data(response_frame(auth.correlation_id, _auth_response(auth.version, b"")), now=0)
    assert isinstance(drain(conn)[0], ConnectionReady)
    assert conn.get_timer() is None


# -- TLS mismatches (issue 19) -------------------------------------------------------------

TLS_ALERT = bytes([21, 3, 3, 0, 2, 2, 80])  # fatal internal_error, as a TLS listener answers


@pytest.mark.parametrize("split", [1, 2, 3, len(TLS_ALERT)])
def test_a_tls_answer_to_a_plaintext_connection_is_a_named_mismatch(split: int) -> None:
    """A TLS listener answers the plaintext ApiVersions request with a TLS record: the
    connection ends with SecurityProtocolMismatchError (never read as a 352 MB frame), at
    any split of the bytes."""
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0.0)
    conn.data_to_send()
    conn.receive_data(TLS_ALERT[:split], now=0.1)
    conn.receive_data(TLS_ALERT[split:] or b"\0", now=0.1)
    (closed,) = [e for e in drain(conn) if isinstance(e, ConnectionClosed)]
    assert isinstance(closed.error, SecurityProtocolMismatchError)
    assert isinstance(closed.error, AuthenticationFailedError)  # fatal: never retried
    assert "security_protocol='SSL'" in str(closed.error)
    assert conn.state is ConnectionState.ERROR


def test_a_frame_that_only_starts_like_tls_is_not_refused() -> None:
    """Only a TLS record header (type 21/22, version 3.0-3.4) is refused; the check ends
    after the first three bytes of a connection."""
    conn = ready_connection()
    cid = conn.send_request(metadata_request(), now=1.0)
    conn.data_to_send()
    conn.receive_data(response_frame(cid, metadata_response()), now=1.1)
    assert any(isinstance(e, ResponseReceived) for e in drain(conn))
    assert conn.state is ConnectionState.READY


def test_a_typed_tls_refusal_from_the_adapter_keeps_its_type() -> None:
    """TLS 1.3: a broker refusing the client certificate says so on the first read; the
    adapter reports an SslAuthenticationError, which closes the connection as it is."""
    conn = BrokerConnection(ConnectionConfig())
    conn.connection_made(now=0.0)
    refused = SslAuthenticationError("TLS with the broker at h:1 failed: certificate required")
    conn.connection_lost(now=0.1, error=refused)
    (closed,) = [e for e in drain(conn) if isinstance(e, ConnectionClosed)]
    assert closed.error is refused
