"""aiokafka's ``aiokafka.helpers`` under kafkastate's name: :func:`create_ssl_context`.

``from kafkastate.helpers import create_ssl_context`` (also importable from
:mod:`kafkastate.asyncio`) replaces ``from aiokafka.helpers import create_ssl_context``. The
kafka-python ``ssl_*`` options of every client (``ssl_cafile``, ``ssl_certfile``...) build
their context with the same function, so both spellings give the same TLS.
"""

from __future__ import annotations

import ssl
from os import PathLike

from kafkastate.errors import KafkaConfigurationError

__all__ = ["create_ssl_context"]

StrOrBytesPath = str | bytes | PathLike[str] | PathLike[bytes]


def create_ssl_context(
    *,
    cafile: StrOrBytesPath | None = None,
    capath: StrOrBytesPath | None = None,
    cadata: str | bytes | None = None,
    certfile: StrOrBytesPath | None = None,
    keyfile: StrOrBytesPath | None = None,
    password: str | bytes | None = None,
    crlfile: StrOrBytesPath | None = None,
    ciphers: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client TLS context that verifies brokers (aiokafka's ``create_ssl_context``, with
    kafka-python's CRL, cipher and hostname settings as extra keywords).

    The broker's certificate must chain to a trusted CA -- the ones given, else the system's
    trust store -- whatever ``check_hostname`` says (``verify_mode`` is ``CERT_REQUIRED``).

    Args:
        cafile: CA certificates (PEM) to trust.
        capath: a directory of hashed CA certificates to trust.
        cadata: CA certificates as PEM text or DER bytes.
        certfile: the client certificate (PEM) for mutual TLS, its chain after it; may hold
            the key too.
        keyfile: the certificate's private key (PEM) if not in ``certfile``.
        password: the private key's password (an encrypted key).
        crlfile: certificate revocation lists (PEM): a broker certificate revoked there is
            refused (kafka-python's ``ssl_crlfile``; the leaf certificate is checked).
        ciphers: an OpenSSL cipher list for TLS 1.2 and below (kafka-python's
            ``ssl_ciphers``).
        check_hostname: the broker's certificate must name the host connected to
            (kafka-python's ``ssl_check_hostname``; Java's
            ``ssl.endpoint.identification.algorithm=https``).

    Returns:
        A new context for ``security_protocol="SSL"`` or ``"SASL_SSL"``.

    Raises:
        KafkaConfigurationError: a file that cannot be read or parsed, a wrong key password,
            a key that does not match the certificate, ``keyfile`` or ``password`` without
            ``certfile``, a cipher list OpenSSL refuses. The message names the argument and
            OpenSSL's reason, never the password.
    """
    if certfile is None and (keyfile is not None or password is not None):
        raise KafkaConfigurationError("a key file or key password needs a certificate file")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = bool(check_hostname)
    what = "cafile, capath or cadata"
    try:
        if cafile is not None or capath is not None or cadata is not None:
            context.load_verify_locations(cafile=cafile, capath=capath, cadata=cadata)
        if crlfile is not None:
            what = "crlfile"
            context.load_verify_locations(cafile=crlfile)  # OpenSSL reads CRLs from here too
            context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        if ciphers is not None:
            what = "ciphers"
            context.set_ciphers(ciphers)
        if certfile is not None:
            what = "certfile, keyfile or password"
            context.load_cert_chain(certfile, keyfile, password)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        # OpenSSL's reason ("bad decrypt", "No such file") names no secret; the password is
        # never formatted into a message
        strerror = exc.strerror if isinstance(exc, OSError) else None
        reason = strerror or (str(exc.args[0]) if exc.args else type(exc).__name__)
        raise KafkaConfigurationError(f"TLS {what}: {reason}") from exc
    return context
