"""Wait for a fresh broker's coordinators: it creates ``__consumer_offsets`` (and
``__transaction_state``) on first use, and answers FindCoordinator with an error until then."""

from __future__ import annotations

import time
from collections.abc import Iterable

from kafkastate.adapters.blocking import BlockingConnection
from kafkastate.core.protocol.requests import build
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable

GROUP, TRANSACTION = 0, 1


def wait_for_coordinators(
    conn: BlockingConnection,
    versions: ApiVersionTable,
    key_types: Iterable[int] = (GROUP, TRANSACTION),
    timeout: float = 60.0,
) -> None:
    """Ask FindCoordinator for each key type until the broker names one (``timeout``
    seconds at most, then an AssertionError with the last answer)."""
    cls = versions.request_type(ApiKey.FIND_COORDINATOR)
    deadline = time.monotonic() + timeout
    for key_type in key_types:
        while True:
            key = f"probe-{key_type}"
            response = conn.request(build(cls, key=key, key_type=key_type, coordinator_keys=(key,)))
            coordinators = getattr(response, "coordinators", None) or (response,)
            if int(coordinators[0].error_code) == 0:
                break
            assert time.monotonic() < deadline, f"no coordinator: {response}"
            time.sleep(0.2)
