"""Deterministic simulation of transactions (kafkastate.sim.txnworld): an exactly-once
pipeline -- kafkastate's transactional ProducerMachine and read_committed FetcherMachine --
against simulated brokers with a transaction coordinator, under faults.

A fixed sample of seeds, each run twice with identical traces and replayed from its tape
(D1); DST.md scenarios 8 (coordinator moves, delayed markers) and 9 (the Jepsen EndTxn
reordering, found with the client's KIP-890 defence off and never with it on); the
harness self-test (planted bugs found within a bounded number of seeds); Hypothesis."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from kafkastate.core.producer.transactions import TRANSITIONS, TransactionState
from kafkastate.core.protocol.framing import encode_request, produce_request
from kafkastate.core.protocol.records import RecordBatchBuilder
from kafkastate.core.protocol.requests import build, fetch_request, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.sim.__main__ import main as sim_main
from kafkastate.sim.cluster import parse_request
from kafkastate.sim.coordinator import ClassicCoordinator
from kafkastate.sim.entropy import HypothesisEntropy, SeededEntropy, TapeEntropy
from kafkastate.sim.txncluster import TXN_LOAD_TIME, TXN_SERVED_VERSIONS, TxnCluster
from kafkastate.sim.txnworld import TXN_PLANTED_BUGS, TXN_PLANTED_CATCHES, TxnConfig, TxnSim
from kafkastate.sim.world import InvariantViolation

SAMPLE = range(8)  # CI's fixed sample; `python -m kafkastate.sim sweep --workload txn` for more


def _run(seed: int, *, planted: str | None = None, defence: bool = True) -> TxnSim:
    entropy = SeededEntropy(seed)
    sim = TxnSim(entropy, TxnConfig.draw(entropy, planted=planted, defence=defence))
    sim.run()
    return sim


def _failure(seed: int, **kw: object) -> InvariantViolation | None:
    try:
        _run(seed, **kw)  # type: ignore[arg-type]
    except InvariantViolation as exc:
        return exc
    return None


@pytest.mark.parametrize("seed", SAMPLE)
def test_seed_passes_and_replays_identically(seed: int) -> None:
    first = _run(seed)
    second = _run(seed)
    assert first.trace == second.trace
    tape = TapeEntropy(first.entropy.tape)
    again = TxnSim(tape, TxnConfig.draw(tape))
    again.run()
    assert again.trace_hash() == first.trace_hash()  # the tape alone reproduces the run
    # the pipeline did transactional work, and every input went through exactly once
    assert any(outcome == "committed" for outcome, _ in first.outcomes.values())
    assert sum(len(v) for v in first.read.values()) == first.fed * first.tc.partitions


def test_the_sample_exercises_the_faults_and_outcomes() -> None:
    # coverage ("sometimes") over the sample: aborts, fencing, zombies, moved coordinators
    stats: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    outcomes: set[str] = set()
    for seed in SAMPLE:
        sim = _run(seed)
        stats.update(sim.stats)
        counts.update(sim.cluster.counts)
        outcomes |= {outcome for outcome, _ in sim.outcomes.values()}
    assert {"committed", "aborted", "unknown"} <= outcomes
    for fault in ("zombie", "crash_pipeline", "hold_end_txn", "coordinator_move", "marker_delay"):
        assert stats[f"fault {fault}"], fault
    assert stats["EndTxn held"] and stats["api 26 (closed)"]  # delivered after the client left
    assert counts["refused 26 90"] + counts["refused 24 90"] + counts["refused 25 90"]  # fenced
    assert counts["refused 22 51"]  # InitProducerId waited for an abort to complete


# ---------------------------------------------------------------- scenarios (A3.7)


def _scenario_9(defence: bool) -> TxnSim:
    # The application aborts transaction n; its EndTxn(abort) is held on the connection to
    # the coordinator for 8 s. The client times out after 3 s, retries the EndTxn on a new
    # connection (the abort completes) and goes on: n+1 begins (its processing keeps it
    # open ~1 s), n+2... When the first EndTxn is finally delivered, it arrives during a
    # later transaction.
    config = TxnConfig(
        brokers=2,
        partitions=1,
        batch=2,
        process_ms=1_000,
        abort_one_in=0,
        request_timeout_ms=3_000,
        defence=defence,
        script=((5_000, "abort_next", "p0"), (5_000, "hold_end_txn", "p0", 8_000, True)),
    )
    return TxnSim(SeededEntropy(0), config)


def test_scenario_9_jepsen_end_txn_reordering_found_without_the_defence() -> None:
    sim = _scenario_9(defence=False)
    with pytest.raises(InvariantViolation) as caught:
        sim.run()
    # TV1 broker: the late EndTxn(abort) has the current epoch, so it aborts the open
    # transaction that came after it
    assert caught.value.invariant == "T5"
    assert "EndTxn(abort)" in str(caught.value)
    assert sim.stats["EndTxn held"] == 1


def test_scenario_9_the_defence_fences_the_late_end_txn() -> None:
    sim = _scenario_9(defence=True)
    sim.run()
    assert sim.stats["EndTxn held"] == 1 and sim.stats["api 26 (closed)"] == 1
    # the epoch was bumped after the uncertain EndTxn: the late copy was refused
    assert sim.cluster.counts["refused 26 90"] == 1
    assert sim.cluster.epoch_history["tx-p0"] == [0, 1]


def test_scenario_8_coordinator_moves_and_delayed_markers() -> None:
    config = TxnConfig(
        brokers=3,
        partitions=3,
        pipelines=2,
        batch=3,
        process_ms=400,
        script=(
            (6_000, "hold_markers", 1, 3_000),
            (6_300, "txn_move", 1),
            (6_600, "hold_markers", 2, 2_000),
            (7_000, "txn_move", 2),
            (12_100, "crash_broker", 1, 3_000),
            (18_000, "hold_markers", 3, 4_000),
            (18_300, "txn_move", 3),
        ),
    )
    sim = TxnSim(SeededEntropy(0), config)
    sim.run()  # T1-T5, C3 and L1 hold
    assert sim.stats["txn coordinator moves"] == 3
    # each new coordinator loaded the log, and completed a transaction the old one had left
    # in PrepareCommit/PrepareAbort (its markers held) by sending them again
    assert sim.cluster.counts["txn coordinator loads"] == 3
    assert sim.cluster.counts["completed after a load"] >= 1
    assert sim.cluster.counts["refused 25 16"] >= 1  # NOT_COORDINATOR at the old one
    assert {o for o, _ in sim.outcomes.values()} == {"committed", "aborted"}


def test_a_zombie_is_fenced() -> None:
    # p0#1 stalls for 6 s mid-transaction while p0#2 starts with the same transactional id
    config = TxnConfig(
        partitions=2,
        process_ms=600,
        script=((6_100, "zombie", "p0", 6_000),),
    )
    sim = TxnSim(SeededEntropy(0), config)
    sim.run()  # T3: nothing of p0#1 takes effect after p0#2's init
    assert sim.procs["p0#1"].phase == "dead" and sim.procs["p0#2"].phase != "dead"
    assert any("p0#1 exits" in line and "Fenced" in line for line in sim.trace)


def test_a_late_produce_of_an_aborted_transaction_does_not_join_the_next() -> None:
    # The client bug this simulator found (fixed in TransactionManager): p0's link to b2,
    # the leader of output-1, is held for 6 s. Transaction n's Produce there times out and
    # its retry waits; the application aborts n, which fails the retry. n+1 begins and adds
    # output-1; when the link is released, the first Produce of n (already sent) arrives
    # first. At the same epoch it would pass the broker's checks (next sequence; KIP-890
    # part 1 finds n+1 ongoing with that partition) and be committed with n+1 (T5, then C3
    # duplicates). With the epoch bumped after such an abort, the broker refuses it.
    config = TxnConfig(
        brokers=3,
        partitions=2,
        batch=12,
        process_ms=1_000,
        abort_one_in=0,
        request_timeout_ms=3_000,
        script=((6_000, "hold", "p0#1/p", 2, 6_000), (6_000, "abort_next", "p0")),
    )
    sim = TxnSim(SeededEntropy(0), config)
    sim.run()
    assert sim.cluster.counts["refused 0 48"] == 1  # the late Produce: INVALID_TXN_STATE
    assert sim.cluster.epoch_history["tx-p0"] == [0, 1]


def test_a_transaction_past_its_timeout_is_aborted_and_the_pipeline_goes_on() -> None:
    # p0 stalls mid-transaction for longer than transaction.timeout.ms: the coordinator
    # aborts it and bumps the epoch; the client's next request is refused, it reports
    # TransactionTimedOutError, aborts by re-initialising with the old epoch (KIP-588: it
    # gets the epoch the timeout gave it, not another bump, as a real broker answers -- see
    # test_sim_conformance's "transactions") and goes on -- no restart, every input still
    # exactly once
    config = TxnConfig(
        partitions=1,
        process_ms=600,
        transaction_timeout_ms=10_000,
        script=((6_700, "pause", "p0", 12_000),),
    )
    sim = TxnSim(SeededEntropy(0), config)
    sim.run()
    assert sim.cluster.counts["timeout abort"] == 1
    assert sim.cluster.epoch_history["tx-p0"] == [0, 1]
    assert list(sim.procs) == ["p0#1"]
    assert any("TransactionTimedOutError" in line for line in sim.trace)


# ------------------------------------------------- the harness self-test (mutation)


def test_jepsen_anomaly_found_by_random_seeds_without_the_defence() -> None:
    found = {}
    for seed in range(40):
        failure = _failure(seed, defence=False)
        if failure is not None:
            found[seed] = failure.invariant
    # T5 directly; its consequences show up as T2/C3/L1 (hanging transactions)
    assert len(found) >= 2, found
    assert "T5" in found.values()


def test_the_same_seeds_pass_with_the_defence() -> None:
    for seed in range(40):
        entropy = SeededEntropy(seed)
        config = TxnConfig.draw(entropy, defence=False)
        # the very faults that found the anomaly, with the defence on
        sim = TxnSim(entropy, attrs.evolve(config, defence=True))
        sim.run()


# Within this many seeds (measured: the new ones fail on seed 0; P2 needs seed 4), and
# the first failure
# names the bug's own invariant.
WITHIN = {
    "consumer_ignores_aborted": 3,
    "producer_without_sequences": 10,
    "broker_loses_acked_writes": 3,
    "producer_reorders_sends": 3,
    "broker_misnumbers_fetches": 3,
    "coordinator_ignores_epoch": 3,
    "consumer_repeats_records": 2,
    "broker_aborts_committed": 2,
}


@pytest.mark.parametrize("bug", TXN_PLANTED_BUGS)
def test_planted_bug_is_found_by_its_own_invariant(bug: str) -> None:
    invariant = TXN_PLANTED_CATCHES[bug]
    for seed in range(WITHIN[bug]):
        failure = _failure(seed, planted=bug)
        if failure is not None:
            assert failure.invariant == invariant, f"{bug} seed {seed}: {failure}"
            return
    pytest.fail(f"{bug} not found by {invariant} within {WITHIN[bug]} seeds")


def test_t4_checks_the_transaction_managers_table() -> None:
    # a transition outside TRANSITIONS fails the run as T4
    sim = TxnSim(SeededEntropy(0), TxnConfig())
    sim.run_for(2_000)
    txn = sim.hosts["p0#1/p"].machine.transactions
    assert txn is not None and txn.transitions
    assert all(before in TRANSITIONS[after] for before, after in txn.transitions)
    ready = TransactionState.READY
    txn.transitions.append((ready, ready))  # READY -> READY is not in the table
    with pytest.raises(InvariantViolation) as caught:
        sim.run_for(1_000)
    assert caught.value.invariant == "T4"


# ------------------------------------------------------------- replay and Hypothesis


def test_replay_cli_reproduces_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert sim_main(["run", "0", "--workload", "txn", "--planted", "consumer_ignores_aborted"]) == 1
    (recorded,) = tmp_path.glob("sim-failure-0.json")
    saved = json.loads(recorded.read_text())
    assert saved["invariant"] == "T1" and saved["workload"] == "txn"
    assert sim_main(["replay", str(recorded)]) == 0  # same trace, same failure


def test_runs_are_identical_across_processes_and_hash_seeds() -> None:
    outputs = set()
    for hash_seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "kafkastate.sim", "run", "3", "--workload", "txn"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1, outputs
    assert "ok, trace" in outputs.pop()


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_hypothesis_drives_the_transaction_simulator(data: st.DataObject) -> None:
    entropy = HypothesisEntropy(data)
    TxnSim(entropy, TxnConfig.draw(entropy)).run()


def test_hypothesis_finds_the_jepsen_anomaly_without_the_defence() -> None:
    @settings(
        max_examples=60,
        derandomize=True,  # a fixed example sequence: no flaky hunt in CI
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def undefended(data: st.DataObject) -> None:
        entropy = HypothesisEntropy(data)
        TxnSim(entropy, TxnConfig.draw(entropy, defence=False)).run()

    with pytest.raises(InvariantViolation):
        undefended()


class PipelineDST(RuleBasedStateMachine):
    """Hypothesis picks the faults (crash, zombie, held EndTxn, coordinator moves, held
    markers) and when time runs; every low-level draw comes from the same test case."""

    sim: TxnSim

    @initialize(data=st.data(), pipelines=st.integers(1, 2), process_ms=st.sampled_from([0, 500]))
    def boot(self, data: st.DataObject, pipelines: int, process_ms: int) -> None:
        config = TxnConfig(brokers=2, partitions=2, pipelines=pipelines, process_ms=process_ms)
        self.sim = TxnSim(HypothesisEntropy(data), config)
        self.sim.feed()

    @rule(pipe=st.sampled_from(["p0", "p1"]))
    def crash(self, pipe: str) -> None:
        if pipe in self.sim.newest:
            self.sim.act("crash", pipe)

    @rule(pipe=st.sampled_from(["p0", "p1"]), ms=st.integers(500, 8_000))
    def zombie(self, pipe: str, ms: int) -> None:
        if pipe in self.sim.newest:
            self.sim.act("zombie", pipe, ms)

    @rule(pipe=st.sampled_from(["p0", "p1"]), ms=st.integers(500, 10_000), abort=st.booleans())
    def hold_end_txn(self, pipe: str, ms: int, abort: bool) -> None:
        if pipe in self.sim.newest:
            self.sim.act("hold_end_txn", pipe, ms, abort)

    @rule(broker=st.sampled_from([1, 2]))
    def move_coordinator(self, broker: int) -> None:
        self.sim.act("txn_move", broker)

    @rule(broker=st.sampled_from([1, 2]), ms=st.integers(100, 5_000))
    def hold_markers(self, broker: int, ms: int) -> None:
        self.sim.act("hold_markers", broker, ms)

    @rule()
    def feed(self) -> None:
        self.sim.feed()

    @rule(ms=st.integers(0, 10_000))
    def advance(self, ms: int) -> None:
        self.sim.run_for(ms)

    def teardown(self) -> None:
        sim = getattr(self, "sim", None)
        if sim is not None:
            sim.heal_and_settle()


TestPipelineDST = PipelineDST.TestCase
TestPipelineDST.settings = settings(
    max_examples=8,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ------------------------------------------------- the broker model, request by request

VERSIONS = ApiVersionTable(TXN_SERVED_VERSIONS)


def _cluster() -> TxnCluster:
    cluster = TxnCluster(1, ClassicCoordinator(), txn_node=1)
    cluster.create_topic("t", 1)
    return cluster


def _ask(cluster: TxnCluster, body: Any, *, now: float = 0.0, node: int = 1) -> Any:
    # through the wire format, as the simulated network carries it (Produce requests are
    # encoded by hand: there is no kio object to hand over)
    request = parse_request(encode_request(body, correlation_id=1, client_id="t")[4:])
    (answer,) = cluster.handle(node, (1, request), request, now)
    return answer


def _batch(pid: int, epoch: int, seq: int, *values: bytes, txn: bool = True) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn
    )
    for value in values:
        builder.append(0, None, value)
    return builder.build()


def _produce(cluster: TxnCluster, data: bytes) -> tuple[int, int]:
    answer = _ask(cluster, produce_request(VERSIONS, {("t", None, 0): data}, transactional_id="x"))
    part = answer.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def _txn(cluster: TxnCluster, api: int, *, at: tuple[int, float] = (1, 0.0), **fields: Any) -> Any:
    body = build(request_type(api, VERSIONS.version_for(api)), **fields)
    return _ask(cluster, body, node=at[0], now=at[1])


def _init(
    cluster: TxnCluster, pid: int = -1, epoch: int = -1, *, at: tuple[int, float] = (1, 0.0)
) -> tuple[int, int, int]:
    answer = _txn(
        cluster,
        ApiKey.INIT_PRODUCER_ID,
        at=at,
        transactional_id="x",
        transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=pid,
        producer_epoch=epoch,
    )
    return int(answer.error_code), int(answer.producer_id), int(answer.producer_epoch)


def _add(cluster: TxnCluster, pid: int, epoch: int, *, at: tuple[int, float] = (1, 0.0)) -> int:
    cls = request_type(24, VERSIONS.version_for(24))
    topic = nested_type(cls, "AddPartitionsToTxnTopic")(name="t", partitions=(0,))
    answer = _txn(
        cluster,
        24,
        at=at,
        v3_and_below_transactional_id="x",
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(topic,),
    )
    return int(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def _end(
    cluster: TxnCluster, pid: int, epoch: int, *, commit: bool, at: tuple[int, float] = (1, 0.0)
) -> int:
    answer = _txn(
        cluster, 26, at=at, transactional_id="x", producer_id=pid, producer_epoch=epoch,
        committed=commit,
    )  # fmt: skip
    return int(answer.error_code)


def _deliver_markers(cluster: TxnCluster) -> None:
    while cluster.markers_out:
        marker = cluster.markers_out.pop(0)
        cluster.markers_answered(cluster.write_markers(marker.dst, marker.frame()[4:])[4:])


def test_model_sequences_dedupe_and_epochs() -> None:
    cluster = _cluster()
    assert _produce(cluster, _batch(7, 0, 0, b"a", b"b", txn=False)) == (0, 0)
    assert _produce(cluster, _batch(7, 0, 0, b"a", b"b", txn=False)) == (0, 0)  # a retry
    assert _produce(cluster, _batch(7, 0, 5, b"c", txn=False))[0] == 45  # a gap
    assert _produce(cluster, _batch(7, 0, 2, b"c", txn=False)) == (0, 2)
    assert _produce(cluster, _batch(7, 1, 1, b"d", txn=False))[0] == 45  # new epoch: seq 0
    assert _produce(cluster, _batch(7, 1, 0, b"d", txn=False)) == (0, 3)
    assert _produce(cluster, _batch(7, 0, 3, b"e", txn=False))[0] == 47  # the old epoch
    assert cluster.committed_values(("t", 0)) == [b"a", b"b", b"c", b"d"]


def test_model_transaction_markers_lso_and_fencing() -> None:
    cluster = _cluster()
    code, pid, epoch = _init(cluster)
    assert (code, epoch) == (0, 0)
    # KIP-890 part 1: no transactional write to a partition not in an ongoing transaction
    assert _produce(cluster, _batch(pid, 0, 0, b"early"))[0] == 48
    assert _add(cluster, pid, 0) == 0
    assert _produce(cluster, _batch(pid, 0, 0, b"x1", b"x2")) == (0, 0)
    assert cluster.parts[("t", 0)].lso() == 0  # the open transaction holds the LSO
    assert _end(cluster, pid, 0, commit=False) == 0
    assert _add(cluster, pid, 0) == 51  # CONCURRENT_TRANSACTIONS until the markers are in
    assert _end(cluster, pid, 0, commit=False) == 51
    _deliver_markers(cluster)
    assert cluster.txns["x"].state == "CompleteAbort"
    assert cluster.parts[("t", 0)].aborted == [(pid, 0, 1)]
    assert _end(cluster, pid, 0, commit=False) == 0  # a retry of the finished abort
    assert _end(cluster, pid, 0, commit=True) == 48  # INVALID_TXN_STATE
    assert _add(cluster, pid, 0) == 0
    assert _produce(cluster, _batch(pid, 0, 2, b"y")) == (0, 3)
    code, _pid, _epoch = _init(cluster)  # a new incarnation: aborts, then fences
    assert code == 51 and cluster.txns["x"].state == "PrepareAbort"
    _deliver_markers(cluster)
    assert _init(cluster) == (0, pid, 2)
    assert _end(cluster, pid, 0, commit=True) == 90  # PRODUCER_FENCED
    assert _produce(cluster, _batch(pid, 0, 3, b"zombie"))[0] == 47
    assert cluster.epoch_history["x"] == [0, 1, 2]
    assert cluster.committed_values(("t", 0)) == []
    fetch = fetch_request(VERSIONS, {("t", None, 0): 0}, isolation_level=1)
    answer = _ask(cluster, fetch)
    part = answer.responses[0].partitions[0]
    assert int(part.last_stable_offset) == 5 and int(part.high_watermark) == 5
    assert [(int(a.producer_id), int(a.first_offset)) for a in part.aborted_transactions] == [
        (pid, 0),
        (pid, 3),
    ]


def test_model_txn_offset_commit_kip_447_and_unstable_offsets() -> None:
    cluster = _cluster()
    _code, pid, _epoch = _init(cluster)
    cls = request_type(28, VERSIONS.version_for(28))
    topic_cls = nested_type(cls, "TxnOffsetCommitRequestTopic")
    part_cls = nested_type(cls, "TxnOffsetCommitRequestPartition")

    def commit(generation: int, member: str) -> int:
        part = part_cls(
            partition_index=0,
            committed_offset=9,
            committed_leader_epoch=-1,
            committed_metadata="",
        )
        answer = _txn(
            cluster,
            28,
            transactional_id="x",
            group_id="g",
            producer_id=pid,
            producer_epoch=0,
            generation_id=generation,
            member_id=member,
            group_instance_id=None,
            topics=(topic_cls(name="t", partitions=(part,)),),
        )
        return int(answer.topics[0].partitions[0].error_code)

    assert commit(3, "m-1") == 22  # ILLEGAL_GENERATION: a zombie's offsets (KIP-447)
    added = _txn(cluster, 25, transactional_id="x", producer_id=pid, producer_epoch=0, group_id="g")
    assert int(added.error_code) == 0
    assert commit(-1, "") == 0  # an assign-based consumer's plain group id
    fetch_cls = request_type(ApiKey.OFFSET_FETCH, VERSIONS.version_for(ApiKey.OFFSET_FETCH))
    ofetch = build(
        fetch_cls,
        group_id="g",
        topics=(
            nested_type(fetch_cls, "OffsetFetchRequestTopic")(name="t", partition_indexes=(0,)),
        ),
        require_stable=True,
    )
    assert int(_ask(cluster, ofetch).topics[0].partitions[0].error_code) == 88  # unstable
    assert _end(cluster, pid, 0, commit=True) == 0
    _deliver_markers(cluster)
    assert int(_ask(cluster, ofetch).topics[0].partitions[0].committed_offset) == 9


def test_model_list_offsets_latest_is_the_lso_under_read_committed() -> None:
    cluster = _cluster()
    _code, pid, _epoch = _init(cluster)
    assert _produce(cluster, _batch(pid, 0, 0, b"plain", txn=False))[0] == 0
    assert _add(cluster, pid, 0) == 0
    assert _produce(cluster, _batch(pid, 0, 1, b"open")) == (0, 1)
    for isolation, expected in ((0, 2), (1, 1)):
        cls = request_type(ApiKey.LIST_OFFSETS, VERSIONS.version_for(ApiKey.LIST_OFFSETS))
        topic_cls = nested_type(cls, "ListOffsetsTopic")
        part_cls = nested_type(cls, "ListOffsetsPartition")
        part = build(part_cls, partition_index=0, timestamp=-1, current_leader_epoch=-1)
        body = build(
            cls,
            replica_id=-1,
            isolation_level=isolation,
            topics=(build(topic_cls, name="t", partitions=(part,)),),
        )
        answer = _ask(cluster, body)
        assert int(answer.topics[0].partitions[0].offset) == expected


def test_model_transaction_coordinator_failover_loads_the_log() -> None:
    # TransactionStateManager: the new coordinator knows what __transaction_state says,
    # answers COORDINATOR_LOAD_IN_PROGRESS while it loads it, then completes a PrepareCommit
    # by sending its markers (a higher coordinator epoch); the KIP-588 epoch is not in the log
    cluster = TxnCluster(2, ClassicCoordinator(), txn_node=1)
    cluster.create_topic("t", 1)
    _code, pid, _epoch = _init(cluster)
    assert _add(cluster, pid, 0) == 0
    assert _produce(cluster, _batch(pid, 0, 0, b"a")) == (0, 0)
    assert _end(cluster, pid, 0, commit=True) == 0
    assert cluster.txns["x"].state == "PrepareCommit" and cluster.markers_out
    cluster.move_txn_coordinator(2, now=1.0)  # before the markers went out
    assert not cluster.markers_out  # the old coordinator's queue is gone
    assert _end(cluster, pid, 0, commit=True, at=(1, 1.1)) == 16  # NOT_COORDINATOR
    assert _end(cluster, pid, 0, commit=True, at=(2, 1.1)) == 14  # loading
    assert cluster.txn_timer() == 1.0 + TXN_LOAD_TIME
    cluster.handle_txn_timer(now=1.0 + TXN_LOAD_TIME)
    assert [(m.tp, m.commit, m.coordinator_epoch) for m in cluster.markers_out] == [
        (("t", 0), True, 1)
    ]
    _deliver_markers(cluster)
    assert cluster.txns["x"].state == "CompleteCommit"
    assert cluster.committed_values(("t", 0)) == [b"a"]
    assert _end(cluster, pid, 0, commit=True, at=(2, 2.0)) == 0  # a retry of the commit
    # a timeout abort fences epoch 0; the fenced producer may re-init (KIP-588) ...
    assert _add(cluster, pid, 0) == 16  # (at the old broker)
    assert _add(cluster, pid, 0, at=(2, 2.0)) == 0
    cluster.handle_txn_timer(now=70.0)
    _deliver_markers(cluster)
    assert (cluster.txns["x"].state, cluster.txns["x"].epoch) == ("CompleteAbort", 1)
    # ... until the coordinator moves: lastProducerEpoch is loaded as NO_PRODUCER_EPOCH
    cluster.move_txn_coordinator(1, now=71.0)
    cluster.handle_txn_timer(now=72.0)
    assert _init(cluster, pid, 0, at=(1, 72.0)) == (90, -1, -1)  # PRODUCER_FENCED
    assert _init(cluster, pid, 1, at=(1, 72.0)) == (0, pid, 2)  # the current epoch bumps
