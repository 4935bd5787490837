"""The operator operations of the AdminMachine driven by hand (no network, no simulator):
the transaction coordinator route (FindCoordinator key_type 1, followed when it moves),
partition-leader routes that follow a moved leader, NOT_CONTROLLER retried, answers that
are not retried, paged and two-step operations, the KIP-848 describe with its classic
fallback, SCRAM salting, and an API the broker lacks."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import hmac
import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.admin import (
    AbortTransactionSpec,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ElectionType,
    GroupDescription,
    MemberToRemove,
    PartitionProducerState,
    ProducerIdAndEpoch,
    QuotaMatchType,
    ScramMechanism,
    TopicPartitionsPage,
    TransactionDescription,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkastate.core.admin.quotas import DescribeClientQuotas, salted_password
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiVersionTable, response_type
from kafkastate.errors import (
    ElectionNotNeededError,
    InvalidUpdateVersionError,
    KafkaConfigurationError,
    KafkaTimeoutError,
    NotControllerError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from kafkastate.structs import TopicPartition
from tests._support.peer import ScriptedCluster, Sent, response_frame
from tests.core.admin.test_admin_machine import (
    BACKOFF,
    _find_answer,
    admin,
    advance_until,
    answer,
    completed,
    entry,
    start,
)

FIND_COORDINATOR, LEAVE_GROUP, DESCRIBE_GROUPS, INIT_PRODUCER_ID = 10, 13, 15, 22
WRITE_TXN_MARKERS, ELECT_LEADERS, ALTER_REASSIGNMENTS = 27, 43, 45
ALTER_QUOTAS, ALTER_SCRAM, UPDATE_FEATURES = 49, 51, 57
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, CONSUMER_GROUP_DESCRIBE = 61, 65, 69
DESCRIBE_TOPIC_PARTITIONS = 75
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _txn_state(sent: Sent, tid: str, code: ErrorCode) -> Any:
    topic = entry(sent, "TopicData", topic="t", partitions=(0,))
    return entry(
        sent,
        "TransactionState",
        error_code=code,
        transactional_id=tid,
        transaction_state="Ongoing",
        transaction_timeout=datetime.timedelta(seconds=60),
        transaction_start_time=datetime.datetime.fromtimestamp(1.5, datetime.UTC),
        producer_id=7,
        producer_epoch=3,
        topics=(topic,) if code == ErrorCode.none else (),
    )


def test_a_transaction_coordinator_is_found_with_key_type_1_and_followed_when_it_moves() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_transactions(["tx"], now=now))
    find = cluster.take(FIND_COORDINATOR)
    assert find.req.body.key_type == 1 and find.req.body.coordinator_keys == ("tx",)
    _find_answer(cluster, find, 2, ErrorCode.none)
    described = cluster.take(DESCRIBE_TRANSACTIONS)
    assert described.node == 2 and described.req.body.transactional_ids == ("tx",)
    answer(
        cluster,
        described,
        transaction_states=(_txn_state(described, "tx", ErrorCode.not_coordinator),),
    )
    find = advance_until(cluster, FIND_COORDINATOR)  # forgotten: found again
    assert find.req.body.key_type == 1
    _find_answer(cluster, find, 1, ErrorCode.none)
    described = cluster.take(DESCRIBE_TRANSACTIONS)
    assert described.node == 1
    answer(cluster, described, transaction_states=(_txn_state(described, "tx", ErrorCode.none),))
    (txn,) = completed(cluster).results.values()
    assert txn == TransactionDescription(
        coordinator_id=1,
        state="Ongoing",
        producer_id=7,
        producer_epoch=3,
        transaction_timeout_ms=60_000,
        transaction_start_time_ms=1500,
        topic_partitions=frozenset({T0}),
    )


def test_an_id_with_no_open_transaction_is_described_with_no_start_time() -> None:
    # An id that only ran init_transactions is Empty and the broker sends its start time as
    # -1 (crafted below into the frame's bytes), which kio refuses unless read as nullable.
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_transactions(["empty"], now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 1, ErrorCode.none)
    described = cluster.take(DESCRIBE_TRANSACTIONS)
    empty = dataclasses.replace(
        _txn_state(described, "empty", ErrorCode.none), transaction_state="Empty", topics=()
    )
    body = build(
        response_type(DESCRIBE_TRANSACTIONS, described.req.version),
        throttle_time=datetime.timedelta(0),
        transaction_states=(empty,),
    )
    frame = response_frame(described.req.correlation_id, body)
    marker = struct.pack(">q", 1500)  # the start time _txn_state sets
    assert frame.count(marker) == 1
    cluster.pending.remove(described)
    m.receive_data(described.node, frame.replace(marker, struct.pack(">q", -1)), now=cluster.now)
    cluster.pump()
    assert completed(cluster).results == {
        "empty": TransactionDescription(
            coordinator_id=1,
            state="Empty",
            producer_id=7,
            producer_epoch=3,
            transaction_timeout_ms=60_000,
            transaction_start_time_ms=None,
            topic_partitions=frozenset(),
        )
    }


def test_a_group_and_a_transactional_id_of_one_name_have_their_own_coordinators() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.fence_producers(["same"], now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 2, ErrorCode.none)
    assert cluster.take(INIT_PRODUCER_ID).node == 2
    m.find_coordinator("same", 0, now=cluster.now)  # the group of that name
    cluster.pump()
    find = cluster.take(FIND_COORDINATOR)
    assert find.req.body.key_type == 0  # not answered from the transaction cache


def test_fencing_retries_concurrent_transactions_at_the_same_coordinator() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.fence_producers(["tx"], now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 2, ErrorCode.none)
    init = cluster.take(INIT_PRODUCER_ID)
    body = init.req.body
    assert (body.transactional_id, body.producer_id, body.producer_epoch) == ("tx", -1, -1)
    t0 = cluster.now
    answer(
        cluster,
        init,
        error_code=ErrorCode.concurrent_transactions,
        producer_id=-1,
        producer_epoch=-1,
    )
    assert m.get_timer() == pytest.approx(t0 + BACKOFF)
    cluster.advance()
    again = cluster.take(INIT_PRODUCER_ID)
    assert again.node == 2
    assert not [s for s in cluster.pending if s.req.api_key == FIND_COORDINATOR]
    answer(cluster, again, error_code=ErrorCode.none, producer_id=7, producer_epoch=4)
    assert completed(cluster).results == {"tx": ProducerIdAndEpoch(producer_id=7, producer_epoch=4)}


def _producers_answer(cluster: ScriptedCluster, sent: Sent, code: ErrorCode) -> None:
    cls = response_type(sent.req.api_key, sent.req.version)
    state = build(
        nested_type(cls, "ProducerState"),
        producer_id=7,
        producer_epoch=3,
        last_sequence=4,
        last_timestamp=1000,
        coordinator_epoch=2,
        current_txn_start_offset=10,
    )
    topics = []
    for t in sent.req.body.topics:
        parts = tuple(
            build(
                nested_type(cls, "PartitionResponse"),
                partition_index=p,
                error_code=code,
                error_message=None,
                active_producers=(state,) if code == ErrorCode.none else (),
            )
            for p in t.partition_indexes
        )
        topics.append(build(nested_type(cls, "TopicResponse"), name=t.name, partitions=parts))
    answer(cluster, sent, topics=tuple(topics))


def test_describe_producers_follows_a_partition_leader_that_moved() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_producers([T1], now=now))
    sent = cluster.take(DESCRIBE_PRODUCERS)
    assert sent.node == 2  # t/1 leads on broker 2
    cluster.topics["t"][1] = (1, 1)
    _producers_answer(cluster, sent, ErrorCode.not_leader_or_follower)
    retry = advance_until(cluster, DESCRIBE_PRODUCERS)
    assert retry.node == 1
    _producers_answer(cluster, retry, ErrorCode.none)
    (state,) = completed(cluster).results.values()
    assert isinstance(state, PartitionProducerState)
    (active,) = state.active_producers
    assert (active.producer_id, active.current_transaction_start_offset) == (7, 10)


def test_abort_transaction_sends_an_abort_marker_to_the_leader() -> None:
    m, cluster = admin()
    spec = AbortTransactionSpec(("t", 1), 7, 3, 2)
    start(m, cluster, lambda now: m.abort_transaction(spec, now=now))
    sent = cluster.take(WRITE_TXN_MARKERS)
    assert sent.node == 2
    (marker,) = sent.req.body.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (7, 3, 2)
    assert marker.transaction_result is False
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("t", (1,))]
    cls = response_type(sent.req.api_key, sent.req.version)
    part = build(
        nested_type(cls, "WritableTxnMarkerPartitionResult"),
        partition_index=1,
        error_code=ErrorCode.none,
    )
    topic = build(nested_type(cls, "WritableTxnMarkerTopicResult"), name="t", partitions=(part,))
    result = build(nested_type(cls, "WritableTxnMarkerResult"), producer_id=7, topics=(topic,))
    cluster.answer(sent, build(cls, markers=(result,)))
    assert completed(cluster).results == {T1: None}


def _reassign_answer(cluster: ScriptedCluster, sent: Sent, code: ErrorCode) -> None:
    parts = tuple(
        entry(
            sent,
            "ReassignablePartitionResponse",
            partition_index=p.partition_index,
            error_code=ErrorCode.none,
            error_message=None,
        )
        for t in sent.req.body.topics
        for p in t.partitions
    )
    topic = entry(sent, "ReassignableTopicResponse", name="t", partitions=parts)
    answer(
        cluster,
        sent,
        error_code=code,
        error_message=None,
        allow_replication_factor_change=True,
        responses=(topic,) if code == ErrorCode.none else (),
    )


def test_not_controller_for_a_whole_reassignment_is_retried_for_each_partition() -> None:
    m, cluster = admin()
    start(
        m,
        cluster,
        lambda now: m.alter_partition_reassignments({T0: [2, 1], T1: None}, now=now),
    )
    sent = cluster.take(ALTER_REASSIGNMENTS)
    (topic,) = sent.req.body.topics
    assert [(p.partition_index, p.replicas) for p in topic.partitions] == [(0, (2, 1)), (1, None)]
    t0 = cluster.now
    _reassign_answer(cluster, sent, ErrorCode.not_controller)
    assert m.get_timer() == pytest.approx(t0 + BACKOFF)
    cluster.advance()
    retry = cluster.take(ALTER_REASSIGNMENTS)
    assert len(retry.req.body.topics[0].partitions) == 2  # still one request
    _reassign_answer(cluster, retry, ErrorCode.none)
    assert completed(cluster).results == {T0: None, T1: None}


def test_a_whole_request_not_controller_until_the_deadline_times_out_naming_it() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.alter_partition_reassignments({T0: [1]}, now=now, timeout=0.6))
    deadline = cluster.now + 0.6
    while m.in_flight:
        if any(s.req.api_key == ALTER_REASSIGNMENTS for s in cluster.pending):
            _reassign_answer(cluster, cluster.take(ALTER_REASSIGNMENTS), ErrorCode.not_controller)
        cluster.advance()
    assert cluster.now == pytest.approx(deadline)
    (error,) = completed(cluster).results.values()
    assert isinstance(error, KafkaTimeoutError) and "alter_partition_reassignments" in str(error)
    assert isinstance(error.__cause__, NotControllerError)


def test_election_not_needed_is_an_answer_and_not_retried() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.elect_leaders(ElectionType.PREFERRED, [T0, T1], now=now))
    sent = cluster.take(ELECT_LEADERS)
    assert sent.req.body.election_type == 0
    results = tuple(
        entry(
            sent,
            "PartitionResult",
            partition_id=p,
            error_code=ErrorCode.election_not_needed if p == 0 else ErrorCode.none,
            error_message=None,
        )
        for p in (0, 1)
    )
    answer(
        cluster,
        sent,
        error_code=ErrorCode.none,
        replica_election_results=(
            entry(sent, "ReplicaElectionResult", topic="t", partition_result=results),
        ),
    )
    done = completed(cluster).results
    assert isinstance(done[T0], ElectionNotNeededError) and done[T1] is None


def _page(sent: Sent, parts: range, cursor: int | None) -> None:
    cls = response_type(sent.req.api_key, sent.req.version)
    partitions = tuple(
        build(
            nested_type(cls, "DescribeTopicPartitionsResponsePartition"),
            error_code=ErrorCode.none,
            partition_index=p,
            leader_id=1,
            leader_epoch=0,
            replica_nodes=(1,),
            isr_nodes=(1,),
            eligible_leader_replicas=None,
            last_known_elr=None,
            offline_replicas=(),
        )
        for p in parts
    )
    topic = build(
        nested_type(cls, "DescribeTopicPartitionsResponseTopic"),
        error_code=ErrorCode.none,
        name="t",
        topic_id=uuid.UUID(int=5),
        is_internal=False,
        partitions=partitions,
        topic_authorized_operations=-(2**31),
    )
    nxt = None
    if cursor is not None:
        nxt = build(nested_type(cls, "Cursor"), topic_name="t", partition_index=cursor)
    return build(cls, throttle_time=datetime.timedelta(0), topics=(topic,), next_cursor=nxt)


def test_describe_topic_partitions_asks_again_from_each_cursor() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_topic_partitions(["t"], now=now, partition_limit=2))
    first = cluster.take(DESCRIBE_TOPIC_PARTITIONS)
    body = first.req.body
    assert body.response_partition_limit == 2 and body.cursor is None
    cluster.answer(first, _page(first, range(0, 2), 2))
    second = cluster.take(DESCRIBE_TOPIC_PARTITIONS)  # at once, no backoff
    assert (second.req.body.cursor.topic_name, second.req.body.cursor.partition_index) == ("t", 2)
    cluster.answer(second, _page(second, range(2, 3), None))
    (page,) = completed(cluster).results.values()
    assert isinstance(page, TopicPartitionsPage) and page.next_cursor is None
    assert [p.partition for p in page.topics["t"].partitions] == [0, 1, 2]
    assert page.topics["t"].topic_id == uuid.UUID(int=5)


def test_one_page_stops_at_the_first_cursor() -> None:
    m, cluster = admin()
    start(
        m,
        cluster,
        lambda now: m.describe_topic_partitions(
            ["t"], now=now, partition_limit=1, cursor=T1, one_page=True
        ),
    )
    sent = cluster.take(DESCRIBE_TOPIC_PARTITIONS)
    assert sent.req.body.cursor.partition_index == 1
    cluster.answer(sent, _page(sent, range(1, 2), 2))
    (page,) = completed(cluster).results.values()
    assert page.next_cursor == TopicPartition("t", 2)
    assert not cluster.pending


def _described_group(sent: Sent, gid: str = "g") -> Any:
    members = tuple(
        entry(
            sent,
            "DescribedGroupMember",
            member_id=mid,
            group_instance_id=instance,
            client_id="c",
            client_host="/h",
            member_metadata=b"",
            member_assignment=b"",
        )
        for mid, instance in (("m-1", None), ("m-2", "static-2"))
    )
    return entry(
        sent,
        "DescribedGroup",
        error_code=ErrorCode.none,
        error_message=None,
        group_id=gid,
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        members=members,
        authorized_operations=-(2**31),
    )


def test_removing_every_member_describes_the_group_then_names_them() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.remove_group_members("g", now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 2, ErrorCode.none)
    describe = cluster.take(DESCRIBE_GROUPS)
    answer(cluster, describe, groups=(_described_group(describe),))
    leave = cluster.take(LEAVE_GROUP)
    assert leave.node == 2 and leave.req.body.group_id == "g"
    sent_members = [(x.member_id, x.group_instance_id) for x in leave.req.body.members]
    assert sent_members == [("m-1", None), ("m-2", "static-2")]
    answer(
        cluster,
        leave,
        error_code=ErrorCode.none,
        members=(
            entry(
                leave,
                "MemberResponse",
                member_id="m-1",
                group_instance_id=None,
                error_code=ErrorCode.none,
            ),
            entry(
                leave,
                "MemberResponse",
                member_id="m-2",
                group_instance_id="static-2",
                error_code=ErrorCode.unknown_member_id,
            ),
        ),
    )
    (removed,) = completed(cluster).results.values()
    assert removed[MemberToRemove(member_id="m-1")] is None
    gone = removed[MemberToRemove(member_id="m-2", group_instance_id="static-2")]
    assert isinstance(gone, UnknownMemberIdError)


def _consumer_group(sent: Sent, gid: str, code: ErrorCode) -> Any:
    cls = response_type(sent.req.api_key, sent.req.version)
    tps = build(
        nested_type(cls, "TopicPartitions"),
        topic_id=uuid.UUID(int=1),
        topic_name="t",
        partitions=(1, 0),
    )
    assignment = build(nested_type(cls, "Assignment"), topic_partitions=(tps,))
    member = build(
        nested_type(cls, "Member"),
        member_id="m",
        instance_id=None,
        rack_id="r1",
        member_epoch=5,
        client_id="c",
        client_host="/h",
        subscribed_topic_names=("t",),
        subscribed_topic_regex=None,
        assignment=assignment,
        target_assignment=assignment,
        member_type=1,
    )
    return build(
        nested_type(cls, "DescribedGroup"),
        error_code=code,
        error_message=None,
        group_id=gid,
        group_state="Stable" if code == ErrorCode.none else "",
        group_epoch=5,
        assignment_epoch=5,
        assignor_name="uniform",
        members=(member,) if code == ErrorCode.none else (),
        authorized_operations=-(2**31),
    )


def test_kip848_groups_are_described_with_consumer_group_describe_others_classically() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_consumer_groups(["g", "h"], now=now))
    for _ in range(2):
        _find_answer(cluster, cluster.take(FIND_COORDINATOR), 2, ErrorCode.none)
    for gid, code in (("g", ErrorCode.none), ("h", ErrorCode.group_id_not_found)):
        described = cluster.take(CONSUMER_GROUP_DESCRIBE)
        assert described.req.body.group_ids == (gid,) and described.node == 2
        answer(cluster, described, groups=(_consumer_group(described, gid, code),))
    classic = cluster.take(DESCRIBE_GROUPS)
    assert classic.req.body.groups == ("h",)  # only the group it did not know
    answer(cluster, classic, groups=(_described_group(classic, "h"),))
    results = completed(cluster).results
    g = results["g"]
    assert isinstance(g, GroupDescription) and g.group_type == "consumer"
    assert (g.protocol, g.group_epoch, g.assignment_epoch) == ("uniform", 5, 5)
    (member,) = g.members
    assert member.assignment is not None and member.assignment.partitions == (T0, T1)
    assert member.subscription is not None and member.subscription.topics == ("t",)
    assert (member.member_epoch, member.rack_id) == (5, "r1")
    h = results["h"]
    assert isinstance(h, GroupDescription) and (h.group_type, h.protocol) == ("classic", "range")
    assert [x.member_id for x in h.members] == ["m-1", "m-2"]


RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)


def test_the_salted_password_is_rfc_5802s_hi_with_the_mechanisms_hash() -> None:
    # RFC 7677's SCRAM-SHA-256 example: the server signature follows from SaltedPassword
    salted = salted_password(ScramMechanism.SCRAM_SHA_256, b"pencil", RFC7677_SALT, 4096)
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    signature = hmac.new(server_key, RFC7677_AUTH_MESSAGE, "sha256").digest()
    assert base64.b64encode(signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    long = salted_password(ScramMechanism.SCRAM_SHA_512, b"pencil", RFC7677_SALT, 4096)
    assert len(long) == hashlib.sha512().digest_size


def _scram_answer(cluster: ScriptedCluster, sent: Sent, users: list[str]) -> None:
    results = tuple(
        entry(
            sent,
            "AlterUserScramCredentialsResult",
            user=u,
            error_code=ErrorCode.none,
            error_message=None,
        )
        for u in users
    )
    answer(cluster, sent, results=results)


def test_scram_changes_are_salted_and_go_one_per_user_per_request() -> None:
    m, cluster = admin()
    changes = [
        UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "pw", 8192),
        UserScramCredentialDeletion("alice", "SCRAM-SHA-512"),
        UserScramCredentialUpsertion("bob", "scram-sha-512", "pw2", salt=b"fixed"),
    ]
    start(m, cluster, lambda now: m.alter_user_scram_credentials(changes, now=now))
    first = cluster.take(ALTER_SCRAM)
    alice, bob = first.req.body.upsertions
    assert (alice.name, alice.mechanism, alice.iterations) == ("alice", 1, 8192)
    assert len(alice.salt) == 32  # drawn from the machine's rng
    assert alice.salted_password == hashlib.pbkdf2_hmac("sha256", b"pw", alice.salt, 8192)
    assert (bob.salt, bob.mechanism) == (b"fixed", 2)
    assert bob.salted_password == hashlib.pbkdf2_hmac("sha512", b"pw2", b"fixed", 4096)
    assert first.req.body.deletions == ()
    assert b"pw" not in bytes(repr(first.req.body), "utf-8").split(b"'")  # never the password
    _scram_answer(cluster, first, ["alice", "bob"])
    second = cluster.take(ALTER_SCRAM)  # alice's next change, at once
    assert [(d.name, d.mechanism) for d in second.req.body.deletions] == [("alice", 2)]
    assert second.req.body.upsertions == ()
    _scram_answer(cluster, second, ["alice"])
    assert completed(cluster).results == {"alice": None, "bob": None}


def test_bad_scram_and_quota_arguments_are_refused_at_once() -> None:
    with pytest.raises(KafkaConfigurationError, match="iterations"):
        UserScramCredentialUpsertion("u", "SCRAM-SHA-256", "pw", 100)
    with pytest.raises(KafkaConfigurationError, match="mechanism"):
        UserScramCredentialDeletion("u", "MD5")
    with pytest.raises(KafkaConfigurationError, match="at least one"):
        ClientQuotaAlteration({}, {})
    m, _ = admin()
    twice = [UserScramCredentialDeletion("u", "SCRAM-SHA-256")] * 2
    with pytest.raises(KafkaConfigurationError, match="twice"):
        m.alter_user_scram_credentials(twice, now=0.0)
    same = [ClientQuotaAlteration({"user": "u"}, {"a": 1.0})] * 2
    with pytest.raises(KafkaConfigurationError, match="twice"):
        m.alter_client_quotas(same, now=0.0)


def test_quota_entities_are_keyed_by_sorted_pairs() -> None:
    m, cluster = admin()
    change = ClientQuotaAlteration({"user": "u", "client-id": None}, {"producer_byte_rate": None})
    start(m, cluster, lambda now: m.alter_client_quotas([change], now=now))
    sent = cluster.take(ALTER_QUOTAS)
    (e,) = sent.req.body.entries
    assert [(d.entity_type, d.entity_name) for d in e.entity] == [
        ("client-id", None),
        ("user", "u"),
    ]
    assert [(o.key, o.remove) for o in e.ops] == [("producer_byte_rate", True)]
    entity = tuple(
        entry(sent, "EntityData", entity_type=t, entity_name=n)
        for t, n in (("user", "u"), ("client-id", None))  # the broker's order
    )
    answer(
        cluster,
        sent,
        entries=(
            entry(sent, "EntryData", error_code=ErrorCode.none, error_message=None, entity=entity),
        ),
    )
    assert completed(cluster).results == {(("client-id", None), ("user", "u")): None}


def test_a_whole_request_error_of_update_features_is_every_features_answer() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.update_features({"a": 2, "b": 1}, now=now))
    sent = cluster.take(UPDATE_FEATURES)
    assert [(f.feature, f.max_version_level) for f in sent.req.body.feature_updates] == [
        ("a", 2),
        ("b", 1),
    ]
    answer(cluster, sent, error_code=ErrorCode.invalid_update_version, error_message="no")
    results = completed(cluster).results
    assert all(isinstance(results[k], InvalidUpdateVersionError) for k in ("a", "b"))


def test_an_api_the_broker_lacks_fails_naming_the_operation() -> None:
    ranges = {k: v for k, v in CLIENT_VERSIONS.items() if k != DESCRIBE_TOPIC_PARTITIONS}
    m, cluster = admin(api_ranges=ranges)
    start(m, cluster, lambda now: m.describe_topic_partitions(now=now))
    (error,) = completed(cluster).results.values()
    assert isinstance(error, UnsupportedVersionError)
    assert "describe_topic_partitions is not supported by this broker" in str(error)


def test_a_broker_with_kip848_switched_off_gets_the_classic_describe() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_consumer_groups(["h"], now=now))
    _find_answer(cluster, cluster.take(FIND_COORDINATOR), 1, ErrorCode.none)
    described = cluster.take(CONSUMER_GROUP_DESCRIBE)
    answer(
        cluster,
        described,
        groups=(_consumer_group(described, "h", ErrorCode.unsupported_version),),
    )
    classic = cluster.take(DESCRIBE_GROUPS)
    answer(cluster, classic, groups=(_described_group(classic, "h"),))
    (group,) = completed(cluster).results.values()
    assert isinstance(group, GroupDescription) and group.group_type == "classic"


def test_a_quota_filter_with_a_name_matches_exactly() -> None:
    named, every = ClientQuotaFilterComponent("client-id", "app"), ClientQuotaFilterComponent("ip")
    assert (named.match_type, every.match_type) == (QuotaMatchType.EXACT, QuotaMatchType.ANY)
    request = DescribeClientQuotas([named, every]).request(
        ApiVersionTable(CLIENT_VERSIONS), [None], 30.0
    )
    sent = [(c.entity_type, c.match_type, c.match) for c in request.components]
    assert sent == [("client-id", 0, "app"), ("ip", 2, None)]
