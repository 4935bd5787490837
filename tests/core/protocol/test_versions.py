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
