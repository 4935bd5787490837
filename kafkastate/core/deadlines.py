"""Deadline arithmetic shared by the machines' ``get_timer`` (pure).

Adapters and the simulator ask every machine for its next deadline after every input, so
the machines fold their deadlines with a running minimum instead of collecting lists.
"""

from __future__ import annotations

__all__ = ["earliest"]


def earliest(best: float | None, t: float | None) -> float | None:
    """The earlier of two optional deadlines (None: no deadline)."""
    if t is None:
        return best
    if best is None or t < best:
        return t
    return best
