"""The core's counters under the simulator: the same seed gives the same metrics (they are
a function of the events and the virtual time), and a settled group reports what it did --
everything consumed (lag 0), at least one rebalance per member, commits answered."""

from __future__ import annotations

import pytest

from kafkastate.core.report import consumer_metrics
from kafkastate.sim.entropy import SeededEntropy
from kafkastate.sim.world import Sim, SimConfig


def _run(seed: int) -> Sim:
    entropy = SeededEntropy(seed)
    sim = Sim(entropy, SimConfig.draw(entropy))
    sim.run()
    return sim


def _reports(sim: Sim) -> dict[str, dict[str, dict[str, float]]]:
    return {name: consumer_metrics(h.machine) for name, h in sorted(sim.hosts.items())}


@pytest.mark.parametrize("seed", range(4))
def test_counters_replay_and_tell_what_the_group_did(seed: int) -> None:
    first = _run(seed)
    reports = _reports(first)
    assert reports == _reports(_run(seed))  # deterministic, like the trace
    live = [name for name, h in first.hosts.items() if h.alive]
    assert live
    consumed = 0
    for name in live:
        fetch = reports[name]["consumer-fetch-manager-metrics"]
        group = reports[name]["consumer-coordinator-metrics"]
        assert fetch["records-lag-max"] == 0, name
        if fetch["assigned-partitions"]:
            assert fetch["fetch-total"] >= 1
        assert group["rebalance-total"] >= 1
        assert group["failed-rebalance-total"] == 0
        assert group["assigned-partitions"] == fetch["assigned-partitions"]
        consumed += fetch["records-consumed-total"]
    assigned = sum(
        reports[n]["consumer-fetch-manager-metrics"]["assigned-partitions"] for n in live
    )
    assert assigned == first.config.partitions
    assert consumed >= 1
