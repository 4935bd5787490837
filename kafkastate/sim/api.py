"""Your application's code in the simulation, over many seeds: :class:`KafkaSim`.

Theory of operation
-------------------
A *seed* picks a whole run of the group world (:class:`~kafkastate.sim.world.Sim`): brokers,
partitions, members, assignor, timeouts and which faults strike when. Your application
enters it as a factory ``app(member_name)`` called each time a member starts (again after a
crash); the object it returns is that member's application:

* ``on_partitions_assigned(partitions)``, ``on_partitions_revoked(partitions)`` and
  optionally ``on_partitions_lost(partitions)`` -- your rebalance listener, run when the
  member's consumer machine asks for it (sets of ``TopicPartition``);
* optionally ``process(partition, records)`` -- your processing of each polled batch
  (records with ``offset``, ``key``, ``value``, ``timestamp``, ``headers``); the member
  commits what it processed after each batch, as an at-least-once loop does.

Your *asyncio* code enters as ``member=``: ``async def member(m)`` (a
:class:`~kafkastate.sim.aio.SimMember`), run once per member on a virtual-time event loop
over the simulated network (:mod:`kafkastate.sim.aio`); it builds its own
``AIOKafkaConsumer`` (or ``open_consumer``) with ``m.consumer_options()`` and runs its
processing loop, listener and commits until ``m.running`` turns False.

``check(sim)`` is your invariant, called after every event; ``final(sim)`` at the end of the
run; an AssertionError (there, or in ``process``, or raised by a member) fails the run as
invariant ``USER``, any other exception from ``process`` or a member as ``APP``, from the
listener as ``LISTENER``; the simulator's own invariants (G3, C1...) are checked too.
``reset()`` runs before each seed: clear the state your application keeps outside the
objects (a store, a dict).

:meth:`KafkaSim.sweep` runs seed after seed and returns the first failure as a
:class:`SimFailure`; :meth:`KafkaSim.replay` runs it again, event for event (same seed, same
options, same code: the same trace hash); :meth:`KafkaSim.check` raises :class:`SimFailed`,
an AssertionError whose message names the seed and how to replay it -- what a test wants;
:meth:`SimFailure.save` writes it to a file :meth:`SimFailure.load` reads back for
:meth:`KafkaSim.replay`. The pytest plugin's ``kafka_sim`` fixture is a :class:`KafkaSim`
whose seeds come from ``--kafka-sim-seeds N`` (default 20) or ``--kafka-sim-seed S`` (replay
one).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from kafkastate.sim.aio import AsyncSim, SimMember, async_config
from kafkastate.sim.entropy import SeededEntropy
from kafkastate.sim.scheduler import InvariantViolation
from kafkastate.sim.world import Sim, SimConfig

__all__ = ["DEFAULT_SEEDS", "KafkaSim", "SimFailed", "SimFailure"]

DEFAULT_SEEDS = 20
"""How many seeds a sweep runs unless told."""

App = Callable[[str], Any]
Member = Callable[[SimMember], Awaitable[None]]
Check = Callable[[Sim], None]


@attrs.frozen
class SimFailure:
    """A failing seed: enough to run it again."""

    seed: int
    """The seed."""
    invariant: str
    """The id of the invariant that failed (``USER`` for yours)."""
    message: str
    """The failure, with the virtual time."""
    overrides: Mapping[str, Any]
    """The :class:`~kafkastate.sim.world.SimConfig` fields the sweep fixed."""
    trace_hash: str
    """The run's trace hash (a replay must give the same)."""
    trace: tuple[str, ...] = attrs.field(repr=False, eq=False)
    """The run's trace, one line per event (the last lines lead to the failure)."""
    backend: str | None = None
    """What ran your member code (``member=``): ``"asyncio"`` or ``"trio"``; None for the
    model application."""

    def save(self, path: str | Path) -> Path:
        """Write the failure to a JSON file (:meth:`load` reads it back).

        Returns:
            The file's path.
        """
        out = Path(path)
        fields = attrs.asdict(self, filter=lambda a, _v: a.name != "trace")
        out.write_text(json.dumps({**fields, "trace": list(self.trace[-50:])}, indent=1) + "\n")
        return out

    @classmethod
    def load(cls, path: str | Path) -> SimFailure:
        """A failure :meth:`save` wrote (its trace: the last 50 lines)."""
        data = json.loads(Path(path).read_text())
        data["overrides"] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data["overrides"].items()
        }
        data["trace"] = tuple(data["trace"])
        return cls(**data)

    def describe(self) -> str:
        """The failure, its last trace lines, and how to replay it."""
        tail = "\n".join(f"    {line}" for line in self.trace[-12:])
        fixed = "".join(f", {k}={v!r}" for k, v in self.overrides.items())
        code = "app" if self.backend is None else "member"
        return (
            f"seed {self.seed} failed: {self.message}\n"
            f"  last events:\n{tail}\n"
            f"  replay: kafka_sim.run({self.seed}, {code}=..., check=...{fixed}) "
            f"or pytest --kafka-sim-seed {self.seed}"
        )


class SimFailed(AssertionError):
    """:meth:`KafkaSim.check` found a failing seed (``failure``)."""

    def __init__(self, failure: SimFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class KafkaSim:
    """Runs your application in simulated consumer groups, seed after seed.

    Args:
        seeds: the seeds a sweep runs (default ``range(20)``).
        overrides: :class:`~kafkastate.sim.world.SimConfig` fields to fix in every run
            instead of drawing them (``faults=("pause",)``, ``members=3``...).
    """

    def __init__(self, *, seeds: Iterable[int] | None = None, **overrides: Any) -> None:
        self.seeds = tuple(range(DEFAULT_SEEDS) if seeds is None else seeds)
        self.overrides = overrides
        _check_fields(overrides)

    def run(
        self,
        seed: int,
        *,
        app: App | None = None,
        member: Member | None = None,
        check: Check | None = None,
        final: Check | None = None,
        reset: Callable[[], None] | None = None,
        backend: str = "asyncio",
        **overrides: Any,
    ) -> Sim:
        """Run one seed to its end.

        Args:
            seed: the run.
            app: your application factory (see the module docstring).
            member: your asyncio member code instead (see the module docstring).
            check: your invariant, after every event.
            final: your invariant, at the end.
            reset: clears your application's outside state first.
            backend: what runs your member code: ``"asyncio"`` or ``"trio"``.
            overrides: more SimConfig fields to fix (over the constructor's).

        Returns:
            The finished run (``trace``, ``consumed``, ``live_owners()``...).

        Raises:
            InvariantViolation: the first invariant that failed.
        """
        code = _Code(app, member, check, final, reset, backend)
        sim = code.sim(seed, {**self.overrides, **overrides})
        code.run(sim)
        return sim

    def sweep(
        self,
        *,
        app: App | None = None,
        member: Member | None = None,
        check: Check | None = None,
        final: Check | None = None,
        reset: Callable[[], None] | None = None,
        seeds: Iterable[int] | None = None,
        backend: str = "asyncio",
        **overrides: Any,
    ) -> SimFailure | None:
        """Run every seed until one fails (arguments as :meth:`run`'s).

        Returns:
            The first failure, or None if every seed passed.
        """
        code = _Code(app, member, check, final, reset, backend)
        fixed = {**self.overrides, **overrides}
        for seed in self.seeds if seeds is None else seeds:
            failure = code.attempt(seed, fixed)
            if failure is not None:
                return failure
        return None

    def check(
        self,
        *,
        app: App | None = None,
        member: Member | None = None,
        check: Check | None = None,
        final: Check | None = None,
        reset: Callable[[], None] | None = None,
        seeds: Iterable[int] | None = None,
        backend: str = "asyncio",
        **overrides: Any,
    ) -> None:
        """:meth:`sweep`, as an assertion.

        Raises:
            SimFailed: a seed failed; the message says which, why, and how to replay it.
        """
        failure = self.sweep(
            app=app, member=member, check=check, final=final, reset=reset, seeds=seeds,
            backend=backend, **overrides,
        )  # fmt: skip
        if failure is not None:
            raise SimFailed(failure)

    def replay(
        self,
        failure: SimFailure,
        *,
        app: App | None = None,
        member: Member | None = None,
        check: Check | None = None,
        final: Check | None = None,
        reset: Callable[[], None] | None = None,
    ) -> SimFailure:
        """Run a failure's seed again with the same options.

        Returns:
            The failure it gave again (its ``trace_hash`` equals the original's when the
            code and the application are the same).

        Raises:
            AssertionError: the seed passes now.
        """
        code = _Code(app, member, check, final, reset, failure.backend or "asyncio")
        again = code.attempt(failure.seed, dict(failure.overrides))
        if again is None:
            raise AssertionError(f"seed {failure.seed} passes now")
        return again


@attrs.frozen
class _Code:
    """The application code of a run: the model application's hooks, or your members."""

    app: App | None
    member: Member | None
    check: Check | None
    final: Check | None
    reset: Callable[[], None] | None
    backend: str

    def sim(self, seed: int, fixed: dict[str, Any]) -> Sim:
        """The run of ``seed`` (``fixed`` SimConfig fields), not started."""
        _check_fields(fixed)
        if self.app is not None and self.member is not None:
            raise TypeError("give app= (the model application's hooks) or member=, not both")
        if self.reset is not None:
            self.reset()
        entropy = SeededEntropy(seed)
        if self.member is not None:
            return AsyncSim(
                entropy,
                async_config(entropy, fixed),
                member=self.member,
                check=self.check,
                final=self.final,
                backend=self.backend,
            )
        config = attrs.evolve(SimConfig.draw(entropy), **fixed)
        return Sim(entropy, config, listener=self.app, check=self.check)

    def run(self, sim: Sim) -> None:
        """Run ``sim`` to its end, ``final`` included."""
        sim.run()
        if self.final is not None and not isinstance(sim, AsyncSim):  # (AsyncSim's own)
            try:
                self.final(sim)
            except AssertionError as exc:
                raise InvariantViolation("USER", str(exc), at=sim.now) from exc

    def attempt(self, seed: int, fixed: dict[str, Any]) -> SimFailure | None:
        """Run ``seed``; its failure, if it fails."""
        sim = self.sim(seed, fixed)
        try:
            self.run(sim)
        except InvariantViolation as exc:
            return SimFailure(
                seed=seed,
                invariant=exc.invariant,
                message=str(exc),
                overrides=dict(fixed),
                trace_hash=sim.trace_hash(),
                trace=tuple(sim.trace),
                backend=None if self.member is None else self.backend,
            )
        return None


def _check_fields(overrides: Mapping[str, Any]) -> None:
    known = {field.name for field in attrs.fields(SimConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"not SimConfig fields: {', '.join(unknown)}; known: {sorted(known)}")
