"""One run, one trace: a real API process, real Redis, two worker processes exporting to a
local OTLP/HTTP receiver that decodes the protobuf.

A branching run (a condition; its true branch an agent that calls a tool; six parallel
probes so that both workers take nodes) must give one trace whose node spans are the
nodes that ran, each a child of the run's root span, from both workers; the agent's
model and tool spans carry GenAI attributes whose token counts equal the usage on the
node's completed event; no secret appears in any attribute.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from tests.fake_nodes import graph
from tests.support.otlp import OtlpReceiver, ReceivedSpan

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
FAKE_PACK = Path(__file__).parent / "fake_pack"
SECRET = "sk-trace-secret-5f1d2c3b4a"
PROBES = [f"p{i}" for i in range(6)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[OtlpReceiver, str]]:
    """(the receiver, the API's URL): redis, 2 workers and the API, all exporting traces."""
    with OtlpReceiver() as receiver:
        server = EmbeddedRedis(unix_socket=False).start()
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
               "ORCH_NODE_PATHS": str(FAKE_PACK), "ORCH_OFFLINE_MODELS": "1", "OPENAI_API_KEY": SECRET,
               "AGNO_TELEMETRY": "false"}
        workers = WorkerProcesses(server.url, WorkerConfig(count=2, concurrency=2, env=env))
        port = _free_port()
        api: subprocess.Popen[bytes] | None = None
        try:
            workers.start()
            api = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--factory", "orchestrator.api.app:create_app",
                 "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                env={**os.environ, **env, "REDIS_URL": server.url, "ORCH_API_RUN_SWEEPER": "false",
                     "ORCH_TRACE_LINK_TEMPLATE": "http://jaeger.example/trace/{trace_id}",
                     "PYTHONPATH": str(ROOT)}, cwd=str(ROOT), stdin=subprocess.DEVNULL)
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(url, api)
            yield receiver, url
        finally:
            if api is not None:
                api.terminate()
                api.wait(timeout=10)
            workers.stop()
            server.stop()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the API process exited"
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the API did not answer /health")


def _branching_graph() -> dict[str, Any]:
    return graph(
        [("t", "manual_trigger", "Start"),
         ("check", "conditional", "High score?", {"value": "{{ input.score }}", "operation": "gt", "compare_to": 5}),
         ("agent", "agent", "Assistant", {"model": "dryrun:gpt-4o-mini", "prompt": "use multiply on 6 and 7"}),
         ("tools", "toolset", "Calculator", {"toolkits": ["calculator"]}),
         ("low", "set_fields", "Low", {"fields": {"band": "low"}}),
         *[(p, "probe", f"Probe {p}", {"delay_s": 0.4, "value": i}) for i, p in enumerate(PROBES)]],
        [("t", "output", "check", "input"), ("check", "true", "agent", "input"),
         ("check", "false", "low", "input"), ("tools", "tools", "agent", "tools", "link"),
         *[("t", "output", p, "input") for p in PROBES]],
        id="traced_branches", name="traced branches")


def _run(url: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Start the run over HTTP, wait for its end; (run id, GET /runs/{id}, events by node)."""
    with httpx.Client(base_url=url, timeout=10.0) as client:
        assert client.post("/graphs", json=_branching_graph()).status_code == 201
        started = client.post("/graphs/traced_branches/runs", json={"input": {"score": 8, "api_key": SECRET}})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        deadline = time.monotonic() + 60
        while (detail := client.get(f"/runs/{run_id}").json())["status"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, f"run still {detail['status']}"
            time.sleep(0.2)
        return run_id, detail, detail["nodes"]


def root_span(spans: list[ReceivedSpan], run_id: str) -> ReceivedSpan | None:
    """The run's root span among ``spans`` (None until it arrived)."""
    return next((s for s in spans if s.name.startswith("run ") and s.attributes.get("orchestrator.run.id") == run_id),
                None)


def with_root(run_id: str, done: Callable[[list[ReceivedSpan]], bool]) -> Callable[[list[ReceivedSpan]], bool]:
    """``done``, and the run's root span arrived too: each process exports its spans in its
    own batches, so a node's span may arrive before the root the API ended earlier."""
    return lambda spans: done(spans) and root_span(spans, run_id) is not None


def _by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.span_id: s for s in spans}


def test_a_run_across_two_workers_is_one_trace_that_matches_its_graph(traced: tuple[OtlpReceiver, str]) -> None:
    receiver, url = traced
    run_id, detail, nodes = _run(url)
    assert detail["status"] == "succeeded"
    ran = {n["name"] for n in nodes.values() if n["status"] == "succeeded"}
    assert "Low" not in ran and {"Start", "High score?", "Assistant"} <= ran

    def complete(spans: list[ReceivedSpan]) -> bool:
        names = {s.name for s in spans if s.attributes.get("orchestrator.run.id") == run_id}
        return {f"node {n}" for n in ran} <= names and any(s.name.startswith("execute_tool") for s in spans)

    spans = receiver.wait_for(with_root(run_id, complete))
    root = root_span(spans, run_id)
    assert root is not None
    trace = [s for s in spans if s.trace_id == root.trace_id]
    assert detail["trace_id"] == root.trace_id
    assert detail["trace_url"] == f"http://jaeger.example/trace/{root.trace_id}"

    # the run's root hangs under the API request that started it
    parent = _by_id(trace)[root.parent_id]
    assert parent.service == "orchestrator-api" and "runs" in parent.name

    # one node span per node that ran (none for the dead branch), each a child of the root
    node_spans = [s for s in trace if s.name.startswith("node ")]
    assert sorted(s.name for s in node_spans) == sorted(f"node {n}" for n in ran)
    assert {s.parent_id for s in node_spans} == {root.span_id}
    assert all(s.service == "orchestrator-worker" for s in node_spans)
    assert len({s.attributes["orchestrator.worker.id"] for s in node_spans}) == 2
    assert all(s.attributes["orchestrator.node.status"] == "succeeded" for s in node_spans)

    # Celery's publish and consume hops are in the same trace
    assert any(s.name.startswith("apply_async/") for s in trace)
    assert any(s.name.startswith("run/") and s.service == "orchestrator-worker" for s in trace)

    # inside the agent node: invoke_agent > chat x2 and execute_tool, GenAI attributes
    agent_node = next(s for s in node_spans if s.name == "node Assistant")
    invoke = next(s for s in trace if s.name == "invoke_agent Assistant")
    assert invoke.parent_id == agent_node.span_id
    chats = [s for s in trace if s.attributes.get("gen_ai.operation.name") == "chat"]
    tools = [s for s in trace if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert len(chats) == 2 and {s.parent_id for s in chats + tools} == {invoke.span_id}
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == ["multiply"]
    assert {s.attributes["gen_ai.request.model"] for s in chats} == {"gpt-4o-mini"}

    # the spans' token counts are the usage on the completed event (and in GET /runs/{id})
    reported = nodes["agent"]["usage"]["by_model"]["dryrun:gpt-4o-mini"]
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats) == reported["input_tokens"]
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in chats) == reported["output_tokens"]
    assert agent_node.attributes["gen_ai.usage.input_tokens"] == reported["input_tokens"]
    assert detail["usage"]["input_tokens"] == reported["input_tokens"]
    assert detail["usage"]["cost_usd"] > 0

    # no secret, and no content (it is off by default), in any attribute of any span
    for span in spans:
        assert SECRET not in repr(span.attributes), span.name
        assert not any(k.startswith("gen_ai.tool.call.arguments") or k == "gen_ai.output.text"
                       for k in span.attributes)


def test_a_node_resumed_after_an_approval_joins_its_runs_trace(traced: tuple[OtlpReceiver, str]) -> None:
    receiver, url = traced
    g = json.loads((ROOT / "examples" / "agent_approval.json").read_text())
    with httpx.Client(base_url=url, timeout=10.0) as client:
        assert client.post("/graphs", json=g).status_code == 201
        started = client.post(f"/graphs/{g['id']}/runs", json={"input": {"message": "use divide on 10 and 4"}})
        run_id = started.json()["run_id"]
        deadline = time.monotonic() + 60
        while client.get(f"/runs/{run_id}").json()["status"] != "waiting":
            assert time.monotonic() < deadline, "the run never waited for its approval"
            time.sleep(0.2)
        answered = client.post(f"/runs/{run_id}/approvals", json={"decision": "approve"})
        assert answered.status_code == 200, answered.text
        while (detail := client.get(f"/runs/{run_id}").json())["status"] != "succeeded":
            assert time.monotonic() < deadline and detail["status"] in ("running", "waiting"), detail["status"]
            time.sleep(0.2)

    def both_executions(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.name == "node Assistant" and s.attributes.get("orchestrator.run.id") == run_id]
        return len(mine) == 2

    spans = receiver.wait_for(with_root(run_id, both_executions))
    root = root_span(spans, run_id)
    assert root is not None
    executions = [s for s in spans if s.name == "node Assistant" and s.attributes.get("orchestrator.run.id") == run_id]
    assert {s.trace_id for s in executions} == {root.trace_id} and {s.parent_id for s in executions} == {root.span_id}
    assert sorted(s.attributes["orchestrator.node.status"] for s in executions) == ["succeeded", "waiting"]
    assert detail["trace_id"] == root.trace_id
    # the model request before the pause counts too: the node's usage is both executions'
    assert all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in executions)
    spent = sum(s.attributes["gen_ai.usage.input_tokens"] for s in executions)
    assert detail["nodes"]["assistant"]["usage"]["input_tokens"] == spent
    assert detail["nodes"]["assistant"]["usage"]["by_model"]["dryrun:gpt-4o-mini"]["calls"] == 2


def test_a_trigger_resolved_at_start_is_a_node_span_of_the_api_under_the_runs_root(
        traced: tuple[OtlpReceiver, str]) -> None:
    """A trigger with one successor is completed by the start (kernel/start.py): its node
    span comes from the API process, a child of the run's root like every other node's."""
    receiver, url = traced
    g = graph([("t", "manual_trigger", "Begin"), ("p", "probe", "Probe", {"value": 1})],
              [("t", "output", "p", "input")], id="traced_start", name="traced start")
    with httpx.Client(base_url=url, timeout=10.0) as client:
        assert client.post("/graphs", json=g).status_code == 201
        run_id = client.post("/graphs/traced_start/runs", json={"input": {"api_key": SECRET}}).json()["run_id"]
        deadline = time.monotonic() + 60
        while (detail := client.get(f"/runs/{run_id}").json())["status"] != "succeeded":
            assert time.monotonic() < deadline and detail["status"] in ("queued", "running"), detail["status"]
            time.sleep(0.2)

    def both(spans: list[ReceivedSpan]) -> bool:
        names = {s.name for s in spans if s.attributes.get("orchestrator.run.id") == run_id}
        return {"node Begin", "node Probe"} <= names

    spans = receiver.wait_for(with_root(run_id, both))
    root = root_span(spans, run_id)
    assert root is not None
    nodes = {s.name: s for s in spans if s.trace_id == root.trace_id and s.name.startswith("node ")}
    assert {s.parent_id for s in nodes.values()} == {root.span_id}
    assert nodes["node Begin"].service == "orchestrator-api"
    assert nodes["node Begin"].attributes["orchestrator.node.status"] == "succeeded"
    assert nodes["node Probe"].service == "orchestrator-worker"
    assert nodes["node Begin"].attributes["orchestrator.worker.id"] != nodes["node Probe"].attributes[
        "orchestrator.worker.id"]
