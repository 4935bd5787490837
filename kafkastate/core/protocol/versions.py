"""The per-API version table: what we speak, what the broker speaks, what we send.

After the ApiVersions handshake each request uses the highest version both sides
support. No overlap raises :class:`~kafkastate.errors.UnsupportedVersionError` naming the
API and both ranges. Our side's range per API is kio's (the schemas kafkastate is built
against), narrowed by :data:`CLIENT_OVERRIDES` where we deliberately refuse versions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map

from kafkastate.errors import UnsupportedVersionError

__all__ = [
    "CLIENT_OVERRIDES",
    "CLIENT_VERSIONS",
    "ApiKey",
    "ApiVersionTable",
    "api_name",
    "kafka_release",
    "request_type",
    "response_type",
]


class ApiKey:
    """API keys used by name in kafkastate (the full list is in kio's index)."""

    PRODUCE: Final = 0
    FETCH: Final = 1
    LIST_OFFSETS: Final = 2
    METADATA: Final = 3
    OFFSET_COMMIT: Final = 8
    OFFSET_FETCH: Final = 9
    FIND_COORDINATOR: Final = 10
    JOIN_GROUP: Final = 11
    HEARTBEAT: Final = 12
    LEAVE_GROUP: Final = 13
    SYNC_GROUP: Final = 14
    SASL_HANDSHAKE: Final = 17
    API_VERSIONS: Final = 18
    CREATE_TOPICS: Final = 19
    DELETE_TOPICS: Final = 20
    INIT_PRODUCER_ID: Final = 22
    OFFSET_FOR_LEADER_EPOCH: Final = 23
    SASL_AUTHENTICATE: Final = 36
    DESCRIBE_TRANSACTIONS: Final = 65
    LIST_TRANSACTIONS: Final = 66
    CONSUMER_GROUP_HEARTBEAT: Final = 68


# Versions we refuse although kio has schemas for them, with the reason.
CLIENT_OVERRIDES: Final[Mapping[int, tuple[int, int]]] = {
    # Produce < 3 carries magic 0/1 message sets, which we never write; Kafka 4 rejects them.
    ApiKey.PRODUCE: (3, 999),
    # Fetch < 4 has no last_stable_offset / aborted transactions (KIP-98).
    ApiKey.FETCH: (4, 999),
    # OffsetForLeaderEpoch < 3 has no replica_id: a consumer cannot use it (Java needs v3).
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, 999),
}


def _client_versions() -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for key, name in api_key_map.items():
        versions = schema_name_map.get(name)
        if not versions:
            continue
        lo, hi = min(versions), max(versions)
        if key in CLIENT_OVERRIDES:
            olo, ohi = CLIENT_OVERRIDES[key]
            lo, hi = max(lo, olo), min(hi, ohi)
        out[int(key)] = (lo, hi)
    return out


CLIENT_VERSIONS: Final[Mapping[int, tuple[int, int]]] = _client_versions()
"""Inclusive ``(min, max)`` version this client can speak, per API key."""


KAFKA_RELEASES: Final = ((4, 1), (4, 0), (3, 0))
"""The releases an ApiVersions answer tells apart for certain (see :func:`kafka_release`)."""


def kafka_release(broker: Mapping[int, tuple[int, int]]) -> tuple[int, int] | None:
    """The newest of :data:`KAFKA_RELEASES` the broker is at least, from its ApiVersions.

    ApiVersions does not carry the broker's own version, so features are gated on the API
    versions themselves; this names the broker's generation in errors, and serves the one
    behaviour no API version announces (:mod:`kafkastate.core.producer.transactions`). Only
    markers that hold in ZooKeeper and KRaft mode alike are used: Kafka 4.0 dropped Fetch
    v0-v3 (KIP-896) -- every older broker offers Fetch v0; ListTransactions v2 (its
    transactional-id pattern, KIP-1152) came with 4.1; DescribeTransactions (KIP-664) with
    3.0.

    Args:
        broker: ``api_key -> (min, max)`` from the broker's ApiVersions response.

    Returns:
        ``(4, 1)``, ``(4, 0)``, ``(3, 0)``, or None for a broker older than 3.0.
    """
    fetch = broker.get(ApiKey.FETCH)
    if fetch is not None and fetch[0] >= 4:
        listing = broker.get(ApiKey.LIST_TRANSACTIONS)
        return (4, 1) if listing is not None and listing[1] >= 2 else (4, 0)
    return (3, 0) if ApiKey.DESCRIBE_TRANSACTIONS in broker else None


def describe_release(release: tuple[int, int] | None) -> str:
    """How errors name a :func:`kafka_release` answer, e.g. ``"Kafka 3.x"``."""
    names = {(4, 1): "Kafka 4.1 or newer", (4, 0): "Kafka 4.0", (3, 0): "Kafka 3.x"}
    return "older than Kafka 3.0" if release is None else names[release]


def api_name(api_key: int) -> str:
    """Human name of an API key (``3`` → ``"Metadata"``)."""
    raw = api_key_map.get(api_key)
    if raw is None:
        return f"api_key={api_key}"
    return "".join(part.capitalize() for part in str(raw).split("_"))


@functools.cache
def request_type(api_key: int, version: int) -> type[Any]:
    """The kio request entity class for an API key and version."""
    return load_request_schema(api_key, version)


@functools.cache
def response_type(api_key: int, version: int) -> type[Any]:
    """The kio response entity class for an API key and version."""
    return load_response_schema(api_key, version)


class ApiVersionTable:
    """The negotiated versions for one broker connection.

    Args:
        broker: ``api_key -> (min, max)`` from the broker's ApiVersions response.
        client: our ranges (default :data:`CLIENT_VERSIONS`).
    """

    __slots__ = ("_broker", "_chosen", "_client")

    def __init__(
        self,
        broker: Mapping[int, tuple[int, int]],
        client: Mapping[int, tuple[int, int]] = CLIENT_VERSIONS,
    ) -> None:
        self._broker = dict(broker)
        self._client = client
        self._chosen: dict[int, int] = {}
        for key, (blo, bhi) in self._broker.items():
            mine = client.get(key)
            if mine is None:
                continue
            lo, hi = max(mine[0], blo), min(mine[1], bhi)
            if lo <= hi:
                self._chosen[key] = hi

    @classmethod
    def from_api_keys(cls, api_keys: Iterable[Any]) -> ApiVersionTable:
        """Build from the ``api_keys`` of a kio ApiVersionsResponse."""
        return cls({int(k.api_key): (int(k.min_version), int(k.max_version)) for k in api_keys})

    @property
    def broker_ranges(self) -> Mapping[int, tuple[int, int]]:
        """What the broker said it supports."""
        return self._broker

    @property
    def release(self) -> str:
        """The broker's generation as its API versions tell it, e.g. ``"Kafka 3.x"``."""
        return describe_release(kafka_release(self._broker))

    def at_least(self, release: tuple[int, int]) -> bool:
        """Whether the broker is at least ``release``, one of :data:`KAFKA_RELEASES`.

        Raises:
            ValueError: a release its API versions cannot tell apart.
        """
        if release not in KAFKA_RELEASES:
            known = ", ".join(f"{major}.{minor}" for major, minor in KAFKA_RELEASES)
            raise ValueError(f"ApiVersions tells only Kafka {known} apart, not {release}")
        floor = kafka_release(self._broker)
        return floor is not None and floor >= release

    def supports(self, api_key: int) -> bool:
        """Whether both sides share at least one version of ``api_key``."""
        return api_key in self._chosen

    def version_for(self, api_key: int) -> int:
        """The version to send for ``api_key``: the highest both sides support.

        Raises:
            UnsupportedVersionError: no shared version; the message names the API and both
                ranges (or says the broker does not offer the API at all).
        """
        try:
            return self._chosen[api_key]
        except KeyError:
            pass
        name = api_name(api_key)
        mine = self._client.get(api_key)
        theirs = self._broker.get(api_key)
        mine_s = f"{mine[0]}..{mine[1]}" if mine else "none"
        theirs_s = f"{theirs[0]}..{theirs[1]}" if theirs else "none (API not offered)"
        raise UnsupportedVersionError(
            f"no common version for {name} (api_key {api_key}): "
            f"client supports {mine_s}, broker supports {theirs_s}",
            api_key=api_key,
            api_name=name,
            client_range=mine,
            broker_range=theirs,
        )

    def request_type(self, api_key: int) -> type[Any]:
        """The kio request class at the negotiated version of ``api_key``."""
        return request_type(api_key, self.version_for(api_key))

    def require(self, api_key: int, *, feature: str, remedy: str, min_version: int = 0) -> int:
        """The version of ``api_key`` to send for ``feature``, gated on what was negotiated.

        Args:
            api_key: the API the feature needs.
            feature: what the user asked for, e.g. ``"group_protocol='consumer' (KIP-848)"``.
            remedy: what to do instead (which broker has it, which setting avoids it).
            min_version: the oldest version of the API the feature can use.

        Returns:
            The negotiated version (at least ``min_version``).

        Raises:
            UnsupportedVersionError: the broker lacks it; the message names the feature, the
                API, what the broker offers and the remedy.
        """
        chosen = self._chosen.get(api_key)
        if chosen is not None and chosen >= min_version:
            return chosen
        name = api_name(api_key)
        theirs = self._broker.get(api_key)
        offers = f"offers v{theirs[0]}..v{theirs[1]}" if theirs else "does not offer it"
        needed = f"{name} v{min_version}+" if min_version else name
        raise UnsupportedVersionError(
            f"{feature} needs {needed} (api_key {api_key}); the broker ({self.release}, by "
            f"its API versions) {offers}: {remedy}",
            api_key=api_key,
            api_name=name,
            client_range=self._client.get(api_key),
            broker_range=theirs,
            feature=feature,
        )
