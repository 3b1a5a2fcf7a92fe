"""Parameter resolution never stalls the event loop for long: cheap expressions resolve on
the loop, costly ones are redone in the offload pool, with the same result and tally."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from orchestrator.kernel import parameters
from orchestrator.kernel.errors import ExpressionLimitError
from orchestrator.kernel.expression_limits import ExpressionLimits
from orchestrator.kernel.expressions import Scope
from orchestrator.kernel.graph import Node
from tests.fake_nodes import make_registry

REG = make_registry()
RELAY = REG.get("relay").definition


def relay(value: Any) -> Node:
    return Node.model_validate({"id": "b", "type": "relay", "name": "B", "data": {"value": value}})


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of every resolve_parameters call."""
    seen: list[int] = []
    real = parameters.resolve_parameters

    def resolve(*args: Any) -> dict[str, Any]:
        seen.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(parameters, "resolve_parameters", resolve)
    return seen


async def test_cheap_expressions_resolve_on_the_loop(threads: list[int]) -> None:
    scope = Scope(input={"x": 2})
    data = await parameters.resolve_parameters_off_loop(relay("{{ input.x * 21 }}"), RELAY, {}, scope)
    assert data["value"] == 42
    assert threads == [threading.get_ident()]
    assert 0 < scope.spending.steps < parameters.ON_LOOP_STEPS


async def test_costly_expressions_are_redone_in_a_thread_with_the_same_result_and_tally(threads: list[int]) -> None:
    source = "{{ sum([" + ", ".join(["input.x"] * 2000) + "]) }}"  # ~6,000 steps
    scope = Scope(input={"x": 1})
    data = await parameters.resolve_parameters_off_loop(relay(source), RELAY, {}, scope)
    assert data["value"] == 2000
    assert len(threads) == 2 and threads[0] == threading.get_ident() != threads[1]
    assert parameters.ON_LOOP_STEPS < scope.spending.steps < 7000  # the thread's steps, not the trial's too


async def test_the_trial_on_the_loop_starts_from_what_the_node_execution_spent() -> None:
    scope = Scope(input={"x": 1}, limits=ExpressionLimits(max_total_steps=100))
    scope.spending.steps = 95  # say, spent by links materialized for this node
    with pytest.raises(ExpressionLimitError, match="max_total_steps"):
        await parameters.resolve_parameters_off_loop(relay("{{ input.x + 1 + 1 + 1 }}"), RELAY, {}, scope)
