"""Self-signed TLS material for the broker's SSL listener.

openssl first (~40 ms: EC P-256 CA + broker certificate, PEM files Kafka reads directly via
``ssl.keystore.type=PEM``, KIP-651); keytool from the JDK as the fallback (~2.5 s: seven JVM
starts, PKCS12 stores). The broker certificate names ``127.0.0.1`` and ``localhost`` (or the
names given; its subject names no host, since Python also matches the common name when a
certificate has no DNS name) so a client verifying hostnames against the CA accepts it.

With openssl, the CA also signs a client certificate whose key is encrypted with a password
(for an SSL listener with ``ssl.client.auth=required``), and :func:`make_crl` revokes
certificates with the CA's key (needs the ``cryptography`` package).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ._config import TlsFiles
from ._errors import HarnessError, PrerequisiteError

__all__ = ["DEFAULT_HOSTNAMES", "make_crl", "make_tls_files"]

_DAYS = "3650"
_STORE_PASSWORD = "kafkastate-test"
_CLIENT_KEY_PASSWORD = "kafkastate-client-key"
DEFAULT_HOSTNAMES: tuple[str, ...] = ("127.0.0.1", "localhost")
"""The names the broker certificate carries unless told otherwise."""


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _san(hostnames: Sequence[str], *, ip: str, dns: str) -> str:
    """The subjectAltName entries for ``hostnames`` in openssl's or keytool's spelling."""
    if not hostnames:
        raise HarnessError("the broker certificate needs at least one host name")
    return ",".join(f"{ip if _is_ip(h) else dns}:{h}" for h in hostnames)


def _run(cwd: Path, *argv: str) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise HarnessError(f"{argv[0]} failed (exit {proc.returncode}): {' '.join(argv)}\n{output}")


def _with_openssl(openssl: str, directory: Path, hostnames: Sequence[str]) -> TlsFiles:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _run(directory, openssl, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem",
         "-days", _DAYS, "-subj", "/CN=kafkastate test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _run(directory, openssl, "req", *ec, "-keyout", "broker.key", "-out", "broker.csr",
         "-subj", "/CN=kafkastate test broker")  # fmt: skip
    (directory / "broker.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        f"subjectAltName={_san(hostnames, ip='IP', dns='DNS')}\n"
    )
    _run(directory, openssl, "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem",
         "-CAkey", "ca.key", "-CAcreateserial", "-out", "broker.pem", "-days", _DAYS,
         "-extfile", "broker.ext")  # fmt: skip
    key = (directory / "broker.key").read_text()
    if "BEGIN PRIVATE KEY" not in key:
        # Kafka's PEM keystore wants PKCS#8; OpenSSL 1.x may write a traditional EC key
        _run(directory, openssl, "pkcs8", "-topk8", "-nocrypt", "-in", "broker.key",
             "-out", "broker.p8")  # fmt: skip
        key = (directory / "broker.p8").read_text()
    chain = (directory / "broker.pem").read_text() + (directory / "ca.pem").read_text()
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(key + chain)
    # the client certificate for mutual TLS; its key is encrypted (ssl_password)
    _run(directory, openssl, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-keyout", "client.key", "-passout", f"pass:{_CLIENT_KEY_PASSWORD}",
         "-out", "client.csr", "-subj", "/CN=kafkastate-client")  # fmt: skip
    (directory / "client.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _run(directory, openssl, "x509", "-req", "-in", "client.csr", "-CA", "ca.pem",
         "-CAkey", "ca.key", "-CAcreateserial", "-out", "client.pem", "-days", _DAYS,
         "-extfile", "client.ext")  # fmt: skip
    return TlsFiles(
        ca_file=directory / "ca.pem",
        keystore=keystore,
        keystore_type="PEM",
        keystore_password=None,
        truststore=directory / "ca.pem",
        truststore_type="PEM",
        truststore_password=None,
        ca_key=directory / "ca.key",
        broker_cert=directory / "broker.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        client_key_password=_CLIENT_KEY_PASSWORD,
    )


def _with_keytool(keytool: str, directory: Path, hostnames: Sequence[str]) -> TlsFiles:
    pw = ("-storepass", _STORE_PASSWORD)
    ca_store = ("-keystore", "ca.p12", "-storetype", "PKCS12", *pw)
    broker_store = ("-keystore", "broker.p12", "-storetype", "PKCS12", *pw)
    trust_store = ("-keystore", "truststore.p12", "-storetype", "PKCS12", *pw)
    ec = ("-keyalg", "EC", "-groupname", "secp256r1", "-validity", _DAYS)
    _run(directory, keytool, "-genkeypair", "-alias", "ca", *ec,
         "-dname", "CN=kafkastate test CA", "-ext", "bc:c", *ca_store)  # fmt: skip
    _run(directory, keytool, "-exportcert", "-alias", "ca", "-rfc", "-file", "ca.pem",
         *ca_store)  # fmt: skip
    _run(directory, keytool, "-genkeypair", "-alias", "broker", *ec,
         "-dname", "CN=kafkastate test broker", *broker_store)  # fmt: skip
    _run(directory, keytool, "-certreq", "-alias", "broker", "-file", "broker.csr",
         *broker_store)  # fmt: skip
    _run(directory, keytool, "-gencert", "-alias", "ca", "-infile", "broker.csr",
         "-outfile", "broker.pem", "-rfc", "-validity", _DAYS,
         "-ext", f"san={_san(hostnames, ip='ip', dns='dns')}", *ca_store)  # fmt: skip
    # the chain must be importable: CA first, then the signed reply onto the key entry
    _run(directory, keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem",
         *broker_store)  # fmt: skip
    _run(directory, keytool, "-importcert", "-noprompt", "-alias", "broker",
         "-file", "broker.pem", *broker_store)  # fmt: skip
    _run(directory, keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem",
         *trust_store)  # fmt: skip
    return TlsFiles(
        ca_file=directory / "ca.pem",
        keystore=directory / "broker.p12",
        keystore_type="PKCS12",
        keystore_password=_STORE_PASSWORD,
        truststore=directory / "truststore.p12",
        truststore_type="PKCS12",
        truststore_password=_STORE_PASSWORD,
        broker_cert=directory / "broker.pem",
    )


def make_tls_files(
    directory: Path,
    *,
    java_home: Path | None = None,
    pkcs12: bool = False,
    hostnames: Sequence[str] = DEFAULT_HOSTNAMES,
) -> TlsFiles:
    """Create a CA and a broker certificate signed by it in ``directory`` (with openssl,
    also a client certificate with a password-protected key, for mutual TLS).

    Args:
        directory: where to write the files (created if missing).
        java_home: a JDK whose ``bin/keytool`` to use when openssl is absent.
        pkcs12: make PKCS12 stores with keytool even if openssl is there (Kafka before 3.0
            refuses a PEM key store whose key has no password).
        hostnames: the names (DNS names or IP addresses) the broker certificate carries.

    Returns:
        The files, ready for :func:`kafkastate.testing._config.server_properties`.

    Raises:
        PrerequisiteError: neither openssl nor keytool was found.
        HarnessError: a generation step failed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    openssl = None if pkcs12 else shutil.which("openssl")
    if openssl is not None:
        return _with_openssl(openssl, directory, hostnames)
    keytool = None
    if java_home is not None and (java_home / "bin" / "keytool").exists():
        keytool = str(java_home / "bin" / "keytool")
    keytool = keytool or shutil.which("keytool")
    if keytool is not None:
        return _with_keytool(keytool, directory, hostnames)
    raise PrerequisiteError("openssl or keytool", "to make the SSL listener's certificates")


def make_crl(tls: TlsFiles, path: Path, *, revoke: Sequence[Path] = ()) -> Path:
    """Write a certificate revocation list (PEM) signed by the harness's CA, for a client's
    ``ssl_crlfile``.

    Args:
        tls: the cluster's TLS files (:attr:`KafkaCluster.tls`), made with openssl (the CA
            key is a PEM file then).
        path: where to write the CRL.
        revoke: PEM certificates to list as revoked (``tls.broker_cert`` makes every broker
            of the cluster untrusted to a client that checks the CRL); none: a CRL that
            revokes nothing, which a client checking CRLs needs to accept the CA's
            certificates.

    Returns:
        ``path``.

    Raises:
        PrerequisiteError: the ``cryptography`` package is not installed.
        HarnessError: the TLS files have no CA key (an external cluster, or keytool-made).
    """
    try:  # an optional dependency of the harness (the dev extra has it)
        from cryptography import x509  # noqa: PLC0415
        from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    except ImportError as exc:
        raise PrerequisiteError("the cryptography package", "to sign a CRL") from exc
    if tls.ca_key is None:
        raise HarnessError("these TLS files have no CA key (made by openssl for a local cluster)")
    ca = x509.load_pem_x509_certificate(tls.ca_file.read_bytes())
    key = serialization.load_pem_private_key(tls.ca_key.read_bytes(), password=None)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.subject)
        .last_update(now - datetime.timedelta(minutes=5))
        .next_update(now + datetime.timedelta(days=30))
    )
    for cert_path in revoke:
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(cert.serial_number)
            .revocation_date(now - datetime.timedelta(minutes=1))
            .build()
        )
    crl = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    return path
