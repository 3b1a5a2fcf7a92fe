"""Usage through the step function: what an executor reports rides on its own events,
the host's check runs after each report, and a budget error stops the run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orchestrator.kernel.definition import NodeDefinition, Port
from orchestrator.kernel.errors import UsageBudgetError
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.observer import ObservedEnd, ObservedNode
from orchestrator.kernel.protocol import DataValue, EventType, ExecutionResult, FlowContext
from orchestrator.kernel.step import StepOptions
from tests.fake_nodes import graph, make_registry


class Metered:
    """Reports ``calls`` usages of 10 units under key "svc", then passes its input on."""

    node_type = "metered"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        for _ in range(int(data.get("calls") or 1)):
            await ctx.report_usage("svc", {"units": 10, "calls": 1})
        return ExecutionResult(outputs={"out": DataValue("data", data.get("value"))})


def registry() -> Any:
    reg = make_registry()
    reg.register(NodeDefinition.model_validate({
        "id": "metered", "name": "Metered", "category": "test", "inputs": [Port(id="in").model_dump()],
        "outputs": [Port(id="out").model_dump()],
        "parameters": [{"id": "calls", "type": "int"}, {"id": "value", "type": "string"}]}), Metered(), source="t")
    return reg


def chain(**settings: Any) -> dict[str, Any]:
    g = graph([("a", "emit", "A"), ("m", "metered", "M", {"calls": 3}), ("z", "relay", "Z")],
              [("a", "out", "m", "in"), ("m", "out", "z", "in")])
    g["nodes"][1]["settings"] = settings
    return g


async def test_reported_usage_rides_on_the_completed_event_and_the_observer_sees_it() -> None:
    ended: list[tuple[str, ObservedEnd]] = []

    class Observer:
        @contextmanager
        def node(self, seen: ObservedNode) -> Iterator[Any]:
            class Seen:
                def end(self, end: ObservedEnd) -> None:
                    ended.append((seen.node_id, end))
            yield Seen()

    result = await LocalRunner(registry(), options=StepOptions(observer=Observer())).run(chain(), 1)
    assert result.status == "succeeded"
    completed = {e.node_id: e.data for e in result.events if e.event_type == EventType.COMPLETED}
    assert completed["m"]["usage"] == {"svc": {"units": 30, "calls": 3}}
    assert "usage" not in completed["a"]
    assert dict(ended)["m"].usage == {"svc": {"units": 30, "calls": 3}}
    assert [n for n, _ in ended] == ["a", "m", "z"]


async def test_a_budget_error_from_the_check_fails_the_run_even_when_errors_continue() -> None:
    seen: list[float] = []

    async def check(ctx: FlowContext) -> None:
        seen.append(ctx.usage.by_key["svc"]["units"])
        if ctx.usage.by_key["svc"]["units"] > 15:
            raise UsageBudgetError("over budget units", budget="max_units", node_id=ctx.node_id)

    runner = LocalRunner(registry(), options=StepOptions(usage_check=check))
    result = await runner.run(chain(on_error="continue", retry={"max_attempts": 3}), 1)
    assert result.status == "failed"
    assert seen == [10, 20]  # checked after each report; the third call never happened
    errors = [e for e in result.events if e.event_type == EventType.ERROR]
    assert len(errors) == 1 and errors[0].data["error"]["budget"] == "max_units"
    assert errors[0].data["usage"] == {"svc": {"units": 20, "calls": 2}}
    assert not [e for e in result.events if e.event_type == EventType.RETRY]
