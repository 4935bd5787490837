"""Filling ``buffer_memory`` from a test, on any runtime's producer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafkastate.errors import BufferFullError


def send_until_refused(send_nowait: Callable[[], object], limit: int = 1000) -> list[object]:
    """Call a fire-and-forget send until ``BufferFullError`` refuses one (before ``limit``
    sends: the test fails otherwise); what the accepted ones returned."""
    accepted: list[object] = []
    with pytest.raises(BufferFullError):
        while len(accepted) < limit:
            accepted.append(send_nowait())
    assert accepted, "the first send was refused"
    return accepted
