"""Small pieces every adapter shares."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import ssl
import threading
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final, Protocol

import anyio.to_thread

from kafkastate.core.client import Client
from kafkastate.core.config import SECRET_OPTIONS, TLS_FILE_OPTIONS, wants_tls
from kafkastate.core.config import resolve as resolve_options
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaError,
    NoBrokersAvailable,
    SecurityProtocolMismatchError,
    SslAuthenticationError,
)
from kafkastate.helpers import create_ssl_context

log = logging.getLogger("kafkastate.tls")

__all__ = [
    "MACHINE_HOOKS",
    "MachineHooks",
    "READ_MAX",
    "READ_MIN",
    "check_ms",
    "fetch_token",
    "fetch_token_blocking",
    "machine_built",
    "machine_rng",
    "next_read_size",
    "no_brokers_error",
    "resolve",
    "report_statistics",
    "tls_context",
    "tls_failure",
    "tls_hangup",
]

Token = tuple[str, Mapping[str, str] | None]
"""A provider's answer: the token and its SASL extensions."""


READ_MIN: Final = 64 << 10
"""The bytes a socket read asks for first, and again after a read that did not fill it."""
READ_MAX: Final = 1 << 20
"""The most bytes one socket read asks for."""


def next_read_size(asked: int, got: int) -> int:
    """The bytes the next read of a connection asks for, every adapter's rule: twice what
    the last read asked after one that filled it (a large response streaming in), up to
    :data:`READ_MAX`; :data:`READ_MIN` after one that did not.

    A read allocates the whole size it asks for, then shrinks the buffer to what came
    (``socket.recv``, trio's ``receive_some``): 1 MiB reads of small, long-lived responses
    fragmented glibc's heap (a process's RSS grew with every connect/close cycle;
    docs/reliability.md#resource-bounds).

    Args:
        asked: what the last read asked for.
        got: the bytes it returned.
    """
    return min(asked * 2, READ_MAX) if got >= asked else READ_MIN


class MachineHooks(Protocol):
    """What a simulator running adapter code wants of the machines the adapter builds."""

    def rng(self) -> random.Random:
        """A new machine's randomness."""
        ...

    def built(self, machine: Any) -> None:
        """A consumer machine was built (the simulator's invariants read it)."""
        ...


MACHINE_HOOKS: ContextVar[MachineHooks | None] = ContextVar(
    "kafkastate_machine_hooks", default=None
)
"""Unset outside the simulator. Inside it (:mod:`kafkastate.sim.aio` sets it for the code it
runs), the async adapter's machines draw their randomness -- backoff jitter, sticky
partitions, SCRAM nonces, KIP-848 member ids -- from the seed, so a seed replays, and the
simulator sees each consumer machine built."""


def machine_rng() -> random.Random:
    """A new machine's randomness: ``random.SystemRandom()``, or the simulator's seeded
    generator inside a simulated run (:data:`MACHINE_HOOKS`)."""
    hooks = MACHINE_HOOKS.get()
    return random.SystemRandom() if hooks is None else hooks.rng()


def machine_built(machine: Any) -> None:
    """Tell the simulator, if one runs this code, of a consumer machine built."""
    hooks = MACHINE_HOOKS.get()
    if hooks is not None:
        hooks.built(machine)


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


stats_log = logging.getLogger("kafkastate.stats")


def call_logged(fn: Callable[[Any], Any], arg: Any, *, log: logging.Logger, what: str) -> None:
    """Run the user's ``fn(arg)`` from the client's IO task or thread: what it raises is
    logged (``what`` names the callback), never raised there -- it would stop the client
    and fail every other pending record (asyncio's and kafka-python's futures log a
    raising callback too)."""
    try:
        fn(arg)
    except Exception:  # a user callback: logged, never fatal
        log.exception("%s raised", what)


def report_statistics(callback: Callable[[Any], Any] | None, stats: dict[str, Any]) -> None:
    """Hand a statistics report to the user's ``stats_cb`` (if any); what it raises is
    logged, never raised into the client's IO task or thread."""
    if callback is None:
        return
    try:
        callback(stats)
    except Exception:  # a user callback: logged, never fatal
        stats_log.exception("stats_cb raised")


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
    """The TLS context of resolved options (:func:`kafkastate.core.config.resolve`, which
    refuses ``ssl_context`` together with ``ssl_*`` files): None unless
    ``security_protocol`` is SSL or SASL_SSL; else ``ssl_context`` if given, else
    :func:`kafkastate.helpers.create_ssl_context` of kafka-python's ``ssl_cafile``,
    ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_crlfile``, ``ssl_ciphers`` and
    ``ssl_check_hostname`` (none given: the system's trust store, hostnames checked).

    Raises:
        KafkaConfigurationError: TLS files that cannot be loaded, named by option (never
            showing ``ssl_password``).
    """
    if not wants_tls(options):
        return None
    context = options["ssl_context"]
    if context is not None:
        log.debug("TLS: the given ssl_context")
        return context  # type: ignore[no-any-return]
    shown = ", ".join(
        f"{name}={'<set>' if name in SECRET_OPTIONS else options[name]}"
        for name in TLS_FILE_OPTIONS
        if options[name] is not None
    )
    log.debug(
        "TLS: a context from %s, ssl_check_hostname=%s",
        shown or "the system's trust store",
        options["ssl_check_hostname"],
    )
    try:
        return create_ssl_context(
            cafile=options["ssl_cafile"],
            certfile=options["ssl_certfile"],
            keyfile=options["ssl_keyfile"],
            password=options["ssl_password"],
            crlfile=options["ssl_crlfile"],
            ciphers=options["ssl_ciphers"],
            check_hostname=options["ssl_check_hostname"],
        )
    except KafkaConfigurationError as exc:
        # the helper names its keywords ("TLS certfile, keyfile or password: <reason>");
        # the user gave the options
        head, sep, reason = str(exc).partition(": ")
        head = head.replace("cafile, capath or cadata", "cafile")
        for word in ("cafile", "crlfile", "ciphers", "certfile", "keyfile", "password"):
            head = head.replace(word, f"ssl_{word}")
        raise KafkaConfigurationError(f"{head}{sep}{reason}") from exc


# OpenSSL's X509_V_ERR_* codes (x509_vfy.h) a user can act on
_VERIFY_HINTS: Final = {
    2: "its issuer is not a trusted CA (ssl_cafile, or the ssl_context's CAs)",
    9: "it is not valid yet",
    10: "it has expired",
    18: "it is self-signed and not trusted (ssl_cafile)",
    19: "its chain ends in a CA that is not trusted (ssl_cafile)",
    20: "its issuer is not a trusted CA (ssl_cafile, or the ssl_context's CAs)",
    21: "its issuer is not a trusted CA (ssl_cafile, or the ssl_context's CAs)",
    3: "no CRL of its CA was found (ssl_crlfile must hold one for each CA)",
    23: "it is revoked (ssl_crlfile)",
    62: "it does not name the host connected to (ssl_check_hostname)",
    64: "it does not name the IP address connected to (ssl_check_hostname)",
}
_EOF_REASONS: Final = frozenset({"UNEXPECTED_EOF_WHILE_READING", "EOF"})


def tls_hangup(host: str, port: int) -> SecurityProtocolMismatchError:
    """The error for a broker that closed the connection during the TLS handshake (what a
    plaintext listener does with a ClientHello)."""
    return SecurityProtocolMismatchError(
        f"TLS with the broker at {host}:{port} failed: the broker closed the connection during "
        "the TLS handshake, as a PLAINTEXT or SASL_PLAINTEXT listener does: check the port, "
        "or set security_protocol='PLAINTEXT' (or 'SASL_PLAINTEXT') for it"
    )


def tls_failure(error: BaseException, host: str, port: int, *, handshake: bool) -> BaseException:
    """What a connection error on the way to ``host:port`` means, for the core, which
    retries connection errors but not :class:`AuthenticationFailedError`: a refused
    certificate either way is :class:`SslAuthenticationError` (with TLS 1.3 the broker's
    refusal of ours arrives on the first read, so reads ask too); the server hanging up
    (EOF or reset) while a TLS handshake was under way (``handshake``) is
    :class:`SecurityProtocolMismatchError` (a plaintext listener reads the ClientHello as an
    oversized request and closes); anything else is returned as is. anyio's wrapping
    exceptions are looked through (``__cause__``).
    """
    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__
    cause = next((e for e in chain if isinstance(e, ssl.SSLError)), None)
    if cause is None:
        hung_up = any(isinstance(e, ConnectionResetError | BrokenPipeError) for e in chain)
        return tls_hangup(host, port) if handshake and hung_up else error
    where = f"TLS with the broker at {host}:{port} failed"
    refused: KafkaError
    if isinstance(cause, ssl.SSLCertVerificationError):
        hint = _VERIFY_HINTS.get(cause.verify_code, "it was not accepted")
        refused = SslAuthenticationError(
            f"{where}: its certificate was refused: {hint} ({cause.verify_message})"
        )
    elif handshake and (
        isinstance(cause, ssl.SSLEOFError | ssl.SSLZeroReturnError) or cause.reason in _EOF_REASONS
    ):
        refused = tls_hangup(host, port)
    elif "ALERT" in str(cause.reason):
        refused = SslAuthenticationError(
            f"{where}: the broker refused the handshake ({cause.reason}); a listener with "
            "ssl.client.auth=required needs a client certificate it trusts (ssl_certfile, "
            "ssl_keyfile)"
        )
    elif handshake and cause.reason == "WRONG_VERSION_NUMBER":
        refused = SecurityProtocolMismatchError(
            f"{where}: the broker did not answer in TLS, as a PLAINTEXT listener does: check "
            "the port and security_protocol"
        )
    else:
        return error
    refused.__cause__ = cause
    log.debug("%s", refused)
    return refused


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
