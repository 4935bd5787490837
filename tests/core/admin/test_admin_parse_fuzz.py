"""Fuzzing what the admin client reads out of a decoded response: every operation's
``parse`` (through :func:`~kafkastate.core.admin.operations.parse_outcomes`, as the
machine calls it), on responses of every version the operation sends.

The byte-level response fuzzer (tests/core/protocol/test_response_fuzz.py) shows that
broken bytes become a RemoteProtocolError; these inputs are the other half: responses that
decode, with values a broker should not send (negative counts and ids, unknown error codes
and enum values, empty or odd names, out-of-range timestamps). Each input is either a
fresh random valid entity of the response schema (``build_entity``) or a byte mutation of
one, decoded first. The only allowed outcomes: each key's value or KafkaError, or a
KafkaError for the whole response.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kafkastate.core.admin import acls, brokers, quotas, replicas, transactions
from kafkastate.core.admin import operations as ops
from kafkastate.core.admin.types import ConfigResource, ConfigResourceType, MemberToRemove
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol.framing import decode_body, encode_body
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiVersionTable, response_type
from kafkastate.errors import KafkaError
from kafkastate.structs import OffsetAndMetadata, TopicPartition, TopicPartitionReplica
from tests._support.fuzzing import build_entity, derive, fuzz_count, run_mutations

TP = TopicPartition("t", 0)
ACL_FILTER = acls.ACLFilter(
    principal=None,
    host=None,
    operation=acls.ACLOperation.ANY,
    permission_type=acls.ACLPermissionType.ANY,
    resource_pattern=acls.ResourcePatternFilter(
        acls.ResourceType.ANY, None, acls.ACLResourcePatternType.ANY
    ),
)
ACL = acls.ACL(
    principal="User:a",
    host="*",
    operation=acls.ACLOperation.READ,
    permission_type=acls.ACLPermissionType.ALLOW,
    resource_pattern=acls.ResourcePattern(
        acls.ResourceType.TOPIC, "t", acls.ACLResourcePatternType.LITERAL
    ),
)
CONFIG = ConfigResource(ConfigResourceType.TOPIC, "t")

# One instance of every admin operation, with keys a random response may or may not name.
OPERATIONS: dict[str, Callable[[], ops.Operation]] = {
    "CreateTopics": lambda: ops.CreateTopics({"t": NewTopic("t", 1, 1)}),
    "DeleteTopics": lambda: ops.DeleteTopics(["t", "a"]),
    "DescribeTopics": lambda: ops.DescribeTopics(["t"]),
    "DescribeTopics(all)": lambda: ops.DescribeTopics(None),
    "DescribeCluster": ops.DescribeCluster,
    "CreatePartitions": lambda: ops.CreatePartitions({"t": ops.NewPartitions(3)}),
    "DescribeConfigs": lambda: ops.DescribeConfigs(ops._config_keys([CONFIG])),
    "AlterConfigs": lambda: ops.AlterConfigs(ops._config_keys([CONFIG])),
    "ListGroups": lambda: ops.ListGroups(broker_ids=[1]),
    "FindCoordinator": lambda: ops.FindCoordinator("g"),
    "DescribeGroups": lambda: ops.DescribeGroups(["g", "a"]),
    "DeleteGroups": lambda: ops.DeleteGroups(["g"]),
    "ListGroupOffsets": lambda: ops.ListGroupOffsets("g"),
    "AlterGroupOffsets": lambda: ops.AlterGroupOffsets("g", {TP: OffsetAndMetadata(5, "")}),
    "DeleteGroupOffsets": lambda: ops.DeleteGroupOffsets("g", [TP]),
    "RemoveGroupMembers": lambda: ops.RemoveGroupMembers("g", [MemberToRemove(member_id="m")]),
    "ListOffsets": lambda: ops.ListOffsets({TP: -1}),
    "DeleteRecords": lambda: ops.DeleteRecords({TP: 5}),
    "DescribeLogDirs": lambda: ops.DescribeLogDirs(broker_ids=[1]),
    "DescribeAcls": lambda: acls.DescribeAcls(ACL_FILTER),
    "CreateAcls": lambda: acls.CreateAcls([ACL]),
    "DeleteAcls": lambda: acls.DeleteAcls([ACL_FILTER]),
    "DescribeQuorum": brokers.DescribeQuorum,
    "AlterReplicaLogDirs": lambda: brokers.AlterReplicaLogDirs(
        {TopicPartitionReplica("t", 0, 1): "/d"}
    ),
    "BrokerApiVersions": lambda: brokers.BrokerApiVersions(broker_ids=[1]),
    "ListConfigResources": brokers.ListConfigResources,
    "DescribeClientQuotas": lambda: quotas.DescribeClientQuotas(
        [quotas.ClientQuotaFilterComponent("user")]
    ),
    "AlterClientQuotas": lambda: quotas.AlterClientQuotas(
        {(("user", "a"),): quotas.ClientQuotaAlteration({"user": "a"}, {"consumer_byte_rate": 1})}
    ),
    "DescribeUserScramCredentials": lambda: quotas.DescribeUserScramCredentials(["a"]),
    "AlterPartitionReassignments": lambda: replicas.AlterPartitionReassignments({TP: [1, 2]}),
    "ListPartitionReassignments": lambda: replicas.ListPartitionReassignments([TP]),
    "ElectLeaders": lambda: replicas.ElectLeaders(replicas.ElectionType.PREFERRED, [TP]),
    "DescribeTopicPartitions": lambda: replicas.DescribeTopicPartitions(["t"]),
    "DescribeFeatures": replicas.DescribeFeatures,
    "UpdateFeatures": lambda: replicas.UpdateFeatures({"f": replicas.FeatureUpdate(1)}),
    "ListTransactions": lambda: transactions.ListTransactions(broker_ids=[1]),
    "DescribeTransactions": lambda: transactions.DescribeTransactions(["x", "y"]),
    "DescribeProducers": lambda: transactions.DescribeProducers([TP]),
    "AbortTransaction": lambda: transactions.AbortTransaction(
        transactions.AbortTransactionSpec(TP, producer_id=1, producer_epoch=0)
    ),
    "FenceProducers": lambda: transactions.FenceProducers(["x"]),
}


def cluster() -> ClusterMetadata:
    return ClusterMetadata()


def response_classes(spec: ops.Operation, keys: Sequence[Any]) -> list[type[Any]]:
    """The response type of every version the operation would send."""
    out: list[type[Any]] = []
    for api_key, (lo, hi) in CLIENT_VERSIONS.items():
        for version in range(lo, hi + 1):
            table = ApiVersionTable({api_key: (lo, version)})
            try:
                request = spec.request(table, keys, 30.0)
            except (KafkaError, KeyError):
                continue  # the operation does not use this API (or needs a newer version)
            if request is None or int(request.__api_key__) != api_key:
                continue
            out.append(response_type(api_key, int(request.__version__)))
    return list(dict.fromkeys(out))


@pytest.mark.fuzz_loop
@pytest.mark.parametrize("name", list(OPERATIONS))
def test_parse_of_random_responses(name: str) -> None:
    spec = OPERATIONS[name]()
    keys = spec.keys(cluster())
    classes = response_classes(spec, keys)
    assert classes, f"{name} sends no request"
    rng = random.Random(f"admin-{name}")
    seeds = [encode_body(build_entity(cls, rng)) for cls in classes]
    index = {id(seed): cls for seed, cls in zip(seeds, classes, strict=True)}
    chosen: list[type[Any]] = [classes[0]]

    def derive_response(seed: bytes, rng: random.Random, seeds: Sequence[bytes]) -> bytes:
        chosen[0] = index[id(seed)]
        if rng.random() < 0.5:
            return encode_body(build_entity(chosen[0], rng))
        return derive(seed, rng, ())

    def parse(data: bytes) -> object:
        response = decode_body(chosen[0], memoryview(data), 0)
        # each input answers an operation of its own: an operation keeps what its pages
        # found so far (DescribeTopicPartitions), and a shared one would carry every earlier
        # input's topics into the next (a dict growing with the run, copied by each parse)
        return ops.parse_outcomes(OPERATIONS[name](), response, keys, 1)

    run_mutations(
        parse,
        seeds,
        count=fuzz_count(50),
        seed=f"admin-parse-{name}",
        derive_input=derive_response,
    )
