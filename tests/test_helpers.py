"""kafkastate.helpers.create_ssl_context (aiokafka's helper) and the adapters' typing of TLS
failures (kafkastate.adapters._common.tls_failure), with certificates the harness makes and
handshakes over loopback: no broker needed."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import threading

import pytest

from kafkastate.adapters._common import tls_context, tls_failure
from kafkastate.core.config import resolve
from kafkastate.errors import (
    KafkaConfigurationError,
    SecurityProtocolMismatchError,
    SslAuthenticationError,
)
from kafkastate.helpers import create_ssl_context
from kafkastate.testing import TlsFiles
from kafkastate.testing._tls import make_tls_files

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"), hostnames=("localhost",))


def _handshake_error(server: ssl.SSLContext | None, client: ssl.SSLContext, host: str) -> OSError:
    """The client's error from one loopback handshake (``server`` None: a plaintext peer
    that reads a little and hangs up)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with conn, contextlib.suppress(OSError):
                if server is None:
                    conn.recv(5)
                    return
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                try:
                    with client.wrap_socket(raw, server_hostname=host) as tls:
                        tls.recv(1)  # TLS 1.3: a refused client certificate shows here
                except OSError as exc:
                    return exc
        finally:
            thread.join(5)
    raise AssertionError("the handshake succeeded")


def _server(files: TlsFiles, *, client_auth: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    assert files.keystore is not None
    context.load_cert_chain(files.keystore)
    if client_auth:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=str(files.ca_file))
    return context


def test_create_ssl_context_verifies_by_default(files: TlsFiles) -> None:
    context = create_ssl_context(cafile=str(files.ca_file))
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    relaxed = create_ssl_context(cafile=files.ca_file, check_hostname=False)
    assert relaxed.verify_mode is ssl.CERT_REQUIRED and not relaxed.check_hostname
    with_crl = create_ssl_context(cafile=files.ca_file, crlfile=files.ca_file)
    assert with_crl.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF
    # cadata (PEM text) is accepted, as by aiokafka
    assert create_ssl_context(cadata=files.ca_file.read_text()).get_ca_certs()


def test_create_ssl_context_loads_an_encrypted_client_key(files: TlsFiles) -> None:
    assert files.client_cert is not None and files.client_key is not None
    create_ssl_context(
        cafile=files.ca_file,
        certfile=files.client_cert,
        keyfile=files.client_key,
        password=files.client_key_password,
    )
    with pytest.raises(KafkaConfigurationError) as info:
        create_ssl_context(
            certfile=files.client_cert, keyfile=files.client_key, password="nope-0451"
        )
    assert "nope-0451" not in str(info.value) and "password" in str(info.value)
    with pytest.raises(KafkaConfigurationError, match="needs a certificate file"):
        create_ssl_context(keyfile=files.client_key)
    with pytest.raises(KafkaConfigurationError, match="cafile"):
        create_ssl_context(cafile="/nonexistent/ca.pem")
    with pytest.raises(KafkaConfigurationError, match="ciphers"):
        create_ssl_context(ciphers="NOT-A-CIPHER")


def test_the_ssl_options_build_the_same_context_and_name_the_option(files: TlsFiles) -> None:
    options = resolve(
        "producer",
        "kafka-python",
        {"security_protocol": "SSL", "ssl_cafile": str(files.ca_file)},
        owner="KafkaProducer",
    )
    context = tls_context(options)
    assert context is not None and context.check_hostname
    bad = resolve(
        "producer",
        "kafka-python",
        {"security_protocol": "SSL", "ssl_crlfile": "/nonexistent/crl.pem"},
        owner="KafkaProducer",
    )
    with pytest.raises(KafkaConfigurationError, match="ssl_crlfile"):
        tls_context(bad)


def test_an_untrusted_or_misnamed_certificate_is_an_ssl_authentication_error(
    files: TlsFiles,
) -> None:
    untrusted = _handshake_error(_server(files), ssl.create_default_context(), "localhost")
    error = tls_failure(untrusted, "localhost", 1, handshake=True)
    assert isinstance(error, SslAuthenticationError) and error.__cause__ is untrusted
    assert "localhost:1" in str(error) and "ssl_cafile" in str(error)
    trusting = create_ssl_context(cafile=files.ca_file)
    misnamed = _handshake_error(_server(files), trusting, "127.0.0.1")
    error = tls_failure(misnamed, "127.0.0.1", 2, handshake=True)
    assert isinstance(error, SslAuthenticationError)
    assert "ssl_check_hostname" in str(error)


def test_a_missing_client_certificate_is_an_ssl_authentication_error(files: TlsFiles) -> None:
    refused = _handshake_error(
        _server(files, client_auth=True), create_ssl_context(cafile=files.ca_file), "localhost"
    )
    error = tls_failure(refused, "localhost", 3, handshake=False)
    assert isinstance(error, SslAuthenticationError) and "ssl_certfile" in str(error)


def test_a_plaintext_peer_hanging_up_on_the_handshake_is_a_mismatch(files: TlsFiles) -> None:
    hangup = _handshake_error(None, create_ssl_context(cafile=files.ca_file), "localhost")
    error = tls_failure(hangup, "localhost", 4, handshake=True)
    assert isinstance(error, SecurityProtocolMismatchError)
    assert "PLAINTEXT" in str(error) and "localhost:4" in str(error)
    # after the handshake an EOF is a lost connection (retried), not a mismatch
    assert tls_failure(hangup, "localhost", 4, handshake=False) is hangup


def test_other_errors_pass_through() -> None:
    refused = ConnectionRefusedError(111, "Connection refused")
    assert tls_failure(refused, "h", 5, handshake=True) is refused
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert tls_failure(reset, "h", 5, handshake=False) is reset  # not in a TLS handshake
