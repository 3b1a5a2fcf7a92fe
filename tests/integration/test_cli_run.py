"""``orchestrator run`` end to end in a subprocess, with no REDIS_URL (the embedded default)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.foreground import as_foreground_job

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from orchestrator.cli import main; sys.exit(main())"]


def run_cli(*args: str, timeout_s: float = 240, **settings: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI (with ``settings`` as ``ORCH_<NAME>`` variables); past ``timeout_s``
    interrupt it (SIGINT: it stops the redis-server and workers it started) before
    failing, so a stuck run leaves no processes behind."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ORCH_REDIS_URL")}
    env.update({f"ORCH_{name.upper()}": value for name, value in settings.items()})
    proc = subprocess.Popen([*CLI, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_foreground_job)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise AssertionError(f"orchestrator {' '.join(args)} did not finish in {timeout_s} s:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.timeout(300)
def test_run_command_runs_an_example_graph_on_its_own_redis_and_workers() -> None:
    done = run_cli("run", "examples/hello.json", "--input", '{"name": "Ada"}', "--json",
                   "--workers", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    # it says what it does while Redis and the worker start (stderr: stdout stays JSON)
    progress = done.stderr.splitlines()
    assert progress[0].startswith("starting an embedded redis-server")
    assert any(line.startswith("ready in ") for line in progress), progress
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    *events, summary = lines
    assert summary["status"] == "succeeded"
    assert "Ada" in summary["outputs"]["Greeting"]["output"]["prompt"]
    kinds = [(e["node_name"], e["event_type"]) for e in events]
    assert kinds[0] == (None, "run_started")
    assert kinds[-1] == (None, "run_completed")
    assert ("Greeting", "completed") in kinds
    ids = [tuple(int(p) for p in e["id"].split("-")) for e in events]
    assert ids == sorted(ids)


@pytest.mark.timeout(300)
def test_run_command_rejects_an_invalid_graph_with_exit_code_2_and_names_the_node(
    tmp_path: Path,
) -> None:
    bad = {"id": "bad", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "x", "type": "set_feilds", "name": "Typo", "data": {}},
    ], "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "x",
                  "targetHandle": "input", "data": {"channel": "flow"}}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    done = run_cli("run", str(path))
    assert done.returncode == 2
    assert "UnknownNodeTypeError" in done.stderr
    assert "set_fields" in done.stderr  # the "did you mean" hint
    assert "node x" in done.stderr


@pytest.mark.timeout(300)
def test_run_command_exits_1_when_the_run_fails_and_prints_its_error() -> None:
    done = run_cli("run", "examples/branch_merge.json", "--input", '"not an object"', "--json",
                   "--workers", "1")
    assert done.returncode == 1, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["status"] == "failed"
    assert summary["error"]["node_id"] == "check"


@pytest.mark.timeout(300)
def test_run_command_answers_an_approval_with_decide_and_exits_3_when_nobody_can() -> None:
    args = ("run", "examples/agent_approval.json", "--offline", "--json", "--workers", "1",
            "--input", '{"message": "use divide on 10 and 4"}')
    approved = run_cli(*args, "--decide", "approve")
    assert approved.returncode == 0, approved.stderr[-3000:]
    *events, summary = [json.loads(line) for line in approved.stdout.splitlines() if line.strip()]
    kinds = [e["event_type"] for e in events]
    assert kinds.index("run_waiting") < kinds.index("run_resumed") < kinds.index("run_completed")
    assert "2.5" in summary["outputs"]["Assistant"]["output"]["response"]
    usage = summary["usage"]["total"]  # both executions: before the approval and after it
    assert usage["by_model"]["dryrun:gpt-4o-mini"]["calls"] == 2 and usage["cost_usd"] > 0

    unanswered = run_cli(*args)  # stdin is not a terminal and no --decide
    assert unanswered.returncode == 3
    assert "--decide" in unanswered.stderr


@pytest.mark.timeout(300)
def test_run_view_names_loop_inner_nodes_and_prints_outputs_as_json() -> None:
    done = run_cli("run", "examples/loop.json", "--workers", "1",
                   "--input", '[{"n": 1}, {"n": 2}]')
    assert done.returncode == 0, done.stderr[-3000:]
    assert "For each[1] > Mark" in done.stdout  # the inner node, not only the loop's name
    assert '"processed": true' in done.stdout  # JSON, not the Python repr 'processed': True
    assert "True" not in done.stdout


@pytest.mark.timeout(300)
def test_run_view_prints_bracketed_and_escaped_model_text_verbatim_and_exits_0() -> None:
    message = "see [/x] and [b]note[/b] \x1b[31mred\x1b[0m " + "long " * 2000
    done = run_cli("run", "examples/agent_chat_tools.json", "--offline", "--workers", "1",
                   "--input", json.dumps({"message": message}))
    assert done.returncode == 0, done.stderr[-3000:]
    shown = message.replace("\x1b", "\\x1b").strip()
    assert shown in done.stdout.replace("\n", "")  # the finished stream, whole
    assert "\x1b" not in done.stdout
    assert re.search(r"usage: \d+ tokens \(\d+ in, \d+ out\), \$0\.\d{6}", done.stdout)


@pytest.mark.timeout(300)
def test_the_rag_example_prints_its_citations_verbatim() -> None:
    done = run_cli("run", "examples/rag.json", "--offline", "--workers", "1",
                   "--input", '{"question": "How long are finished runs kept?"}')
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\n[handbook.md, chunk 2]\n" in done.stdout


@pytest.mark.timeout(300)
def test_run_command_waits_out_a_wait_node_timer_and_stops_at_a_form() -> None:
    # The command's sweeper wakes the timer: a pass every 0.5 s, not 5, once its 2 s are up.
    timed = run_cli("run", "examples/wait_timer.json", "--input", '{"order": 7}', "--json", "--workers", "1",
                    sweep_period_s="0.5")
    assert timed.returncode == 0, timed.stderr[-3000:]
    *events, summary = [json.loads(line) for line in timed.stdout.splitlines() if line.strip()]
    assert summary["status"] == "succeeded"
    assert summary["outputs"]["Done"]["output"] == {"order": 7, "waited": True}
    kinds = [e["event_type"] for e in events if e["node_name"] is None]
    assert kinds.index("run_waiting") < kinds.index("run_resumed") < kinds.index("run_completed")
    graph = json.loads((ROOT / "examples" / "wait_timer.json").read_text())
    graph["nodes"][1]["data"] = {"resume_on": "form"}
    form = Path(os.environ.get("TMPDIR", "/tmp")) / f"wait_form_{os.getpid()}.json"
    form.write_text(json.dumps(graph))
    try:
        asked = run_cli("run", str(form), "--workers", "1")
    finally:
        form.unlink()
    assert asked.returncode == 3
    assert "waits for a form (a Wait node" in asked.stderr and "orchestrator runs waits" in asked.stderr


@pytest.mark.timeout(300)
def test_an_approval_asked_inside_a_loop_iteration_is_answered_with_decide(tmp_path: Path) -> None:
    """On workers a Loop's iterations are child runs: the question one asks reaches the
    command through the outer run, and --decide answers it there."""
    script = [{"call": "divide", "args": {"a": 10, "b": 4}}, {"say": "Result: {tool_result}"}]
    body = {"id": "body", "nodes": [
        {"id": "item", "type": "loop_input", "name": "Item", "data": {}},
        {"id": "assistant", "type": "agent", "name": "Assistant", "data": {
            "model": "dryrun:loop", "script": script, "prompt": "divide {{ input }}"}},
        {"id": "calc", "type": "toolset", "name": "Calculator", "data": {
            "toolkits": ["calculator"], "requires_approval": ["divide"]}}],
        "edges": [
            {"id": "b1", "source": "item", "sourceHandle": "output", "target": "assistant", "targetHandle": "input",
             "data": {"channel": "flow"}},
            {"id": "b2", "source": "calc", "sourceHandle": "tools", "target": "assistant", "targetHandle": "tools",
             "data": {"channel": "link"}}]}
    graph = {"id": "loop_approval", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "each", "type": "loop", "name": "For each", "data": {"mode": "for_each", "body": body}}],
        "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "each", "targetHandle": "input",
                   "data": {"channel": "flow"}}]}
    path = tmp_path / "loop_approval.json"
    path.write_text(json.dumps(graph))
    done = run_cli("run", str(path), "--json", "--workers", "1", "--input", "[1]", "--decide", "approve")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["status"] == "succeeded"
    [result] = summary["outputs"]["For each"]["output"]["results"]
    assert "2.5" in result["response"]
