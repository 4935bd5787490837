"""The signing half of SASL/AWS_MSK_IAM: an AWS SigV4 pre-signed ``kafka-cluster:Connect``.

Amazon MSK's IAM access control takes one SASL message: a JSON object holding the query
parameters of a SigV4 pre-signed ``GET https://<broker host>/?Action=kafka-cluster:Connect``
for the service ``kafka-cluster`` (version ``2020_10_22``, as the aws-msk-iam-auth Java
library and kafka-python 3 send it). :func:`msk_iam_payload` computes it from explicit
inputs (no clock, no IO: testable against botocore's own signer);
:class:`AwsMskIamSigner` adds the current time and credentials from the standard AWS chain
(environment, shared files, SSO, container and instance roles) through botocore.
Imported only when a client uses AWS_MSK_IAM (``kafkastate[aws]``).

The session token and the secret key never appear in a repr, a log or an error message.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import re
import urllib.parse
from typing import Any, Final

from kafkastate._version import __version__
from kafkastate.errors import AuthenticationFailedError

__all__ = ["AwsMskIamSigner", "msk_iam_payload"]

VERSION: Final = "2020_10_22"
SERVICE: Final = "kafka-cluster"
ACTION: Final = "kafka-cluster:Connect"
ALGORITHM: Final = "AWS4-HMAC-SHA256"
EXPIRES: Final = 900
"""Seconds the signature stays valid (the Java library's default)."""
_EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()
# MSK broker names end in .kafka.<region>.amazonaws.com (or .kafka-serverless.<region>...)
_REGION_IN_HOST: Final = re.compile(r"\.kafka(?:-serverless)?\.([a-z0-9-]+)\.amazonaws\.com")


def _quote(text: str) -> str:
    # SigV4 URI-encoding: everything but the RFC 3986 unreserved characters.
    return urllib.parse.quote(text, safe="-_.~")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.digest(key, text.encode(), "sha256")


def msk_iam_payload(
    *,
    host: str,
    region: str,
    access_key: str,
    secret_key: str,
    session_token: str | None,
    when: datetime.datetime,
    user_agent: str = f"kafkastate/{__version__}",
) -> bytes:
    """The AWS_MSK_IAM initial message, signed at ``when``.

    Args:
        host: the broker's host name (signed as the ``host`` header).
        region: the cluster's AWS region.
        access_key: the AWS access key id.
        secret_key: its secret key.
        session_token: the session token of temporary credentials, or None.
        when: the signing time (timezone-aware, or naive UTC).
        user_agent: sent along, unsigned.

    Returns:
        The compact JSON object, UTF-8 encoded.
    """
    if when.tzinfo is not None:
        when = when.astimezone(datetime.UTC)
    date = when.strftime("%Y%m%d")
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{date}/{region}/{SERVICE}/aws4_request"
    params = {
        "Action": ACTION,
        "X-Amz-Algorithm": ALGORITHM,
        "X-Amz-Credential": f"{access_key}/{scope}",
        "X-Amz-Date": stamp,
        "X-Amz-Expires": str(EXPIRES),
        "X-Amz-SignedHeaders": "host",
    }
    if session_token:
        params["X-Amz-Security-Token"] = session_token
    query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(params.items()))
    canonical_request = "\n".join(("GET", "/", query, f"host:{host}\n", "host", _EMPTY_SHA256))
    string_to_sign = "\n".join(
        (ALGORITHM, stamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest())
    )
    key = f"AWS4{secret_key}".encode()
    for part in (date, region, SERVICE, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, string_to_sign.encode(), "sha256").hexdigest()
    message = {
        "version": VERSION,
        "host": host,
        "user-agent": user_agent,
        "action": ACTION,
        "x-amz-algorithm": ALGORITHM,
        "x-amz-credential": params["X-Amz-Credential"],
        "x-amz-date": stamp,
        "x-amz-signedheaders": "host",
        "x-amz-expires": str(EXPIRES),
        "x-amz-signature": signature,
    }
    if session_token:
        message["x-amz-security-token"] = session_token
    return json.dumps(message, separators=(",", ":")).encode()


def region_of_host(host: str) -> str | None:
    """The AWS region named in an MSK broker host name, if it names one."""
    found = _REGION_IN_HOST.search(host)
    return found.group(1) if found else None


class AwsMskIamSigner:
    """Signs AWS_MSK_IAM messages with the standard AWS credentials chain (botocore).

    Each call reads the credentials again (botocore refreshes expiring ones) and the clock,
    so every connection and re-authentication gets a fresh signature.

    Args:
        region: the cluster's region (default: botocore's configured region, else the one
            in the broker's host name).
        session: a ``botocore.session.Session`` (default: a new one).

    Raises:
        KafkaConfigurationError: botocore is not installed (from the import).
    """

    def __init__(self, *, region: str | None = None, session: Any = None) -> None:
        import botocore.session  # noqa: PLC0415 - optional extra, needed only for MSK IAM

        self._session = botocore.session.Session() if session is None else session
        self._region = region

    def __repr__(self) -> str:
        return f"<AwsMskIamSigner region={self._region!r}>"

    def __call__(self, host: str) -> bytes:
        """The signed message for ``host``.

        Raises:
            AuthenticationFailedError: no credentials or region could be found.
        """
        credentials = self._session.get_credentials()
        if credentials is None:
            raise AuthenticationFailedError(
                "AWS_MSK_IAM: no AWS credentials found in the standard chain "
                "(AWS_ACCESS_KEY_ID..., ~/.aws, AWS_PROFILE, container or instance role)"
            )
        frozen = credentials.get_frozen_credentials()
        region = self._region or self._session.get_config_variable("region") or region_of_host(host)
        if not region:
            raise AuthenticationFailedError(
                f"AWS_MSK_IAM: no AWS region configured and none in the host name {host!r}"
            )
        return msk_iam_payload(
            host=host,
            region=region,
            access_key=frozen.access_key,
            secret_key=frozen.secret_key,
            session_token=frozen.token,
            when=datetime.datetime.now(datetime.UTC),
        )
