"""The simulator driven rule by rule (DST.md A3.8): Hypothesis chooses which member to add,
stall, crash or cut off from a broker, when records arrive and how long time runs, and every
low-level decision (delays, tie-breaks) comes from the same test case through
HypothesisEntropy -- so a failure shrinks to few rules and benign draws. Safety invariants
are checked after every simulated event; liveness (the group settles, every record is
consumed) at teardown."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from kafkastate.sim.entropy import HypothesisEntropy
from kafkastate.sim.world import Sim, SimConfig

MEMBERS = ["m0", "m1", "m2", "m3"]


class GroupDST(RuleBasedStateMachine):
    sim: Sim

    @initialize(
        data=st.data(),
        assignor=st.sampled_from(["range", "roundrobin", "sticky", "cooperative-sticky"]),
        static=st.booleans(),
    )
    def boot(self, data: st.DataObject, assignor: str, static: bool) -> None:
        config = SimConfig(
            brokers=2,
            partitions=4,
            members=2,
            assignor=assignor,
            static=static,
            session_ms=6_000,
            heartbeat_ms=2_000,
            max_poll_ms=12_000,
        )
        self.sim = Sim(HypothesisEntropy(data), config)
        self.crashed: set[str] = set()

    @rule(name=st.sampled_from(MEMBERS[2:]))
    def add_member(self, name: str) -> None:
        if name not in self.sim.hosts:
            self.sim.act("add", name)

    @rule(name=st.sampled_from(MEMBERS), ms=st.integers(500, 15_000))
    def pause(self, name: str, ms: int) -> None:
        if name in self.sim.hosts and name not in self.crashed:
            self.sim.act("pause", name, ms)

    @rule(name=st.sampled_from(MEMBERS))
    def crash(self, name: str) -> None:
        if name in self.sim.hosts and name not in self.crashed:
            self.sim.act("crash", name)
            self.crashed.add(name)

    @rule(name=st.sampled_from(MEMBERS))
    def restart(self, name: str) -> None:
        if name in self.crashed:
            self.sim.act("restart", name)
            self.crashed.discard(name)

    @rule(
        name=st.sampled_from(MEMBERS), broker=st.sampled_from([1, 2]), ms=st.integers(500, 20_000)
    )
    def cut_off(self, name: str, broker: int, ms: int) -> None:
        if name in self.sim.hosts:
            self.sim.act("hold", name, broker, ms)

    @rule(broker=st.sampled_from([1, 2]))
    def move_coordinator(self, broker: int) -> None:
        self.sim.act("coordinator_move", broker)

    @rule()
    def write(self) -> None:
        self.sim.write()

    @rule(ms=st.integers(0, 20_000))
    def advance(self, ms: int) -> None:
        self.sim.run_for(ms)

    def teardown(self) -> None:
        sim = getattr(self, "sim", None)
        if sim is not None:
            sim.heal_and_settle()


TestGroupDST = GroupDST.TestCase
TestGroupDST.settings = settings(
    max_examples=15,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
