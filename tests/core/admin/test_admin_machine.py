"""AdminMachine driven by hand: a scripted two-broker cluster, time stepped explicitly.

Routing (any broker, one broker, the group coordinator, the partition leader), retries of
retriable answers within the deadline, and one outcome per resource."""

from __future__ import annotations

import dataclasses
import datetime
import random
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.admin import (
    ACL,
    AbortTransactionSpec,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    CreatedTopic,
    GroupDescription,
    ListedOffset,
    NewTopic,
    OffsetSpec,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkastate.core.admin import AdminConfig, AdminMachine, AdminOperationCompleted
from kafkastate.core.admin.operations import DescribeTopics
from kafkastate.core.client import ClientConfig
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.consumer.assignors import Assignment, encode_assignment
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    response_type,
)
from kafkastate.errors import (
    InvalidRequestError,
    KafkaTimeoutError,
    LocalProtocolError,
    NotControllerError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from kafkastate.structs import OffsetAndMetadata, TopicPartition
from tests._support.peer import ScriptedCluster, Sent, metadata_response

CREATE_TOPICS, FIND_COORDINATOR, DESCRIBE_GROUPS = 19, 10, 15
LIST_GROUPS, DESCRIBE_CONFIGS, DELETE_RECORDS, LIST_OFFSETS = 16, 32, 21, 2
BACKOFF = 0.25
# a broker without ConsumerGroupDescribe (KIP-848): groups are described with DescribeGroups
CLASSIC_GROUPS = {k: v for k, v in CLIENT_VERSIONS.items() if k != 69}
ZERO = datetime.timedelta(0)


def admin(**ranges: Any) -> tuple[AdminMachine, ScriptedCluster]:
    machine = AdminMachine(
        AdminConfig(
            client=ClientConfig(
                bootstrap_servers=[("boot", 9092)],
                connection=ConnectionConfig(request_timeout=10.0),
            ),
            retry_backoff=BACKOFF,
        ),
        rng=random.Random(7),
    )
    return machine, ScriptedCluster(machine, api_ranges=ranges.get("api_ranges"))


def answer(cluster: ScriptedCluster, sent: Sent, **fields: Any) -> None:
    cls = response_type(sent.req.api_key, sent.req.version)
    cluster.answer(sent, build(cls, throttle_time=ZERO, **fields))


def entry(sent: Sent, kind: str, /, **fields: Any) -> Any:
    cls = response_type(sent.req.api_key, sent.req.version)
    return build(nested_type(cls, kind), **fields)


def completed(cluster: ScriptedCluster) -> AdminOperationCompleted:
    (event,) = [e for e in cluster.events if isinstance(e, AdminOperationCompleted)]
    return event


def advance_until(cluster: ScriptedCluster, api_key: int) -> Sent:
    """Step time deadline by deadline until the machine sends ``api_key``."""
    for _ in range(5):
        if any(s.req.api_key == api_key for s in cluster.pending):
            break
        cluster.advance()
    return cluster.take(api_key)


def topic_result(sent: Sent, name: str, code: ErrorCode) -> Any:
    return entry(
        sent,
        "CreatableTopicResult",
        name=name,
        topic_id=None,
        error_code=code,
        error_message=None if code == ErrorCode.none else "nope",
        topic_config_error_code=0,
        num_partitions=3,
        replication_factor=1,
        configs=None,
    )


def start(m: AdminMachine, cluster: ScriptedCluster, command: Any) -> Any:
    op = command(now=cluster.now)
    cluster.pump()
    # the first metadata (and the leaders' topics, after the metadata backoff) come first
    for _ in range(3):
        if cluster.pending or m.in_flight == 0:
            break
        cluster.advance()
    return op


def test_create_topics_one_failure_does_not_hide_another_success() -> None:
    m, cluster = admin()
    op = start(
        m,
        cluster,
        lambda now: m.create_topics(
            [NewTopic("a", 3, 1), NewTopic("b", 3, 1, topic_configs={"retention.ms": "1000"})],
            now=now,
        ),
    )
    sent = cluster.take(CREATE_TOPICS)
    assert sent.node in (1, 2)  # any real broker: in KRaft it forwards to the controller
    assert [t.name for t in sent.req.body.topics] == ["a", "b"]
    assert [(c.name, c.value) for c in sent.req.body.topics[1].configs] == [
        ("retention.ms", "1000")
    ]
    answer(
        cluster,
        sent,
        topics=(
            topic_result(sent, "a", ErrorCode.none),
            topic_result(sent, "b", ErrorCode.topic_already_exists),
        ),
    )
    done = completed(cluster)
    assert done.op_id == op and done.operation == "create_topics"
    assert isinstance(done.results["a"], CreatedTopic) and done.results["a"].num_partitions == 3
    assert isinstance(done.results["b"], TopicAlreadyExistsError)
    assert m.in_flight == 0 and m.get_timer() != cluster.now


def test_not_controller_is_retried_after_the_backoff_for_that_topic_only() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.create_topics([NewTopic("a"), NewTopic("b")], now=now))
    sent = cluster.take(CREATE_TOPICS)
    t0 = cluster.now
    answer(
        cluster,
        sent,
        topics=(
            topic_result(sent, "a", ErrorCode.not_controller),
            topic_result(sent, "b", ErrorCode.none),
        ),
    )
    assert not [e for e in cluster.events if isinstance(e, AdminOperationCompleted)]
    assert m.get_timer() == pytest.approx(t0 + BACKOFF)
    cluster.advance()
    retry = cluster.take(CREATE_TOPICS)
    assert [t.name for t in retry.req.body.topics] == ["a"]
    answer(cluster, retry, topics=(topic_result(retry, "a", ErrorCode.none),))
    results = completed(cluster).results
    assert list(results) == ["a", "b"]
    assert all(isinstance(r, CreatedTopic) for r in results.values())


def test_retriable_errors_until_the_deadline_end_in_a_timeout_naming_the_last() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.create_topics([NewTopic("a")], now=now, timeout=1.0))
    deadline = cluster.now + 1.0
    while True:
        sent = cluster.take(CREATE_TOPICS)
        answer(cluster, sent, topics=(topic_result(sent, "a", ErrorCode.not_controller),))
        if m.get_timer() == pytest.approx(deadline):
            break
        cluster.advance()
    cluster.advance()
    (error,) = completed(cluster).results.values()
    assert isinstance(error, KafkaTimeoutError)
    assert "create_topics" in str(error) and "NotControllerError" in str(error)
    assert isinstance(error.__cause__, NotControllerError)
    assert m.in_flight == 0


def _find_answer(cluster: ScriptedCluster, sent: Sent, node: int, code: ErrorCode) -> None:
    coordinator = entry(
        sent,
        "Coordinator",
        key=sent.req.body.coordinator_keys[0],
        node_id=node,
        host=f"b{node}",
        port=9092,
        error_code=code,
        error_message=None,
    )
    answer(cluster, sent, coordinators=(coordinator,))


def _described(sent: Sent, group: str, code: ErrorCode) -> Any:
    member_cls = nested_type(
        response_type(DESCRIBE_GROUPS, sent.req.version), "DescribedGroupMember"
    )
    assignment = encode_assignment(Assignment(partitions=(TopicPartition("t", 0),)))
    member = build(
        member_cls,
        member_id="m-1",
        group_instance_id=None,
        client_id="c",
        client_host="/10.0.0.9",
        member_metadata=b"",
        member_assignment=assignment,
    )
    return entry(
        sent,
        "DescribedGroup",
        error_code=code,
        error_message=None,
        group_id=group,
        group_state="Stable" if code == ErrorCode.none else "",
        protocol_type="consumer",
        protocol_data="range",
        members=(member,) if code == ErrorCode.none else (),
        authorized_operations=-2147483648,
    )


def test_not_coordinator_finds_the_coordinator_again_where_it_moved() -> None:
    m, cluster = admin(api_ranges=CLASSIC_GROUPS)
    start(m, cluster, lambda now: m.describe_consumer_groups(["g"], now=now))
    find = cluster.take(FIND_COORDINATOR)
    assert find.req.body.coordinator_keys == ("g",) and find.req.body.key_type == 0
    _find_answer(cluster, find, 2, ErrorCode.none)
    describe = cluster.take(DESCRIBE_GROUPS)
    assert describe.node == 2 and describe.req.body.groups == ("g",)
    answer(cluster, describe, groups=(_described(describe, "g", ErrorCode.not_coordinator),))
    cluster.advance()  # the backoff
    find = cluster.take(FIND_COORDINATOR)
    _find_answer(cluster, find, 1, ErrorCode.none)  # the coordinator moved
    describe = cluster.take(DESCRIBE_GROUPS)
    assert describe.node == 1
    answer(cluster, describe, groups=(_described(describe, "g", ErrorCode.none),))
    (group,) = completed(cluster).results.values()
    assert isinstance(group, GroupDescription) and group.state == "Stable"
    (member,) = group.members
    assert member.assignment is not None
    assert member.assignment.partitions == (TopicPartition("t", 0),)


def test_coordinator_loading_is_retried_at_the_same_coordinator() -> None:
    m, cluster = admin(api_ranges=CLASSIC_GROUPS)
    start(m, cluster, lambda now: m.describe_consumer_groups(["g"], now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 2, ErrorCode.none)
    describe = cluster.take(DESCRIBE_GROUPS)
    answer(
        cluster,
        describe,
        groups=(_described(describe, "g", ErrorCode.coordinator_load_in_progress),),
    )
    cluster.advance()
    again = cluster.take(DESCRIBE_GROUPS)  # no FindCoordinator in between
    assert again.node == 2
    assert not [s for s in cluster.pending if s.req.api_key == FIND_COORDINATOR]


def test_coordinator_not_available_on_find_is_retried() -> None:
    m, cluster = admin(api_ranges=CLASSIC_GROUPS)
    start(m, cluster, lambda now: m.describe_consumer_groups(["g"], now=now))
    t0 = cluster.now
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), -1, ErrorCode.coordinator_not_available)
    assert m.get_timer() == pytest.approx(t0 + BACKOFF)
    cluster.advance()
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 1, ErrorCode.none)
    assert cluster.take(DESCRIBE_GROUPS).node == 1


def _offsets_answer(cluster: ScriptedCluster, sent: Sent, codes: dict[int, ErrorCode]) -> None:
    parts_cls = nested_type(
        response_type(LIST_OFFSETS, sent.req.version), "ListOffsetsPartitionResponse"
    )
    topics = []
    for t in sent.req.body.topics:
        parts = tuple(
            build(
                parts_cls,
                partition_index=p.partition_index,
                error_code=codes.get(p.partition_index, ErrorCode.none),
                timestamp=-1,
                offset=100 + p.partition_index,
                leader_epoch=0,
            )
            for p in t.partitions
        )
        topics.append(entry(sent, "ListOffsetsTopicResponse", name=t.name, partitions=parts))
    answer(cluster, sent, topics=tuple(topics))


def test_list_offsets_goes_to_each_leader_and_follows_a_leader_that_moved() -> None:
    m, cluster = admin()
    specs = {TopicPartition("t", 0): OffsetSpec.LATEST, TopicPartition("t", 1): OffsetSpec.EARLIEST}
    start(m, cluster, lambda now: m.list_offsets(specs, now=now))
    by_node = {s.node: s for s in cluster.pending if s.req.api_key == LIST_OFFSETS}
    assert sorted(by_node) == [1, 2]  # t/0 leads on 1, t/1 on 2
    assert by_node[1].req.body.topics[0].partitions[0].timestamp == -1
    assert by_node[2].req.body.topics[0].partitions[0].timestamp == -2
    cluster.topics["t"][1] = (1, 1)  # t/1 moves to broker 1
    _offsets_answer(cluster, by_node[2], {1: ErrorCode.not_leader_or_follower})
    _offsets_answer(cluster, by_node[1], {})
    retry = advance_until(cluster, LIST_OFFSETS)
    assert retry.node == 1 and retry.req.body.topics[0].partitions[0].partition_index == 1
    _offsets_answer(cluster, retry, {})
    results = completed(cluster).results
    assert results == {
        TopicPartition("t", 0): ListedOffset(offset=100, timestamp=-1, leader_epoch=0),
        TopicPartition("t", 1): ListedOffset(offset=101, timestamp=-1, leader_epoch=0),
    }


def test_unknown_topic_fails_that_partition_at_once() -> None:
    m, cluster = admin()
    specs = {TopicPartition("nope", 0): OffsetSpec.LATEST, TopicPartition("t", 0): 5}
    start(m, cluster, lambda now: m.list_offsets(specs, now=now))
    sent = cluster.take(LIST_OFFSETS)
    assert [t.name for t in sent.req.body.topics] == ["t"]
    _offsets_answer(cluster, sent, {})
    results = completed(cluster).results
    assert isinstance(results[TopicPartition("nope", 0)], UnknownTopicOrPartitionError)
    assert isinstance(results[TopicPartition("t", 0)], ListedOffset)


NOPE = TopicPartition("nope", 0)
METADATA = 3
# every operation that looks a missing topic up in metadata: the ones that find their
# partitions' leaders there (ToLeader routes), and describe_topics (a Metadata request)
BY_METADATA = {
    "list_offsets": (NOPE, lambda m, now: m.list_offsets({NOPE: OffsetSpec.LATEST}, now=now)),
    "delete_records": (NOPE, lambda m, now: m.delete_records({NOPE: 5}, now=now)),
    "describe_producers": (NOPE, lambda m, now: m.describe_producers([NOPE], now=now)),
    "abort_transaction": (
        NOPE,
        lambda m, now: m.abort_transaction(
            AbortTransactionSpec(NOPE, producer_id=7, producer_epoch=1), now=now
        ),
    ),
    "describe_topics": ("nope", lambda m, now: m.describe_topics(["nope"], now=now)),
}


@pytest.mark.parametrize("operation", sorted(BY_METADATA))
def test_a_missing_topic_is_that_resources_answer_and_the_metadata_requests_stop(
    operation: str,
) -> None:
    key, command = BY_METADATA[operation]
    m, cluster = admin()
    op = start(m, cluster, lambda now: command(m, now))
    done = completed(cluster)
    assert done.op_id == op and list(done.results) == [key]
    assert isinstance(done.results[key], UnknownTopicOrPartitionError)
    assert cluster.now < 10.0  # within its deadline (the request_timeout), not at it
    # the cluster, then the topic: nothing more, however long the client lives on
    assert cluster.requests[METADATA] == 2
    while (timer := m.get_timer()) is not None and timer < 200.0:  # < metadata_max_age
        cluster.advance()
    assert cluster.requests[METADATA] == 2
    assert m.client.metadata.topics == ()


def test_only_stale_topics_no_operation_waits_for_are_dropped() -> None:
    m, cluster = admin()
    cluster.topic_errors["t"] = ErrorCode.leader_not_available  # being created, say
    m.list_offsets({TopicPartition("t", 0): 5}, now=cluster.now)
    m.list_offsets({NOPE: 5, TopicPartition("u", 0): 5}, now=cluster.now)
    cluster.topics["u"] = {0: (1, 0)}
    cluster.pump()
    while not [e for e in cluster.events if isinstance(e, AdminOperationCompleted)]:
        cluster.advance()
        if cluster.pending:
            _offsets_answer(cluster, cluster.take(LIST_OFFSETS), {})
    (done,) = [e for e in cluster.events if isinstance(e, AdminOperationCompleted)]
    assert isinstance(done.results[NOPE], UnknownTopicOrPartitionError)
    assert isinstance(done.results[TopicPartition("u", 0)], ListedOffset)
    # "nope" is dropped; "t" is still awaited, and "u" is known and well: both stay
    assert m.client.metadata.topics == ("t", "u")
    del cluster.topic_errors["t"]
    _offsets_answer(cluster, advance_until(cluster, LIST_OFFSETS), {})
    assert len([e for e in cluster.events if isinstance(e, AdminOperationCompleted)]) == 2
    assert m.client.metadata.topics == ("t", "u")  # leaders cached for the next call


def test_a_topic_refused_for_good_fails_its_partitions_at_once() -> None:
    m, cluster = admin()
    cluster.topic_errors["t"] = ErrorCode.topic_authorization_failed
    start(m, cluster, lambda now: m.list_offsets({TopicPartition("t", 0): 5}, now=now))
    (error,) = completed(cluster).results.values()
    assert isinstance(error, TopicAuthorizationFailedError)  # no retry cures it
    assert cluster.now < 10.0 and cluster.requests[METADATA] == 2


def test_an_api_the_broker_lacks_names_the_operation() -> None:
    ranges = {k: v for k, v in CLIENT_VERSIONS.items() if k != DELETE_RECORDS}
    m, cluster = admin(api_ranges=ranges)
    start(m, cluster, lambda now: m.delete_records({TopicPartition("t", 0): 5}, now=now))
    (error,) = completed(cluster).results.values()
    assert isinstance(error, UnsupportedVersionError)
    assert "delete_records" in str(error) and "DeleteRecords" in str(error)


def test_list_consumer_groups_asks_every_broker() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.list_consumer_groups(now=now))
    sent = sorted(
        (s for s in cluster.pending if s.req.api_key == LIST_GROUPS), key=lambda s: s.node
    )
    assert [s.node for s in sent] == [1, 2]
    for s in sent:
        listed = entry(
            s,
            "ListedGroup",
            group_id=f"g{s.node}",
            protocol_type="consumer",
            group_state="Empty",
            group_type="classic",
        )
        answer(cluster, s, error_code=ErrorCode.none, groups=(listed,))
    results = completed(cluster).results
    assert {n: [g.group_id for g in gs] for n, gs in results.items()} == {1: ["g1"], 2: ["g2"]}


def test_broker_configs_go_to_that_broker_and_topic_configs_anywhere() -> None:
    m, cluster = admin()
    resources = [
        ConfigResource("broker", "2"),
        ConfigResource(ConfigResourceType.TOPIC, "t", ["x"]),
    ]
    start(m, cluster, lambda now: m.describe_configs(resources, now=now))
    sent = [s for s in cluster.pending if s.req.api_key == DESCRIBE_CONFIGS]
    by_type = {s.req.body.resources[0].resource_type: s for s in sent}
    assert by_type[4].node == 2 and by_type[4].req.body.resources[0].configuration_keys is None
    assert by_type[2].req.body.resources[0].configuration_keys == ("x",)
    for kind, s in by_type.items():
        res = s.req.body.resources[0]
        code = ErrorCode.none if kind == 4 else ErrorCode.unknown_topic_or_partition
        result = entry(
            s,
            "DescribeConfigsResult",
            error_code=code,
            error_message=None,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configs=(),
        )
        answer(cluster, s, results=(result,))
    results = completed(cluster).results
    assert results[(ConfigResourceType.BROKER, "2")] == {}
    assert isinstance(results[(ConfigResourceType.TOPIC, "t")], UnknownTopicOrPartitionError)


def test_alter_offsets_commits_as_an_admin_with_names() -> None:
    m, cluster = admin()
    offsets = {TopicPartition("t", 0): OffsetAndMetadata(7, "m"), ("t", 1): 9}
    start(m, cluster, lambda now: m.alter_consumer_group_offsets("g", offsets, now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 1, ErrorCode.none)
    sent = cluster.take(ApiKey.OFFSET_COMMIT)
    assert sent.req.version <= 9  # names, not topic ids
    body = sent.req.body
    assert (body.group_id, body.generation_id_or_member_epoch, body.member_id) == ("g", -1, "")
    assert [(p.partition_index, p.committed_offset) for p in body.topics[0].partitions] == [
        (0, 7),
        (1, 9),
    ]


def test_commands_check_their_arguments() -> None:
    m, _ = admin()
    with pytest.raises(ValueError, match="twice"):
        m.create_topics([NewTopic("a"), NewTopic("a")], now=0.0)
    with pytest.raises(ValueError, match="not both"):
        NewTopic("a", 2, 1, replica_assignments={0: [1]})
    # the earlier keyword still names the topic configs
    assert NewTopic(name="a", configs={"x": "1"}).topic_configs == {"x": "1"}
    with pytest.raises(ValueError, match="not both"):
        NewTopic("a", topic_configs={"x": "1"}, configs={"x": "2"})
    with pytest.raises(ValueError, match="OffsetSpec"):
        m.list_offsets({TopicPartition("t", 0): -7}, now=0.0)
    with pytest.raises(ValueError, match="resource type"):
        ConfigResource("cluster", "x")
    assert m.in_flight == 0


def test_an_unreachable_cluster_times_out_each_topic_naming_the_connection_error() -> None:
    m, cluster = admin()
    cluster.refuse.add(-1)
    start(
        m,
        cluster,
        lambda now: m.create_topics([NewTopic("a"), NewTopic("b")], now=now, timeout=2.0),
    )
    while m.in_flight:
        cluster.advance()
    assert cluster.now == pytest.approx(2.0)  # the operation's deadline, not later
    results = completed(cluster).results
    assert list(results) == ["a", "b"]
    for error in results.values():
        assert isinstance(error, KafkaTimeoutError)
        assert "create_topics did not finish within 2 s" in str(error)
        assert "no" in str(error.__cause__)  # the scripted refusal, OSError("no")


def test_a_lost_coordinator_connection_finds_the_coordinator_again() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.list_consumer_group_offsets("g", now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 2, ErrorCode.none)
    fetch = cluster.take(ApiKey.OFFSET_FETCH)
    assert fetch.node == 2 and fetch.req.version <= 9
    cluster.pending.remove(fetch)
    cluster.open.discard(2)
    m.connection_lost(2, now=cluster.now, error=OSError("reset"))
    cluster.pump()
    find = advance_until(cluster, FIND_COORDINATOR)
    assert find.req.body.coordinator_keys == ("g",)


def test_deleting_an_unknown_topic_is_an_answer_not_a_retry() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.delete_topics(["gone"], now=now))
    sent = cluster.take(ApiKey.DELETE_TOPICS)
    result = entry(
        sent,
        "DeletableTopicResult",
        name="gone",
        topic_id=None,
        error_code=ErrorCode.unknown_topic_or_partition,
        error_message=None,
    )
    answer(cluster, sent, responses=(result,))
    (error,) = completed(cluster).results.values()
    assert isinstance(error, UnknownTopicOrPartitionError)


def test_close_ends_every_operation() -> None:
    m, cluster = admin(api_ranges=CLASSIC_GROUPS)
    start(m, cluster, lambda now: m.describe_consumer_groups(["g", "h"], now=now))
    m.close()
    cluster.pump()
    results = completed(cluster).results
    assert list(results) == ["g", "h"] and all("closed" in str(e) for e in results.values())
    assert m.get_timer() is None
    with pytest.raises(LocalProtocolError):
        m.describe_cluster(now=cluster.now)


def _acl(name: str) -> ACL:
    pattern = ResourcePattern(ResourceType.TOPIC, name, ACLResourcePatternType.PREFIXED)
    return ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)


def test_create_acls_answers_each_acl_in_request_order() -> None:
    m, cluster = admin()
    acls = [_acl("a"), _acl("b")]
    start(m, cluster, lambda now: m.create_acls(acls, now=now))
    sent = cluster.take(30)
    creations = sent.req.body.creations
    assert [(c.resource_name, c.resource_pattern_type, c.operation) for c in creations] == [
        ("a", 4, 3),
        ("b", 4, 3),
    ]
    results = (
        entry(sent, "AclCreationResult", error_code=ErrorCode.none, error_message=None),
        entry(
            sent,
            "AclCreationResult",
            error_code=ErrorCode.invalid_request,
            error_message="bad",
        ),
    )
    answer(cluster, sent, results=results)
    done = completed(cluster).results
    assert done[acls[0]] is None and isinstance(done[acls[1]], InvalidRequestError)


def test_describe_acls_reads_the_matching_acls_back() -> None:
    m, cluster = admin()
    wanted = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
    )
    start(m, cluster, lambda now: m.describe_acls(wanted, now=now))
    sent = cluster.take(29)
    body = sent.req.body
    assert (body.resource_type_filter, body.pattern_type_filter, body.principal_filter) == (
        1,
        1,
        None,
    )
    description = entry(
        sent, "AclDescription", principal="User:bob", host="*", operation=3, permission_type=3
    )
    resource = entry(
        sent,
        "DescribeAclsResource",
        resource_type=2,
        resource_name="a",
        pattern_type=4,
        acls=(description,),
    )
    answer(cluster, sent, error_code=ErrorCode.none, error_message=None, resources=(resource,))
    assert completed(cluster).results == {wanted: [_acl("a")]}


def test_describe_log_dirs_asks_every_broker() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_log_dirs(now=now))
    sent = sorted((s for s in cluster.pending if s.req.api_key == 35), key=lambda s: s.node)
    assert [s.node for s in sent] == [1, 2] and sent[0].req.body.topics is None
    for s in sent:
        part = entry(
            s,
            "DescribeLogDirsPartition",
            partition_index=0,
            partition_size=100 * s.node,
            offset_lag=0,
            is_future_key=False,
        )
        topic = entry(s, "DescribeLogDirsTopic", name="t", partitions=(part,))
        result = entry(
            s,
            "DescribeLogDirsResult",
            error_code=ErrorCode.none,
            log_dir=f"/data{s.node}",
            topics=(topic,),
            total_bytes=10,
            usable_bytes=5,
            is_cordoned=False,
        )
        answer(cluster, s, error_code=ErrorCode.none, results=(result,))
    results = completed(cluster).results
    sizes = {n: dirs[0].replicas[TopicPartition("t", 0)].size for n, dirs in results.items()}
    assert sizes == {1: 100, 2: 200}
    assert results[1][0].path == "/data1" and results[1][0].error is None


def test_find_coordinator_retries_until_one_is_available() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.find_coordinator("tx", 1, now=now))
    find = cluster.take(FIND_COORDINATOR)
    assert find.req.body.key_type == 1 and find.req.body.coordinator_keys == ("tx",)
    _find_answer(cluster, find, -1, ErrorCode.coordinator_not_available)
    _find_answer(cluster, advance_until(cluster, FIND_COORDINATOR), 2, ErrorCode.none)
    assert completed(cluster).results == {"tx": 2}


# -------------------------------------------------------------- topics by id (KIP-516)

DELETE_TOPICS = 20


def _deleted(sent: Sent, name: str | None, topic_id: uuid.UUID, code: ErrorCode) -> Any:
    return entry(
        sent,
        "DeletableTopicResult",
        name=name,
        topic_id=topic_id,
        error_code=code,
        error_message=None,
    )


def test_topics_are_deleted_by_id_and_by_name_each_answer_under_what_was_given() -> None:
    m, cluster = admin()
    by_id, unknown = uuid.UUID(int=7), uuid.UUID(int=8)
    start(m, cluster, lambda now: m.delete_topics([by_id, "b", unknown], now=now))
    # ids and names go in separate requests (answered in the order they were sent)
    sent = [s for s in cluster.pending if s.req.api_key == DELETE_TOPICS]
    asked = {s.req.body.topics[0].name is None: s for s in sent}
    assert len(sent) == len(asked) == 2
    named, ids = asked[False], asked[True]
    assert [(t.name, t.topic_id) for t in named.req.body.topics] == [("b", None)]
    assert [(t.name, t.topic_id) for t in ids.req.body.topics] == [
        (None, by_id),
        (None, unknown),
    ]
    answers = {
        id(named): (_deleted(named, "b", uuid.UUID(int=9), ErrorCode.none),),
        id(ids): (
            _deleted(ids, "a", by_id, ErrorCode.none),  # the broker names it back
            _deleted(ids, None, unknown, ErrorCode.unknown_topic_id),
        ),
    }
    for one in sent:
        answer(cluster, one, responses=answers[id(one)])
    results = completed(cluster).results
    assert results[by_id] is None and results["b"] is None
    # an id no topic has is the answer, not retried until the deadline (it is retriable)
    assert isinstance(results[unknown], UnknownTopicIdError)
    assert cluster.requests[DELETE_TOPICS] == 2 and m.in_flight == 0


def test_a_topic_described_by_id_is_answered_under_its_id() -> None:
    ids = [uuid.UUID(int=1), uuid.UUID(int=5)]
    spec = DescribeTopics([*ids, "u"])
    assert spec.phase(ids[0]) == spec.phase(ids[1]) != spec.phase("u")
    request = spec.request(ApiVersionTable(CLIENT_VERSIONS), ids, 10.0)
    version = CLIENT_VERSIONS[METADATA][1]
    assert version >= 12
    assert [(t.name, t.topic_id) for t in request.topics] == [(None, i) for i in ids]
    body = metadata_response(version, brokers={1: ("b1", 9092)}, topics={"t": {0: (1, 0)}})
    missing = dataclasses.replace(
        body.topics[0],
        name=None,
        topic_id=ids[1],
        error_code=ErrorCode.unknown_topic_id,
        partitions=(),
    )
    body = dataclasses.replace(body, topics=(*body.topics, missing))
    described = spec.parse(body, ids)
    assert described[ids[0]].name == "t"  # the topic with that id
    assert isinstance(described[ids[1]], UnknownTopicIdError)
    assert UnknownTopicIdError in spec.final


@pytest.mark.parametrize(
    ("api_key", "newest", "command", "operation"),
    [
        (DELETE_TOPICS, 5, "delete_topics", "delete_topics by topic id"),
        (METADATA, 11, "describe_topics", "describe_topics by topic id"),
    ],
)
def test_topics_by_id_on_a_broker_without_topic_ids_name_the_operation(
    api_key: int, newest: int, command: str, operation: str
) -> None:
    m, cluster = admin(api_ranges={**CLIENT_VERSIONS, api_key: (0, newest)})
    start(m, cluster, lambda now: getattr(m, command)([uuid.UUID(int=1)], now=now))
    (error,) = completed(cluster).results.values()
    assert isinstance(error, UnsupportedVersionError)
    assert operation in str(error) and "name the topics instead" in str(error)
