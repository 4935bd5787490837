"""The listener scenario on the deterministic simulator (kafkastate.sim): the simulated
members run the same ConsumerMachine as the adapters, in virtual time."""

from __future__ import annotations

from typing import Any

from kafkastate.sim.entropy import SeededEntropy
from kafkastate.sim.world import Sim, SimConfig


def sim_listener_calls(assignor: str, partitions: int) -> list[tuple[str, tuple[int, ...]]]:
    """Member A (``m0``) alone, then B (``m1``) joins, then B goes (the simulator has no
    graceful leave: B crashes and its session ends); A's listener calls in order, each with
    its sorted partitions. No faults: the run is the same every time."""
    calls: list[tuple[str, tuple[int, ...]]] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def _note(self, method: str, tps: Any) -> None:
            if self.name == "m0":
                calls.append((method, tuple(sorted(tp.partition for tp in tps))))

        def on_partitions_revoked(self, tps: Any) -> None:
            self._note("on_partitions_revoked", tps)

        def on_partitions_assigned(self, tps: Any) -> None:
            self._note("on_partitions_assigned", tps)

        def on_partitions_lost(self, tps: Any) -> None:
            self._note("on_partitions_lost", tps)

    config = SimConfig(
        members=1,
        partitions=partitions,
        assignor=assignor,
        session_ms=6_000,
        heartbeat_ms=500,
        max_poll_ms=20_000,
    )
    sim = Sim(SeededEntropy(0), config, listener=Recorder)
    sim.run_for(5_000)
    sim.act("add", "m1")
    sim.run_for(10_000)
    sim.act("crash", "m1")
    sim.run_for(15_000)
    return calls
