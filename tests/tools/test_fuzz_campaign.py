"""The fuzz campaign adds up across runs: the ledger's sums (tests/_support/campaign.py),
resume, streams and replay in the loop (tests/_support/fuzzing.py), the loop's bounds, and
the table tools/gen_fuzz_table.py draws from the report."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests._support import campaign, fuzzing
from tools import gen_fuzz_table

ROOT = Path(__file__).resolve().parents[2]


def line(decoder: str, stream: int | None, inputs: int, **extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "decoder": decoder,
        "definition": "d1",
        "inputs": inputs,
        "seconds": inputs / 1000,
        "cpu_seconds": inputs / 2000,
        "ok": inputs // 4,
        "errors": {"RemoteProtocolError": inputs - inputs // 4},
        "distinct_outcomes": 3,
        "rss_growth": 0,
        "failure": None,
        "date": "2026-11-26",
        "machine": "x86_64, 2 cores, CPython 3.11.7",
    }
    if stream is not None:
        run["stream"] = stream
    return run | extra


# ------------------------------------------------------------------ the ledger


def test_distinct_streams_add_up_and_a_replayed_stream_counts_once() -> None:
    runs = [
        line("assignment", None, 100_000),  # the legacy stream 0
        line("assignment", 7, 300_000),
        line("assignment", 7, 120_000),  # a replay of stream 7's first inputs
        line("assignment", 9, 50_000, failure="interrupted"),  # the deadline: 50,000 count
    ]
    got = campaign.tally(runs)
    assert got.inputs == 450_000
    assert got.streams == {0: 100_000, 7: 300_000, 9: 50_000}
    assert got.runs == 3
    assert got.ok == 25_000 + 75_000 + 12_500
    assert got.error_total == 450_000 - got.ok
    assert got.cpu_seconds == pytest.approx(225.0)
    assert not got.failing


def test_only_the_current_definition_counts_and_a_failed_latest_run_is_failing() -> None:
    runs = [
        line("sticky", 1, 900_000, definition="old"),
        line("sticky", 2, 10_000),
        line("sticky", 3, 40, failure="input 40 of stream 3: AssertionError: IndexError"),
    ]
    mine = campaign.current(runs)
    assert [r["stream"] for r in mine] == [2, 3]
    got = campaign.tally(mine)
    assert (got.inputs, got.failing) == (10_040, True)
    assert campaign.tally(campaign.current([*runs, line("sticky", 3, 500)])).failing is False


def test_plan_resumes_with_what_is_missing_on_a_fresh_stream() -> None:
    runs = [line("x", 0, 100_000), line("x", 5, 250_000), line("x", 6, 1, definition="old")]
    draw = random.Random(1)
    got = campaign.plan(runs, definition="d1", target=1_000_000, resume=True, draw=draw)
    assert got.count == 650_000
    assert got.done == 350_000
    assert got.stream not in (0, 5, 6)
    full = campaign.plan(runs, definition="d1", target=1_000_000, resume=False, draw=draw)
    assert full.count == 1_000_000
    new_definition = campaign.plan(runs, definition="d2", target=10, resume=True, draw=draw)
    assert new_definition.count == 10


def test_plan_of_a_complete_loop_runs_nothing() -> None:
    runs = [line("x", 3, 600_000), line("x", 4, 600_000)]
    got = campaign.plan(runs, definition="d1", target=1_000_000, resume=True, draw=random.Random())
    assert got.count == 0


def test_plan_after_a_crasher_replays_its_stream_first() -> None:
    runs = [line("x", 3, 200_000), line("x", 4, 70, failure="input 70 of stream 4: ...")]
    got = campaign.plan(runs, definition="d1", target=1_000_000, resume=True, draw=random.Random())
    assert (got.stream, got.count) == (4, 800_000)


def test_fresh_streams_avoid_the_used_ones() -> None:
    class Stuck(random.Random):
        def __init__(self) -> None:
            super().__init__()
            self.values = iter([0, 5, 5, 11])

        def getrandbits(self, k: int, /) -> int:
            return next(self.values)

    assert campaign.fresh_stream([5], Stuck()) == 11


# ------------------------------------------------------------------ the loop


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "campaign.jsonl"
    monkeypatch.setenv("KAFKASTATE_FUZZ_REPORT", str(path))
    monkeypatch.delenv("KAFKASTATE_FUZZ_RESUME", raising=False)
    monkeypatch.delenv("KAFKASTATE_FUZZ_STREAM", raising=False)
    yield path


def lines_of(path: Path) -> list[dict[str, Any]]:
    return campaign.read(path)


SEEDS = [b"\x00\x01\x02\x03abcdef", b"\xff" * 9]


class Recorder:
    def __init__(self, fail_at: bytes | None = None) -> None:
        self.seen: list[bytes] = []
        self.fail_at = fail_at

    def __call__(self, data: bytes) -> None:
        self.seen.append(data)
        if data == self.fail_at:
            raise IndexError("planted")


def test_resume_runs_only_the_missing_inputs_each_on_a_new_stream(
    report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKASTATE_FUZZ_RESUME", "1")
    first, second, third = Recorder(), Recorder(), Recorder()
    assert fuzzing.run_mutations(first, SEEDS, count=100, seed="t") == 100
    fuzzing.run_mutations(first, SEEDS, count=100, seed="other")  # another loop: its own
    assert fuzzing.run_mutations(second, SEEDS, count=250, seed="t") == 150
    assert fuzzing.run_mutations(third, SEEDS, count=250, seed="t") == 0
    runs = [r for r in lines_of(report) if r["decoder"] == "t"]
    assert [r["inputs"] for r in runs] == [100, 150]
    assert len({r["stream"] for r in runs}) == 2 and 0 not in {r["stream"] for r in runs}
    assert {r["definition"] for r in runs} == {fuzzing.definition(SEEDS, fuzzing.derive)}
    assert [r["target"] for r in runs] == [100, 250]
    # two streams, two sequences of inputs (tiny seeds: a few short inputs recur)
    assert sum(a == b for a, b in zip(first.seen, second.seen, strict=False)) < 20
    assert third.seen == []


def test_an_interrupted_run_counts_what_it_did(
    report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = iter(range(10**9))

    def stopped(data: bytes) -> None:
        if next(calls) == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fuzzing.run_mutations(stopped, SEEDS, count=1000, seed="t")
    (run,) = lines_of(report)
    assert (run["inputs"], run["failure"]) == (30, "interrupted")
    monkeypatch.setenv("KAFKASTATE_FUZZ_RESUME", "1")
    assert fuzzing.run_mutations(Recorder(), SEEDS, count=1000, seed="t") == 970


def test_sigint_stops_a_campaign_started_with_sigint_ignored(report: Path) -> None:
    # A background job of a non-interactive shell starts with SIGINT ignored: the loop
    # must still stop on ``kill -INT`` and write the line that counts what it did.
    script = (
        "import sys\n"
        "from tests._support import fuzzing\n"
        "print('running', flush=True)\n"
        "fuzzing.run_mutations(lambda data: None, [b'abcdefgh'], count=10**9, seed='sig')\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "running\n"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the loop runs (its report path exists)
            time.sleep(0.2)
            if child.poll() is not None:
                break
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=1)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        if child.poll() is None:
            child.kill()
    _, err = child.communicate(timeout=30)
    assert child.returncode != -signal.SIGKILL, "SIGINT did not stop the loop"
    assert "KeyboardInterrupt" in err, err[-2000:]
    (run,) = lines_of(report)
    assert run["failure"] == "interrupted" and run["inputs"] > 0


def test_a_crasher_names_stream_and_index_and_replays_from_them(
    report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Recorder()
    fuzzing.run_mutations(probe, SEEDS, count=50, seed="probe")
    stream = lines_of(report)[0]["stream"]
    planted = probe.seen[17]
    monkeypatch.setenv("KAFKASTATE_FUZZ_STREAM", str(stream))
    with pytest.raises(AssertionError, match="IndexError on input"):
        fuzzing.run_mutations(Recorder(fail_at=planted), SEEDS, count=50, seed="probe")
    failed = lines_of(report)[-1]
    assert failed["failure"].startswith(f"input 17 of stream {stream}: AssertionError")
    # resuming after the fix replays the crasher's stream from its first input, then passes
    monkeypatch.delenv("KAFKASTATE_FUZZ_STREAM")
    monkeypatch.setenv("KAFKASTATE_FUZZ_RESUME", "1")
    fixed = Recorder()
    assert fuzzing.run_mutations(fixed, SEEDS, count=60, seed="probe") == 60
    assert fixed.seen[:50] == probe.seen
    assert lines_of(report)[-1]["stream"] == stream
    got = campaign.tally(campaign.current(campaign.by_loop(lines_of(report))["probe"]))
    assert (got.inputs, got.failing) == (60, False)
    assert fuzzing.run_mutations(Recorder(), SEEDS, count=70, seed="probe") == 10


def test_without_a_report_the_loop_draws_the_legacy_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default suite stays deterministic: stream 0, seeded by the decoder's name."""
    monkeypatch.delenv("KAFKASTATE_FUZZ_REPORT", raising=False)
    monkeypatch.delenv("KAFKASTATE_FUZZ_STREAM", raising=False)
    a, b = Recorder(), Recorder()
    fuzzing.run_mutations(a, SEEDS, count=40, seed="legacy")
    rng = random.Random("legacy")
    assert a.seen == [fuzzing.derive(SEEDS[i % 2], rng, SEEDS) for i in range(40)]
    fuzzing.run_mutations(b, SEEDS, count=40, seed="legacy")
    assert a.seen == b.seen


def unchanged(data: bytes, rng: random.Random, seeds: Sequence[bytes]) -> bytes:
    return data


def test_the_definition_follows_seeds_and_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    base = fuzzing.definition(SEEDS, fuzzing.derive)
    assert fuzzing.definition(list(SEEDS), fuzzing.derive) == base
    assert fuzzing.definition(SEEDS[:1], fuzzing.derive) != base
    assert fuzzing.definition([SEEDS[0] + SEEDS[1]], fuzzing.derive) != base
    assert fuzzing.definition(SEEDS, unchanged) != base
    monkeypatch.setattr(fuzzing, "GENERATOR", fuzzing.GENERATOR + 1)
    assert fuzzing.definition(SEEDS, fuzzing.derive) != base


def test_the_loop_fails_an_input_past_its_cpu_bound(
    report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fuzzing, "PER_INPUT_SECONDS", 0.3)
    calls = iter(range(10**9))

    def hangs_on_the_fourth(data: bytes) -> None:
        if next(calls) == 3:
            while True:
                pass

    with pytest.raises(AssertionError, match="InputTimeout"):
        fuzzing.run_mutations(hangs_on_the_fourth, SEEDS, count=10, seed="hang")
    (run,) = lines_of(report)
    assert run["failure"].startswith(f"input 3 of stream {run['stream']}:")
    assert 0.3 <= run["cpu_seconds"] < 0.3 + 2 * fuzzing.WATCHDOG_TICK + 0.2


def test_the_loop_fails_a_window_that_grew_the_peak_rss(
    report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fuzzing, "RSS_GROWTH_LIMIT", 16 * 2**20)
    with open("/proc/self/statm", encoding="ascii") as statm:
        resident = int(statm.read().split()[1]) * 4096
    # past the process's own peak so far, whatever earlier tests allocated
    size = max(0, fuzzing._peak_rss() - resident) + 64 * 2**20
    calls = iter(range(10**9))

    def grows_on_input_70(data: bytes) -> None:
        if next(calls) == 70:
            b"x" * size

    with pytest.raises(AssertionError, match=r"peak RSS grew by \d+ bytes within inputs 64\.\.127"):
        fuzzing.run_mutations(grows_on_input_70, SEEDS, count=500, seed="rss")
    (run,) = lines_of(report)
    assert run["inputs"] == 128


# ------------------------------------------------------------------ the table


def jsonl(*runs: dict[str, Any]) -> list[str]:
    return [json.dumps(run) for run in runs]


def test_the_table_sums_every_run_and_says_what_is_left() -> None:
    lines = jsonl(
        line("sticky", 0, 400_000),
        line("sticky", 11, 600_000),
        line("assignment", 12, 300_000),
        line("assignment", 13, 100_000, failure="interrupted"),
        line("subscription", 14, 99, failure="input 99 of stream 14: AssertionError: ..."),
    )
    groups = gen_fuzz_table.rows(lines, target=1_000_000)
    by_name = {r.name: r for g in groups.values() for r in g}
    sticky, assignment, subscription = (
        by_name[n] for n in ("sticky", "assignment", "subscription")
    )
    assert (sticky.inputs, sticky.to_go, sticky.result()) == (1_000_000, 0, "pass")
    assert (assignment.inputs, assignment.to_go, assignment.result()) == (
        400_000,
        600_000,
        "pass so far",
    )
    assert subscription.result() == "**crasher, not yet fixed**"
    assert subscription.crashers == 1
    assert by_name["header-v0"].result() == "not run"
    text = gen_fuzz_table.table(lines)
    assert "| sticky | 1,000,000 | 0 | 2 | 2,000 |" in text
    assert re.search(r"Total: 1,400,099 inputs over 3 of \d+ decoders; 1 decoders reached", text)


def test_a_response_row_sums_its_versions_against_their_shares() -> None:
    versions = gen_fuzz_table.expected()["response-Heartbeat"]
    share = campaign.share(1_000_000, len(versions))
    lines = jsonl(*(line(name, 3, share) for name in versions[:-1]))
    row = next(
        r for g in gen_fuzz_table.rows(lines).values() for r in g if r.name == "response-Heartbeat"
    )
    assert row.inputs == share * (len(versions) - 1)
    assert row.to_go == share
    assert row.result() == "pass so far"


def test_lines_of_an_earlier_definition_are_listed_not_counted() -> None:
    lines = jsonl(line("sticky", 1, 5_000, definition="old"), line("sticky", 2, 7_000))
    text = gen_fuzz_table.table(lines)
    assert "| sticky | 7,000 |" in text
    assert "earlier definition of the loop: sticky (5,000)" in text


def test_cpu_hours_left_use_the_measured_rates() -> None:
    lines = jsonl(line("sticky", 1, 500_000))  # 2,000 inputs per CPU second
    groups = gen_fuzz_table.rows(lines)
    sticky = next(r for r in groups["Group protocol"] if r.name == "sticky")
    assert sticky.rate() == pytest.approx(2000)
    # the group protocol's 4 other decoders at the group's median rate (sticky's)
    group = {"Group protocol": groups["Group protocol"]}
    assert gen_fuzz_table.cpu_hours_to_go(group) == pytest.approx(4.5e6 / 2000 / 3600)


def test_the_table_lists_every_loop_of_the_fuzz_tests() -> None:
    """Each ``seed=`` of a run_mutations call is a loop of some row, and each row's loop
    is one of them (a literal name or an f-string's shape)."""
    literal: set[str] = set()
    shapes: list[re.Pattern[str]] = []
    for path in (ROOT / "tests" / "core").rglob("test_*_fuzz.py"):
        text = path.read_text(encoding="utf-8")
        literal |= set(re.findall(r'seed="([^"]+)"', text)) - {"blow-up"}  # a harness test
        for template in re.findall(r'seed=f"([^"]+)"', text):
            parts = re.split(r"\{[^}]*\}", template)
            shapes.append(re.compile(".+".join(re.escape(p) for p in parts)))
    loops = {loop for names in gen_fuzz_table.expected().values() for loop in names}
    assert literal <= loops
    assert {loop for loop in loops if not any(s.fullmatch(loop) for s in shapes)} == literal
    for shape in shapes:
        assert any(shape.fullmatch(loop) for loop in loops), shape.pattern
