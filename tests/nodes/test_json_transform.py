"""JSON Transform reshapes the input with JSONata."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

import pytest

from orchestrator.host.evaluator import POOL, evaluate_jsonata
from orchestrator.settings import load_settings
from tests.nodes.node_harness import run_node, values

ORDER = {"customer": "Ada", "items": [{"sku": "a", "price": 2.5, "qty": 2},
                                      {"sku": "b", "price": 4.0, "qty": 1}]}


async def test_json_transform_computes_a_new_shape_from_the_input() -> None:
    expression = '{"who": customer, "total": $sum(items.(price * qty)), "skus": items.sku}'
    out = values(await run_node("json_transform", {"expression": expression}, {"input": ORDER}))
    assert out["output"] == {
        "who": ORDER["customer"],
        "total": sum(i["price"] * i["qty"] for i in ORDER["items"]),
        "skus": [i["sku"] for i in ORDER["items"]],
    }


async def test_json_transform_outputs_null_when_the_path_matches_nothing() -> None:
    data = {"expression": "missing.field"}
    out = values(await run_node("json_transform", data, {"input": ORDER}))
    assert out == {"output": None}


async def test_json_transform_reports_bad_expression() -> None:
    with pytest.raises(ValueError, match=r"'expression'.*position \d+") as info:
        await run_node("json_transform", {"expression": "items[price >"}, {"input": ORDER})
    assert "items[price >" in str(info.value)


async def test_json_transform_reports_an_evaluation_error() -> None:
    with pytest.raises(ValueError, match="'expression'"):
        await run_node("json_transform", {"expression": "$undefined_fn()"}, {"input": ORDER})


async def test_json_transform_needs_an_expression() -> None:
    with pytest.raises(ValueError, match="'expression'"):
        await run_node("json_transform", {"expression": "  "}, {"input": ORDER})


# -- JSONata runs in a child process with a hard bound on memory and time -------------


async def test_a_jsonata_expression_asking_for_gigabytes_fails_naming_the_memory_limit() -> None:
    """The red-team attack: one $pad built 2.9 GB inside the worker."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"memory limit of 512 MB \(ORCH_TRANSFORM_MEMORY_MB\)"):
            await run_node("json_transform", {"expression": '$length($pad("x", 1000000000))'}, {"input": {}})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024  # the worker never held it


async def test_a_jsonata_step_running_past_the_timeout_is_killed() -> None:
    """One long step (a backtracking $match) that JSONata's own timeout cannot interrupt."""
    expression = '$match("' + "a" * 40 + '!", /^(a|aa)+$/)'
    began = time.monotonic()
    with pytest.raises(ValueError, match=r"ran past its 0\.2 s limit"):
        await evaluate_jsonata(expression, None, settings=load_settings(), timeout_ms=200, max_depth=500)
    assert time.monotonic() - began < 5  # 0.2 s + the grace of a second, on a busy machine


async def test_cancelling_a_transform_kills_its_child_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    real_call = POOL.call

    def call(*args: Any, **kwargs: Any) -> Any:
        started.append(kwargs["running"])
        return real_call(*args, **kwargs)

    monkeypatch.setattr(POOL, "call", call)
    work = asyncio.ensure_future(evaluate_jsonata('$match("' + "a" * 40 + '!", /^(a|aa)+$/)', None,
                                                  settings=load_settings(), timeout_ms=5000, max_depth=500))
    while not (started and started[0]):
        await asyncio.sleep(0.01)
    child = started[0][0]
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    assert child.proc.wait(timeout=2) is not None


async def test_children_are_reused_and_a_stopped_one_is_replaced() -> None:
    expression = '$sum(items.(price * qty))'
    first = await evaluate_jsonata(expression, ORDER, settings=load_settings(), timeout_ms=5000, max_depth=500)
    pids = {child.proc.pid for child in POOL._idle}
    again = await evaluate_jsonata(expression, ORDER, settings=load_settings(), timeout_ms=5000, max_depth=500)
    assert again == first == 9.0
    assert {child.proc.pid for child in POOL._idle} == pids  # no new process for the second call
    with pytest.raises(ValueError, match="memory limit"):
        await evaluate_jsonata('$pad("x", 1000000000)', None, settings=load_settings(), timeout_ms=5000, max_depth=500)
    assert await evaluate_jsonata(expression, ORDER, settings=load_settings(), timeout_ms=5000, max_depth=500) == 9.0
