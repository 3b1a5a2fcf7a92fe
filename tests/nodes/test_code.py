"""Code runs a Python function body in a sandboxed subprocess."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.host.sandbox import python as sandbox
from orchestrator.host.sandbox.python import SandboxError, SandboxResult
from orchestrator.kernel.environment import StepOptions
from orchestrator.kernel.errors import ParameterError, RunNotFoundError
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.protocol import DataValue, EventType, ExecutionResult, NodeEvent
from orchestrator.kernel.store import RunStatus
from orchestrator.settings import Settings, get_settings
from tests.nodes.node_harness import make_ctx, registry, values
from tests.nodes.test_flow_graphs import edge, node
from tests.support import claim


async def run_code(
    code: str, value: object = None, *, settings: Settings | None = None, **params: object
) -> tuple[ExecutionResult, list[NodeEvent]]:
    """Run the Code node (on a host with ``settings``, default the process's); return its
    result and the events it emitted while running."""
    ctx = make_ctx(node_type="code", node_name="Code", services=None if settings is None else {"settings": settings})
    data = {"code": code, "timeout_s": 5, "memory_mb": 256, **params}
    try:
        out = await registry().get("code").executor.execute(  # type: ignore[attr-defined]
            data, {"input": DataValue("data", value)}, ctx)
    except RuntimeError as exc:
        exc.add_note(f"emitted: {[e.data for e in ctx.runtime.emitted]}")
        raise
    return out, ctx.runtime.emitted


async def test_code_returns_the_value_of_main_computed_from_input_and_items() -> None:
    rows = [{"n": 2}, {"n": 5}]
    out, _ = await run_code("return {'total': sum(r['n'] for r in items), 'first': input[0]}", rows)
    assert values(out) == {"output": {"total": sum(r["n"] for r in rows), "first": rows[0]}}


async def test_code_wraps_a_single_input_into_items() -> None:
    out, _ = await run_code("return items", {"a": 1})
    assert values(out) == {"output": [{"a": 1}]}


async def test_code_returns_prints_as_logs_not_as_output() -> None:
    out, _ = await run_code("print('step', 1)\nreturn 'done'")
    assert values(out) == {"output": "done"}
    logs = [(e.event_type, e.data) for e in out.events]
    assert logs == [(EventType.PROGRESS, {"logs": "step 1\n"})]


async def test_code_reports_the_users_error_with_its_line() -> None:
    with pytest.raises(RuntimeError, match="line 2: ZeroDivisionError"):
        await run_code("x = 1\nreturn x / 0")


async def test_code_emits_logs_printed_before_it_failed() -> None:
    with pytest.raises(SandboxError, match="KeyError") as info:
        await run_code("print('about to fail')\nraise KeyError('k')")
    assert info.value.logs == "about to fail\n"
    assert "about to fail" in " ".join(info.value.__notes__)


async def test_code_reports_a_syntax_error() -> None:
    with pytest.raises(RuntimeError, match="SyntaxError"):
        await run_code("return (")


async def test_code_rejects_a_return_value_that_is_not_json() -> None:
    with pytest.raises(RuntimeError, match="not JSON-serialisable"):
        await run_code("return {1, 2}")


async def test_code_is_killed_after_its_timeout() -> None:
    with pytest.raises(RuntimeError, match=r"timed out after 0\.5s"):
        await run_code("while True:\n    pass", timeout_s=0.5)


async def test_code_fails_with_a_memory_error_past_its_memory_limit() -> None:
    with pytest.raises(RuntimeError, match="memory limit of 64 MB"):
        await run_code("blob = bytearray(512 * 1024 * 1024)\nreturn len(blob)", memory_mb=64)


async def test_code_cannot_open_a_socket() -> None:
    with pytest.raises(RuntimeError, match="sandbox blocks socket"):
        await run_code("import socket\nsocket.create_connection(('127.0.0.1', 9))")


async def test_code_cannot_resolve_host_names() -> None:
    with pytest.raises(RuntimeError, match="sandbox blocks socket"):
        await run_code("import socket\nreturn socket.getaddrinfo('localhost', 80)")


@pytest.mark.parametrize("code", [
    "import os\nos.system('true')",
    "import subprocess\nsubprocess.run(['true'])",
    "import os\nos.execv('/bin/true', ['true'])",
    "import os\nos.fork()",
    "import os\nos.posix_spawn('/bin/true', ['true'], {})",
])
async def test_code_cannot_start_processes(code: str) -> None:
    with pytest.raises(RuntimeError, match="sandbox blocks"):
        await run_code(code)


async def test_code_cannot_import_ctypes() -> None:
    with pytest.raises(RuntimeError, match="sandbox blocks import of ctypes"):
        await run_code("import ctypes")


async def test_code_cannot_write_outside_its_scratch_folder(tmp_path: Path) -> None:
    target = tmp_path / f"escape-{uuid.uuid4().hex}.txt"
    # Stopped by the audit hook, or (inside the OS boundary, where /tmp is the sandbox's
    # own tmpfs) by the path not existing in the sandbox's file system.
    with pytest.raises(RuntimeError, match=r"sandbox blocks writing|No such file"):
        await run_code(f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists()


async def test_code_cannot_escape_its_scratch_folder_with_dot_dot() -> None:
    with pytest.raises(RuntimeError, match="sandbox blocks writing"):
        await run_code("open('../escape.txt', 'w').write('x')")


async def test_code_cannot_read_files_outside_scratch_and_stdlib(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    with pytest.raises(RuntimeError, match=r"sandbox blocks reading|No such file") as failed:
        await run_code(f"return open({str(secret)!r}).read()")
    assert "hunter2" not in str(failed.value)


async def test_code_cannot_delete_files_outside_its_scratch_folder(tmp_path: Path) -> None:
    victim = tmp_path / "keep.txt"
    victim.write_text("x")
    with pytest.raises(RuntimeError, match=r"sandbox blocks os\.remove|No such file"):
        await run_code(f"import os\nos.remove({str(victim)!r})")
    assert victim.exists()


async def test_code_can_use_its_scratch_folder_and_the_standard_library() -> None:
    code = ("import json, re, statistics\n"
            "open('notes.txt', 'w').write(json.dumps(input))\n"
            "return {'back': json.loads(open('notes.txt').read()), 'mean': statistics.mean(items)}")
    out, _ = await run_code(code, [1, 2, 3])
    assert values(out)["output"] == {"back": [1, 2, 3], "mean": 2}


async def test_code_sees_an_empty_environment() -> None:
    os.environ.setdefault("CODE_NODE_TEST_SECRET", "s3cret")
    out, _ = await run_code("import os\nreturn sorted(k for k in os.environ if 'SECRET' in k)")
    assert values(out)["output"] == []


async def test_code_scratch_folder_does_not_outlive_a_call() -> None:
    marker = f"left-{uuid.uuid4().hex}"
    await run_code(f"open({marker!r}, 'w').write('x')\nreturn 1")
    out, _ = await run_code(f"import os\nreturn os.path.exists({marker!r})")
    assert values(out)["output"] is False


async def test_code_rejects_a_timeout_above_sixty_seconds() -> None:
    with pytest.raises(ValueError, match="'timeout_s'"):
        await run_code("return 1", timeout_s=61)


async def test_code_rejects_a_memory_limit_above_4096_mb() -> None:
    with pytest.raises(ValueError, match="'memory_mb' must be between 32 and 4096"):
        await run_code("return 1", memory_mb=8192)


async def test_the_operator_caps_memory_mb_below_the_nodes_own_maximum() -> None:
    """A graph author may ask up to 4096 MB; the deployment allows what its hosts hold
    (ORCH_SANDBOX_MAX_MEMORY_MB, default 1024): eight sandboxes of 4 GiB outgrew a 24 GiB host."""
    with pytest.raises(ParameterError, match=r"'memory_mb' is 2048; this deployment allows at most 1024 "
                                             r"\(ORCH_SANDBOX_MAX_MEMORY_MB\)"):
        await run_code("return 1", memory_mb=2048, settings=Settings())
    out, _ = await run_code("return 1", memory_mb=2048, settings=Settings(sandbox_max_memory_mb=2048))
    assert out.outputs["output"].value == 1


# -- bounds a graph cannot lift: memory through an expression, sandboxes at once -------


def code_graph(memory_mb: Any) -> dict[str, Any]:
    return {"id": "g-code", "nodes": [node("t", "manual_trigger", "Start"),
                                      node("c", "code", "Code", code="return 1", memory_mb=memory_mb)],
            "edges": [edge("t", "c")]}


@pytest.mark.parametrize("memory_mb", ["{{ 8192 }}", "{{ 1000000 }}", "{{ input.mb }}", "{{ input.mb }} "])
async def test_an_expression_cannot_lift_the_memory_maximum(memory_mb: str) -> None:
    """The red-team attack: "{{ 8192 }}" gave the sandbox 8 GB where the literal is refused."""
    done = await LocalRunner(registry()).run(code_graph(memory_mb), {"mb": 8192})
    assert done.status == RunStatus.FAILED
    error = next(e for e in done.events if e.event_type == "error").data["error"]
    assert (error["node_id"], error["parameter"], error["code"]) == ("c", "memory_mb", "parameter_value")
    assert "above the maximum 4096" in error["message"]


async def test_a_memory_limit_from_an_expression_within_the_maximum_still_works() -> None:
    done = await LocalRunner(registry()).run(code_graph("{{ input.mb }}"), {"mb": 128})
    assert done.status == RunStatus.SUCCEEDED and done.output("c") == 1


@pytest.fixture
def sandbox_slots(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """ORCH_SANDBOX_MAX_CONCURRENT=2 for this test's loop."""
    monkeypatch.setenv("ORCH_SANDBOX_MAX_CONCURRENT", "2")
    get_settings.cache_clear()
    yield 2
    get_settings.cache_clear()


def counting(monkeypatch: pytest.MonkeyPatch, run: Any) -> list[int]:
    """Wrap the sandbox's run in a counter of sandboxes at once; returns [now, peak]."""
    seen = [0, 0]

    async def counted(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        seen[1] = max(seen)
        try:
            return await run(*args, **kwargs)
        finally:
            seen[0] -= 1

    monkeypatch.setattr(sandbox, "_run_python", counted)
    return seen


async def test_nested_loops_of_code_nodes_wait_for_the_processes_sandbox_slots(
        sandbox_slots: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The red-team graph, smaller: loop(4) -> loop(4) -> Code, 16 sandboxes asked at once."""
    seen = counting(monkeypatch, sandbox._run_python)
    code = node("c", "code", "Nap", code="import time\ntime.sleep(0.2)\nreturn input * 10")
    inner = {"id": "ib", "nodes": [node("li", "loop_input", "Item"), code], "edges": [edge("li", "c")]}
    outer = {"id": "ob", "nodes": [node("li", "loop_input", "Item"),
                                   node("l2", "loop", "Inner", items="{{ [input, input] }}", concurrency=4,
                                        body=inner)], "edges": [edge("li", "l2")]}
    g = {"id": "g-nested", "nodes": [node("t", "manual_trigger", "Start"),
                                     node("l1", "loop", "Outer", concurrency=4, body=outer)],
         "edges": [edge("t", "l1")]}
    done = await LocalRunner(registry()).run(g, [1, 2, 3, 4])
    assert done.status == RunStatus.SUCCEEDED, done.events[-1].data
    assert done.output("l1")["results"] == [{"results": [10 * i, 10 * i], "iterations": 2} for i in range(1, 5)]
    assert seen[1] == sandbox_slots


def started(runner: LocalRunner, run_id: str, node_id: str) -> bool:
    try:
        return any(e.event_type == "started" and e.node_id == node_id for e in runner.store.events(run_id))
    except RunNotFoundError:
        return False  # not created yet


async def test_a_code_node_waiting_for_a_sandbox_slot_keeps_its_lease(
        sandbox_slots: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slot wait is part of the node's execution: its supervisor renews the lease, so
    nothing takes the node for lost however long the wait."""
    async def quick(*args: Any, **kwargs: Any) -> SandboxResult:
        return SandboxResult(value=7, logs="")

    monkeypatch.setattr(sandbox, "_run_python", quick)
    lease_s = 0.15
    runner = LocalRunner(registry(), options=StepOptions(lease_s=lease_s, cancel_poll_s=0.02))
    slots = sandbox.sandbox_slots(sandbox_slots)
    for _ in range(sandbox_slots):
        await slots.acquire()  # every slot taken: the node waits
    task = asyncio.ensure_future(runner.run(code_graph(64), None, run_id="r-slot"))
    while not started(runner, "r-slot", "c"):
        await asyncio.sleep(0.01)
    seen = []
    for _ in range(3):  # past the first lease, the second, the third
        await asyncio.sleep(lease_s)
        seen.append((await claim(runner.store, "r-slot", "c", worker_id="intruder")).kind)
    for _ in range(sandbox_slots):
        slots.release()
    done = await asyncio.wait_for(task, 10)
    assert seen == ["busy", "busy", "busy"]
    assert done.status == RunStatus.SUCCEEDED and done.output("c") == 7
