"""Run budgets: where a budget comes from, and the check between model calls."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.kernel.errors import ConfigurationError, ParameterError, UsageBudgetError
from orchestrator.kernel.protocol import FlowContext, NodeEvent
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.telemetry.budgets import BudgetCheck, budget_for, graph_budget, workspace_budgets
from orchestrator.telemetry.pricing import parse_table

PRICES = parse_table({"models": {"dryrun:*": {"input": 1.0, "output": 2.0}}}, "test")


def test_the_graph_setting_wins_field_by_field_over_the_workspace_default() -> None:
    defaults = workspace_budgets('{"team-a": {"max_tokens": 100, "max_cost_usd": 1}, "*": {"max_tokens": 5}}')
    budget = budget_for({"id": "g", "settings": {"budget": {"max_tokens": 50}}}, "team-a", defaults)
    assert (budget.max_tokens, budget.max_cost_usd) == (50, 1.0)
    assert budget.where == {"max_tokens": "graph g settings.budget",
                            "max_cost_usd": "ORCH_RUN_BUDGETS for workspace 'team-a'"}
    assert budget_for({"id": "g"}, "other", defaults).max_tokens == 5
    assert not budget_for({"id": "g"}, "other", {})


def test_a_malformed_graph_budget_is_a_graph_error_naming_the_setting() -> None:
    with pytest.raises(ParameterError, match=r"settings.budget.max_tokens must be a number"):
        graph_budget({"id": "g", "settings": {"budget": {"max_tokens": "lots"}}})
    with pytest.raises(ParameterError, match="only max_tokens, max_cost_usd"):
        graph_budget({"id": "g", "settings": {"budget": {"tokens": 3}}})


def test_malformed_workspace_budgets_name_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="ORCH_RUN_BUDGETS"):
        workspace_budgets("[1, 2]")


class Reader:
    """The run's plan and events, as the Redis store gives them."""

    def __init__(self, graph: dict[str, Any], events: list[NodeEvent]) -> None:
        self.plan = RunPlan(run_id="r", graph=graph, start=[], order=[], nodes={}, labels={"workspace": "default"})
        self.events = events
        self.reads = 0

    async def load_plan(self, run_id: str) -> RunPlan:
        return self.plan

    async def read_events(self, run_id: str, after: str = "0-0", count: int = 1000) -> list[tuple[str, NodeEvent]]:
        """Stream ids "1-0", "2-0", ...: the events after ``after``."""
        self.reads += 1
        first = int(after.split("-")[0])
        return [(f"{i}-0", e) for i, e in enumerate(self.events, start=1) if i > first][:count]


def ctx_with(input_tokens: int) -> FlowContext:
    ctx = FlowContext(run_id="r", node_id="n2", node_type="agent", node_name="Writer", runtime=None,  # type: ignore[arg-type]
                      emit=None)  # type: ignore[arg-type]
    ctx.usage.add("dryrun:m", {"input_tokens": input_tokens, "output_tokens": 0})
    return ctx


async def test_the_check_counts_finished_nodes_plus_the_current_one_and_names_the_budget() -> None:
    earlier = NodeEvent(run_id="r", node_id="n1", node_type="agent", event_type="completed",
                        data={"usage": {"dryrun:m": {"input_tokens": 60, "output_tokens": 20}}})
    check = BudgetCheck(Reader({"id": "g", "settings": {"budget": {"max_tokens": 100}}}, [earlier]), PRICES, {})
    await check(ctx_with(20))  # 80 + 20 = 100: at the limit, not over it
    with pytest.raises(UsageBudgetError) as caught:
        await check(ctx_with(21))
    err = caught.value
    assert err.budget == "max_tokens" and err.node_name == "Writer"
    assert "max_tokens exceeded: the run used 101, its limit is 100 (set in graph g settings.budget)" in err.message
    assert err.to_dict()["code"] == "usage_budget_exceeded"


async def test_a_cost_budget_uses_the_price_table() -> None:
    check = BudgetCheck(Reader({"id": "g", "settings": {"budget": {"max_cost_usd": 0.00001}}}, []), PRICES, {})
    await check(ctx_with(10))
    with pytest.raises(UsageBudgetError, match="max_cost_usd"):
        await check(ctx_with(11))


async def test_a_run_without_a_budget_reads_no_events() -> None:
    reader = Reader({"id": "g"}, [])
    await BudgetCheck(reader, PRICES, {})(ctx_with(10**9))
    assert reader.reads == 0


async def test_later_checks_read_only_the_events_appended_since_and_count_them_once() -> None:
    def done(tokens: int) -> NodeEvent:
        return NodeEvent(run_id="r", node_id="n1", node_type="agent", event_type="completed",
                         data={"usage": {"dryrun:m": {"input_tokens": tokens}}})

    reader = Reader({"id": "g", "settings": {"budget": {"max_tokens": 100}}}, [done(40)])
    check = BudgetCheck(reader, PRICES, {})
    await check(ctx_with(10))  # 40 + 10
    await check(ctx_with(10))  # the same 40 again, not 80
    reader.events.append(done(45))
    with pytest.raises(UsageBudgetError, match="the run used 101"):
        await check(ctx_with(16))  # 40 + 45 + 16 = 101
