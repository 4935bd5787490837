"""A Hypothesis model of BrokerConnection: any interleaving of commands, responses, time
and failures keeps the machine's promises.

Promises checked after every step:
- at most ``max_in_flight`` requests are on the wire;
- every request id gets exactly one outcome (ResponseReceived or RequestFailed), never two;
- a response answers the request it was sent for, in order;
- ``get_timer()`` is None once terminal, set whenever work is outstanding, and never
  further than one request timeout away;
- after ConnectionClosed nothing more happens, and everything still open has failed.
"""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkastate.core.connection import (
    BrokerConnection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionReady,
    ConnectionState,
    RequestFailed,
    ResponseReceived,
)
from kafkastate.core.protocol.versions import ApiKey, request_type
from tests._support.peer import (
    api_versions_response,
    parse_request,
    response,
    response_frame,
    split_frames,
)

TIMEOUT = 10.0


def _metadata_response(tag: str) -> Any:
    return response(
        ApiKey.METADATA,
        12,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=tag,
        controller_id=1,
        topics=(),
    )


class ConnectionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.max_in_flight = 3
        self.conn = BrokerConnection(
            ConnectionConfig(request_timeout=TIMEOUT, max_in_flight=self.max_in_flight)
        )
        self.now = 0.0
        self.wire: list[Any] = []  # requests the broker has received, not yet answered
        self.outcomes: dict[int, str] = {}
        self.submitted: list[int] = []
        self.tags: dict[int, str] = {}
        self.closed = False
        self.ready = False
        self.conn.connection_made(now=self.now)
        self._collect_wire()

    def _collect_wire(self) -> None:
        self.wire.extend(parse_request(f) for f in split_frames(self.conn.data_to_send()))

    def _drain(self) -> None:
        while (ev := self.conn.next_event()) is not None:
            assert not self.closed, f"event after ConnectionClosed: {ev}"
            match ev:
                case ConnectionReady():
                    assert not self.ready
                    self.ready = True
                case ResponseReceived(correlation_id=cid, response=resp):
                    assert cid not in self.outcomes
                    assert resp.cluster_id == self.tags[cid]
                    self.outcomes[cid] = "ok"
                case RequestFailed(correlation_id=cid):
                    assert cid not in self.outcomes
                    self.outcomes[cid] = "failed"
                case ConnectionClosed():
                    self.closed = True
        self._collect_wire()

    @rule(count=st.integers(1, 6))
    @precondition(lambda self: not self.closed)
    def submit(self, count: int) -> None:
        for _ in range(count):
            req = request_type(ApiKey.METADATA, 12)(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            cid = self.conn.send_request(req, now=self.now)
            self.submitted.append(cid)
            self.tags[cid] = f"c{cid}"
        self._drain()

    @rule(split=st.integers(0, 200))
    @precondition(lambda self: not self.closed and bool(self.wire))
    def broker_answers_oldest(self, split: int) -> None:
        req = self.wire.pop(0)
        if req.api_key == ApiKey.API_VERSIONS:
            frame = response_frame(req.correlation_id, api_versions_response(req.version))
        else:
            frame = response_frame(req.correlation_id, _metadata_response(f"c{req.correlation_id}"))
        cut = min(split, len(frame))
        self.conn.receive_data(frame[:cut], now=self.now)
        if cut < len(frame):
            self.conn.receive_data(frame[cut:], now=self.now)
        self._drain()

    @rule(dt=st.floats(0, 2 * TIMEOUT))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.conn.handle_timer(now=self.now)
        self._drain()

    @rule()
    def timer_fires_exactly(self) -> None:
        timer = self.conn.get_timer()
        if timer is not None:
            self.now = max(self.now, timer)
            self.conn.handle_timer(now=self.now)
            self._drain()

    @rule()
    @precondition(lambda self: not self.closed)
    def eof(self) -> None:
        self.conn.receive_data(b"", now=self.now)
        self._drain()
        assert self.closed

    @rule()
    def close(self) -> None:
        self.conn.close()
        self._drain()
        assert self.closed

    @invariant()
    def in_flight_bounded(self) -> None:
        assert self.conn.in_flight_count <= self.max_in_flight

    @invariant()
    def terminal_means_everything_resolved(self) -> None:
        if self.closed:
            assert self.conn.state in (ConnectionState.CLOSED, ConnectionState.ERROR)
            assert self.conn.get_timer() is None
            assert all(cid in self.outcomes for cid in self.submitted)

    @invariant()
    def responses_in_submission_order(self) -> None:
        ok = [cid for cid in self.submitted if self.outcomes.get(cid) == "ok"]
        assert ok == sorted(ok)

    @invariant()
    def timer_not_after_deadlines(self) -> None:
        timer = self.conn.get_timer()
        if self.closed:
            return
        if self.conn.in_flight_count or self.conn.queued_count:
            assert timer is not None, "work outstanding but no deadline"
        if timer is not None:
            assert timer <= self.now + TIMEOUT


TestConnectionModel = ConnectionModel.TestCase
TestConnectionModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
