"""Fixtures and markers shared by the whole suite (the suite's only conftest).

* ``anyio_backend`` -- every ``@pytest.mark.anyio`` test runs on asyncio and on trio
  (STYLE.md §11). Trio-only tests are ``@pytest.mark.trio`` (pytest-trio, ``trio_mode`` off).
* ``implementation`` / ``c_accelerator`` -- the record codec switch: run a module once per
  codec, or need the compiled ``_speedups``. A missing build skips, except in CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from kafkastate.core.protocol import records

# -- async backends ---------------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``@pytest.mark.anyio`` test once on asyncio and once on trio."""
    return str(request.param)


# -- the C accelerator ------------------------------------------------------------------------

C_ACCELERATOR_MISSING = (
    "the compiled module kafkastate.core.protocol._speedups is not built "
    "(no C compiler when kafkastate was installed)"
)


def _c_accelerator_missing() -> NoReturn:
    """Skip, or fail where a missing build must not pass unnoticed: like a missing broker
    (kafkastate.testing), ``KAFKASTATE_REQUIRE_BROKER=1`` -- and ``CI`` -- make it an error."""
    required = [name for name in ("KAFKASTATE_REQUIRE_BROKER", "CI") if os.environ.get(name)]
    if required:
        pytest.fail(f"{C_ACCELERATOR_MISSING} [{' and '.join(required)} set]", pytrace=False)
    pytest.skip(C_ACCELERATOR_MISSING)


@pytest.fixture(scope="session")
def c_accelerator() -> None:
    """Need the C accelerator (session-scoped, so Hypothesis tests may use it)."""
    if not records.SPEEDUPS_AVAILABLE:
        _c_accelerator_missing()


@pytest.fixture(scope="module", params=["python", "c"])
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a whole test module once per record codec: pure Python, then C.

    Module-scoped so Hypothesis tests may use it: ``pytestmark =
    pytest.mark.usefixtures("implementation")``.
    """
    if request.param == "c" and not records.SPEEDUPS_AVAILABLE:
        _c_accelerator_missing()
    previous = records.set_speedups(request.param == "c")
    yield request.param
    records.set_speedups(previous)
