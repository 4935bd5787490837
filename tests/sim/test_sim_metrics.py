"""The core's counters under the simulator: the same seed gives the same metrics (they are
a function of the events and the virtual time), a settled group reports what it did --
everything consumed (lag 0), at least one rebalance per member, commits answered -- and no
member's request counter ever jumps the way a retry storm makes it jump."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Final

import attrs
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
        if fetch["assigned-partitions"] and group["last-rebalance-seconds-ago"] >= 1.0:
            # (a member given its partitions in the rebalance that settled the group a
            # moment before the run ended has not had a fetch answered yet: seed 0, once
            # a member back from a poll timeout joins at its next poll)
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


# ------------------------------------------------------------------ no retry storm

STORM: Final = 60
"""Requests one member may write in any second of virtual time. A settled member writes
about 2 (a Fetch per ``fetch_max_wait`` plus heartbeats), a rebalance or a fault's recovery
adds a burst of 10-20 (FindCoordinator, Metadata, JoinGroup, SyncGroup, OffsetFetch,
ListOffsets...). A request retried without backoff on a 1-5 ms network writes hundreds."""


def _peak_requests_per_second(config: SimConfig, entropy: SeededEntropy) -> dict[str, int]:
    """Run ``config``; for each member, the most requests it wrote within one virtual
    second, read from the core's counter (``consumer-metrics`` ``request-total``) after
    every simulated event."""
    history: dict[int, deque[tuple[float, float]]] = defaultdict(deque)
    peak: dict[str, int] = defaultdict(int)

    def watch(sim: Sim) -> None:
        for name, host in sim.hosts.items():
            sent = host.machine.fetcher.client.counters.sent.count
            seen = history[id(host.machine)]  # a restarted member counts from zero
            seen.append((sim.now, sent))
            while seen[0][0] < sim.now - 1_000:
                seen.popleft()
            peak[name] = max(peak[name], int(sent - seen[0][1]))

    Sim(entropy, config, check=watch).run()
    return dict(peak)


@pytest.mark.parametrize("seed", range(4))
def test_no_retry_storm(seed: int) -> None:
    entropy = SeededEntropy(seed)
    config = SimConfig.draw(entropy)
    peak = _peak_requests_per_second(config, entropy)
    assert peak
    assert max(peak.values()) <= STORM, (config.faults, peak)


def test_a_storm_is_seen() -> None:
    # the measure's self-check: heartbeats every 5 ms are a storm of 200 requests a second
    entropy = SeededEntropy(0)
    config = attrs.evolve(SimConfig.draw(entropy), heartbeat_ms=5)
    peak = _peak_requests_per_second(config, entropy)
    assert max(peak.values()) > STORM
