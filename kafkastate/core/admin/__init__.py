"""The sans-IO admin client: :class:`AdminMachine` and the values its commands take and
its results hold (request routing and per-resource results; see ``machine.py``)."""

from kafkastate.core.admin.machine import (
    AdminConfig,
    AdminEvent,
    AdminMachine,
    AdminOperationCompleted,
    OpId,
)
from kafkastate.core.admin.types import (
    AlterConfigOp,
    AlterConfigOpType,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    CreatedTopic,
    GroupDescription,
    GroupListing,
    ListedOffset,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    PartitionDescription,
    TopicDescription,
)

__all__ = [
    "AdminConfig",
    "AdminEvent",
    "AdminMachine",
    "AdminOperationCompleted",
    "AlterConfigOp",
    "AlterConfigOpType",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "ListedOffset",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "OpId",
    "PartitionDescription",
    "TopicDescription",
]
