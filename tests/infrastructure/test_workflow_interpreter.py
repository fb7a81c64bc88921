"""The interpreter's one rewrite of the synthesized definition (each Distributed Map's
``ItemBatcher`` as an ``ItemSelector`` over pre-grouped items), and why: moto's grammar
has no ``ItemBatcher`` (``test_workflow_execution.py`` describes the seams)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.infrastructure.state_machine_run import (
    BATCH,
    MAPS,
    synthesized_definition,
    without_item_batcher,
)

pytestmark = pytest.mark.infrastructure


def test_the_item_batcher_is_the_only_rewrite() -> None:
    synthesized = synthesized_definition()
    assert sorted(n for n, s in synthesized["States"].items() if s["Type"] == "Map") == sorted(
        MAPS)
    runnable, size = without_item_batcher(synthesized)
    assert size == BATCH
    assert runnable != synthesized
    restored = copy.deepcopy(runnable)
    for name in MAPS:
        distributed_map = restored["States"][name]
        selector = distributed_map.pop("ItemSelector")
        distributed_map["ItemBatcher"] = {"MaxItemsPerBatch": BATCH,
                                          "BatchInput": selector["BatchInput"]}
    assert restored == synthesized
    assert json.dumps(restored, sort_keys=True) == json.dumps(synthesized, sort_keys=True)


# ------------------------------------------------------------------------ why the rewrite
def test_the_interpreter_refuses_the_item_batcher() -> None:
    """Why the rewrite: moto's grammar (the parser its ``CreateStateMachine`` and its
    executions use) has no ItemBatcher, and accepts the rewritten definition. If this
    starts failing, moto learned it: drop the rewrite."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import (
        AmazonStateLanguageParser,
        ASLParserException,
    )

    synthesized = synthesized_definition()
    with pytest.raises(ASLParserException, match="ItemBatcher"):
        AmazonStateLanguageParser.parse(json.dumps(synthesized))
    runnable, _ = without_item_batcher(synthesized)
    AmazonStateLanguageParser.parse(json.dumps(runnable))
