"""The simulator's user API (kafkastate.sim.api, the ``kafka_sim`` fixture): an application's
own listener and processing run in the simulation; a bug planted in them is found, reported
with its seed, and replayed event for event."""

from __future__ import annotations

from typing import Any

import pytest

from kafkastate.sim.api import DEFAULT_SEEDS, KafkaSim, SimFailed
from kafkastate.structs import TopicPartition

store: dict[int, str] = {}  # partition -> the member the application thinks works on it
sink: dict[int, int] = {}  # partition -> the next offset the application expects to process


class Claims:
    """Claims a partition when assigned, releases it when revoked -- releasing the new
    owner's claim too when a member learns late that it lost the partition (the bug)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            store[tp.partition] = self.name

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        for tp in revoked:
            store.pop(tp.partition, None)


class CarefulClaims(Claims):
    """The fix: release only your own claim."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        for tp in revoked:
            if store.get(tp.partition) == self.name:
                del store[tp.partition]


def store_agrees(sim: Any) -> None:
    for name, owned in sim.live_owners().items():
        for _topic, partition in owned:
            assert store.get(partition) == name, (
                f"{name} owns partition {partition}, the store says {store.get(partition)}"
            )


def test_a_listener_bug_is_found_and_replayed(kafka_sim: KafkaSim) -> None:
    failure = kafka_sim.sweep(
        app=Claims, check=store_agrees, reset=store.clear, seeds=range(5), faults=("pause",)
    )
    assert failure is not None
    assert failure.invariant == "USER"
    assert "the store says" in failure.message
    assert failure.overrides == {"faults": ("pause",)}
    again = kafka_sim.replay(failure, app=Claims, check=store_agrees, reset=store.clear)
    assert again.trace_hash == failure.trace_hash
    assert again.message == failure.message
    with pytest.raises(SimFailed) as raised:
        kafka_sim.check(
            app=Claims, check=store_agrees, reset=store.clear, seeds=[failure.seed],
            faults=("pause",),
        )  # fmt: skip
    text = str(raised.value)
    assert f"seed {failure.seed} failed: USER" in text
    assert f"--kafka-sim-seed {failure.seed}" in text
    assert "last events:" in text


def test_the_fixed_listener_passes_the_same_seeds(kafka_sim: KafkaSim) -> None:
    kafka_sim.check(
        app=CarefulClaims, check=store_agrees, reset=store.clear, seeds=range(2),
        faults=("pause",),
    )  # fmt: skip
    with pytest.raises(AssertionError, match="passes now"):
        failure = KafkaSim(faults=("pause",)).sweep(
            app=Claims, check=store_agrees, reset=store.clear, seeds=range(5)
        )
        assert failure is not None
        kafka_sim.replay(failure, app=CarefulClaims, check=store_agrees, reset=store.clear)


class Processor:
    """Processes each batch; its own rule: no record of a partition is ever skipped
    (at-least-once: repeats are fine, gaps are not)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def process(self, tp: TopicPartition, records: list[Any]) -> None:
        expected = sink.get(tp.partition, 0)
        assert records[0].offset <= expected, (
            f"{self.name} skipped {tp.partition}@{expected}..{records[0].offset - 1}"
        )
        sink[tp.partition] = max(expected, records[-1].offset + 1)


class ExplodingProcessor(Processor):
    """Fails on a poison record (the bug: no handling for it)."""

    def process(self, tp: TopicPartition, records: list[Any]) -> None:
        if any(r.value == b"1:7" for r in records):
            raise ValueError("cannot parse record")
        super().process(tp, records)


def test_the_application_processes_every_record_once_at_least(kafka_sim: KafkaSim) -> None:
    sim = kafka_sim.run(0, app=Processor, reset=sink.clear, faults=("pause", "crash_member"))
    assert sink == {p: max(offsets) + 1 for (_t, p), offsets in sim.consumed.items()}


def test_an_exception_in_processing_fails_the_run_as_app(kafka_sim: KafkaSim) -> None:
    failure = kafka_sim.sweep(app=ExplodingProcessor, reset=sink.clear, seeds=[0])
    assert failure is not None and failure.invariant == "APP"
    assert "ValueError('cannot parse record')" in failure.message


def test_the_fixture_sweeps_the_default_seeds(kafka_sim: KafkaSim) -> None:
    assert kafka_sim.seeds == tuple(range(DEFAULT_SEEDS))  # no --kafka-sim-seed(s) given
    with pytest.raises(TypeError, match="not SimConfig fields: fault"):
        KafkaSim(fault=("pause",))
