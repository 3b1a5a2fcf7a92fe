"""Child runs on real workers: an Execute Workflow node runs a stored graph as a child run.

The API runs over real HTTP (uvicorn in a thread of the test process), the workers and
redis-server are the session fixtures of ``tests/integration/conftest.py`` (two worker
processes). Graphs are stored and runs started, cancelled and approved through the API.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.api import create_app
from orchestrator.client import Client, parse_frames
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerProcesses
from orchestrator.settings import Settings
from tests.fake_nodes import graph
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.integration

WAIT_S = 30.0
FAN = 6  # child branches: enough for both worker processes to take some
A, B = 10, 4  # the child's agent asks to divide A by B


@pytest.fixture
def api_url(redis_server: EmbeddedRedis, workers: WorkerProcesses, registry: Registry) -> Iterator[str]:
    # No sweeper in the API: what the workers and the API do at once is tested apart from it.
    settings = Settings(redis_url=redis_server.url, sse_ping_s=1.0, api_run_sweeper=False)
    with serve_in_thread(create_app(settings, registry=registry)) as url:
        yield url


@pytest.fixture
def client(api_url: str) -> Iterator[Client]:
    with Client(api_url) as c:
        yield c


def wait_for(client: Client, run_id: str, ready: Any, what: str, timeout_s: float = WAIT_S) -> dict[str, Any]:
    """``GET /runs/{run_id}`` until ``ready(run)`` holds; an AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    run = client.get_run(run_id)
    while not ready(run):
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id}: {what} within {timeout_s} s; last seen {run['status']}, "
                                 f"nodes {({n: s['status'] for n, s in run['nodes'].items()})}")
        time.sleep(0.1)
        run = client.get_run(run_id)
    return run


def ended(client: Client, run_id: str) -> dict[str, Any]:
    return wait_for(client, run_id, lambda r: r["finished_at"] is not None, "no terminal state")


def only_child(client: Client, parent: str) -> str:
    run = wait_for(client, parent, lambda r: r["children"], "no child run started")
    assert len(run["children"]) == 1
    return str(run["children"][0])


def parent_graph(graph_id: str, child_graph: str, **sub: Any) -> dict[str, Any]:
    return graph(
        [("t", "manual_trigger", "Start"),
         ("sub", "execute_workflow", "Shared step", {"graph_id": child_graph, **sub}),
         ("after", "probe", "After")],
        [("t", "output", "sub", "input"), ("sub", "output", "after", "input")],
        id=graph_id,
    )


def fan_graph(graph_id: str) -> dict[str, Any]:
    branches = [f"p{i}" for i in range(FAN)]
    return graph(
        [("t", "manual_trigger", "Start"),
         *[(b, "probe", f"Branch {i}", {"delay_s": 0.5, "value": i}) for i, b in enumerate(branches)],
         ("join", "probe", "Join")],
        [*[("t", "output", b, "input") for b in branches], *[(b, "output", "join", "input") for b in branches]],
        id=graph_id,
    )


def test_a_parent_gets_the_output_of_a_child_graph_whose_nodes_run_on_two_workers(client: Client) -> None:
    client.create_graph(fan_graph("it-child-fan"))
    client.create_graph(parent_graph("it-parent-fan", "it-child-fan"))
    parent = client.start_run("it-parent-fan", {"order": 7})
    child = only_child(client, parent)
    waiting = wait_for(client, parent, lambda r: r["nodes"]["sub"]["status"] in ("waiting", "succeeded"),
                       "the sub-graph node never waited")
    assert waiting["status"] in ("waiting", "succeeded")

    done = ended(client, parent)
    assert done["status"] == "succeeded", done["error"]
    child_run = client.get_run(child)
    assert child_run["status"] == "succeeded"
    assert child_run["parent_run"] == parent and child_run["meta"]["parent_node"] == "sub"
    assert child_run["graph_id"] == "it-child-fan" and child_run["meta"]["graph_version"] == 1
    branches = [child_run["nodes"][f"p{i}"]["outputs"]["output"]["value"] for i in range(FAN)]
    assert all(b["input"] == [{"order": 7}] for b in branches)  # the node's input became the child's input
    assert len({b["pid"] for b in branches}) >= 2, "the child's nodes all ran on one worker process"
    sub_output = done["nodes"]["sub"]["outputs"]["output"]["value"]
    assert sub_output == child_run["output"]
    assert sorted(item["value"] for item in sub_output["input"]) == list(range(FAN))
    assert done["nodes"]["after"]["outputs"]["output"]["value"]["input"] == [sub_output]


def test_cancelling_the_parent_mid_child_cancels_the_child(client: Client) -> None:
    client.create_graph(graph([("t", "manual_trigger", "Start"), ("slow", "probe", "Slow", {"delay_s": 60})],
                              [("t", "output", "slow", "input")], id="it-child-slow"))
    client.create_graph(parent_graph("it-parent-slow", "it-child-slow"))
    parent = client.start_run("it-parent-slow", {})
    child = only_child(client, parent)
    wait_for(client, child, lambda r: r["nodes"]["slow"]["status"] == "running", "the child's node never ran")

    answer = client.cancel(parent)
    assert answer["cancelled"] is True and answer["status"] == "cancelled"
    stopped = wait_for(client, child, lambda r: r["status"] == "cancelled", "the child was not cancelled", 5.0)
    assert stopped["nodes"]["slow"]["status"] == "cancelled"
    assert "parent run" in stopped["error"]["message"]
    assert client.get_run(parent)["nodes"]["after"]["status"] == "not_run"


def test_a_failed_child_fails_the_parent_node_naming_the_child(client: Client) -> None:
    client.create_graph(graph([("t", "manual_trigger", "Start"), ("b", "boom", "Boom", {"message": "bad row"})],
                              [("t", "output", "b", "input")], id="it-child-boom"))
    client.create_graph(parent_graph("it-parent-boom", "it-child-boom"))
    parent = client.start_run("it-parent-boom", {})
    done = ended(client, parent)
    child = only_child(client, parent)
    assert done["status"] == "failed"
    assert done["nodes"]["sub"]["status"] == "failed" and done["nodes"]["after"]["status"] != "succeeded"
    message = done["error"]["message"]
    assert child in message and "failed" in message and "bad row" in message


def test_a_graph_that_would_run_itself_is_refused_at_run_time(client: Client) -> None:
    client.create_graph(parent_graph("it-loop-a", "it-loop-b"))
    client.create_graph(parent_graph("it-loop-b", "it-loop-a"))
    first = client.start_run("it-loop-a", {})
    done = ended(client, first)
    assert done["status"] == "failed"
    second = only_child(client, first)
    refused = client.get_run(second)
    assert refused["status"] == "failed"
    assert "would run inside itself (it-loop-a > it-loop-b > it-loop-a)" in refused["error"]["message"]
    assert refused["children"] == []


def read_parent_events(api_url: str, run_id: str, timeout_s: float) -> list[tuple[str, dict[str, Any]]]:
    """The run's events so far, until its stream has been quiet for a moment (it is waiting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with httpx.Client(base_url=api_url, timeout=httpx.Timeout(2.0, read=1.0)) as http:
            events: list[tuple[str, dict[str, Any]]] = []
            try:
                with http.stream("GET", f"/runs/{run_id}/events") as response:
                    for event_id, _, data in parse_frames(response.iter_lines()):
                        events.append((event_id or "", json.loads(data)))
            except httpx.ReadTimeout:
                pass  # a waiting run's stream stays open: what came so far is what we want
        if any((e.get("data") or {}).get("event") == "approval_requested" for _, e in events):
            return events
        if time.monotonic() > deadline:
            return events
        time.sleep(0.2)


def approval_child(graph_id: str) -> dict[str, Any]:
    script = [{"call": "divide", "args": {"a": A, "b": B}}, {"say": "Result: {tool_result}"}]
    return graph(
        [("t", "manual_trigger", "Start"),
         ("assistant", "agent", "Assistant", {"model": "dryrun:approval", "script": script,
                                              "prompt": "{{ input.message }}"}),
         ("calc", "toolset", "Calculator", {"toolkits": ["calculator"], "requires_approval": ["divide"]})],
        [("t", "output", "assistant", "input"), ("calc", "tools", "assistant", "tools", "link")],
        id=graph_id,
    )


def test_an_approval_inside_the_child_is_answered_through_the_parent(client: Client, api_url: str) -> None:
    client.create_graph(approval_child("it-child-approval"))
    client.create_graph(parent_graph("it-parent-approval", "it-child-approval"))
    parent = client.start_run("it-parent-approval", {"message": "divide"})
    child = only_child(client, parent)
    wait_for(client, child, lambda r: r["status"] == "waiting", "the child never asked for approval")
    assert client.get_run(parent)["status"] == "waiting"
    # The question shows in the parent's own stream (the console's banner, a chat stream), on its waiting node.
    [asked] = [e for _, e in read_parent_events(api_url, parent, 10.0)
               if (e.get("data") or {}).get("event") == "approval_requested"]
    assert asked["node_id"] == "sub" and asked["data"]["child_run"] == child
    assert [t["tool_name"] for t in asked["data"]["tool_calls"]] == ["divide"]

    # As the console's banner sends it: the parent's waiting node.
    answer = httpx.post(f"{api_url}/runs/{parent}/approvals", json={"decision": "approve", "node_id": "sub"},
                        timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"run_id": child, "node_id": "assistant", "decision": "approve"}

    done = ended(client, parent)
    assert done["status"] == "succeeded", done["error"]
    assert str(A / B) in done["nodes"]["sub"]["outputs"]["output"]["value"]["response"]
    again = httpx.post(f"{api_url}/runs/{parent}/approvals", json={"decision": "approve"}, timeout=10)
    assert again.status_code == 409, again.text


def loop_graph(graph_id: str, items: int, concurrency: int, delay_s: float) -> dict[str, Any]:
    body = graph([("li", "loop_input", "Item"), ("mark", "probe", "Mark", {"delay_s": delay_s})],
                 [("li", "output", "mark", "input")], id="body")
    return graph([("t", "manual_trigger", "Start"),
                  ("each", "loop", "For each", {"mode": "for_each", "items": list(range(items)), "body": body,
                                                "concurrency": concurrency, "max_iterations": items})],
                 [("t", "output", "each", "input")], id=graph_id)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) spans that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def test_for_each_iterations_run_as_child_runs_on_both_workers_within_the_concurrency(client: Client) -> None:
    items, concurrency = 12, 4
    client.create_graph(loop_graph("it-loop-fan", items, concurrency, 0.6))
    run_id = client.start_run("it-loop-fan", {})
    done = ended(client, run_id)
    assert done["status"] == "succeeded", done["error"]
    results = done["nodes"]["each"]["outputs"]["output"]["value"]
    assert results["iterations"] == items
    assert [r["input"] for r in results["results"]] == [[i] for i in range(items)]  # item order
    assert len(done["children"]) == items
    assert len({r["pid"] for r in results["results"]}) >= 2, "every iteration ran on one worker process"
    peak = most_at_once([(r["start"], r["end"]) for r in results["results"]])
    assert 2 <= peak <= concurrency  # iterations overlap, never more than the Loop's concurrency
    children = [client.get_run(c) for c in done["children"]]
    assert sorted(c["meta"]["label"] for c in children) == sorted(f"For each[{i}]" for i in range(items))
    assert all(c["parent_run"] == run_id and c["meta"]["inline"] for c in children)
    # The body's nodes show in the Loop's events, labelled as the CLI prints them.
    events = [e for _, e in client.iter_events(run_id)]
    marks = [e["data"] for e in events if e["node_id"] == "each" and e["event_type"] == "completed"
             and (e.get("data") or {}).get("inner_node_name") == "Mark"]
    assert sorted(m["subgraph"] for m in marks) == sorted(f"For each[{i}]" for i in range(items))


def test_a_failed_iteration_fails_the_loop_naming_its_index_and_cancels_the_others(client: Client) -> None:
    body = graph([("li", "loop_input", "Item"), ("c", "conditional", "Odd?", {"condition": "{{ input == 3 }}"}),
                  ("b", "boom", "Boom", {"message": "item three"}), ("slow", "probe", "Slow", {"delay_s": 20})],
                 [("li", "output", "c", "input"), ("c", "true", "b", "input"), ("c", "false", "slow", "input")],
                 id="body")
    client.create_graph(graph([("t", "manual_trigger", "Start"),
                               ("each", "loop", "For each", {"mode": "for_each", "items": [1, 2, 3],
                                                             "body": body, "concurrency": 3})],
                              [("t", "output", "each", "input")], id="it-loop-boom"))
    run_id = client.start_run("it-loop-boom", {})
    done = ended(client, run_id)
    assert done["status"] == "failed"
    assert done["error"]["message"].startswith("loop iteration 2 failed: ") and "item three" in done["error"]["message"]
    others = [client.get_run(c) for c in done["children"]]
    assert sorted(c["status"] for c in others) == ["cancelled", "cancelled", "failed"]


def agent_with_workflow_tool(graph_id: str, tool_graph: str) -> dict[str, Any]:
    script = [{"call": "lookup", "args": {"input": {"a": 2, "b": 3}}}, {"say": "Result: {tool_result}"}]
    return graph(
        [("t", "manual_trigger", "Start"),
         ("assistant", "agent", "Assistant", {"model": "dryrun:wf", "script": script, "prompt": "{{ input.message }}"}),
         ("tool", "workflow_tool", "Lookup", {"graph_id": tool_graph, "tool_name": "lookup",
                                              "description": "Look a pair of numbers up"})],
        [("t", "output", "assistant", "input"), ("tool", "tools", "assistant", "tools", "link")],
        id=graph_id,
    )


def test_an_agent_calls_a_stored_graph_as_a_tool_and_reads_its_output(client: Client) -> None:
    client.create_graph(graph([("t", "manual_trigger", "Start"), ("p", "probe", "Look up", {"value": "graph-done"})],
                              [("t", "output", "p", "input")], id="it-tool-graph"))
    client.create_graph(agent_with_workflow_tool("it-agent-tool", "it-tool-graph"))
    run_id = client.start_run("it-agent-tool", {"message": "look it up"})
    done = ended(client, run_id)
    assert done["status"] == "succeeded", done["error"]
    [child] = done["children"]
    child_run = client.get_run(child)
    assert child_run["status"] == "succeeded" and child_run["meta"]["label"] == "Assistant > lookup"
    assert child_run["nodes"]["p"]["outputs"]["output"]["value"]["input"] == [{"a": 2, "b": 3}]
    response = done["nodes"]["assistant"]["outputs"]["output"]["value"]["response"]
    assert '"value": "graph-done"' in response and '"a": 2' in response


def test_a_failing_graph_tool_gives_the_model_its_error_instead_of_failing_the_agent(client: Client) -> None:
    client.create_graph(graph([("t", "manual_trigger", "Start"), ("b", "boom", "Boom", {"message": "no such pair"})],
                              [("t", "output", "b", "input")], id="it-tool-boom"))
    client.create_graph(agent_with_workflow_tool("it-agent-tool-boom", "it-tool-boom"))
    done = ended(client, client.start_run("it-agent-tool-boom", {"message": "look it up"}))
    assert done["status"] == "succeeded", done["error"]
    response = done["nodes"]["assistant"]["outputs"]["output"]["value"]["response"]
    assert response.startswith("Result: error (failed): ") and "no such pair" in response


async def test_the_sweeper_cancels_the_child_of_a_parent_that_ended_another_way(client: Client, store: Any) -> None:
    from orchestrator.service.sweeper import Sweeper

    client.create_graph(graph([("t", "manual_trigger", "Start"), ("slow", "probe", "Slow", {"delay_s": 60})],
                              [("t", "output", "slow", "input")], id="it-child-orphan"))
    client.create_graph({**parent_graph("it-parent-orphan", "it-child-orphan"), "settings": {"deadline_s": 600}})
    parent = client.start_run("it-parent-orphan", {})
    child = only_child(client, parent)
    keys = store.keys
    # The child (default deadline: an hour) ends by its parent's deadline (to the milliseconds between
    # reading it and storing the child).
    own = await store.redis.zscore(keys.active_runs(), child)
    assert abs(own - await store.redis.zscore(keys.active_runs(), parent)) < 1.0
    # The parent's deadline passes (the sweeper ends it; no API call cancels the child).
    assert await store.finish_run(parent, "timed_out", {"code": "run_timed_out", "message": "deadline"})
    assert (await store.get_run(child)).status in ("queued", "running")
    report = await Sweeper(store, lambda run_id, nodes: None, store.settings).sweep_once()
    assert report.locked
    stopped = await store.get_run(child)
    assert stopped.status == "cancelled" and f"its parent run {parent} is timed_out" in stopped.error["message"]
    assert await store.redis.hget(keys.children(), child) is None  # settled: nothing left to reconcile


def test_a_child_deeper_than_the_depth_bound_is_refused_naming_the_setting(client: Client) -> None:
    depth = Settings().child_max_depth
    levels = [f"it-depth-{i}" for i in range(depth + 2)]
    leaf = graph([("t", "manual_trigger", "Start"), ("p", "probe", "Leaf")], [("t", "output", "p", "input")],
                 id=levels[-1])
    client.create_graph(leaf)
    for graph_id, inner in itertools.pairwise(levels):
        client.create_graph(parent_graph(graph_id, inner))
    root = client.start_run(levels[0], {})
    assert ended(client, root)["status"] == "failed"
    run_id, chain = root, []
    while True:
        run = client.get_run(run_id)
        chain.append(run)
        if not run["children"]:
            break
        [run_id] = run["children"]
    assert len(chain) == depth + 1  # the root and `depth` levels of children; the next was refused
    refusal = f"a child run would be {depth + 1} levels deep; ORCH_CHILD_MAX_DEPTH is {depth}"
    assert refusal in chain[-1]["error"]["message"]
    assert all(r["status"] == "failed" for r in chain)


def test_a_child_s_model_usage_counts_under_the_parent_node_and_against_its_budget(client: Client) -> None:
    client.create_graph(graph([("t", "manual_trigger", "Start"),
                               ("llm", "llm_completion", "Summarize", {"model": "dryrun:m", "prompt": "say hi"})],
                              [("t", "output", "llm", "input")], id="it-child-llm"))
    client.create_graph(parent_graph("it-parent-llm", "it-child-llm"))
    done = ended(client, client.start_run("it-parent-llm", {}))
    assert done["status"] == "succeeded", done["error"]
    assert done["nodes"]["sub"]["usage"]["by_model"]["dryrun:m"]["calls"] == 1
    used = done["usage"]["total_tokens"]
    # A parent whose budget the child's usage passes fails with the budget error (whatever the error mode).
    client.create_graph({**parent_graph("it-parent-llm-tight", "it-child-llm"),
                         "settings": {"budget": {"max_tokens": used - 1}}})
    over = ended(client, client.start_run("it-parent-llm-tight", {}))
    assert over["status"] == "failed"
    assert over["error"]["message"].startswith("run budget max_tokens exceeded")


def test_a_parent_failing_on_another_branch_cancels_its_child_at_once(client: Client) -> None:
    client.create_graph(graph([("t", "manual_trigger", "Start"), ("slow", "probe", "Slow", {"delay_s": 60})],
                              [("t", "output", "slow", "input")], id="it-child-sibling"))
    client.create_graph(graph(
        [("t", "manual_trigger", "Start"), ("sub", "execute_workflow", "Slow step", {"graph_id": "it-child-sibling"}),
         ("wait", "probe", "Later", {"delay_s": 1.5}), ("b", "boom", "Boom", {"message": "other branch"})],
        [("t", "output", "sub", "input"), ("t", "output", "wait", "input"), ("wait", "output", "b", "input")],
        id="it-parent-sibling"))
    parent = client.start_run("it-parent-sibling", {})
    child = only_child(client, parent)
    assert ended(client, parent)["status"] == "failed"
    # No sweeper runs here: the worker whose step failed the run cancels its child.
    stopped = wait_for(client, child, lambda r: r["status"] == "cancelled", "the child was not cancelled", 2.0)
    assert f"its parent run {parent} ended" in stopped["error"]["message"]
