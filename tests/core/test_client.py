"""Client and Metadata machines driven by hand: no sockets, time stepped explicitly."""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.client import (
    Client,
    ClientConfig,
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    NodeDisconnected,
    NodeState,
    RequestCompleted,
    RequestFailed,
)
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import Metadata, MetadataConfig, NodeId
from kafkastate.core.protocol.requests import metadata_request
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, ApiVersionTable
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    LocalProtocolError,
    SecurityProtocolMismatchError,
    SslAuthenticationError,
    UnsupportedVersionError,
)
from tests._support.peer import (
    api_versions_response,
    metadata_response,
    parse_request,
    response,
    response_frame,
    split_frames,
)

MD_VERSION = CLIENT_VERSIONS[ApiKey.METADATA][1]
BROKERS = {1: ("10.0.0.1", 9092), 2: ("10.0.0.2", 9092)}


def drain(client: Client) -> list[Any]:
    out = []
    while (ev := client.next_event()) is not None:
        out.append(ev)
    return out


class Broker:
    """Answers what the client writes to one node, like a scripted peer."""

    def __init__(self, client: Client, node: int) -> None:
        self.client = client
        self.node = NodeId(node)

    def requests(self, written: list[tuple[NodeId, bytes]]) -> list[Any]:
        return [
            parse_request(f) for n, data in written if n == self.node for f in split_frames(data)
        ]

    def answer(self, req: Any, body: Any, *, now: float) -> None:
        self.client.receive_data(self.node, response_frame(req.correlation_id, body), now=now)

    def handshake(self, *, now: float) -> list[tuple[NodeId, bytes]]:
        """Complete ApiVersions; return whatever the client wrote next."""
        (av,) = self.requests(self.client.data_to_send())
        assert av.api_key == ApiKey.API_VERSIONS
        self.answer(av, api_versions_response(av.version), now=now)
        return self.client.data_to_send()


def bootstrapped(
    *, topics: tuple[str, ...] = ("t",), seed: int = 1, **config: Any
) -> tuple[Client, list[Any]]:
    """A client that connected to its bootstrap server and merged the first metadata."""
    client = Client(
        ClientConfig(bootstrap_servers=[("boot", 9092)], **config),
        rng=random.Random(seed),
        topics=topics,
    )
    assert client.get_timer() == 0.0  # metadata is due at once
    client.handle_timer(now=0.0)
    (connect,) = drain(client)
    assert connect == ConnectRequested(node_id=NodeId(-1), host="boot", port=9092)
    client.connection_made(NodeId(-1), now=0.1)
    boot = Broker(client, -1)
    written = boot.handshake(now=0.2)
    (md,) = boot.requests(written)
    assert md.api_key == ApiKey.METADATA and md.version == MD_VERSION
    assert [t.name for t in md.body.topics] == sorted(topics)
    body = metadata_response(MD_VERSION, brokers=BROKERS, topics={"t": {0: (1, 5), 1: (2, 7)}})
    boot.answer(md, body, now=0.3)
    return client, drain(client)


def test_bootstrap_then_metadata_names_the_brokers() -> None:
    client, events = bootstrapped()
    (updated,) = events
    assert isinstance(updated, MetadataUpdated)
    cluster = updated.cluster
    assert sorted(cluster.brokers) == [1, 2]
    assert cluster.leader_for("t", 0) == 1 and cluster.leader_for("t", 1) == 2
    assert cluster.partitions_for("t") == (0, 1)
    assert cluster.topics["t"].topic_id is not None
    assert client.node_state(NodeId(1)) is NodeState.DISCONNECTED
    assert client.node_state(NodeId(-1)) is NodeState.READY
    # next refresh: metadata_max_age after the update (300 s default), or idle close first
    assert client.metadata.update_due_at() == pytest.approx(0.3 + 300.0)


def _md_factory(versions: ApiVersionTable) -> Any:
    return metadata_request(versions, ["t"])


def test_send_to_node_connects_then_completes() -> None:
    client, _ = bootstrapped()
    rid = client.send(_md_factory, now=1.0, node_id=NodeId(2))
    (connect,) = drain(client)
    assert connect == ConnectRequested(node_id=NodeId(2), host="10.0.0.2", port=9092)
    client.connection_made(NodeId(2), now=1.1)
    node2 = Broker(client, 2)
    (req,) = node2.requests(node2.handshake(now=1.2))
    node2.answer(req, metadata_response(MD_VERSION, brokers=BROKERS), now=1.3)
    (done,) = drain(client)
    assert isinstance(done, RequestCompleted)
    assert (done.request_id, done.node_id) == (rid, 2)
    assert sorted(b.node_id for b in done.response.brokers) == [1, 2]


def test_any_node_request_prefers_ready_real_brokers() -> None:
    client, _ = bootstrapped()
    client.send(_md_factory, now=1.0)
    (connect,) = drain(client)
    # the bootstrap connection is ready, but once metadata named real brokers those are used
    assert isinstance(connect, ConnectRequested) and connect.node_id in (1, 2)


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    client, _ = bootstrapped(reconnect_backoff=0.1, reconnect_backoff_max=0.5)
    rid = client.send(_md_factory, now=10.0, node_id=NodeId(1), timeout=1000.0)
    drain(client)
    now = 10.0
    waits = []
    for _ in range(6):
        client.connection_failed(NodeId(1), now=now, error=OSError("refused"))
        events = drain(client)
        assert any(isinstance(e, NodeDisconnected) for e in events)
        # What waited for the connection fails at once, retriable (Java never queues
        # behind a dead connection); metadata is refreshed to find where to go instead.
        (failed,) = [e for e in events if isinstance(e, RequestFailed)]
        assert failed.request_id == rid and failed.error.retriable
        assert client.node_state(NodeId(1)) is NodeState.BACKOFF
        rid = client.send(_md_factory, now=now, node_id=NodeId(1), timeout=1000.0)
        timer = client.get_timer()
        assert timer is not None
        waits.append(timer - now)
        now = timer
        client.handle_timer(now=now)
        assert ConnectRequested(node_id=NodeId(1), host="10.0.0.1", port=9092) in drain(client)
    bases = [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    for wait, base in zip(waits, bases, strict=True):
        assert base * 0.8 <= wait <= base * 1.2


def test_authentication_failure_fails_queued_requests_at_once() -> None:
    client = Client(
        ClientConfig(
            bootstrap_servers=[("boot", 9092)],
            connection=ConnectionConfig(
                sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p"
            ),
        ),
        rng=random.Random(1),
        topics=["t"],
    )
    rid = client.send(_md_factory, now=0.0, node_id=NodeId(-1))
    (connect,) = drain(client)
    assert connect.node_id == -1
    client.connection_made(NodeId(-1), now=0.0)
    boot = Broker(client, -1)
    (hs,) = boot.requests(boot.handshake(now=0.0))
    assert hs.api_key == ApiKey.SASL_HANDSHAKE
    boot.answer(hs, response(17, 1, error_code=ErrorCode.none, mechanisms=()), now=0.0)
    (auth,) = boot.requests(client.data_to_send())
    refusal = response(
        36,
        auth.version,
        error_code=ErrorCode.sasl_authentication_failed,
        error_message="bad",
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(0),
    )
    boot.answer(auth, refusal, now=0.0)
    events = drain(client)
    assert CloseRequested(node_id=NodeId(-1)) in events
    failed = [e for e in events if isinstance(e, RequestFailed)]
    assert [f.request_id for f in failed] == [rid]
    assert isinstance(failed[0].error, AuthenticationFailedError)
    assert client.node_state(NodeId(-1)) is NodeState.BACKOFF
    # The metadata refresh was for "any node": it waits for the next attempt, within its
    # own timeout, rather than failing with this node's error.
    assert client.metadata.in_flight
    # ...but whoever waits for the cluster learns at once that waiting cannot help
    assert client.authentication_refused is failed[0].error


def test_queued_request_fails_with_its_connection_attempt() -> None:
    client, _ = bootstrapped(socket_connection_setup_timeout=2.0)
    rid = client.send(_md_factory, now=5.0, node_id=NodeId(1), timeout=30.0)
    drain(client)
    client.handle_timer(now=7.0)  # connect attempt timed out
    events = drain(client)
    assert CloseRequested(node_id=NodeId(1)) in events
    assert any(isinstance(e, NodeDisconnected) for e in events)
    failed = [e for e in events if isinstance(e, RequestFailed)]
    assert [f.request_id for f in failed] == [rid]  # at once, not at its 30 s deadline
    assert isinstance(failed[0].error, KafkaTimeoutError) and failed[0].error.retriable
    assert "connecting to node 1" in str(failed[0].error)
    assert client.metadata.update_due(7.0) or client.metadata.in_flight  # look again


def test_queued_request_times_out_while_the_node_backs_off() -> None:
    client, _ = bootstrapped(reconnect_backoff=5.0, reconnect_backoff_max=5.0)
    client.send(_md_factory, now=5.0, node_id=NodeId(1), timeout=30.0)
    client.connection_failed(NodeId(1), now=5.0, error=OSError("refused"))
    drain(client)
    rid = client.send(_md_factory, now=5.0, node_id=NodeId(1), timeout=1.0)
    client.handle_timer(now=6.0)  # still backing off: the request's own deadline passes
    failed = [e for e in drain(client) if isinstance(e, RequestFailed)]
    assert [f.request_id for f in failed] == [rid]
    assert isinstance(failed[0].error, KafkaTimeoutError)


def test_in_flight_request_fails_on_connection_lost_and_node_reconnects_for_new_work() -> None:
    client, _ = bootstrapped()
    rid = client.send(_md_factory, now=1.0, node_id=NodeId(-1))
    assert client.data_to_send()  # went out on the ready bootstrap connection
    client.connection_lost(NodeId(-1), now=1.5, error=OSError("reset"))
    events = drain(client)
    failed = [e for e in events if isinstance(e, RequestFailed)]
    assert [f.request_id for f in failed] == [rid]
    assert isinstance(failed[0].error, KafkaConnectionError)
    assert CloseRequested(node_id=NodeId(-1)) not in events  # the adapter already knows


def test_idle_connection_is_closed() -> None:
    client, _ = bootstrapped(connections_max_idle=60.0)
    assert client.node_state(NodeId(-1)) is NodeState.READY
    assert client.get_timer() == pytest.approx(0.3 + 60.0)
    client.handle_timer(now=60.3)
    events = drain(client)
    assert CloseRequested(node_id=NodeId(-1)) in events
    assert NodeDisconnected(node_id=NodeId(-1), error=None) in events
    assert client.node_state(NodeId(-1)) is NodeState.DISCONNECTED


def test_metadata_failure_retries_after_backoff() -> None:
    client = Client(
        ClientConfig(
            bootstrap_servers=[("boot", 9092)],
            metadata=MetadataConfig(retry_backoff=0.5),
            connection=ConnectionConfig(request_timeout=2.0),
        ),
        rng=random.Random(3),
        topics=["t"],
    )
    client.handle_timer(now=0.0)
    drain(client)
    client.connection_made(NodeId(-1), now=0.0)
    boot = Broker(client, -1)
    (_md,) = boot.requests(boot.handshake(now=0.0))
    client.handle_timer(now=2.0)  # the metadata request timed out; connection closed
    assert isinstance(client.metadata.last_error, KafkaTimeoutError)
    events = drain(client)
    assert CloseRequested(node_id=NodeId(-1)) in events
    # The retry (due 0.5 s after the first attempt) is queued at once and waits for the
    # node's reconnect backoff.
    assert client.metadata.in_flight
    timer = client.get_timer()
    assert timer is not None and 2.0 < timer <= 2.0 + 0.05 * 1.2
    client.handle_timer(now=timer)
    assert ConnectRequested(node_id=NodeId(-1), host="boot", port=9092) in drain(client)


def test_same_seed_same_events() -> None:
    def run(seed: int) -> list[Any]:
        client, events = bootstrapped(seed=seed)
        for i in range(4):
            client.send(_md_factory, now=1.0 + i)
            client.connection_failed(NodeId(1), now=1.0 + i)
            client.connection_failed(NodeId(2), now=1.0 + i)
            client.handle_timer(now=2.0 + i)
        events += drain(client)
        return [repr(e) for e in events] + [repr(client.get_timer())]

    assert run(7) == run(7)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="bootstrap_servers"):
        ClientConfig(bootstrap_servers=[])
    with pytest.raises(ValueError, match="host, port"):
        ClientConfig(bootstrap_servers=[("h", 0)])
    with pytest.raises(ValueError, match="reconnect_backoff"):
        ClientConfig(bootstrap_servers=[("h", 1)], reconnect_backoff=0)


# ---------------------------------------------------------------- Metadata alone


def _versions() -> ApiVersionTable:
    return ApiVersionTable(CLIENT_VERSIONS)


def test_metadata_keeps_newer_leader_epoch_kip320() -> None:
    md = Metadata(MetadataConfig(retry_backoff=0.1), topics=["t"])
    md.start_update(now=0.0)
    md.handle_response(
        metadata_response(MD_VERSION, brokers=BROKERS, topics={"t": {0: (1, 5)}}), now=0.0
    )
    assert md.update_due_at() == pytest.approx(300.0)
    # a lagging broker reports the old leader with an older epoch: keep ours, refresh soon
    md.start_update(now=1.0)
    cluster = md.handle_response(
        metadata_response(MD_VERSION, brokers=BROKERS, topics={"t": {0: (2, 4)}}), now=1.0
    )
    assert cluster.leader_for("t", 0) == 1
    assert cluster.topics["t"].partitions[0].leader_epoch == 5
    assert md.update_due_at() == pytest.approx(1.1)
    # a newer epoch wins
    md.start_update(now=2.0)
    cluster = md.handle_response(
        metadata_response(MD_VERSION, brokers=BROKERS, topics={"t": {0: (2, 6)}}), now=2.0
    )
    assert cluster.leader_for("t", 0) == 2


def test_metadata_unknown_topic_and_errors_request_refresh() -> None:
    md = Metadata(MetadataConfig(), topics=["a", "b"])
    md.start_update(now=0.0)
    cluster = md.handle_response(
        metadata_response(MD_VERSION, brokers=BROKERS, topics={"a": {0: (1, 0)}}, unknown=("b",)),
        now=0.0,
    )
    assert cluster.partitions_for("b") is None
    assert cluster.topics["b"].error_code == 3
    assert md.update_due_at() == pytest.approx(0.1)  # retriable error: soon
    md.start_update(now=0.2)
    md.handle_response(
        metadata_response(MD_VERSION, brokers=BROKERS, topics={"a": {0: (1, 0)}, "b": {0: (2, 0)}}),
        now=0.2,
    )
    assert md.update_due_at() == pytest.approx(300.2)
    assert md.observe_error(6)  # NOT_LEADER_OR_FOLLOWER
    assert md.update_due_at() == pytest.approx(0.3)
    assert not md.observe_error(87)  # not a metadata error


def test_metadata_topics_sorted_in_request_and_added_topics_trigger_refresh() -> None:
    md = Metadata(MetadataConfig(), topics=["z", "a", "m"])
    req = md.build_request(_versions())
    assert [t.name for t in req.topics] == ["a", "m", "z"]
    md.start_update(now=0.0)
    md.handle_response(metadata_response(MD_VERSION, brokers=BROKERS), now=0.0)
    assert not md.add_topics(["a"])
    assert md.update_due_at() == pytest.approx(300.0)
    assert md.add_topics(["b"])
    # a new topic after a good answer: at once (Java's requestUpdateForNewTopics)
    assert md.update_due_at() == 0.0
    all_md = Metadata(MetadataConfig(), topics=None)
    assert all_md.build_request(_versions()).topics is None


def test_metadata_new_topics_skip_the_backoff_only_after_a_good_answer() -> None:
    md = Metadata(MetadataConfig(retry_backoff=0.5), topics=["a"])
    md.start_update(now=1.0)
    md.handle_response(metadata_response(MD_VERSION, brokers=BROKERS), now=1.0)
    md.set_topics(["a"])  # the same topics: a refresh, after the backoff
    assert md.update_due_at() == pytest.approx(1.5)
    md.set_topics(["a", "b"])  # a new one: at once
    assert md.update_due_at() == 0.0
    md.start_update(now=1.1)
    md.handle_failure(KafkaTimeoutError("x"))
    assert md.add_topics(["c"])  # the last attempt failed: the backoff holds
    assert md.update_due_at() == pytest.approx(1.6)
    md.start_update(now=1.6)  # the attempt clears the exception for what it asked
    md.handle_response(metadata_response(MD_VERSION, brokers=BROKERS), now=1.6)
    md.request_update()
    assert md.update_due_at() == pytest.approx(2.1)


def test_metadata_in_flight_blocks_second_request() -> None:
    md = Metadata(MetadataConfig())
    assert md.update_due(0.0)
    md.start_update(now=0.0)
    assert md.update_due_at() is None and not md.update_due(100.0)
    md.handle_failure(KafkaTimeoutError("x"))
    assert md.update_due_at() == pytest.approx(0.1)


def test_a_separate_connection_to_a_broker_is_its_own_node() -> None:
    client, _ = bootstrapped()
    second = client.separate_connection(NodeId(1))
    assert second == 2**31 - 2 and client.separate_connection(NodeId(1)) == second
    client.send(_md_factory, now=1.0, node_id=second)
    (connect,) = drain(client)
    # same address as broker 1, but a connection of its own
    assert connect == ConnectRequested(node_id=second, host="10.0.0.1", port=9092)
    assert client.node_state(NodeId(1)) is NodeState.DISCONNECTED
    # "any node" requests never pick it
    client.send(_md_factory, now=1.0)
    assert all(e.node_id in (1, 2) for e in drain(client) if isinstance(e, ConnectRequested))
    with pytest.raises(LocalProtocolError, match="second connection"):
        client.separate_connection(NodeId(-1))  # a bootstrap address is not a broker


def _reconnect(client: Client, node: int, *, now: float) -> list[Any]:
    """Lose ``node``'s connection, send a Metadata request to it, connect again; return the
    requests the client wrote on the new connection."""
    client.connection_lost(NodeId(node), now=now, error=OSError("reset"))
    drain(client)
    client.send(_md_factory, now=now + 10.0, node_id=NodeId(node))
    client.handle_timer(now=now + 10.0)
    assert ConnectRequested(node_id=NodeId(node), host="boot", port=9092) in drain(client)
    client.connection_made(NodeId(node), now=now + 10.1)
    return Broker(client, node).requests(client.data_to_send())


def test_a_reconnect_reuses_the_nodes_api_versions_answer() -> None:
    client, _ = bootstrapped()
    (req,) = _reconnect(client, -1, now=1.0)
    assert req.api_key == ApiKey.METADATA  # no ApiVersions round trip first
    assert client.node_state(NodeId(-1)) is NodeState.READY


def test_a_reused_table_that_never_got_an_answer_is_asked_for_again() -> None:
    client, _ = bootstrapped()
    (req,) = _reconnect(client, -1, now=1.0)
    assert req.api_key == ApiKey.METADATA
    # dies before any answer: perhaps the broker was rolled to another version
    (again,) = _reconnect(client, -1, now=20.0)
    assert again.api_key == ApiKey.API_VERSIONS


def test_a_feature_the_negotiated_versions_lack_fails_naming_the_node() -> None:
    client, _ = bootstrapped()

    def gated(versions: ApiVersionTable) -> Any:
        versions.require(ApiKey.METADATA, feature="metadata v999", remedy="wait", min_version=999)
        raise AssertionError("not reached")

    rid = client.send(gated, now=1.0, node_id=NodeId(-1))
    (failed,) = [e for e in drain(client) if isinstance(e, RequestFailed)]
    assert failed.request_id == rid
    error = failed.error
    assert isinstance(error, UnsupportedVersionError)
    assert error.node_id == -1 and error.feature == "metadata v999"
    assert str(error).startswith("broker node -1: metadata v999 needs Metadata v999+")


def test_a_second_connection_reuses_its_brokers_api_versions_answer() -> None:
    client, _ = bootstrapped()
    client.send(_md_factory, now=1.0, node_id=NodeId(1))
    drain(client)
    client.connection_made(NodeId(1), now=1.1)
    Broker(client, 1).handshake(now=1.2)  # broker 1 answered ApiVersions once
    second = client.separate_connection(NodeId(1))
    client.send(_md_factory, now=2.0, node_id=second)
    drain(client)
    client.connection_made(second, now=2.1)
    (req,) = Broker(client, second).requests(client.data_to_send())
    assert req.api_key == ApiKey.METADATA


# -- TLS refusals (issue 19) ---------------------------------------------------------------


def _two_bootstraps() -> Client:
    config = ClientConfig(bootstrap_servers="a:9093,b:9093", reconnect_backoff=0.05)
    client = Client(config, rng=random.Random(1))
    client.request_metadata_update()
    client.handle_timer(now=0.0)
    return client


def _connect_requests(client: Client) -> list[NodeId]:
    return [e.node_id for e in drain(client) if isinstance(e, ConnectRequested)]


def test_a_tls_refusal_is_fatal_and_ends_the_wait_for_the_cluster() -> None:
    """A typed TLS refusal (an AuthenticationFailedError) is used as it is, not wrapped
    into a retriable KafkaConnectionError, so ``authentication_refused`` tells a waiting
    constructor to give up at once, as for refused credentials."""
    client = _two_bootstraps()
    (node,) = _connect_requests(client)
    refused = SslAuthenticationError("TLS with the broker at a:9093 failed: untrusted")
    client.connection_failed(node, now=0.1, error=refused)
    assert client.last_connection_error is refused
    assert client.authentication_refused is refused
    mismatch = SecurityProtocolMismatchError("b:9093 hung up on the TLS handshake")
    for step in range(1, 40):  # the next attempt goes to a bootstrap server too
        now = 0.1 + step * 0.1
        client.handle_timer(now=now)
        for other in _connect_requests(client):
            client.connection_failed(other, now=now, error=mismatch)
        if client.last_connection_error is mismatch:
            break
    assert client.authentication_refused is mismatch


def test_plain_connection_errors_stay_retriable_and_never_refuse_the_bootstrap() -> None:
    client = _two_bootstraps()
    (node,) = _connect_requests(client)
    client.connection_failed(node, now=0.1, error=OSError("refused"))
    error = client.last_connection_error
    assert isinstance(error, KafkaConnectionError) and error.retriable
    assert client.authentication_refused is None


def test_a_hang_up_in_the_handshake_of_a_broker_that_did_tls_before_is_retried() -> None:
    """A broker that completed a TLS handshake once and now closes during one is
    restarting, not a plaintext listener: KafkaConnectionError (retriable)."""
    client, _ = bootstrapped()
    client.send(_md_factory, now=1.0, node_id=NodeId(1))
    drain(client)
    broker = Broker(client, 1)
    client.connection_made(NodeId(1), now=1.0)
    broker.handshake(now=1.1)
    assert client.node_state(NodeId(1)) is NodeState.READY
    client.connection_lost(NodeId(1), now=2.0, error=OSError("reset"))
    drain(client)
    client.send(_md_factory, now=3.0, node_id=NodeId(1))
    client.handle_timer(now=3.0)
    drain(client)
    mismatch = SecurityProtocolMismatchError("10.0.0.1:9092 hung up during the TLS handshake")
    client.connection_failed(NodeId(1), now=3.1, error=mismatch)
    error = client.last_connection_error
    assert isinstance(error, KafkaConnectionError) and error.__cause__ is mismatch


def test_counters_connections_requests_and_latency() -> None:
    client, _ = bootstrapped()
    counters = client.counters
    assert counters.created.count == 1 and client.ready_nodes() == [NodeId(-1)]
    sent_before, answered_before = counters.sent.count, counters.latency.count
    client.send(_md_factory, now=1.0, node_id=NodeId(-1))
    assert client.data_to_send()
    assert counters.sent.count == sent_before + 1
    assert counters.outgoing.total > 0
    client.connection_lost(NodeId(-1), now=1.5, error=OSError("reset"))
    assert counters.latency.count == answered_before  # no answer: no latency
    assert counters.errors >= 1
    assert counters.closed.count == 1  # the ready connection ended
    client.send(_md_factory, now=5.0, node_id=NodeId(1), timeout=30.0)
    client.connection_failed(NodeId(1), now=5.0, error=OSError("refused"))
    assert counters.closed.count == 1  # a refused connect never opened: not a close
    assert client.ready_nodes() == []


# -- an adapter that serves its events late (the blocking consumer between two polls) --------


def _serve_late(client: Client, events: list[Any], *, now: float) -> list[Any]:
    """Act on ``events`` in order as an adapter does, node 2's socket connecting at once;
    the events that were not about node 2's socket."""
    rest = []
    for event in events:
        match event:
            case ConnectRequested(node_id=2, attempt=attempt):
                client.connection_made(NodeId(2), now=now, attempt=attempt)
            case CloseRequested(node_id=2):
                pass  # the adapter closes that node's socket
            case _:
                rest.append(event)
    return rest


def test_a_connect_served_after_its_setup_deadline_is_ignored() -> None:
    # The chaos runner's crash: the ConnectRequested was still queued when a later call
    # ran the timers past its setup deadline; the adapter then opened the socket and
    # reported it to a node in BACKOFF (LocalProtocolError, the consumer dead).
    client, _ = bootstrapped()
    client.send(_md_factory, now=1.0, node_id=NodeId(2))
    late = 1.0 + client.config.socket_connection_setup_timeout
    client.handle_timer(now=late)
    events = drain(client)
    (connect,) = [e for e in events if isinstance(e, ConnectRequested) and e.node_id == 2]
    assert events.index(connect) < events.index(CloseRequested(node_id=NodeId(2)))
    rest = _serve_late(client, events, now=late + 0.01)
    assert client.node_state(NodeId(2)) is NodeState.BACKOFF  # the stale socket changed nothing
    assert [type(e) for e in rest][:2] == [NodeDisconnected, RequestFailed]
    assert client.data_to_send() == []
    # the node connects again when asked, and works
    rid = client.send(_md_factory, now=late + 1.5, node_id=NodeId(2))
    (again,) = [e for e in drain(client) if isinstance(e, ConnectRequested) and e.node_id == 2]
    assert isinstance(again, ConnectRequested) and again.attempt != connect.attempt
    client.connection_made(NodeId(2), now=late + 1.6, attempt=again.attempt)
    node2 = Broker(client, 2)
    for req in node2.requests(node2.handshake(now=late + 1.7)):  # (+ a metadata refresh)
        node2.answer(req, metadata_response(MD_VERSION, brokers=BROKERS), now=late + 1.8)
    assert [e.request_id for e in drain(client) if isinstance(e, RequestCompleted)] == [rid]


def _two_attempts(client: Client) -> tuple[float, Any, ConnectRequested, ConnectRequested]:
    """Node 2's first attempt given up on (its setup deadline passed, unserved), then a
    second one for a new request after the backoff: (when, that request, both requests)."""
    client.send(_md_factory, now=1.0, node_id=NodeId(2))
    late = 1.0 + client.config.socket_connection_setup_timeout
    client.handle_timer(now=late)
    rid = client.send(_md_factory, now=late + 1.5, node_id=NodeId(2))  # after the backoff
    events = drain(client)
    first, second = [e for e in events if isinstance(e, ConnectRequested) and e.node_id == 2]
    assert first.attempt < second.attempt
    assert events.index(first) < events.index(CloseRequested(node_id=NodeId(2)))
    return late, rid, first, second


def test_a_stale_connect_report_is_not_taken_for_the_newer_attempt() -> None:
    # Served late, the given-up attempt's socket opens while a newer attempt for the node
    # is under way: it must not pass for the newer one (whose socket the adapter opens
    # next, after closing the stale one).
    client, _ = bootstrapped()
    late, rid, first, second = _two_attempts(client)
    client.connection_made(NodeId(2), now=late + 1.6, attempt=first.attempt)
    assert client.node_state(NodeId(2)) is NodeState.CONNECTING  # still waiting for `second`
    assert client.data_to_send() == []  # nothing written to the socket about to be closed
    client.connection_made(NodeId(2), now=late + 1.7, attempt=second.attempt)
    assert client.node_state(NodeId(2)) is NodeState.HANDSHAKING
    node2 = Broker(client, 2)
    for req in node2.requests(node2.handshake(now=late + 1.8)):  # (+ a metadata refresh)
        node2.answer(req, metadata_response(MD_VERSION, brokers=BROKERS), now=late + 1.9)
    assert [e.request_id for e in drain(client) if isinstance(e, RequestCompleted)] == [rid]


def test_a_late_connect_failure_does_not_end_the_newer_attempt() -> None:
    client, _ = bootstrapped()
    late, _, first, second = _two_attempts(client)
    client.connection_failed(
        NodeId(2), now=late + 1.6, error=OSError("refused"), attempt=first.attempt
    )
    assert client.node_state(NodeId(2)) is NodeState.CONNECTING
    assert not [e for e in drain(client) if getattr(e, "node_id", None) == 2]
    client.connection_made(NodeId(2), now=late + 1.7, attempt=second.attempt)
    assert client.node_state(NodeId(2)) is NodeState.HANDSHAKING


def test_a_connect_report_after_close_is_ignored() -> None:
    client, _ = bootstrapped()
    client.send(_md_factory, now=1.0, node_id=NodeId(2))
    (connect,) = [e for e in drain(client) if isinstance(e, ConnectRequested) and e.node_id == 2]
    client.close()
    assert CloseRequested(node_id=NodeId(2)) in drain(client)
    client.connection_made(NodeId(2), now=1.1, attempt=connect.attempt)
    assert client.node_state(NodeId(2)) is NodeState.DISCONNECTED
    assert client.data_to_send() == []
