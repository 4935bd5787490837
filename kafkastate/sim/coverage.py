"""What a sweep reached: the transitions of each core machine, of the simulated
coordinators, and the fault kinds (``python -m kafkastate.sim sweep --coverage``).

Theory of operation
-------------------
Every core machine changes state through :func:`kafkastate.core.states.transition`,
checked against its registered :class:`~kafkastate.core.states.StateTable`; while a
:class:`Coverage` is entered it observes that one function
(:func:`~kafkastate.core.states.observe_transitions`), so it counts every transition of
every machine the runs drove -- nothing in the machines changes. After each run,
:meth:`Coverage.add_run` adds what the simulated brokers did (the group coordinator's
``SimGroup.transitions``, the KIP-848 coordinator's group and member state changes --
``ConsumerGroup.transitions`` and ``member_transitions`` -- and the transaction
coordinator's state histories) and the fault kinds the run drew. The report lists, per
machine, how many of its states and transitions the sweep reached, and names the ones it
never reached -- a sweep that never took a transition says so. A ``--workload group848``
sweep drives the core's ``ConsumerGroupMember`` and the KIP-848 coordinator model; the
classic ``GroupMember`` and coordinator then say "never driven", and the other way round.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kafkastate.core.states import StateTable, observe_transitions, registered_tables
from kafkastate.sim.coordinator import _VALID_PREVIOUS, GroupState
from kafkastate.sim.coordinator848 import (
    GROUP848_TRANSITIONS,
    MEMBER848_TRANSITIONS,
    ConsumerGroupState,
    MemberState,
)
from kafkastate.sim.txncluster import EMPTY, TXN_TRANSITIONS

__all__ = ["Coverage"]

_GROUP_COORDINATOR = "group coordinator (sim)"
_GROUP848 = "consumer group coordinator (sim, KIP-848)"
_MEMBER848 = "consumer group member at the coordinator (sim, KIP-848)"
_TXN_COORDINATOR = "transaction coordinator (sim)"


class Coverage:
    """Counts transitions and fault kinds over the runs made while it is entered.

    Args:
        fault_kinds: every fault kind the workload can draw (what "never" is against).
    """

    def __init__(self, fault_kinds: Iterable[str]) -> None:
        self.fault_kinds = tuple(fault_kinds)
        self.transitions: Counter[tuple[str, str, str]] = Counter()
        """``(machine, from, to)`` -> how often, over every run."""
        self.faults: Counter[str] = Counter()
        self.runs = 0
        self._previous: Any = None

    def __enter__(self) -> Coverage:
        self._previous = observe_transitions(self._saw)
        return self

    def __exit__(self, *exc: object) -> None:
        observe_transitions(self._previous)

    def _saw(self, table: StateTable[Any], current: enum.Enum, new: enum.Enum) -> None:
        self.transitions[(table.machine, current.name, new.name)] += 1

    def add_run(self, sim: Any) -> None:
        """What run ``sim`` drew and what its brokers did."""
        self.runs += 1
        self.faults.update(kind for _t, kind in sim.fault_log)
        for group in sim.cluster.coordinator.groups.values():
            for before, after in group.transitions:
                self.transitions[(_GROUP_COORDINATOR, before.name, after.name)] += 1
        for group848 in getattr(sim.cluster.coordinator, "consumer_groups", {}).values():
            for a, b in group848.transitions:
                self.transitions[(_GROUP848, a.name, b.name)] += 1
            for a, b in group848.member_transitions:
                self.transitions[(_MEMBER848, a.name, b.name)] += 1
        for meta in getattr(sim.cluster, "txns", {}).values():
            states = [EMPTY, *meta.history]
            for before, after in itertools.pairwise(states):
                self.transitions[(_TXN_COORDINATOR, before, after)] += 1

    def merge(self, transitions: Counter[tuple[str, str, str]], faults: Counter[str]) -> None:
        """Add one run's counts (made by another :class:`Coverage`, perhaps in a worker
        process)."""
        self.runs += 1
        self.transitions.update(transitions)
        self.faults.update(faults)

    def tables(self) -> dict[str, list[tuple[str, str]]]:
        """Every machine's transitions as its table allows them: ``machine -> [(from,
        to)]`` (the core's registered tables, then the simulated coordinators')."""
        out = {
            name: [
                (s.name, t.name)
                for s in table.states
                for t in sorted(table.transitions[s], key=lambda x: list(table.states).index(x))
            ]
            for name, table in registered_tables().items()
        }
        out[_GROUP_COORDINATOR] = [
            (before.name, to.name)
            for to, froms in _VALID_PREVIOUS.items()
            for before in sorted(froms, key=list(GroupState).index)
        ]
        out[_GROUP848] = [(a.name, b.name) for a, b in GROUP848_TRANSITIONS]
        out[_MEMBER848] = [(a.name, b.name) for a, b in MEMBER848_TRANSITIONS]
        out[_TXN_COORDINATOR] = [
            (before, to) for to, froms in TXN_TRANSITIONS.items() for before in sorted(froms)
        ]
        return out

    def states(self) -> dict[str, tuple[list[str], str]]:
        """Every machine's states and its initial one: ``machine -> ([state], initial)``."""
        out = {
            name: ([s.name for s in table.states], table.initial.name)
            for name, table in registered_tables().items()
        }
        out[_GROUP_COORDINATOR] = ([s.name for s in GroupState], GroupState.EMPTY.name)
        out[_GROUP848] = (
            [s.name for s in ConsumerGroupState],
            ConsumerGroupState.EMPTY.name,
        )
        out[_MEMBER848] = ([s.name for s in MemberState], MemberState.STABLE.name)
        out[_TXN_COORDINATOR] = (list(TXN_TRANSITIONS), EMPTY)
        return out

    def unreached_states(self) -> dict[str, list[str]]:
        """Per machine, the states no run was in (a machine some transition drove was in
        its initial state and in both ends of each transition it took)."""
        reached: dict[str, set[str]] = {}
        for machine, before, after in self.transitions:
            reached.setdefault(machine, set()).update((before, after))
        out = {}
        for machine, (states, initial) in self.states().items():
            seen = reached.get(machine, set())
            if seen:
                seen = seen | {initial}
            out[machine] = [s for s in states if s not in seen]
        return out

    def unreached(self) -> dict[str, list[tuple[str, str]]]:
        """Per machine, the transitions of its table no run took."""
        return {
            machine: [e for e in edges if (machine, *e) not in self.transitions]
            for machine, edges in self.tables().items()
        }

    def report(self) -> str:
        """The coverage report, as text."""
        lines = [f"coverage over {self.runs} runs"]
        never = self.unreached()
        never_in = self.unreached_states()
        states = self.states()
        for machine, edges in self.tables().items():
            missed = never[machine]
            reached = len(edges) - len(missed)
            if not reached:
                lines.append(f"  {machine}: never driven ({len(edges)} transitions)")
                continue
            count = len(states[machine][0])
            lines.append(
                f"  {machine}: {reached}/{len(edges)} transitions, "
                f"{count - len(never_in[machine])}/{count} states"
            )
            if never_in[machine]:
                lines.append(f"    never in: {', '.join(never_in[machine])}")
            if missed:
                shown = ", ".join(f"{a}->{b}" for a, b in missed)
                lines.append(f"    never: {shown}")
        missed_faults = [k for k in self.fault_kinds if not self.faults[k]]
        drawn = ", ".join(f"{k} {self.faults[k]}" for k in self.fault_kinds if self.faults[k])
        lines.append(f"  faults drawn: {drawn or 'none'}")
        if missed_faults:
            lines.append(f"    never: {', '.join(missed_faults)}")
        return "\n".join(lines)
