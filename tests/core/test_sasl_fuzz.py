"""Fuzzing the SASL server messages the client parses: SCRAM server-first and
server-final (RFC 5802, the RFC 7677 exchange as seed) and OAUTHBEARER's error status.

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

from kafkastate.core.sasl import OAuthBearerMechanism, ScramMechanism
from kafkastate.errors import AuthenticationFailedError
from tests._support.fuzzing import (
    FUZZ,
    check_each,
    check_one,
    fuzz_count,
    run_mutations,
    time_bound,
)

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
SCRAM_DEFAULT = 400


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


def test_mutated_server_first() -> None:
    run_mutations(
        server_first, SERVER_FIRST_SEEDS, count=fuzz_count(SCRAM_DEFAULT), seed="scram-first"
    )


def test_mutated_server_final() -> None:
    run_mutations(server_final, SERVER_FINAL_SEEDS, count=fuzz_count(), seed="scram-final")


def test_mutated_oauthbearer_status() -> None:
    seeds = [b"", b'{"status":"invalid_token","scope":"x"}', b"\xff\xfe"]
    run_mutations(oauth_status, seeds, count=fuzz_count(), seed="oauth-status")


@given(st.binary(max_size=200))
@FUZZ
def test_arbitrary_server_messages(data: bytes) -> None:
    check_each(data, server_first, server_final, oauth_status)


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
