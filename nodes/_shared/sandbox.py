"""Run a Python function body in a sandboxed child process (the Code node's engine).

``run_python(code, value, timeout_s=..., memory_mb=...)`` starts
``python -I -B sandbox_child.py`` (``sys.executable``) in a fresh scratch folder with an
empty environment and its own process group, sends the code and input as JSON on stdin,
and reads one result line back. The child sets resource limits and installs an audit
hook before the user's code runs (see ``sandbox_child.py`` and the Code node's
SANDBOX.md for exactly what is stopped and what is not). The parent enforces the
wall-clock timeout by killing the whole process group, also when the awaiting task is
cancelled, and deletes the scratch folder afterwards.

Failures raise :class:`SandboxError` (a RuntimeError) whose message is the user's
traceback last line, "timed out after Xs" or "exceeded its memory limit"; ``logs``
carries what the code printed before it failed.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHILD = str(Path(__file__).with_name("sandbox_child.py"))
MARKER = "\x1e__code_node_result__"
STARTUP_GRACE_S = 1.0  # interpreter start-up is not the user's time
MAX_LOG_CHARS = 64 * 1024


class SandboxError(RuntimeError):
    """The user's code failed; ``kind`` is exception|syntax|output|memory|timeout|crash."""

    def __init__(self, message: str, *, kind: str, logs: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.logs = logs


@dataclass
class SandboxResult:
    value: Any
    logs: str


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _communicate(
    proc: subprocess.Popen[bytes], payload: bytes, wall_s: float
) -> tuple[bytes, bytes, bool]:
    try:
        out, err = proc.communicate(payload, timeout=wall_s)
        return out, err, False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return out, err, True


def _parse(out: bytes) -> dict[str, Any] | None:
    text = out.decode("utf-8", errors="replace")
    at = text.rfind(MARKER)
    if at < 0:
        return None
    try:
        parsed = json.loads(text[at + len(MARKER):].strip())
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _crash(returncode: int, err: bytes, timeout_s: float, memory_mb: int) -> SandboxError:
    tail = err.decode("utf-8", errors="replace").strip().splitlines()
    last = tail[-1] if tail else ""
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return SandboxError(f"code timed out after {timeout_s:g}s (CPU limit)", kind="timeout")
    if "MemoryError" in last or "memory" in last.lower():
        return SandboxError(f"code exceeded its memory limit of {memory_mb} MB", kind="memory")
    message = f"code process exited with code {returncode}: {last}".rstrip(": ")
    return SandboxError(message, kind="crash")


async def run_python(code: str, value: Any, *, timeout_s: float, memory_mb: int) -> SandboxResult:
    """Run ``code`` as the body of ``def main(input, items)``; return its value and prints."""
    scratch = tempfile.mkdtemp(prefix="code-node-")
    request = {
        "code": code,
        "input": value,
        "scratch": scratch,
        "memory_mb": memory_mb,
        "cpu_s": math.ceil(timeout_s) + 1,
        "max_log_bytes": MAX_LOG_CHARS,
    }
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scratch,
        env={},
        start_new_session=True,  # its own process group, so a kill takes every descendant
        close_fds=True,
    )
    try:
        out, err, timed_out = await asyncio.to_thread(
            _communicate, proc, json.dumps(request).encode(), timeout_s + STARTUP_GRACE_S
        )
    except asyncio.CancelledError:
        _kill_group(proc)
        raise
    finally:
        _kill_group(proc)
        shutil.rmtree(scratch, ignore_errors=True)
    if timed_out:
        raise SandboxError(f"code timed out after {timeout_s:g}s", kind="timeout")
    reply = _parse(out)
    if reply is None:
        raise _crash(proc.returncode, err, timeout_s, memory_mb)
    logs = str(reply.get("logs") or "")
    if reply.get("ok"):
        return SandboxResult(value=reply.get("value"), logs=logs)
    kind = str(reply.get("kind") or "exception")
    if kind == "memory":
        message = f"code exceeded its memory limit of {memory_mb} MB"
        raise SandboxError(message, kind=kind, logs=logs)
    raise SandboxError(f"code failed: {reply.get('error')}", kind=kind, logs=logs)
