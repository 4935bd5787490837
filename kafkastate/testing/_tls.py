"""Self-signed TLS material for the broker's SSL listener.

openssl first (~40 ms: EC P-256 CA + broker certificate, PEM files Kafka reads directly via
``ssl.keystore.type=PEM``, KIP-651); keytool from the JDK as the fallback (~2.5 s: seven JVM
starts, PKCS12 stores). The broker certificate names ``127.0.0.1`` and ``localhost`` so a
client verifying hostnames against the CA accepts it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ._config import TlsFiles
from ._errors import HarnessError, PrerequisiteError

__all__ = ["make_tls_files"]

_DAYS = "3650"
_STORE_PASSWORD = "kafkastate-test"
_SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost"


def _run(cwd: Path, *argv: str) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise HarnessError(f"{argv[0]} failed (exit {proc.returncode}): {' '.join(argv)}\n{output}")


def _with_openssl(openssl: str, directory: Path) -> TlsFiles:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _run(directory, openssl, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem",
         "-days", _DAYS, "-subj", "/CN=kafkastate test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _run(directory, openssl, "req", *ec, "-keyout", "broker.key", "-out", "broker.csr",
         "-subj", "/CN=localhost")  # fmt: skip
    (directory / "broker.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        f"{_SAN}\n"
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
    return TlsFiles(
        ca_file=directory / "ca.pem",
        keystore=keystore,
        keystore_type="PEM",
        keystore_password=None,
        truststore=directory / "ca.pem",
        truststore_type="PEM",
        truststore_password=None,
    )


def _with_keytool(keytool: str, directory: Path) -> TlsFiles:
    pw = ("-storepass", _STORE_PASSWORD)
    ca_store = ("-keystore", "ca.p12", "-storetype", "PKCS12", *pw)
    broker_store = ("-keystore", "broker.p12", "-storetype", "PKCS12", *pw)
    trust_store = ("-keystore", "truststore.p12", "-storetype", "PKCS12", *pw)
    ec = ("-keyalg", "EC", "-groupname", "secp256r1", "-validity", _DAYS)
    _run(directory, keytool, "-genkeypair", "-alias", "ca", *ec,
         "-dname", "CN=kafkastate test CA", "-ext", "bc:c", *ca_store)  # fmt: skip
    _run(directory, keytool, "-exportcert", "-alias", "ca", "-rfc", "-file", "ca.pem",
         *ca_store)  # fmt: skip
    _run(directory, keytool, "-genkeypair", "-alias", "broker", *ec, "-dname", "CN=localhost",
         *broker_store)  # fmt: skip
    _run(directory, keytool, "-certreq", "-alias", "broker", "-file", "broker.csr",
         *broker_store)  # fmt: skip
    _run(directory, keytool, "-gencert", "-alias", "ca", "-infile", "broker.csr",
         "-outfile", "broker.pem", "-rfc", "-validity", _DAYS,
         "-ext", "san=ip:127.0.0.1,dns:localhost", *ca_store)  # fmt: skip
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
    )


def make_tls_files(
    directory: Path, *, java_home: Path | None = None, pkcs12: bool = False
) -> TlsFiles:
    """Create a CA and a broker certificate signed by it in ``directory``.

    Args:
        directory: where to write the files (created if missing).
        java_home: a JDK whose ``bin/keytool`` to use when openssl is absent.
        pkcs12: make PKCS12 stores with keytool even if openssl is there (Kafka before 3.0
            refuses a PEM key store whose key has no password).

    Returns:
        The files, ready for :func:`kafkastate.testing._config.server_properties`.

    Raises:
        PrerequisiteError: neither openssl nor keytool was found.
        HarnessError: a generation step failed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    openssl = None if pkcs12 else shutil.which("openssl")
    if openssl is not None:
        return _with_openssl(openssl, directory)
    keytool = None
    if java_home is not None and (java_home / "bin" / "keytool").exists():
        keytool = str(java_home / "bin" / "keytool")
    keytool = keytool or shutil.which("keytool")
    if keytool is not None:
        return _with_keytool(keytool, directory)
    raise PrerequisiteError("openssl or keytool", "to make the SSL listener's certificates")
