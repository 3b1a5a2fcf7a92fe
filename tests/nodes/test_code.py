"""Code runs a Python function body in a sandboxed subprocess."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from nodes._shared.sandbox import SandboxError
from orchestrator.kernel.protocol import DataValue, EventType, ExecutionResult, NodeEvent
from tests.nodes.node_harness import make_ctx, registry, values


async def run_code(
    code: str, value: object = None, **params: object
) -> tuple[ExecutionResult, list[NodeEvent]]:
    """Run the Code node; return its result and the events it emitted while running."""
    ctx = make_ctx(node_type="code", node_name="Code")
    data = {"code": code, "timeout_s": 5, "memory_mb": 256, **params}
    try:
        out = await registry().get("code").executor.execute(  # type: ignore[attr-defined]
            data, {"input": DataValue("data", value)}, ctx)
    except RuntimeError as exc:
        exc.add_note(f"emitted: {[e.data for e in ctx.services['emitted']]}")
        raise
    return out, ctx.services["emitted"]


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
