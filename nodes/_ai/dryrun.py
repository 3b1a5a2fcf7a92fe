"""The dry-run model: an offline, deterministic Agno ``Model`` driven by a script.

Spec strings ``dryrun:<name>`` / ``dry-run:<name>`` resolve to it (see ``models.py``);
``ORCH_OFFLINE_MODELS=1`` turns every spec into it, so graphs run without keys.

Script: a list of steps, consumed in order within one run (the step index is the number
of assistant turns since the last user message, so the model itself keeps no state and
one instance may serve several agents):

================================  ===================================================
step                              one model turn does
================================  ===================================================
``{"reason": "text"}``            stream ``text`` as reasoning, then go on to the next step
``{"say": "text"}``               stream ``text`` as the answer (ends the run)
``{"call": "name", "args": {}}``  call tool ``name`` with ``args``
``{"delegate": "id", "task": ""}``  ask team member ``id`` (the leader's tool)
``{"error": "message"}``          the provider fails with ``message``
================================  ===================================================

Any step may add ``"delay_s"``: a pause before each streamed token (cancellation tests).

``say`` text may use ``{input}`` (the user message), ``{tool_result}`` (the last tool
result), ``{turn}`` (1-based number of this user turn in the session) and ``{history}``
(how many earlier user turns the model was shown).

When the script is exhausted (or absent) a default policy answers: call the first
available tool once when the user message names it (or says "tool"), delegate to each
team member once, then answer echoing what it got.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from agno.metrics import MessageMetrics
from agno.models.base import Model
from agno.models.message import Message
from agno.models.response import ModelResponse

DELEGATE_TOOL = "delegate_task_to_member"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class DryRunError(RuntimeError):
    """A scripted provider failure (``{"error": ...}``)."""


@dataclass
class Turn:
    """What one model call produces: optional reasoning, then text or a tool call."""

    reasoning: str = ""
    text: str | None = None
    call: tuple[str, dict[str, Any]] | None = None
    error: str | None = None
    delay_s: float = 0.0


def _content(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "" if content is None else json.dumps(content, default=str)


def _number_args(schema: dict[str, Any], text: str) -> dict[str, Any]:
    """Fill a tool's required parameters from the user message, deterministically."""
    props: dict[str, Any] = schema.get("properties") or {}
    required = schema.get("required") or list(props)
    numbers = [float(n) for n in _NUMBER.findall(text)]
    args: dict[str, Any] = {}
    for name in required:
        kind = (props.get(name) or {}).get("type")
        if kind in ("number", "integer"):
            value = numbers.pop(0) if numbers else 1.0
            args[name] = int(value) if kind == "integer" else value
        elif kind == "boolean":
            args[name] = True
        else:
            args[name] = text
    return args


@dataclass
class DryRunModel(Model):
    id: str = "dryrun"
    name: str | None = "DryRun"
    provider: str | None = "dryrun"
    script: list[dict[str, Any]] = field(default_factory=list)
    members: list[str] = field(default_factory=list)  # team member ids (leader only)
    chunk_delay_s: float = 0.0  # pause between streamed tokens (cancellation tests)

    # -- deciding ---------------------------------------------------------------------

    def decide(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> Turn:
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        this_run = messages[last_user + 1 :]
        step_index = sum(1 for m in this_run if m.role == "assistant")
        user_text = _content(messages[last_user]) if last_user >= 0 else ""
        earlier_users = sum(1 for m in messages[:last_user] if m.role == "user")
        tool_results = [m for m in this_run if m.role == "tool"]
        values = {
            "input": user_text,
            "tool_result": _content(tool_results[-1]) if tool_results else "",
            "turn": str(earlier_users + 1),
            "history": str(earlier_users),
        }
        turns = self._script_turns()
        if step_index < len(turns):
            turn = turns[step_index]
            if turn.text is not None:
                turn.text = _fill(turn.text, values)
            return turn
        return self._default(step_index - len(turns), this_run, tools or [], values)

    def _script_turns(self) -> list[Turn]:
        turns: list[Turn] = []
        reasoning = ""
        for index, step in enumerate(self.script):
            if "reason" in step:
                reasoning += str(step["reason"])
                continue
            turn = Turn(reasoning=reasoning, delay_s=float(step.get("delay_s", 0.0)))
            reasoning = ""
            if "say" in step:
                turn.text = str(step["say"])
            elif "call" in step:
                turn.call = (str(step["call"]), dict(step.get("args") or {}))
            elif "delegate" in step:
                turn.call = (DELEGATE_TOOL, {"member_id": str(step["delegate"]),
                                             "task": str(step.get("task", ""))})
            elif "error" in step:
                turn.error = str(step["error"])
            else:
                # The index, never the step: a script's content is not echoed into errors.
                raise ValueError(f"dry-run script step {index} has none of "
                                 "say/call/delegate/reason/error")
            turns.append(turn)
        if reasoning:
            turns.append(Turn(reasoning=reasoning, text="{input}"))
        return turns

    def _default(self, extra_turns: int, this_run: list[Message], tools: list[dict[str, Any]],
                 values: dict[str, str]) -> Turn:
        names = [t.get("function", {}).get("name", "") for t in tools]
        if DELEGATE_TOOL in names and self.members:
            if extra_turns < len(self.members):
                return Turn(call=(DELEGATE_TOOL, {"member_id": self.members[extra_turns],
                                                  "task": values["input"]}))
            results = [_content(m) for m in this_run if m.role == "tool"]
            return Turn(text="Team answer: " + " | ".join(results))
        wants_tool = "tool" in values["input"].lower() or any(
            n and n.lower() in values["input"].lower() for n in names)
        if tools and wants_tool and extra_turns == 0:
            chosen = next((t for t in tools if t.get("function", {}).get("name", "").lower()
                           in values["input"].lower()), tools[0])
            fn = chosen.get("function", {})
            return Turn(call=(fn.get("name", ""), _number_args(fn.get("parameters") or {},
                                                               values["input"])))
        if values["tool_result"]:
            return Turn(text=f"Tool result: {values['tool_result']}")
        return Turn(text=f"Reply #{values['turn']} to: {values['input']} "
                         f"(history: {values['history']} earlier turns)")

    # -- producing ----------------------------------------------------------------------

    def _deltas(self, turn: Turn, messages: list[Message]) -> Iterator[ModelResponse]:
        if turn.error is not None:
            raise DryRunError(turn.error)
        if turn.reasoning:
            for token in _tokens(turn.reasoning):
                yield ModelResponse(role="assistant", reasoning_content=token)
        if turn.call is not None:
            name, args = turn.call
            call_id = f"call_{len(messages)}_{name}"
            yield ModelResponse(role="assistant", tool_calls=[{
                "id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}])
        else:
            for token in _tokens(turn.text or ""):
                yield ModelResponse(role="assistant", content=token)
        prompt_tokens = sum(len(_content(m).split()) for m in messages)
        output_tokens = len((turn.text or "").split()) + (1 if turn.call else 0)
        yield ModelResponse(role="assistant", response_usage=MessageMetrics(
            input_tokens=prompt_tokens, output_tokens=output_tokens,
            total_tokens=prompt_tokens + output_tokens))

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        messages: list[Message] = kwargs.get("messages", args[0] if args else [])
        out = ModelResponse(role="assistant", content="")
        for delta in self._deltas(self.decide(messages, kwargs.get("tools")), messages):
            if delta.content:
                out.content = (out.content or "") + delta.content
            if delta.reasoning_content:
                out.reasoning_content = (out.reasoning_content or "") + delta.reasoning_content
            out.tool_calls.extend(delta.tool_calls)
            if delta.response_usage is not None:
                out.response_usage = delta.response_usage
        if not out.content and out.tool_calls:
            out.content = None
        return out

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.invoke(*args, **kwargs)

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Iterator[ModelResponse]:
        messages: list[Message] = kwargs.get("messages", args[0] if args else [])
        turn = self.decide(messages, kwargs.get("tools"))
        for delta in self._deltas(turn, messages):
            if self.chunk_delay_s or turn.delay_s:
                time.sleep(self.chunk_delay_s or turn.delay_s)
            yield delta

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ModelResponse]:
        messages: list[Message] = kwargs.get("messages", args[0] if args else [])
        turn = self.decide(messages, kwargs.get("tools"))
        for delta in self._deltas(turn, messages):
            if self.chunk_delay_s or turn.delay_s:
                await asyncio.sleep(self.chunk_delay_s or turn.delay_s)
            yield delta

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]


def _tokens(text: str) -> list[str]:
    """Split into word tokens that keep their trailing whitespace (join = original)."""
    return re.findall(r"\S+\s*|\s+", text)


def _fill(template: str, values: dict[str, str]) -> str:
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out
