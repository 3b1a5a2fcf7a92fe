"""Running an Agno Agent or Team inside a node: event forwarding, outcomes, cancellation.

:class:`AgnoStream` consumes one streamed Agno run and turns it into node events:
every Agno event becomes an ``agent_event`` (``{"event", "agent", ...ev.to_dict()}``
minus bulky fields; empty content deltas skipped). It records how the run ended:

==================  ==============================================================
Agno event          outcome
==================  ==============================================================
RunCompleted        ``content`` / ``tokens_used`` set (the top-level run only)
RunError            ``RuntimeError`` naming the agent (the node fails)
ToolCallError       counted by the agent's tool-error policy (``tool_errors.py``);
                    without one (no tools hooked), ``RuntimeError`` naming the tool
RunCancelled        the kernel's ``RunCancelled`` signal
RunPaused           ``paused`` holds the requirements (the caller suspends the node)
==================  ==============================================================

Every model request's token counts (``ModelRequestCompleted``, members' too) are
reported with ``ctx.report_usage("<provider>:<model>", {...})`` as they come, so a run
budget is checked between model calls, and the tokens a provider limit charged as an
estimate before the call are corrected (``orchestrator/host/flow.py``); ``AgnoSpans``
(``spans.py``) traces the run. A model request that had to wait for a provider limit (or got
a 429) ends the node with the kernel's ``WaitRequested``, whatever Agno made of it.

A tool error the policy recorded is forwarded as a ``ToolError`` ``agent_event`` right
after the Agno event that carried it; a policy failure (``on_tool_error="fail"``, more
than ``max_tool_errors``) fails the node. Errors and cancellation are raised once the
stream has ended (Agno stores the run after its terminal event). Team events carry a
``Team`` prefix (``TeamRunCompleted``); both are handled. Member events (``parent_run_id``
set) are forwarded but never end the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from nodes._ai.spans import AgnoSpans, usage_key, usage_numbers
from nodes._ai.tool_errors import guards_of
from orchestrator.host.flow import gate_for, pending_signal
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import RunCancelled
from orchestrator.kernel.protocol import EventType, FlowContext, NodeEvent

_BULKY = frozenset({
    "messages", "session_state", "images", "videos", "audio", "files", "response_audio",
    "reasoning_messages", "additional_input", "references", "model_provider_data",
    "member_responses", "citations", "input",
})
CANCEL_GRACE_S = 1.0  # how long a cancelled node lets Agno notice the cancel and end its run
# Then, once Agno has ended the run, how long its cleanup may take: storing the run, closing
# each MCP toolkit it connected (fastmcp bounds one disconnect at 2 x 5 s), dropping its
# cancellation record. Usually well under a second; a loaded host can take seconds.
CLEANUP_GRACE_S = 10.0
_TERMINAL = frozenset({"RunCompleted", "RunError", "RunCancelled", "RunPaused"})
_END = object()  # end-of-stream marker on the pump queue
_BACKGROUND: set[asyncio.Future[None]] = set()  # wind-downs in flight (the loop holds weak refs)


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


def event_payload(ev: Any, default_name: str, redact: Callable[[Any], Any]) -> dict[str, Any]:
    """An Agno event as ``agent_event`` data (JSON-safe, redacted with the host's ``redact``,
    bulky fields dropped)."""
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
    """Consume one Agno stream; ``events()`` yields node events, then read the outcome.

    The Agno stream runs in its own task (the *pump*) that feeds a queue, so a
    cancellation of the node (the kernel cancels its task when the run ends, or on a
    node timeout) lands on the queue, not inside Agno. The node then tells Agno with
    ``acancel_run`` (``Team.acancel_run`` for a team: members too) and gives it
    ``CANCEL_GRACE_S`` to end the run on its own. Once it has (its terminal event went
    through the pump), its cleanup is not cut short, up to ``CLEANUP_GRACE_S``: Agno stores
    the run as cancelled, closes the MCP connections it opened and drops its cancellation
    record. (A cancel landing in Agno's ``MCPTools.close`` is swallowed there and leaves
    the toolkit half-closed: ``session`` still set, its server stopped by nobody waiting.)
    A pump still running after that, or whose run Agno has not ended within the grace (a
    model call that does not return), is cancelled outright; Agno's finally-blocks then
    close MCP with the cancel already delivered. The node's task ends after the pump, so a
    cancelled node has closed what its agent opened. Nothing Agno emits after the
    cancellation is forwarded.
    """

    def __init__(self, ctx: FlowContext, name: str, run_id: str, runner: Any = None) -> None:
        self.ctx = ctx
        self.name = name
        self.run_id = run_id
        self.runner = runner
        self.content: str = ""
        self.tokens_used: int = 0
        self.completed = False
        self.paused = False
        self.cancelled = False  # Agno reported the run cancelled (RunCancelled)
        # Snapshots taken when the run paused (Agno mutates the objects on close).
        self.requirements: list[dict[str, Any]] = []
        self.tool_calls: list[dict[str, Any]] = []
        self._error: str | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._agno_ended = False  # the run's terminal event went through: Agno cleans up
        self._tool_errors: list[str] = []  # Agno's, when no tool-error policy is hooked
        self.guards = guards_of(runner)
        self._usage: list[tuple[str, dict[str, int]]] = []  # model requests not yet reported
        host = node_host(ctx)
        self.redact = host.redact
        self.spans = AgnoSpans(name, content=host.settings.trace_content, redact=host.redact)

    async def events(self, stream: AsyncIterator[Any]) -> AsyncIterator[NodeEvent]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        pump = asyncio.ensure_future(self._pump(stream, queue))
        # A consumer cancelled while it handles an event (not while it waits on the
        # queue) leaves this generator suspended at its yield; its task's end still stops
        # the Agno run rather than waiting for the generator to be collected.
        consumer = asyncio.current_task()

        def on_consumer_done(_task: Any) -> None:
            if not pump.done():
                self._stop(pump)

        if consumer is not None:
            consumer.add_done_callback(on_consumer_done)
        ended = False
        failure: BaseException | None = None
        try:
            while (ev := await queue.get()) is not _END:
                if isinstance(ev, BaseException):
                    ended = True
                    raise pending_signal(self.ctx) or ev
                node_event = self._observe(ev)
                while self._usage:  # may raise UsageBudgetError: the run stops here
                    key, numbers = self._usage.pop(0)
                    await gate_for(self.ctx).settle(int(numbers.get("total_tokens", 0) or 0))
                    await self.ctx.report_usage(key, numbers)
                if node_event is not None:
                    yield node_event
                for guard in self.guards:
                    for record in guard.take_records():
                        yield self.ctx.event(EventType.AGENT_EVENT, record)
            ended = True
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self.spans.close(failure)
            if consumer is not None:
                consumer.remove_done_callback(on_consumer_done)
            if ended:
                await asyncio.gather(pump, return_exceptions=True)
            else:  # cancelled or closed mid-stream
                await asyncio.shield(self._stop(pump))
        self._raise_outcome()

    def _observe(self, ev: Any) -> NodeEvent | None:
        """Record what ``ev`` says about the run; the node event to forward, if any."""
        if _is_empty_delta(ev):
            return None
        top = getattr(ev, "run_id", None) == self.run_id
        kind = str(getattr(ev, "event", "")).removeprefix("Team")
        if kind == "ToolCallCompleted":
            self._mark_policy_error(ev)
        self.spans.observe(ev, kind)
        if kind == "ModelRequestCompleted":
            self._usage.append((usage_key(ev), usage_numbers(ev)))
        if top and kind == "RunPaused":
            self._pause(ev)
        node_event = self.ctx.event(EventType.AGENT_EVENT, event_payload(ev, self.name, self.redact))
        if not top:
            return node_event  # a member's event: forwarded, never ends the node
        if kind == "RunContent" and getattr(ev, "content", None):
            self.content += str(ev.content)
        elif kind == "RunCompleted":
            # Not the end: Agno stores the session after its last event.
            self._complete(ev)
        elif kind == "RunError":
            self._error = self.redact(str(getattr(ev, "content", "") or "model error"))
        elif kind == "ToolCallError":
            self._tool_error(ev)
        elif kind == "RunCancelled":
            self.cancelled = True
        return node_event

    def _raise_outcome(self) -> None:
        signal = pending_signal(self.ctx)
        if signal is not None:
            raise signal
        for guard in self.guards:
            if guard.signal is not None:
                raise guard.signal
        if self._error is not None:
            raise RuntimeError(f"agent {self.name!r} failed: {self._error}")
        if self.cancelled:
            raise RunCancelled(f"agent {self.name!r} run was cancelled",
                               node_id=self.ctx.node_id, run_id=self.ctx.run_id)
        for guard in self.guards:
            if guard.failure is not None:
                raise RuntimeError(guard.failure)
        if self._tool_errors:
            raise RuntimeError(f"agent {self.name!r}: tool call failed: "
                               + "; ".join(self._tool_errors))

    def _mark_policy_error(self, ev: Any) -> None:
        """A call the tool-error policy answered looks like a success to Agno: mark it failed
        (``tool_call_error``), for its span, its event and the stored run. Its record is
        still pending here: records are forwarded after the event that follows them."""
        tool = getattr(ev, "tool", None)
        name = getattr(tool, "tool_name", None)
        if tool is not None and any(r["tool"] == name for g in self.guards for r in g.records):
            tool.tool_call_error = True

    def _tool_error(self, ev: Any) -> None:
        """Agno's ``ToolCallError``: the policy's own stop, or an error outside its hook."""
        tool = getattr(getattr(ev, "tool", None), "tool_name", None) or "?"
        message = str(getattr(ev, "error", "") or "")
        if any(g.failure is not None or g.signal is not None for g in self.guards):
            return  # the policy stopped the run (StopAgentRun); its record says why
        agent = getattr(ev, "agent_name", None) or getattr(ev, "team_name", None)
        guard = next((g for g in self.guards if g.agent == agent), None)
        guard = guard or (self.guards[0] if self.guards else None)
        if guard is not None:
            guard.native(tool, message)
        else:
            self._tool_errors.append(f"{tool}: {self.redact(message)}")

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
        self.content = self.redact(self.content)  # the node's output, as its events are
        metrics = getattr(ev, "metrics", None)
        self.tokens_used = int(getattr(metrics, "total_tokens", 0) or 0)

    def _stop(self, pump: asyncio.Future[None]) -> asyncio.Future[None]:
        """Start winding the Agno run down (once); the future of that."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._wind_down(pump))
            _BACKGROUND.add(self._stopping)
            self._stopping.add_done_callback(_BACKGROUND.discard)
        return self._stopping

    async def _wind_down(self, pump: asyncio.Future[None]) -> None:
        """Cancel the Agno run: ask Agno, wait ``CANCEL_GRACE_S`` for it to end the run (and
        if it did, ``CLEANUP_GRACE_S`` more for its cleanup), then cancel the pump."""
        try:
            with contextlib.suppress(Exception):
                await self._cancel_agno()
            await asyncio.wait({pump}, timeout=CANCEL_GRACE_S)
            if not pump.done() and self._agno_ended:
                await asyncio.wait({pump}, timeout=CLEANUP_GRACE_S)
        finally:
            if not pump.done():
                pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _pump(self, stream: AsyncIterator[Any], queue: asyncio.Queue[Any]) -> None:
        """Move every item of ``stream`` to ``queue``, then an exception it raised, then _END;
        notes the run's terminal event (the consumer may have stopped reading)."""
        try:
            async for ev in stream:
                if getattr(ev, "run_id", None) == self.run_id and \
                        str(getattr(ev, "event", "")).removeprefix("Team") in _TERMINAL:
                    self._agno_ended = True
                queue.put_nowait(ev)
        except Exception as exc:  # Agno reports model/tool errors as events; this is the rest
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(_END)

    async def _cancel_agno(self) -> bool:
        """``acancel_run`` of the runner's class (a Team also cancels its members' runs)."""
        from agno.agent import Agent

        cancel = getattr(type(self.runner), "acancel_run", None) or Agent.acancel_run
        told: bool = await cancel(self.run_id)
        return told


async def complete_text(ctx: FlowContext, model: Any, prompt: str, *, system: str | None = None,
                        name: str = "llm") -> AsyncIterator[NodeEvent | tuple[str, int]]:
    """One model call without tools or history: yields ``progress`` token events, then
    ``(text, tokens_used)``. Model errors raise ``RuntimeError``."""
    from agno.agent import Agent

    agent = Agent(model=model, name=name, instructions=system or None, telemetry=False,
                  add_history_to_context=False)
    run_id = f"{agno_run_id(ctx)}:{id(agent)}"
    tracker = AgnoStream(ctx, name, run_id, runner=agent)
    stream = agent.arun(prompt, stream=True, stream_events=True, run_id=run_id,
                        session_id=f"{ctx.run_id}:{ctx.node_id}")
    async for node_event in tracker.events(stream):
        data = node_event.data or {}
        if data.get("event") == "RunContent" and data.get("content"):
            yield ctx.event(EventType.PROGRESS, {"token": data["content"]})
    yield tracker.content, tracker.tokens_used
