"""A run budget on real workers: the agent stops between model calls and the run fails
with an error naming the budget; under the budget the same run succeeds."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fake_nodes import graph

pytestmark = pytest.mark.integration


def agent_graph(budget: dict[str, Any]) -> dict[str, Any]:
    g = graph([("t", "manual_trigger", "Start"),
               ("agent", "agent", "Assistant", {"model": "dryrun:gpt-4o-mini", "prompt": "use multiply on 6 and 7"}),
               ("tools", "toolset", "Calculator", {"toolkits": ["calculator"]})],
              [("t", "output", "agent", "input"), ("tools", "tools", "agent", "tools", "link")],
              id="budgeted", settings={"budget": budget})
    g["nodes"][1]["settings"] = {"on_error": "continue"}
    return g


async def test_a_token_budget_fails_the_run_between_model_calls_naming_the_budget(run_graph: Any) -> None:
    result = await run_graph(agent_graph({"max_tokens": 5}), {})
    assert result.status == "failed"
    [error] = result.of("agent", "error")
    assert error.data["error"]["code"] == "usage_budget_exceeded"
    assert error.data["error"]["budget"] == "max_tokens"
    assert "max_tokens exceeded" in error.data["error"]["message"]
    assert "graph budgeted settings.budget" in error.data["error"]["message"]
    # one model request was made, the tool loop's second never was
    assert error.data["usage"]["dryrun:gpt-4o-mini"]["calls"] == 1


async def test_under_its_budget_the_same_run_succeeds_and_reports_its_usage(run_graph: Any) -> None:
    result = await run_graph(agent_graph({"max_tokens": 1000, "max_cost_usd": 1}), {})
    assert result.status == "succeeded"
    [completed] = result.of("agent", "completed")
    assert completed.data["usage"]["dryrun:gpt-4o-mini"]["calls"] == 2


def loop_graph(budget: dict[str, Any]) -> dict[str, Any]:
    body = graph([("item", "loop_input", "Item"),
                  ("llm", "llm_completion", "Summarize", {"model": "dryrun:m", "prompt": "say something short"})],
                 [("item", "output", "llm", "input")], id="body")
    return graph([("t", "manual_trigger", "Start"), ("loop", "loop", "For each", {"mode": "for_each", "body": body})],
                 [("t", "output", "loop", "input")], id="looped", settings={"budget": budget})


async def test_a_loops_body_spends_from_its_runs_budget_and_counts_under_the_loop(run_graph: Any) -> None:
    from orchestrator.telemetry.pricing import load_table
    from orchestrator.telemetry.usage import summarize

    ok = await run_graph(loop_graph({"max_tokens": 1000}), [1, 2, 3])
    assert ok.status == "succeeded"
    summary = summarize([e for _, e in ok.events], load_table())
    assert summary["nodes"]["loop"]["by_model"]["dryrun:m"]["calls"] == 3
    per_item = summary["total"]["total_tokens"] // 3
    over = await run_graph(loop_graph({"max_tokens": per_item * 2 - 1}), [1, 2, 3])
    assert over.status == "failed"
    assert over.of("loop", "error")[0].data["error"]["message"].startswith("run budget max_tokens exceeded")
