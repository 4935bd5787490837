"""The chaos runner (kafkastate.testing.chaos): its schedule, its checker, the harness's
proxied listener -- and a short run: a 3-broker cluster behind Toxiproxy, the idempotent
and transactional workloads on one runtime under a few faults, judged by confluent-kafka.

The short run always kills and restarts one transactional or group process (``client_kill``)
besides three broker or network faults. Its runtime, seed and fault kinds rotate by day
(``KAFKASTATE_CHAOS_SEED`` picks them); a failure prints the seed and the fault schedule,
and the command that replays them.
"""

from __future__ import annotations

import datetime
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from kafkastate.errors import KafkaTimeoutError
from kafkastate.testing import HarnessError, KafkaCluster, PrerequisiteError
from kafkastate.testing._config import NodePorts, NodeSpec, server_properties
from kafkastate.testing.chaos import (
    CHECK_NAMES,
    FAULT_KINDS,
    RUNTIMES,
    ChaosOptions,
    check_group,
    check_produce,
    check_txn,
    make_schedule,
    run_chaos,
)
from kafkastate.testing.chaos._checker import mark_killed
from kafkastate.testing.chaos._group import (
    GroupArgs,
    GroupLog,
    GroupProgress,
    member_lifetime,
    member_program,
    prefill_ends,
)
from kafkastate.testing.chaos._plot import timeline_svg
from kafkastate.testing.chaos._txn import (
    ATTEMPTS_PER_INCARNATION,
    TxnArgs,
    output_value,
    run_blocking,
    txn_program,
)
from kafkastate.testing.chaos._workload import record_value
from kafkastate.testing.pytest_plugin import unavailable

# -- the schedule -----------------------------------------------------------------------------


def test_schedule_is_seeded_non_overlapping_and_covers_every_kind() -> None:
    schedule = make_schedule(seed=11, count=21, window=420.0, brokers=3)
    assert schedule == make_schedule(seed=11, count=21, window=420.0, brokers=3)
    assert schedule != make_schedule(seed=12, count=21, window=420.0, brokers=3)
    for i, fault in enumerate(schedule):
        assert i * 20.0 <= fault.at < (i + 1) * 20.0
        assert fault.at + fault.duration < (i + 1) * 20.0  # healed before the next slot
        assert fault.node is None or 1 <= fault.node <= 3
    for start in range(0, 21 - len(FAULT_KINDS) + 1, len(FAULT_KINDS)):
        chunk = schedule[start : start + len(FAULT_KINDS)]
        assert sorted(f.kind for f in chunk) == sorted(FAULT_KINDS)
    by_kind = {f.kind: f for f in schedule}
    assert by_kind["partition"].node is not None and by_kind["pause"].node is not None
    assert by_kind["leader_kill"].node is None  # found when it fires
    assert set(by_kind["latency"].params) == {"latency", "jitter"}
    assert set(by_kind["bandwidth"].params) == {"rate"}
    assert set(by_kind["reset_peer"].params) == {"timeout"}
    assert by_kind["client_kill"].node is None and set(by_kind["client_kill"].params) == {"target"}


def test_timeline_svg_draws_one_bar_per_fault() -> None:
    import xml.etree.ElementTree as ET  # noqa: PLC0415

    rows: list[dict[str, object]] = [
        {"kind": "pause", "node": 2, "started": 1.0, "healed": 4.0, "detail": "SIGSTOP <2>"},
        {"kind": "latency", "node": None, "started": 10.0, "healed": 14.5, "detail": ""},
        {"kind": "pause", "node": 1, "started": 20.0, "healed": None, "detail": ""},
    ]
    root = ET.fromstring(timeline_svg(rows, 30.0, title="seed 1"))
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in root.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
    assert len(bars) == 3
    labels = [t.text for t in root.iter(f"{ns}text")]
    assert "pause" in labels and "latency" in labels and "leader_kill" not in labels
    assert bars[0].find(f"{ns}title").text == "SIGSTOP <2>"  # type: ignore[union-attr]


# -- the harness's PROXIED listener -----------------------------------------------------------


def _node(ports: NodePorts) -> NodeSpec:
    return NodeSpec(node_id=2, ports=ports, data_dir=Path("/d"), voters={1: 1, 2: 2, 3: 3})


def test_proxied_listener_is_advertised_at_the_proxy_port() -> None:
    props = server_properties(_node(NodePorts(1000, 1001, proxied=1002, proxied_advertised=2002)))
    assert "PROXIED://127.0.0.1:1002" in props["listeners"].split(",")
    advertised = props["advertised.listeners"].split(",")
    assert "PROXIED://127.0.0.1:2002" in advertised
    assert "PLAINTEXT://127.0.0.1:1000" in advertised  # brokers still talk directly
    assert "PROXIED:PLAINTEXT" in props["listener.security.protocol.map"].split(",")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    with pytest.raises(ValueError, match="proxy's port"):
        server_properties(_node(NodePorts(1000, 1001, proxied=1002)))
    assert "PROXIED" not in server_properties(_node(NodePorts(1000, 1001)))["listeners"]


def test_proxy_ports_must_name_every_node() -> None:
    with pytest.raises(HarnessError, match="every node"):
        KafkaCluster.start(brokers=3, proxy_ports={1: 5001, 2: 5002})


class _Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


# -- the checker ------------------------------------------------------------------------------


def _acks(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_produce_check_counts_each_violation(tmp_path: Path) -> None:
    good = [(0, 0, b"1", record_value(1, 0)), (0, 1, b"1", record_value(1, 1))]
    acks = [
        {"t": "t", "p": 0, "o": 0, "k": 1, "s": 0},
        {"t": "t", "p": 0, "o": 1, "k": 1, "s": 1},
        {"t": "t", "k": 1, "s": 2, "err": "KafkaTimeoutError()"},
    ]
    clean = check_produce("t", good, [], [_acks(tmp_path / "a", acks)])
    assert clean.ok and (clean.acked, clean.failed, clean.read) == (2, 1, 2)

    bad = [
        (0, 0, b"1", record_value(1, 0)),
        (0, 1, b"1", record_value(1, 2)),  # seq 2, then seq 1: out of order
        (0, 2, b"1", record_value(1, 1)),
        (0, 3, b"1", record_value(1, 2)),  # seq 2 twice
    ]
    acks += [
        {"t": "t", "p": 0, "o": 7, "k": 2, "s": 0},  # acknowledged, never read
        {"t": "t", "p": 0, "o": 2, "k": 1, "s": 0},  # 1:0 acknowledged twice elsewhere
    ]
    result = check_produce("t", bad, [3], [_acks(tmp_path / "b", acks)])
    assert not result.ok
    counts = {name: n for name, n in result.counts.items() if n}
    # lost: 2:0 never read, 1:1 (acked at @1, @1 holds 1:2), 1:0 (last ack says @2)
    assert counts == {"lost": 3, "duplicates": 1, "order": 1, "ack_mismatch": 1, "unreadable": 1}
    assert set(result.counts) == set(CHECK_NAMES)


def test_txn_check_counts_aborted_reads_losses_and_offsets(tmp_path: Path) -> None:
    log = [
        {"attempt": 1, "offsets": {"0": [0, 1]}, "outcome": "committed"},
        {"attempt": 2, "offsets": {"0": [2]}, "outcome": "aborted"},
        {"ev": "recovery", "what": "retry_rewind", "error": "KafkaTimeoutError()", "t": 1.0},
        {"attempt": 3, "offsets": {"0": [2]}, "outcome": "committed"},
    ]
    path = _acks(tmp_path / "txn", log)
    out = [
        (0, i, None, output_value(0, src, att))
        for i, (src, att) in enumerate([(0, 1), (1, 1), (2, 3)])
    ]
    clean = check_txn("o", out, [], input_ends={0: 3}, committed={0: 3}, txn_logs=[path])
    assert clean.ok, clean.examples
    assert clean.acked == 3
    assert clean.recoveries == {"retry_rewind": 1}  # counted, not a violation

    bad = [
        (0, 0, None, output_value(0, 0, 1)),
        (0, 1, None, output_value(0, 2, 2)),  # the aborted attempt, visible
        (0, 2, None, output_value(0, 2, 3)),  # input 2 twice
    ]
    result = check_txn("o", bad, [], input_ends={0: 3}, committed={0: 2}, txn_logs=[path])
    counts = {name: n for name, n in result.counts.items() if n}
    # input 1 committed in attempt 1 but missing; input 2 read from attempt 2 then 3
    assert counts == {"aborted_read": 1, "duplicates": 1, "lost": 1, "offsets": 1}


def test_group_check_counts_overlapping_owners_gaps_and_offsets(tmp_path: Path) -> None:
    rows = [
        {"ev": "assigned", "m": "0.0", "parts": [0, 1], "t": 1.0},
        {"ev": "batch", "m": "0.0", "recs": {"0": [0, 1], "1": [0]}, "t": 1.5},
        {"ev": "commit", "m": "0.0", "offsets": {"0": 2, "1": 1}, "t0": 1.6, "ok": True, "t": 1.7},
        {"ev": "revoked", "m": "0.0", "parts": [1], "t": 2.0},
        {"ev": "assigned", "m": "1.0", "parts": [1], "t": 2.5},
        {"ev": "batch", "m": "1.0", "recs": {"1": [1, 2]}, "t": 3.0},
        {"ev": "commit", "m": "1.0", "offsets": {"1": 3}, "t0": 3.1, "ok": False, "t": 3.2},
        {"ev": "closing", "m": "0.0", "t": 4.0},  # gives up partition 0
        {"ev": "assigned", "m": "1.0", "parts": [0], "t": 4.5},
    ]
    path = _acks(tmp_path / "g", rows)
    clean = check_group("in", {0: 2, 1: 3}, {0: 2, 1: 3}, [path])
    assert clean.ok, clean.examples
    assert (clean.acked, clean.failed, clean.read, clean.zombie_windows) == (5, 1, 2, 0)
    assert not clean.examples
    result = check_group("in", {0: 3, 1: 3}, {0: 2, 1: 3}, [path])
    counts = {name: n for name, n in result.counts.items() if n}
    assert counts == {"lost": 1, "offsets": 1}  # p0@2 never processed


def _zombie_rows(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Member 0.0 owns partition 1 and is removed from the group while a commit of it is
    stuck; 1.0 gets the partition at 3.0, 0.0 hears it (``lost``) at 3.6."""
    rows: list[dict[str, Any]] = [
        {"ev": "assigned", "m": "0.0", "parts": [1], "t": 1.0},
        {"ev": "batch", "m": "0.0", "recs": {"1": [0, 1]}, "t": 1.5},
        {"ev": "assigned", "m": "1.0", "parts": [1], "t": 3.0},
        {
            "ev": "commit",
            "m": "0.0",
            "offsets": {"1": 2},
            "t0": 1.6,
            "ok": False,
            "error": "UnknownMemberIdError('member unknown')",
            "t": 3.5,
        },
        {"ev": "lost", "m": "0.0", "parts": [1], "t": 3.6},
        {"ev": "batch", "m": "1.0", "recs": {"1": [0, 1, 2]}, "t": 3.2},
        {"ev": "commit", "m": "1.0", "offsets": {"1": 3}, "t0": 3.3, "ok": True, "t": 3.4},
        *extra,
    ]
    return rows


def test_group_check_counts_a_zombie_window_apart_and_work_in_it_as_two_owners(
    tmp_path: Path,
) -> None:
    def check(name: str, *extra: dict[str, Any]) -> Any:
        return check_group("in", {1: 3}, {1: 3}, [_acks(tmp_path / name, _zombie_rows(*extra))])

    # the zombie window 3.0-3.6: the removed 0.0 did no work in it (its commit refused)
    zombie = check("zombie")
    assert zombie.ok, zombie.examples
    assert zombie.zombie_windows == 1
    assert zombie.examples["zombie_windows"] == [
        "partition 1: 1.0 assigned at 3.000 while 0.0 owned it until 3.600,"
        " no work of 0.0 in between"
    ]
    # the old owner's work in the window is a violation: a record processed ...
    batch = {"ev": "batch", "m": "0.0", "recs": {"1": [2]}, "t": 3.1}
    # ... a commit accepted, sent in the window or only answered in it (when the
    # coordinator accepted it the log cannot tell) ...
    sent = {"ev": "commit", "m": "0.0", "offsets": {"1": 2}, "t0": 3.05, "ok": True, "t": 3.1}
    answered = {"ev": "commit", "m": "0.0", "offsets": {"1": 2}, "t0": 2.0, "ok": True, "t": 3.1}
    # ... or work on it after its own callback while the other member owns it
    late = {"ev": "batch", "m": "0.0", "recs": {"1": [2]}, "t": 3.7}
    for name, row in [("batch", batch), ("sent", sent), ("answered", answered), ("late", late)]:
        found = check(name, row)
        assert {n: c for n, c in found.counts.items() if c} == {"owners": 1}, name
        assert found.zombie_windows == 0, name
        assert found.examples["owners"][0].startswith("partition 1: 0.0 (owned it 1.000-3.600) ")
    assert check("sent", sent).examples["owners"] == [
        "partition 1: 0.0 (owned it 1.000-3.600) commit of p1 at 2 accepted (3.050-3.100)"
        " while 1.0 owned it (assigned at 3.000)"
    ]
    # a commit that failed without an answer (it may have been accepted) is no proven work:
    # the window's example names it
    timeout = {**sent, "ok": False, "error": "KafkaTimeoutError('no answer within 15 s')"}
    doubt = check("doubt", timeout)
    assert doubt.ok and doubt.zombie_windows == 1
    assert doubt.examples["zombie_windows"][0].endswith(
        "no work of 0.0 in between, a commit of unknown outcome (3.050-3.100)"
    )
    # a commit answered before the new owner's assignment is no work in the window
    before = {"ev": "commit", "m": "0.0", "offsets": {"1": 2}, "t0": 1.6, "ok": True, "t": 2.9}
    assert check("before", before).ok
    # one window counts once, however much work it had
    twice = check("twice", batch, sent, late)
    assert (twice.counts["owners"], twice.zombie_windows) == (1, 0)
    # a member that never owned the partition, processing it while another owns it
    stray = {"ev": "batch", "m": "2.0", "recs": {"1": [1]}, "t": 3.3}
    found = check("stray", {"ev": "assigned", "m": "2.0", "parts": [0], "t": 3.2}, stray)
    assert found.counts["owners"] == 2  # while 1.0 owned it, and while 0.0 still did
    assert "2.0 (had not owned it) processed p1@1-1 at 3.300" in found.examples["owners"][0]
    # the new owner at work in the window is the owner: 1.0's batch and commit above


def test_member_program_commits_each_batch_and_stops_at_the_end() -> None:
    from kafkastate.structs import TopicPartition  # noqa: PLC0415

    tp = TopicPartition("in", 0)
    lines: list[str] = []

    class _Lines:
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

    log = GroupLog(_Lines())  # type: ignore[arg-type]
    progress = GroupProgress(ends=prefill_ends(4, 2))
    assert progress.ends == {0: 2, 1: 2}
    progress.committed[1] = 2
    commits: list[Any] = []

    def commit(offsets: Any) -> None:
        commits.append(offsets)
        if len(commits) == 1:
            raise KafkaTimeoutError("commit timed out")

    batches = iter([{tp: [_Record(0)]}, {}, {tp: [_Record(1)]}])
    ops = {
        "subscribe": lambda topics, listener: listener.on_partitions_assigned({tp}),
        "getmany": lambda **_: next(batches),
        "commit": commit,
        "sleep": lambda seconds: None,
    }
    args = GroupArgs("in", "g", partitions=2, members=1, lifetime=60.0, seed=1)
    run_blocking(member_program(args, "0.0", 60.0, log, progress), ops)
    events = [json.loads(line) for line in lines]
    assert [e["ev"] for e in events] == [
        "assigned",
        "batch",
        "commit",
        "batch",
        "commit",
        "closing",
    ]
    assert [e.get("ok") for e in events if e["ev"] == "commit"] == [False, True]
    assert commits == [{tp: 1}, {tp: 2}]
    assert progress.done()
    assert member_lifetime(args, 0, 0) == member_lifetime(args, 0, 0)
    assert 30.0 <= member_lifetime(args, 0, 1) <= 60.0


def test_a_killed_process_leaves_a_torn_line_and_an_unlogged_attempt(tmp_path: Path) -> None:
    first = ATTEMPTS_PER_INCARNATION  # incarnation 1's attempts count from here
    log = tmp_path / "txn"
    log.write_text(
        json.dumps({"attempt": 1, "offsets": {"0": [0]}, "outcome": "committed"})
        + "\n"
        + '{"attempt": 2, "offs'  # SIGKILL while the line was written
    )
    mark_killed(log, 10.0)
    with open(log, "a") as handle:
        handle.write(
            json.dumps({"attempt": first + 1, "offsets": {"0": [3]}, "outcome": "committed"})
        )
        handle.write("\n")
    lines = log.read_text().splitlines()
    assert lines[1] == '{"attempt": 2, "offs' and json.loads(lines[2])["ev"] == "killed"
    # attempt 2 committed inputs 1-2, then the kill cut its log line; 3 is the restart's
    out = [
        (0, i, None, output_value(0, src, att))
        for i, (src, att) in enumerate([(0, 1), (1, 2), (2, 2), (3, first + 1)])
    ]
    result = check_txn("o", out, [], input_ends={0: 4}, committed={0: 4}, txn_logs=[log])
    assert result.ok, result.examples
    assert (result.acked, result.failed) == (2, 1)  # attempt 2: an unknown outcome

    # without a kill, an unlogged attempt is a violation; a torn line mid-file an error
    clean = _acks(
        tmp_path / "clean", [{"attempt": 1, "offsets": {"0": [0]}, "outcome": "committed"}]
    )
    unlogged = check_txn("o", out[:2], [], input_ends={0: 2}, committed={0: 2}, txn_logs=[clean])
    assert unlogged.counts["lost"] == 1
    (tmp_path / "mid").write_text('{"attempt": 1\n{"attempt": 2}\n')
    with pytest.raises(ValueError, match="not JSON"):
        check_txn("o", [], [], input_ends={}, committed={}, txn_logs=[tmp_path / "mid"])


def test_group_check_ends_a_killed_process_ownership_at_the_kill(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"ev": "assigned", "m": "0.0", "parts": [0, 1], "t": 1.0},
        {"ev": "batch", "m": "0.0", "recs": {"0": [0], "1": [0]}, "t": 1.5},
        {"ev": "killed", "t": 2.0},
        {"ev": "assigned", "m": "r1/0.0", "parts": [0, 1], "t": 15.0},
        {"ev": "batch", "m": "r1/0.0", "recs": {"0": [0, 1], "1": [0]}, "t": 15.5},
        {
            "ev": "commit",
            "m": "r1/0.0",
            "offsets": {"0": 2, "1": 1},
            "t0": 16,
            "ok": True,
            "t": 16.1,
        },
    ]
    result = check_group("in", {0: 2, 1: 1}, {0: 2, 1: 1}, [_acks(tmp_path / "g", rows)])
    assert result.ok, result.examples
    assert (result.read, result.zombie_windows) == (2, 0)  # members: 0.0 and r1/0.0
    # work of the dead process's member after the kill, while r1/0.0 owns the partition
    ghost = [*rows, {"ev": "batch", "m": "0.0", "recs": {"1": [0]}, "t": 15.2}]
    result = check_group("in", {0: 2, 1: 1}, {0: 2, 1: 1}, [_acks(tmp_path / "w", ghost)])
    assert result.counts["owners"] == 1
    assert "0.0 (owned it 1.000-2.000) processed p1@0-0" in result.examples["owners"][0]
    del rows[2]  # without the mark, 0.0 still owned both: two windows, no work in them
    result = check_group("in", {0: 2, 1: 1}, {0: 2, 1: 1}, [_acks(tmp_path / "h", rows)])
    assert result.ok, result.examples
    assert result.zombie_windows == 2
    assert GroupArgs("in", "g", 6, 3, 10.0, 1, incarnation=2).member_name(1, 4) == "r2/1.4"


# -- the transactional program, stepped by hand -----------------------------------------------


def test_txn_program_aborts_on_purpose_and_rewinds_after_an_error(tmp_path: Path) -> None:
    from kafkastate.structs import TopicPartition  # noqa: PLC0415

    tp = TopicPartition("in", 0)
    state = {"position": 0, "committed": None, "commits": 0}
    calls: list[str] = []
    sent: list[bytes] = []

    def getmany(**_: Any) -> dict[Any, list[_Record]]:
        start = state["position"]
        assert isinstance(start, int)
        state["position"] = min(start + 2, 6)
        return {tp: [_Record(o) for o in range(start, min(start + 2, 6))]}

    def commit() -> None:
        state["commits"] = int(state["commits"] or 0) + 1
        if state["commits"] == 2:
            raise KafkaTimeoutError("commit timed out")  # unknown outcome: not committed
        state["committed"] = pending["offsets"]

    pending: dict[str, Any] = {}

    def offsets(following: dict[Any, int], group: str) -> None:
        pending["offsets"] = following[tp]

    def seek(_tp: Any, offset: int) -> None:
        state["position"] = offset

    ops = {
        "assign": lambda tps: None,
        "end_offsets": lambda tps: {tp: 6},
        "committed": lambda _tp: state["committed"],
        "seek": seek,
        "getmany": getmany,
        "sleep": lambda s: None,
        "begin_transaction": lambda: calls.append("begin"),
        "send": lambda topic, value, partition: sent.append(value),
        "send_offsets_to_transaction": offsets,
        "commit_transaction": commit,
        "abort_transaction": lambda: calls.append("abort"),
        "open": lambda: calls.append("open"),
        "close": lambda: None,
    }
    args = TxnArgs("in", "out", "g", partitions=1, batch=2, abort_every=3, duration=0.0)
    with open(tmp_path / "log", "w") as handle:
        run_blocking(txn_program(args, handle), ops)
    outcomes = [
        (e["attempt"], e["outcome"], e["offsets"]["0"])
        for e in map(json.loads, (tmp_path / "log").read_text().splitlines())
    ]
    assert outcomes == [
        (1, "committed", [0, 1]),
        (2, "unknown", [2, 3]),  # the failed commit: aborted, back to committed offset 2
        (3, "aborted", [2, 3]),  # on purpose: back to the batch's first offset
        (4, "committed", [2, 3]),
        (5, "committed", [4, 5]),
    ]
    assert state["committed"] == 6
    assert calls.count("abort") == 2
    assert calls.count("open") == 1  # a transaction's failure is no reason for new clients


def test_txn_program_handles_each_error_by_its_kind(tmp_path: Path) -> None:
    from kafkastate.errors import (  # noqa: PLC0415
        NoBrokersAvailable,
        ProducerFencedError,
        TransactionFailedError,
    )
    from kafkastate.structs import TopicPartition  # noqa: PLC0415

    tp = TopicPartition("in", 0)
    state: dict[str, Any] = {"position": 0, "committed": None, "pending": None}
    calls: list[str] = []
    # the errors to raise, by op, in turn (None: succeed)
    script: dict[str, list[Exception | None]] = {
        "open": [NoBrokersAvailable("no broker at the start")],
        "send_offsets_to_transaction": [None, ProducerFencedError("another producer")],
        "commit_transaction": [None, TransactionFailedError("a record failed")],
        "committed": [None, None, KafkaTimeoutError("committed() timed out")],
    }

    def step(name: str, then: Any = None) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            if script.get(name):
                error = script[name].pop(0)
                if error is not None:
                    raise error
            return then(*args, **kwargs) if then is not None else None

        return call

    def getmany(**_: Any) -> dict[Any, list[_Record]]:
        start = state["position"]
        state["position"] = min(start + 2, 6)
        return {tp: [_Record(o) for o in range(start, min(start + 2, 6))]}

    def seek(_tp: Any, offset: int) -> None:
        state["position"] = offset

    def commit() -> None:
        state["committed"] = state["pending"]

    ops = {
        "open": step("open"),
        "close": step("close"),
        "assign": lambda tps: None,
        "end_offsets": lambda tps: {tp: 6},
        "committed": step("committed", lambda _tp: state["committed"]),
        "seek": seek,
        "getmany": getmany,
        "sleep": lambda s: None,
        "begin_transaction": step("begin"),
        "send": lambda topic, value, partition: None,
        "send_offsets_to_transaction": step(
            "send_offsets_to_transaction",
            lambda following, group: state.update(pending=following[tp]),
        ),
        "commit_transaction": step("commit_transaction", commit),
        "abort_transaction": step("abort"),
    }
    args = TxnArgs("in", "out", "g", partitions=1, batch=2, abort_every=99, duration=0.0)
    with open(tmp_path / "log", "w") as handle:
        run_blocking(txn_program(args, handle), ops)
    entries = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    recoveries = [e["what"] for e in entries if e.get("ev") == "recovery"]
    assert recoveries == ["retry_start", "replace_producer", "retry_rewind"]
    outcomes = [(e["outcome"], e["offsets"]["0"]) for e in entries if "attempt" in e]
    assert outcomes == [
        ("committed", [0, 1]),
        ("unknown", [2, 3]),  # fenced: new producer and consumer, back to offset 2
        ("unknown", [2, 3]),  # the transaction failed: aborted, back to 2 (a retried rewind)
        ("committed", [2, 3]),
        ("committed", [4, 5]),
    ]
    assert state["committed"] == 6
    assert calls.count("open") == 3  # failed at the start, opened, replaced after the fence
    assert calls.count("abort") == 1  # a fenced producer is not asked to abort
    assert next(e for e in entries if e.get("attempt") == 2)["error"].startswith(
        "ProducerFencedError"
    )


# -- the transactional workload against a real broker: fenced mid-run -------------------------


@pytest.mark.integration
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_txn_workload_replaces_its_fenced_producer_and_processes_everything_once(
    kafka_cluster: Any, tmp_path: Path, runtime: str
) -> None:
    """Another producer with the workload's transactional.id starts mid-run, while a
    transaction is open: a real fence. The workload's producer fails fatally; the workload
    closes it, opens a new one with the same id, rewinds to the committed offsets and still
    transforms every input record exactly once (judged with confluent-kafka)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415
    import uuid  # noqa: PLC0415

    from kafkastate.adapters.blocking import BlockingAdmin, NewTopic  # noqa: PLC0415
    from kafkastate.structs import TopicPartition  # noqa: PLC0415
    from kafkastate.sync import KafkaConsumer, KafkaProducer  # noqa: PLC0415
    from kafkastate.testing.chaos._checker import committed_offsets, read_topics  # noqa: PLC0415

    pytest.importorskip("confluent_kafka", reason="the checker reads with confluent-kafka")
    if runtime == "trio":
        pytest.importorskip("trio")
    bootstrap, partitions, records = kafka_cluster.bootstrap, 3, 600
    name = f"txn-fence-{runtime}-{uuid.uuid4().hex[:8]}"
    source, sink, log = f"{name}-in", f"{name}-out", tmp_path / "txn.jsonl"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=t, num_partitions=partitions) for t in (source, sink)])
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(records):
            producer.send(source, f"in{i}".encode(), partition=i % partitions)
        producer.flush()
    argv = [
        *(sys.executable, "-m", "kafkastate.testing.chaos._workload", "txn"),
        *("--runtime", runtime, "--bootstrap", bootstrap, "--input", source, "--output", sink),
        *("--group", name, "--transactional-id", name, "--partitions", str(partitions)),
        *("--batch", "20", "--duration", "12", "--log", str(log)),
    ]
    sinks = [TopicPartition(sink, p) for p in range(partitions)]
    stable = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    high = KafkaConsumer(bootstrap_servers=bootstrap)
    workload = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # a few transactions committed, then one open with records written (the fence
        # aborts it; the workload's next request of it is refused)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and workload.poll() is None:
            committed = sum(stable.end_offsets(sinks).values())
            if committed >= 3 * 20 and committed < sum(high.end_offsets(sinks).values()):
                break
            time.sleep(0.02)
        assert workload.poll() is None, "the workload finished before it could be fenced"
        with KafkaProducer(bootstrap_servers=bootstrap, transactional_id=name) as intruder:
            intruder.init_transactions()  # bumps the epoch: the workload's producer is fenced
        output, _ = workload.communicate(timeout=120)
    finally:
        stable.close()
        high.close()
        if workload.poll() is None:
            workload.kill()
            workload.communicate()
    assert workload.returncode == 0, output
    read = read_topics(bootstrap, [sink])[sink]
    result = check_txn(
        sink,
        *read,
        input_ends={p: records // partitions for p in range(partitions)},
        committed=committed_offsets(bootstrap, name, source, partitions),
        txn_logs=[log],
    )
    assert result.ok, (result.counts, dict(result.examples))
    assert result.acked == records and result.read == records
    assert result.recoveries["replace_producer"] >= 1, (result.recoveries, log.read_text())


# -- the short run ----------------------------------------------------------------------------


def _short_run_seed() -> int:
    explicit = os.environ.get("KAFKASTATE_CHAOS_SEED")
    if explicit:
        return int(explicit)
    return datetime.date.today().toordinal()


@pytest.mark.integration
def test_short_chaos_run(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka", reason="the checker reads with confluent-kafka")
    pytest.importorskip("trio")
    seed = _short_run_seed()
    runtime = RUNTIMES[seed % len(RUNTIMES)]
    # a client kill every time, with three of the broker and network kinds (rotating by seed)
    others = [kind for kind in FAULT_KINDS if kind != "client_kill"]
    kinds = ("client_kill", *random.Random(seed).sample(others, 3))
    options = ChaosOptions(
        seed=seed,
        records=10_000,
        keys=200,
        duration=40.0,
        faults=4,
        txn_records=2_000,
        group_records=3_000,
        runtimes=(runtime,),
        out=tmp_path / "chaos",
        kinds=kinds,
    )
    try:
        report = run_chaos(options)
    except PrerequisiteError as exc:
        unavailable(exc)
    details = [
        f"{r.topic} {check}: {ex}"
        for r in report.results
        for check, exs in r.examples.items()
        for ex in exs
    ]
    assert report.ok, "\n".join(
        [
            report.table(),
            *report.fault_errors,
            *report.workload_errors,
            *details,
            report.reproducer(),
        ]
    )
    assert len(report.timeline) == options.faults
    assert report.faults_by_kind()["client_kill"] == 1
    killed = next(row for row in report.timeline if row["kind"] == "client_kill")
    assert "SIGKILL" in str(killed["detail"]), killed
    assert {r.topic for r in report.results} == {
        f"chaos-produce-{runtime}",
        f"chaos-txn-out-{runtime}",
        f"chaos-group-in-{runtime}",
    }
    produced = next(r for r in report.results if r.topic.startswith("chaos-produce"))
    assert produced.acked + produced.failed == options.records
    assert produced.acked > 0


def test_txn_program_keeps_its_pace_inside_the_open_transaction(tmp_path: Path) -> None:
    import time  # noqa: PLC0415

    from kafkastate.structs import TopicPartition  # noqa: PLC0415

    tp = TopicPartition("in", 0)
    calls: list[str] = []
    batches = iter([[0, 1], [2, 3]])
    ops = {
        "assign": lambda tps: None,
        "end_offsets": lambda tps: {tp: 4},
        "committed": lambda _tp: None,
        "seek": lambda _tp, offset: None,
        "getmany": lambda **_: {tp: [_Record(o) for o in next(batches)]},
        "sleep": lambda seconds: (calls.append("sleep"), time.sleep(seconds)),
        "begin_transaction": lambda: calls.append("begin"),
        "send": lambda topic, value, partition: None,
        "send_offsets_to_transaction": lambda offsets, group: calls.append("offsets"),
        "commit_transaction": lambda: calls.append("commit"),
        "abort_transaction": lambda: calls.append("abort"),
        "open": lambda: None,
        "close": lambda: None,
    }
    args = TxnArgs("in", "out", "g", partitions=1, batch=2, abort_every=9, duration=0.4)
    started = time.monotonic()
    with open(tmp_path / "log", "w") as handle:
        run_blocking(txn_program(args, handle), ops)
    assert time.monotonic() - started >= 0.35  # paced over the duration
    first = calls[: calls.index("commit") + 1]
    assert first[:2] == ["begin", "offsets"] and set(first[2:-1]) == {"sleep"}  # open
    assert calls.count("commit") == 2 and calls[calls.index("commit") + 1] == "begin"


def test_fenced_records_are_the_unlogged_attempts_only_read_uncommitted_sees(
    tmp_path: Path,
) -> None:
    from kafkastate.testing.chaos._checker import fenced_records  # noqa: PLC0415

    log = _acks(
        tmp_path / "txn",
        [
            {"attempt": 1, "offsets": {"0": [0]}, "outcome": "committed"},
            {"attempt": 2, "offsets": {"0": [1]}, "outcome": "aborted"},
        ],
    )
    committed = [(0, 0, None, output_value(0, 0, 1))]
    uncommitted = [
        *committed,
        (0, 1, None, output_value(0, 1, 2)),  # aborted on purpose: logged
        (0, 3, None, output_value(0, 1, 3)),  # attempt 3: open when the process was killed
        (0, 4, None, output_value(0, 2, 3)),
        (0, 5, None, b"not an output value"),
    ]
    assert fenced_records(committed, uncommitted, [log]) == 2
