"""The public API: every exported name exists, is documented, and nothing private leaks."""

from __future__ import annotations

import importlib
import inspect

import pytest
from kio.schema.errors import ErrorCode

from kafkastate import errors
from kafkastate.errors import BrokerResponseError, error_for_code

PUBLIC_MODULES = [
    "kafkastate",
    "kafkastate.errors",
    "kafkastate.helpers",
    "kafkastate.abc",
    "kafkastate.core.connection",
    "kafkastate.core.client",
    "kafkastate.core.metadata",
    "kafkastate.core.producer",
    "kafkastate.core.admin",
    "kafkastate.admin",
    "kafkastate.adapters.anyio.admin",
    "kafkastate.core.producer.partitioner",
    "kafkastate.core.producer.accumulator",
    "kafkastate.core.producer.idempotence",
    "kafkastate.core.producer.transactions",
    "kafkastate.core.producer.producer",
    "kafkastate.adapters.blocking.caller_thread",
    "kafkastate.sync",
    "kafkastate.anyio",
    "kafkastate.trio",
    "kafkastate.asyncio",
    "kafkastate.structs",
    "kafkastate.serializer",
    "kafkastate.partitioner",
    "kafkastate.core.consumer.fetch.session",
    "kafkastate.core.consumer.fetch.request",
    "kafkastate.core.consumer.fetch.decode",
    "kafkastate.core.consumer.fetch.aborted",
    "kafkastate.core.consumer.fetch.follower",
    "kafkastate.core.consumer.fetch.reset",
    "kafkastate.core.consumer.fetch.events",
    "kafkastate.core.consumer.fetch.offsets",
    "kafkastate.core.consumer.fetch.state",
    "kafkastate.core.consumer.fetch.membership",
    "kafkastate.core.consumer.fetcher",
    "kafkastate.core.sasl",
    "kafkastate.core.protocol.framing",
    "kafkastate.core.protocol.versions",
    "kafkastate.core.protocol.requests",
    "kafkastate.core.protocol.records",
    "kafkastate.core.protocol.compression",
    "kafkastate.adapters.blocking",
    "kafkastate.testing",
    "kafkastate.sim.api",
    "kafkastate.spark",
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_names_exist_and_are_documented(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ has duplicates"
    undocumented = []
    for attr in exported:
        assert not attr.startswith("_") or attr == "__version__", f"{name} exports {attr}"
        obj = getattr(module, attr)  # raises AttributeError if missing
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not inspect.getdoc(obj):
            undocumented.append(attr)
    assert not undocumented, f"{name}: no docstring on {undocumented}"


def test_every_broker_error_code_has_a_class() -> None:
    for code in ErrorCode:
        if code.value == 0:
            continue
        cls = error_for_code(int(code.value))
        assert issubclass(cls, BrokerResponseError)
        assert cls.errno == int(code.value)
        assert cls.retriable == code.retriable


def test_aiokafka_style_names() -> None:
    assert errors.NotLeaderForPartitionError.errno == 6
    assert issubclass(errors.SaslAuthenticationFailedError, errors.AuthenticationFailedError)
    assert errors.UnsupportedVersionError is not errors.BrokerUnsupportedVersionError
    assert issubclass(errors.BrokerUnsupportedVersionError, errors.UnsupportedVersionError)
