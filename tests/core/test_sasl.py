"""SASL mechanisms: RFC test vectors and malformed server messages."""

from __future__ import annotations

import random

import pytest

from kafkastate.core.sasl import (
    OAuthBearerMechanism,
    PlainMechanism,
    ScramMechanism,
    make_mechanism,
)
from kafkastate.errors import AuthenticationFailedError, KafkaConfigurationError


def test_plain_message() -> None:
    m = PlainMechanism("user", "pass")
    assert m.first_message() == b"\0user\0pass"
    assert not m.complete
    assert m.on_challenge(b"") is None
    assert m.complete


def test_scram_sha256_rfc7677_vector() -> None:
    # RFC 7677 section 3 example exchange.
    m = ScramMechanism(
        "SCRAM-SHA-256", "user", "pencil", random.Random(0), client_nonce="rOprNGfwEbeRWgbNEkqO"
    )
    assert m.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = m.on_challenge(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert m.on_challenge(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert m.complete


@pytest.mark.parametrize(
    ("server_first", "match"),
    [
        (b"r=xyzdef,s=AAAA,i=4096", "nonce"),
        (b"r=abc,s=AAAA,i=4096", "nonce"),
        (b"r=abcdef,s=AAAA,i=10", "iteration"),
        (b"r=abcdef,s=!!,i=4096", "malformed"),
        (b"r=abcdef,i=4096", "malformed"),
        (b"garbage", "malformed"),
        (b"\xff\xfe", "UTF-8"),
        (b"e=invalid-proof", "invalid-proof"),
    ],
)
def test_scram_rejects_bad_server_first(server_first: bytes, match: str) -> None:
    m = ScramMechanism("SCRAM-SHA-512", "u", "p", random.Random(1), client_nonce="abc")
    m.first_message()
    with pytest.raises(AuthenticationFailedError, match=match):
        m.on_challenge(server_first)


def test_scram_nonce_comes_from_rng() -> None:
    a = ScramMechanism("SCRAM-SHA-256", "u", "p", random.Random(5)).first_message()
    b = ScramMechanism("SCRAM-SHA-256", "u", "p", random.Random(5)).first_message()
    c = ScramMechanism("SCRAM-SHA-256", "u", "p", random.Random(6)).first_message()
    assert a == b != c


def test_scram_username_escaping() -> None:
    m = ScramMechanism("SCRAM-SHA-256", "a=b,c", "p", random.Random(0), client_nonce="n")
    assert m.first_message() == b"n,,n=a=3Db=2Cc,r=n"


def test_oauthbearer() -> None:
    m = OAuthBearerMechanism("t0k")
    assert m.first_message() == b"n,,\x01auth=Bearer t0k\x01\x01"
    with pytest.raises(AuthenticationFailedError, match="invalid_token"):
        m.on_challenge(b'{"status":"invalid_token"}')
    with pytest.raises(KafkaConfigurationError):
        OAuthBearerMechanism("")
    with pytest.raises(KafkaConfigurationError):
        OAuthBearerMechanism("t", {"auth": "x"})


def test_make_mechanism_errors() -> None:
    with pytest.raises(KafkaConfigurationError, match="GSSAPI"):
        make_mechanism("GSSAPI")
    with pytest.raises(KafkaConfigurationError, match="sasl_plain_username"):
        make_mechanism("PLAIN", username="u")
    with pytest.raises(KafkaConfigurationError, match="token"):
        make_mechanism("OAUTHBEARER")
