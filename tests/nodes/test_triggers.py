"""Trigger nodes hand the run input to the graph."""

from __future__ import annotations

import datetime

import pytest

from tests.nodes.node_harness import registry, run_node, values


async def test_manual_trigger_outputs_the_run_input() -> None:
    run_input = {"customer": {"id": 17}, "tags": ["a"]}
    out = values(await run_node("manual_trigger", {}, run_input=run_input))
    assert out == {"output": run_input}


async def test_manual_trigger_outputs_an_empty_object_without_run_input() -> None:
    assert values(await run_node("manual_trigger", {})) == {"output": {}}


async def test_chat_start_outputs_the_message_and_the_session_id() -> None:
    run_input = {"message": "What is the weather?", "user": "ada"}
    out = values(await run_node("chat_start", {}, run_input=run_input, session_id="chat-9"))
    assert out["output"] == {**run_input, "session_id": "chat-9"}


async def test_chat_start_rejects_a_run_input_without_a_message() -> None:
    with pytest.raises(ValueError, match="message"):
        await run_node("chat_start", {}, run_input={"text": "hi"})


async def test_webhook_trigger_outputs_the_request_it_was_called_with() -> None:
    request = {"body": {"id": 3}, "headers": {"x-sig": "abc"}, "query": {"q": "1"},
               "method": "POST", "path": "orders/new"}
    out = values(await run_node("webhook_trigger", {"path": "orders/new"}, run_input=request))
    assert out == {"output": request}


async def test_webhook_trigger_needs_a_path() -> None:
    with pytest.raises(ValueError, match="'path'"):
        await run_node("webhook_trigger", {"path": ""}, run_input={})


def test_webhook_trigger_defaults_to_post_and_an_immediate_response() -> None:
    params = {p.id: p.default for p in registry().get("webhook_trigger").definition.parameters}
    assert params["method"] == "POST" and params["response_mode"] == "immediate"


async def test_schedule_trigger_outputs_when_it_was_scheduled() -> None:
    before = datetime.datetime.now(datetime.UTC)
    out = values(await run_node("schedule_trigger", {"cron": "*/5 * * * *"}))
    scheduled = datetime.datetime.fromisoformat(out["output"]["scheduled_at"])
    assert scheduled >= before


async def test_schedule_trigger_passes_the_schedulers_run_input_through() -> None:
    run_input = {"scheduled_at": "2030-01-01T00:00:00+00:00", "schedule_id": "s1"}
    out = values(await run_node("schedule_trigger", {"interval_s": 60}, run_input=run_input))
    assert out["output"] == run_input


@pytest.mark.parametrize("data", [{}, {"cron": "* * *"}, {"cron": "0 * * * *", "interval_s": 5},
                                  {"interval_s": -1}])
async def test_schedule_trigger_rejects_a_missing_or_bad_schedule(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"cron|interval_s"):
        await run_node("schedule_trigger", data)


async def test_loop_input_outputs_the_current_item_even_when_it_is_null() -> None:
    assert values(await run_node("loop_input", {}, run_input={"n": 2})) == {"output": {"n": 2}}
    assert values(await run_node("loop_input", {}, run_input=None)) == {"output": None}
