"""The one option layer (kafkastate.core.config): every option checked by name, the
libraries' defaults per face, Java property names, unknown and unsupported options,
cross-checks, the builders, and docs/options.md generated from the table."""

from __future__ import annotations

import math
import pathlib
import random
import subprocess
import sys
from typing import Any

import attrs
import kafka
import pytest

from kafkastate.core.config import (
    FLAVOURS,
    OPTIONS,
    SECRET_OPTIONS,
    UNSUPPORTED,
    accepted,
    admin_config,
    client_config,
    consumer_machine,
    deserializer_of,
    fetcher_config,
    from_properties,
    from_text,
    group_config,
    max_usable_produce_magic,
    options_dict,
    producer_config,
    resolve,
    serializer_of,
)
from kafkastate.core.consumer.group import GroupConfig
from kafkastate.core.consumer.group848 import ConsumerGroupConfig
from kafkastate.core.producer.accumulator import (
    MIN_BUFFER_MEMORY,
    RECORD_OVERHEAD,
    AccumulatorConfig,
)
from kafkastate.core.producer.producer import ProducerMachine
from kafkastate.errors import KafkaConfigurationError
from kafkastate.serializer import DefaultSerializer, JsonSerializer

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROLES = ("consumer", "producer", "admin")
# options whose check takes any value (no wrong type to give)
ANY_VALUE = {"api_version", "listener", "loop"}


def given(**options: Any) -> dict[str, Any]:
    return {"bootstrap_servers": "localhost", **options}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_defaults_resolve_and_build(role: str, flavour: str) -> None:
    options = resolve(role, flavour, given(), owner="T")
    assert set(options) == accepted(role, flavour)
    if role == "consumer":
        machine = consumer_machine(options, rng=__import__("random").Random(1))
        assert machine.config.client.bootstrap_servers == (("localhost", 9092),)
    elif role == "producer":
        config = producer_config(options)
        assert config.accumulator.max_block is not None
    else:
        admin = admin_config(options)
        assert admin.client.bootstrap_servers == (("localhost", 9092),)
        assert admin.retry_backoff == 0.1


def test_the_admin_role_takes_client_options_only() -> None:
    options = resolve("admin", "aiokafka", given(retry_backoff_ms=250), owner="T")
    assert options["request_timeout_ms"] == 40000  # aiokafka's admin default
    assert admin_config(options).retry_backoff == 0.25
    for name in ("group_id", "acks", "allow_auto_create_topics"):
        with pytest.raises(TypeError, match=name):
            resolve("admin", "kafkastate", given(**{name: "x"}), owner="T")


@pytest.mark.parametrize(
    "name", sorted(n for n in OPTIONS if n not in ANY_VALUE and n != "bootstrap_servers")
)
def test_every_option_refuses_a_wrong_value_by_name(name: str) -> None:
    option = OPTIONS[name]
    role = sorted(option.roles)[0]
    flavour = next(f for f in FLAVOURS if name in accepted(role, f))
    with pytest.raises(KafkaConfigurationError, match=name):
        resolve(role, flavour, given(**{name: object()}), owner="T")


def test_the_libraries_defaults_differ_where_the_libraries_do() -> None:
    aio = resolve("consumer", "aiokafka", given(group_id="g"), owner="T")
    kp = resolve("consumer", "kafka-python", given(group_id="g"), owner="T")
    ks = resolve("consumer", "kafkastate", given(group_id="g"), owner="T")
    assert (aio["enable_auto_commit"], kp["enable_auto_commit"], ks["enable_auto_commit"]) == (
        True,
        True,
        False,
    )
    assert (aio["session_timeout_ms"], kp["session_timeout_ms"]) == (10000, 45000)
    assert aio["rebalance_timeout_ms"] == 10000 and kp["rebalance_timeout_ms"] is None
    assert aio["partition_assignment_strategy"] == ("roundrobin",)
    assert kp["partition_assignment_strategy"] == ("range", "roundrobin")
    assert aio["request_timeout_ms"] == 40000
    assert kp["consumer_timeout_ms"] == math.inf
    assert kp["receive_message_max_bytes"] == 100_000_000
    # aiokafka's producer: acks 1 unless idempotent; max_block is the request timeout
    p = resolve("producer", "aiokafka", given(), owner="T")
    assert (p["acks"], p["linger_ms"], p["max_block_ms"]) == (1, 0, 40000)
    p = resolve("producer", "aiokafka", given(enable_idempotence=True), owner="T")
    assert p["acks"] == "all"
    assert resolve("producer", "kafka-python", given(), owner="T")["acks"] == -1


def test_java_property_names_are_accepted() -> None:
    options = resolve(
        "consumer",
        "kafkastate",
        {"bootstrap.servers": "b:1", "fetch.min.bytes": 10, "group.id": "g"},
        owner="T",
    )
    assert options["fetch_min_bytes"] == 10 and options["group_id"] == "g"
    assert fetcher_config(options).client.bootstrap_servers == (("b", 1),)


def test_unknown_and_unsupported_options_are_named() -> None:
    with pytest.raises(TypeError, match=r"T: unknown option\(s\): bogus"):
        resolve("consumer", "aiokafka", given(bogus=1), owner="T")
    with pytest.raises(KafkaConfigurationError, match="socks5_proxy"):
        resolve("consumer", "kafka-python", given(socks5_proxy="k"), owner="T")
    assert not UNSUPPORTED["aiokafka"]  # every aiokafka option is implemented
    with pytest.raises(TypeError, match="loop"):  # aiokafka's only
        resolve("producer", "kafkastate", given(loop=None), owner="T")
    # an option of another face only is unknown here
    with pytest.raises(TypeError, match="listener"):
        resolve("consumer", "aiokafka", given(listener=None), owner="T")


@pytest.mark.parametrize("role", ROLES)
def test_kafka_python_unknown_options_are_unrecognized_configs(role: str) -> None:
    # kafka-python 3.0's KafkaConsumer raises KafkaConfigurationError("Unrecognized configs:
    # {...}"), its KafkaProducer a ValueError with the same words: this is both
    with pytest.raises(KafkaConfigurationError) as caught:
        resolve(role, "kafka-python", given(zeta=1, alpha=2), owner="T")
    assert str(caught.value) == "T: Unrecognized configs: {'alpha', 'zeta'}"
    assert isinstance(caught.value, ValueError)
    with pytest.raises(KafkaConfigurationError, match=r"Unrecognized configs: \{'listener'\}"):
        resolve(role, "kafka-python", given(listener=None), owner="T")


@pytest.mark.parametrize(
    ("role", "flavour", "options", "match"),
    [
        (
            "consumer",
            "kafkastate",
            {"heartbeat_interval_ms": 5000, "session_timeout_ms": 5000},
            "heartbeat_interval_ms .* must be below session_timeout_ms",
        ),
        (
            "consumer",
            "kafkastate",
            {"group_protocol": "consumer", "partition_assignment_strategy": ["range"]},
            "does not apply to group_protocol",
        ),
        ("consumer", "kafkastate", {"group_remote_assignor": "uniform"}, "needs group_protocol"),
        ("consumer", "kafkastate", {"listener": object()}, "needs a group_id"),
        ("consumer", "kafkastate", {"sasl_mechanism": "PLAIN"}, "needs security_protocol"),
        (
            "consumer",
            "kafka-python",
            {"security_protocol": "SASL_PLAINTEXT"},
            "sasl_mechanism must be one of",
        ),
        (
            "producer",
            "kafkastate",
            {"delivery_timeout_ms": 100, "linger_ms": 50},
            "delivery_timeout_ms .* must be >= linger_ms",
        ),
        (
            "producer",
            "kafka-python",
            {"transactional_id": "t", "enable_idempotence": False},
            r"^Cannot set transactional_id without enable_idempotence\.$",
        ),
        (
            "producer",
            "kafkastate",
            {"transactional_id": "t", "enable_idempotence": False},
            "transactional_id needs enable_idempotence",
        ),
        ("producer", "kafkastate", {"compression_type": "brotli"}, "compression_type"),
        ("producer", "kafkastate", {"acks": 7}, "acks"),
    ],
)
def test_cross_checks(role: str, flavour: str, options: dict[str, Any], match: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=match):
        resolve(role, flavour, given(**options), owner="T")


def test_settled_values() -> None:
    c = resolve(
        "consumer",
        "kafkastate",
        given(fetch_max_bytes=10, max_partition_fetch_bytes=5, receive_message_max_bytes=1),
        owner="T",
    )
    assert c["receive_message_max_bytes"] == 15  # room for a whole Fetch response
    assert client_config(c).connection.max_frame_size == 15
    c = resolve("consumer", "kafkastate", given(enable_auto_commit=True), owner="T")
    assert c["enable_auto_commit"] is False  # no group_id: nothing to commit to
    p = resolve("producer", "kafkastate", given(transactional_id="t"), owner="T")
    assert p["enable_idempotence"] is True
    p = resolve("producer", "kafkastate", given(max_batch_size=100), owner="T")
    assert producer_config(p).accumulator.batch_size == 100
    p = resolve(
        "producer", "kafka-python", given(max_in_flight_requests_per_connection=1), owner="T"
    )
    config = producer_config(p)
    assert config.max_in_flight_requests_per_connection == 1
    assert config.client.connection.max_in_flight == 5  # metadata shares the wire
    aio = resolve("consumer", "aiokafka", given(), owner="T")
    assert aio["sasl_mechanism"] is None  # aiokafka's PLAIN default means nothing here


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_buffer_memory_below_what_the_smallest_record_needs_is_refused(flavour: str) -> None:
    # 561 = 480 (each record's count) + 81 (the smallest record in a batch of its own):
    # below it every send used to be refused as a MessageTooLargeError with a negative limit
    assert MIN_BUFFER_MEMORY == RECORD_OVERHEAD + 81 == 561
    for value in (1, 480, MIN_BUFFER_MEMORY - 1):
        with pytest.raises(KafkaConfigurationError) as info:
            resolve("producer", flavour, given(buffer_memory=value), owner="T")
        assert str(info.value).startswith(f"buffer_memory must be at least 561 bytes, got {value}")
    with pytest.raises(KafkaConfigurationError, match=r"^buffer_memory must be at least 561"):
        resolve("producer", flavour, given(**{"buffer.memory": 100}), owner="T")
    p = resolve("producer", flavour, given(buffer_memory=MIN_BUFFER_MEMORY), owner="T")
    config = producer_config(p)
    assert config.accumulator.buffer_memory == MIN_BUFFER_MEMORY
    # the smallest record fits it; nothing else is asked of batch_size (as Java)
    machine = ProducerMachine(attrs.evolve(config, acks=1), rng=random.Random(0))
    machine.send("t", value=None, timestamp_ms=0, now=0.0)  # held for metadata, not refused
    assert resolve("producer", flavour, given(buffer_memory=600, batch_size=16384), owner="T")
    with pytest.raises(KafkaConfigurationError, match="buffer_memory must be an int >= 561"):
        AccumulatorConfig(buffer_memory=MIN_BUFFER_MEMORY - 1)
    assert str(MIN_BUFFER_MEMORY) in OPTIONS["buffer_memory"].doc  # (docs/options.md)


def test_group_configs() -> None:
    classic = group_config(resolve("consumer", "kafkastate", given(group_id="g"), owner="T"))
    assert isinstance(classic, GroupConfig)
    assert [a.name for a in classic.assignors] == ["range", "cooperative-sticky"]
    kip848 = group_config(
        resolve("consumer", "kafkastate", given(group_id="g", group_protocol="consumer"), owner="T")
    )
    assert isinstance(kip848, ConsumerGroupConfig)
    assert group_config(resolve("consumer", "kafkastate", given(), owner="T")) is None


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("check_crcs", "false", False),
        ("fetch.min.bytes", "10", 10),
        ("linger_ms", "2.5", 2.5),
        ("acks", "all", "all"),
        ("acks", "-1", -1),
        ("group_id", " g ", "g"),
    ],
)
def test_from_text(name: str, raw: str, value: Any) -> None:
    assert from_text(name, raw) == value


def test_from_properties_takes_java_librdkafka_and_python_names() -> None:
    got = from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-256",  # librdkafka's plural
            "sasl.username": "alice",
            "sasl_plain_password": "secret",
            "ssl.ca.location": "/ca.pem",
            "request.timeout.ms": "5000",
        }
    )
    assert got == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "secret",
        "ssl_cafile": "/ca.pem",
        "request_timeout_ms": 5000,
    }
    resolve("admin", "kafka-python", got, owner="T")  # every name is an option the face takes


def test_from_properties_names_what_it_refuses() -> None:
    with pytest.raises(KafkaConfigurationError, match=r"no\.such is not an option"):
        from_properties({"no.such": "1"})
    with pytest.raises(KafkaConfigurationError, match=r"request\.timeout\.ms must be a number"):
        from_properties({"request.timeout.ms": "soon"})


def test_from_text_refuses() -> None:
    with pytest.raises(KafkaConfigurationError, match="x must be true or false"):
        from_text("check_crcs", "maybe", label="x")
    with pytest.raises(KafkaConfigurationError, match="must be a number"):
        from_text("fetch_min_bytes", "lots")
    with pytest.raises(KafkaConfigurationError, match="cannot be given as text"):
        from_text("value_deserializer", "f")
    with pytest.raises(KafkaConfigurationError, match="not an option"):
        from_text("nope", "1")


def test_the_options_page_is_generated_from_the_table() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_options_doc.py")],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    page = (ROOT / "docs" / "options.md").read_text()
    assert out == page, (
        "docs/options.md is stale: python tools/gen_options_doc.py > docs/options.md"
    )


# ------------------------------------------------------- kafka-python 3.0's own checks


def _kp(role: str, **options: Any) -> dict[str, Any]:
    return resolve(role, "kafka-python", given(**options), owner="T")


@pytest.mark.parametrize(
    "options",
    [
        {"fetch_max_wait_ms": 30000},  # not below request_timeout_ms
        {"request_timeout_ms": 540000},  # not below connections_max_idle_ms
        {"connections_max_idle_ms": 400},  # below both
    ],
)
def test_kafka_python_consumer_timeouts_are_ordered(options: dict[str, Any]) -> None:
    merged = {"fetch_max_wait_ms": 500, "request_timeout_ms": 30000}
    merged |= {"connections_max_idle_ms": 540000} | options
    with pytest.raises(KafkaConfigurationError) as caught:
        _kp("consumer", **options)
    # kafka-python's sentence, naming all three with their values
    assert str(caught.value) == (
        f"connections_max_idle_ms ({merged['connections_max_idle_ms']}) must be larger than "
        f"request_timeout_ms ({merged['request_timeout_ms']}) which must be larger than "
        f"fetch_max_wait_ms ({merged['fetch_max_wait_ms']})."
    )
    # the other faces do not make this check (aiokafka and Java do not)
    resolve("consumer", "kafkastate", given(**options), owner="T")


def test_kafka_python_heartbeat_check_needs_a_group() -> None:
    with pytest.raises(
        KafkaConfigurationError,
        match=r"^Heartbeat interval must be lower than the session timeout \(9000 v 9000\)",
    ):
        _kp("consumer", group_id="g", heartbeat_interval_ms=9000, session_timeout_ms=9000)
    _kp("consumer", heartbeat_interval_ms=9000, session_timeout_ms=9000)  # no group: as kp


def test_kafka_python_api_version_hint_and_the_group_timeouts() -> None:
    old = _kp("consumer", group_id="g", api_version=(0, 10, 0), max_poll_interval_ms=20000)
    assert old["session_timeout_ms"] == 20000  # one given: both, as kafka-python
    assert old["api_version"] == (0, 10, 0)
    with pytest.raises(KafkaConfigurationError, match="does not support different values for"):
        _kp(
            "consumer",
            group_id="g",
            api_version="0.10.0",
            session_timeout_ms=10000,
            max_poll_interval_ms=20000,
        )
    with pytest.raises(KafkaConfigurationError, match=r"\(3000 v 2000\)"):
        # the session timeout follows max_poll_interval_ms first, then the heartbeat check
        _kp("consumer", group_id="g", api_version=(0, 10, 0), max_poll_interval_ms=2000)
    assert _kp("consumer", api_version=(2, 8))["session_timeout_ms"] == 30000  # pre KIP-735
    assert _kp("consumer", api_version=(3, 9))["session_timeout_ms"] == 45000
    assert _kp("consumer", api_version="auto")["api_version"] is None
    with pytest.raises(KafkaConfigurationError, match="api_version must be tuple"):
        _kp("consumer", api_version=[2, 8])


@pytest.mark.parametrize(
    ("flavour", "options", "conflicts"),
    [
        *((f, {"acks": 1}, "acks=1") for f in FLAVOURS),
        *(
            (
                f,
                {"acks": 0, "max_in_flight_requests_per_connection": 6},
                "acks=0, max_in_flight_requests_per_connection=6",
            )
            for f in FLAVOURS
        ),
        ("kafka-python", {"acks": 1, "retries": 0}, "acks=1, retries=0"),
    ],
)
def test_idempotence_conflicts_are_named_in_one_message(
    flavour: str, options: dict[str, Any], conflicts: str
) -> None:
    # kafka-python's words, on every face (the option-error conformance scenario pins it)
    with pytest.raises(KafkaConfigurationError) as caught:
        resolve("producer", flavour, given(enable_idempotence=True, **options), owner="T")
    assert (
        str(caught.value)
        == f"enable_idempotence=True is incompatible with user-provided {conflicts}"
    )
    with pytest.raises(KafkaConfigurationError, match=conflicts):
        resolve("producer", flavour, given(transactional_id="t", **options), owner="T")
    # left unset, idempotence is off with such settings (kafka-python and Java)
    unset = resolve("producer", flavour, given(**options), owner="T")
    assert not producer_config(unset).idempotent


def test_kafka_python_api_version_hint_refuses_what_the_broker_lacks() -> None:
    assert _kp("producer", api_version=(0, 10, 2))["enable_idempotence"] is False  # default
    assert producer_config(_kp("producer", api_version=(0, 11)))
    for options in ({"enable_idempotence": True}, {"transactional_id": "t"}):
        with pytest.raises(
            KafkaConfigurationError,
            match=r"^Idempotent/Transactional producer requires broker >= 0\.11 "
            r"\(got api_version=\(0, 10, 2\)\)$",
        ):
            _kp("producer", api_version="0.10.2", **options)
    with pytest.raises(KafkaConfigurationError, match=r"^Zstd Requires >= Kafka 2\.1 Brokers$"):
        _kp("producer", api_version=(2, 0), compression_type="zstd")
    assert _kp("producer", api_version=(2, 1), compression_type="zstd")["api_version"] == (2, 1)


def test_max_usable_produce_magic() -> None:
    assert [max_usable_produce_magic(v) for v in ((4, 0), (0, 11), (0, 10, 2), (0, 9))] == [
        2,
        2,
        1,
        0,
    ]
    assert max_usable_produce_magic("0.10.0") == 1
    for version in ((4, 0), (0, 11), (0, 10, 2), (0, 10, 0), (0, 9)):
        assert max_usable_produce_magic(version) == kafka.KafkaProducer.max_usable_produce_magic(
            version
        )


def test_serializers_and_deserializers_are_callables_or_objects() -> None:
    options = resolve(
        "consumer",
        "kafka-python",
        given(key_deserializer=DefaultSerializer(), value_deserializer=bytes.upper),
        owner="T",
    )
    keys = deserializer_of(options["key_deserializer"])
    values = deserializer_of(options["value_deserializer"])
    assert keys is not None and values is not None
    assert keys("t", [], b"k") == "k" and keys("t", [], None) is None
    assert values("t", [], b"v") == b"V"
    assert deserializer_of(None) is None
    with pytest.raises(KafkaConfigurationError, match="deserialize"):
        resolve("consumer", "kafka-python", given(key_deserializer=3), owner="T")
    json_ = serializer_of(JsonSerializer())
    assert json_ is not None and json_("t", [], {"a": 1}) == b'{"a": 1}'
    plain = serializer_of(str.encode)
    assert plain is not None and plain("t", [], "x") == b"x"


def test_options_dict_is_kafka_pythons_config() -> None:
    config = options_dict("consumer", "kafka-python", {"group_id": "g", "fetch.min.bytes": 7})
    assert config["group_id"] == "g" and config["fetch_min_bytes"] == 7
    assert config["bootstrap_servers"] == "localhost"  # kafka-python's default, as given
    assert set(config) == accepted("consumer", "kafka-python")


def test_aiokafka_serializers_are_plain_callables() -> None:
    from kafkastate.serializer import JsonSerializer  # noqa: PLC0415

    with pytest.raises(
        KafkaConfigurationError, match=r"value_serializer must be a callable f\(data\)"
    ):
        resolve("producer", "aiokafka", {"value_serializer": JsonSerializer()}, owner="t")
    # kafka-python's face takes the object; a callable works everywhere
    resolve("producer", "kafka-python", {"value_serializer": JsonSerializer()}, owner="t")
    resolve("producer", "aiokafka", {"value_serializer": str.encode}, owner="t")


# -- TLS options (issue 19) ----------------------------------------------------------------

_FILES = {"ssl_cafile": "/ca.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem"}
_FACES = [("kafka-python", "KafkaProducer"), ("aiokafka", "AIOKafkaProducer"),
          ("kafkastate", "open_producer")]  # fmt: skip


@pytest.mark.parametrize(("flavour", "owner"), _FACES)
@pytest.mark.parametrize("role", ["consumer", "producer", "admin"])
def test_kafka_python_tls_options_on_every_face(flavour: str, owner: str, role: str) -> None:
    given = {"security_protocol": "SSL", **_FILES, "ssl_password": "pw", "ssl_crlfile": "/crl",
             "ssl_ciphers": "ECDHE+AESGCM", "ssl_check_hostname": False}  # fmt: skip
    out = resolve(role, flavour, given, owner=owner)
    assert {k: out[k] for k in given} == given
    # the Java / librdkafka spellings too
    out = resolve(role, flavour, {"security_protocol": "SSL", "ssl.crl.location": "/crl",
                                  "ssl.ca.location": "/ca.pem"}, owner=owner)  # fmt: skip
    assert out["ssl_crlfile"] == "/crl" and out["ssl_cafile"] == "/ca.pem"
    assert out["ssl_check_hostname"] is True  # on by default


@pytest.mark.parametrize(
    "extra", [{"ssl_cafile": "/ca.pem"}, {"ssl_crlfile": "/crl"}, {"ssl_check_hostname": False}]
)
def test_ssl_context_beside_ssl_files_is_refused(extra: dict[str, Any]) -> None:
    context = _FakeContext()
    given = {"security_protocol": "SSL", "ssl_context": context, **extra}
    with pytest.raises(KafkaConfigurationError, match=f"ssl_context and {next(iter(extra))}"):
        resolve("producer", "kafka-python", given, owner="KafkaProducer")


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_tls_settings_without_tls_are_refused_never_silently_plaintext(protocol: str) -> None:
    given: dict[str, Any] = {"security_protocol": protocol, "ssl_cafile": "/ca.pem"}
    if protocol.startswith("SASL"):
        given |= {"sasl_mechanism": "PLAIN", "sasl_plain_username": "u",
                  "sasl_plain_password": "p"}  # fmt: skip
    with pytest.raises(KafkaConfigurationError, match="ssl_cafile given but security_protocol"):
        resolve("consumer", "kafkastate", given, owner="open_consumer")


def test_aiokafka_ssl_needs_a_context_or_a_ca_file() -> None:
    with pytest.raises(KafkaConfigurationError, match="create_ssl_context"):
        resolve("producer", "aiokafka", {"security_protocol": "SSL"}, owner="AIOKafkaProducer")
    out = resolve("producer", "aiokafka", {"security_protocol": "SSL", "ssl_cafile": "/ca"},
                  owner="AIOKafkaProducer")  # fmt: skip
    assert out["ssl_cafile"] == "/ca"


def test_passwords_are_checked_without_being_shown() -> None:
    with pytest.raises(KafkaConfigurationError) as info:
        resolve("producer", "kafkastate", {"security_protocol": "SASL_PLAINTEXT",
                "sasl_plain_password": ["hunter2"]}, owner="open_producer")  # fmt: skip
    assert "hunter2" not in str(info.value) and "list" in str(info.value)
    with pytest.raises(KafkaConfigurationError) as info:
        resolve("producer", "kafkastate", {"security_protocol": "SSL", "ssl_certfile": "/c",
                "ssl_password": 1234567}, owner="open_producer")  # fmt: skip
    assert "1234567" not in str(info.value)
    # a callable returning the password is what SSLContext.load_cert_chain takes too
    out = resolve("producer", "kafkastate", {"security_protocol": "SSL", "ssl_certfile": "/c",
                  "ssl_password": lambda: "pw"}, owner="open_producer")  # fmt: skip
    assert out["ssl_password"]() == "pw"


def test_a_faces_config_dict_masks_passwords() -> None:
    given = {"ssl_password": "k-secret", "sasl_plain_password": "s-secret"}
    config = options_dict("producer", "kafka-python", given)
    assert config["ssl_password"] == "k-secret" and config["sasl_plain_password"] == "s-secret"
    assert "secret" not in repr(config) and "secret" not in str(config)
    assert SECRET_OPTIONS == ("ssl_password", "sasl_plain_password")


class _FakeContext:
    """Stands for an ssl.SSLContext (the core checks only that it can wrap sockets)."""

    def wrap_socket(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError
