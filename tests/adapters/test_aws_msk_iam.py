"""AWS_MSK_IAM signing, checked against botocore's own SigV4 signer, and the payload's shape.

There is no Amazon MSK here: the broker side of IAM access control is AWS's closed-source
plugin. What can be checked locally is that our signature is the one AWS's reference signer
computes for the same inputs, and that the message has the fields MSK reads.
"""

from __future__ import annotations

import base64
import datetime
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

botocore = pytest.importorskip("botocore", reason="botocore missing: pip install 'kafkastate[aws]'")

from botocore.auth import SigV4QueryAuth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

from kafkastate.adapters._aws_msk_iam import (  # noqa: E402
    AwsMskIamSigner,
    msk_iam_payload,
    region_of_host,
)
from kafkastate.adapters._common import resolve  # noqa: E402
from kafkastate.core.config import client_config  # noqa: E402
from kafkastate.core.sasl import OAuthBearerMechanism  # noqa: E402
from kafkastate.errors import AuthenticationFailedError  # noqa: E402

HOST = "b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "IQoJb3JpZ2luX2VjE+/session=token"


def _botocore_query(token: str | None, region: str) -> dict[str, str]:
    request = AWSRequest(
        method="GET", url=f"https://{HOST}/", params={"Action": "kafka-cluster:Connect"}
    )
    creds = Credentials("AKIDEXAMPLE", SECRET, token)
    SigV4QueryAuth(creds, "kafka-cluster", region, expires=900).add_auth(request)
    query = urllib.parse.urlsplit(request.url).query
    return dict(urllib.parse.parse_qsl(query, keep_blank_values=True))


@pytest.mark.parametrize("token", [None, TOKEN], ids=["long-term", "session"])
@pytest.mark.parametrize("region", ["eu-west-1", "us-gov-west-1"])
def test_signature_equals_botocores(token: str | None, region: str) -> None:
    reference = _botocore_query(token, region)
    when = datetime.datetime.strptime(reference["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=datetime.UTC
    )
    ours = json.loads(
        msk_iam_payload(
            host=HOST,
            region=region,
            access_key="AKIDEXAMPLE",
            secret_key=SECRET,
            session_token=token,
            when=when,
        )
    )
    assert {k.lower(): v for k, v in reference.items() if k != "Action"} == {
        k: v for k, v in ours.items() if k.startswith("x-amz-")
    }
    assert ours["x-amz-signature"] == reference["X-Amz-Signature"]


def test_payload_shape() -> None:
    when = datetime.datetime(2024, 2, 29, 23, 59, 58, tzinfo=datetime.UTC)
    raw = msk_iam_payload(
        host=HOST,
        region="eu-west-1",
        access_key="AKIDEXAMPLE",
        secret_key=SECRET,
        session_token=TOKEN,
        when=when,
        user_agent="ua/1",
    )
    assert b" " not in raw  # compact JSON, as the Java library sends
    message = json.loads(raw)
    assert list(message) == [
        "version",
        "host",
        "user-agent",
        "action",
        "x-amz-algorithm",
        "x-amz-credential",
        "x-amz-date",
        "x-amz-signedheaders",
        "x-amz-expires",
        "x-amz-signature",
        "x-amz-security-token",
    ]
    assert message["version"] == "2020_10_22"
    assert message["host"] == HOST
    assert message["user-agent"] == "ua/1"
    assert message["action"] == "kafka-cluster:Connect"
    assert message["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    scope = "20240229/eu-west-1/kafka-cluster/aws4_request"
    assert message["x-amz-credential"] == f"AKIDEXAMPLE/{scope}"
    assert message["x-amz-date"] == "20240229T235958Z"
    assert message["x-amz-signedheaders"] == "host"
    assert message["x-amz-expires"] == "900"
    assert len(message["x-amz-signature"]) == 64
    assert message["x-amz-security-token"] == TOKEN
    assert SECRET.encode() not in raw  # the secret key signs, it is never sent


def test_region_from_host() -> None:
    assert region_of_host(HOST) == "eu-west-1"
    assert region_of_host("boot-x.c1.kafka-serverless.ap-south-2.amazonaws.com") == "ap-south-2"
    assert region_of_host("localhost") is None


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A credentials chain that reads only the environment (no ~/.aws, no instance role)."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)


@pytest.mark.usefixtures("aws_env")
def test_signer_uses_the_standard_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    signer = AwsMskIamSigner()
    message = json.loads(signer(HOST))  # the region comes from the host name
    assert message["x-amz-credential"].startswith("AKIDEXAMPLE/")
    assert "/eu-west-1/kafka-cluster/" in message["x-amz-credential"]
    assert message["x-amz-security-token"] == TOKEN
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    assert "/us-east-2/" in json.loads(AwsMskIamSigner()(HOST))["x-amz-credential"]
    for text in (repr(signer), str(signer)):
        assert SECRET not in text and TOKEN not in text


@pytest.mark.usefixtures("aws_env")
def test_signer_without_credentials_or_region_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AuthenticationFailedError, match="region"):
        AwsMskIamSigner()("localhost")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    with pytest.raises(AuthenticationFailedError, match="no AWS credentials"):
        AwsMskIamSigner()(HOST)


@pytest.mark.usefixtures("aws_env")
def test_the_faces_wire_the_signer_and_never_show_secrets() -> None:
    options = resolve(
        "producer",
        "kafka-python",
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"},
        owner="KafkaProducer",
    )
    config = client_config(options).connection
    assert isinstance(config.sasl_aws_msk_iam, AwsMskIamSigner)
    payload = config.sasl_aws_msk_iam(HOST)
    assert TOKEN.encode() in payload  # the broker needs the session token...
    for text in (repr(config), repr(options)):  # ...but nothing prints it
        assert SECRET not in text and TOKEN not in text


# ------------------------------------------------- the OAUTHBEARER route (the recipe)


class MskTokenProvider:
    """docs/security.md's recipe: aws-msk-iam-sasl-signer-python behind kafka-python's
    token-provider shape (``token()``), for sasl_mechanism="OAUTHBEARER"."""

    def __init__(self, region: str) -> None:
        self.region = region

    def token(self) -> str:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider  # noqa: PLC0415

        token, _expiry_ms = MSKAuthTokenProvider.generate_auth_token(self.region)
        return str(token)


@pytest.mark.usefixtures("aws_env")
def test_the_oauthbearer_recipe_gives_a_signed_connect_token() -> None:
    pytest.importorskip("aws_msk_iam_sasl_signer", reason="aws-msk-iam-sasl-signer-python missing")
    provider: Any = MskTokenProvider("eu-west-1")
    assert callable(provider.token)
    token = provider.token()
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert query["Action"] == "kafka-cluster:Connect"
    assert "/eu-west-1/kafka-cluster/aws4_request" in query["X-Amz-Credential"]
    assert query["X-Amz-Security-Token"] == TOKEN
    # the token rides in an ordinary OAUTHBEARER initial response
    message = OAuthBearerMechanism(token).first_message()
    assert message == f"n,,\x01auth=Bearer {token}\x01\x01".encode()
