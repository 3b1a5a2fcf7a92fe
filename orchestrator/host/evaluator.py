"""JSONata evaluated in child processes with a hard bound on memory and time.

jsonata-python checks its timeout between evaluation steps, and a single step
(``$pad("x", 1000000000)``, ``$join`` of a huge list, a range) can build gigabytes or run
for minutes. Inside the worker that is every node step of the process at risk, so
:func:`evaluate_jsonata` sends the expression and its input to a child instead:

* A small pool of long-lived children (``ORCH_TRANSFORM_PROCESSES`` per worker process)
  started on first use as fresh interpreters (``python -I -c evaluator_child.py``: a
  fork+exec, never a fork of the multi-threaded worker), so a call costs a round trip on
  two pipes, not a start-up.
* Each child limits its address space to ``ORCH_TRANSFORM_MEMORY_MB`` before it reads a
  request (a ``MemoryError`` there is a node error naming the setting), and its CPU time
  per request, in case its parent dies first.
* The parent waits for the reply until the expression's timeout plus a grace; then it
  kills the child (SIGKILL) and the call fails naming the limit. A killed, crashed or
  out-of-memory child is not reused; the next call starts a fresh one.
* Calls take one of ``ORCH_TRANSFORM_PROCESSES`` slots per event loop first, and the
  blocking pipe I/O runs in a thread: the event loop never waits on a child.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.host.slots import LoopSlots
from orchestrator.settings import Settings

CHILD_SOURCE = Path(__file__).with_name("evaluator_child.py").read_text(encoding="utf-8")
GRACE_S = 1.0  # past the expression's own timeout, before the child is killed
REPLY_SLACK_BYTES = 64 * 1024  # a reply may exceed the output limit by its envelope


class EvaluatorLimitError(ValueError):
    """A child ran out of memory or time, or answered more than the output limit."""


class _Child:
    """One child interpreter and its pipes."""

    def __init__(self, memory_mb: int) -> None:
        self.memory_mb = memory_mb
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", CHILD_SOURCE, str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={}, start_new_session=True)

    def ask(self, request: bytes, deadline: float, max_reply_bytes: int) -> bytes | None:
        """The reply line, or None when the child died or the deadline passed (then it is killed)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(request + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):
            return None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        reply = bytearray()
        while not reply.endswith(b"\n"):
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0 or not poller.poll(left_ms):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            reply += chunk
            if len(reply) > max_reply_bytes:
                raise EvaluatorLimitError(
                    f"parameter 'expression': the result is larger than {max_reply_bytes} bytes "
                    "(ORCH_MAX_OUTPUT_BYTES)")
        return bytes(reply)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self, kill: bool) -> None:
        if kill:
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


@dataclass(frozen=True, kw_only=True)
class CallLimits:
    """The bounds of one :meth:`EvaluatorPool.call`: the expression's ``timeout_s`` (the
    child is killed ``GRACE_S`` later), the child's ``memory_mb``, the largest reply
    (``max_reply_bytes``), and how many idle children the pool keeps afterwards (``keep``)."""

    timeout_s: float
    memory_mb: int
    max_reply_bytes: int
    keep: int


class EvaluatorPool:
    """Idle children of one process, taken and given back by the threads that call them."""

    def __init__(self) -> None:
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def call(self, request: dict[str, Any], limits: CallLimits, *,
             running: list[_Child] | None = None) -> dict[str, Any]:
        """Blocking: one request answered by a child under ``limits``; keeps at most
        ``limits.keep`` idle children. The child is appended to ``running`` while it works
        (so a caller can kill it)."""
        timeout_s, memory_mb = limits.timeout_s, limits.memory_mb
        child = self._take(memory_mb)
        if running is not None:
            running.append(child)
        try:
            raw = child.ask(json.dumps(request).encode("utf-8"), time.monotonic() + timeout_s + GRACE_S,
                            limits.max_reply_bytes)
        except BaseException:
            child.close(kill=True)
            raise
        if raw is None:
            child.close(kill=True)
            raise EvaluatorLimitError(
                f"parameter 'expression': JSONata ran past its {timeout_s:g} s limit or past its "
                f"memory limit of {memory_mb} MB (ORCH_TRANSFORM_MEMORY_MB) and was stopped")
        reply: dict[str, Any] = json.loads(raw)
        if reply.get("kind") == "memory":
            child.close(kill=True)  # a MemoryError may have left it in a poor state
            raise EvaluatorLimitError(
                f"parameter 'expression': JSONata needed more than its memory limit of {memory_mb} MB "
                "(ORCH_TRANSFORM_MEMORY_MB)")
        self._give(child, limits.keep)
        return reply

    def _take(self, memory_mb: int) -> _Child:
        with self._lock:
            if self._pid != os.getpid():  # a forked copy (prefork pool): its parent's pipes
                self._idle, self._pid = [], os.getpid()
            while self._idle:
                child = self._idle.pop()
                if child.proc.poll() is None and child.memory_mb == memory_mb:
                    return child
                child.close(kill=True)
        return _Child(memory_mb)

    def _give(self, child: _Child, keep: int) -> None:
        with self._lock:
            if len(self._idle) < keep:
                self._idle.append(child)
                return
        child.close(kill=True)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        if self._pid != os.getpid():
            return  # a forked copy: the children are its parent's to close
        for child in idle:
            child.close(kill=True)


POOL = EvaluatorPool()
atexit.register(POOL.close)
_slots = LoopSlots()  # ORCH_TRANSFORM_PROCESSES of the settings passed on the loop's first use


async def evaluate_jsonata(expression: str, value: Any, *, settings: Settings, timeout_ms: int,
                           max_depth: int) -> Any:
    """The value of ``expression`` on ``value``, computed by a child under the limits above
    and those of ``settings`` (the host's: a node calls :meth:`NodeHost.evaluate_jsonata`);
    a ValueError naming the parameter (and the limit, when one was reached)."""
    request = {"expression": expression, "input": value, "timeout_ms": timeout_ms, "max_depth": max_depth,
               "cpu_s": timeout_ms / 1000 + GRACE_S}
    running: list[_Child] = []
    async with _slots(settings.transform_processes):
        try:
            limits = CallLimits(timeout_s=timeout_ms / 1000, memory_mb=settings.transform_memory_mb,
                                max_reply_bytes=settings.max_output_bytes + REPLY_SLACK_BYTES,
                                keep=settings.transform_processes)
            reply = await asyncio.to_thread(POOL.call, request, limits, running=running)
        except asyncio.CancelledError:  # the node timed out or its run ended: stop the child now
            for child in running:
                child.kill()
            raise
    if not reply.get("ok"):
        raise ValueError(str(reply.get("message")))
    return reply.get("value")
