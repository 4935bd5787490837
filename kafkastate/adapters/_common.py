"""Small pieces every adapter shares."""

from __future__ import annotations

import asyncio
import inspect
import ssl
import threading
from collections.abc import Mapping
from typing import Any

import anyio.to_thread

from kafkastate.core.client import Client
from kafkastate.core.config import resolve as resolve_options
from kafkastate.core.config import wants_tls
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaError,
    NoBrokersAvailable,
)

__all__ = [
    "check_ms",
    "fetch_token",
    "fetch_token_blocking",
    "no_brokers_error",
    "resolve",
    "tls_context",
]

Token = tuple[str, Mapping[str, str] | None]
"""A provider's answer: the token and its SASL extensions."""


def resolve(role: str, flavour: str, given: Mapping[str, Any], *, owner: str) -> dict[str, Any]:
    """:func:`kafkastate.core.config.resolve`, plus the IO halves of the mechanisms that
    need one (:data:`~kafkastate.core.config.SASL_IO_KEYS`): Kerberos security contexts for
    GSSAPI (kafkastate[gssapi]), a SigV4 signer for AWS_MSK_IAM (kafkastate[aws]).

    Raises:
        TypeError: as the core's resolve.
        KafkaConfigurationError: as the core's resolve, or the mechanism's package is
            missing.
    """
    options = resolve_options(role, flavour, given, owner=owner)
    mechanism = options.get("sasl_mechanism")
    if mechanism == "GSSAPI":
        try:
            from kafkastate.adapters._gssapi import GssapiSecurityContext  # noqa: PLC0415
        except (ImportError, OSError) as exc:
            raise KafkaConfigurationError(
                f"{owner}: sasl_mechanism='GSSAPI' needs the gssapi package: pip install "
                f"'kafkastate[gssapi]' (it needs the system's libkrb5): {exc}"
            ) from exc
        options["_sasl_gssapi"] = GssapiSecurityContext
    elif mechanism == "AWS_MSK_IAM":
        try:
            from kafkastate.adapters._aws_msk_iam import AwsMskIamSigner  # noqa: PLC0415

            options["_sasl_aws_msk_iam"] = AwsMskIamSigner()
        except ImportError as exc:
            raise KafkaConfigurationError(
                f"{owner}: sasl_mechanism='AWS_MSK_IAM' needs botocore: pip install "
                f"'kafkastate[aws]': {exc}"
            ) from exc
    return options


def no_brokers_error(client: Client, timeout: float) -> KafkaError:
    """The error for "no bootstrap server answered within ``timeout`` seconds": the
    authentication failure itself if that is why (it is not worth waiting again), else
    NoBrokersAvailable naming the servers and the last connection error."""
    last = client.last_connection_error or client.metadata.last_error
    if isinstance(last, AuthenticationFailedError):
        return last
    servers = ", ".join(f"{h}:{p}" for h, p in client.config.bootstrap_servers)
    error = NoBrokersAvailable(
        f"no bootstrap server answered within {timeout * 1000:g} ms ({servers})"
        + ("" if last is None else f"; last error: {last}")
    )
    error.__cause__ = last
    return error


def check_ms(**values: Any) -> None:
    """Each keyword is an option in ms that must be a number >= 0.

    Raises:
        KafkaConfigurationError: naming the first that is not.
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise KafkaConfigurationError(f"{name} must be a number of ms >= 0, got {value!r}")


def tls_context(options: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The TLS context of resolved options (:func:`kafkastate.core.config.resolve`): None
    unless ``security_protocol`` is SSL or SASL_SSL; else ``ssl_context`` if given, else
    one built from kafka-python's ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
    ``ssl_password`` and ``ssl_check_hostname`` (where the face has them), else the system's
    default context.

    Raises:
        KafkaConfigurationError: TLS files that cannot be loaded.
    """
    if not wants_tls(options):
        return None
    context = options["ssl_context"]
    if context is not None:
        return context  # type: ignore[no-any-return]
    cafile = options.get("ssl_cafile")
    try:
        context = ssl.create_default_context(cafile=cafile)
        context.check_hostname = bool(options.get("ssl_check_hostname", True))
        if not context.check_hostname:
            context.verify_mode = ssl.CERT_NONE if cafile is None else ssl.CERT_REQUIRED
        if options.get("ssl_certfile") is not None:
            context.load_cert_chain(
                options["ssl_certfile"], options.get("ssl_keyfile"), options.get("ssl_password")
            )
    except OSError as exc:  # ssl.SSLError included: a missing or unreadable file
        raise KafkaConfigurationError(
            f"ssl_cafile, ssl_certfile, ssl_keyfile or ssl_password: {exc}"
        ) from exc
    return context


async def fetch_token(provider: Any) -> Token:
    """Ask a token provider for a token, on asyncio or trio: ``await provider.token()``
    (aiokafka's :class:`~kafkastate.abc.AbstractTokenProvider`), or a plain ``token()``
    (kafka-python's) run in a worker thread so the event loop does not block; then
    ``extensions()`` if it has one. What to do with the answer is the core's decision.

    Raises:
        Exception: whatever the provider raised.
    """
    method = provider.token
    if inspect.iscoroutinefunction(method):
        value = await method()
    else:
        value = await anyio.to_thread.run_sync(method, abandon_on_cancel=True)
        if inspect.isawaitable(value):
            value = await value
    return value, await _extensions(provider)


async def _extensions(provider: Any) -> Mapping[str, str] | None:
    method = getattr(provider, "extensions", None)
    if method is None:
        return None
    value = method()
    if inspect.isawaitable(value):
        value = await value
    return value or None


def fetch_token_blocking(provider: Any) -> Token:
    """Ask a token provider for a token from blocking code: ``provider.token()``
    (kafka-python's ``sasl_oauth_token_provider``); a coroutine (aiokafka's async
    provider, :class:`~kafkastate.oauth.OIDCTokenProvider`) runs on an event loop of its
    own.

    Raises:
        Exception: whatever the provider raised.
    """

    value = provider.token()
    if inspect.isawaitable(value):
        value = _run(value)
    method = getattr(provider, "extensions", None)
    extensions = None if method is None else method()
    if inspect.isawaitable(extensions):
        extensions = _run(extensions)
    return value, extensions or None


def _run(awaitable: Any) -> Any:
    """Run ``awaitable`` to completion on a private event loop (a thread of its own when
    this thread already runs one)."""

    async def wrapper() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wrapper())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(wrapper())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="kafkastate token provider")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
