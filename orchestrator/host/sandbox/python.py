"""Run a Python function body in a confined child process (the Code node's engine).

``run_python(code, value, SandboxLimits(timeout_s, memory_mb), settings=...)`` starts the worker's interpreter
(``python -I -B -c <child.py>``) inside the OS-level boundary of
``bwrap.confine`` (namespaces, uid 65534, read-only interpreter, a tmpfs scratch of
at most ``memory_mb`` and nothing else writable, no network) with the seccomp program of
``seccomp.confinement_bpf``; sends the code and input as JSON on stdin and reads
one result line back. The child adds the no-exec seccomp program, resource limits and the
audit hook (second layer) before the user's code runs; SANDBOX.md beside the Code node
says which layer stops what.

When the boundary cannot be set up (no bubblewrap, no libseccomp, ...) the call raises
:class:`SandboxError` of kind ``unavailable`` naming what is missing, unless the operator
set ``ORCH_SANDBOX_ALLOW_WEAK``: then the child runs unconfined in a temporary folder
with only the audit hook and the limits (the former behaviour, not a security boundary).

The wait is asyncio-native (never blocks the worker's loop); the wall-clock timeout and
cancellation kill bubblewrap's process group, and bubblewrap's ``--die-with-parent`` and
PID namespace take everything inside with it.

At most ``ORCH_SANDBOX_MAX_CONCURRENT`` sandboxes run at once per event loop (one loop per
worker process, so per process): nested Loops or a wide fan-out of Code nodes wait for a
slot (:func:`sandbox_slots`) instead of multiplying processes and their memory limits.
The wait is part of the node's execution: its ``timeout_s`` counts it, cancellation ends
it, and the step's supervisor keeps renewing the node's lease meanwhile.

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
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.host.sandbox.bwrap import SCRATCH, Confinement, confine, interpreter, unavailable
from orchestrator.host.sandbox.seccomp import SeccompUnavailable, confinement_bpf, no_exec_bpf, program_fd
from orchestrator.host.slots import LoopSlots
from orchestrator.kernel.errors import ParameterError
from orchestrator.settings import SandboxSettings, Settings

CHILD_SOURCE = Path(__file__).with_name("child.py").read_text(encoding="utf-8")
MARKER = "\x1e__code_node_result__"
STARTUP_GRACE_S = 1.0  # interpreter start-up is not the user's time
KILL_GRACE_S = 5.0  # how long a killed sandbox may take to close its pipes
MAX_LOG_CHARS = 64 * 1024


class SandboxError(RuntimeError):
    """The user's code failed; ``kind`` is exception|syntax|output|memory|timeout|crash."""

    def __init__(self, message: str, *, kind: str, logs: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.logs = logs


@dataclass(frozen=True)
class SandboxLimits:
    """What one run of code may use: ``timeout_s`` of wall time (its CPU limit follows)
    and ``memory_mb`` of memory (its scratch holds at most as much)."""

    timeout_s: float
    memory_mb: int


@dataclass
class SandboxResult:
    value: Any
    logs: str


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


# The running loop's sandbox slots (ORCH_SANDBOX_MAX_CONCURRENT of the settings passed on
# the loop's first use).
sandbox_slots = LoopSlots()


async def run_python(code: str, value: Any, limits: SandboxLimits, *, settings: Settings,
                     audit_hook: bool = True) -> SandboxResult:
    """Run ``code`` as the body of ``def main(input, items)``; return its value and prints.

    ``settings``: the host's (a node calls :meth:`NodeHost.run_python`). Waits for one of
    the loop's :func:`sandbox_slots` first. ``audit_hook=False`` leaves out the second
    layer (tests use it to show that the OS boundary alone stops an attack); it is refused
    outside the OS boundary.
    """
    memory_mb = limits.memory_mb
    if memory_mb > settings.sandbox_max_memory_mb:
        raise ParameterError(
            f"parameter 'memory_mb' is {memory_mb}; this deployment allows at most "
            f"{settings.sandbox_max_memory_mb} (ORCH_SANDBOX_MAX_MEMORY_MB)")
    async with sandbox_slots(settings.sandbox_max_concurrent):
        return await _run_python(code, value, limits, settings=settings, audit_hook=audit_hook)


async def _run_python(code: str, value: Any, limits: SandboxLimits, *, settings: Settings,
                      audit_hook: bool) -> SandboxResult:
    timeout_s, memory_mb = limits.timeout_s, limits.memory_mb
    boundary = await boundary_or_refusal(settings)
    if not audit_hook and not boundary:
        raise ValueError("audit_hook=False needs the OS-level boundary")
    scratch = SCRATCH if boundary else tempfile.mkdtemp(prefix="code-node-")
    request = {
        "code": code,
        "input": value,
        "scratch": scratch,
        "memory_mb": memory_mb,
        "cpu_s": math.ceil(timeout_s) + 1,
        "max_log_bytes": MAX_LOG_CHARS,
        "no_exec_bpf": no_exec_bpf().hex() if boundary else None,
        "prefix": os.path.realpath(sys.base_prefix),
        "audit_hook": audit_hook,
    }
    argv = [interpreter(), "-I", "-B", "-c", CHILD_SOURCE]
    seccomp_fd: int | None = None
    if boundary:
        seccomp_fd = program_fd(confinement_bpf())
        # Tmpfs pages are memory that RLIMIT_AS does not count: the scratch holds at most the
        # node's own memory budget, and /dev/shm nothing (read-only).
        scratch_mb = min(settings.sandbox_scratch_mb, memory_mb)
        how = Confinement(scratch_mb=scratch_mb, shm_mb=0, seccomp_fd=seccomp_fd)
        argv = confine(argv, how, settings)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=scratch if not boundary else "/",
            env={},
            start_new_session=True,  # its own process group, so a kill takes every descendant
            pass_fds=() if seccomp_fd is None else (seccomp_fd,),
        )
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)
    timed_out = False
    out_limit = settings.max_output_bytes + 8 * MAX_LOG_CHARS
    try:
        out, err, flooded = await asyncio.wait_for(
            _exchange(proc, json.dumps(request).encode(), out_limit), timeout_s + STARTUP_GRACE_S
        )
    except TimeoutError:
        timed_out, out, err, flooded = True, b"", b"", False
    finally:  # also on cancellation: nothing outlives the call
        await _reap(proc)
        if not boundary:
            shutil.rmtree(scratch, ignore_errors=True)
    if flooded:
        raise SandboxError(f"code wrote more than {out_limit} bytes to its output", kind="output")
    if timed_out:
        raise SandboxError(f"code timed out after {timeout_s:g}s", kind="timeout")
    reply = _parse(out)
    if reply is None:
        raise _crash(proc.returncode or 0, err, timeout_s, memory_mb)
    logs = str(reply.get("logs") or "")
    if reply.get("ok"):
        return SandboxResult(value=reply.get("value"), logs=logs)
    kind = str(reply.get("kind") or "exception")
    if kind == "memory":
        message = f"code exceeded its memory limit of {memory_mb} MB"
        raise SandboxError(message, kind=kind, logs=logs)
    raise SandboxError(f"code failed: {reply.get('error')}", kind=kind, logs=logs)


async def _exchange(
    proc: asyncio.subprocess.Process, payload: bytes, out_limit: int
) -> tuple[bytes, bytes, bool]:
    """Send the request; read stdout (at most ``out_limit`` bytes, else kill) and stderr.

    Returns (stdout, stderr tail, flooded). The worker never buffers more than the limits,
    however much the code writes.
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(payload)
        await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child died early; its exit status tells why

    async def read(stream: asyncio.StreamReader, limit: int, kill: bool) -> tuple[bytes, bool]:
        kept = bytearray()
        while chunk := await stream.read(65536):
            kept += chunk
            if len(kept) > limit:
                if kill:
                    _kill_group(proc.pid)
                    return bytes(kept[:limit]), True
                del kept[: len(kept) - limit]  # keep the tail: the last error line
        return bytes(kept), False

    (out, flooded), (err, _) = await asyncio.gather(
        read(proc.stdout, out_limit, True), read(proc.stderr, MAX_LOG_CHARS, False)
    )
    await proc.wait()
    return out, err, flooded


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill the sandbox's process group, read its pipes to their end and wait for it.

    bubblewrap's death takes the sandbox with it. Reading to EOF matters as much as the
    wait: a pipe left paused (a flood) or half read (a timeout, a cancellation) keeps its
    transport open after the process is gone. A process already reaped is not signalled:
    its pid may belong to someone else by now."""
    if proc.returncode is None:
        _kill_group(proc.pid)

    async def drain(stream: asyncio.StreamReader | None) -> None:
        while stream is not None and await stream.read(65536):
            pass

    try:
        await asyncio.wait_for(asyncio.gather(drain(proc.stdout), drain(proc.stderr), proc.wait()),
                               KILL_GRACE_S)
    except TimeoutError:
        pass  # a process that ignores SIGKILL this long is the kernel's business


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


_PROBED: dict[tuple[str, ...], str | None] = {}  # bubblewrap command line -> why it fails


async def _probe(settings: SandboxSettings) -> str | None:
    """Start an empty confined interpreter once per process; why it fails, or None.

    Catches what only running shows: user namespaces refused (Docker's default seccomp
    profile, ``kernel.unprivileged_userns_clone=0``), a seccomp program bubblewrap rejects.
    """
    fd = program_fd(confinement_bpf())
    try:
        argv = confine([interpreter(), "-I", "-c", "pass"], Confinement(seccomp_fd=fd), settings)
        key = tuple(a for a in argv if a != str(fd))
        if key in _PROBED:
            return _PROBED[key]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, env={}, pass_fds=(fd,), start_new_session=True)
    finally:
        os.close(fd)
    try:
        _out, err = await asyncio.wait_for(proc.communicate(), KILL_GRACE_S)
    except TimeoutError:
        return "starting a confined interpreter took too long"  # not cached: may be load
    finally:
        await _reap(proc)
    text = err.decode("utf-8", errors="replace").strip()
    _PROBED[key] = None if proc.returncode == 0 else (
        f"bubblewrap failed ({text or f'exit code {proc.returncode}'}); user namespaces may "
        "be disabled, or a container's seccomp profile refuses them")
    return _PROBED[key]


async def boundary_or_refusal(settings: SandboxSettings) -> bool:
    """True when the OS-level boundary is used; False in the weak mode ``settings`` opt into.

    Raises :class:`SandboxError` (kind ``unavailable``) naming what is missing and the
    setting that opts into the weak mode when the boundary cannot be set up.
    """
    missing = unavailable(settings)
    if missing is None:
        try:
            confinement_bpf()
        except SeccompUnavailable as exc:
            missing = str(exc)
    if missing is None:
        missing = await _probe(settings)
    if missing is None:
        return True
    if settings.sandbox_allow_weak:
        return False
    raise SandboxError(
        f"the Code node's OS-level sandbox cannot be set up: {missing}. Install it, or set "
        "ORCH_SANDBOX_ALLOW_WEAK=true to run code with only the in-process audit hook, "
        "which is not a security boundary (see nodes/flow/code/SANDBOX.md)",
        kind="unavailable",
    )
