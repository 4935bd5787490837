"""One convention for every machine's states (STYLE.md §6, h11's ``_state.py``).

Theory of operation
-------------------
A machine's states are one ``enum.Enum``; what it may do in them is *data*, a
:class:`StateTable` written next to the enum in the machine's module: for each state the
states it may move to and, where the machine has commands, the command kinds it accepts.
Every change of state goes through the one function :func:`transition`, which returns the
new state or raises :class:`~kafkastate.errors.LocalProtocolError` (or the table's own
subclass of it) naming the machine and both states — never ``assert``, which ``-O`` strips.

Each table is registered (:func:`register`) under its machine's name when its module is
imported; :data:`MACHINE_MODULES` lists the modules that hold one, so
:func:`registered_tables` can load them all. ``docs/state-machines.md`` is generated from
them (``tools/gen_state_diagrams.py``).

A test harness may watch every change of state (:func:`observe_transitions`: the
simulator's coverage report does); nothing in the machines depends on it.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Generic, TypeAlias, TypeVar

import attrs

from kafkastate.errors import LocalProtocolError

__all__ = [
    "MACHINE_MODULES",
    "StateTable",
    "TransitionObserver",
    "observe_transitions",
    "register",
    "registered_tables",
    "transition",
]

S = TypeVar("S", bound=enum.Enum)


def _frozen_map(value: Mapping[Any, Iterable[Any]]) -> Mapping[Any, frozenset[Any]]:
    """attrs converter: a copy of a state-keyed table, each value a frozenset."""
    return MappingProxyType({key: frozenset(items) for key, items in value.items()})


@attrs.frozen(eq=False)  # one table per machine: compared (and hashed) by identity
class StateTable(Generic[S]):
    """A machine's states and what each allows.

    Args:
        machine: the machine's name, used in errors and the generated page.
        states: the machine's enum; every member must be a key of ``transitions``.
        initial: the state the machine starts in.
        transitions: ``{from_state: frozenset(to_states)}``; a state with no way out maps to
            an empty set. A state listed among its own targets may be re-entered.
        commands: ``{state: frozenset(command kinds)}`` for machines that refuse commands
            by state (empty when the machine's commands are checked otherwise).
        error: the exception an illegal transition raises (``LocalProtocolError`` or one
            of its subclasses).
    """

    machine: str
    states: type[S]
    initial: S
    transitions: Mapping[S, frozenset[S]] = attrs.field(converter=_frozen_map)
    commands: Mapping[S, frozenset[str]] = attrs.field(factory=dict, converter=_frozen_map)
    error: type[LocalProtocolError] = LocalProtocolError

    def __attrs_post_init__(self) -> None:
        members = set(self.states)
        if set(self.transitions) != members:
            missing = sorted(s.name for s in members - set(self.transitions))
            extra = sorted(str(s) for s in set(self.transitions) - members)
            raise ValueError(
                f"{self.machine}: table keys differ from the enum: {missing=}, {extra=}"
            )
        strays = {t for targets in self.transitions.values() for t in targets} - members
        if strays:
            raise ValueError(f"{self.machine}: targets outside the enum: {strays}")
        if self.initial not in members:
            raise ValueError(f"{self.machine}: initial state {self.initial!r} is not a state")
        if self.commands and set(self.commands) != members:
            raise ValueError(f"{self.machine}: the command table must list every state")

    def allows(self, current: S, new: S) -> bool:
        """Whether the machine may go from ``current`` to ``new``."""
        return new in self.transitions[current]

    def sources(self) -> Mapping[S, frozenset[S]]:
        """The table inverted: each state -> the states it may be entered from."""
        return {
            target: frozenset(s for s, targets in self.transitions.items() if target in targets)
            for target in self.states
        }


# Quoted: compiled with mypyc (tools/build_mypyc.py) StateTable is a native class, which
# cannot be subscripted at run time.
TransitionObserver: TypeAlias = "Callable[[StateTable[Any], enum.Enum, enum.Enum], None]"
"""Called with ``(table, current, new)`` after each allowed change of state."""

_observer: TransitionObserver | None = None


def observe_transitions(observer: TransitionObserver | None) -> TransitionObserver | None:
    """Have ``observer`` called on every allowed transition of every machine (``None``
    stops it) -- for test harnesses, such as the simulator's coverage report.

    Args:
        observer: the callback, or ``None``.

    Returns:
        The observer it replaces (to restore when done).
    """
    global _observer  # one process-wide hook, off by default
    previous, _observer = _observer, observer
    return previous


def transition(table: StateTable[S], current: S, new: S, *, what: str) -> S:
    """Check one change of state against ``table`` and return the new state.

    Args:
        table: the machine's table.
        current: the state it is in.
        new: the state it is going to.
        what: what causes the change (a command or an event), for the message.

    Returns:
        ``new``, for ``self.state = transition(...)``.

    Raises:
        LocalProtocolError: the table does not allow ``current -> new`` (``table.error``,
            which is ``LocalProtocolError`` or a subclass); the message names the machine,
            both states and ``what``.
    """
    if new not in table.transitions[current]:
        raise table.error(
            f"{table.machine}: illegal transition {current.name} -> {new.name} ({what})"
        )
    if _observer is not None:
        _observer(table, current, new)
    return new


MACHINE_MODULES: Final = (
    "kafkastate.core.connection",
    "kafkastate.core.client",
    "kafkastate.core.producer.producer",
    "kafkastate.core.producer.accumulator",
    "kafkastate.core.producer.idempotence",
    "kafkastate.core.producer.transactions",
    "kafkastate.core.consumer.consumer",
    "kafkastate.core.consumer.group",
    "kafkastate.core.consumer.group848",
    "kafkastate.core.consumer.fetch.state",
    "kafkastate.core.admin.machine",
)
"""The modules that define a registered :class:`StateTable`, in the order the generated
page shows them."""

_REGISTRY: dict[str, StateTable[enum.Enum]] = {}


def register(table: StateTable[S]) -> StateTable[S]:
    """Record ``table`` under its machine's name and return it (``X = register(...)``).

    Raises:
        ValueError: another table is already registered under that name.
    """
    known = _REGISTRY.get(table.machine)
    if known is not None and known is not table:
        raise ValueError(f"a state table for {table.machine} is already registered")
    _REGISTRY[table.machine] = table  # type: ignore[assignment]
    return table


def registered_tables() -> Mapping[str, StateTable[enum.Enum]]:
    """Every registered table by machine name, after importing :data:`MACHINE_MODULES`;
    in that list's order (a table defined elsewhere comes last)."""
    for module in MACHINE_MODULES:
        importlib.import_module(module)

    def order(table: StateTable[enum.Enum]) -> int:
        module = table.states.__module__
        return MACHINE_MODULES.index(module) if module in MACHINE_MODULES else len(MACHINE_MODULES)

    return {t.machine: t for t in sorted(_REGISTRY.values(), key=order)}
