"""Every public name of kafka-python 3.0's modules resolves in kafkastate's equivalent
module, with the same subclass relations and ``retriable`` flags (except the differences
listed here on purpose), and docs/migrating-from-kafka-python.md names each of them.

Where kafkastate puts kafka-python's modules (its faces are not organised as kafka-python's
packages, so ``kafka.consumer.subscription_state`` has no module of its own):

=================================== ==========================
kafka-python 3.0                    kafkastate
=================================== ==========================
``kafka``                           ``kafkastate.sync``
``kafka.admin``                     ``kafkastate.sync`` (the values: ``kafkastate.admin``)
``kafka.errors``                    ``kafkastate.errors``
``kafka.structs``                   ``kafkastate.structs``
``kafka.serializer``                ``kafkastate.serializer``
``kafka.partitioner``               ``kafkastate.partitioner``
``kafka.consumer.subscription_state`` ``kafkastate.abc``
=================================== ==========================
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re
from types import ModuleType

import pytest

from kafkastate import errors

kafka = pytest.importorskip("kafka")

MODULES = {
    "kafka": "kafkastate.sync",
    "kafka.admin": "kafkastate.sync",
    "kafka.errors": "kafkastate.errors",
    "kafka.structs": "kafkastate.structs",
    "kafka.serializer": "kafkastate.serializer",
    "kafka.partitioner": "kafkastate.partitioner",
    "kafka.consumer.subscription_state": "kafkastate.abc",
}

NO_EQUIVALENT = {
    # kafka-python 3.0's protocol enum: kafkastate takes the string
    # (isolation_level="read_committed")
    ("kafka", "IsolationLevel"),
    # kafka-python's internal consumer state: kafkastate's is the core ConsumerMachine
    ("kafka.consumer.subscription_state", "SubscriptionState"),
    ("kafka.consumer.subscription_state", "SubscriptionType"),
    ("kafka.consumer.subscription_state", "TopicPartitionState"),
}

# (sub, base, kafka-python's answer to issubclass(sub, base)) where kafkastate differs on
# purpose (docs/migrating-from-kafka-python.md, "Exceptions").
HIERARCHY_DIFFERENCES = {
    # kafkastate's CorruptRecordError is a local record-batch validation error; broker code 2
    # is CorruptMessageError (kafka-python's CorruptRecordError / CorruptRecordException),
    # retriable as in Java and the protocol table
    ("CorruptRecordError", "BrokerResponseError", True),
    ("CorruptRecordError", "CorruptRecordException", True),
    ("CorruptRecordException", "CorruptRecordError", True),
    ("CorruptRecordException", "RetriableError", False),
    # kafkastate's UnsupportedVersionError is the local "no common API version"; broker code
    # 35 is BrokerUnsupportedVersionError (kafka-python's IncompatibleBrokerVersion)
    ("UnsupportedVersionError", "BrokerResponseError", True),
    # broker timeouts and network errors are also the local timeout / connection error
    ("RequestTimedOutError", "KafkaTimeoutError", False),
    ("NetworkExceptionError", "KafkaConnectionError", False),
}
RETRIABLE_DIFFERENCES = {"CorruptRecordException", "CorruptRecordError"}


def public_names(module: ModuleType) -> list[str]:
    """Names a kafka-python module offers: its ``__all__``, else what it defines (imports of
    other modules' names and submodules left out; kafka.errors: everything but modules)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(names)
    out = []
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        home = getattr(obj, "__module__", module.__name__)
        if module.__name__ in {"kafka.errors", home}:
            out.append(name)
    return sorted(out)


PAIRS = [
    (theirs, ours, name)
    for theirs, ours in MODULES.items()
    for name in public_names(importlib.import_module(theirs))
]


@pytest.mark.parametrize(("theirs", "ours", "name"), PAIRS)
def test_every_public_name_resolves(theirs: str, ours: str, name: str) -> None:
    if (theirs, name) in NO_EQUIVALENT:
        return
    module = importlib.import_module(ours)
    obj = getattr(module, name, None)
    assert obj is not None, f"{theirs}.{name} has no {ours}.{name}"
    original = getattr(importlib.import_module(theirs), name)
    assert inspect.isclass(obj) == inspect.isclass(original), name
    assert callable(obj) == callable(original), name


def _classes(theirs: str, ours: str) -> list[tuple[str, type, type]]:
    kp, ks = importlib.import_module(theirs), importlib.import_module(ours)
    return [
        (name, getattr(kp, name), getattr(ks, name))
        for name in public_names(kp)
        if (theirs, name) not in NO_EQUIVALENT and inspect.isclass(getattr(kp, name))
    ]


@pytest.mark.parametrize("theirs", sorted(MODULES))
def test_subclass_relations_match(theirs: str) -> None:
    classes = _classes(theirs, MODULES[theirs])
    differ = []
    for a, kp_a, ks_a in classes:
        for b, kp_b, ks_b in classes:
            expected = issubclass(kp_a, kp_b)
            if issubclass(ks_a, ks_b) != expected and (a, b, expected) not in HIERARCHY_DIFFERENCES:
                differ.append((a, b, expected))
    assert differ == []


def test_retriable_flags_match() -> None:
    differ = [
        name
        for name, kp_cls, ks_cls in _classes("kafka.errors", "kafkastate.errors")
        if issubclass(kp_cls, kafka.errors.KafkaError)
        and kp_cls.retriable != ks_cls.retriable
        and name not in RETRIABLE_DIFFERENCES
    ]
    assert differ == []


def test_errno_of_every_broker_error_matches() -> None:
    for name, kp_cls, ks_cls in _classes("kafka.errors", "kafkastate.errors"):
        errno = getattr(kp_cls, "errno", None)
        if isinstance(errno, int) and name not in {"CorruptRecordError", "UnsupportedVersionError"}:
            assert ks_cls.errno == errno, name  # type: ignore[attr-defined]
    assert kafka.errors.for_code(3).__name__ == "UnknownTopicOrPartitionError"
    assert errors.for_code(3) is errors.UnknownTopicOrPartitionError
    assert errors.for_code(0) is errors.NoError and errors.kafka_errors[0] is errors.NoError


def test_the_migration_page_names_every_public_name() -> None:
    page = (pathlib.Path(__file__).parents[1] / "docs/migrating-from-kafka-python.md").read_text()
    missing = [
        f"{theirs}.{name}"
        for theirs, _, name in PAIRS
        if f"`{name}`" not in page and f".{name}`" not in page
    ]
    assert missing == []


@pytest.mark.parametrize("cls_name", ["KafkaProducer", "KafkaConsumer"])
def test_the_migration_page_names_every_option_and_method(cls_name: str) -> None:
    """Each of kafka-python 3.0's options (``DEFAULT_CONFIG``) and public methods of the
    producer and consumer is on the page: what it does in kafkastate, or why not."""
    page = (pathlib.Path(__file__).parents[1] / "docs/migrating-from-kafka-python.md").read_text()
    prose = re.sub(r"```.*?```", "", page, flags=re.DOTALL)  # the examples do not count
    named: set[str] = set()
    for span in re.findall(r"`([^`]+)`", prose):  # (a span may wrap a line)
        named.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span))
    cls = getattr(kafka, cls_name)
    methods = [n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)]
    missing = [n for n in [*cls.DEFAULT_CONFIG, *methods] if n not in named]
    assert missing == [], f"docs/migrating-from-kafka-python.md does not mention {missing}"


# ------------------------------------------------------------ the admin client

# kafka-python 3.0's KafkaAdminClient methods kafkastate's differs on, on purpose
# (docs/migrating-from-kafka-python.md, "Admin client"): none is missing.
DIFFERENCES: dict[str, str] = {
    "api_versions": "API keys are ints, not kafka-python's ApiKey enum",
    "get_broker_version_data": "a dict (broker id, API ranges), not a BrokerVersionData",
}

# (method, parameter) of kafka-python 3.0 that kafkastate does not take, on purpose
PARAMETER_DIFFERENCES: dict[tuple[str, str], str] = {
    # kafkastate describes every config (kafka-python 3.0 filters to "modified" ones by
    # default): a caller filters on ConfigEntry.source
    ("describe_configs", "config_filter"): "every config is described",
    # kafka-python checks config names with a DescribeConfigs first; the broker refuses
    # an unknown name itself (InvalidConfigurationError for that resource)
    ("alter_configs", "raise_on_unknown"): "the broker checks the names",
}


def test_every_kafka_python_3_admin_method_exists() -> None:
    """Each public method of kafka-python 3.0's ``KafkaAdminClient`` exists on
    kafkastate's and takes kafka-python's parameters by the same names (the return shapes
    are tested against the broker in tests/adapters/test_admin_kafka_python_3.py)."""
    from kafkastate.sync import KafkaAdminClient  # noqa: PLC0415

    theirs = kafka.admin.KafkaAdminClient
    names = sorted(n for n in dir(theirs) if not n.startswith("_") and callable(getattr(theirs, n)))
    missing = [n for n in names if not callable(getattr(KafkaAdminClient, n, None))]
    assert missing == []
    assert set(DIFFERENCES) <= set(names)
    # each takes kafka-python's parameters, by the same names
    absent = set()
    for n in names:
        ours = inspect.signature(getattr(KafkaAdminClient, n)).parameters
        absent |= {
            (n, p) for p in inspect.signature(getattr(theirs, n)).parameters if p not in ours
        }
    assert absent == {k for k in PARAMETER_DIFFERENCES if k[0] != "reset_configs"}


def test_the_admin_enums_have_kafka_python_3_names_and_values() -> None:
    """Each enum of ``kafka.admin`` has the same members, by name and value, in
    kafkastate.sync; the config-source helpers answer as kafka-python's do."""
    import enum  # noqa: PLC0415

    import kafkastate.sync as ours  # noqa: PLC0415

    enums = [
        n
        for n in dir(kafka.admin)
        if isinstance(getattr(kafka.admin, n), enum.EnumMeta) and not n.startswith("_")
    ]
    assert {"GroupState", "GroupType", "ConfigFilterType", "OffsetSpec"} <= set(enums)
    # kafka-python's AlterConfigOp is the operation alone; kafkastate's carries the value
    # and its operation, an AlterConfigOpType of the same members
    assert [(m.name, m.value) for m in ours.AlterConfigOpType] == [
        (m.name, m.value) for m in kafka.admin.AlterConfigOp
    ]
    for name in set(enums) - {"AlterConfigOp"}:
        theirs = [(m.name, m.value) for m in getattr(kafka.admin, name)]
        assert [(m.name, m.value) for m in getattr(ours, name)] == theirs, name
    kp_source, kp_filter = kafka.admin.ConfigSourceType, kafka.admin.ConfigFilterType
    for source in ours.ConfigSourceType:
        assert source.is_modified() == kp_source(source.value).is_modified(), source
        for f in ours.ConfigFilterType:
            assert f.should_skip(source) == kp_filter(f.value).should_skip(kp_source(source))
    for rtype in ours.ConfigResourceType:
        kp_rtype = kafka.admin.ConfigResourceType(rtype.value)
        assert (
            ours.ConfigSourceType.dynamic_for_resource_type(rtype).value
            == kp_source.dynamic_for_resource_type(kp_rtype).value
        )
    # the string enums are their broker words where a filter takes a string
    assert str(ours.GroupState.STABLE) == "Stable" and ours.TransactionState.ONGOING == "Ongoing"
    assert repr(ours.OffsetTimestamp(5)) == "OffsetTimestamp(5)" and ours.OffsetTimestamp(5) == 5
    assert ours.UpdateFeatureType is ours.FeatureUpdateType
