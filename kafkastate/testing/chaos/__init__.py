"""The chaos runner: kafkastate's workloads on a 3-broker cluster behind a fault proxy, under
a seeded fault schedule, judged by an independent checker (docs/reliability.md).

    python -m kafkastate.testing.chaos --seed 7 --records 20000 --faults 5   # ./ks chaos

Needs java (and mvn for the first jar fetch), go for Toxiproxy's first build (cached under
the harness cache afterwards), confluent-kafka (the checker's client) and trio (the ``chaos``
extra).
"""

from __future__ import annotations

from ._checker import CHECK_NAMES, CheckResult, check_group, check_produce, check_txn, read_topics
from ._faults import FAULT_KINDS, Applied, Fault, FaultInjector, active_controller, make_schedule
from ._runner import RUNTIMES, ChaosOptions, ChaosReport, run_chaos
from ._toxiproxy import TOXIPROXY_VERSION, Toxiproxy, ensure_toxiproxy

__all__ = [
    "CHECK_NAMES",
    "FAULT_KINDS",
    "RUNTIMES",
    "TOXIPROXY_VERSION",
    "Applied",
    "ChaosOptions",
    "ChaosReport",
    "CheckResult",
    "Fault",
    "FaultInjector",
    "Toxiproxy",
    "active_controller",
    "check_group",
    "check_produce",
    "ensure_toxiproxy",
    "make_schedule",
    "check_txn",
    "read_topics",
    "run_chaos",
]
