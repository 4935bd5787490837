"""ACLs: kafka-python's value types and the DescribeAcls / CreateAcls / DeleteAcls
operations of the :class:`~kafkastate.core.admin.AdminMachine`.

The types keep kafka-python's names and argument order (``ACL(principal, host,
operation, permission_type, resource_pattern)``); the enums are the protocol's codes. Every
ACL request goes to any broker (the authorizer's state is the cluster's metadata). A
cluster without an authorizer answers SECURITY_DISABLED: each resource's
:class:`~kafkastate.errors.SecurityDisabledError`.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, Final

import attrs

from kafkastate.core.admin.operations import Operation, error_of
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiVersionTable

__all__ = [
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "CreateAcls",
    "DeleteAcls",
    "DescribeAcls",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
]

DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31


class ResourceType(enum.IntEnum):
    """What an ACL protects."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class ACLOperation(enum.IntEnum):
    """What an ACL allows or denies."""

    UNKNOWN = 0  # (the protocol's; a broker refuses it in an ACL)
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ACLPermissionType(enum.IntEnum):
    """Allow or deny."""

    UNKNOWN = 0  # (the protocol's; a broker refuses it in an ACL)
    ANY = 1
    DENY = 2
    ALLOW = 3


class ACLResourcePatternType(enum.IntEnum):
    """How a resource name matches (KIP-290)."""

    UNKNOWN = 0  # (the protocol's; a broker refuses it in an ACL)
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


@attrs.frozen
class ResourcePatternFilter:
    """Resources to match (``ANY`` and None match everything)."""

    resource_type: ResourceType = attrs.field(converter=ResourceType)
    """The kind of resource."""
    resource_name: str | None
    """Its name (None: any)."""
    pattern_type: ACLResourcePatternType = attrs.field(
        default=ACLResourcePatternType.LITERAL, converter=ACLResourcePatternType
    )
    """How the name matches."""


@attrs.frozen
class ResourcePattern(ResourcePatternFilter):
    """One resource pattern (no ``ANY``, a name)."""


@attrs.frozen
class ACLFilter:
    """ACLs to describe or delete (``ANY`` and None match everything)."""

    principal: str | None
    """``User:alice`` (None: any)."""
    host: str | None
    """``*`` or an address (None: any)."""
    operation: ACLOperation = attrs.field(converter=ACLOperation)
    """The operation."""
    permission_type: ACLPermissionType = attrs.field(converter=ACLPermissionType)
    """Allow or deny."""
    resource_pattern: ResourcePatternFilter
    """The resources."""


@attrs.frozen
class ACL(ACLFilter):
    """One ACL: ``principal`` may (or may not) do ``operation`` on the resources from
    ``host``."""


def _filter_fields(f: ACLFilter) -> dict[str, Any]:
    p = f.resource_pattern
    return {
        "resource_type_filter": int(p.resource_type),
        "resource_name_filter": p.resource_name,
        "pattern_type_filter": int(p.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission_type),
    }


def _acl(entry: Any, resource: Any) -> ACL:
    return ACL(
        entry.principal,
        entry.host,
        int(entry.operation),
        int(entry.permission_type),
        ResourcePattern(
            int(resource.resource_type),
            resource.resource_name,
            int(getattr(resource, "pattern_type", ACLResourcePatternType.LITERAL)),
        ),
    )


@attrs.define
class DescribeAcls(Operation):
    """DescribeAcls for one filter (its key)."""

    name: ClassVar[str] = "describe_acls"
    batch: ClassVar[bool] = False
    acl_filter: ACLFilter

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [self.acl_filter]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        return build(versions.request_type(DESCRIBE_ACLS), **_filter_fields(self.acl_filter))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, getattr(response, "error_message", None))
        acls = [_acl(a, r) for r in response.resources for a in r.acls]
        return {self.acl_filter: error or acls}


@attrs.define
class CreateAcls(Operation):
    """CreateAcls, one key per ACL (answered in request order)."""

    name: ClassVar[str] = "create_acls"
    acls: Sequence[ACL]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(dict.fromkeys(self.acls))

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(CREATE_ACLS)
        creation = nested_type(cls, "AclCreation")
        return build(
            cls,
            creations=tuple(
                build(
                    creation,
                    resource_type=int(a.resource_pattern.resource_type),
                    resource_name=a.resource_pattern.resource_name,
                    resource_pattern_type=int(a.resource_pattern.pattern_type),
                    principal=a.principal,
                    host=a.host,
                    operation=int(a.operation),
                    permission_type=int(a.permission_type),
                )
                for a in keys
            ),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            key: error_of(r.error_code, r.error_message)
            for key, r in zip(keys, response.results, strict=False)
        }


@attrs.define
class DeleteAcls(Operation):
    """DeleteAcls, one key per filter (answered in request order): the ACLs it deleted."""

    name: ClassVar[str] = "delete_acls"
    filters: Sequence[ACLFilter]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(dict.fromkeys(self.filters))

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DELETE_ACLS)
        entry = nested_type(cls, "DeleteAclsFilter")
        return build(cls, filters=tuple(build(entry, **_filter_fields(f)) for f in keys))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, r in zip(keys, response.filter_results, strict=False):
            out[key] = error_of(r.error_code, r.error_message) or [
                _acl(m, m) for m in r.matching_acls
            ]
        return out
