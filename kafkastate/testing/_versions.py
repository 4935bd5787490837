"""Everything the harness does differently per Kafka version, in one place.

Three broker generations run from Maven Central jars:

* **2.8.x** -- ZooKeeper mode. The ZooKeeper server is the ``org.apache.zookeeper:zookeeper``
  jar that ``kafka_2.13`` already depends on (3.5.9), started by the harness on loopback.
  SCRAM users are written to ZooKeeper with ``kafka.admin.ConfigCommand --zookeeper``.
  Logging: log4j 1.2 through ``slf4j-log4j12``.
* **3.x** -- KRaft with a static controller quorum (``controller.quorum.voters``, even for one
  node: ``format --standalone`` only exists from 3.9). SCRAM users at format time from 3.5
  (KIP-900). Logging: reload4j through ``slf4j-reload4j``. KIP-848 stays off (a preview in
  3.7-3.9): ``group.coordinator.rebalance.protocols=classic``.
* **4.x** -- KRaft; one node bootstraps a dynamic quorum (``--standalone``), several use static
  voters. Logging: log4j2. KIP-848 is on by default.

Neither the broker jars (``kafka_2.13``'s POM) nor older Kafkas bring a logging binding: it is
in the release tarball only, so the harness's own POM adds one per generation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from ._errors import HarnessError

__all__ = [
    "LOG4J1_PROPERTIES",
    "LOG4J2_PROPERTIES",
    "MIN_KAFKA_VERSION",
    "BrokerProfile",
    "profile_for",
]

ZOOKEEPER_SESSION_TIMEOUT = 6.0
"""``zookeeper.session.timeout.ms`` of ZooKeeper-mode brokers, in seconds: a killed broker's
registration (an ephemeral znode) lives this long, and a restart before it expires exits
with NodeExists."""

MIN_KAFKA_VERSION = (2, 8)
"""The oldest Kafka the harness runs (ZooKeeper mode; Java 17 runs it)."""

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-[A-Za-z0-9.]+)?$")

LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""
"""log4j2 config (properties format: needs only log4j-core): everything into server.log."""

LOG4J1_PROPERTIES = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.zookeeper=WARN
"""
"""log4j 1.2 / reload4j config (Kafka 2.8 and 3.x): everything into server.log."""


@dataclass(frozen=True)
class BrokerProfile:
    """What one Kafka version needs from the harness.

    Attributes:
        version: the Kafka version, e.g. ``"3.9.1"``.
        zookeeper: ZooKeeper mode (2.x) instead of KRaft.
        logging: ``"log4j1"`` (log4j 1.2 or reload4j) or ``"log4j2"``.
        logging_deps: ``(group, artifact, version)`` of the binding the POM adds.
        standalone_quorum: a single node bootstraps a dynamic quorum (``--standalone``);
            otherwise every quorum is static ``controller.quorum.voters``.
        scram_at_format: the storage tool creates SCRAM users (``--add-scram``, KIP-900).
        consumer_protocol: KIP-848 (``group.protocol=consumer``) is served.
        pem_key_without_password: a PEM key store may hold an unencrypted key (3.0+);
            older brokers get PKCS12 stores.
    """

    version: str
    zookeeper: bool
    logging: Literal["log4j1", "log4j2"]
    logging_deps: tuple[tuple[str, str, str], ...]
    standalone_quorum: bool
    scram_at_format: bool
    consumer_protocol: bool
    pem_key_without_password: bool = True

    @property
    def major_minor(self) -> tuple[int, int]:
        """``(major, minor)`` of :attr:`version`."""
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    @property
    def log_config_name(self) -> str:
        """The file name of the logging config written next to server.properties."""
        return "log4j2.properties" if self.logging == "log4j2" else "log4j.properties"

    @property
    def log_config_text(self) -> str:
        """The logging config's text."""
        return LOG4J2_PROPERTIES if self.logging == "log4j2" else LOG4J1_PROPERTIES

    def log_config_flag(self, path: str) -> str:
        """The JVM system property that points the logging library at ``path``.

        Args:
            path: the config file.

        Returns:
            ``-Dlog4j2.configurationFile=...`` or ``-Dlog4j.configuration=file:...``.
        """
        if self.logging == "log4j2":
            return f"-Dlog4j2.configurationFile={path}"
        return f"-Dlog4j.configuration=file:{path}"

    def mode_properties(
        self,
        node_id: int,
        voters: Mapping[int, int],
        zookeeper_connect: str | None,
        host: str,
    ) -> dict[str, str]:
        """The server.properties entries that differ between ZooKeeper and KRaft.

        Args:
            node_id: the node's id.
            voters: node id -> controller port of every voter (KRaft).
            zookeeper_connect: ``host:port`` of ZooKeeper (ZooKeeper mode).
            host: the loopback address.

        Returns:
            Property name -> value.
        """
        if self.zookeeper:
            if zookeeper_connect is None:
                raise HarnessError(f"Kafka {self.version} needs ZooKeeper, none was given")
            return {
                "broker.id": str(node_id),
                "zookeeper.connect": zookeeper_connect,
                "zookeeper.session.timeout.ms": str(round(ZOOKEEPER_SESSION_TIMEOUT * 1000)),
            }
        props = {"process.roles": "broker,controller", "node.id": str(node_id)}
        if len(voters) > 1 or not self.standalone_quorum:
            props["controller.quorum.voters"] = ",".join(
                f"{nid}@{host}:{port}" for nid, port in sorted(voters.items())
            )
        else:
            props["controller.quorum.bootstrap.servers"] = ",".join(
                f"{host}:{port}" for _, port in sorted(voters.items())
            )
        props["controller.listener.names"] = "CONTROLLER"
        return props

    def feature_properties(self) -> dict[str, str]:
        """Version-dependent feature switches (group protocols) and bounds.

        Returns:
            Property name -> value.
        """
        if (3, 7) <= self.major_minor < (4, 0):
            # KIP-848 was an early-access preview there; brokers run it off by default
            return {"group.coordinator.rebalance.protocols": "classic"}
        if self.major_minor >= (4, 0):
            # a KIP-848 group's own consumer.session.timeout.ms (a group config) may be as
            # short as 6 s, for the session-expiry conformance scenario; the broker-wide
            # default session (group.consumer.session.timeout.ms, 45 s) stays
            return {"group.consumer.min.session.timeout.ms": "6000"}
        return {}


def parse_version(kafka_version: str) -> tuple[int, int, int]:
    """Split ``X.Y.Z[-suffix]``.

    Args:
        kafka_version: e.g. ``"2.8.2"``.

    Returns:
        ``(X, Y, Z)``.

    Raises:
        HarnessError: not a version, or older than :data:`MIN_KAFKA_VERSION`.
    """
    match = _VERSION_RE.match(kafka_version)
    if match is None:
        raise HarnessError(f"not a Kafka version: {kafka_version!r} (expected e.g. 4.3.1)")
    parts = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
    if parts[:2] < MIN_KAFKA_VERSION:
        oldest = ".".join(map(str, MIN_KAFKA_VERSION))
        raise HarnessError(f"Kafka {kafka_version}: the harness runs Kafka {oldest} or later")
    return parts


def profile_for(kafka_version: str, log4j2_version: str = "2.25.5") -> BrokerProfile:
    """The harness profile of a Kafka version.

    Args:
        kafka_version: e.g. ``"3.6.2"``.
        log4j2_version: the log4j2 version to pin for 4.x.

    Returns:
        The profile.

    Raises:
        HarnessError: a bad or too old version.
    """
    major, minor, _ = parse_version(kafka_version)
    kraft4 = BrokerProfile(
        version=kafka_version,
        zookeeper=False,
        logging="log4j2",
        logging_deps=tuple(
            ("org.apache.logging.log4j", artifact, log4j2_version)
            for artifact in ("log4j-slf4j-impl", "log4j-core", "log4j-api")
        ),
        standalone_quorum=True,
        scram_at_format=True,
        consumer_protocol=True,
    )
    if major >= 4:
        return kraft4
    kraft3 = replace(
        kraft4,
        logging="log4j1",
        logging_deps=(
            ("org.slf4j", "slf4j-reload4j", "1.7.36"),
            ("ch.qos.reload4j", "reload4j", "1.2.25"),
        ),
        standalone_quorum=False,
        scram_at_format=minor >= 5,
        consumer_protocol=False,
    )
    if major == 3:
        return kraft3
    return replace(
        kraft3,
        zookeeper=True,
        logging_deps=(("org.slf4j", "slf4j-log4j12", "1.7.30"), ("log4j", "log4j", "1.2.17")),
        scram_at_format=False,
        pem_key_without_password=False,
    )
