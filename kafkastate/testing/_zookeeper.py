"""The ZooKeeper server of a ZooKeeper-mode (Kafka 2.8) cluster."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ._config import HOST, jvm_command, render_properties
from ._errors import BrokerStartError
from ._process import JvmProcess, tail
from ._versions import BrokerProfile

__all__ = ["ZooKeeperServer", "build_zookeeper", "zookeeper_properties"]

_POLL = 0.1


class ZooKeeperServer(JvmProcess):
    """The ZooKeeper server of a ZooKeeper-mode (Kafka 2.x) cluster, on loopback.

    It runs from the ``zookeeper`` jar in Kafka's own dependency set
    (``org.apache.zookeeper.server.quorum.QuorumPeerMain``, standalone, no admin server).
    """

    def __init__(self, node_dir: Path, argv: list[str], port: int, *, detached: bool) -> None:
        super().__init__(
            "zookeeper", node_dir, argv, node_dir / "zookeeper.properties", detached=detached
        )
        self.port = port

    @property
    def node_dir(self) -> Path:
        """ZooKeeper's directory: config, ``data/``, ``logs/``."""
        return self._node_dir

    @property
    def connect(self) -> str:
        """``zookeeper.connect`` for the brokers: ``127.0.0.1:PORT``."""
        return f"{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        """ZooKeeper's log."""
        return self._node_dir / "logs" / "server.log"

    def wait_ready(self, timeout: float) -> None:
        """Block until ZooKeeper answers the ``srvr`` four-letter command.

        Args:
            timeout: seconds.

        Raises:
            BrokerStartError: it exited or did not answer in time.
        """
        deadline = time.monotonic() + timeout
        why = "no answer"
        while time.monotonic() < deadline:
            if not self.is_running:
                why = "it exited"
                break
            try:
                with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                    sock.sendall(b"srvr")
                    if sock.recv(64).startswith(b"Zookeeper version"):
                        return
            except OSError as exc:
                why = str(exc)
            time.sleep(_POLL)
        raise BrokerStartError(
            f"ZooKeeper on {self.connect} not ready ({why}); log: {self.log_file}\n"
            f"{tail(self.stdout_file, 20)}",
            self.log_file,
        )


def zookeeper_properties(data_dir: Path, port: int) -> dict[str, str]:
    """A standalone ZooKeeper's config on loopback.

    Args:
        data_dir: ``dataDir``.
        port: ``clientPort``.

    Returns:
        Property name -> value.
    """
    return {
        "dataDir": str(data_dir),
        "clientPort": str(port),
        "clientPortAddress": HOST,
        "maxClientCnxns": "0",
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "srvr",
        "tickTime": "500",
    }


def build_zookeeper(
    profile: BrokerProfile, java: str, libs: Path, root: Path, port: int, *, detached: bool
) -> ZooKeeperServer:
    zk_dir = root / "zookeeper"
    (zk_dir / "logs").mkdir(parents=True, exist_ok=True)
    config = zk_dir / "zookeeper.properties"
    config.write_text(render_properties(zookeeper_properties(zk_dir / "data", port)))
    (zk_dir / profile.log_config_name).write_text(profile.log_config_text)
    argv = jvm_command(
        java,
        f"{libs}{os.sep}*",
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        [str(config)],
        logs_dir=zk_dir / "logs",
        log4j_config=zk_dir / profile.log_config_name,
        heap_mb=128,
        profile=profile,
    )
    return ZooKeeperServer(zk_dir, argv, port, detached=detached)
