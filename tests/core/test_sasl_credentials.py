"""Credentials asked for at each (re-)authentication: OAUTHBEARER tokens requested from the
adapter (TokenRequested), callable PLAIN/SCRAM passwords, and KIP-368 re-authentication
sequenced on the fake clock. No sockets: bytes in, events out, time stepped by hand."""

from __future__ import annotations

import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.client import Client, ClientConfig, ConnectRequested, TokenRequested
from kafkastate.core.connection import (
    BrokerConnection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionReady,
    ConnectionReauthenticated,
    ConnectionState,
    ResponseReceived,
)
from kafkastate.core.connection import TokenRequested as ConnTokenRequested
from kafkastate.core.metadata import NodeId
from kafkastate.core.protocol.versions import ApiKey
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaTimeoutError,
)
from tests._support.peer import (
    api_versions_response,
    parse_request,
    response,
    response_frame,
    split_frames,
)
from tests.core.test_connection import (
    _auth_response,
    auth_ok,
    metadata_request,
    metadata_response,
    sent,
)

SEED = 11


def drain(machine: Any) -> list[Any]:
    """Every event of a connection or a Client."""
    out = []
    while (ev := machine.next_event()) is not None:
        out.append(ev)
    return out


def handshake_ok(req: Any) -> bytes:
    return response_frame(
        req.correlation_id, response(17, req.version, error_code=ErrorCode.none, mechanisms=())
    )


def written_by_node(client: Client) -> dict[NodeId, Any]:
    """The one request each node was written."""
    out: dict[NodeId, Any] = {}
    for node, data in client.data_to_send():
        (frame,) = split_frames(data)
        assert node not in out
        out[node] = parse_request(frame)
    return out


def provider_connection(now: float = 0.0) -> BrokerConnection:
    """An OAUTHBEARER connection whose tokens come from a provider, past ApiVersions."""
    conn = BrokerConnection(
        ConnectionConfig(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=True),
        rng=random.Random(SEED),
    )
    conn.connection_made(now=now)
    (av,) = sent(conn)
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=now)
    return conn


# ------------------------------------------------------------------ OAUTHBEARER tokens


def test_token_is_requested_while_the_handshake_is_on_the_wire() -> None:
    conn = provider_connection()
    # the handshake goes at once, and the token is asked for alongside it
    (hs,) = sent(conn)
    assert (hs.api_key, hs.body.mechanism) == (ApiKey.SASL_HANDSHAKE, "OAUTHBEARER")
    assert drain(conn) == [ConnTokenRequested()]
    assert conn.awaiting_token
    assert conn.get_timer() == 30.0  # the handshake's and the token's deadline
    conn.receive_data(handshake_ok(hs), now=0.5)
    assert sent(conn) == []  # no SaslAuthenticate without a token
    assert conn.state is ConnectionState.SASL_HANDSHAKE
    conn.token_received("a.b.c", now=1.0, extensions={"logicalCluster": "lkc"})
    (auth,) = sent(conn)
    assert auth.api_key == ApiKey.SASL_AUTHENTICATE
    assert auth.body.auth_bytes == b"n,,\x01auth=Bearer a.b.c\x01logicalCluster=lkc\x01\x01"
    conn.receive_data(auth_ok(auth), now=1.5)
    assert isinstance(drain(conn)[0], ConnectionReady)


def test_a_token_before_the_handshake_answer_waits_for_it() -> None:
    conn = provider_connection()
    (hs,) = sent(conn)
    drain(conn)
    conn.token_received("a.b.c", now=0.1)
    assert sent(conn) == []
    conn.receive_data(handshake_ok(hs), now=0.2)
    (auth,) = sent(conn)
    assert auth.body.auth_bytes.startswith(b"n,,\x01auth=Bearer a.b.c")


def test_a_provider_error_closes_with_a_typed_error_naming_it() -> None:
    conn = provider_connection()
    drain(conn)
    conn.token_failed(OSError("endpoint down"), now=1.0)
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed)
    assert isinstance(closed.error, AuthenticationFailedError)
    assert "token provider failed: OSError: endpoint down" in str(closed.error)
    assert isinstance(closed.error.__cause__, OSError)
    # a KafkaError from the provider is kept as it is
    conn = provider_connection()
    drain(conn)
    refused = KafkaConfigurationError("no such client")
    conn.token_failed(refused, now=1.0)
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed) and closed.error is refused


def test_a_provider_that_never_answers_times_out() -> None:
    conn = provider_connection()
    (hs,) = sent(conn)
    drain(conn)
    conn.receive_data(handshake_ok(hs), now=1.0)
    assert conn.get_timer() == 30.0
    conn.handle_timer(now=29.9)
    assert conn.state is ConnectionState.SASL_HANDSHAKE
    conn.handle_timer(now=30.0)
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed)
    assert isinstance(closed.error, KafkaTimeoutError)
    assert "token provider gave no token within 30 s" in str(closed.error)
    conn.token_received("late", now=31.0)  # ignored
    assert drain(conn) == []


def test_an_empty_token_is_refused_without_leaking_anything() -> None:
    conn = provider_connection()
    drain(conn)
    conn.token_received("", now=1.0)
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed)
    assert isinstance(closed.error, AuthenticationFailedError)


def test_oauthbearer_needs_a_token_or_a_provider() -> None:
    with pytest.raises(KafkaConfigurationError, match="sasl_oauth_token_provider"):
        ConnectionConfig(sasl_mechanism="OAUTHBEARER")


# ------------------------------------------------------------- KIP-368 with fresh tokens


def test_reauthentication_asks_for_a_fresh_token_between_requests() -> None:
    """The core schedules re-authentication at 85-95 % of the session lifetime (jitter from
    the seeded rng), drains in-flight requests, then runs SaslHandshake + SaslAuthenticate
    with a new token on the same connection; a request sent meanwhile waits and goes after.
    """
    conn = provider_connection(now=0.0)
    (hs,) = sent(conn)
    drain(conn)
    conn.receive_data(handshake_ok(hs), now=0.0)
    conn.token_received("token-1", now=0.0)
    (auth,) = sent(conn)
    conn.receive_data(auth_ok(auth, lifetime=10.0), now=1.0)
    (ready,) = drain(conn)
    assert isinstance(ready, ConnectionReady) and ready.sasl_session_lifetime == 10.0
    expected = 1.0 + 10.0 * (0.85 + 0.1 * random.Random(SEED).random())
    reauth_at = conn.get_timer()
    assert reauth_at == pytest.approx(expected)
    assert reauth_at is not None and 9.5 <= reauth_at <= 10.5

    first = conn.send_request(metadata_request(), now=reauth_at - 0.5)
    assert [r.correlation_id for r in sent(conn)] == [first]
    conn.handle_timer(now=reauth_at)
    assert conn.state is ConnectionState.REAUTHENTICATING
    second = conn.send_request(metadata_request(), now=reauth_at)
    assert sent(conn) == []  # nothing new on the wire while `first` is in flight
    assert drain(conn) == []  # not even the token request yet
    conn.receive_data(response_frame(first, metadata_response()), now=reauth_at + 0.1)
    assert [type(e) for e in drain(conn)] == [ResponseReceived, ConnTokenRequested]
    (hs2,) = sent(conn)
    assert hs2.api_key == ApiKey.SASL_HANDSHAKE
    conn.receive_data(handshake_ok(hs2), now=reauth_at + 0.2)
    conn.token_received("token-2", now=reauth_at + 0.3)
    (auth2,) = sent(conn)
    assert b"auth=Bearer token-2" in auth2.body.auth_bytes
    assert conn.state is ConnectionState.REAUTHENTICATING
    conn.receive_data(auth_ok(auth2, lifetime=10.0), now=reauth_at + 0.4)
    assert conn.state is ConnectionState.READY
    (queued,) = sent(conn)
    assert queued.correlation_id == second  # the waiting request goes after re-auth
    conn.receive_data(response_frame(second, metadata_response()), now=reauth_at + 0.5)
    reauthenticated, answered = drain(conn)
    assert reauthenticated == ConnectionReauthenticated(sasl_session_lifetime=10.0)
    assert isinstance(answered, ResponseReceived) and answered.correlation_id == second
    nxt = conn.get_timer()
    assert nxt is not None and reauth_at + 0.4 + 8.5 <= nxt <= reauth_at + 0.4 + 9.5


def test_the_reauthentication_schedule_replays_with_the_seed() -> None:
    def schedule(seed: int) -> float | None:
        conn = BrokerConnection(
            ConnectionConfig(sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p"),
            rng=random.Random(seed),
        )
        conn.connection_made(now=0)
        (av,) = sent(conn)
        conn.receive_data(
            response_frame(av.correlation_id, api_versions_response(av.version)), now=0
        )
        (hs,) = sent(conn)
        conn.receive_data(handshake_ok(hs), now=0)
        (auth,) = sent(conn)
        conn.receive_data(auth_ok(auth, lifetime=100.0), now=0)
        return conn.get_timer()

    assert schedule(3) == schedule(3)
    assert schedule(3) != schedule(4)


# -------------------------------------------------------------- callable credentials


def test_callable_password_is_read_at_every_authentication() -> None:
    passwords = iter(["first", "second"])
    conn = BrokerConnection(
        ConnectionConfig(
            sasl_mechanism="PLAIN",
            sasl_username=lambda: "alice",
            sasl_password=lambda: next(passwords),
        ),
        rng=random.Random(SEED),
    )
    conn.connection_made(now=0)
    (av,) = sent(conn)
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=0)
    (hs,) = sent(conn)
    conn.receive_data(handshake_ok(hs), now=0)
    (auth,) = sent(conn)
    assert auth.body.auth_bytes == b"\0alice\0first"
    conn.receive_data(auth_ok(auth, lifetime=10.0), now=0)
    drain(conn)
    reauth_at = conn.get_timer()
    assert reauth_at is not None
    conn.handle_timer(now=reauth_at)
    (hs,) = sent(conn)
    conn.receive_data(handshake_ok(hs), now=reauth_at)
    (auth,) = sent(conn)
    assert auth.body.auth_bytes == b"\0alice\0second"  # rotated without a restart


def test_a_failing_password_callable_names_the_option_not_the_secret() -> None:
    def password() -> str:
        raise RuntimeError("vault says: s3cret-value")

    conn = BrokerConnection(
        ConnectionConfig(sasl_mechanism="PLAIN", sasl_username="alice", sasl_password=password)
    )
    conn.connection_made(now=0)
    (av,) = sent(conn)
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=0)
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed)
    assert isinstance(closed.error, AuthenticationFailedError)
    assert "sasl_plain_password callable raised RuntimeError" in str(closed.error)
    assert "s3cret" not in str(closed.error)


def test_config_repr_hides_secrets() -> None:
    config = ConnectionConfig(
        sasl_mechanism="OAUTHBEARER", sasl_oauth_token="tok-SECRET", sasl_password="pw-SECRET"
    )
    assert "SECRET" not in repr(config)


# ------------------------------------------------------------------------- Client


def test_the_client_asks_once_for_all_waiting_connections() -> None:
    config = ClientConfig(
        bootstrap_servers="a:1,b:2",
        connection=ConnectionConfig(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=True),
    )
    client = Client(config, rng=random.Random(SEED))
    for node in (NodeId(-1), NodeId(-2)):
        client.send(lambda v: metadata_request(), now=0.0, node_id=node)
    events = drain(client)
    assert [type(e) for e in events] == [ConnectRequested, ConnectRequested]
    for node in (NodeId(-1), NodeId(-2)):
        client.connection_made(node, now=0.0)
    written = client.data_to_send()
    for node, data in written:
        for frame in split_frames(data):
            av = parse_request(frame)
            client.receive_data(
                node, response_frame(av.correlation_id, api_versions_response(av.version)), now=0.0
            )
    # both connections want a token: one request goes to the adapter
    assert drain(client) == [TokenRequested()]
    client.token_received("shared", now=0.1)
    handshakes = written_by_node(client)
    assert set(handshakes) == {NodeId(-1), NodeId(-2)}
    for node, hs in handshakes.items():
        client.receive_data(node, handshake_ok(hs), now=0.2)
    auths = written_by_node(client)
    assert all(b"auth=Bearer shared" in a.body.auth_bytes for a in auths.values())
    # asked again only after request_timeout without an answer
    assert drain(client) == []


def test_a_refused_authentication_is_reported_for_waiters_to_raise_at_once() -> None:
    config = ClientConfig(
        bootstrap_servers="a:1",
        connection=ConnectionConfig(
            sasl_mechanism="PLAIN", sasl_username="alice", sasl_password=lambda: "wrong"
        ),
    )
    client = Client(config, rng=random.Random(SEED))
    client.request_metadata_update()
    client.handle_timer(now=0.0)
    assert [type(e) for e in drain(client)] == [ConnectRequested]
    assert client.authentication_refused is None
    node = NodeId(-1)
    client.connection_made(node, now=0.0)
    (av,) = written_by_node(client).values()
    client.receive_data(
        node, response_frame(av.correlation_id, api_versions_response(av.version)), now=0.0
    )
    (hs,) = written_by_node(client).values()
    client.receive_data(node, handshake_ok(hs), now=0.0)
    (auth,) = written_by_node(client).values()
    refusal = _auth_response(auth.version, b"", ErrorCode.sasl_authentication_failed)
    client.receive_data(node, response_frame(auth.correlation_id, refusal), now=0.1)
    refused = client.authentication_refused
    assert isinstance(refused, AuthenticationFailedError)
    assert "Authentication failed" in str(refused) and "wrong" not in str(refused)
