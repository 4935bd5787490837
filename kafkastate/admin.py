"""The admin client's values, for every runtime: what its operations take (:class:`NewTopic`,
:class:`NewPartitions`, :class:`ConfigResource`, :class:`ACL`, :class:`OffsetSpec`...) and
what their per-resource results hold (:class:`TopicDescription`, :class:`GroupDescription`,
:class:`TransactionDescription`...).

The admin clients themselves are on the faces: ``AIOKafkaAdminClient`` and ``open_admin``
(:mod:`kafkastate.asyncio`), ``open_admin`` (:mod:`kafkastate.anyio`,
:mod:`kafkastate.trio`), ``KafkaAdminClient`` (:mod:`kafkastate.sync`); each face
re-exports every name of this module. The values are the core's
(:mod:`kafkastate.core.admin`): the machine checks them and routes them (docs/admin.md).
"""

# ruff: noqa: F405 (the names of __all__ come from the core modules star-imported below)
from __future__ import annotations

from kafkastate.core.admin.acls import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkastate.core.admin.brokers import QuorumDescription, QuorumReplica
from kafkastate.core.admin.quotas import (
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    QuotaEntity,
    QuotaMatchType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkastate.core.admin.replicas import *  # noqa: F403
from kafkastate.core.admin.transactions import *  # noqa: F403
from kafkastate.core.admin.types import *  # noqa: F403

__all__ = [
    # what the operations take
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "AbortTransactionSpec",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClientQuotaAlteration",
    "ClientQuotaFilterComponent",
    "ConfigFilterType",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSourceType",
    "ConfigType",
    "ElectionType",
    "FeatureUpdate",
    "FeatureUpdateType",
    "GroupState",
    "GroupType",
    "MemberToRemove",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "OffsetTimestamp",
    "QuotaMatchType",
    "RecordsToDelete",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "ScramMechanism",
    "TransactionState",
    "UpdateFeatureType",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    # what their results hold
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "CreatedTopic",
    "FeatureMetadata",
    "GroupDescription",
    "GroupListing",
    "ListedOffset",
    "LogDirDescription",
    "MemberDescription",
    "PartitionDescription",
    "PartitionProducerState",
    "PartitionReassignment",
    "ProducerIdAndEpoch",
    "ProducerState",
    "QuorumDescription",
    "QuorumReplica",
    "QuotaEntity",
    "ReplicaInfo",
    "ScramCredentialInfo",
    "TopicDescription",
    "TopicPartitionsPage",
    "TransactionDescription",
    "TransactionListing",
]
