"""GSSAPI (RFC 4752) and AWS_MSK_IAM sequencing in the core, without Kerberos or AWS.

The Kerberos calls are behind the GssapiContext shape; here a scripted context stands in for
the GSS-API library (its tokens are opaque to the core anyway), and the wrap/unwrap are an
invertible tagging so the test sees exactly what the core asked to wrap. The real library
and a real KDC are exercised in tests/integration/test_gssapi.py.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.config import client_config, resolve
from kafkastate.core.connection import (
    BrokerConnection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionReady,
)
from kafkastate.core.sasl import (
    AwsMskIamMechanism,
    GssapiMechanism,
    kerberos_target,
    make_mechanism,
)
from kafkastate.errors import AuthenticationFailedError, KafkaConfigurationError
from tests._support.peer import response, response_frame
from tests.core.test_connection import _auth_response, api_versions_response, drain, sent


class ScriptedContext:
    """Two-leg Kerberos exchange: AP-REQ out, AP-REP in, then complete."""

    def __init__(self, service: str, *, fail_at_start: bool = False) -> None:
        self.service = service
        self.steps: list[bytes | None] = []
        self.wrapped: list[bytes] = []
        self._complete = False
        self._fail_at_start = fail_at_start

    def step(self, token: bytes | None) -> bytes | None:
        self.steps.append(token)
        if token is None:
            if self._fail_at_start:
                raise AuthenticationFailedError("GSSAPI: No Kerberos credentials available")
            return b"AP-REQ"
        if token != b"AP-REP":
            raise AuthenticationFailedError("GSSAPI: bad token")
        self._complete = True
        return None

    @property
    def complete(self) -> bool:
        return self._complete

    def unwrap(self, message: bytes) -> bytes:
        if not message.startswith(b"W:"):
            raise AuthenticationFailedError("GSSAPI: integrity check failed")
        return message[2:]

    def wrap(self, message: bytes) -> bytes:
        self.wrapped.append(message)
        return b"W:" + message


def test_gssapi_sequence_ends_with_no_security_layer() -> None:
    ctx = ScriptedContext("kafka@b1")
    m = GssapiMechanism(ctx)
    assert m.first_message() == b"AP-REQ"
    # the context completes on the server's token: an empty response asks for the offer
    assert m.on_challenge(b"AP-REP") == b""
    # offer: all three layers, 64 KiB; we choose none (0x01) and a size of 0
    assert m.on_challenge(b"W:\x07\x00\x01\x00") == b"W:\x01\x00\x00\x00"
    assert not m.complete
    assert m.on_challenge(b"") is None
    assert m.complete
    assert ctx.steps == [None, b"AP-REP"]


def test_gssapi_authzid_goes_after_the_layer_choice() -> None:
    ctx = ScriptedContext("kafka@b1")
    m = GssapiMechanism(ctx, authzid="svc")
    m.first_message()
    m.on_challenge(b"AP-REP")
    m.on_challenge(b"W:\x01\x00\x00\x00")
    assert ctx.wrapped == [b"\x01\x00\x00\x00svc"]


@pytest.mark.parametrize(
    ("offer", "match"),
    [
        (b"W:\x06\x00\x10\x00", "requires a SASL security layer"),
        (b"W:\x01\x00\x00", "3 bytes, not 4"),
        (b"tampered", "integrity"),
    ],
)
def test_gssapi_refuses_bad_layer_offers(offer: bytes, match: str) -> None:
    m = GssapiMechanism(ScriptedContext("kafka@b1"))
    m.first_message()
    m.on_challenge(b"AP-REP")
    with pytest.raises(AuthenticationFailedError, match=match):
        m.on_challenge(offer)


def test_gssapi_refuses_a_message_after_the_end() -> None:
    m = GssapiMechanism(ScriptedContext("kafka@b1"))
    m.first_message()
    m.on_challenge(b"AP-REP")
    m.on_challenge(b"W:\x01\x00\x00\x00")
    with pytest.raises(AuthenticationFailedError, match="unexpected"):
        m.on_challenge(b"more")


@pytest.mark.parametrize(
    ("domain", "expected"), [(None, "kafka@broker1.example"), ("realm.host", "kafka@realm.host")]
)
def test_gssapi_service_name_is_service_at_host(domain: str | None, expected: str) -> None:
    made: list[str] = []

    def factory(service: str) -> ScriptedContext:
        made.append(service)
        return ScriptedContext(service)

    make_mechanism(
        "GSSAPI", host="broker1.example", kerberos_domain_name=domain, gssapi=factory
    ).first_message()
    assert made == [expected]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kafka@other.example", ("kafka@other.example", False)),  # kafka-python's text form
        ("kafka/other.example@REALM", ("kafka/other.example@REALM", True)),  # a principal
        ("svc", ("svc", False)),
    ],
)
def test_gssapi_kerberos_name_overrides_service_and_domain(
    name: str, expected: tuple[str, bool]
) -> None:
    made: list[tuple[str, bool]] = []

    def factory(target: str, *, principal: bool = False) -> ScriptedContext:
        made.append((target, principal))
        return ScriptedContext(target)

    make_mechanism(
        "GSSAPI",
        host="broker1.example",
        kerberos_service_name="ignored",
        kerberos_domain_name="ignored.example",
        kerberos_name=name,
        gssapi=factory,
    ).first_message()
    assert made == [expected]


def test_gssapi_kerberos_name_object_is_passed_as_it_is() -> None:
    class Name:  # stands in for a gssapi.Name: the core never looks inside
        pass

    given = Name()
    assert kerberos_target("kafka", "broker1.example", given) == (given, False)
    assert kerberos_target("kafka", None, None) is None  # no host, no override


@pytest.mark.parametrize("bad", ["", 3, b"kafka@host"])
def test_sasl_kerberos_name_option_is_checked(bad: object) -> None:
    with pytest.raises(KafkaConfigurationError, match="sasl_kerberos_name"):
        resolve(
            "producer",
            "kafka-python",
            {"bootstrap_servers": "b:1", "sasl_kerberos_name": bad},
            owner="KafkaProducer",
        )


def test_gssapi_needs_a_context_factory() -> None:
    with pytest.raises(KafkaConfigurationError, match=r"kafkastate\[gssapi\]"):
        ConnectionConfig(sasl_mechanism="GSSAPI")
    with pytest.raises(KafkaConfigurationError, match="host name"):
        make_mechanism("GSSAPI", gssapi=ScriptedContext)


def _gssapi_connection(factory: Any, **extra: Any) -> tuple[BrokerConnection, Any]:
    config = ConnectionConfig(sasl_mechanism="GSSAPI", sasl_gssapi=factory, **extra)
    conn = BrokerConnection(config, rng=random.Random(3), host="127.0.0.1")
    conn.connection_made(now=0)
    (av,) = sent(conn)
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=0)
    (hs,) = sent(conn)
    assert hs.body.mechanism == "GSSAPI"
    conn.receive_data(
        response_frame(hs.correlation_id, response(17, 1, error_code=ErrorCode.none)), now=0
    )
    return conn, hs


def test_gssapi_over_a_connection() -> None:
    contexts: list[ScriptedContext] = []

    def factory(service: str) -> ScriptedContext:
        contexts.append(ScriptedContext(service))
        return contexts[-1]

    conn, _ = _gssapi_connection(factory, sasl_kerberos_domain_name="localhost")
    answers = [b"AP-REP", b"W:\x01\x00\x00\x00", b""]
    expected = [b"AP-REQ", b"", b"W:\x01\x00\x00\x00"]
    for answer, want in zip(answers, expected, strict=True):
        (auth,) = sent(conn)
        assert auth.body.auth_bytes == want
        conn.receive_data(
            response_frame(auth.correlation_id, _auth_response(auth.version, answer)), now=0
        )
    assert [type(e) for e in drain(conn)] == [ConnectionReady]
    assert [c.service for c in contexts] == ["kafka@localhost"]


def test_gssapi_without_credentials_closes_before_any_token() -> None:
    conn, _ = _gssapi_connection(lambda s: ScriptedContext(s, fail_at_start=True))
    assert sent(conn) == []
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed)
    assert isinstance(closed.error, AuthenticationFailedError)
    assert "No Kerberos credentials" in str(closed.error)


def test_gssapi_options_reach_the_connection() -> None:
    options = resolve(
        "consumer",
        "kafka-python",
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "GSSAPI",
            "sasl_kerberos_service_name": "kfk",
            "sasl_kerberos_domain_name": "kdc.example",
        },
        owner="KafkaConsumer",
    )
    options["_sasl_gssapi"] = ScriptedContext
    conn = client_config(options).connection
    assert (conn.sasl_kerberos_service_name, conn.sasl_kerberos_domain_name) == (
        "kfk",
        "kdc.example",
    )
    assert conn.sasl_gssapi is ScriptedContext
    assert conn.sasl_kerberos_name is None
    options["sasl_kerberos_name"] = "kafka/kdc.example@REALM"
    assert client_config(options).connection.sasl_kerberos_name == "kafka/kdc.example@REALM"


# ------------------------------------------------------------------------ AWS_MSK_IAM


def test_aws_msk_iam_one_message_and_a_json_answer() -> None:
    hosts: list[str] = []

    def signer(host: str) -> bytes:
        hosts.append(host)
        return b'{"version":"2020_10_22"}'

    m = AwsMskIamMechanism(signer, "b-1.c.kafka.eu-west-1.amazonaws.com")
    assert m.first_message() == b'{"version":"2020_10_22"}'
    assert hosts == ["b-1.c.kafka.eu-west-1.amazonaws.com"]
    answer = json.dumps({"version": "2020_10_22", "request-id": "r-1"}).encode()
    assert m.on_challenge(answer) is None
    assert m.complete


@pytest.mark.parametrize("answer", [b"", b"not json", b"[1]", b"\xff"])
def test_aws_msk_iam_refuses_other_answers(answer: bytes) -> None:
    m = AwsMskIamMechanism(lambda host: b"{}", "h")
    m.first_message()
    with pytest.raises(AuthenticationFailedError, match="AWS_MSK_IAM"):
        m.on_challenge(answer)


def test_aws_msk_iam_needs_sasl_ssl_and_a_signer() -> None:
    with pytest.raises(KafkaConfigurationError, match="SASL_SSL"):
        resolve(
            "producer",
            "kafka-python",
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "AWS_MSK_IAM"},
            owner="KafkaProducer",
        )
    with pytest.raises(KafkaConfigurationError, match=r"kafkastate\[aws\]"):
        ConnectionConfig(sasl_mechanism="AWS_MSK_IAM")


def test_aws_msk_iam_signer_is_not_in_the_repr() -> None:
    def signer(host: str) -> bytes:
        return b"{}"

    config = ConnectionConfig(sasl_mechanism="AWS_MSK_IAM", sasl_aws_msk_iam=signer)
    assert "signer" not in repr(config)


def test_aws_msk_iam_refusal_does_not_echo_the_signed_message() -> None:
    secret = "SESSION-TOKEN-SECRET"

    def signer(host: str) -> bytes:
        return json.dumps({"version": "2020_10_22", "x-amz-security-token": secret}).encode()

    config = ConnectionConfig(sasl_mechanism="AWS_MSK_IAM", sasl_aws_msk_iam=signer)
    conn = BrokerConnection(config, rng=random.Random(3), host="b-1.kafka.eu-west-1.amazonaws.com")
    conn.connection_made(now=0)
    (av,) = sent(conn)
    conn.receive_data(response_frame(av.correlation_id, api_versions_response(av.version)), now=0)
    (hs,) = sent(conn)
    conn.receive_data(
        response_frame(hs.correlation_id, response(17, 1, error_code=ErrorCode.none)), now=0
    )
    (auth,) = sent(conn)
    assert secret.encode() in auth.body.auth_bytes  # the broker needs it
    refusal = _auth_response(auth.version, b"", ErrorCode.sasl_authentication_failed)
    conn.receive_data(response_frame(auth.correlation_id, refusal), now=0)
    (closed,) = drain(conn)
    assert isinstance(closed, ConnectionClosed)
    assert isinstance(closed.error, AuthenticationFailedError)
    for text in (str(closed.error), repr(closed), repr(config)):
        assert secret not in text
