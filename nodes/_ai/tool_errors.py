"""Tool errors back to the model: the Agent node's policy for a tool that fails.

Agno 3.1.10 already feeds an exception raised inside a tool back to the model as the
tool result (``str(exc)``, no error kind) and emits ``ToolCallError``; an MCP tool's
``is_error`` result comes back as the text ``Error from MCP tool '<name>': ...`` with no
event at all. Nothing bounds a model that keeps calling a failing tool, and the message
reaches the model unredacted. :class:`ToolErrorGuard` is an Agno *tool hook* (the
``tool_hooks`` chain wraps every tool call of an Agent or Team: toolset functions, MCP
tools, sub-graph tools) that makes the policy explicit:

- ``on_tool_error="return"`` (the default): the error goes back to the model as the tool
  result, ``"error (<Kind>): <message>"`` (redacted, cut to ``MESSAGE_LIMIT``), so it can
  retry or answer otherwise;
- ``on_tool_error="fail"``: the first tool error stops the Agno run (``StopAgentRun``)
  and the node fails naming the tool and the error kind;
- ``max_tool_errors``: past that many tool errors in one run of the agent the run stops
  and the node fails with a clear error (a bound on retry loops).

Each tool error becomes a ``ToolError`` ``agent_event`` (tool, kind, redacted message,
count, whether the model got it). :class:`~nodes._ai.runner.AgnoStream` forwards the
records and raises the failure once the stream has ended. A tool that is an async
generator raises while Agno iterates it, outside the hook: Agno's own ``ToolCallError``
is then counted through :meth:`ToolErrorGuard.native` (the model already got the message).
A kernel control signal (``RunCancelled``, ``SuspendRequested``, ...) or a
``UsageBudgetError`` raised by a tool is never shown to the model: it stops the Agno run
and the node raises it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.kernel.errors import ControlSignal, ParameterError, UsageBudgetError

MODES = ("return", "fail")
DEFAULT_MAX_TOOL_ERRORS = 5
MAX_TOOL_ERRORS_LIMIT = 100
MESSAGE_LIMIT = 2000
MCP_ERROR_PREFIX = "Error from MCP tool "


@dataclass(frozen=True)
class ToolErrorPolicy:
    mode: str = "return"
    max_errors: int = DEFAULT_MAX_TOOL_ERRORS

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ToolErrorPolicy:
        """The policy in an Agent node's parameters (``ParameterError`` naming the bad one)."""
        mode = data.get("on_tool_error") or "return"
        if mode not in MODES:
            raise ParameterError(f"on_tool_error must be one of {', '.join(MODES)}, got {mode!r}",
                                 parameter="on_tool_error")
        raw = data.get("max_tool_errors")
        try:
            limit = DEFAULT_MAX_TOOL_ERRORS if raw in (None, "") else int(raw)
        except (TypeError, ValueError):
            raise ParameterError(f"max_tool_errors must be a whole number, got {raw!r}",
                                 parameter="max_tool_errors") from None
        if not 0 <= limit <= MAX_TOOL_ERRORS_LIMIT:
            raise ParameterError(f"max_tool_errors must be between 0 and {MAX_TOOL_ERRORS_LIMIT}, "
                                 f"got {limit}", parameter="max_tool_errors")
        return cls(mode=str(mode), max_errors=limit)


@dataclass
class ToolErrorGuard:
    """One agent's tool errors in one run (an Agno tool hook; see the module doc)."""

    agent: str
    policy: ToolErrorPolicy
    redact: Callable[[Any], Any]
    count: int = 0
    failure: str | None = None  # why the node fails, once it must
    signal: Exception | None = None  # a run signal a tool raised: the node raises it
    records: list[dict[str, Any]] = field(default_factory=list)  # not yet forwarded

    async def hook(self, function_name: str, function_call: Callable[..., Awaitable[Any]],
                   arguments: dict[str, Any]) -> Any:
        """Agno's tool hook: run the call; a failure becomes the policy's answer."""
        try:
            result = await function_call(**arguments)
        except (ControlSignal, UsageBudgetError) as exc:
            # The run's own signals (cancelled, superseded, suspended, over budget) from a
            # tool that runs graph work: not the model's business; the node ends with them.
            from agno.exceptions import StopAgentRun

            self.signal = exc
            raise StopAgentRun(str(exc)) from exc
        except Exception as exc:
            if _agno_control(exc):  # Agno's own stop/retry/cancel signals
                raise
            return self._failed(function_name, type(exc).__name__, str(exc))
        content = getattr(result, "content", None)
        if isinstance(content, str) and content.startswith(MCP_ERROR_PREFIX):
            message = content.split(": ", 1)[1] if ": " in content else content
            return self._failed(function_name, "MCPToolError", message)
        return result

    def native(self, tool: str, message: str) -> None:
        """Count a tool error Agno reported itself (the model already has its text)."""
        self._record(tool, "ToolError", message, returned=True)

    def take_records(self) -> list[dict[str, Any]]:
        out, self.records = self.records, []
        return out

    def _failed(self, tool: str, kind: str, message: str) -> str:
        from agno.exceptions import StopAgentRun

        text = self._record(tool, kind, message, returned=self.failure is None)
        if self.failure is not None:
            raise StopAgentRun(self.failure)
        return f"error ({kind}): {text}"

    def _record(self, tool: str, kind: str, message: str, *, returned: bool) -> str:
        self.count += 1
        text = str(self.redact(message))[:MESSAGE_LIMIT]
        if self.failure is None:
            if self.policy.mode == "fail":
                self.failure = (f"agent {self.agent!r}: tool {tool!r} failed ({kind}): {text} "
                                "(on_tool_error is 'fail')")
            elif self.count > self.policy.max_errors:
                self.failure = (f"agent {self.agent!r}: {self.count} tool errors in one run, more "
                                f"than max_tool_errors={self.policy.max_errors}; the last: "
                                f"tool {tool!r} failed ({kind}): {text}")
        returned = returned and self.failure is None
        self.records.append({"event": "ToolError", "agent": self.agent, "tool": tool,
                             "kind": kind, "message": text, "count": self.count,
                             "returned_to_model": returned})
        return text


def _agno_control(exc: BaseException) -> bool:
    from agno.exceptions import AgentRunException, RunCancelledException

    return isinstance(exc, AgentRunException | RunCancelledException)


def guards_of(runner: Any) -> list[ToolErrorGuard]:
    """The guards hooked into ``runner`` and its team members (depth first)."""
    found: list[ToolErrorGuard] = []
    for hook in getattr(runner, "tool_hooks", None) or []:
        owner = getattr(hook, "__self__", None)
        if isinstance(owner, ToolErrorGuard):
            found.append(owner)
    for member in getattr(runner, "members", None) or []:
        found.extend(guards_of(member))
    return found
