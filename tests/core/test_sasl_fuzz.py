"""Fuzzing the SASL server messages the client parses: SCRAM server-first and
server-final (RFC 5802, the RFC 7677 exchange as seed), OAUTHBEARER's error status, the
GSSAPI security-layer offer (RFC 4752, after the GSS library's unwrap), AWS_MSK_IAM's
answer, and the OAuth token endpoint's HTTP answer with the JWT inside (core/oauth.py).

The only allowed outcome besides success is a KafkaError (AuthenticationFailedError);
every input runs under the per-input time bound of tests/_support/fuzzing.py, so a
server that asks for an absurd PBKDF2 iteration count is caught as a hang.
"""

from __future__ import annotations

import base64
import copy
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastate.core.oauth import jwt_claims, read_token_response
from kafkastate.core.sasl import (
    AwsMskIamMechanism,
    GssapiMechanism,
    OAuthBearerMechanism,
    ScramMechanism,
)
from kafkastate.errors import AuthenticationFailedError
from tests._support.fuzzing import (
    FUZZ,
    check_each,
    check_one,
    fuzz_count,
    run_mutations,
    time_bound,
)
from tests.core.test_sasl_gssapi import ScriptedContext

NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SERVER_FIRST_SEEDS = [
    SERVER_FIRST,
    SERVER_FIRST.replace(b"i=4096", b"i=16384"),
    SERVER_FIRST + b",x=extension",
    b"e=other-error",
]
SERVER_FINAL_SEEDS = [SERVER_FINAL, b"e=invalid-proof", SERVER_FINAL + b",x=1"]
# A server-first message needs a few thousand PBKDF2 rounds when it parses; the default
# suite keeps the SCRAM share small.
SCRAM_DEFAULT = 100


def client() -> ScramMechanism:
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", random.Random(0), client_nonce=NONCE)
    m.first_message()
    return m


def after_server_first() -> ScramMechanism:
    m = client()
    m.on_challenge(SERVER_FIRST)
    return m


AFTER_FIRST = after_server_first()


def server_first(data: bytes) -> bytes | None:
    return client().on_challenge(data)


def server_final(data: bytes) -> bytes | None:
    return copy.copy(AFTER_FIRST).on_challenge(data)


def oauth_status(data: bytes) -> bytes | None:
    m = OAuthBearerMechanism("token")
    m.first_message()
    return m.on_challenge(data)


def test_seeds_complete_the_rfc7677_exchange() -> None:
    m = copy.copy(AFTER_FIRST)
    assert m.on_challenge(SERVER_FINAL) is None
    assert m.complete


@pytest.mark.fuzz_loop
def test_mutated_server_first() -> None:
    run_mutations(
        server_first, SERVER_FIRST_SEEDS, count=fuzz_count(SCRAM_DEFAULT), seed="scram-first"
    )


@pytest.mark.fuzz_loop
def test_mutated_server_final() -> None:
    run_mutations(server_final, SERVER_FINAL_SEEDS, count=fuzz_count(), seed="scram-final")


@pytest.mark.fuzz_loop
def test_mutated_oauthbearer_status() -> None:
    seeds = [b"", b'{"status":"invalid_token","scope":"x"}', b"\xff\xfe"]
    run_mutations(oauth_status, seeds, count=fuzz_count(), seed="oauth-status")


def gssapi_offer(data: bytes) -> bytes | None:
    """The server's wrapped layer offer, after the context is established (the scripted
    context's unwrap strips a ``W:`` tag: the core reads what the GSS library returns)."""
    m = GssapiMechanism(ScriptedContext("kafka@broker"))
    m.first_message()
    m.on_challenge(b"AP-REP")
    return m.on_challenge(data)


@pytest.mark.fuzz_loop
def test_mutated_gssapi_layer_offers() -> None:
    seeds = [b"W:\x01\x00\x00\x00", b"W:\x07\xff\xff\xff", b"W:\x04\x00\x10\x00", b"W:"]
    run_mutations(gssapi_offer, seeds, count=fuzz_count(), seed="gssapi-offer")


def msk_iam_answer(data: bytes) -> bytes | None:
    return AwsMskIamMechanism(lambda host: b"{}", "broker").on_challenge(data)


@pytest.mark.fuzz_loop
def test_mutated_aws_msk_iam_answers() -> None:
    seeds = [b'{"version":"2020_10_22","request-id":"a1b2"}', b"{}", b"[1]", b'"v"']
    run_mutations(msk_iam_answer, seeds, count=fuzz_count(), seed="aws-msk-iam")


def jwt(claims: bytes) -> str:
    body = base64.urlsafe_b64encode(claims).rstrip(b"=").decode()
    return f"eyJhbGciOiJub25lIn0.{body}.sig"


TOKEN_BODIES = [
    b'{"access_token":"%s","token_type":"Bearer","expires_in":3600}' % jwt(b"{}").encode(),
    b'{"access_token":"%s"}' % jwt(b'{"exp":1700000000,"sub":"a"}').encode(),
    b'{"access_token":"t","expires_in":"60"}',
    b'{"error":"invalid_client","error_description":"bad secret"}',
    b"<html>502</html>",
]
STATUSES = (200, 200, 200, 400, 401, 429, 500, 503, 302, 0, -1, 999)


def token_answer(data: bytes) -> object:
    """The token endpoint's answer: the first byte picks the HTTP status, the rest is the
    body; the JWT's claims are read as the token's lifetime source."""
    status = STATUSES[data[0] % len(STATUSES)] if data else 200
    issued = read_token_response(status, data[1:], now=10.0, wall_now=1_700_000_000.0)
    return jwt_claims(issued.token)


@pytest.mark.fuzz_loop
def test_mutated_token_endpoint_answers() -> None:
    seeds = [bytes([i]) + body for i, body in enumerate(TOKEN_BODIES)]
    run_mutations(token_answer, seeds, count=fuzz_count(), seed="oauth-token-endpoint")


@pytest.mark.fuzz_loop
def test_mutated_jwt_claims() -> None:
    seeds = [b'{"exp":1700000000,"sub":"a","scope":"x y"}', b"{}", b'{"exp":"soon"}', b"[]"]

    def claims(data: bytes) -> object:
        return jwt_claims(jwt(data)) | jwt_claims(data.decode("latin-1"))

    run_mutations(claims, seeds, count=fuzz_count(), seed="jwt-claims")


@given(st.binary(max_size=200))
@FUZZ
def test_arbitrary_server_messages(data: bytes) -> None:
    check_each(
        data, server_first, server_final, oauth_status, gssapi_offer, msk_iam_answer, token_answer
    )


@given(
    st.text(max_size=30),
    st.binary(max_size=30),
    st.one_of(st.integers(), st.text(max_size=12)),
)
@FUZZ
def test_structured_server_first(suffix: str, salt: bytes, iterations: int | str) -> None:
    """Well-formed attribute lists with chosen nonce, salt and iteration values."""
    message = f"r={NONCE}{suffix},s={base64.b64encode(salt).decode()},i={iterations}"
    with time_bound():
        check_one(server_first, message.encode())


# ------------------------------------------------------------------ crashers found


@pytest.mark.parametrize(
    "data",
    [
        # Found by test_mutated_server_first (5,000 inputs, seed "scram-first"): a
        # duplicated slice made "i=4096096", which the old cap (10,000,000) accepted:
        # ~7 s of PBKDF2 on the event loop's thread. Kafka never stores more than 16384.
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hIlj)hNlF$k0,"
        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096096",
        SERVER_FIRST.replace(b"i=4096", b"i=10000000"),
        SERVER_FIRST.replace(b"i=4096", b"i=16385"),
    ],
)
def test_regression_iteration_count_above_kafkas_maximum(data: bytes) -> None:
    with time_bound(0.5), pytest.raises(AuthenticationFailedError, match="iteration count"):
        server_first(data)
