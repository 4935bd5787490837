"""Local Apache Kafka clusters for tests: start, probe, fault-inject, stop.

Theory of operation. :meth:`KafkaCluster.start` fetches (once) the broker jars with Maven,
writes one ``server.properties`` per node (combined broker+controller, KRaft, loopback, free
ports), formats every node's storage in parallel (``kafka.tools.StorageTool``; single node:
``--standalone``, several: static ``controller.quorum.voters``), launches one JVM per node and
waits until every node answers ApiVersions on its PLAINTEXT listener *and* its Metadata lists
every running node (with several nodes a broker is unfenced before its peers register; topic
creation with replication factor 3 fails until all have).

Kafka 2.8 runs in ZooKeeper mode instead: the harness starts ZooKeeper (:mod:`._zookeeper`)
first and formats nothing; 3.x uses a static quorum even for one node. What differs per
version is in :mod:`._versions`.

Every JVM runs in its own session/process group, so SIGSTOP/SIGCONT/SIGKILL reach exactly that
node. JVMs owned by this process die with it: an ``atexit`` hook kills them, and on Linux the
kernel sends SIGKILL when the starting thread dies (``setpriv --pdeathsig``), which also covers
a SIGKILLed test runner. ``detached=True`` (the CLI's ``up``) opts out of both.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from . import _probe
from ._config import (
    CLIENT_AUTH,
    HOST,
    SCRAM_MECHANISMS,
    KerberosService,
    NodePorts,
    NodeSpec,
    OAuthSpec,
    SaslCredentials,
    TlsFiles,
    free_ports,
    jvm_command,
    new_cluster_id,
    render_properties,
    scram_format_args,
    server_properties,
)
from ._errors import BrokerStartError, HarnessError, PrerequisiteError
from ._maven import (
    DEFAULT_KAFKA_VERSION,
    cache_root,
    check_version,
    fetch_kafka_libs,
    log4j_version_for,
)
from ._process import JvmProcess, tail
from ._tls import DEFAULT_HOSTNAMES, make_tls_files
from ._versions import ZOOKEEPER_SESSION_TIMEOUT, BrokerProfile, profile_for
from ._zookeeper import ZooKeeperServer, build_zookeeper

__all__ = [
    "Broker",
    "ClusterKind",
    "KafkaCluster",
    "ZooKeeperServer",
    "default_kafka_version",
    "find_java",
]

ClusterKind = Literal["jvm", "docker", "external"]

_STATE_VERSION = 1
_POLL = 0.1


# ---------------------------------------------------------------------------------------------
# prerequisites


def default_kafka_version() -> str:
    """The Kafka version to run when none is given.

    Returns:
        ``$KAFKASTATE_KAFKA_VERSION`` if set, else :data:`DEFAULT_KAFKA_VERSION`.
    """
    return os.environ.get("KAFKASTATE_KAFKA_VERSION") or DEFAULT_KAFKA_VERSION


_java_checked: dict[str, int] = {}


def find_java() -> str:
    """Locate a Java 17+ ``java`` executable.

    ``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else ``java`` on PATH.

    Returns:
        The executable's path.

    Raises:
        PrerequisiteError: no java was found, or it is older than 17 (Kafka 4.x needs 17+).
    """
    java_home = os.environ.get("JAVA_HOME")
    java: str | None = None
    if java_home and (Path(java_home) / "bin" / "java").exists():
        java = str(Path(java_home) / "bin" / "java")
    java = java or shutil.which("java")
    if java is None:
        raise PrerequisiteError("java", "Java 17+ runs the local Kafka broker")
    if java not in _java_checked:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
        match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
        if match is None:
            raise PrerequisiteError("java", f"{java} -version gave no version: {proc.stderr!r}")
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0_..." style
            major = int(match.group(2))
        _java_checked[java] = major
    if _java_checked[java] < 17:
        raise PrerequisiteError(
            "java", f"Kafka 4.x needs Java 17+, {java} is Java {_java_checked[java]}"
        )
    return java


# ---------------------------------------------------------------------------------------------
# brokers


class Broker(JvmProcess):
    """One combined broker+controller JVM of a local :class:`KafkaCluster`.

    Fault control (``kill``, ``pause``, ``resume``, ``stop``, ``start``, ``restart``) acts on
    this node only; ``restart`` keeps node id, data directory and ports.
    """

    def __init__(
        self,
        spec: NodeSpec,
        node_dir: Path,
        argv: list[str],
        *,
        detached: bool,
        expected_peers: Callable[[], set[int]],
    ) -> None:
        super().__init__(
            f"broker {spec.node_id}",
            node_dir,
            argv,
            node_dir / "server.properties",
            detached=detached,
        )
        self._spec = spec
        self._expected_peers = expected_peers

    # -- identity ------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        """``node.id`` (1-based)."""
        return self._spec.node_id

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        """The node's log directories (``log.dirs``; more than one with
        ``KafkaCluster.start(log_dirs=N)``)."""
        return self._spec.log_dirs

    @property
    def host(self) -> str:
        """The loopback address every listener binds."""
        return HOST

    @property
    def port(self) -> int:
        """The PLAINTEXT listener port."""
        return self._spec.ports.plaintext

    @property
    def address(self) -> str:
        """``host:port`` of the PLAINTEXT listener."""
        return f"{HOST}:{self.port}"

    @property
    def controller_port(self) -> int:
        """The CONTROLLER listener port (KRaft quorum traffic)."""
        return self._spec.ports.controller

    @property
    def sasl_port(self) -> int | None:
        """The SASL_PLAINTEXT listener port, if enabled."""
        return self._spec.ports.sasl

    @property
    def ssl_port(self) -> int | None:
        """The SSL listener port, if enabled."""
        return self._spec.ports.ssl

    @property
    def oauth_port(self) -> int | None:
        """The OIDC-validated OAUTHBEARER listener port, if enabled."""
        return self._spec.ports.oauth

    @property
    def sasl_ssl_port(self) -> int | None:
        """The SASL_SSL listener port, if enabled."""
        return self._spec.ports.sasl_ssl

    @property
    def proxied_port(self) -> int | None:
        """The ``PROXIED`` client listener's own port (what a fault proxy forwards to), or
        ``None`` (``KafkaCluster.start(proxy_ports=...)``)."""
        return self._spec.ports.proxied

    @property
    def node_dir(self) -> Path:
        """This node's directory: configs, ``data/``, ``logs/``."""
        return self._node_dir

    @property
    def config_file(self) -> Path:
        """This node's server.properties."""
        return self._node_dir / "server.properties"

    @property
    def log_file(self) -> Path:
        """The broker's log4j log (``logs/server.log``)."""
        return self._node_dir / "logs" / "server.log"

    @property
    def is_paused(self) -> bool:
        """Whether :meth:`pause` stopped it and :meth:`resume` has not continued it yet."""
        return self._paused and self.is_running

    def __repr__(self) -> str:
        state = "paused" if self.is_paused else "running" if self.is_running else "stopped"
        return f"<Broker node_id={self.node_id} {self.address} {state} pid={self._pid}>"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Launch this node's JVM again (after :meth:`stop` or :meth:`kill`).

        Args:
            wait: block until the node answers ApiVersions and sees its peers.
            timeout: readiness timeout in seconds (default: ``$KAFKASTATE_START_TIMEOUT`` or 120).

        Raises:
            HarnessError: it is already running.
            BrokerStartError: it exited or was not ready in time (message has the log tail).
        """
        if self._spec.profile.zookeeper and self._killed_at is not None:
            # its old registration must expire first, or the broker exits with NodeExists
            expires = self._killed_at + ZOOKEEPER_SESSION_TIMEOUT + 0.5
            time.sleep(max(0.0, expires - time.monotonic()))
            self._killed_at = None
        self._launch()
        if wait:
            self.wait_ready(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop gracefully (SIGTERM: controlled shutdown); SIGKILL if not gone in ``timeout``.

        Args:
            timeout: seconds to wait for a clean exit.
        """
        if not self.is_running:
            return
        self._signal(signal.SIGTERM)
        if self._paused:
            self._signal(signal.SIGCONT)  # the pending SIGTERM is delivered on continue
            self._paused = False
        if not self._wait_exit(timeout):
            self.kill()

    def pause(self) -> None:
        """SIGSTOP the JVM: sockets stay open but nothing answers (a hung broker).

        Raises:
            HarnessError: it is not running.
        """
        if not self.is_running:
            raise HarnessError(f"broker {self.node_id} is not running")
        self._signal(signal.SIGSTOP)
        self._paused = True
        self._wait_stopped(5.0)

    def _wait_stopped(self, timeout: float) -> None:
        """Wait until every thread of the JVM is stopped (Linux: the state in
        ``/proc/PID/task/*/stat``): SIGSTOP reaches a multi-threaded process's threads
        asynchronously, and a request sent right after the signal could still be answered
        (a CI flake). Elsewhere, or past ``timeout``, return at once."""
        tasks = Path(f"/proc/{self._pid}/task")
        if self._pid is None or not tasks.is_dir():
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                states = [
                    (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    for task in tasks.iterdir()
                ]
            except (OSError, IndexError):  # a thread ended meanwhile: look again
                states = []
            if states and all(state in "TtZX" for state in states):
                return
            time.sleep(0.01)

    def resume(self, *, settle: bool = False, timeout: float | None = None) -> None:
        """SIGCONT a paused JVM.

        A pause longer than ``broker.session.timeout.ms`` ends with the controller fencing
        the node at its first session check after the SIGCONT, until the node's next
        heartbeat: for about a heartbeat interval, creating a topic fails with "all brokers
        are currently fenced". ``settle`` waits that out.

        Args:
            settle: block until the node is ready (answers, lists its peers, unfenced) and
                has stayed ready for three heartbeat intervals.
            timeout: seconds for ``settle`` (default as in :meth:`start`).

        Raises:
            BrokerStartError: ``settle`` and the node was not steadily ready in time.
        """
        self._signal(signal.SIGCONT)
        self._paused = False
        if settle:
            _wait_settled([self], _start_timeout(timeout))

    def restart(self, *, timeout: float | None = None, graceful: bool = True) -> None:
        """Stop (or kill) and start again with the same node id, data dir and ports.

        Args:
            timeout: readiness timeout in seconds (default as in :meth:`start`).
            graceful: SIGTERM (controlled shutdown) first; ``False`` SIGKILLs.

        Raises:
            BrokerStartError: it did not come back in time.
        """
        if graceful:
            self.stop()
        else:
            self.kill()
        self.start(timeout=timeout)

    # -- readiness ---------------------------------------------------------------------------

    def probe(self, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
        """One ApiVersions v0 round trip on the PLAINTEXT listener.

        Args:
            timeout: socket timeout in seconds.

        Returns:
            api_key -> (min_version, max_version).

        Raises:
            kafkastate.testing.ProbeError: no well-formed successful answer.
        """
        return _probe.api_versions(HOST, self.port, timeout=timeout)

    def _ready_error(self) -> str | None:
        """``None`` when ready, else why not (for the timeout message)."""
        try:
            _probe.api_versions(HOST, self.port, timeout=1.0)
            info = _probe.metadata(HOST, self.port, timeout=1.0)
        except _probe.ProbeError as exc:
            return str(exc)
        missing = self._expected_peers() - set(info.brokers)
        if missing:
            return f"Metadata from node {self.node_id} does not list nodes {sorted(missing)} yet"
        for name, port in (
            ("SASL_PLAINTEXT", self.sasl_port),
            ("SSL", self.ssl_port),
            ("OIDC", self.oauth_port),
            ("SASL_SSL", self.sasl_ssl_port),
        ):
            if port is None:
                continue
            try:
                socket.create_connection((HOST, port), timeout=1.0).close()
            except OSError as exc:
                return f"{name} listener {HOST}:{port}: {exc}"
        return None

    def failure_report(self, headline: str) -> str:
        """A message with ``headline``, the log paths and the tails of both logs.

        Args:
            headline: the first line.

        Returns:
            The multi-line message.
        """
        parts = [headline, f"broker {self.node_id} log: {self.log_file}"]
        parts.append(f"--- tail of {self.log_file} ---\n{tail(self.log_file)}")
        parts.append(f"--- tail of {self.stdout_file} ---\n{tail(self.stdout_file, 20)}")
        return "\n".join(parts)

    def _check_alive(self) -> None:
        if self.is_running:
            return
        code = self._popen.poll() if self._popen is not None else None
        raise BrokerStartError(
            self.failure_report(f"broker {self.node_id} exited (code {code}) during startup"),
            self.log_file,
        )

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until this node answers ApiVersions and its Metadata lists its running peers.

        Args:
            timeout: seconds (default: ``$KAFKASTATE_START_TIMEOUT`` or 120).

        Raises:
            BrokerStartError: the JVM exited or the deadline passed.
        """
        _wait_all([self], _start_timeout(timeout))


def _start_timeout(timeout: float | None) -> float:
    if timeout is not None:
        return timeout
    return float(os.environ.get("KAFKASTATE_START_TIMEOUT", "120"))


_SETTLED = 1.5  # three broker.heartbeat.interval.ms of the harness's config


def _wait_settled(brokers: Sequence[Broker], timeout: float) -> None:
    """Wait until every one of ``brokers`` is ready and stays so for :data:`_SETTLED` s
    (outlasting a fence that follows a pause)."""
    deadline = time.monotonic() + timeout
    steady_since = None
    while True:
        _wait_all(brokers, max(0.1, deadline - time.monotonic()))
        now = time.monotonic()
        if any(broker._ready_error() is not None for broker in brokers):
            steady_since = None
        elif steady_since is None:
            steady_since = now
        elif now - steady_since >= _SETTLED:
            return
        if now >= deadline:
            first = brokers[0]
            raise BrokerStartError(
                first.failure_report(f"broker(s) not steadily ready after {timeout:.0f} s"),
                first.log_file,
            )
        time.sleep(_POLL)


def _wait_all(brokers: Sequence[Broker], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(brokers)
    last: dict[int, str] = {}
    while pending:
        for broker in list(pending):
            broker._check_alive()
            why = broker._ready_error()
            if why is None:
                pending.remove(broker)
            else:
                last[broker.node_id] = why
        if not pending:
            return
        if time.monotonic() >= deadline:
            first = pending[0]
            reasons = "; ".join(f"node {b.node_id}: {last.get(b.node_id)}" for b in pending)
            raise BrokerStartError(
                first.failure_report(f"broker(s) not ready after {timeout:.0f} s ({reasons})"),
                first.log_file,
            )
        time.sleep(_POLL)


# ---------------------------------------------------------------------------------------------
# clusters

_owned: list[KafkaCluster] = []
_owned_lock = threading.Lock()


def _kill_owned() -> None:
    with _owned_lock:
        clusters = list(_owned)
    for cluster in clusters:
        for broker in cluster.brokers:
            broker.kill()
        cluster._close_extra()


atexit.register(_kill_owned)


@dataclass
class _Options:
    kafka_version: str
    brokers: int
    sasl: bool
    ssl: bool
    oauth: OAuthSpec | None
    heap_mb: int
    fast_start: bool
    overrides: dict[str, str]
    jvm_options: list[str]
    kerberos: KerberosService | None = None
    ssl_client_auth: str = "none"
    ssl_hostnames: tuple[str, ...] = field(default=DEFAULT_HOSTNAMES)
    sasl_ssl: bool = False
    proxy_ports: dict[int, int] = field(default_factory=dict)
    log_dirs: int = 1


class KafkaCluster:
    """A Kafka cluster for tests: a local JVM cluster, a Docker container, or an existing one.

    Create one with :meth:`start` (local JVMs), :meth:`resolve` (``KAFKASTATE_BOOTSTRAP`` →
    Docker → local JVMs) or :meth:`external`. Use it as a context manager or call :meth:`stop`.

    Attributes:
        kind: ``"jvm"``, ``"docker"`` or ``"external"``.
        bootstrap: ``"127.0.0.1:PORT,..."`` of the PLAINTEXT listeners.
        sasl_bootstrap: the SASL_PLAINTEXT listeners, or ``None``.
        ssl_bootstrap: the SSL listeners, or ``None``.
        oauth_bootstrap: the OIDC-validated OAUTHBEARER listeners (``start(oauth=...)``),
            or ``None``.
        oauth: that listener's :class:`OAuthSpec`, or ``None``.
        sasl_ssl_bootstrap: the SASL_SSL listeners (``start(sasl_ssl=True)``), or ``None``.
        proxied_bootstrap: the fault proxy's ports of the ``PROXIED`` listeners
            (``start(proxy_ports=...)``), or ``None``.
        sasl: the SASL users, or ``None`` without a SASL listener.
        ca_file: the CA certificate (PEM) that signed the SSL listener's certificate, or ``None``.
        tls: the SSL listener's TLS files (``tls.ca_file`` is :attr:`ca_file`), or ``None``.
        kafka_version: the Kafka version, if known.
        cluster_id: the KRaft cluster id, if known.
        workdir: the run directory (configs, data, logs) of a local cluster, else ``None``.
        brokers: the nodes of a local cluster (empty for Docker and external clusters).
    """

    def __init__(
        self,
        *,
        kind: ClusterKind,
        bootstrap: str,
        sasl_bootstrap: str | None = None,
        ssl_bootstrap: str | None = None,
        sasl: SaslCredentials | None = None,
        ca_file: Path | None = None,
        kafka_version: str | None = None,
        cluster_id: str | None = None,
        workdir: Path | None = None,
        brokers: Sequence[Broker] = (),
        owns_workdir: bool = False,
        detached: bool = False,
    ) -> None:
        self.kind: ClusterKind = kind
        self.bootstrap = bootstrap
        self.sasl_bootstrap = sasl_bootstrap
        self.ssl_bootstrap = ssl_bootstrap
        self.oauth_bootstrap: str | None = None
        self.sasl_ssl_bootstrap: str | None = None
        self.proxied_bootstrap: str | None = None
        self.oauth: OAuthSpec | None = None
        self.sasl = sasl
        self.ca_file = ca_file
        self.tls: TlsFiles | None = TlsFiles(ca_file=ca_file) if ca_file is not None else None
        self.kafka_version = kafka_version
        self.cluster_id = cluster_id
        self.workdir = workdir
        self.brokers: list[Broker] = list(brokers)
        self._owns_workdir = owns_workdir
        self._detached = detached
        self._stopped = False
        self._container: Any = None
        self.zookeeper: ZooKeeperServer | None = None
        self.profile: BrokerProfile | None = (
            profile_for(kafka_version) if kind == "jvm" and kafka_version else None
        )

    def __repr__(self) -> str:
        return f"<KafkaCluster {self.kind} {self.bootstrap} brokers={len(self.brokers)}>"

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        kafka_version: str | None = None,
        brokers: int = 1,
        *,
        sasl: bool = False,
        ssl: bool = False,
        ssl_client_auth: str = "none",
        ssl_hostnames: Sequence[str] = DEFAULT_HOSTNAMES,
        oauth: OAuthSpec | None = None,
        workdir: Path | str | None = None,
        timeout: float | None = None,
        heap_mb: int | None = None,
        fast_start: bool = True,
        config_overrides: Mapping[str, str] | None = None,
        jvm_options: Sequence[str] = (),
        detached: bool = False,
        kerberos: KerberosService | None = None,
        sasl_ssl: bool = False,
        proxy_ports: Mapping[int, int] | None = None,
        log_dirs: int = 1,
    ) -> KafkaCluster:
        """Start a local cluster of combined broker+controller JVMs and wait until it is ready.

        Args:
            kafka_version: Kafka version (default: ``$KAFKASTATE_KAFKA_VERSION`` or
                :data:`DEFAULT_KAFKA_VERSION`).
            brokers: number of nodes (1 = ``--standalone`` quorum, more = static voters).
            sasl: add a SASL_PLAINTEXT listener (PLAIN + SCRAM-SHA-256/512 users).
            ssl: add an SSL listener with a certificate from a fresh self-signed CA.
            ssl_client_auth: the SSL listener's ``ssl.client.auth``: ``"none"``,
                ``"requested"`` or ``"required"`` (mutual TLS; clients use
                ``cluster.tls.client_cert`` / ``client_key`` / ``client_key_password``).
            ssl_hostnames: the names (DNS names, IP addresses) the broker certificate
                carries; brokers are reached at ``127.0.0.1``, so leaving it out makes a
                certificate that fails hostname verification.
            oauth: add a listener (``oauth_bootstrap``) whose OAUTHBEARER tokens are
                validated against a JWKS endpoint (Kafka's
                ``OAuthBearerValidatorCallbackHandler``): signed JWTs from a real token
                endpoint, e.g. :class:`kafkastate.testing.OIDCServer`.
            workdir: where configs, data and logs go (default: a new temporary directory,
                removed by :meth:`stop`).
            timeout: readiness timeout in seconds (default ``$KAFKASTATE_START_TIMEOUT`` or 120).
            heap_mb: ``-Xmx`` per JVM (default 768 for one node, 512 each for more).
            fast_start: C1-only JIT + serial GC (starts ~40 % faster); ``False`` for benchmarks.
            config_overrides: extra server.properties entries for every node (they win);
                ``{node_id}`` in a value becomes the node's id (``"broker.rack":
                "rack-{node_id}"``).
            jvm_options: extra JVM options (also read from ``$KAFKASTATE_JVM_OPTS``).
            detached: do not tie the JVMs' lives to this process (the CLI's ``up``).
            kerberos: also enable GSSAPI on the SASL_PLAINTEXT listener (implies ``sasl``),
                with this service principal and keytab, from a realm such as
                :class:`~kafkastate.testing.KerberosRealm` runs.
            sasl_ssl: add a SASL_SSL listener (``sasl_ssl_bootstrap``; implies ``sasl`` and
                ``ssl``): the SASL_PLAINTEXT listener's mechanisms and users -- GSSAPI too
                with ``kerberos`` -- over TLS with the SSL listener's certificate (no client
                certificate asked). Its OAUTHBEARER validates signed tokens against
                ``oauth``'s JWKS when ``oauth`` is given, else unsecured ones.
            proxy_ports: node id -> the port a fault proxy listens on for that node (every
                node): each node gets a client listener ``PROXIED`` (PLAINTEXT) on a port of
                its own (``broker.proxied_port``), advertised at ``127.0.0.1:<proxy port>``,
                so clients bootstrapped at :attr:`proxied_bootstrap` reach every broker
                through the proxy. The proxy, forwarding each proxy port to the node's
                ``proxied_port``, is the caller's to run (``kafkastate.testing.chaos``).
            log_dirs: how many log directories each node has (``log.dirs``; JBOD): its
                ``data`` directory, then ``data-2``, ``data-3``... (a node's
                ``spec.log_dirs``). More than one needs Kafka 3.7+ (KIP-858) in KRaft mode.

        Returns:
            The ready cluster.

        Raises:
            PrerequisiteError: java is missing, or mvn is missing and the jars are not cached.
            BrokerStartError: a node did not come up (the message has its log tail and path).
            HarnessError: any other setup failure (Maven, certificates, bad arguments).
        """
        version = check_version(kafka_version or default_kafka_version())
        if brokers < 1:
            raise HarnessError(f"brokers must be >= 1, got {brokers}")
        if ssl_client_auth not in CLIENT_AUTH:
            raise HarnessError(
                f"ssl_client_auth must be one of {', '.join(CLIENT_AUTH)}, got {ssl_client_auth!r}"
            )
        if log_dirs < 1:
            raise HarnessError(f"log_dirs must be >= 1, got {log_dirs}")
        if proxy_ports is not None and set(proxy_ports) != set(range(1, brokers + 1)):
            raise HarnessError(
                f"proxy_ports must name every node 1..{brokers}, got {sorted(proxy_ports)}"
            )
        krb5 = [f"-Djava.security.krb5.conf={kerberos.krb5_conf}"] if kerberos else []
        options = _Options(
            kafka_version=version,
            brokers=brokers,
            sasl=sasl or sasl_ssl or kerberos is not None,
            ssl=ssl or sasl_ssl,
            sasl_ssl=sasl_ssl,
            oauth=oauth,
            heap_mb=heap_mb or (768 if brokers == 1 else 512),
            fast_start=fast_start,
            overrides=dict(config_overrides or {}),
            jvm_options=[
                *shlex.split(os.environ.get("KAFKASTATE_JVM_OPTS", "")),
                *([oauth.allowed_urls_flag()] if oauth is not None else []),
                *krb5,
                *jvm_options,
            ],
            ssl_client_auth=ssl_client_auth,
            ssl_hostnames=tuple(ssl_hostnames),
            kerberos=kerberos,
            proxy_ports=dict(proxy_ports or {}),
            log_dirs=log_dirs,
        )
        java = find_java()
        libs = fetch_kafka_libs(version)
        owns = workdir is None
        root = Path(tempfile.mkdtemp(prefix="kafkastate-")) if workdir is None else Path(workdir)
        root.mkdir(parents=True, exist_ok=True)
        cluster = cls._build(
            options=options,
            java=java,
            libs=libs,
            root=root.resolve(),
            owns_workdir=owns,
            detached=detached,
        )
        cluster._register()
        try:
            if cluster.zookeeper is not None:
                cluster.zookeeper._launch()
                cluster.zookeeper.wait_ready(_start_timeout(timeout))
                if cluster.sasl is not None:
                    cluster._zookeeper_scram_users(java, libs)
            else:
                cluster._format_all(java, libs, options)
            for broker in cluster.brokers:
                broker._launch()
            _wait_all(cluster.brokers, _start_timeout(timeout))
        except BaseException:
            cluster._abort()
            raise
        return cluster

    @classmethod
    def _build(
        cls,
        *,
        options: _Options,
        java: str,
        libs: Path,
        root: Path,
        owns_workdir: bool,
        detached: bool,
    ) -> KafkaCluster:
        tls: TlsFiles | None = None
        profile = profile_for(options.kafka_version, log4j_version_for(options.kafka_version))
        if options.ssl:
            java_home = Path(java).resolve().parent.parent
            tls = make_tls_files(
                root / "tls",
                java_home=java_home,
                pkcs12=not profile.pem_key_without_password,
                hostnames=options.ssl_hostnames,
            )
            if options.ssl_client_auth != "none" and tls.client_cert is None:
                raise PrerequisiteError("openssl", "to make the client certificate for mutual TLS")
            tls = replace(tls, client_auth=options.ssl_client_auth)
        creds = SaslCredentials() if options.sasl else None
        with_oauth = options.oauth is not None
        proxied = bool(options.proxy_ports)
        listeners = (options.sasl, options.ssl, with_oauth, options.sasl_ssl, proxied)
        per_node = 2 + sum(map(int, listeners))
        ports = iter(free_ports(per_node * options.brokers + int(profile.zookeeper)))
        node_ports: dict[int, NodePorts] = {}
        for node_id in range(1, options.brokers + 1):
            node_ports[node_id] = NodePorts(
                plaintext=next(ports),
                controller=next(ports),
                sasl=next(ports) if options.sasl else None,
                ssl=next(ports) if options.ssl else None,
                oauth=next(ports) if with_oauth else None,
                sasl_ssl=next(ports) if options.sasl_ssl else None,
                proxied=next(ports) if proxied else None,
                proxied_advertised=options.proxy_ports.get(node_id),
            )
        voters = {nid: p.controller for nid, p in node_ports.items()}
        cluster = cls(
            kind="jvm",
            bootstrap="",
            sasl=creds,
            ca_file=tls.ca_file if tls else None,
            kafka_version=options.kafka_version,
            cluster_id=new_cluster_id(),
            workdir=root,
            owns_workdir=owns_workdir,
            detached=detached,
        )
        cluster.tls = tls
        cluster.oauth = options.oauth
        cluster.profile = profile
        zookeeper_connect: str | None = None
        if profile.zookeeper:
            cluster.zookeeper = build_zookeeper(
                profile, java, libs, root, next(ports), detached=detached
            )
            zookeeper_connect = cluster.zookeeper.connect
        for node_id, nports in node_ports.items():
            spec = NodeSpec(
                node_id=node_id,
                ports=nports,
                data_dir=root / f"node-{node_id}" / "data",
                extra_data_dirs=tuple(
                    root / f"node-{node_id}" / f"data-{i}" for i in range(2, options.log_dirs + 1)
                ),
                voters=voters,
                sasl=creds,
                kerberos=options.kerberos,
                tls=tls,
                oauth=options.oauth,
                sasl_ssl=options.sasl_ssl,
                overrides={
                    k: v.replace("{node_id}", str(node_id)) for k, v in options.overrides.items()
                },
                profile=profile,
                zookeeper_connect=zookeeper_connect,
            )
            node_dir = root / f"node-{node_id}"
            (node_dir / "logs").mkdir(parents=True, exist_ok=True)
            (node_dir / "server.properties").write_text(
                f"# kafkastate.testing: node {node_id} of {options.brokers}\n"
                + render_properties(server_properties(spec))
            )
            (node_dir / profile.log_config_name).write_text(profile.log_config_text)
            argv = jvm_command(
                java,
                f"{libs}{os.sep}*",
                "kafka.Kafka",
                [str(node_dir / "server.properties")],
                logs_dir=node_dir / "logs",
                log4j_config=node_dir / profile.log_config_name,
                heap_mb=options.heap_mb,
                fast_start=options.fast_start,
                extra=options.jvm_options,
                profile=profile,
            )
            cluster.brokers.append(
                Broker(spec, node_dir, argv, detached=detached, expected_peers=cluster._running_ids)
            )
        cluster._set_bootstraps()
        return cluster

    def _set_bootstraps(self) -> None:
        def join(ports: list[int | None]) -> str | None:
            if any(p is None for p in ports) or not ports:
                return None
            return ",".join(f"{HOST}:{p}" for p in ports)

        self.bootstrap = join([b.port for b in self.brokers]) or ""
        self.sasl_bootstrap = join([b.sasl_port for b in self.brokers])
        self.ssl_bootstrap = join([b.ssl_port for b in self.brokers])
        self.oauth_bootstrap = join([b.oauth_port for b in self.brokers])
        self.sasl_ssl_bootstrap = join([b.sasl_ssl_port for b in self.brokers])
        self.proxied_bootstrap = join([b._spec.ports.proxied_advertised for b in self.brokers])

    def _format_all(self, java: str, libs: Path, options: _Options) -> None:
        procs: list[tuple[Broker, Path, subprocess.Popen[bytes]]] = []
        for broker in self.brokers:
            profile = self.profile or profile_for(options.kafka_version)
            args = ["format", "-t", str(self.cluster_id), "-c", str(broker.config_file)]
            if len(self.brokers) == 1 and profile.standalone_quorum:
                args.append("--standalone")
            if self.sasl is not None and profile.scram_at_format:
                args += scram_format_args(self.sasl)
            argv = jvm_command(
                java,
                f"{libs}{os.sep}*",
                "kafka.tools.StorageTool",
                args,
                logs_dir=broker.node_dir / "logs",
                log4j_config=broker.node_dir / profile.log_config_name,
                heap_mb=256,
                fast_start=True,
                profile=profile,
            )
            log = broker.node_dir / "logs" / "format.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )
            procs.append((broker, log, proc))
        failures: list[str] = []
        for broker, log, proc in procs:
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            if rc != 0:
                failures.append(
                    f"storage format of node {broker.node_id} failed (exit {rc}); "
                    f"log: {log}\n{tail(log, 30)}"
                )
        if failures:
            raise BrokerStartError("\n".join(failures), procs[0][1])

    def _zookeeper_scram_users(self, java: str, libs: Path) -> None:
        """Create the SCRAM users in ZooKeeper (ZooKeeper mode has no ``--add-scram``)."""
        assert self.zookeeper is not None and self.sasl is not None and self.profile is not None
        creds = self.sasl
        config = ",".join(f"{mech}=[password={creds.password}]" for mech in SCRAM_MECHANISMS)
        zk_dir = self.zookeeper.node_dir
        argv = jvm_command(
            java,
            f"{libs}{os.sep}*",
            "kafka.admin.ConfigCommand",
            [
                *("--zookeeper", self.zookeeper.connect, "--alter", "--add-config", config),
                *("--entity-type", "users", "--entity-name", creds.username),
            ],
            logs_dir=zk_dir / "logs",
            log4j_config=zk_dir / self.profile.log_config_name,
            heap_mb=256,
            profile=self.profile,
        )
        log = zk_dir / "logs" / "scram-users.log"
        with open(log, "wb") as out:
            rc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
                timeout=120,
            ).returncode
        if rc != 0:
            raise BrokerStartError(
                f"creating the SCRAM users failed (exit {rc}); log: {log}\n{tail(log, 30)}", log
            )

    def _running_ids(self) -> set[int]:
        return {b.node_id for b in self.brokers if b.is_running and not b._paused}

    @classmethod
    def external(
        cls,
        bootstrap: str,
        *,
        sasl_bootstrap: str | None = None,
        ssl_bootstrap: str | None = None,
        sasl: SaslCredentials | None = None,
        ca_file: Path | str | None = None,
    ) -> KafkaCluster:
        """Describe an existing cluster (nothing is started or stopped).

        Args:
            bootstrap: its PLAINTEXT bootstrap servers.
            sasl_bootstrap: its SASL_PLAINTEXT bootstrap servers, if any.
            ssl_bootstrap: its SSL bootstrap servers, if any.
            sasl: credentials for the SASL listener (default: alice/alice-secret, bob/bob-secret
                when ``sasl_bootstrap`` is given).
            ca_file: the CA that signed the SSL listener's certificate.

        Returns:
            A cluster of kind ``"external"``; it has no fault control.
        """
        if sasl is None and sasl_bootstrap is not None:
            sasl = SaslCredentials()
        return cls(
            kind="external",
            bootstrap=bootstrap,
            sasl_bootstrap=sasl_bootstrap,
            ssl_bootstrap=ssl_bootstrap,
            sasl=sasl,
            ca_file=Path(ca_file) if ca_file is not None else None,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KafkaCluster | None:
        """The cluster ``KAFKASTATE_BOOTSTRAP`` (and friends) describe, if set.

        Reads the same ``KAFKASTATE_*`` names :meth:`env` writes.

        Args:
            environ: the environment (default ``os.environ``).

        Returns:
            An external cluster, or ``None`` when ``KAFKASTATE_BOOTSTRAP`` is unset or empty.
        """
        env = os.environ if environ is None else environ
        bootstrap = env.get("KAFKASTATE_BOOTSTRAP", "").strip()
        if not bootstrap:
            return None
        sasl_bootstrap = env.get("KAFKASTATE_SASL_BOOTSTRAP") or None
        sasl: SaslCredentials | None = None
        if sasl_bootstrap:
            default = SaslCredentials()
            mechanisms = env.get("KAFKASTATE_SASL_MECHANISMS")
            listed = mechanisms.split(",") if mechanisms else []
            sasl = SaslCredentials(
                username=env.get("KAFKASTATE_SASL_USERNAME", default.username),
                password=env.get("KAFKASTATE_SASL_PASSWORD", default.password),
                plain_only_username=env.get(
                    "KAFKASTATE_SASL_PLAIN_ONLY_USERNAME", default.plain_only_username
                ),
                plain_only_password=env.get(
                    "KAFKASTATE_SASL_PLAIN_ONLY_PASSWORD", default.plain_only_password
                ),
                mechanisms=tuple(m for m in listed if m != "OAUTHBEARER")
                if listed
                else default.mechanisms,
                oauthbearer="OAUTHBEARER" in listed if listed else default.oauthbearer,
            )
        cluster = cls.external(
            bootstrap,
            sasl_bootstrap=sasl_bootstrap,
            ssl_bootstrap=env.get("KAFKASTATE_SSL_BOOTSTRAP") or None,
            sasl=sasl,
            ca_file=env.get("KAFKASTATE_SSL_CAFILE") or None,
        )
        certfile = env.get("KAFKASTATE_SSL_CERTFILE")
        keyfile = env.get("KAFKASTATE_SSL_KEYFILE")
        if cluster.tls is not None and certfile and keyfile:
            cluster.tls = replace(
                cluster.tls,
                client_cert=Path(certfile),
                client_key=Path(keyfile),
                client_key_password=env.get("KAFKASTATE_SSL_KEY_PASSWORD") or None,
            )
        cluster.sasl_ssl_bootstrap = env.get("KAFKASTATE_SASL_SSL_BOOTSTRAP") or None
        return cluster

    @classmethod
    def resolve(
        cls,
        kafka_version: str | None = None,
        brokers: int = 1,
        *,
        sasl: bool = False,
        ssl: bool = False,
        timeout: float | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> KafkaCluster:
        """Find or start a cluster: ``KAFKASTATE_BOOTSTRAP`` → Docker → local JVMs.

        The Docker path (testcontainers, imported only when a Docker engine answers a ping)
        runs one plain ``apache/kafka`` broker; SASL, SSL or several brokers always use the
        local JVM path. Set ``KAFKASTATE_NO_DOCKER=1`` to skip Docker.

        Args:
            kafka_version: as in :meth:`start`.
            brokers: as in :meth:`start` (ignored for ``KAFKASTATE_BOOTSTRAP``).
            sasl: as in :meth:`start`.
            ssl: as in :meth:`start`.
            timeout: as in :meth:`start`.
            environ: the environment to read (default ``os.environ``).

        Returns:
            The cluster; :attr:`kind` tells which path was taken.

        Raises:
            PrerequisiteError: the JVM path was needed and java (or mvn) is missing.
            BrokerStartError: a started node did not come up.
        """
        env = os.environ if environ is None else environ
        existing = cls.from_env(env)
        if existing is not None:
            return existing
        if (
            brokers == 1
            and not sasl
            and not ssl
            and not env.get("KAFKASTATE_NO_DOCKER")
            and _docker_engine_answers(env)
        ):
            container = _docker_start(kafka_version or default_kafka_version(), timeout)
            if container is not None:
                return container
        return cls.start(kafka_version, brokers, sasl=sasl, ssl=ssl, timeout=timeout)

    # -- use ---------------------------------------------------------------------------------

    @property
    def controllable(self) -> bool:
        """Whether the harness owns the nodes (fault control works): true for kind ``jvm``."""
        return bool(self.brokers)

    def broker(self, node_id: int) -> Broker:
        """The node with this id.

        Args:
            node_id: ``node.id`` (1-based).

        Returns:
            That broker.

        Raises:
            KeyError: no such node (or not a local cluster).
        """
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        raise KeyError(f"no broker with node id {node_id} in {self!r}")

    @property
    def log_files(self) -> list[Path]:
        """Every node's log4j log file (empty for Docker and external clusters)."""
        return [b.log_file for b in self.brokers]

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every running node answers ApiVersions and lists all running nodes.

        Args:
            timeout: seconds (default: ``$KAFKASTATE_START_TIMEOUT`` or 120).

        Raises:
            BrokerStartError: a node exited or the deadline passed.
        """
        if self.brokers:
            _wait_all([b for b in self.brokers if b.is_running], _start_timeout(timeout))
            return
        host, _, port = self.bootstrap.split(",")[0].rpartition(":")
        deadline = time.monotonic() + _start_timeout(timeout)
        while True:
            try:
                _probe.api_versions(host, int(port), timeout=1.0)
                return
            except _probe.ProbeError as exc:
                if time.monotonic() >= deadline:
                    raise BrokerStartError(f"{self.bootstrap} not answering: {exc}") from exc
            time.sleep(_POLL)

    def heal(self, timeout: float | None = None) -> None:
        """Bring every node back: resume paused ones, start stopped or killed ones, and wait
        until all are ready (a shared cluster between fault tests).

        Args:
            timeout: seconds (default: ``$KAFKASTATE_START_TIMEOUT`` or 120).

        Raises:
            BrokerStartError: a node did not come back.
        """
        resumed = []
        for broker in self.brokers:
            if broker.is_paused:
                broker.resume()
                resumed.append(broker)
            elif not broker.is_running:
                broker.start(wait=False)
        self.wait_ready(timeout)
        if resumed:
            _wait_settled(resumed, _start_timeout(timeout))  # a fence after the pause

    def env(self) -> dict[str, str]:
        """The ``KAFKASTATE_*`` variables describing this cluster (what the CLI prints).

        Returns:
            ``KAFKASTATE_BOOTSTRAP`` and, when present, the SASL/SSL entries;
            :meth:`from_env` reads them back.
        """
        out = {"KAFKASTATE_BOOTSTRAP": self.bootstrap}
        if self.sasl_bootstrap is not None and self.sasl is not None:
            out["KAFKASTATE_SASL_BOOTSTRAP"] = self.sasl_bootstrap
            out["KAFKASTATE_SASL_MECHANISMS"] = ",".join(
                [*self.sasl.mechanisms, *(["OAUTHBEARER"] if self.sasl.oauthbearer else [])]
            )
            out["KAFKASTATE_SASL_USERNAME"] = self.sasl.username
            out["KAFKASTATE_SASL_PASSWORD"] = self.sasl.password
            out["KAFKASTATE_SASL_PLAIN_ONLY_USERNAME"] = self.sasl.plain_only_username
            out["KAFKASTATE_SASL_PLAIN_ONLY_PASSWORD"] = self.sasl.plain_only_password
        if self.ssl_bootstrap is not None:
            out["KAFKASTATE_SSL_BOOTSTRAP"] = self.ssl_bootstrap
            if self.ca_file is not None:
                out["KAFKASTATE_SSL_CAFILE"] = str(self.ca_file)
            tls = self.tls
            if tls is not None and tls.client_cert is not None and tls.client_key is not None:
                # the harness's test client certificate (mutual TLS), its key's password
                out["KAFKASTATE_SSL_CERTFILE"] = str(tls.client_cert)
                out["KAFKASTATE_SSL_KEYFILE"] = str(tls.client_key)
                out["KAFKASTATE_SSL_KEY_PASSWORD"] = tls.client_key_password or ""
        if self.sasl_ssl_bootstrap is not None:
            out["KAFKASTATE_SASL_SSL_BOOTSTRAP"] = self.sasl_ssl_bootstrap
        return out

    def ssl_context(self, *, client_cert: bool = False) -> ssl.SSLContext:
        """A client ``SSLContext`` that trusts the cluster's CA (hostname ``127.0.0.1`` checks).

        Args:
            client_cert: also present the harness's client certificate (mutual TLS).

        Returns:
            ``ssl.create_default_context(cafile=ca_file)``, with the client certificate
            loaded if asked.

        Raises:
            HarnessError: the cluster has no SSL listener / CA file, or no client
                certificate was made (keytool-made or external TLS files).
        """
        if self.ca_file is None:
            raise HarnessError(f"{self!r} has no SSL listener (start it with ssl=True)")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client_cert:
            tls = self.tls
            if tls is None or tls.client_cert is None or tls.client_key is None:
                raise HarnessError(f"{self!r} has no client certificate (openssl makes one)")
            context.load_cert_chain(tls.client_cert, tls.client_key, tls.client_key_password)
        return context

    # -- teardown ----------------------------------------------------------------------------

    def stop(
        self, *, remove: bool | None = None, timeout: float = 20.0, graceful: bool = True
    ) -> None:
        """Stop every node and clean up. Idempotent.

        Graceful: SIGTERM to all nodes at once, SIGKILL whatever is left after ``timeout``.
        A multi-node cluster takes ~5 s this way (the last controller waits for its quorum);
        ``graceful=False`` SIGKILLs at once, fine when the data is thrown away.
        For Docker the container is stopped; an external cluster is left alone.

        Args:
            remove: delete :attr:`workdir` (data and logs); default: only if the harness
                created it.
            timeout: seconds to wait for a clean exit before SIGKILL.
            graceful: SIGTERM first (controlled shutdown); ``False`` SIGKILLs right away.
        """
        if graceful:
            for broker in self.brokers:
                if broker.is_running:
                    broker._signal(signal.SIGTERM)
                    if broker._paused:
                        broker.resume()
            deadline = time.monotonic() + timeout
            for broker in self.brokers:
                if not broker._wait_exit(max(0.0, deadline - time.monotonic())):
                    broker.kill()
        else:
            for broker in self.brokers:
                broker._signal(signal.SIGKILL)
            for broker in self.brokers:
                broker.kill()
        self._close_extra()
        self._stopped = True
        with _owned_lock, contextlib.suppress(ValueError):
            _owned.remove(self)
        if (self._owns_workdir if remove is None else remove) and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _close_extra(self) -> None:
        if self.zookeeper is not None:
            self.zookeeper.kill()
        if self._container is not None:
            container, self._container = self._container, None
            with contextlib.suppress(Exception):
                container.stop()

    def _abort(self) -> None:
        """Kill everything after a failed start; keep the workdir for the logs."""
        for broker in self.brokers:
            broker.kill()
        self._close_extra()
        with _owned_lock, contextlib.suppress(ValueError):
            _owned.remove(self)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state (CLI) -------------------------------------------------------------------------

    def _register(self) -> None:
        if not self._detached:
            with _owned_lock:
                _owned.append(self)

    def _to_state(self) -> dict[str, Any]:
        return {
            "state_version": _STATE_VERSION,
            "kafka_version": self.kafka_version,
            "cluster_id": self.cluster_id,
            "workdir": str(self.workdir),
            "sasl": None
            if self.sasl is None
            else {
                "username": self.sasl.username,
                "password": self.sasl.password,
                "plain_only_username": self.sasl.plain_only_username,
                "plain_only_password": self.sasl.plain_only_password,
                "mechanisms": list(self.sasl.mechanisms),
                "oauthbearer": self.sasl.oauthbearer,
            },
            "ca_file": None if self.ca_file is None else str(self.ca_file),
            "zookeeper": None
            if self.zookeeper is None
            else {
                "pid": self.zookeeper._pid,
                "argv": self.zookeeper._argv,
                "node_dir": str(self.zookeeper.node_dir),
                "port": self.zookeeper.port,
            },
            "brokers": [
                {
                    "node_id": b.node_id,
                    "pid": b._pid,
                    "argv": b._argv,
                    "node_dir": str(b.node_dir),
                    "ports": {
                        "plaintext": b.port,
                        "controller": b.controller_port,
                        "sasl": b.sasl_port,
                        "ssl": b.ssl_port,
                        "sasl_ssl": b.sasl_ssl_port,
                        "proxied": b.proxied_port,
                        "proxied_advertised": b._spec.ports.proxied_advertised,
                    },
                }
                for b in self.brokers
            ],
        }

    @classmethod
    def _from_state(cls, state: Mapping[str, Any]) -> KafkaCluster:
        if state.get("state_version") != _STATE_VERSION:
            raise HarnessError(f"unknown harness state version {state.get('state_version')!r}")
        sasl: SaslCredentials | None = None
        if state["sasl"]:
            sasl = SaslCredentials(
                **{**state["sasl"], "mechanisms": tuple(state["sasl"]["mechanisms"])}
            )
        cluster = cls(
            kind="jvm",
            bootstrap="",
            sasl=sasl,
            ca_file=Path(state["ca_file"]) if state["ca_file"] else None,
            kafka_version=state["kafka_version"],
            cluster_id=state["cluster_id"],
            workdir=Path(state["workdir"]),
            owns_workdir=True,
            detached=True,
        )
        zk = state.get("zookeeper")
        if zk:
            cluster.zookeeper = ZooKeeperServer(
                Path(zk["node_dir"]), list(zk["argv"]), zk["port"], detached=True
            )
            cluster.zookeeper._pid = zk["pid"]
        voters = {b["node_id"]: b["ports"]["controller"] for b in state["brokers"]}
        for entry in state["brokers"]:
            node_dir = Path(entry["node_dir"])
            spec = NodeSpec(
                node_id=entry["node_id"],
                ports=NodePorts(**entry["ports"]),
                data_dir=node_dir / "data",
                voters=voters,
            )
            broker = Broker(
                spec,
                node_dir,
                list(entry["argv"]),
                detached=True,
                expected_peers=cluster._running_ids,
            )
            broker._pid = entry["pid"]
            cluster.brokers.append(broker)
        cluster._set_bootstraps()
        return cluster


# ---------------------------------------------------------------------------------------------
# Docker (testcontainers), kept small: one plain broker, imported only when an engine answers


def _docker_engine_answers(environ: Mapping[str, str], timeout: float = 0.5) -> bool:
    """Whether a Docker engine answers ``GET /_ping`` (``DOCKER_HOST`` or the unix socket)."""
    target = environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        if target.startswith("unix://"):
            path = target[len("unix://") :]
            if not Path(path).exists():
                return False
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(path)
        elif target.startswith("tcp://"):
            host, _, port = target[len("tcp://") :].rstrip("/").rpartition(":")
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        else:
            return False
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(64)
    except (OSError, ValueError):
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0] + b" "


def _docker_start(kafka_version: str, timeout: float | None) -> KafkaCluster | None:
    """Run ``apache/kafka:<version>`` (KRaft, one node); ``None`` if testcontainers fails."""
    try:
        module: Any = importlib.import_module("testcontainers.core.container")
    except ImportError:
        return None
    port = free_ports(1)[0]
    container: Any = module.DockerContainer(f"apache/kafka:{kafka_version}")
    env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://:{port},CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{HOST}:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }
    for key, value in env.items():
        container = container.with_env(key, value)
    container = container.with_bind_ports(port, port)
    try:
        container.start()
    except Exception:
        return None
    cluster = KafkaCluster(kind="docker", bootstrap=f"{HOST}:{port}", kafka_version=kafka_version)
    cluster._container = container
    with _owned_lock:
        _owned.append(cluster)
    try:
        cluster.wait_ready(timeout)
    except BrokerStartError:
        cluster.stop()
        raise
    return cluster


def default_run_dir() -> Path:
    """The CLI's run dir: ``$KAFKASTATE_RUN_DIR``, else ``<cache root>/run``.

    Returns:
        The path (not created).
    """
    explicit = os.environ.get("KAFKASTATE_RUN_DIR")
    return Path(explicit).expanduser() if explicit else cache_root() / "run"
