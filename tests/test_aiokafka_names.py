"""Every public class of aiokafka 0.14's ``errors`` and ``structs`` modules resolves in
kafkastate's (``kafkastate.errors``, ``kafkastate.structs``; ``RecordMetadata`` in
``kafkastate.asyncio``), with aiokafka's subclass relations -- except the differences listed
here on purpose (docs/migrating-from-aiokafka.md)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

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


# ------------------------------------------------- docs/migrating-from-aiokafka.md

PAGE = Path(__file__).resolve().parents[1] / "docs" / "migrating-from-aiokafka.md"


def _named_on(page: str) -> set[str]:
    """Names the page mentions as code: `name`, `name(...)`, `module.name`, or `.name(`
    and `import name` inside its examples."""
    names: set[str] = set()
    for span in re.findall(r"`([^`\n]+)`", page):
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span))
    names.update(re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)\(", page))
    return names


def _defined_in(module: Any, kind: Any) -> list[str]:
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and kind(obj) and obj.__module__ == module.__name__
    ]


def _aiokafka_public_names() -> dict[str, list[str]]:
    import aiokafka.abc  # noqa: PLC0415
    import aiokafka.admin  # noqa: PLC0415

    def members(cls: type) -> list[str]:
        return [n for n in vars(cls) if not n.startswith("_")]

    def options(cls: type) -> list[str]:
        params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        return [n for n, p in params.items() if n != "self" and p.kind not in variadic]

    return {
        "aiokafka": list(aiokafka.__all__),
        "aiokafka.abc": _defined_in(aiokafka.abc, inspect.isclass),
        "aiokafka.admin": list(aiokafka.admin.__all__),
        "AIOKafkaProducer options": options(aiokafka.AIOKafkaProducer),
        "AIOKafkaConsumer options": options(aiokafka.AIOKafkaConsumer),
        "AIOKafkaAdminClient options": options(aiokafka.admin.AIOKafkaAdminClient),
        "AIOKafkaProducer methods": members(aiokafka.AIOKafkaProducer),
        "AIOKafkaConsumer methods": members(aiokafka.AIOKafkaConsumer),
        "AIOKafkaAdminClient methods": members(aiokafka.admin.AIOKafkaAdminClient),
    }


@pytest.mark.parametrize(("where", "names"), sorted(_aiokafka_public_names().items()))
def test_the_migration_page_names_every_public_name(where: str, names: list[str]) -> None:
    named = _named_on(PAGE.read_text())
    missing = [n for n in names if n not in named]
    assert not missing, f"docs/migrating-from-aiokafka.md does not mention {where}: {missing}"


def test_aiokafka_top_level_names_resolve_in_kafkastate_asyncio() -> None:
    """`from aiokafka import X` becomes `from kafkastate.asyncio import X` (the page says
    which one name has no counterpart)."""
    import kafkastate.asyncio  # noqa: PLC0415

    absent = [n for n in aiokafka.__all__ if not hasattr(kafkastate.asyncio, n)]
    assert absent == ["AIOKafkaClient"]


def test_offset_and_timestamp_unpacks_as_in_aiokafka_and_keeps_the_leader_epoch() -> None:
    from aiokafka.structs import OffsetAndTimestamp as Theirs  # noqa: PLC0415

    from kafkastate.structs import OffsetAndTimestamp  # noqa: PLC0415

    ours = OffsetAndTimestamp(5, 1_700_000_000_000, 3)
    offset, timestamp = ours  # aiokafka's (and kafka-python 2.x's) shape
    assert (offset, timestamp) == (5, 1_700_000_000_000) == Theirs(5, 1_700_000_000_000)
    assert ours._fields == Theirs._fields and ours.leader_epoch == 3
    assert OffsetAndTimestamp(1, 2).leader_epoch is None
    assert "leader_epoch=3" in repr(ours)


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
