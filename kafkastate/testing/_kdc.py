"""A throwaway MIT Kerberos realm for GSSAPI tests: a real ``krb5kdc`` on a loopback port.

Everything lives in one temporary directory: ``krb5.conf`` (clients and the broker's JVM),
``kdc.conf`` (the KDC), the principal database, the KDC log and the keytabs. Nothing is read
from or written to /etc: point a process at the realm with :attr:`KerberosRealm.env`
(``KRB5_CONFIG``, ``KRB5_KDC_PROFILE``) and the JVM with ``-Djava.security.krb5.conf``.

Needs the MIT Kerberos KDC programs (Debian: ``krb5-kdc krb5-admin-server krb5-user``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from ._config import KerberosService, free_ports
from ._errors import HarnessError, PrerequisiteError
from ._process import tail

__all__ = ["DEFAULT_REALM", "KerberosRealm", "KerberosService"]

DEFAULT_REALM = "KAFKASTATE.TEST"
_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")
_PACKAGES = "krb5-kdc krb5-admin-server krb5-user"


def _find_tools() -> dict[str, str]:
    found: dict[str, str] = {}
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    for tool in _TOOLS:
        path = shutil.which(tool, path=search)
        if path is None:
            raise PrerequisiteError(
                tool, f"the Kerberos tests run an MIT KDC: apt-get install {_PACKAGES}"
            )
        found[tool] = path
    return found


class KerberosRealm:
    """A running KDC for one realm. Use :meth:`start`; stop with :meth:`stop` or ``with``."""

    def __init__(
        self, root: Path, realm: str, port: int, tools: Mapping[str, str], *, owns_root: bool
    ) -> None:
        self.root = root
        """The directory holding the configs, database, log and keytabs."""
        self.realm = realm
        """The realm name, e.g. ``KAFKASTATE.TEST``."""
        self.port = port
        """The KDC's TCP (and UDP) port on 127.0.0.1."""
        self.krb5_conf = root / "krb5.conf"
        """The clients' krb5.conf."""
        self.kdc_conf = root / "kdc.conf"
        """The KDC's kdc.conf."""
        self.log = root / "kdc.log"
        """The KDC's log."""
        self._tools = tools
        self._owns_root = owns_root
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<KerberosRealm {self.realm} kdc=127.0.0.1:{self.port} {self.root}>"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point MIT Kerberos at this realm."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    @classmethod
    def start(
        cls,
        realm: str = DEFAULT_REALM,
        *,
        workdir: Path | str | None = None,
        timeout: float = 15.0,
    ) -> KerberosRealm:
        """Create the realm's database and run its KDC on a free loopback port.

        Raises:
            PrerequisiteError: the MIT Kerberos KDC programs are not installed.
            HarnessError: the database could not be made or the KDC did not start.
        """
        tools = _find_tools()
        owns = workdir is None
        root = Path(tempfile.mkdtemp(prefix="kafkastate-kdc-") if workdir is None else workdir)
        root.mkdir(parents=True, exist_ok=True)
        (port,) = free_ports(1)
        kdc = cls(root.resolve(), realm, port, tools, owns_root=owns)
        try:
            kdc._write_configs()
            kdc._run("kdb5_util", "-r", realm, "create", "-s", "-P", secrets.token_urlsafe(24))
            kdc._launch(timeout)
        except BaseException:
            kdc.stop()
            raise
        return kdc

    def _write_configs(self) -> None:
        realm, port, root = self.realm, self.port, self.root
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f"  default_realm = {realm}\n"
            "  dns_lookup_realm = false\n"
            "  dns_lookup_kdc = false\n"
            "  dns_canonicalize_hostname = false\n"
            "  rdns = false\n"
            "  udp_preference_limit = 1\n"
            "  ticket_lifetime = 1h\n"
            "  kdc_timeout = 3000\n"
            "  max_retries = 1\n"
            "[realms]\n"
            f"  {realm} = {{\n"
            f"    kdc = 127.0.0.1:{port}\n"
            "  }\n"
            "[domain_realm]\n"
            f"  localhost = {realm}\n"
            f"  127.0.0.1 = {realm}\n"
        )
        (root / "kadm5.acl").write_text("")
        self.kdc_conf.write_text(
            "[kdcdefaults]\n"
            f"  kdc_listen = 127.0.0.1:{port}\n"
            f"  kdc_tcp_listen = 127.0.0.1:{port}\n"
            "[realms]\n"
            f"  {realm} = {{\n"
            f"    database_name = {root / 'principal'}\n"
            f"    key_stash_file = {root / 'stash'}\n"
            f"    acl_file = {root / 'kadm5.acl'}\n"
            "    max_life = 1h\n"
            "    supported_enctypes = aes256-cts-hmac-sha1-96:normal "
            "aes128-cts-hmac-sha1-96:normal\n"
            "  }\n"
            "[logging]\n"
            f"  kdc = FILE:{self.log}\n"
        )

    def _run(self, tool: str, *args: str) -> str:
        proc = subprocess.run(
            [self._tools[tool], *args],
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            raise HarnessError(
                f"{tool} {' '.join(args[:3])} failed (exit {proc.returncode}): "
                f"{proc.stderr.decode(errors='replace').strip()}"
            )
        return proc.stdout.decode(errors="replace")

    def _launch(self, timeout: float) -> None:
        self._proc = subprocess.Popen(
            [self._tools["krb5kdc"], "-n", "-r", self.realm],
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HarnessError(
                    f"krb5kdc exited with {self._proc.returncode}; log {self.log}:\n"
                    f"{tail(self.log, 20)}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise HarnessError(f"krb5kdc did not listen on 127.0.0.1:{self.port} in {timeout:g} s")

    def add_principal(self, name: str, keytab: Path | str | None = None) -> Path:
        """Create ``name`` (``client``, ``kafka/localhost``) with a random key and write its
        keys to a keytab.

        Returns:
            The keytab (default: ``<root>/<name with / as _>.keytab``).
        """
        path = Path(keytab) if keytab else self.root / f"{name.replace('/', '_')}.keytab"
        self._run("kadmin.local", "-r", self.realm, "-q", f"addprinc -randkey {name}")
        self._run("kadmin.local", "-r", self.realm, "-q", f"ktadd -k {path} {name}")
        return path

    def principal(self, name: str) -> str:
        """``name@REALM``."""
        return f"{name}@{self.realm}"

    def kinit(self, name: str, keytab: Path, ccache: Path) -> None:
        """Get ``name``'s initial ticket from its keytab into the cache ``ccache``."""
        self._run("kinit", "-k", "-t", str(keytab), "-c", f"FILE:{ccache}", self.principal(name))

    def broker_service(self, host: str = "localhost", service: str = "kafka") -> KerberosService:
        """Create the broker's service principal ``service/host`` and its keytab."""
        name = f"{service}/{host}"
        keytab = self.add_principal(name)
        return KerberosService(
            krb5_conf=self.krb5_conf,
            keytab=keytab,
            principal=self.principal(name),
            service_name=service,
        )

    def stop(self) -> None:
        """Stop the KDC and remove the directory if this realm made it."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KerberosRealm:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
