"""A fuzz loop's inputs are pinned: the first inputs a fixed stream draws, and the loop's
definition, are those of the runs already in docs/fuzz-results/campaign.jsonl. A change that
makes the loop cheaper (tests/_support/fuzzing.py) must draw the same inputs, or the
campaign's counts would describe inputs the loop no longer draws (docs/reliability.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pytest

from kafkastate.core.protocol.versions import ApiKey
from tests._support import fuzzing
from tests.core.admin import test_admin_parse_fuzz as admin_parse
from tests.core.consumer import test_group848_fuzz as group848
from tests.core.protocol import test_response_fuzz as response

STREAM = 4_242_424_242
"""A stream no campaign line names (any fixed one would do)."""
FIRST = 400
"""Inputs hashed per loop."""

# decoder: (definition as in campaign.jsonl, SHA-256 of the first FIRST inputs of STREAM,
# each length-prefixed), both computed before the loop was made cheaper
PINNED: dict[str, tuple[str, str]] = {
    "admin-parse-DescribeConfigs": ("6e90087557d267eb", "ddae3e25bbac17470f3ce5839d42f08d"),
    "admin-parse-DescribeGroups": ("2647e8fe1cf1f4f0", "2a28ccb37be95fe42e1565d8ef104d3c"),
    "response-Metadata-v12": ("5397fe6809ce8f86", "6d9750fa34f6c8e048288c797a440616"),
    "response-Fetch-v17": ("fb14735ce451e113", "c5ccddf3962605d4d5eb545bc91f1224"),
    "kip848-heartbeat-joining": ("6bc62330354bc4ad", "b229af4537e400313f4277ec82435952"),
}

Loop = tuple[Sequence[bytes], fuzzing.Deriver]


def loops_of(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, run: Callable[[], Any]
) -> dict[str, Loop]:
    """The loops ``run`` starts (decoder name: seeds and deriving function), none run."""
    found: dict[str, Loop] = {}

    def capture(
        decode: Any, seeds: Sequence[bytes], *, count: int, seed: str, derive_input: Any = None
    ) -> int:
        found[seed] = (list(seeds), derive_input or fuzzing.derive)
        return 0

    monkeypatch.setattr(module, "run_mutations", capture)
    run()
    return found


def all_loops(monkeypatch: pytest.MonkeyPatch) -> dict[str, Loop]:
    return {
        **loops_of(
            monkeypatch,
            admin_parse,
            lambda: [
                admin_parse.test_parse_of_random_responses(name)
                for name in ("DescribeConfigs", "DescribeGroups")
            ],
        ),
        **loops_of(
            monkeypatch,
            response,
            lambda: [
                response.test_mutated_responses(int(key)) for key in (ApiKey.METADATA, ApiKey.FETCH)
            ],
        ),
        **loops_of(
            monkeypatch, group848, lambda: group848.test_mutated_heartbeat_answers("joining")
        ),
    }


def digest(seeds: Sequence[bytes], derive_input: fuzzing.Deriver, decoder: str) -> str:
    inputs = fuzzing.draw_inputs(seeds, fuzzing.stream_rng(decoder, STREAM), derive_input)
    out = hashlib.sha256()
    for _ in range(FIRST):
        data = next(inputs)
        out.update(len(data).to_bytes(4, "big") + data)
    return out.hexdigest()[:32]


@pytest.mark.parametrize("decoder", list(PINNED))
def test_a_fixed_stream_draws_the_pinned_inputs(
    monkeypatch: pytest.MonkeyPatch, decoder: str
) -> None:
    seeds, derive_input = all_loops(monkeypatch)[decoder]
    definition, inputs = PINNED[decoder]
    assert fuzzing.definition(seeds, derive_input) == definition
    assert digest(seeds, derive_input, decoder) == inputs
