"""Pure config generation for the local JVM broker: server.properties, log4j2, JVM flags.

No IO here beyond what the caller passes in, so the output can be unit-tested without a JVM.
"""

from __future__ import annotations

import base64
import json
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._versions import LOG4J2_PROPERTIES, BrokerProfile, profile_for

__all__ = [
    "LOG4J2_PROPERTIES",
    "KerberosService",
    "NodePorts",
    "NodeSpec",
    "OAuthSpec",
    "SaslCredentials",
    "TlsFiles",
    "free_ports",
    "jvm_command",
    "new_cluster_id",
    "render_properties",
    "scram_format_args",
    "server_properties",
]

HOST = "127.0.0.1"
CLIENT_AUTH = ("none", "requested", "required")
"""``ssl.client.auth`` values of the SSL listener."""
PLAIN_MECHANISM = "PLAIN"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class SaslCredentials:
    """Users the SASL_PLAINTEXT listener accepts.

    Attributes:
        username: accepted by PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
        password: that user's password.
        plain_only_username: a user that exists for PLAIN only (SCRAM with it must fail).
        plain_only_password: that user's password.
        mechanisms: the password mechanisms the listener enables.
        oauthbearer: the listener also enables OAUTHBEARER with Kafka's unsecured validator,
            which accepts unsigned (``alg: none``) tokens such as :func:`unsecured_jwt`
            makes -- a test-only setup that exercises the client's OAUTHBEARER exchange.
    """

    username: str = "alice"
    password: str = "alice-secret"
    plain_only_username: str = "bob"
    plain_only_password: str = "bob-secret"
    mechanisms: tuple[str, ...] = (PLAIN_MECHANISM, *SCRAM_MECHANISMS)
    oauthbearer: bool = True


@dataclass(frozen=True)
class OAuthSpec:
    """An OAUTHBEARER listener that validates signed JWTs (Kafka's
    ``OAuthBearerValidatorCallbackHandler``) against an OIDC provider's JWKS.

    The harness adds a listener named ``OIDC`` (security protocol SASL_PLAINTEXT, mechanism
    OAUTHBEARER only) and allows the JWKS URL with the
    ``org.apache.kafka.sasl.oauthbearer.allowed.urls`` system property (Kafka 4.x refuses
    every URL it does not list).

    Attributes:
        jwks_url: where the broker fetches the signing keys
            (``sasl.oauthbearer.jwks.endpoint.url``), e.g.
            :attr:`kafkastate.testing.OIDCServer.jwks_url`.
        audience: ``sasl.oauthbearer.expected.audience``, or ``None`` to accept any.
        issuer: ``sasl.oauthbearer.expected.issuer``, or ``None`` to accept any.
    """

    jwks_url: str
    audience: str | None = None
    issuer: str | None = None

    def allowed_urls_flag(self) -> str:
        """The JVM flag that lets Kafka 4.x fetch :attr:`jwks_url`."""
        return f"-D{OAUTH_ALLOWED_URLS_PROPERTY}={self.jwks_url}"


OAUTH_ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


@dataclass(frozen=True)
class KerberosService:
    """What a broker's GSSAPI listener needs (``KafkaCluster.start(kerberos=...)``).

    Attributes:
        krb5_conf: the realm's krb5.conf (``-Djava.security.krb5.conf``).
        keytab: the service principal's keys.
        principal: e.g. ``kafka/localhost@KAFKASTATE.TEST``.
        service_name: ``sasl.kerberos.service.name`` (the principal's first part).
    """

    krb5_conf: Path
    keytab: Path
    principal: str
    service_name: str = "kafka"


@dataclass(frozen=True)
class TlsFiles:
    """TLS material of the SSL listener.

    Only ``ca_file`` is known for an external cluster; the broker-side files are set for a
    cluster the harness started.

    Attributes:
        ca_file: the self-signed CA certificate (PEM); load it with
            ``SSLContext.load_verify_locations`` / ``ssl.create_default_context(cafile=...)``.
        keystore: the broker's private key + certificate chain, as Kafka reads it.
        keystore_type: ``PEM`` (openssl-made) or ``PKCS12`` (keytool-made).
        keystore_password: the PKCS12 store password, ``None`` for an unencrypted PEM key.
        truststore: the CA, as Kafka reads it.
        truststore_type: ``PEM`` or ``PKCS12``.
        truststore_password: the PKCS12 store password, ``None`` for PEM.
        client_auth: the listener's ``ssl.client.auth``: ``none``, ``requested`` or
            ``required`` (mutual TLS: a client must show a certificate the CA signed).
        ca_key: the CA's private key (PEM, openssl-made only), to sign CRLs with
            :func:`~kafkastate.testing.make_crl`.
        broker_cert: the broker's certificate (PEM), e.g. to revoke it in a CRL.
        client_cert: a client certificate (PEM) signed by the CA, for mutual TLS
            (openssl-made only).
        client_key: its private key (PEM), encrypted with :attr:`client_key_password`.
        client_key_password: the client key's password (kafka-python's ``ssl_password``).
    """

    ca_file: Path
    keystore: Path | None = None
    keystore_type: str = "PEM"
    keystore_password: str | None = None
    truststore: Path | None = None
    truststore_type: str = "PEM"
    truststore_password: str | None = None
    client_auth: str = "none"
    ca_key: Path | None = None
    broker_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    client_key_password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class NodePorts:
    """The loopback ports one node listens on (``None``: listener not enabled).

    ``proxied`` is the port of the ``PROXIED`` listener (PLAINTEXT, for clients only), which
    the node advertises at ``proxied_advertised``: the port a fault proxy listens on and
    forwards to ``proxied`` (the chaos runner's Toxiproxy).
    """

    plaintext: int
    controller: int
    sasl: int | None = None
    ssl: int | None = None
    oauth: int | None = None
    sasl_ssl: int | None = None
    proxied: int | None = None
    proxied_advertised: int | None = None


@dataclass(frozen=True)
class NodeSpec:
    """Everything that makes one combined broker+controller node's server.properties.

    Attributes:
        node_id: ``node.id``.
        ports: its listener ports.
        data_dir: ``log.dirs`` (the first of them).
        extra_data_dirs: more log directories (JBOD: ``log.dirs`` lists them after
            ``data_dir``; KRaft needs Kafka 3.7+, KIP-858).
        voters: node id -> controller port of every voter; with more than one node the quorum
            is static (``controller.quorum.voters``), with one it is bootstrapped dynamically
            (``controller.quorum.bootstrap.servers`` + ``format --standalone``).
        sasl: the SASL users, or ``None`` for no SASL_PLAINTEXT listener.
        kerberos: the broker's Kerberos service principal: the SASL_PLAINTEXT listener also
            enables GSSAPI.
        tls: the TLS files, or ``None`` for no SSL listener.
        oauth: the OIDC-validated OAUTHBEARER listener, or ``None`` for none.
        sasl_ssl: add a SASL_SSL listener: the SASL_PLAINTEXT listener's mechanisms and
            users (and GSSAPI with ``kerberos``) over TLS with :attr:`tls`'s broker
            certificate (no client certificates asked); its OAUTHBEARER validates signed
            tokens against :attr:`oauth`'s JWKS when that is set, else unsecured ones.
        overrides: extra properties, applied last (they win).
        profile: the Kafka version's harness profile (default: a 4.x KRaft node).
        zookeeper_connect: ``host:port`` of ZooKeeper, for a ZooKeeper-mode profile.
    """

    node_id: int
    ports: NodePorts
    data_dir: Path
    voters: Mapping[int, int]
    sasl: SaslCredentials | None = None
    kerberos: KerberosService | None = None
    tls: TlsFiles | None = None
    oauth: OAuthSpec | None = None
    sasl_ssl: bool = False
    overrides: Mapping[str, str] = field(default_factory=dict)
    profile: BrokerProfile = field(default_factory=lambda: profile_for("4.0.0"))
    zookeeper_connect: str | None = None
    extra_data_dirs: tuple[Path, ...] = ()

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        """Every log directory of the node (``log.dirs``), ``data_dir`` first."""
        return (self.data_dir, *self.extra_data_dirs)

    @property
    def static_quorum(self) -> bool:
        """Whether the quorum is static (``controller.quorum.voters``): several nodes, or a
        Kafka without ``format --standalone`` (3.x)."""
        return len(self.voters) > 1 or not self.profile.standalone_quorum


def new_cluster_id() -> str:
    """Return a fresh KRaft cluster id, as ``kafka-storage random-uuid`` makes one.

    Returns:
        base64url (no padding) of 16 random bytes: 22 characters, never starting with ``-``
        (the storage tool's argument parser would read such an id as an option; Kafka's own
        ``Uuid.randomUuid`` skips those too).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not cluster_id.startswith("-"):
            return cluster_id


def free_ports(count: int, host: str = HOST) -> list[int]:
    """Pick ``count`` distinct free TCP ports by binding port 0 and closing the sockets.

    All sockets are held open until every port is chosen, so the ports are distinct.

    Args:
        count: how many ports.
        host: the address to bind.

    Returns:
        The port numbers.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _jaas_plain(creds: SaslCredentials) -> str:
    users = {
        creds.username: creds.password,
        creds.plain_only_username: creds.plain_only_password,
    }
    entries = " ".join(f'user_{name}="{pw}"' for name, pw in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"


_SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
# With no sasl.server.callback.handler.class, Kafka validates OAUTHBEARER tokens with its
# unsecured (unsigned JWT) handler; the login-module options only matter for the broker's
# own client side, which never uses this listener.
_OAUTH_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="broker";'
)
_OAUTH_VALIDATED_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
)
OAUTHBEARER_MECHANISM = "OAUTHBEARER"


def unsecured_jwt(subject: str, *, lifetime: float = 3600.0, now: float | None = None) -> str:
    """An unsigned JWT (``alg: none``) that the harness's OAUTHBEARER listener accepts.

    Args:
        subject: the ``sub`` claim, which becomes the Kafka principal.
        lifetime: seconds until the ``exp`` claim.
        now: issue time in Unix seconds (default: the current time).

    Returns:
        The compact serialization ``header.payload.`` (empty signature).
    """
    issued = int(time.time() if now is None else now)

    def part(claims: Mapping[str, object]) -> str:
        raw = json.dumps(claims, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    payload = {"sub": subject, "iat": issued, "exp": issued + int(lifetime)}
    return f"{part({'alg': 'none'})}.{part(payload)}."


def server_properties(node: NodeSpec) -> dict[str, str]:
    """Build one node's server.properties as an ordered dict.

    Args:
        node: the node to describe.

    Returns:
        Property name -> value, in a readable order.
    """
    rf = min(3, len(node.voters))
    min_isr = 2 if rf >= 3 else 1
    profile = node.profile
    listeners = {"PLAINTEXT": node.ports.plaintext}
    protocol_map = {"PLAINTEXT": "PLAINTEXT"}
    if not profile.zookeeper:
        listeners["CONTROLLER"] = node.ports.controller
        protocol_map["CONTROLLER"] = "PLAINTEXT"
    if node.sasl is not None:
        if node.ports.sasl is None:
            raise ValueError("SASL credentials given but no SASL port")
        listeners["SASL_PLAINTEXT"] = node.ports.sasl
        protocol_map["SASL_PLAINTEXT"] = "SASL_PLAINTEXT"
    if node.tls is not None:
        if node.ports.ssl is None:
            raise ValueError("TLS files given but no SSL port")
        listeners["SSL"] = node.ports.ssl
        protocol_map["SSL"] = "SSL"
    if node.oauth is not None:
        if node.ports.oauth is None:
            raise ValueError("an OAuth listener given but no OAuth port")
        listeners["OIDC"] = node.ports.oauth
        protocol_map["OIDC"] = "SASL_PLAINTEXT"
    if node.sasl_ssl:
        if node.ports.sasl_ssl is None or node.sasl is None or node.tls is None:
            raise ValueError("a SASL_SSL listener needs its port, SASL users and TLS files")
        listeners["SASL_SSL"] = node.ports.sasl_ssl
        protocol_map["SASL_SSL"] = "SASL_SSL"
    advertised_ports = dict(listeners)
    if node.ports.proxied is not None:
        if node.ports.proxied_advertised is None:
            raise ValueError("a PROXIED listener needs the proxy's port to advertise")
        listeners["PROXIED"] = node.ports.proxied
        advertised_ports["PROXIED"] = node.ports.proxied_advertised
        protocol_map["PROXIED"] = "PLAINTEXT"
    listener_list = ",".join(f"{name}://{HOST}:{port}" for name, port in listeners.items())
    advertised = ",".join(
        f"{name}://{HOST}:{port}"
        for name, port in advertised_ports.items()
        if name != "CONTROLLER" or profile.standalone_quorum
    )

    props = profile.mode_properties(node.node_id, node.voters, node.zookeeper_connect, HOST)
    props.update(
        {
            "listeners": listener_list,
            # Kafka 3.x refuses a controller listener among a broker's advertised ones
            "advertised.listeners": advertised,
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol_map.items()),
            "log.dirs": ",".join(str(d) for d in node.log_dirs),
            "num.partitions": "1",
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(min_isr),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min_isr),
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            # test speed: no 3 s wait before the first rebalance, tiny internal topics
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            # transaction tests: a transaction past its timeout is aborted within 0.5 s,
            # not up to 10 s later
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            "share.coordinator.state.topic.num.partitions": "1",
            # fault tests: a SIGKILLed node's restart is refused (DuplicateBrokerRegistration)
            # until its old session expires, and a dead/paused node is fenced only then
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            # compaction tests: the cleaner looks for work every 0.5 s, not every 15 s
            "log.cleaner.backoff.ms": "500",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }
    )
    props.update(profile.feature_properties())
    if node.sasl is not None:
        enabled = list(node.sasl.mechanisms)
        if node.sasl.oauthbearer:
            enabled.append(OAUTHBEARER_MECHANISM)
        if node.kerberos is not None:
            enabled.append("GSSAPI")
            props["sasl.kerberos.service.name"] = node.kerberos.service_name
        props["sasl.enabled.mechanisms"] = ",".join(enabled)
        props.update(_sasl_listener_properties("sasl_plaintext", node, None))
        if node.sasl_ssl:
            props.update(_sasl_listener_properties("sasl_ssl", node, node.oauth))
    if node.oauth is not None:
        prefix = "listener.name.oidc."
        props[prefix + "sasl.enabled.mechanisms"] = OAUTHBEARER_MECHANISM
        props[prefix + "oauthbearer.sasl.jaas.config"] = _OAUTH_VALIDATED_JAAS
        props[prefix + "oauthbearer.sasl.server.callback.handler.class"] = OAUTH_VALIDATOR
        props["sasl.oauthbearer.jwks.endpoint.url"] = node.oauth.jwks_url
        if node.oauth.audience is not None:
            props["sasl.oauthbearer.expected.audience"] = node.oauth.audience
        if node.oauth.issuer is not None:
            props["sasl.oauthbearer.expected.issuer"] = node.oauth.issuer
    if node.tls is not None:
        if node.tls.client_auth not in CLIENT_AUTH:
            raise ValueError(f"client_auth must be one of {', '.join(CLIENT_AUTH)}")
        props.update(_tls_listener_properties("ssl", node.tls, node.tls.client_auth))
        if node.sasl_ssl:
            # SASL authenticates the client; no certificate is asked on this listener
            props.update(_tls_listener_properties("sasl_ssl", node.tls, "none"))
    props.update(node.overrides)
    return props


def _sasl_listener_properties(
    listener: str, node: NodeSpec, oauth: OAuthSpec | None
) -> dict[str, str]:
    """The per-listener JAAS settings of a SASL listener (``listener`` in lower case):
    PLAIN and SCRAM users, OAUTHBEARER (validated against ``oauth``'s JWKS if given, else
    Kafka's unsecured validator) and GSSAPI with the node's Kerberos service."""
    assert node.sasl is not None
    prefix = f"listener.name.{listener}."
    props = {prefix + "plain.sasl.jaas.config": _jaas_plain(node.sasl)}
    for mech in SCRAM_MECHANISMS:
        props[f"{prefix}{mech.lower()}.sasl.jaas.config"] = _SCRAM_JAAS
    if node.sasl.oauthbearer:
        if oauth is None:
            props[prefix + "oauthbearer.sasl.jaas.config"] = _OAUTH_JAAS
        else:
            props[prefix + "oauthbearer.sasl.jaas.config"] = _OAUTH_VALIDATED_JAAS
            props[prefix + "oauthbearer.sasl.server.callback.handler.class"] = OAUTH_VALIDATOR
    if node.kerberos is not None:
        krb = node.kerberos
        props[prefix + "gssapi.sasl.jaas.config"] = (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            f'storeKey=true keyTab="{krb.keytab}" principal="{krb.principal}";'
        )
    return props


def _tls_listener_properties(listener: str, tls: TlsFiles, client_auth: str) -> dict[str, str]:
    """The key and trust stores of a TLS listener (``listener`` in lower case)."""
    if tls.keystore is None or tls.truststore is None:
        raise ValueError("a TLS listener needs a keystore and a truststore")
    prefix = f"listener.name.{listener}."
    props = {
        prefix + "ssl.keystore.type": tls.keystore_type,
        prefix + "ssl.keystore.location": str(tls.keystore),
    }
    if tls.keystore_password is not None:
        props[prefix + "ssl.keystore.password"] = tls.keystore_password
        props[prefix + "ssl.key.password"] = tls.keystore_password
    props[prefix + "ssl.truststore.type"] = tls.truststore_type
    props[prefix + "ssl.truststore.location"] = str(tls.truststore)
    if tls.truststore_password is not None:
        props[prefix + "ssl.truststore.password"] = tls.truststore_password
    props[prefix + "ssl.client.auth"] = client_auth
    return props


def _escape(value: str) -> str:
    # java.util.Properties: backslash escapes; a leading space would be dropped
    out = value.replace("\\", "\\\\").replace("\n", "\\n")
    if out.startswith(" "):
        out = "\\" + out
    return out


def render_properties(props: Mapping[str, str]) -> str:
    """Serialise properties in ``java.util.Properties`` text format.

    Args:
        props: property name -> value.

    Returns:
        The file text, one ``key=value`` line each, ending in a newline.
    """
    return "".join(f"{key}={_escape(value)}\n" for key, value in props.items())


def scram_format_args(creds: SaslCredentials) -> list[str]:
    """StorageTool ``format`` arguments that create the SCRAM users (KIP-900).

    Args:
        creds: the SASL users; only ``username`` gets SCRAM credentials.

    Returns:
        ``--add-scram`` argument pairs, one per SCRAM mechanism.
    """
    args: list[str] = []
    for mech in SCRAM_MECHANISMS:
        args += ["--add-scram", f"{mech}=[name={creds.username},password={creds.password}]"]
    return args


FAST_START_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""C1 only + serial GC. Measured on 2 cores (Kafka 4.3.1, JDK 17): JVM launch to first
ApiVersions ~1.7 s instead of ~3.1 s with the JVM defaults (G1 + C2); whole single-broker
start incl. storage format 2.45 s vs 2.96 s with :data:`THROUGHPUT_FLAGS`."""

THROUGHPUT_FLAGS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
"""Upstream's defaults, for benchmarks (slower start, faster steady state)."""


def jvm_command(
    java: str,
    classpath: str,
    main_class: str,
    args: Sequence[str],
    *,
    logs_dir: Path,
    log4j_config: Path,
    heap_mb: int,
    fast_start: bool = True,
    extra: Sequence[str] = (),
    profile: BrokerProfile | None = None,
) -> list[str]:
    """Build a ``java`` command line for a Kafka main class.

    Args:
        java: the java executable.
        classpath: the ``-cp`` value (``<libs>/*``).
        main_class: e.g. ``kafka.Kafka`` or ``kafka.tools.StorageTool``.
        args: the main class's arguments.
        logs_dir: ``kafka.logs.dir`` (where log4j writes server.log).
        log4j_config: the log4j2 config file.
        heap_mb: ``-Xmx`` in MiB.
        fast_start: use :data:`FAST_START_FLAGS`, else :data:`THROUGHPUT_FLAGS`.
        extra: more JVM options, placed last (they win).
        profile: the Kafka version's profile, which picks the logging library's flag
            (default: log4j2).

    Returns:
        The argv list.
    """
    xms = min(heap_mb, 128)
    return [
        java,
        f"-Xms{xms}m",
        f"-Xmx{heap_mb}m",
        *(FAST_START_FLAGS if fast_start else THROUGHPUT_FLAGS),
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={logs_dir}",
        (profile or profile_for("4.0.0")).log_config_flag(str(log4j_config)),
        *extra,
        "-cp",
        classpath,
        main_class,
        *args,
    ]
