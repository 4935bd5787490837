"""The API version table: highest common version, typed error on no overlap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    api_name,
    kafka_release,
    request_type,
)
from kafkastate.errors import UnsupportedVersionError


def test_kafka4_floors() -> None:
    # Kafka 4 rejects Produce < 3 and Fetch < 4; we must never offer them.
    assert CLIENT_VERSIONS[ApiKey.PRODUCE][0] >= 3
    assert CLIENT_VERSIONS[ApiKey.FETCH][0] >= 4


@given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20), st.integers(0, 20))
def test_highest_common_version(a: int, b: int, c: int, d: int) -> None:
    mine = (min(a, b), max(a, b))
    theirs = (min(c, d), max(c, d))
    table = ApiVersionTable({3: theirs}, client={3: mine})
    lo, hi = max(mine[0], theirs[0]), min(mine[1], theirs[1])
    if lo <= hi:
        assert table.version_for(3) == hi
        assert table.supports(3)
    else:
        with pytest.raises(UnsupportedVersionError) as info:
            table.version_for(3)
        assert info.value.client_range == mine and info.value.broker_range == theirs
        assert f"{mine[0]}..{mine[1]}" in str(info.value)
        assert f"{theirs[0]}..{theirs[1]}" in str(info.value)
        assert "Metadata" in str(info.value)


def test_api_not_offered() -> None:
    table = ApiVersionTable({})
    with pytest.raises(UnsupportedVersionError, match="not offered") as info:
        table.version_for(ApiKey.PRODUCE)
    assert info.value.api_name == "Produce"


def test_request_type_matches_version() -> None:
    table = ApiVersionTable({ApiKey.METADATA: (0, 9)})
    cls = table.request_type(ApiKey.METADATA)
    assert cls is request_type(ApiKey.METADATA, 9)
    assert int(cls.__version__) == 9 and int(cls.__api_key__) == 3


def test_api_names() -> None:
    assert api_name(ApiKey.SASL_AUTHENTICATE) == "SaslAuthenticate"
    assert api_name(9999) == "api_key=9999"


# -- the broker's generation, as its ApiVersions answer tells it (issue 25) --------------------

_KAFKA_2_8 = {ApiKey.FETCH: (0, 12), ApiKey.PRODUCE: (0, 9)}
_KAFKA_3_9 = {**_KAFKA_2_8, ApiKey.FETCH: (0, 17), 65: (0, 0), 66: (0, 1)}
_KAFKA_4_0 = {**_KAFKA_3_9, ApiKey.FETCH: (4, 17)}
_KAFKA_4_4 = {**_KAFKA_4_0, ApiKey.FETCH: (4, 18), 66: (0, 2)}


@pytest.mark.parametrize(
    ("ranges", "release", "name"),
    [
        (_KAFKA_2_8, None, "older than Kafka 3.0"),
        (_KAFKA_3_9, (3, 0), "Kafka 3.x"),
        # ListTransactions v2 without the Fetch floor is not 4.1: only 4.0 dropped Fetch v0
        ({**_KAFKA_3_9, 66: (0, 2)}, (3, 0), "Kafka 3.x"),
        (_KAFKA_4_0, (4, 0), "Kafka 4.0"),
        (_KAFKA_4_4, (4, 1), "Kafka 4.1 or newer"),
    ],
)
def test_the_broker_generation_is_told_by_its_api_versions(
    ranges: dict[int, tuple[int, int]], release: tuple[int, int] | None, name: str
) -> None:
    assert kafka_release(ranges) == release
    table = ApiVersionTable(ranges)
    assert table.release == name
    assert table.at_least((4, 0)) is (release is not None and release >= (4, 0))
    assert table.at_least((3, 0)) is (release is not None)
    with pytest.raises(ValueError, match="not \\(3, 7\\)"):
        table.at_least((3, 7))


def test_a_gated_feature_names_the_broker_generation() -> None:
    table = ApiVersionTable(_KAFKA_3_9)
    with pytest.raises(UnsupportedVersionError) as info:
        table.require(ApiKey.CONSUMER_GROUP_HEARTBEAT, feature="KIP-848", remedy="use classic")
    assert str(info.value) == (
        "KIP-848 needs ConsumerGroupHeartbeat (api_key 68); the broker (Kafka 3.x, by its API "
        "versions) does not offer it: use classic"
    )
    assert info.value.feature == "KIP-848" and info.value.broker_range is None
    with pytest.raises(UnsupportedVersionError, match=r"\(Kafka 3.x, by its API versions\) "):
        table.require(66, feature="pattern", remedy="4.1", min_version=2)
