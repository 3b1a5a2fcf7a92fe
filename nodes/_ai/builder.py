"""Building an Agno Agent or Team from an Agent node's parameters and linked artifacts.

Artifacts arriving on an Agent's ``tools`` input are split by type: a :class:`SubAgent`
(what an Agent node materializes on its ``agent`` handle) becomes a Team member; functions,
Agno ``Toolkit`` / ``Function`` objects and ``MCPTools`` become tools (lists are flattened).
With at least one sub-agent the node runs a ``Team`` in coordinate mode whose leader uses
the node's own model; otherwise a plain ``Agent``. Built fresh per execution: Agno objects
hold loop-bound clients and are never pickled or shared between processes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from agno.agent import Agent
from agno.team import Team, TeamMode
from agno.tools import Toolkit
from agno.tools.function import Function
from agno.utils.team import get_member_id

from nodes._ai.dryrun import DryRunModel
from nodes._ai.models import resolve_model, spec_label
from nodes._ai.storage import session_db
from nodes._ai.tool_errors import ToolErrorGuard, ToolErrorPolicy
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, FlowContext

Runner = Agent | Team


@dataclass
class SubAgent:
    """Marker artifact: an Agent node offered as a team member (process-local)."""

    node_id: str
    name: str
    member: Runner


def parse_script(raw: Any) -> list[dict[str, Any]] | None:
    """The dry-run ``script`` parameter: a JSON list (or its text), or None."""
    if raw in (None, "", []):
        return None
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, list) or not all(isinstance(s, dict) for s in value):
        raise ParameterError("script must be a JSON list of steps like {\"say\": \"...\"}",
                             parameter="script")
    return value


def split_tools(artifacts: list[Any], ctx: FlowContext) -> tuple[list[Any], list[SubAgent]]:
    tools: list[Any] = []
    subs: list[SubAgent] = []
    pending = list(artifacts)
    while pending:
        item = pending.pop(0)
        if isinstance(item, list | tuple):
            pending[:0] = list(item)
        elif isinstance(item, SubAgent):
            subs.append(item)
        elif isinstance(item, Toolkit | Function) or callable(item):
            tools.append(item)
        else:
            raise ParameterError(
                f"the tools input of {ctx.node_name!r} got a {type(item).__name__}; it takes "
                "toolsets, MCP servers and agents", node_id=ctx.node_id,
                node_name=ctx.node_name, handle="tools")
    return tools, subs


def member_id(name: str, node_id: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or node_id


async def _common(data: dict[str, Any], ctx: FlowContext, name: str) -> dict[str, Any]:
    temperature = data.get("temperature")
    model = await resolve_model(data.get("model"), ctx, script=parse_script(data.get("script")),
                                temperature=float(temperature) if temperature is not None else None)
    return {
        "name": name,
        "model": model,
        "instructions": data.get("instructions") or None,
        "description": data.get("description") or None,
        "markdown": bool(data.get("markdown", False)),
        "telemetry": False,
        # Every tool call (toolsets, MCP, sub-graphs) passes the node's tool-error policy.
        "tool_hooks": [ToolErrorGuard(name, ToolErrorPolicy.from_data(data),
                                      node_host(ctx).redact).hook],
    }


async def build_runner(data: dict[str, Any], ctx: FlowContext, *, member: bool = False) -> Runner:
    """The Agent (or Team, with sub-agents) this node runs, or offers as a member."""
    name = str(data.get("name") or ctx.node_name or ctx.node_id)
    common = await _common(data, ctx, name)
    tools, subs = split_tools(await ctx.runtime.resolve_links(ctx.node_id, "tools"), ctx)
    if member:
        # Member runs live inside the team's session: no own db or history.
        common.update(id=member_id(name, ctx.node_id), add_history_to_context=False)
    else:
        history = bool(data.get("history", True))
        common.update(db=await session_db(ctx), add_history_to_context=history)
        if history and data.get("num_history_runs"):
            common["num_history_runs"] = int(data["num_history_runs"])
    if not subs:
        return Agent(tools=tools, **common)
    members: list[Agent | Team] = [s.member for s in subs]
    model = common["model"]
    if isinstance(model, DryRunModel):
        model.members = [get_member_id(m) or "" for m in members]
    return Team(members=members, mode=TeamMode.coordinate, tools=tools or None,
                stream_member_events=True, **common)


def model_label(data: dict[str, Any], runner: Any = None) -> str:
    """The model that ran: ``dryrun:<id>`` when the dry-run model stood in (``--offline``
    or a ``dryrun:`` spec), else the configured ``provider:id``."""
    model = getattr(runner, "model", None)
    if isinstance(model, DryRunModel):
        return f"dryrun:{model.id}"
    return spec_label(data.get("model"))


def user_message(data: dict[str, Any], inputs: dict[str, DataValue]) -> str:
    """The prompt parameter when set, else the input's ``message``/``text``/itself as text."""
    prompt = data.get("prompt")
    if isinstance(prompt, str) and prompt.strip():
        return prompt
    if prompt not in (None, "") and not isinstance(prompt, str):
        return json.dumps(prompt, default=str)
    value = inputs["input"].value if "input" in inputs else None
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict):
        for key in ("message", "text", "prompt", "response"):
            if isinstance(value.get(key), str):
                return str(value[key])
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, default=str)
