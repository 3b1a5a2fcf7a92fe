"""Running an Agno Agent or Team inside a node: storage, event forwarding, outcomes.

:class:`AgnoStream` consumes one streamed Agno run and turns it into node events:
every Agno event becomes an ``agent_event`` (``{"event", "agent", ...ev.to_dict()}``
minus bulky fields; empty content deltas skipped). It records how the run ended:

==================  ==============================================================
Agno event          outcome
==================  ==============================================================
RunCompleted        ``content`` / ``tokens_used`` set (the top-level run only)
RunError            ``RuntimeError`` naming the agent (the node fails)
ToolCallError       ``RuntimeError`` naming the tool, after the stream ends
RunCancelled        the kernel's ``RunCancelled`` signal
RunPaused           ``paused`` holds the requirements (the caller suspends the node)
==================  ==============================================================

Team events carry a ``Team`` prefix (``TeamRunCompleted``); both are handled. Member
events (``parent_run_id`` set) are forwarded but never end the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from agno.db.base import BaseDb
from agno.db.in_memory import InMemoryDb

from nodes._ai.models import redact
from orchestrator.kernel.errors import RunCancelled
from orchestrator.kernel.protocol import EventType, FlowContext, NodeEvent

DB_PREFIX = "orc:agno"  # Agno's own session/run keys in the run's Redis (expire = retention)
_BULKY = frozenset({
    "messages", "session_state", "images", "videos", "audio", "files", "response_audio",
    "reasoning_messages", "additional_input", "references", "model_provider_data",
    "member_responses", "citations", "input",
})
# One in-process store for runs with no Redis (local runs, tests): history and approvals
# then work within this process only.
_MEMORY_DB = InMemoryDb()  # type: ignore[no-untyped-call]


def session_db(ctx: FlowContext) -> BaseDb:
    """Agno session storage: RedisDb on the run's Redis, else the process-local store."""
    redis_url = ctx.services.get("redis_url")
    if not redis_url:
        return _MEMORY_DB
    from agno.db.redis import RedisDb

    settings = ctx.services.get("settings")
    expire = getattr(settings, "retention_s", None)
    prefix = f"{getattr(settings, 'key_prefix', 'orc')}:agno"
    return RedisDb(db_url=str(redis_url), db_prefix=prefix, expire=expire)


def agno_run_id(ctx: FlowContext) -> str:
    """The Agno run id of this node in this run (the handle for cancel and continue)."""
    return f"{ctx.run_id}:{ctx.node_id}"


def json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _strip(value: Any, depth: int = 0) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, depth + 1) for k, v in value.items() if k not in _BULKY}
    if isinstance(value, list):
        return [_strip(v, depth + 1) for v in value]
    return value


def event_payload(ev: Any, default_name: str) -> dict[str, Any]:
    """An Agno event as ``agent_event`` data (JSON-safe, redacted, bulky fields dropped)."""
    raw = ev.to_dict() if hasattr(ev, "to_dict") else {}
    body = _strip(json_safe(raw))
    name = getattr(ev, "agent_name", None) or getattr(ev, "team_name", None) or default_name
    data: dict[str, Any] = {"event": str(getattr(ev, "event", "")), "agent": name}
    data.update({k: v for k, v in body.items() if k != "event"})
    redacted: dict[str, Any] = redact(data)
    return redacted


def _is_empty_delta(ev: Any) -> bool:
    event = str(getattr(ev, "event", ""))
    if not event.endswith("RunContent"):
        return False
    return not getattr(ev, "content", None) and not getattr(ev, "reasoning_content", None)


class AgnoStream:
    """Consume one Agno stream; ``events()`` yields node events, then read the outcome."""

    def __init__(self, ctx: FlowContext, name: str, run_id: str) -> None:
        self.ctx = ctx
        self.name = name
        self.run_id = run_id
        self.content: str = ""
        self.tokens_used: int = 0
        self.completed = False
        self.paused = False
        # Snapshots taken when the run paused (Agno mutates the objects on close).
        self.requirements: list[dict[str, Any]] = []
        self.tool_calls: list[dict[str, Any]] = []
        self._tool_errors: list[str] = []

    async def events(self, stream: AsyncIterator[Any]) -> AsyncIterator[NodeEvent]:
        try:
            async for ev in stream:
                top = getattr(ev, "run_id", None) == self.run_id
                event = str(getattr(ev, "event", ""))
                kind = event.removeprefix("Team")
                if _is_empty_delta(ev):
                    continue
                if top and kind == "RunPaused":
                    self._pause(ev)
                yield self.ctx.event(EventType.AGENT_EVENT, event_payload(ev, self.name))
                if not top:
                    continue
                if kind == "RunContent" and getattr(ev, "content", None):
                    self.content += str(ev.content)
                elif kind == "RunCompleted":
                    # Not a break: Agno stores the session after its last event.
                    self._complete(ev)
                elif kind == "RunError":
                    message = redact(str(getattr(ev, "content", "") or "model error"))
                    raise RuntimeError(f"agent {self.name!r} failed: {message}")
                elif kind == "ToolCallError":
                    tool = getattr(getattr(ev, "tool", None), "tool_name", None) or "?"
                    self._tool_errors.append(f"{tool}: {redact(str(ev.error or ''))}"
                                             if hasattr(ev, "error") else str(tool))
                elif kind == "RunCancelled":
                    raise RunCancelled(f"agent {self.name!r} run was cancelled",
                                       node_id=self.ctx.node_id, run_id=self.ctx.run_id)
        except asyncio.CancelledError:
            await self._cancel_agno()
            raise
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        if self._tool_errors:
            raise RuntimeError(f"agent {self.name!r}: tool call failed: "
                               + "; ".join(self._tool_errors))

    def _pause(self, ev: Any) -> None:
        self.paused = True
        self.requirements = [json_safe(r.to_dict()) for r in (ev.requirements or [])]
        self.tool_calls = [json_safe(t.to_dict()) for t in (ev.tools or [])]

    def _complete(self, ev: Any) -> None:
        self.completed = True
        if getattr(ev, "content", None) is not None:
            content = ev.content
            self.content = content if isinstance(content, str) else json.dumps(
                json_safe(content))
        metrics = getattr(ev, "metrics", None)
        self.tokens_used = int(getattr(metrics, "total_tokens", 0) or 0)

    async def _cancel_agno(self) -> None:
        """Tell Agno (and, with the Redis manager, other processes) the run is cancelled."""
        from agno.agent import Agent

        with contextlib.suppress(Exception):
            await asyncio.shield(Agent.acancel_run(self.run_id))


async def complete_text(ctx: FlowContext, model: Any, prompt: str, *, system: str | None = None,
                        name: str = "llm") -> AsyncIterator[NodeEvent | tuple[str, int]]:
    """One model call without tools or history: yields ``progress`` token events, then
    ``(text, tokens_used)``. Model errors raise ``RuntimeError``."""
    from agno.agent import Agent

    agent = Agent(model=model, name=name, instructions=system or None, telemetry=False,
                  add_history_to_context=False)
    run_id = f"{agno_run_id(ctx)}:{id(agent)}"
    tracker = AgnoStream(ctx, name, run_id)
    stream = agent.arun(prompt, stream=True, stream_events=True, run_id=run_id,
                        session_id=f"{ctx.run_id}:{ctx.node_id}")
    async for node_event in tracker.events(stream):
        data = node_event.data or {}
        if data.get("event") == "RunContent" and data.get("content"):
            yield ctx.event(EventType.PROGRESS, {"token": data["content"]})
    yield tracker.content, tracker.tokens_used
