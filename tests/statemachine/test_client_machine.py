"""A Hypothesis model of the Client against a scripted two-broker cluster.

Promises checked after every step:
- after ``handle_timer(now)`` nothing is due any more: ``get_timer()`` is None or later than
  ``now`` (a deadline in the past would make every driver spin);
- every request id gets exactly one outcome;
- the Client never asks to connect a node it is already connected or connecting to;
- bytes are only written to nodes whose socket the adapter has open.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkastate.core.client import (
    Client,
    ClientConfig,
    CloseRequested,
    ConnectRequested,
    RequestCompleted,
    RequestFailed,
)
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig, NodeId
from kafkastate.core.protocol.requests import metadata_request
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, ApiVersionTable
from tests._support.peer import (
    api_versions_response,
    metadata_response,
    parse_request,
    response_frame,
    split_frames,
)

MD_VERSION = CLIENT_VERSIONS[ApiKey.METADATA][1]
BROKERS = {1: ("b1", 9092), 2: ("b2", 9092)}


def _factory(versions: ApiVersionTable) -> Any:
    return metadata_request(versions, ["t"])


class ClientModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.client = Client(
            ClientConfig(
                bootstrap_servers=[("boot", 9092)],
                connection=ConnectionConfig(request_timeout=5.0, max_in_flight=2),
                metadata=MetadataConfig(metadata_max_age=30.0, retry_backoff=0.2),
                reconnect_backoff=0.1,
                reconnect_backoff_max=2.0,
                connections_max_idle=20.0,
                socket_connection_setup_timeout=3.0,
            ),
            rng=random.Random(0),
            topics=["t"],
        )
        self.now = 0.0
        self.connecting: set[int] = set()
        self.open: set[int] = set()
        self.unanswered: dict[int, list[Any]] = {}
        self.outcomes: dict[int, int] = {}
        self.submitted: list[int] = []
        self.client.handle_timer(now=self.now)
        self._pump()

    def _pump(self) -> None:
        for node, data in self.client.data_to_send():
            assert node in self.open, f"bytes for node {node} without an open socket"
            self.unanswered.setdefault(node, []).extend(
                parse_request(f) for f in split_frames(data)
            )
        while (ev := self.client.next_event()) is not None:
            match ev:
                case ConnectRequested(node_id=n):
                    assert n not in self.connecting and n not in self.open, f"connect {n} twice"
                    self.connecting.add(n)
                case CloseRequested(node_id=n):
                    self.connecting.discard(n)
                    self.open.discard(n)
                    self.unanswered.pop(n, None)
                case RequestCompleted(request_id=rid) | RequestFailed(request_id=rid):
                    self.outcomes[rid] = self.outcomes.get(rid, 0) + 1
                    assert self.outcomes[rid] == 1, f"request {rid} finished twice"

    @rule(to_node=st.sampled_from([None, 1, 2, -1]))
    def send(self, to_node: int | None) -> None:
        known = to_node is None or self.client.node_state(NodeId(to_node)) is not None
        if not known:
            return
        rid = self.client.send(
            _factory, now=self.now, node_id=None if to_node is None else NodeId(to_node)
        )
        self.submitted.append(rid)
        self._pump()

    @rule(data=st.data())
    @precondition(lambda self: bool(self.connecting))
    def socket_result(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.connecting)))
        self.connecting.discard(node)
        if data.draw(st.booleans()):
            self.open.add(node)
            self.client.connection_made(NodeId(node), now=self.now)
        else:
            self.client.connection_failed(NodeId(node), now=self.now, error=OSError("refused"))
        self._pump()

    @rule(data=st.data())
    @precondition(lambda self: any(self.unanswered.values()))
    def broker_answers(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(n for n, q in self.unanswered.items() if q)))
        req = self.unanswered[node].pop(0)
        if req.api_key == ApiKey.API_VERSIONS:
            body = api_versions_response(req.version)
        else:
            body = metadata_response(req.version, brokers=BROKERS, topics={"t": {0: (1, 1)}})
        self.client.receive_data(
            NodeId(node), response_frame(req.correlation_id, body), now=self.now
        )
        self._pump()

    @rule(data=st.data())
    @precondition(lambda self: bool(self.open))
    def socket_dies(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.open)))
        self.open.discard(node)
        self.unanswered.pop(node, None)
        self.client.connection_lost(NodeId(node), now=self.now, error=OSError("reset"))
        self._pump()

    @rule(dt=st.floats(0, 10))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.client.handle_timer(now=self.now)
        self._pump()
        timer = self.client.get_timer()
        assert timer is None or timer > self.now, f"timer {timer} not after now {self.now}"

    @rule()
    def jump_to_timer(self) -> None:
        timer = self.client.get_timer()
        if timer is None:
            return
        self.now = max(self.now, timer)
        self.client.handle_timer(now=self.now)
        self._pump()
        after = self.client.get_timer()
        assert after is None or after > self.now, f"timer {after} not after now {self.now}"

    @invariant()
    def outcomes_unique(self) -> None:
        assert all(v == 1 for v in self.outcomes.values())


TestClientModel = ClientModel.TestCase
TestClientModel.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
