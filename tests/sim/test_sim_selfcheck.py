"""The simulator checks itself (a harness bug must not look like a client bug or hide
one): each pipe of the network delivers in order, virtual time never runs backwards, the
fault schedule is applied as drawn, a seed gives the same trace twice (D1); and the tools
built on it: shrinking a failure, the coverage report."""

from __future__ import annotations

import contextlib
import heapq
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs
import pytest

from kafkastate.core.states import registered_tables
from kafkastate.sim.__main__ import main as sim_main
from kafkastate.sim.coverage import Coverage
from kafkastate.sim.entropy import Entropy, SeededEntropy
from kafkastate.sim.shrink import shrink
from kafkastate.sim.world import FAULTS, InvariantViolation, Sim, SimConfig

FAULTY = ("delay", "hold", "pause", "reset", "crash_member", "crash_broker")


def _sim(seed: int, cls: type[Sim] = Sim, **overrides: Any) -> Sim:
    entropy = SeededEntropy(seed)
    return cls(entropy, attrs.evolve(SimConfig.draw(entropy), **overrides))


class _Recording(Sim):
    """Records what each end writes on each pipe and what the network delivers there."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent: dict[tuple[int, str], bytearray] = defaultdict(bytearray)
        self.delivered: dict[tuple[int, str], bytearray] = defaultdict(bytearray)
        self._again = False
        super().__init__(*args, **kwargs)

    def _send(self, conn: Any, direction: str, data: bytes) -> None:
        if not self._again:  # a released hold sends again what the end wrote once
            self.sent[(conn.cid, direction)] += data
        super()._send(conn, direction, data)

    def _resend(self, conn: Any, direction: str, data: bytes) -> None:
        self._again = True
        try:
            super()._resend(conn, direction, data)
        finally:
            self._again = False

    def _on_deliver(self, cid: int, direction: str, chunks: list[bytes]) -> None:
        self.delivered[(cid, direction)] += b"".join(chunks)
        super()._on_deliver(cid, direction, chunks)


class _Reordering(_Recording):
    """A broken network: one event per frame, so same-millisecond frames of a pipe
    reorder by tie-break."""

    def _send(self, conn: Any, direction: str, data: bytes) -> None:
        if not self._again:
            self.sent[(conn.cid, direction)] += data
        if (conn.host, conn.broker) in self._blocked:
            self._queued[conn.cid].append((direction, data))
            return
        due = max(conn.last[direction], self.now + self._delay(direction))
        conn.last[direction] = due
        self._at(due, "deliver", (conn.cid, direction, [data]))


def _pipes_in_order(sim: _Recording) -> bool:
    """Each pipe delivered a prefix of what was written on it, in the order written (a
    connection that closed drops its tail)."""
    return all(bytes(sim.sent[k]).startswith(bytes(got)) for k, got in sim.delivered.items())


@pytest.mark.parametrize("seed", range(3))
def test_each_pipe_delivers_in_order(seed: int) -> None:
    sim = _sim(seed, _Recording, faults=FAULTY)
    sim.run()
    assert sim.delivered and _pipes_in_order(sim)


def test_the_pipe_check_fails_on_a_reordering_network() -> None:
    for seed in range(6):
        sim = _sim(seed, _Reordering, faults=FAULTY)
        with contextlib.suppress(InvariantViolation):  # NET, or what it did to the client
            sim.run()
        if not _pipes_in_order(sim):
            return
    pytest.fail("a reordering network went unnoticed by the pipe check")


def test_virtual_time_never_runs_backwards() -> None:
    sim = _sim(1, faults=FAULTY)
    sim.run()
    times = [int(line.split(" ", 1)[0]) for line in sim.trace]
    assert times == sorted(times) and sim.events > 100


def test_an_event_in_the_past_fails_as_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # a broken scheduler that puts deliveries 10 ms in the past
    def back_in_time(self: Sim, t: int, kind: str, args: tuple[Any, ...]) -> None:
        self._seq += 1
        due = t - 10 if kind == "deliver" else max(t, self.now)
        heapq.heappush(self._heap, (due, 0, self._seq, kind, args))

    monkeypatch.setattr(Sim, "_at", back_in_time)
    with pytest.raises(InvariantViolation) as caught:
        _sim(0).run()
    assert caught.value.invariant == "TIME"


class _Labelled(SeededEntropy):
    """Keeps each draw with its label (the schedule as drawn)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.drawn: list[tuple[str, int]] = []

    def below(self, n: int, label: str) -> int:
        value = super().below(n, label)
        self.drawn.append((label, value))
        return value


@pytest.mark.parametrize("seed", range(3))
def test_the_fault_schedule_is_applied_as_drawn(seed: int) -> None:
    entropy = _Labelled(seed)
    config = attrs.evolve(SimConfig.draw(entropy), faults=FAULTS)
    sim = Sim(entropy, config)
    sim.run()
    # each tick drew a kind (0: a quiet tick); the schedule is exactly the ones drawn
    drawn = [v for label, v in entropy.drawn if label == "fault kind"]
    assert [kind for _t, kind in sim.fault_log] == [config.faults[v - 1] for v in drawn if v]
    # ticks every fault_every_ms of the chaos phase, none after the heal
    every = config.fault_every_ms
    ticks = list(range(every, config.chaos_ms + 1, every))
    assert len(drawn) == len(ticks)
    assert {t for t, _kind in sim.fault_log} <= set(ticks)
    # and what a fault does is in the trace at the time it was drawn
    lines = set(sim.trace)
    for t, kind in sim.fault_log:
        if kind == "hold":
            assert any(line.startswith(f"{t} fault hold ") for line in lines), t


def test_a_scripted_schedule_runs_at_its_times() -> None:
    script = ((3_000, "pause", "m1", 2_000), (7_000, "crash", "m0"), (9_500, "restart", "m0"))
    sim = Sim(SeededEntropy(0), SimConfig(members=2, script=script))
    sim.run()
    applied = [  # the script's lines (each event also has its state line, "gen=...")
        line.split()
        for line in sim.trace
        if line.split()[1] == "script" and not line.split()[2].startswith("gen=")
    ]
    assert [int(words[0]) for words in applied] == [3_000, 7_000, 9_500]
    assert [words[2] for words in applied] == ["pause", "crash", "restart"]


def test_d1_a_failing_seed_fails_the_same_way_twice() -> None:
    def failing() -> tuple[str, str]:
        entropy = SeededEntropy(0)
        sim = Sim(entropy, SimConfig.draw(entropy, planted="assign_before_revoke"))
        with pytest.raises(InvariantViolation) as caught:
            sim.run()
        return sim.trace_hash(), str(caught.value)

    assert failing() == failing()


# ------------------------------------------------------------------------- shrinking


def _planted(entropy: Entropy) -> Sim:
    return Sim(entropy, SimConfig.draw(entropy, planted="assign_before_revoke"))


def test_shrinking_keeps_the_invariant_and_shrinks_the_schedule() -> None:
    entropy = SeededEntropy(0)
    sim = _planted(entropy)
    with pytest.raises(InvariantViolation) as caught:
        sim.run()
    assert caught.value.invariant == "G4"
    shrunk = shrink(_planted, entropy.tape, "G4", max_runs=25)
    assert shrunk.failure.invariant == "G4"
    assert shrunk.faults[1] < shrunk.faults[0]
    assert shrunk.events[1] <= shrunk.events[0]
    assert shrunk.draws[1] < shrunk.draws[0]


def test_run_shrink_writes_a_replay_file_that_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = sim_main(["run", "0", "--planted", "assign_before_revoke", "--shrink", "--max-runs=12"])
    assert code == 1
    out = capsys.readouterr().out
    assert "shrunk G4 in " in out and "faults " in out
    saved = json.loads((tmp_path / "sim-failure-0-shrunk.json").read_text())
    original = json.loads((tmp_path / "sim-failure-0.json").read_text())
    assert saved["invariant"] == "G4"
    assert sum(map(bool, saved["tape"])) < sum(map(bool, original["tape"]))
    assert sim_main(["replay", str(tmp_path / "sim-failure-0-shrunk.json")]) == 0


# -------------------------------------------------------------------------- coverage


def test_coverage_counts_transitions_and_says_what_was_never_reached() -> None:
    with Coverage(FAULTS) as coverage:
        sim = _sim(2, faults=("pause",))
        sim.run()
        coverage.add_run(sim)
    machines = {machine for machine, _a, _b in coverage.transitions}
    assert {"GroupMember", "FetchPosition", "group coordinator (sim)"} <= machines
    never = coverage.unreached()
    tables = registered_tables()
    # a producer-only machine is never driven by a consumer group run, and says so
    report = coverage.report()
    assert "TransactionManager: never driven" in report
    assert "faults drawn: pause" in report and "never: delay" in report
    total = sum(len(edges) for edges in coverage.tables().values())
    assert 0 < sum(len(v) for v in never.values()) < total
    assert set(tables) <= set(coverage.tables())


def test_sweep_coverage_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sim_main(["sweep", "--seeds", "2", "--coverage"]) == 0
    out = capsys.readouterr().out
    assert "coverage over 2 runs" in out and "transitions" in out


def test_a_kip848_sweep_reports_the_kip848_machines_and_what_they_never_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the core's KIP-848 member and the model's KIP-848 coordinator (its groups' derived
    # states, its members' reconciliation states) are counted; the classic ones are not
    # driven; what no seed reached is named
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--seeds", "2", "--workload", "group848", "--coverage"]
    assert sim_main(argv) == 0
    lines = capsys.readouterr().out.splitlines()

    def line(machine: str) -> int:
        return next(i for i, text in enumerate(lines) if text.startswith(f"  {machine}: "))

    assert "never driven" in lines[line("GroupMember")]
    for machine in (
        "ConsumerGroupMember",
        "consumer group coordinator (sim, KIP-848)",
        "consumer group member at the coordinator (sim, KIP-848)",
    ):
        i = line(machine)
        assert "transitions, " in lines[i] and " states" in lines[i], lines[i]
    member = line("ConsumerGroupMember")
    assert lines[member + 1].startswith("    never")  # e.g. a member that never closed
    coordinator = line("consumer group coordinator (sim, KIP-848)")
    assert lines[coordinator + 1].startswith("    never: ")


def test_coverage_of_kip848_runs_counts_states_and_transitions() -> None:
    from kafkastate.sim.world848 import Sim848, Sim848Config  # noqa: PLC0415

    with Coverage(FAULTS) as coverage:
        entropy = SeededEntropy(1)
        sim = Sim848(entropy, Sim848Config.draw(entropy))
        sim.run()
        coverage.add_run(sim)
    machines = {machine for machine, _a, _b in coverage.transitions}
    assert {
        "ConsumerGroupMember",
        "consumer group coordinator (sim, KIP-848)",
        "consumer group member at the coordinator (sim, KIP-848)",
    } <= machines
    assert "GroupMember" not in machines
    never_in = coverage.unreached_states()
    assert "CLOSED" in never_in["ConsumerGroupMember"]  # the application never closes
    group848 = never_in["consumer group coordinator (sim, KIP-848)"]
    assert "STABLE" not in group848 and set(group848) < {"EMPTY", "ASSIGNING", "RECONCILING"}
    assert never_in["GroupMember"] == [s.name for s in registered_tables()["GroupMember"].states]


def test_sweep_shrinks_the_first_failure_of_each_invariant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--seeds", "2", "--planted", "consumer_skips_records", "--shrink"]
    assert sim_main([*argv, "--max-runs", "4"]) == 1
    out = capsys.readouterr().out
    assert "shrinking seed 0 (C1)" in out and "shrunk C1 in " in out
    assert json.loads((tmp_path / "sim-failure-0-shrunk.json").read_text())["invariant"] == "C1"


def test_sweep_over_worker_processes_is_the_same_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --jobs runs each seed whole in one worker: the same runs (trace hashes, tapes,
    # coverage) as one process, reported in seed order
    results = {}
    for jobs in ("1", "2"):
        (tmp_path / jobs).mkdir()
        monkeypatch.chdir(tmp_path / jobs)
        argv = ["sweep", "--seeds", "3", "--planted", "consumer_skips_records", "--coverage"]
        assert sim_main([*argv, "--jobs", jobs]) == 1
        out = capsys.readouterr().out
        assert "3 seeds in " in out and f"{jobs} job" in out
        rate = next(line for line in out.splitlines() if " seeds in " in line)
        cpu = float(rate.split("; ")[1].split(" s CPU")[0])
        assert cpu > 0 and "seeds/min per core" in rate
        files = sorted((tmp_path / jobs).glob("sim-failure-*.json"))
        assert files
        results[jobs] = (
            [line for line in out.splitlines() if " seeds in " not in line],
            {f.name: json.loads(f.read_text()) for f in files},
        )
    assert results["1"] == results["2"]
