"""Fake node types with no domain meaning, to prove the kernel is generic.

``make_registry()`` returns a fresh :class:`Registry` holding every fake type:

===========  ==========================================================================
emit         trigger; no inputs; ``out`` = ``data["value"]`` or the run input
entry        emit, resolved at a run's start (``at_start``, kernel/start.py) unless
             ``data["defer"]`` (then ``at_start`` returns None: it takes a step); with
             ``data["silent"]`` it resolves to no output
relay        ``in`` -> ``out``; params value, label (hybrid, flow string socket),
             delay_s (hybrid, link float socket: wire a ``number`` in), record
gate         ``in`` -> ``yes`` if ``open`` (hybrid, link boolean socket) else ``no``
join         optional ``left``/``right`` -> ``out`` = {"left": .., "right": ..}
collect      ``in`` (multiple, optional) -> ``out`` = the list
flaky        raises ConnectionError while ``ctx.attempt <= fail_times`` (naming ``ctx.execution_key``)
boom         always raises ValueError("boom: " + message)
ticker       async generator: ``count`` progress events, then passes ``in`` through
part         link only: materializes {"name", "parts": <its own linked parts>}
assemble     ``in`` + linked ``parts`` -> ``out`` = {"input", "parts"}
number       link only: materializes ``data["value"]`` on ``value`` (socket float)
nest         ``in`` -> runs the graph in param ``body`` (type graph) with ``in`` as its
             input; ``out`` = the list of the nested run's sink output values
shift        pure (kernel/fusion.py): ``out`` = ``in`` + ``add``; raises ValueError when
             ``fail`` is set
===========  ==========================================================================

``graph(nodes, edges)`` builds a graph JSON mapping from short tuples.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from orchestrator.kernel.definition import NodeDefinition, Parameter, Port, SocketSpec
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent
from orchestrator.kernel.registry import Registry


def _value(inputs: dict[str, DataValue], port: str) -> Any:
    dv = inputs.get(port)
    return dv.value if dv is not None else None


def _out(port: str, value: Any) -> ExecutionResult:
    return ExecutionResult(outputs={port: DataValue("data", value)})


def _param(pid: str, ptype: str, **kw: Any) -> Parameter:
    return Parameter.model_validate({"id": pid, "type": ptype, **kw})


def _define(type_id: str, **kw: Any) -> NodeDefinition:
    base: dict[str, Any] = {"id": type_id, "name": type_id.title(), "category": "test"}
    return NodeDefinition.model_validate({**base, **kw})


IN = Port(id="in")
OUT = Port(id="out")


# -- executors -------------------------------------------------------------------------


def _emitted(data: dict[str, Any], run_input: Any) -> ExecutionResult:
    value = data.get("value")
    return _out("out", run_input if value is None else value)


class Emit:
    node_type = "emit"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        return _emitted(data, ctx.run_input)


class Entry(Emit):
    node_type = "entry"

    def at_start(self, data: dict[str, Any], run_input: Any, session_id: str | None) -> ExecutionResult | None:
        if data.get("defer"):
            return None
        if data.get("silent"):
            return ExecutionResult()  # no output: what follows it is skipped
        return _emitted(data, run_input)


class Relay:
    node_type = "relay"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        t0 = time.time()
        delay_s = float(data.get("delay_s") or 0)
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        value = data.get("value")
        result = _value(inputs, "in") if value is None else value
        if data.get("record"):
            result = {"value": result, "pid": os.getpid(), "start": t0, "end": time.time()}
        return _out("out", result)


class Gate:
    node_type = "gate"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        return _out("yes" if data.get("open") else "no", _value(inputs, "in"))


class Join:
    node_type = "join"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        return _out("out", {"left": _value(inputs, "left"), "right": _value(inputs, "right")})


class Collect:
    node_type = "collect"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        value = _value(inputs, "in")
        if value is None:
            value = []
        elif not isinstance(value, list):
            value = [value]
        return _out("out", value)


class Flaky:
    node_type = "flaky"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        if ctx.attempt <= int(data.get("fail_times") or 0):
            raise ConnectionError(f"flaky: attempt {ctx.attempt} fails (key {ctx.execution_key})")
        return _out("out", _value(inputs, "in"))


class Boom:
    node_type = "boom"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        raise ValueError("boom: " + str(data.get("message")))


class Shift:
    node_type = "shift"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        if data.get("fail"):
            raise ValueError("shift: " + str(data["fail"]))
        return _out("out", (_value(inputs, "in") or 0) + int(data.get("add") or 0))


class Ticker:
    node_type = "ticker"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> AsyncIterator[NodeEvent | ExecutionResult]:
        for i in range(int(data.get("count") or 0)):
            yield ctx.event("progress", {"i": i})
        yield _out("out", _value(inputs, "in"))


class Part:
    node_type = "part"

    async def materialize(self, data: dict[str, Any], output_handle: str, ctx: FlowContext) -> Any:
        parts = await ctx.runtime.resolve_links(ctx.node_id, "parts")
        return {"name": data.get("name"), "parts": parts}


class Assemble:
    node_type = "assemble"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        parts = await ctx.runtime.resolve_links(ctx.node_id, "parts")
        return _out("out", {"input": _value(inputs, "in"), "parts": parts})


class Number:
    node_type = "number"

    async def materialize(self, data: dict[str, Any], output_handle: str, ctx: FlowContext) -> Any:
        return data.get("value")


class Nest:
    node_type = "nest"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        body, value = data["body"], _value(inputs, "in")
        result = await ctx.runtime.run_subgraph(body, value, label=ctx.node_name)
        if result.status != "succeeded":
            raise RuntimeError(f"nested graph failed: {result.error}")
        return _out("out", [dv.value for dv in result.sink_outputs])


# -- definitions -----------------------------------------------------------------------

LINK_PARTS = Port(id="parts", socket="json", channel="link", multiple=True, required=False)

DEFINITIONS: list[tuple[NodeDefinition, object]] = [
    (_define("emit", trigger=True, parameters=[_param("value", "json")], outputs=[OUT]), Emit()),
    (_define("entry", trigger=True, parameters=[_param("value", "json"), _param("defer", "boolean", default=False),
                                                _param("silent", "boolean", default=False)],
             outputs=[OUT]), Entry()),
    (_define("relay", inputs=[IN], outputs=[OUT], parameters=[
        _param("value", "json"),
        _param("label", "string", mode="hybrid", socket=SocketSpec(type="string")),
        # hybrid over a link socket: a ``number`` node can wire its value in
        _param("delay_s", "float", default=0.0, min=0, mode="hybrid",
               socket=SocketSpec(type="float", channel="link")),
        _param("record", "boolean", default=False),
    ]), Relay()),
    (_define("gate", inputs=[IN], outputs=[Port(id="yes"), Port(id="no")], parameters=[
        # hybrid over a link socket, so a link-only node can wire a value in
        _param("open", "boolean", mode="hybrid", default=False,
               socket=SocketSpec(type="boolean", channel="link")),
    ]), Gate()),
    (_define("join", inputs=[Port(id="left", required=False), Port(id="right", required=False)],
             outputs=[OUT]), Join()),
    (_define("collect", inputs=[Port(id="in", multiple=True, required=False)], outputs=[OUT]),
     Collect()),
    (_define("flaky", inputs=[IN], outputs=[OUT],
             parameters=[_param("fail_times", "int", default=0, min=0)]), Flaky()),
    (_define("boom", inputs=[IN], outputs=[OUT],
             parameters=[_param("message", "string", default="")]), Boom()),
    (_define("ticker", inputs=[IN], outputs=[OUT],
             parameters=[_param("count", "int", default=3, min=0)]), Ticker()),
    (_define("part", inputs=[LINK_PARTS],
             outputs=[Port(id="part", socket="json", channel="link")],
             parameters=[_param("name", "string", default="")]), Part()),
    (_define("assemble", inputs=[IN, LINK_PARTS], outputs=[OUT]), Assemble()),
    (_define("number", outputs=[Port(id="value", socket="float", channel="link")],
             parameters=[_param("value", "float", default=0.0)]), Number()),
    (_define("nest", inputs=[IN], outputs=[OUT],
             parameters=[_param("body", "graph", required=True)]), Nest()),
    (_define("shift", pure=True, inputs=[IN], outputs=[OUT],
             parameters=[_param("add", "int", default=1), _param("fail", "string", default="")]), Shift()),
]


def make_registry() -> Registry:
    """A fresh registry holding every fake node type."""
    registry = Registry()
    for definition, executor in DEFINITIONS:
        registry.register(definition, executor, source="tests/fake_nodes.py")
    return registry


NodeSpec = tuple[str, str, str] | tuple[str, str, str, dict[str, Any]]
EdgeSpec = tuple[str, str, str, str] | tuple[str, str, str, str, str]


def graph(nodes: Sequence[NodeSpec], edges: Sequence[EdgeSpec], **kw: Any) -> dict[str, Any]:
    """Build graph JSON: nodes are (id, type, name[, data]); edges are
    (source, sourceHandle, target, targetHandle[, channel="flow"]) with ids e1..eN.
    Extra keyword arguments (id, settings, ...) become top-level graph fields."""
    out_nodes: list[dict[str, Any]] = []
    for n in nodes:
        item: list[Any] = list(n)
        data = dict(item[3]) if len(item) > 3 else {}
        out_nodes.append({"id": item[0], "type": item[1], "name": item[2], "data": data})
    out_edges: list[dict[str, Any]] = []
    for i, e in enumerate(edges, start=1):
        parts: list[Any] = list(e)
        channel = parts[4] if len(parts) > 4 else "flow"
        out_edges.append({"id": f"e{i}", "source": parts[0], "sourceHandle": parts[1],
                          "target": parts[2], "targetHandle": parts[3],
                          "data": {"channel": channel}})
    return {"id": kw.pop("id", "g"), "nodes": out_nodes, "edges": out_edges, **kw}
