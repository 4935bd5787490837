"""The real-broker harness (kafkastate.testing): config generation, probes, and real JVMs.

Unit tests need no JVM. Tests marked ``integration`` start real Apache Kafka brokers (or use
the shared ``kafka_cluster`` / ``kafka_cluster3`` fixtures) and check what the harness promises:
listeners that really authenticate, TLS a Python client verifies, fault control that really
stops/pauses a node, a CLI whose brokers outlive it, and no JVM left behind.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import replace as dc_replace
from pathlib import Path

import pytest

from kafkastate.testing import (
    DEFAULT_KAFKA_VERSION,
    BrokerStartError,
    HarnessError,
    KafkaCluster,
    KerberosService,
    PrerequisiteError,
    ProbeError,
    SaslCredentials,
    api_versions,
    default_kafka_version,
    fetch_kafka_libs,
    find_java,
    metadata,
    new_cluster_id,
)
from kafkastate.testing._cluster import _docker_engine_answers
from kafkastate.testing._config import (
    FAST_START_FLAGS,
    NodePorts,
    NodeSpec,
    OAuthSpec,
    TlsFiles,
    free_ports,
    jvm_command,
    render_properties,
    scram_format_args,
    server_properties,
)
from kafkastate.testing._maven import (
    LOG4J_VERSIONS,
    cached_libs,
    check_version,
    log4j_version_for,
    render_pom,
)
from kafkastate.testing._tls import make_crl, make_tls_files
from kafkastate.testing._versions import profile_for
from kafkastate.testing.broker import main as broker_cli

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# helpers: a raw SASL client (independent of kafkastate's own), JVM/process inspection


def _frame(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    cid = b"harness-test"
    payload = struct.pack(">hhih", api_key, version, corr, len(cid)) + cid + body
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)[4:]  # drop the correlation id


def _kstr(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _sasl_handshake(sock: socket.socket, mechanism: str) -> tuple[int, list[str]]:
    sock.sendall(_frame(17, 1, 1, _kstr(mechanism)))
    body = _read_frame(sock)
    (error_code, count) = struct.unpack_from(">hi", body)
    pos, mechanisms = 6, []
    for _ in range(count):
        (length,) = struct.unpack_from(">h", body, pos)
        mechanisms.append(body[pos + 2 : pos + 2 + length].decode())
        pos += 2 + length
    return error_code, mechanisms


def _sasl_authenticate(sock: socket.socket, corr: int, token: bytes) -> tuple[int, bytes]:
    sock.sendall(_frame(36, 0, corr, struct.pack(">i", len(token)) + token))
    body = _read_frame(sock)
    (error_code, msg_len) = struct.unpack_from(">hh", body)
    pos = 4 + max(msg_len, 0)
    (length,) = struct.unpack_from(">i", body, pos)
    return error_code, body[pos + 4 : pos + 4 + max(length, 0)]


def _sasl_login(address: str, mechanism: str, user: str, password: str) -> int:
    """Authenticate over a fresh connection; return SaslAuthenticate's error code (0 = ok)."""
    host, port = address.split(",", maxsplit=1)[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        error_code, mechanisms = _sasl_handshake(sock, mechanism)
        assert error_code == 0, (mechanism, mechanisms)
        if mechanism == "PLAIN":
            return _sasl_authenticate(sock, 2, f"\0{user}\0{password}".encode())[0]
        digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
        nonce = secrets.token_urlsafe(18)
        first_bare = f"n={user},r={nonce}"
        error_code, server_first = _sasl_authenticate(sock, 2, f"n,,{first_bare}".encode())
        if error_code != 0:
            return error_code
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac(
            digest().name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
        )
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        stored_key = digest(client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = f"{without_proof},p={base64.b64encode(proof).decode()}"
        return _sasl_authenticate(sock, 3, final.encode())[0]


SASL_AUTHENTICATION_FAILED = 58


def _java_pids_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if "java" in cmdline and text in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def _probe_fails(host: str, port: int) -> bool:
    try:
        api_versions(host, port, timeout=1.0)
    except ProbeError:
        return True
    return False


_KEEP = ("KAFKASTATE_CACHE_DIR", "KAFKASTATE_KAFKA_VERSION", "KAFKASTATE_JVM_OPTS")


def _clean_env(**extra: str) -> dict[str, str]:
    """os.environ without variables that point the harness at a cluster or a run dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKASTATE_") or k in _KEEP}
    env.pop("PYTEST_ADDOPTS", None)
    env.update(extra)
    return env


def _have_jvm() -> bool:
    try:
        find_java()
    except PrerequisiteError:
        return False
    return shutil.which("mvn") is not None or cached_libs(default_kafka_version()) is not None


needs_jvm = pytest.mark.skipif(not _have_jvm(), reason="needs java (and mvn or cached jars)")


# ---------------------------------------------------------------------------------------------
# unit: config generation


def _spec(node_id: int = 1, nodes: int = 1, **kw: object) -> NodeSpec:
    voters = {i: 19000 + i for i in range(1, nodes + 1)}
    return NodeSpec(
        node_id=node_id,
        ports=NodePorts(
            plaintext=18000 + node_id,
            controller=19000 + node_id,
            sasl=17000 + node_id if kw.get("sasl") else None,
            ssl=16000 + node_id if kw.get("tls") else None,
        ),
        data_dir=Path(f"/data/node-{node_id}"),
        voters=voters,
        **kw,  # type: ignore[arg-type]
    )


def test_cluster_id_is_22_char_base64url_of_16_bytes_never_starting_with_dash() -> None:
    ids = [new_cluster_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for cid in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid)
        assert not cid.startswith("-")  # StorageTool would parse it as an option
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_single_node_properties_use_standalone_bootstrap_and_speed_tweaks() -> None:
    props = server_properties(_spec())
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:19001"
    assert "controller.quorum.voters" not in props
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:18001,CONTROLLER://127.0.0.1:19001"
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    # a KIP-848 group may set a 6 s session of its own (the default session stays 45 s)
    assert props["group.consumer.min.session.timeout.ms"] == "6000"
    assert "group.consumer.session.timeout.ms" not in props
    assert props["offsets.topic.num.partitions"] == "1"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["log.dirs"] == "/data/node-1"
    assert "sasl.enabled.mechanisms" not in props
    assert not any(k.startswith("listener.name.ssl.") for k in props)


def test_extra_log_dirs_follow_the_data_dir_in_log_dirs() -> None:
    spec = _spec(extra_data_dirs=(Path("/data/node-1-2"), Path("/data/node-1-3")))
    assert server_properties(spec)["log.dirs"] == "/data/node-1,/data/node-1-2,/data/node-1-3"
    assert spec.log_dirs == (Path("/data/node-1"), Path("/data/node-1-2"), Path("/data/node-1-3"))


def test_three_node_properties_use_static_voters_and_replication_factor_3() -> None:
    props = server_properties(_spec(node_id=2, nodes=3))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:19001,2@127.0.0.1:19002,3@127.0.0.1:19003"
    )
    assert "controller.quorum.bootstrap.servers" not in props
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "share.coordinator.state.topic.replication.factor",
    ):
        assert props[key] == "3", key
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"


def test_zookeeper_mode_properties_for_kafka_2_8() -> None:
    props = server_properties(
        _spec(profile=profile_for("2.8.2"), zookeeper_connect="127.0.0.1:12181")
    )
    assert props["broker.id"] == "1"
    assert props["zookeeper.connect"] == "127.0.0.1:12181"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:18001"
    for key in ("process.roles", "node.id", "controller.listener.names"):
        assert key not in props, key
    assert not any(key.startswith("controller.quorum.") for key in props)
    assert "group.coordinator.rebalance.protocols" not in props
    with pytest.raises(HarnessError, match="needs ZooKeeper"):
        server_properties(_spec(profile=profile_for("2.8.2")))


def test_kafka_3_single_node_uses_static_voters_and_no_advertised_controller() -> None:
    props = server_properties(_spec(profile=profile_for("3.6.2")))
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19001"
    assert "controller.quorum.bootstrap.servers" not in props
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:18001,CONTROLLER://127.0.0.1:19001"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:18001"
    assert "group.coordinator.rebalance.protocols" not in props  # no such setting in 3.6
    props = server_properties(_spec(profile=profile_for("3.9.1")))
    assert props["group.coordinator.rebalance.protocols"] == "classic"  # KIP-848 preview off
    assert "group.consumer.min.session.timeout.ms" not in props


def test_profiles_pick_logging_quorum_and_features_per_generation() -> None:
    old, mid, new = profile_for("2.8.2"), profile_for("3.6.2"), profile_for("4.4.0", "2.25.5")
    assert (old.zookeeper, mid.zookeeper, new.zookeeper) == (True, False, False)
    assert (old.consumer_protocol, mid.consumer_protocol, new.consumer_protocol) == (
        False,
        False,
        True,
    )
    assert not old.pem_key_without_password and mid.pem_key_without_password
    assert profile_for("3.4.1").scram_at_format is False and mid.scram_at_format
    assert old.log_config_flag("/c") == "-Dlog4j.configuration=file:/c"
    assert new.log_config_flag("/c") == "-Dlog4j2.configurationFile=/c"
    assert "slf4j-log4j12" in render_pom("2.8.2", "unused")
    assert "slf4j-reload4j" in render_pom("3.9.1", "unused")
    assert "log4j-slf4j-impl" in render_pom("4.4.0", "2.25.5")
    argv = jvm_command(
        "java", "/l/*", "M", [], logs_dir=Path("/l"), log4j_config=Path("/c"), heap_mb=64,
        profile=old,
    )  # fmt: skip
    assert "-Dlog4j.configuration=file:/c" in argv


def test_sasl_listener_has_plain_users_and_scram_login_modules() -> None:
    creds = SaslCredentials()
    props = server_properties(_spec(sasl=creds))
    assert "SASL_PLAINTEXT://127.0.0.1:17001" in props["listeners"]
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in props["listener.security.protocol.map"]
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
    assert (
        "OAuthBearerLoginModule"
        in props["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"]
    )
    plain = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert plain.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert 'user_alice="alice-secret"' in plain and 'user_bob="bob-secret"' in plain
    assert plain.endswith(";")
    for mech in ("scram-sha-256", "scram-sha-512"):
        assert props[f"listener.name.sasl_plaintext.{mech}.sasl.jaas.config"] == (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    assert scram_format_args(creds) == [
        "--add-scram",
        "SCRAM-SHA-256=[name=alice,password=alice-secret]",
        "--add-scram",
        "SCRAM-SHA-512=[name=alice,password=alice-secret]",
    ]


def test_gssapi_listener_logs_in_from_the_keytab() -> None:
    service = KerberosService(
        krb5_conf=Path("/realm/krb5.conf"),
        keytab=Path("/realm/kafka_localhost.keytab"),
        principal="kafka/localhost@KAFKASTATE.TEST",
    )
    props = server_properties(_spec(sasl=SaslCredentials(), kerberos=service))
    assert props["sasl.enabled.mechanisms"].split(",")[-1] == "GSSAPI"
    assert props["sasl.kerberos.service.name"] == "kafka"
    assert props["listener.name.sasl_plaintext.gssapi.sasl.jaas.config"] == (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        'keyTab="/realm/kafka_localhost.keytab" principal="kafka/localhost@KAFKASTATE.TEST";'
    )
    assert (
        "GSSAPI" not in server_properties(_spec(sasl=SaslCredentials()))["sasl.enabled.mechanisms"]
    )


def test_sasl_ssl_listener_has_every_mechanism_over_tls() -> None:
    service = KerberosService(
        krb5_conf=Path("/realm/krb5.conf"),
        keytab=Path("/realm/kafka_localhost.keytab"),
        principal="kafka/localhost@KAFKASTATE.TEST",
    )
    tls = TlsFiles(
        ca_file=Path("/t/ca.pem"),
        keystore=Path("/t/ks.pem"),
        truststore=Path("/t/ca.pem"),
        client_auth="required",
    )
    spec = NodeSpec(
        node_id=1,
        ports=NodePorts(18001, 19001, sasl=17001, ssl=16001, oauth=14001, sasl_ssl=15001),
        data_dir=Path("/data/node-1"),
        voters={1: 19001},
        sasl=SaslCredentials(),
        kerberos=service,
        tls=tls,
        oauth=OAuthSpec("http://127.0.0.1:1/jwks"),
        sasl_ssl=True,
    )
    props = server_properties(spec)
    assert "SASL_SSL://127.0.0.1:15001" in props["listeners"]
    assert "SASL_SSL://127.0.0.1:15001" in props["advertised.listeners"]
    assert "SASL_SSL:SASL_SSL" in props["listener.security.protocol.map"]
    prefix = "listener.name.sasl_ssl."
    for key in ("plain", "scram-sha-256", "scram-sha-512", "gssapi"):
        assert (
            props[f"{prefix}{key}.sasl.jaas.config"]
            == (props[f"listener.name.sasl_plaintext.{key}.sasl.jaas.config"])
        )
    # OAUTHBEARER over SASL_SSL validates signed tokens (the JWKS); SASL_PLAINTEXT's does not
    assert props[prefix + "oauthbearer.sasl.server.callback.handler.class"].endswith(
        "OAuthBearerValidatorCallbackHandler"
    )
    assert "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class" not in (
        props
    )
    assert props[prefix + "ssl.keystore.location"] == "/t/ks.pem"
    assert props[prefix + "ssl.client.auth"] == "none"  # SASL authenticates the client
    assert props["listener.name.ssl.ssl.client.auth"] == "required"
    unvalidated = server_properties(dc_replace(spec, oauth=None))
    assert prefix + "oauthbearer.sasl.server.callback.handler.class" not in unvalidated
    with pytest.raises(ValueError, match="SASL_SSL"):
        server_properties(dc_replace(spec, tls=None))


def test_ssl_listener_pem_and_pkcs12_variants() -> None:
    pem = TlsFiles(
        ca_file=Path("/t/ca.pem"), keystore=Path("/t/ks.pem"), truststore=Path("/t/ca.pem")
    )
    props = server_properties(_spec(tls=pem))
    assert "SSL://127.0.0.1:16001" in props["listeners"]
    assert props["listener.name.ssl.ssl.keystore.type"] == "PEM"
    assert props["listener.name.ssl.ssl.keystore.location"] == "/t/ks.pem"
    assert props["listener.name.ssl.ssl.truststore.type"] == "PEM"
    assert "listener.name.ssl.ssl.keystore.password" not in props  # unencrypted PEM key
    assert "listener.name.ssl.ssl.key.password" not in props
    p12 = TlsFiles(
        ca_file=Path("/t/ca.pem"),
        keystore=Path("/t/b.p12"),
        keystore_type="PKCS12",
        keystore_password="pw",
        truststore=Path("/t/t.p12"),
        truststore_type="PKCS12",
        truststore_password="pw",
    )
    props = server_properties(_spec(tls=p12))
    assert props["listener.name.ssl.ssl.keystore.password"] == "pw"
    assert props["listener.name.ssl.ssl.truststore.password"] == "pw"
    with pytest.raises(ValueError, match="keystore"):
        server_properties(_spec(tls=TlsFiles(ca_file=Path("/t/ca.pem"))))
    assert props["listener.name.ssl.ssl.client.auth"] == "none"
    mutual = TlsFiles(
        ca_file=Path("/t/ca.pem"),
        keystore=Path("/t/ks.pem"),
        truststore=Path("/t/ca.pem"),
        client_auth="required",
    )
    assert server_properties(_spec(tls=mutual))["listener.name.ssl.ssl.client.auth"] == ("required")
    with pytest.raises(ValueError, match="client_auth"):
        server_properties(
            _spec(tls=TlsFiles(ca_file=Path("/t/ca.pem"), keystore=Path("/t/ks.pem"),
                               truststore=Path("/t/ca.pem"), client_auth="yes"))
        )  # fmt: skip


def test_overrides_win_and_properties_render_escaped() -> None:
    props = server_properties(_spec(overrides={"num.partitions": "7", "x.y": "a\\b"}))
    assert props["num.partitions"] == "7"
    text = render_properties({"a": "1", "path": "C:\\x", "lead": " sp", "nl": "a\nb"})
    assert text == "a=1\npath=C:\\\\x\nlead=\\ sp\nnl=a\\nb\n"


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_jvm_command_shape() -> None:
    argv = jvm_command(
        "java",
        "/libs/*",
        "kafka.Kafka",
        ["/n/server.properties"],
        logs_dir=Path("/n/logs"),
        log4j_config=Path("/n/log4j2.properties"),
        heap_mb=512,
        extra=["-Dx=1"],
    )
    assert argv[0] == "java"
    assert "-Xmx512m" in argv
    assert all(flag in argv for flag in FAST_START_FLAGS)
    assert "-Dkafka.logs.dir=/n/logs" in argv
    assert "-Dlog4j2.configurationFile=/n/log4j2.properties" in argv
    assert argv[-4:] == ["-cp", "/libs/*", "kafka.Kafka", "/n/server.properties"]
    assert argv.index("-Dx=1") < argv.index("-cp")
    slow = jvm_command(
        "java", "/l/*", "M", [], logs_dir=Path("/l"), log4j_config=Path("/c"), heap_mb=64,
        fast_start=False,
    )  # fmt: skip
    assert "-XX:+UseG1GC" in slow and "-XX:TieredStopAtLevel=1" not in slow


def test_pom_pins_kafka_and_the_log4j_binding() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(render_pom("4.3.1", "2.25.4"))
    deps = {
        d.findtext("m:artifactId", namespaces=ns): d.findtext("m:version", namespaces=ns)
        for d in root.iterfind("m:dependencies/m:dependency", ns)
    }
    assert deps == {
        "kafka_2.13": "4.3.1",
        "log4j-slf4j-impl": "2.25.4",
        "log4j-core": "2.25.4",
        "log4j-api": "2.25.4",
    }
    assert "log4j-slf4j2-impl" in render_pom("9.0.0", "2.25.5", slf4j2=True)
    assert log4j_version_for("4.0.0") == "2.24.3"
    assert log4j_version_for(DEFAULT_KAFKA_VERSION) == LOG4J_VERSIONS[DEFAULT_KAFKA_VERSION]
    assert log4j_version_for("4.99.0")  # unknown versions get the newest known log4j


@pytest.mark.parametrize("bad", ["2.7.0", "4.3", "latest", "4.3.1</version>", "../4.3.1"])
def test_bad_kafka_versions_are_rejected(bad: str) -> None:
    with pytest.raises(HarnessError):
        check_version(bad)


def test_cached_libs_needs_the_marker(tmp_path: Path) -> None:
    libs = tmp_path / "kafka-4.3.1" / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-4.3.1.jar").write_bytes(b"")
    assert cached_libs("4.3.1", tmp_path) is None  # an interrupted fetch is not reused
    (tmp_path / "kafka-4.3.1" / ".complete").write_text("{}")
    assert cached_libs("4.3.1", tmp_path) == libs


def test_missing_mvn_and_java_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(PrerequisiteError) as info:
        fetch_kafka_libs("4.3.1", root=tmp_path / "cache")
    assert info.value.missing == "mvn"
    assert str(tmp_path / "cache" / "kafka-4.3.1") in str(info.value)
    with pytest.raises(PrerequisiteError) as info:
        find_java()
    assert info.value.missing == "java"


def test_the_fetch_command_prints_cached_jars_and_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m kafkastate.testing.broker fetch V...``: what ``./ks test`` runs before
    the tests so that no test waits for a download."""
    cache = tmp_path / "cache"
    libs = cache / "kafka-4.4.0" / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-4.4.0.jar").write_bytes(b"")
    (cache / "kafka-4.4.0" / ".complete").write_text("{}")
    monkeypatch.setenv("KAFKASTATE_CACHE_DIR", str(cache))
    monkeypatch.setenv("KAFKASTATE_KAFKA_VERSION", "4.4.0")
    assert broker_cli(["fetch"]) == 0  # the default version
    assert capsys.readouterr().out == f"4.4.0 {libs}\n"
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn for an uncached version
    assert broker_cli(["fetch", "4.4.0", "3.9.1"]) == 1
    out, err = capsys.readouterr()
    assert out == f"4.4.0 {libs}\n"
    assert "mvn" in err and str(cache / "kafka-3.9.1") in err
    assert broker_cli(["fetch", "2.7.0"]) == 1
    assert "2.8 or later" in capsys.readouterr().err


def test_env_round_trip_and_resolve_prefers_bootstrap_env() -> None:
    env = {
        "KAFKASTATE_BOOTSTRAP": "127.0.0.1:1,127.0.0.1:2",
        "KAFKASTATE_SASL_BOOTSTRAP": "127.0.0.1:3",
        "KAFKASTATE_SASL_USERNAME": "u",
        "KAFKASTATE_SASL_PASSWORD": "p",
        "KAFKASTATE_SSL_BOOTSTRAP": "127.0.0.1:4",
        "KAFKASTATE_SSL_CAFILE": "/x/ca.pem",
        "KAFKASTATE_SSL_CERTFILE": "/x/client.pem",
        "KAFKASTATE_SSL_KEYFILE": "/x/client.key",
        "KAFKASTATE_SSL_KEY_PASSWORD": "kp",
    }
    cluster = KafkaCluster.resolve(brokers=3, sasl=True, ssl=True, environ=env)
    assert cluster.kind == "external" and not cluster.controllable and cluster.brokers == []
    assert cluster.bootstrap == "127.0.0.1:1,127.0.0.1:2"
    assert cluster.sasl is not None and (cluster.sasl.username, cluster.sasl.password) == ("u", "p")
    assert cluster.tls is not None and cluster.tls.ca_file == Path("/x/ca.pem")
    assert cluster.tls.client_cert == Path("/x/client.pem")
    assert cluster.tls.client_key_password == "kp"
    again = KafkaCluster.from_env(cluster.env())
    assert again is not None and again.env() == cluster.env()
    assert KafkaCluster.from_env({}) is None
    cluster.stop()  # a no-op for an external cluster


# ---------------------------------------------------------------------------------------------
# unit: probes and Docker detection against fake servers


def _serve_once(reply: Callable[[bytes], bytes]) -> tuple[int, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def run() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                (size,) = struct.unpack(">i", conn.recv(4))
                request = b""
                while len(request) < size:
                    request += conn.recv(size - len(request))
                conn.sendall(reply(request))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return port, thread


def _response(request: bytes, body: bytes, corr_delta: int = 0) -> bytes:
    (corr,) = struct.unpack_from(">i", request, 4)
    payload = struct.pack(">i", corr + corr_delta) + body
    return struct.pack(">i", len(payload)) + payload


def test_api_versions_probe_speaks_v0() -> None:
    seen: list[tuple[int, int, str]] = []

    def reply(request: bytes) -> bytes:
        api_key, version, _, cid_len = struct.unpack_from(">hhih", request)
        seen.append((api_key, version, request[10 : 10 + cid_len].decode()))
        assert len(request) == 10 + cid_len  # v0 has an empty body
        body = (
            struct.pack(">hi", 0, 2) + struct.pack(">hhh", 0, 3, 13) + struct.pack(">hhh", 18, 0, 4)
        )
        return _response(request, body)

    port, thread = _serve_once(reply)
    assert api_versions("127.0.0.1", port, client_id="probe-x") == {0: (3, 13), 18: (0, 4)}
    thread.join(5)
    assert seen == [(18, 0, "probe-x")]


@pytest.mark.parametrize(
    ("body", "delta", "message"),
    [
        (struct.pack(">hi", 35, 0), 0, "error_code 35"),
        (struct.pack(">hi", 0, 1) + struct.pack(">hhh", 18, 0, 4), 1, "correlation"),
        (struct.pack(">hi", 0, 5), 0, "truncated"),
    ],
)
def test_api_versions_probe_rejects_bad_answers(body: bytes, delta: int, message: str) -> None:
    port, _ = _serve_once(lambda request: _response(request, body, delta))
    with pytest.raises(ProbeError, match=message):
        api_versions("127.0.0.1", port)


def test_probe_connection_refused_is_a_probe_error() -> None:
    (port,) = free_ports(1)
    with pytest.raises(ProbeError):
        api_versions("127.0.0.1", port, timeout=0.5)


def test_metadata_probe_parses_brokers_and_controller() -> None:
    def reply(request: bytes) -> bytes:
        api_key, version = struct.unpack_from(">hh", request)
        assert (api_key, version) == (3, 4)
        brokers = struct.pack(">i", 2)
        for node, port in ((1, 9092), (2, 9093)):
            brokers += struct.pack(">i", node) + _kstr("127.0.0.1") + struct.pack(">ih", port, -1)
        body = struct.pack(">i", 0) + brokers + _kstr("cid") + struct.pack(">ii", 2, 0)
        return _response(request, body)

    port, _ = _serve_once(reply)
    info = metadata("127.0.0.1", port)
    assert info.brokers == {1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9093)}
    assert (info.controller_id, info.cluster_id) == (2, "cid")


def test_docker_detection_pings_the_engine(tmp_path: Path) -> None:
    assert not _docker_engine_answers({"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert not _docker_engine_answers({"DOCKER_HOST": "ssh://somewhere"})
    for status, expected in ((b"200 OK", True), (b"500 Internal Server Error", False)):
        path = tmp_path / f"d{status[:3].decode()}.sock"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(1)

        def serve(server: socket.socket = server, status: bytes = status) -> None:
            conn, _ = server.accept()
            with conn:
                assert conn.recv(1024).startswith(b"GET /_ping ")
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\nOK")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        assert _docker_engine_answers({"DOCKER_HOST": f"unix://{path}"}) is expected
        thread.join(5)
        server.close()


def test_tls_files_from_openssl_verify_with_python_ssl(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    files = make_tls_files(tmp_path)
    assert files.keystore_type == "PEM" and files.keystore is not None
    assert "BEGIN PRIVATE KEY" in files.keystore.read_text()  # PKCS#8, what Kafka's PEM wants
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.keystore)
    client_ctx = ssl.create_default_context(cafile=str(files.ca_file))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"hi")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.recv(2) == b"hi"
        thread.join(5)
    wrong = ssl.create_default_context()  # system CAs only: must not trust our CA
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def refuse() -> None:
            conn, _ = listener.accept()
            with conn, contextlib.suppress(ssl.SSLError, OSError):
                server_ctx.wrap_socket(conn, server_side=True)

        thread = threading.Thread(target=refuse, daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            wrong.wrap_socket(raw, server_hostname="127.0.0.1")
        thread.join(5)


def _tls_exchange(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, hostname: str = "127.0.0.1"
) -> bytes:
    """One TLS connection on loopback: the server sends b"hi" (TLS 1.3: a refused client
    certificate shows on the client's first read)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with (
                conn,
                contextlib.suppress(ssl.SSLError, OSError),
                server_ctx.wrap_socket(conn, server_side=True) as tls,
            ):
                tls.sendall(b"hi")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client_ctx.wrap_socket(raw, server_hostname=hostname) as tls,
            ):
                return tls.recv(2)
        finally:
            thread.join(5)


def test_tls_files_client_certificate_hostnames_and_crl(tmp_path: Path) -> None:
    """The harness's mutual-TLS material works with Python's ssl: the client certificate
    (its key encrypted with ``client_key_password``) is accepted by a server requiring one,
    the broker certificate names only ``hostnames``, and :func:`make_crl` revokes it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    pytest.importorskip("cryptography", reason="make_crl needs the cryptography package")
    files = make_tls_files(tmp_path, hostnames=("localhost",))
    assert files.client_cert is not None and files.client_key is not None
    assert files.broker_cert is not None and files.client_key_password
    assert "ENCRYPTED" in files.client_key.read_text()
    assert files.client_key_password not in repr(files)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    assert files.keystore is not None
    server_ctx.load_cert_chain(files.keystore)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_verify_locations(cafile=str(files.ca_file))

    def client(*, cert: bool, crl: Path | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(files.ca_file))
        if cert:
            ctx.load_cert_chain(files.client_cert, files.client_key, files.client_key_password)
        if crl is not None:
            ctx.load_verify_locations(cafile=str(crl))
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        return ctx

    assert _tls_exchange(server_ctx, client(cert=True), "localhost") == b"hi"
    with pytest.raises(ssl.SSLError):  # no client certificate: the server refuses
        _tls_exchange(server_ctx, client(cert=False), "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="address mismatch"):
        _tls_exchange(server_ctx, client(cert=True), "127.0.0.1")
    clean = make_crl(files, tmp_path / "clean.pem")
    assert _tls_exchange(server_ctx, client(cert=True, crl=clean), "localhost") == b"hi"
    revoked = make_crl(files, tmp_path / "revoked.pem", revoke=[files.broker_cert])
    with pytest.raises(ssl.SSLCertVerificationError, match="revoked"):
        _tls_exchange(server_ctx, client(cert=True, crl=revoked), "localhost")


# ---------------------------------------------------------------------------------------------
# integration: real brokers


@pytest.mark.integration
def test_resume_settle_outlasts_the_fence_after_a_long_pause(kafka_cluster: KafkaCluster) -> None:
    # Paused past broker.session.timeout.ms (3 s), the node is fenced at the controller's
    # first session check after SIGCONT and unfenced at its next heartbeat; in between a
    # topic cannot be created. resume(settle=True) returns only after that window.
    if not kafka_cluster.controllable:
        pytest.skip("KAFKASTATE_BOOTSTRAP names a cluster the harness cannot pause")
    kafka = pytest.importorskip("kafka.admin")
    broker = kafka_cluster.brokers[0]
    broker.pause()
    try:
        tasks = Path(f"/proc/{broker.pid}/task")
        if tasks.is_dir():  # pause() returns once every thread of the JVM is stopped
            states = {
                (t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()
            }
            assert states <= set("TtZX"), states
        time.sleep(3.6)
    finally:
        started = time.monotonic()
        broker.resume(settle=True)
    assert time.monotonic() - started >= 1.5  # stayed ready for three heartbeat intervals
    assert not broker.is_paused
    admin = kafka.KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap)
    try:
        name = f"settled-{uuid.uuid4().hex[:8]}"
        rf = len(kafka_cluster.brokers)
        result = admin.create_topics([kafka.NewTopic(name, 1, rf)])
        assert [t["error_code"] for t in result["topics"]] == [0]
    finally:
        admin.close()


@pytest.mark.integration
def test_shared_cluster_listeners_really_work(kafka_cluster: KafkaCluster) -> None:
    if not kafka_cluster.controllable:
        pytest.skip("external cluster: listener details are not the harness's")
    broker = kafka_cluster.brokers[0]
    assert kafka_cluster.bootstrap == broker.address
    ranges = broker.probe()
    assert ranges[18][1] >= 3 and ranges[1][0] >= 4  # ApiVersions v3+; Kafka 4 drops Fetch < 4
    info = metadata(broker.host, broker.port)
    assert info.brokers == {1: (broker.host, broker.port)}
    assert info.controller_id == 1 and info.cluster_id == kafka_cluster.cluster_id

    # log4j binding works: the broker's own log says it started
    assert "Kafka Server started" in broker.log_file.read_text()

    # SASL_PLAINTEXT: alice for PLAIN and both SCRAMs (created at format time), bob PLAIN only
    creds = kafka_cluster.sasl
    address = kafka_cluster.sasl_bootstrap
    assert creds is not None and address is not None
    for mechanism in creds.mechanisms:
        assert _sasl_login(address, mechanism, creds.username, creds.password) == 0, mechanism
        assert (
            _sasl_login(address, mechanism, creds.username, "wrong") == SASL_AUTHENTICATION_FAILED
        ), mechanism
    assert _sasl_login(address, "PLAIN", creds.plain_only_username, creds.plain_only_password) == 0
    assert (
        _sasl_login(address, "SCRAM-SHA-256", creds.plain_only_username, creds.plain_only_password)
        == SASL_AUTHENTICATION_FAILED
    )

    # SSL: a Python client verifies the broker against the harness's CA (hostname 127.0.0.1)
    assert kafka_cluster.ssl_bootstrap is not None and kafka_cluster.ca_file is not None
    host, port = kafka_cluster.ssl_bootstrap.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        kafka_cluster.ssl_context().wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(_frame(18, 0, 7, b""))
        body = _read_frame(tls)
        assert struct.unpack_from(">h", body)[0] == 0
    # the PLAINTEXT port does not speak TLS
    with (
        socket.create_connection((host, broker.port), timeout=10) as raw,
        pytest.raises((ssl.SSLError, OSError)),
    ):
        kafka_cluster.ssl_context().wrap_socket(raw, server_hostname=host)


@pytest.mark.integration
def test_kafka_bootstrap_env_exports_the_shared_cluster(
    kafka_bootstrap_env: None, kafka_cluster: KafkaCluster
) -> None:
    assert os.environ["KAFKASTATE_BOOTSTRAP"] == kafka_cluster.bootstrap
    resolved = KafkaCluster.resolve()
    assert resolved.kind == "external" and resolved.env() == kafka_cluster.env()


@pytest.fixture
def keytool_path(tmp_path: Path) -> Iterator[str]:
    """A PATH with java, keytool and setpriv but no openssl (forces the keytool path)."""
    fetch_kafka_libs(default_kafka_version())  # mvn needs more of PATH than we leave
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = Path(find_java()).resolve()
    for name, target in (("java", java), ("keytool", java.parent / "keytool")):
        (bin_dir / name).symlink_to(target)
    for name in ("setpriv",):
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    yield str(bin_dir)


@needs_jvm
@pytest.mark.integration
def test_fault_control_on_one_broker_with_keytool_tls(
    keytool_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", keytool_path)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    started = time.monotonic()
    with KafkaCluster.start(ssl=True) as cluster:
        print(f"1 broker + keytool TLS ready in {time.monotonic() - started:.1f} s")
        broker = cluster.brokers[0]
        assert cluster.tls is not None and cluster.tls.keystore_type == "PKCS12"
        host, ssl_port = (cluster.ssl_bootstrap or "").rsplit(":", 1)
        with (
            socket.create_connection((host, int(ssl_port)), timeout=10) as raw,
            cluster.ssl_context().wrap_socket(raw, server_hostname=host),
        ):
            pass
        workdir, pid, port = cluster.workdir, broker.pid, broker.port
        assert workdir is not None and pid is not None and broker.is_running

        # every JVM leads its own process group (so signals reach exactly that node)
        assert os.getpgid(pid) == pid

        broker.pause()
        assert broker.is_paused and broker.is_running
        assert _probe_fails(broker.host, port)  # sockets open, nobody answers
        broker.resume()
        assert not broker.is_paused
        assert _eventually(lambda: not _probe_fails(broker.host, port), 10)

        broker.kill()
        assert not broker.is_running and broker.pid is None
        assert _probe_fails(broker.host, port)
        assert _java_pids_mentioning(str(workdir)) == []

        broker.restart()  # same node id, data dir and ports; waits until ready
        assert broker.port == port and broker.pid not in (None, pid)
        info = metadata(broker.host, port)
        assert info.cluster_id == cluster.cluster_id and set(info.brokers) == {1}

        broker.stop()  # graceful
        assert not broker.is_running and _probe_fails(broker.host, port)
    assert _java_pids_mentioning(str(workdir)) == []
    assert not workdir.exists()  # the harness made it, stop() removed it


@pytest.mark.kafka_needs("fault_control")
@needs_jvm
@pytest.mark.integration
def test_three_brokers_replicate_and_survive_kill_restart_pause(
    kafka_cluster3: KafkaCluster,
) -> None:
    kafka = pytest.importorskip("kafka.admin")
    cluster = kafka_cluster3
    assert len(cluster.brokers) == 3
    assert len(cluster.bootstrap.split(",")) == 3
    for broker in cluster.brokers:
        info = metadata(broker.host, broker.port)
        assert set(info.brokers) == {1, 2, 3} and info.cluster_id == cluster.cluster_id

    # right after readiness, replication factor 3 must be creatable (all brokers registered)
    admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:
        name = f"rf3-{uuid.uuid4().hex[:8]}"
        result = admin.create_topics([kafka.NewTopic(name, 2, 3)])
        assert [t["error_code"] for t in result["topics"]] == [0]
    finally:
        admin.close()

    victim = cluster.broker(2)
    port, pid = victim.port, victim.pid
    victim.kill()
    assert not victim.is_running
    assert _probe_fails(victim.host, port)
    others = [b for b in cluster.brokers if b is not victim]
    assert all(b.probe() for b in others)  # the rest still answer
    victim.restart()
    assert victim.port == port and victim.pid != pid
    assert set(metadata(victim.host, port).brokers) == {1, 2, 3}

    frozen = cluster.broker(3)
    frozen.pause()
    try:
        assert _probe_fails(frozen.host, frozen.port)
        assert cluster.broker(1).probe()
    finally:
        frozen.resume(settle=True)  # leave the shared cluster healthy


@needs_jvm
@pytest.mark.integration
def test_startup_failure_reports_the_log_and_leaves_no_jvm(tmp_path: Path) -> None:
    workdir = tmp_path / "bad"
    with pytest.raises(BrokerStartError) as info:
        KafkaCluster.start(workdir=workdir, jvm_options=["-XX:+NoSuchJvmOptionForTest"])
    message = str(info.value)
    assert "exited" in message
    assert str(workdir / "node-1" / "logs" / "server.log") in message
    assert "NoSuchJvmOptionForTest" in message  # the JVM's own complaint, from stdout.log
    assert info.value.log_path == workdir / "node-1" / "logs" / "server.log"
    assert (workdir / "node-1" / "logs" / "stdout.log").exists()  # kept for reading
    assert _java_pids_mentioning(str(workdir)) == []


def _cli(run_dir: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkastate.testing.broker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_clean_env(KAFKASTATE_RUN_DIR=str(run_dir)),
        check=False,
    )


@needs_jvm
@pytest.mark.integration
def test_cli_up_status_down_round_trip(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert _cli(run_dir, "status").returncode == 1
    up = _cli(run_dir, "up", "--sasl")
    assert up.returncode == 0, up.stderr
    values = dict(line.split("=", 1) for line in up.stdout.splitlines())
    assert set(values) >= {
        "KAFKASTATE_BOOTSTRAP",
        "KAFKASTATE_SASL_BOOTSTRAP",
        "KAFKASTATE_SASL_USERNAME",
        "KAFKASTATE_SASL_PASSWORD",
    }
    assert "KAFKASTATE_SSL_BOOTSTRAP" not in values
    host, port = values["KAFKASTATE_BOOTSTRAP"].rsplit(":", 1)
    assert host == "127.0.0.1"
    # the broker outlived the `up` process
    assert api_versions(host, int(port))[18]
    assert (
        _sasl_login(values["KAFKASTATE_SASL_BOOTSTRAP"], "SCRAM-SHA-512", "alice", "alice-secret")
        == 0
    )
    state = json.loads((run_dir / "state.json").read_text())
    pid = state["brokers"][0]["pid"]
    assert _java_pids_mentioning(str(run_dir)) == [pid]

    status = _cli(run_dir, "status")
    assert status.returncode == 0
    assert f"KAFKASTATE_BOOTSTRAP={values['KAFKASTATE_BOOTSTRAP']}" in status.stdout
    assert "ApiVersions ok" in status.stdout

    again = _cli(run_dir, "up", "--sasl")  # same options: idempotent
    assert again.returncode == 0 and again.stdout == up.stdout
    other = _cli(run_dir, "up", "--ssl")  # different options: refuse
    assert other.returncode == 1 and "down" in other.stderr

    down = _cli(run_dir, "down")
    assert down.returncode == 0
    assert _java_pids_mentioning(str(run_dir)) == []
    assert _probe_fails(host, int(port))
    assert not (run_dir / "state.json").exists() and not (run_dir / "cluster").exists()
    assert _cli(run_dir, "status").returncode == 1
    assert _cli(run_dir, "down").returncode == 0  # nothing to stop is fine


def _plugin_args() -> list[str]:
    entry_points = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "kafkastate.testing.pytest_plugin" for ep in entry_points):
        return []
    return ["-p", "kafkastate.testing.pytest_plugin"]


def _inner_pytest(
    tmp_path: Path, source: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *_plugin_args()),
            *("-rA", "-q", str(tmp_path / "test_inner.py")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
        check=False,
    )


@needs_jvm
@pytest.mark.integration
def test_plugin_reports_logs_on_failure_and_leaves_no_jvm(tmp_path: Path) -> None:
    inner_tmp = tmp_path / "tmp"
    inner_tmp.mkdir()
    result = _inner_pytest(
        tmp_path,
        """
        def test_ok(kafka_cluster):
            assert kafka_cluster.brokers[0].probe()

        def test_fails(kafka_cluster):
            assert kafka_cluster.bootstrap == "nowhere"
        """,
        _clean_env(TMPDIR=str(inner_tmp)),
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "kafkastate broker logs" in out
    logs = re.findall(r"(/\S+/node-1/logs/server\.log)", out)
    assert logs and Path(logs[0]).is_file(), out  # kept because the session failed
    assert str(inner_tmp) in logs[0]
    assert _java_pids_mentioning(str(inner_tmp)) == []


def test_plugin_skips_naming_java_when_absent(tmp_path: Path) -> None:
    source = """
        def test_needs_broker(kafka_cluster):
            raise AssertionError("must not run")
        """
    env = _clean_env(PATH=str(tmp_path), KAFKASTATE_NO_DOCKER="1")
    env.pop("JAVA_HOME", None)
    skipped = _inner_pytest(tmp_path, source, env)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "1 skipped" in skipped.stdout
    assert "java not found" in skipped.stdout
    required = _inner_pytest(tmp_path, source, {**env, "KAFKASTATE_REQUIRE_BROKER": "1"})
    assert required.returncode == 1
    assert "java not found" in required.stdout and "KAFKASTATE_REQUIRE_BROKER" in required.stdout


@pytest.mark.kafka_needs("fault_control")
@needs_jvm
@pytest.mark.integration
def test_heal_brings_a_killed_node_back(kafka_cluster3: KafkaCluster) -> None:
    victim = kafka_cluster3.broker(3)
    victim.kill()
    assert not victim.is_running
    kafka_cluster3.heal()  # what every kafka_cluster3 test gets first
    assert victim.is_running
    assert set(metadata(victim.host, victim.port).brokers) == {1, 2, 3}
