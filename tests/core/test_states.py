"""The state-table convention (kafkastate.core.states, STYLE.md §6): every registered table
covers its enum, an illegal transition raises LocalProtocolError naming the machine and
both states, each machine module's table is the one registered, and docs/state-machines.md
is generated from the tables."""

from __future__ import annotations

import enum
import importlib
import pathlib
import pkgutil
import subprocess
import sys

import pytest

import kafkastate.core
from kafkastate.core.admin.machine import AdminState
from kafkastate.core.client import NODE_STATES, NodeState
from kafkastate.core.connection import CONNECTION_STATES, ConnectionState
from kafkastate.core.consumer.consumer import ALLOWED, CONSUMER_STATES, ConsumerState
from kafkastate.core.consumer.fetch.state import POSITION_STATES, PositionState
from kafkastate.core.consumer.group import MEMBER_STATES, MemberState
from kafkastate.core.consumer.group848 import MEMBER848_STATES, Member848State
from kafkastate.core.producer import accumulator
from kafkastate.core.producer.accumulator import BATCH_STATES, BatchState
from kafkastate.core.producer.idempotence import IDEMPOTENCE_STATES, IdempotenceState
from kafkastate.core.producer.producer import PRODUCER_STATES, ProducerState
from kafkastate.core.producer.transactions import (
    TRANSACTION_STATES,
    TRANSITIONS,
    TransactionState,
)
from kafkastate.core.states import (
    MACHINE_MODULES,
    StateTable,
    register,
    registered_tables,
    transition,
)
from kafkastate.errors import LocalProtocolError, TransactionStateError

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLES = registered_tables()

# (module, the table's name there, its enum): one row per machine that uses a table
MACHINES = [
    ("kafkastate.core.connection", "CONNECTION_STATES", ConnectionState),
    ("kafkastate.core.client", "NODE_STATES", NodeState),
    ("kafkastate.core.producer.producer", "PRODUCER_STATES", ProducerState),
    ("kafkastate.core.producer.accumulator", "BATCH_STATES", BatchState),
    ("kafkastate.core.producer.idempotence", "IDEMPOTENCE_STATES", IdempotenceState),
    ("kafkastate.core.producer.transactions", "TRANSACTION_STATES", TransactionState),
    ("kafkastate.core.consumer.consumer", "CONSUMER_STATES", ConsumerState),
    ("kafkastate.core.consumer.group", "MEMBER_STATES", MemberState),
    ("kafkastate.core.consumer.group848", "MEMBER848_STATES", Member848State),
    ("kafkastate.core.consumer.fetch.state", "POSITION_STATES", PositionState),
    ("kafkastate.core.admin.machine", "ADMIN_STATES", AdminState),
]


class Light(enum.Enum):
    RED = "red"
    GREEN = "green"
    OFF = "off"


def light_table(**overrides: object) -> StateTable[Light]:
    fields: dict[str, object] = {
        "machine": "Light",
        "states": Light,
        "initial": Light.RED,
        "transitions": {
            Light.RED: {Light.GREEN, Light.OFF},
            Light.GREEN: {Light.RED, Light.OFF},
            Light.OFF: set(),
        },
    }
    fields.update(overrides)
    return StateTable(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_covers_its_enum(name: str) -> None:
    table = TABLES[name]
    assert set(table.transitions) == set(table.states)
    assert all(targets <= set(table.states) for targets in table.transitions.values())
    assert table.initial in set(table.states)
    if table.commands:
        assert set(table.commands) == set(table.states)


@pytest.mark.parametrize("name", list(TABLES))
def test_every_state_is_reachable_from_the_initial_one(name: str) -> None:
    table = TABLES[name]
    seen, todo = {table.initial}, [table.initial]
    while todo:
        for target in table.transitions[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert seen == set(table.states)


@pytest.mark.parametrize("name", list(TABLES))
def test_every_illegal_transition_raises_naming_machine_and_both_states(name: str) -> None:
    table = TABLES[name]
    illegal = [(a, b) for a in table.states for b in table.states if b not in table.transitions[a]]
    assert illegal  # every machine refuses something
    for current, new in illegal:
        with pytest.raises(LocalProtocolError) as info:
            transition(table, current, new, what="test")
        assert isinstance(info.value, table.error)
        message = str(info.value)
        assert table.machine in message
        assert f"{current.name} -> {new.name}" in message


@pytest.mark.parametrize("name", list(TABLES))
def test_every_legal_transition_returns_the_new_state(name: str) -> None:
    table = TABLES[name]
    for current, targets in table.transitions.items():
        for new in targets:
            assert transition(table, current, new, what="test") is new


@pytest.mark.parametrize(("module", "attribute", "states"), MACHINES)
def test_each_machine_module_holds_the_registered_table(
    module: str, attribute: str, states: type[enum.Enum]
) -> None:
    table = getattr(importlib.import_module(module), attribute)
    assert module in MACHINE_MODULES
    assert TABLES[table.machine] is table
    assert table.states is states
    assert states.__module__ == module  # the table sits next to its enum


def test_every_table_in_core_is_registered_and_listed() -> None:
    found = {}
    for info in pkgutil.walk_packages(kafkastate.core.__path__, "kafkastate.core."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, StateTable):
                found[value.machine] = (value, value.states.__module__)
    assert set(found) == set(TABLES)
    for machine, (table, module) in found.items():
        assert TABLES[machine] is table
        assert module in MACHINE_MODULES
    assert {row[0] for row in MACHINES} == set(MACHINE_MODULES)


def test_the_tables_keep_the_machines_vocabulary() -> None:
    # the transaction manager's Java-style view and the consumer's command table are the
    # registered tables, seen from the other side
    assert TRANSACTION_STATES.sources() == TRANSITIONS
    assert TRANSACTION_STATES.error is TransactionStateError
    assert ALLOWED is CONSUMER_STATES.commands
    assert CONNECTION_STATES.initial is ConnectionState.IDLE
    assert PRODUCER_STATES.transitions[ProducerState.CLOSED] == frozenset()
    assert MEMBER_STATES.transitions[MemberState.FAILED] == frozenset()
    assert NODE_STATES.initial is NodeState.DISCONNECTED
    assert MEMBER848_STATES.transitions[Member848State.CLOSED] == frozenset()
    assert PositionState.AWAIT_VALIDATION not in POSITION_STATES.transitions[PositionState.FAILED]
    assert BATCH_STATES.transitions[BatchState.DONE] == frozenset()
    assert IDEMPOTENCE_STATES.transitions[IdempotenceState.FATAL] == {IdempotenceState.FATAL}


def test_a_batch_command_is_allowed_where_its_target_is() -> None:
    # the accumulator checks the command, then the move to the command's one target
    targets = accumulator._TARGETS
    assert set(targets) == {c for cs in BATCH_STATES.commands.values() for c in cs}
    for state, commands in BATCH_STATES.commands.items():
        assert {targets[c] for c in commands} == BATCH_STATES.transitions[state]


def test_transition_names_what_caused_it() -> None:
    table = light_table()
    assert transition(table, Light.RED, Light.GREEN, what="timer") is Light.GREEN
    with pytest.raises(
        LocalProtocolError, match=r"^Light: illegal transition OFF -> RED \(power\)$"
    ):
        transition(table, Light.OFF, Light.RED, what="power")


def test_a_table_may_raise_a_subclass() -> None:
    table = light_table(error=TransactionStateError)
    with pytest.raises(TransactionStateError):
        transition(table, Light.OFF, Light.GREEN, what="x")


@pytest.mark.parametrize(
    "overrides",
    [
        {"transitions": {Light.RED: {Light.GREEN}, Light.GREEN: set()}},  # OFF missing
        {"transitions": {Light.RED: {"elsewhere"}, Light.GREEN: set(), Light.OFF: set()}},
        {"initial": "red"},
        {"commands": {Light.RED: {"switch"}}},  # not every state
    ],
)
def test_a_table_that_does_not_match_its_enum_is_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="Light"):
        light_table(**overrides)


def test_a_machine_registers_one_table() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(light_table(machine="BrokerConnection"))
    assert TABLES["BrokerConnection"] is CONNECTION_STATES
    assert register(CONNECTION_STATES) is CONNECTION_STATES  # the same one again is fine


def test_the_state_machines_page_is_generated_from_the_tables() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_state_diagrams.py")],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    page = (ROOT / "docs" / "state-machines.md").read_text()
    assert out == page, (
        "docs/state-machines.md is stale: python tools/gen_state_diagrams.py > "
        "docs/state-machines.md"
    )
    for name in TABLES:
        assert f"## {name}" in page
