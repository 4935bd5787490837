"""Where the simulator's decisions come from.

Every draw names what it decides (``label``) and its zero is always the benign choice: no
fault, the shortest delay, first-in-first-out. So a replay tape that runs out degrades to the
happy path, and Hypothesis, which shrinks draws toward zero, shrinks a failing run toward one
with fewer faults and shorter delays.

* :class:`SeededEntropy` -- a seeded ``random.Random``; records every draw (the tape).
* :class:`TapeEntropy` -- replays a recorded tape; draws past its end are 0.
* :class:`HypothesisEntropy` -- draws from a Hypothesis ``data`` object (shrinkable).
"""

from __future__ import annotations

import random
from typing import Any, Protocol

__all__ = ["Entropy", "HypothesisEntropy", "SeededEntropy", "TapeEntropy"]


class Entropy(Protocol):
    """The simulator's only source of nondeterminism."""

    def below(self, n: int, label: str) -> int:
        """An int in ``[0, n)``; 0 is the benign choice."""
        ...

    @property
    def tape(self) -> list[int]:
        """Every value drawn so far, in order."""
        ...


class _Recording:
    def __init__(self) -> None:
        self._tape: list[int] = []
        self.labels: list[str] = []
        """Each draw's label, in tape order (the shrinker and the self-tests read them)."""

    @property
    def tape(self) -> list[int]:
        return self._tape

    def _note(self, value: int, label: str) -> int:
        self._tape.append(value)
        self.labels.append(label)
        return value


class SeededEntropy(_Recording):
    """Draws from ``random.Random(seed)`` and records them.

    Args:
        seed: the run's seed.
    """

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed
        self._rng = random.Random(seed)
        self._bits = self._rng.getrandbits

    def below(self, n: int, label: str) -> int:
        # ``randrange(n)``'s own draw (rejection sampling over ``n.bit_length()`` random
        # bits), without its argument checks: the same values from the same seed, and it
        # runs a few times for every event (the scheduler's tie-breaks).
        value = 0
        if n > 1:
            k = n.bit_length()
            value = self._bits(k)
            while value >= n:
                value = self._bits(k)
        self._tape.append(value)
        self.labels.append(label)
        return value


class TapeEntropy(_Recording):
    """Replays ``values`` in order (clamped to each draw's range); 0 after the end.

    Args:
        values: a tape recorded by another entropy.
    """

    def __init__(self, values: list[int]) -> None:
        super().__init__()
        self._values = list(values)

    def below(self, n: int, label: str) -> int:
        i = len(self._tape)
        value = self._values[i] if i < len(self._values) else 0
        return self._note(min(max(value, 0), max(n - 1, 0)), label)


class HypothesisEntropy(_Recording):
    """Draws from Hypothesis (``st.data()``), so failing runs shrink.

    Args:
        data: the ``data`` object of a ``@given(st.data())`` test.
    """

    def __init__(self, data: Any) -> None:
        super().__init__()
        self._data = data

    def below(self, n: int, label: str) -> int:
        from hypothesis import strategies as st  # noqa: PLC0415 -- test-only dependency

        value = 0 if n <= 1 else int(self._data.draw(st.integers(0, n - 1), label=label))
        return self._note(value, label)
