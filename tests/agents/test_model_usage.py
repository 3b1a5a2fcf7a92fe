"""Model-calling nodes report their token usage through the node context: every model
request of an agent (its tool loop, a team's members), a completion, an embedding."""

from __future__ import annotations

import pytest

from orchestrator.kernel.errors import UsageBudgetError
from orchestrator.kernel.protocol import FlowContext
from tests.agents.conftest import agno_events, data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")
toolset = load_executor("tools/toolset")
llm = load_executor("ai/llm_completion")
embedding = load_executor("rag/embedding")


async def _tools() -> list[object]:
    ctx = make_ctx("t1", name="Calc", node_type="toolset")
    return [await toolset.materialize({"toolkits": ["calculator"]}, "tools", ctx)]


async def test_an_agent_reports_each_model_request_of_its_tool_loop() -> None:
    ctx = make_ctx(links={("a1", "tools"): await _tools()})
    events, result = await drain(agent.execute(
        {"model": "dryrun:gpt-4o-mini", "prompt": "use multiply on 6 and 7"}, data_in({}), ctx))
    assert agno_events(events).count("ModelRequestCompleted") == 2
    usage = ctx.usage.to_json()
    assert list(usage) == ["dryrun:gpt-4o-mini"]
    numbers = usage["dryrun:gpt-4o-mini"]
    assert numbers["calls"] == 2 and numbers["input_tokens"] > 0 and numbers["output_tokens"] > 0
    output = result.outputs["output"].value
    assert output["usage"] == usage
    assert output["tokens_used"] == numbers["input_tokens"] + numbers["output_tokens"]


async def test_dry_run_usage_is_deterministic_words_in_and_words_out() -> None:
    first, second = make_ctx(), make_ctx()
    for ctx in (first, second):
        await drain(llm.execute({"model": "dryrun:m", "prompt": "one two three",
                                 "script": [{"say": "four five"}]}, data_in({}), ctx))
    assert first.usage.to_json() == second.usage.to_json()
    # the user message (3 words) in, the answer (2 words) out
    assert first.usage.to_json() == {"dryrun:m": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5,
                                                  "calls": 1}}


async def test_a_budget_check_that_raises_stops_the_agent_between_model_calls() -> None:
    ctx = make_ctx(links={("a1", "tools"): await _tools()})
    seen: list[int] = []

    async def check(c: FlowContext) -> None:
        seen.append(int(c.usage.by_key["dryrun:x"]["calls"]))
        raise UsageBudgetError("over", budget="max_tokens")

    ctx.usage_check = check
    with pytest.raises(UsageBudgetError):
        await drain(agent.execute({"model": "dryrun:x", "prompt": "use multiply on 6 and 7"}, data_in({}), ctx))
    assert seen == [1]  # the first model request was the last one


async def test_the_dry_run_embedder_reports_one_input_token_per_word() -> None:
    ctx = make_ctx(node_type="embedding")
    await embedding.execute({"model": "dryrun:hash", "text": "alpha beta, gamma"}, data_in({}), ctx)
    assert ctx.usage.to_json() == {"dryrun:hash": {"input_tokens": 3, "calls": 1}}
