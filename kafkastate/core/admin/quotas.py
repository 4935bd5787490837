"""Client quotas (KIP-546) and SCRAM credentials (KIP-554): their value types and the
DescribeClientQuotas / AlterClientQuotas / DescribeUserScramCredentials /
AlterUserScramCredentials operations of the :class:`~kafkastate.core.admin.AdminMachine`.

Every one goes to any broker: in KRaft the broker answers describes from its metadata
image and forwards changes to the active controller (KIP-590).

A SCRAM credential travels salted, never as the password: the client computes
``SaltedPassword = Hi(password, salt, iterations)`` of RFC 5802, which is PBKDF2 with the
HMAC of the mechanism's hash (SHA-256 or SHA-512), and sends it with the salt and the
iteration count (KIP-554). The salt comes from the machine's ``rng`` unless given.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from kafkastate.core.admin.operations import Again, Operation, error_of
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiVersionTable
from kafkastate.errors import KafkaConfigurationError

__all__ = [
    "ClientQuotaAlteration",
    "ClientQuotaFilterComponent",
    "QuotaEntity",
    "QuotaMatchType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "quota_entity",
    "salted_password",
]

DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51

# --------------------------------------------------------------------------- quotas

QuotaEntity = tuple[tuple[str, str | None], ...]
"""A quota's entity: ``(entity type, name)`` pairs sorted by type, e.g.
``(("client-id", "app"), ("user", "alice"))``; a None name is the type's default entity."""


def quota_entity(
    entity: Mapping[str, str | None] | Iterable[tuple[str, str | None]],
) -> QuotaEntity:
    """An entity (a dict ``{"user": "alice", "client-id": None}`` or pairs) as the
    hashable :data:`QuotaEntity` results are keyed by.

    Raises:
        KafkaConfigurationError: an empty entity, or a type that is not a str.
    """
    pairs = list(entity.items()) if isinstance(entity, Mapping) else list(entity)
    if not pairs:
        raise KafkaConfigurationError("a client quota entity names at least one entity type")
    for kind, name in pairs:
        if not isinstance(kind, str) or not (name is None or isinstance(name, str)):
            raise KafkaConfigurationError(f"bad quota entity part {(kind, name)!r}")
    return tuple(sorted(((str(k), n) for k, n in pairs), key=lambda pair: pair[0]))


class QuotaMatchType(enum.IntEnum):
    """How a filter component matches an entity type's name."""

    EXACT = 0
    """The name given."""
    DEFAULT = 1
    """The type's default entity."""
    ANY = 2
    """Any name, the default included."""


@attrs.frozen
class ClientQuotaFilterComponent:
    """One part of a ``describe_client_quotas`` filter.

    Args:
        entity_type: ``"user"``, ``"client-id"`` or ``"ip"``.
        match: the name for EXACT.
        match_type: EXACT (the default when ``match`` is given), DEFAULT or ANY.
    """

    entity_type: str
    """The entity type it constrains."""
    match: str | None = None
    """The name it matches (EXACT only)."""
    match_type: QuotaMatchType = attrs.field(
        converter=QuotaMatchType,
        default=attrs.Factory(
            lambda self: QuotaMatchType.ANY if self.match is None else QuotaMatchType.EXACT,
            takes_self=True,
        ),
    )
    """How it matches."""


@attrs.frozen
class ClientQuotaAlteration:
    """Changes of one entity's quotas (``alter_client_quotas``).

    Args:
        entity: e.g. ``{"client-id": "app"}``; a None name is the type's default.
        ops: quota name (``producer_byte_rate``, ``consumer_byte_rate``,
            ``request_percentage``, ``controller_mutation_rate``,
            ``connection_creation_rate``) -> its new value, or None to remove it.
    """

    entity: QuotaEntity = attrs.field(converter=quota_entity)
    """Whose quotas."""
    ops: Mapping[str, float | None] = attrs.field(factory=dict)
    """Quota name -> value or None (remove)."""


@attrs.define
class DescribeClientQuotas(Operation):
    """DescribeClientQuotas at any broker; the one key None: entity -> {quota: value}."""

    name: ClassVar[str] = "describe_client_quotas"
    components: Sequence[ClientQuotaFilterComponent]
    strict: bool = False

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_CLIENT_QUOTAS)
        part = nested_type(cls, "ComponentData")
        return build(
            cls,
            components=tuple(
                build(
                    part,
                    entity_type=c.entity_type,
                    match_type=int(c.match_type),
                    match=c.match if c.match_type is QuotaMatchType.EXACT else None,
                )
                for c in self.components
            ),
            strict=self.strict,
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, response.error_message)
        if error is not None:
            return {None: error}
        found: dict[QuotaEntity, dict[str, float]] = {}
        for e in response.entries or ():
            entity = quota_entity([(d.entity_type, d.entity_name) for d in e.entity])
            found[entity] = {v.key: float(v.value) for v in e.values}
        return {None: found}


@attrs.define
class AlterClientQuotas(Operation):
    """AlterClientQuotas at any broker, one key per entity."""

    name: ClassVar[str] = "alter_client_quotas"
    alterations: Mapping[QuotaEntity, ClientQuotaAlteration]
    validate_only: bool = False

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.alterations)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(ALTER_CLIENT_QUOTAS)
        entry_cls = nested_type(cls, "EntryData")
        entity_cls = nested_type(cls, "EntityData")
        op_cls = nested_type(cls, "OpData")
        entries = []
        for key in keys:
            alteration = self.alterations[key]
            entries.append(
                build(
                    entry_cls,
                    entity=tuple(build(entity_cls, entity_type=t, entity_name=n) for t, n in key),
                    ops=tuple(
                        build(op_cls, key=q, value=0.0 if v is None else float(v), remove=v is None)
                        for q, v in sorted(alteration.ops.items())
                    ),
                )
            )
        return build(cls, entries=tuple(entries), validate_only=self.validate_only)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            quota_entity([(d.entity_type, d.entity_name) for d in e.entity]): error_of(
                e.error_code, e.error_message
            )
            for e in response.entries
        }


# ----------------------------------------------------------------------------- SCRAM

_ITERATIONS: Final = (4096, 16384)  # what Kafka's ScramMechanism accepts


class ScramMechanism(enum.IntEnum):
    """A SCRAM mechanism (the protocol's codes)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def hash_name(self) -> str:
        """The hashlib name of its hash."""
        if self is ScramMechanism.UNKNOWN:
            raise KafkaConfigurationError("the UNKNOWN SCRAM mechanism has no hash")
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"


def _mechanism(value: Any) -> ScramMechanism:
    if isinstance(value, ScramMechanism):
        mechanism = value
    elif isinstance(value, int) and not isinstance(value, bool):
        mechanism = ScramMechanism(value)
    else:
        try:
            mechanism = ScramMechanism[str(value).upper().replace("-", "_")]
        except KeyError:
            raise KafkaConfigurationError(f"unknown SCRAM mechanism {value!r}") from None
    if mechanism is ScramMechanism.UNKNOWN:
        raise KafkaConfigurationError("a SCRAM credential needs SCRAM-SHA-256 or SCRAM-SHA-512")
    return mechanism


def salted_password(
    mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int
) -> bytes:
    """RFC 5802 ``Hi(password, salt, i)``: PBKDF2 with the HMAC of the mechanism's hash,
    as long as the hash's output (what the broker stores, KIP-554)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def _password(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _iterations(_inst: object, _attr: Any, value: int) -> None:
    lo, hi = _ITERATIONS
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise KafkaConfigurationError(f"SCRAM iterations must be {lo}..{hi}, got {value!r}")


@attrs.frozen
class UserScramCredentialUpsertion:
    """Add or replace a user's credential for one mechanism (kafka-python's order).

    Args:
        user: the user name.
        mechanism: ``"SCRAM-SHA-256"``, ``"SCRAM-SHA-512"`` or a ScramMechanism.
        password: the password (str is UTF-8 encoded); only its salted form is sent.
        iterations: PBKDF2 iterations, 4096..16384.
        salt: the salt (None: the admin client draws 32 random bytes).
    """

    user: str
    """Whose credential."""
    mechanism: ScramMechanism = attrs.field(converter=_mechanism)
    """Which mechanism."""
    password: bytes = attrs.field(converter=_password, repr=False)
    """The password (never sent)."""
    iterations: int = attrs.field(default=4096, validator=_iterations)
    """PBKDF2 iterations."""
    salt: bytes | None = None
    """The salt, or None for a random one."""


@attrs.frozen
class UserScramCredentialDeletion:
    """Delete a user's credential for one mechanism."""

    user: str
    """Whose credential."""
    mechanism: ScramMechanism = attrs.field(converter=_mechanism)
    """Which mechanism."""


@attrs.frozen(order=True)
class ScramCredentialInfo:
    """One of a user's SCRAM credentials, as described (never the secret)."""

    mechanism: ScramMechanism
    """Its mechanism."""
    iterations: int
    """Its iteration count."""


@attrs.frozen
class _Salted:
    mechanism: ScramMechanism
    iterations: int
    salt: bytes
    salted: bytes


@attrs.define
class DescribeUserScramCredentials(Operation):
    """DescribeUserScramCredentials at any broker; one key per user, or the key None for
    every user with a credential (a dict user -> its credentials)."""

    name: ClassVar[str] = "describe_user_scram_credentials"
    users: Sequence[str] | None = None

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None] if self.users is None else list(self.users)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_USER_SCRAM_CREDENTIALS)
        if keys == [None]:
            return build(cls, users=None)
        user_cls = nested_type(cls, "UserName")
        return build(cls, users=tuple(build(user_cls, name=u) for u in keys))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, response.error_message)
        if error is not None:
            return dict.fromkeys(keys, error)
        users: dict[str, Any] = {}
        for r in response.results:
            infos = sorted(
                ScramCredentialInfo(ScramMechanism(int(c.mechanism)), int(c.iterations))
                for c in r.credential_infos
            )
            users[r.user] = error_of(r.error_code, r.error_message, user=r.user) or tuple(infos)
        if keys == [None]:
            return {None: users}
        return users


@attrs.define
class AlterUserScramCredentials(Operation):
    """AlterUserScramCredentials at any broker, one key per user. The broker refuses a
    user named twice in one request (DUPLICATE_RESOURCE), so a user's changes go one per
    request, in order (each next one once the one before succeeded); users share requests.
    A user's outcome is its first error, or None when every change of it succeeded."""

    name: ClassVar[str] = "alter_user_scram_credentials"
    changes: Mapping[str, Sequence[ScramMechanism | _Salted]]
    """User -> its changes: a mechanism to delete, or a salted credential to upsert."""
    _done: dict[str, int] = attrs.field(factory=dict)

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.changes)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(ALTER_USER_SCRAM_CREDENTIALS)
        deletion = nested_type(cls, "ScramCredentialDeletion")
        upsertion = nested_type(cls, "ScramCredentialUpsertion")
        deletions, upsertions = [], []
        for user in keys:
            change = self.changes[user][self._done.get(user, 0)]
            if isinstance(change, _Salted):
                upsertions.append(
                    build(
                        upsertion,
                        name=user,
                        mechanism=int(change.mechanism),
                        iterations=change.iterations,
                        salt=change.salt,
                        salted_password=change.salted,
                    )
                )
            else:
                deletions.append(build(deletion, name=user, mechanism=int(change)))
        return build(cls, deletions=tuple(deletions), upsertions=tuple(upsertions))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for r in response.results:
            user = str(r.user)
            error = error_of(r.error_code, r.error_message, user=user)
            if error is None and user in self.changes:
                self._done[user] = self._done.get(user, 0) + 1
                if self._done[user] < len(self.changes[user]):
                    out[user] = Again()
                    continue
            out[user] = error
        return out


def scram_alterations(
    alterations: Sequence[UserScramCredentialUpsertion | UserScramCredentialDeletion],
    draw_salt: Any,
) -> AlterUserScramCredentials:
    """The operation for ``alterations``, passwords salted (``draw_salt()``: a fresh salt).

    Raises:
        KafkaConfigurationError: not an upsertion or deletion, or one user's mechanism
            named twice (the broker refuses that as DUPLICATE_RESOURCE).
    """
    changes: dict[str, list[ScramMechanism | _Salted]] = {}
    seen: set[tuple[str, ScramMechanism]] = set()
    for a in alterations:
        if not isinstance(a, UserScramCredentialUpsertion | UserScramCredentialDeletion):
            raise KafkaConfigurationError(
                "alter_user_scram_credentials takes UserScramCredentialUpsertion and "
                f"UserScramCredentialDeletion objects, not {a!r}"
            )
        if (a.user, a.mechanism) in seen:
            raise KafkaConfigurationError(f"{a.mechanism.name} of user {a.user!r} given twice")
        seen.add((a.user, a.mechanism))
        if isinstance(a, UserScramCredentialDeletion):
            changes.setdefault(a.user, []).append(a.mechanism)
            continue
        salt = a.salt if a.salt is not None else draw_salt()
        salted = salted_password(a.mechanism, a.password, salt, a.iterations)
        changes.setdefault(a.user, []).append(_Salted(a.mechanism, a.iterations, salt, salted))
    return AlterUserScramCredentials(changes)
