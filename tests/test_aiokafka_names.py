"""Every public class of aiokafka 0.14's ``errors`` and ``structs`` modules resolves in
kafkastate's (``kafkastate.errors``, ``kafkastate.structs``; ``RecordMetadata`` in
``kafkastate.asyncio``), with aiokafka's subclass relations -- except the differences listed
here on purpose (docs/migrating-from-aiokafka.md)."""

from __future__ import annotations

import importlib
import inspect

import pytest

aiokafka = pytest.importorskip("aiokafka")

PLACES = {"aiokafka.errors": "kafkastate.errors", "aiokafka.structs": "kafkastate.structs"}
ELSEWHERE = {("aiokafka.structs", "RecordMetadata"): "kafkastate.asyncio"}

# kafkastate's UnsupportedVersionError is the local "no common API version" error (with the
# API and both ranges); broker code 35 is BrokerUnsupportedVersionError.
HIERARCHY_DIFFERENCES = {("UnsupportedVersionError", "BrokerResponseError")}

# kafkastate's flags follow the Kafka protocol's error table (what the Java client retries);
# aiokafka's differ for these (its KafkaTimeoutError is not retriable, for one).
RETRIABLE_DIFFERENCES = {
    "ConcurrentTransactions",
    "CorruptRecordException",
    "FetchSessionIdNotFound",
    "InvalidFetchSessionEpoch",
    "InvalidMessageError",
    "KafkaProtocolError",
    "KafkaTimeoutError",
    "KafkaUnavailableError",
    "ListenerNotFound",
    "ReplicaNotAvailableError",
    "StaleLeaderEpochCodeError",
}


def _public_classes(module_name: str) -> list[tuple[str, type]]:
    module = importlib.import_module(module_name)
    return [
        (name, obj)
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and inspect.isclass(obj)
        and obj.__module__ == module_name  # defined there, not imported
    ]


PAIRS = [(theirs, name, obj) for theirs in PLACES for name, obj in _public_classes(theirs)]


@pytest.mark.parametrize(("theirs", "name", "original"), PAIRS, ids=lambda v: str(v)[:40])
def test_every_name_resolves(theirs: str, name: str, original: type) -> None:
    ours = ELSEWHERE.get((theirs, name), PLACES[theirs])
    assert getattr(importlib.import_module(ours), name, None) is not None, f"{ours}.{name}"


def test_error_subclass_relations_and_retriable_flags() -> None:
    from kafkastate import errors  # noqa: PLC0415

    pairs = [(n, a, getattr(errors, n)) for n, a in _public_classes("aiokafka.errors")]
    by_name = {n: ours for n, _, ours in pairs}
    differ = set()
    for name, theirs, ours in pairs:
        for base in theirs.__mro__[1:]:
            if base.__module__.startswith("aiokafka") and base.__name__ in by_name:
                if not issubclass(ours, by_name[base.__name__]):
                    differ.add((name, base.__name__))
            elif (
                base is not object
                and not base.__module__.startswith("aiokafka")
                and not issubclass(ours, base)  # RuntimeError, Exception...
            ):
                differ.add((name, base.__name__))
    assert differ == HIERARCHY_DIFFERENCES
    flags = {
        name
        for name, theirs, ours in pairs
        if hasattr(theirs, "retriable") and bool(theirs.retriable) != bool(ours.retriable)
    }
    assert flags == RETRIABLE_DIFFERENCES


def test_helpers_create_ssl_context_takes_aiokafkas_keywords() -> None:
    """``aiokafka.helpers.create_ssl_context`` resolves in ``kafkastate.helpers`` and
    ``kafkastate.asyncio``, and takes every keyword aiokafka's takes."""
    helpers = importlib.import_module("aiokafka.helpers")
    ours = importlib.import_module("kafkastate.helpers")
    theirs = [
        name
        for name, obj in vars(helpers).items()
        if not name.startswith("_")
        and inspect.isfunction(obj)
        and obj.__module__ == "aiokafka.helpers"
    ]
    assert theirs == ["create_ssl_context"]
    import kafkastate.asyncio  # noqa: PLC0415

    assert kafkastate.asyncio.create_ssl_context is ours.create_ssl_context
    theirs_params = set(inspect.signature(helpers.create_ssl_context).parameters)
    assert theirs_params <= set(inspect.signature(ours.create_ssl_context).parameters)
