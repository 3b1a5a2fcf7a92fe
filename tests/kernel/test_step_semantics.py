"""Run semantics through the real step function (in-process store, fake node types)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.kernel.errors import LinkCycleError, RunNotFoundError, UpstreamReferenceError
from orchestrator.kernel.expressions import Scope
from orchestrator.kernel.graph import parse_graph
from orchestrator.kernel.local import LocalRunner, run_graph_local
from orchestrator.kernel.parameters import resolve_parameters
from orchestrator.kernel.protocol import EventType
from tests.fake_nodes import graph, make_registry

REG = make_registry()


def with_settings(g: dict[str, Any], node_id: str, **settings: Any) -> dict[str, Any]:
    for node in g["nodes"]:
        if node["id"] == node_id:
            node["settings"] = settings
    return g


def events_of(result: Any, event_type: str) -> list[Any]:
    return [e for e in result.events if e.event_type == event_type]


async def test_chain_passes_the_value_down_and_succeeds() -> None:
    g = graph([("a", "emit", "A"), ("b", "relay", "B"), ("c", "relay", "C")],
              [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    result = await run_graph_local(g, REG, {"x": 1})
    assert result.status == "succeeded"
    assert result.output("c", "out") == {"x": 1}
    assert result.events[0].event_type == EventType.RUN_STARTED
    assert result.events[-1].event_type == EventType.RUN_COMPLETED


async def test_diamond_joins_both_branches() -> None:
    g = graph([("a", "emit", "A"), ("l", "relay", "L", {"value": "left"}),
               ("r", "relay", "R", {"value": "right"}), ("j", "join", "J")],
              [("a", "out", "l", "in"), ("a", "out", "r", "in"),
               ("l", "out", "j", "left"), ("r", "out", "j", "right")])
    result = await run_graph_local(g, REG, 0)
    assert result.output("j", "out") == {"left": "left", "right": "right"}
    assert len(events_of(result, EventType.STARTED)) == 4


async def test_merge_fires_when_other_branch_is_dead() -> None:
    g = graph([("a", "emit", "A"), ("g", "gate", "G", {"open": True}),
               ("y", "relay", "Yes", {"value": "y"}), ("n", "relay", "No", {"value": "n"}),
               ("n2", "relay", "No again"), ("j", "join", "J")],
              [("a", "out", "g", "in"), ("g", "yes", "y", "in"), ("g", "no", "n", "in"),
               ("n", "out", "n2", "in"), ("y", "out", "j", "left"), ("n2", "out", "j", "right")])
    result = await run_graph_local(g, REG, 1)
    assert result.status == "succeeded"
    assert result.output("j", "out") == {"left": "y", "right": None}
    assert result.node_states["n"] == "skipped"
    assert result.node_states["n2"] == "skipped"
    assert {e.node_id for e in events_of(result, EventType.SKIPPED)} == {"n", "n2"}


async def test_node_with_dead_required_input_is_skipped_and_skip_propagates() -> None:
    g = graph([("a", "emit", "A"), ("g", "gate", "G", {"open": False}),
               ("y1", "relay", "Y1"), ("y2", "relay", "Y2"), ("y3", "relay", "Y3")],
              [("a", "out", "g", "in"), ("g", "yes", "y1", "in"), ("y1", "out", "y2", "in"),
               ("y2", "out", "y3", "in")])
    result = await run_graph_local(g, REG, 1)
    assert result.status == "succeeded"
    assert [result.node_states[n] for n in ("y1", "y2", "y3")] == ["skipped"] * 3


async def test_disconnected_subgraph_does_not_run() -> None:
    g = graph([("a", "emit", "A"), ("b", "relay", "B"), ("x", "relay", "Island"), ("y", "relay", "Island 2")],
              [("a", "out", "b", "in"), ("x", "out", "y", "in")])
    result = await run_graph_local(g, REG, 1)
    assert result.status == "succeeded"
    assert "x" not in result.node_states and "y" not in result.outputs
    assert not [e for e in result.events if e.node_id in ("x", "y")]


async def test_expression_reads_any_upstream_node_by_name() -> None:
    g = graph([("a", "emit", "Start"), ("b", "relay", "B", {"value": {"k": 2}}),
               ("c", "relay", "C", {"value": "{{ $('Start').item.json.n + input.k }}"})],
              [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    result = await run_graph_local(g, REG, {"n": 40})
    assert result.output("c", "out") == 42


async def test_expression_naming_a_downstream_node_is_rejected_before_the_run() -> None:
    g = graph([("a", "emit", "Start"), ("b", "relay", "B", {"value": "{{ $('C').item.json }}"}),
               ("c", "relay", "C")],
              [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    with pytest.raises(UpstreamReferenceError) as info:
        await run_graph_local(g, REG, 1)
    assert info.value.node_id == "b"


async def test_wire_beats_expression_beats_inline_value() -> None:
    g = graph([("a", "emit", "A"), ("b", "relay", "B", {"label": "{{ 'expr' }}"}),
               ("l", "relay", "Inline only", {"label": "inline"})],
              [("a", "out", "b", "in"), ("a", "out", "l", "in")])
    parsed = parse_graph(g)
    definition = REG.get("relay").definition
    wired = resolve_parameters(parsed.node_by_id["b"], definition, {"label": ("wired", "data")}, Scope())
    assert wired["label"] == "wired"
    assert resolve_parameters(parsed.node_by_id["b"], definition, {}, Scope())["label"] == "expr"
    assert resolve_parameters(parsed.node_by_id["l"], definition, {}, Scope())["label"] == "inline"


async def test_value_wired_into_a_hybrid_parameter_overrides_it_on_either_channel() -> None:
    linked = graph([("a", "emit", "A"), ("num", "number", "Delay", {"value": 0.01}),
                    ("r", "relay", "R", {"delay_s": 99, "record": True})],
                   [("a", "out", "r", "in"), ("num", "value", "r", "delay_s", "link")])
    result = await run_graph_local(linked, REG, "v")
    timing = result.output("r", "out")
    assert timing["end"] - timing["start"] < 5  # the 99 s inline value was overridden

    flowed = graph([("a", "emit", "A", {"value": True}), ("g", "gate", "G", {"open": False})],
                   [("a", "out", "g", "in"), ("a", "out", "g", "open")])
    result = await run_graph_local(flowed, REG)
    assert result.outputs["g"].keys() == {"yes"}


async def test_retry_emits_retry_events_then_succeeds() -> None:
    g = with_settings(graph([("a", "emit", "A"), ("f", "flaky", "F", {"fail_times": 2})],
                            [("a", "out", "f", "in")]),
                      "f", retry={"max_attempts": 3, "initial_interval_s": 0.01, "jitter": False})
    result = await run_graph_local(g, REG, "ok")
    assert result.status == "succeeded"
    assert [e.data["attempt"] for e in events_of(result, EventType.RETRY)] == [1, 2]
    assert result.output("f", "out") == "ok"


async def test_each_attempt_of_a_node_execution_has_its_own_execution_key() -> None:
    g = with_settings(graph([("a", "emit", "A"), ("f", "flaky", "F", {"fail_times": 2})],
                            [("a", "out", "f", "in")]),
                      "f", retry={"max_attempts": 3, "initial_interval_s": 0.01, "jitter": False})
    result = await run_graph_local(g, REG, "ok", run_id="r-keys")
    assert [e.data["error"]["message"] for e in events_of(result, EventType.RETRY)] == [
        "flaky: attempt 1 fails (key r-keys:f:1)", "flaky: attempt 2 fails (key r-keys:f:2)"]


async def test_retries_exhausted_route_to_the_error_port() -> None:
    g = with_settings(graph([("a", "emit", "A"), ("f", "flaky", "F", {"fail_times": 5}),
                             ("h", "relay", "Handler"), ("n", "relay", "Normal")],
                            [("a", "out", "f", "in"), ("f", "error", "h", "in"), ("f", "out", "n", "in")]),
                      "f", retry={"max_attempts": 2, "initial_interval_s": 0.01}, on_error="error_port")
    result = await run_graph_local(g, REG, "payload")
    assert result.status == "succeeded"
    assert result.node_states["n"] == "skipped"
    handled = result.output("h", "out")
    assert handled["error_type"] == "ConnectionError" and handled["input"] == "payload"
    assert len(events_of(result, EventType.RETRY)) == 1


async def test_continue_on_fail_passes_the_error_as_data() -> None:
    g = with_settings(graph([("a", "emit", "A"), ("b", "boom", "Boom", {"message": "bad"}),
                             ("c", "relay", "After")],
                            [("a", "out", "b", "in"), ("b", "out", "c", "in")]), "b", on_error="continue")
    result = await run_graph_local(g, REG, 1)
    assert result.status == "succeeded"
    assert result.output("c", "out")["error"] == "boom: bad"


async def test_stop_mode_fails_the_run_and_runs_nothing_after() -> None:
    g = graph([("a", "emit", "A"), ("b", "boom", "Boom", {"message": "bad"}), ("c", "relay", "After")],
              [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    result = await run_graph_local(g, REG, 1)
    assert result.status == "failed"
    assert result.error is not None and "boom: bad" in result.error["message"]
    assert result.node_states["c"] == "not_run"  # the run ended before it ran
    assert result.events[-1].event_type == EventType.RUN_FAILED


async def test_timeout_fails_a_slow_node() -> None:
    g = with_settings(graph([("a", "emit", "A"), ("s", "relay", "Slow", {"delay_s": 5})],
                            [("a", "out", "s", "in")]), "s", timeout_s=0.05)
    result = await run_graph_local(g, REG, 1)
    assert result.status == "failed"
    assert result.error is not None and result.error["code"] == "node_timeout"


async def test_streaming_node_events_arrive_between_started_and_completed() -> None:
    g = graph([("a", "emit", "A"), ("t", "ticker", "T", {"count": 3})], [("a", "out", "t", "in")])
    result = await run_graph_local(g, REG, 1)
    kinds = [e.event_type for e in result.events if e.node_id == "t"]
    assert kinds == ["started", "progress", "progress", "progress", "completed"]


async def test_flow_and_link_edges_in_one_graph_with_nested_materialization() -> None:
    g = graph([("a", "emit", "A"), ("p1", "part", "Inner", {"name": "inner"}),
               ("p2", "part", "Outer", {"name": "outer"}), ("asm", "assemble", "Assemble")],
              [("a", "out", "asm", "in"), ("p1", "part", "p2", "parts", "link"),
               ("p2", "part", "asm", "parts", "link")])
    result = await run_graph_local(g, REG, "x")
    assert result.output("asm", "out") == {
        "input": "x", "parts": [{"name": "outer", "parts": [{"name": "inner", "parts": []}]}]}
    assert "p1" not in result.node_states  # link sources are materialized, not scheduled


async def test_link_cycle_is_rejected_with_its_path() -> None:
    g = graph([("a", "emit", "A"), ("p1", "part", "P1"), ("p2", "part", "P2"), ("asm", "assemble", "Asm")],
              [("a", "out", "asm", "in"), ("p1", "part", "p2", "parts", "link"),
               ("p2", "part", "p1", "parts", "link"), ("p2", "part", "asm", "parts", "link")])
    with pytest.raises(LinkCycleError) as info:
        await run_graph_local(g, REG, 1)
    assert "P1" in str(info.value) and "P2" in str(info.value)


async def test_nested_graph_runs_through_the_same_step_and_forwards_events() -> None:
    body = graph([("i", "emit", "Item"), ("r", "relay", "Double", {"value": "{{ input * 2 }}"})],
                 [("i", "out", "r", "in")])
    g = graph([("a", "emit", "A"), ("n", "nest", "Nest", {"body": body})], [("a", "out", "n", "in")])
    result = await run_graph_local(g, REG, 21)
    assert result.output("n", "out") == [42]
    inner = [e for e in result.events if e.node_id == "n" and (e.data or {}).get("subgraph")]
    assert {e.data["inner_node_name"] for e in inner} == {"Item", "Double"}


async def test_cancelled_run_interrupts_a_running_node() -> None:
    runner = LocalRunner(REG)
    g = graph([("a", "emit", "A"), ("s", "relay", "Slow", {"delay_s": 30}), ("c", "relay", "After")],
              [("a", "out", "s", "in"), ("s", "out", "c", "in")])
    task = asyncio.ensure_future(runner.run(g, 1, run_id="r-cancel"))

    def slow_started() -> bool:
        try:
            return any(e.node_id == "s" and e.event_type == "started" for e in runner.store.events("r-cancel"))
        except RunNotFoundError:
            return False

    while not slow_started():
        await asyncio.sleep(0.01)
    assert await runner.store.finish_run("r-cancel", "cancelled")
    result = await asyncio.wait_for(task, timeout=5)
    assert result.status == "cancelled"
    assert result.node_states["c"] == "not_run"  # the run ended before it ran
    assert result.node_states["s"] == "cancelled"  # it was running
    assert [(e.event_type, e.data) for e in result.events if e.node_id == "s"] == [
        ("started", {"worker_id": "local"}), ("cancelled", {"reason": "cancelled"})]


async def test_redelivered_node_after_completion_runs_nothing_and_emits_nothing() -> None:
    from dataclasses import replace

    from orchestrator.kernel.step import run_step

    runner = LocalRunner(REG)
    g = graph([("a", "emit", "A"), ("b", "relay", "B")], [("a", "out", "b", "in")])
    result = await runner.run(g, 1, run_id="r-dup")
    before = len(result.events)
    outcome = await run_step(replace(runner.env, worker_id="other"), "r-dup", "b")
    assert outcome.ran is False and outcome.status in ("done", "closed")
    assert len(runner.store.events("r-dup")) == before


async def test_completed_and_error_events_carry_the_resolved_parameters() -> None:
    g = graph([("a", "emit", "A", {"value": {"n": 3}}),
               ("b", "relay", "B", {"label": "n is {{ input.n }}"}),
               ("c", "boom", "C", {"message": "failed at {{ input.n }}"})],
              [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    result = await run_graph_local(g, REG, None)
    completed = next(e for e in events_of(result, EventType.COMPLETED) if e.node_id == "b")
    assert completed.data["parameters"]["label"] == "n is 3"
    error = next(e for e in events_of(result, EventType.ERROR) if e.node_id == "c")
    assert error.data["parameters"]["message"] == "failed at 3"


async def test_an_output_nested_deeper_than_the_limit_fails_the_node_naming_it() -> None:
    from orchestrator.kernel.nesting import nested_deeper_than

    deep: Any = 0
    for _ in range(2000):  # deeper than Python's recursion limit: measured without recursion
        deep = [deep]
    assert nested_deeper_than(deep, 128) and not nested_deeper_than([[0]], 2) and nested_deeper_than([[0]], 1)
    assert not nested_deeper_than("text", 0) and not nested_deeper_than({}, 1)
    g = graph([("a", "emit", "A"), ("b", "relay", "B")], [("a", "out", "b", "in")])
    result = await run_graph_local(g, REG, deep)
    assert result.status == "failed" and result.node_states["a"] == "failed"
    error = next(e for e in result.events if e.event_type == EventType.ERROR).data or {}
    assert "128 levels" in str(error) and "ORCH_MAX_OUTPUT_DEPTH" in str(error)


async def test_a_large_output_is_stored_whole_and_its_completed_event_carries_a_bounded_preview() -> None:
    from orchestrator.kernel.step import OUTPUT_PREVIEW_CHARS

    big = {"text": "x" * 200_000, "n": 1}
    g = graph([("a", "emit", "A", {"value": big}), ("b", "relay", "B", {"value": "small"})],
              [("a", "out", "b", "in")])
    result = await run_graph_local(g, REG, None)
    assert result.output("a", "out") == big  # the stored output is whole
    completed = {e.node_id: e.data for e in events_of(result, EventType.COMPLETED)}
    cut = completed["a"]["outputs"]["out"]
    assert completed["a"]["outputs_truncated"] is True and "value" not in cut
    assert cut["chars"] > 200_000 and len(cut["preview"]) <= OUTPUT_PREVIEW_CHARS + 1
    assert cut["preview"].startswith('{"text": "xxx')
    assert completed["b"]["outputs_truncated"] is False
    assert completed["b"]["outputs"]["out"] == {"type": "data", "value": "small"}


async def test_a_chain_runs_each_next_link_on_the_claim_its_predecessor_completion_made() -> None:
    from orchestrator.kernel.compile import compile_run
    from orchestrator.kernel.step import run_step
    from orchestrator.kernel.store import ClaimRequest, RunRecord, RunStatus
    from orchestrator.kernel.validation import validate_graph

    runner = LocalRunner(REG)
    g = graph([("a", "emit", "A", {"value": 5}), ("b", "relay", "B"), ("c", "relay", "C")],
              [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    plan = compile_run(validate_graph(g, REG), "r-chain", None)
    await runner.store.create_run(plan, RunRecord(run_id="r-chain", status=RunStatus.QUEUED, graph_id="g"))
    claims: list[str] = []
    real_claim = runner.store.claim_node

    async def counted(run_id: str, request: ClaimRequest, **kw: Any) -> Any:
        claims.append(request.node_id)
        return await real_claim(run_id, request, **kw)

    runner.store.claim_node = counted  # type: ignore[method-assign]
    node, claimed, ran = "a", None, []
    while True:  # as a worker runs a chain: each step takes the next link (one slot)
        outcome = await run_step(runner.env, "r-chain", node, take=lambda _: 1, claimed=claimed)
        ran.append((node, outcome.status))
        if not outcome.ready:
            break
        node = outcome.ready[0]
        claimed = outcome.claims.get(node)
    assert ran == [("a", "succeeded"), ("b", "succeeded"), ("c", "succeeded")]
    assert claims == ["a"]  # b and c ran on the claims made by the completions before them
    assert (await runner.store.get_run("r-chain")).status == "succeeded"
    assert runner.store.outputs("r-chain")["c"]["out"].value == 5
    started = [e for e in runner.store.events("r-chain") if e.event_type == EventType.STARTED]
    assert [e.node_id for e in started] == ["a", "b", "c"]
    assert all(e.data == {"worker_id": "local"} for e in started)


async def test_a_fan_out_runs_every_branch_it_hands_over_on_the_claim_its_completion_made() -> None:
    from orchestrator.kernel.compile import compile_run
    from orchestrator.kernel.step import run_step
    from orchestrator.kernel.store import ClaimRequest, RunRecord, RunStatus
    from orchestrator.kernel.validation import validate_graph

    runner = LocalRunner(REG)
    # a gate whose "yes" port leads to b, c and d, and whose "no" port (dead) to e
    g = graph([("a", "emit", "A", {"value": 5}), ("g", "gate", "G", {"open": True}), ("b", "relay", "B"),
               ("c", "relay", "C"), ("d", "relay", "D"), ("e", "relay", "E")],
              [("a", "out", "g", "in"), ("g", "yes", "b", "in"), ("g", "yes", "c", "in"), ("g", "yes", "d", "in"),
               ("g", "no", "e", "in")])
    plan = compile_run(validate_graph(g, REG), "r-fan", None)
    await runner.store.create_run(plan, RunRecord(run_id="r-fan", status=RunStatus.QUEUED, graph_id="g"))
    claims: list[str] = []
    asked: list[Any] = []
    real_claim, real_complete = runner.store.claim_node, runner.store.complete_node

    async def counted(run_id: str, request: ClaimRequest, **kw: Any) -> Any:
        claims.append(request.node_id)
        return await real_claim(run_id, request, **kw)

    async def completing(run_id: str, node_id: str, completion: Any, **kw: Any) -> Any:
        take = kw.get("take")
        asked.append(take.claim_taken if take is not None else None)
        return await real_complete(run_id, node_id, completion, **kw)

    runner.store.claim_node = counted  # type: ignore[method-assign]
    runner.store.complete_node = completing  # type: ignore[method-assign]
    first = await run_step(runner.env, "r-fan", "a", take=lambda _: 1)
    slots_for: list[int] = []

    def take(may_ready: int) -> int:
        slots_for.append(may_ready)
        return 3

    gate = await run_step(runner.env, "r-fan", "g", take=take, claimed=first.claims.get("g"))
    assert gate.ready == ["b", "c", "d"] and sorted(gate.claims) == ["b", "c", "d"]
    assert slots_for == [3]  # the host is asked for slots for what the live port may make ready
    # every node the completion takes is claimed with it, its started event naming this worker
    assert asked[1].started_data == {"worker_id": "local"} and asked[1].lease_s == runner.env.options.lease_s
    ends = await asyncio.gather(*(run_step(runner.env, "r-fan", n, take=lambda _: 1, claimed=gate.claims[n])
                                  for n in gate.ready))
    assert [o.status for o in ends] == ["succeeded"] * 3
    assert claims == ["a"]  # every other node ran on a claim a completion made
    assert (await runner.store.get_run("r-fan")).status == "succeeded"
    assert (await runner.store.node_states("r-fan"))["e"] == "skipped"
