"""Declarative node definitions: what a node type looks like (parameters, ports, sockets).

A definition is data (each node folder ships ``definition.json``), served as JSON by the
API so any front end can draw a palette. The kernel reads only the generic parts:
parameter ids/types/modes/sockets and the ports with their socket types and channels.

Parameter modes (seed 000 "hybrid parameters"):

``constant``  an inline value only (expressions allowed in strings).
``hybrid``    an inline value with a typed socket: a wire into the socket (handle = the
              parameter id) overrides the expression, which overrides the inline value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Channel = Literal["flow", "link"]
CHANNELS: tuple[str, ...] = ("flow", "link")

# Parameter value types a definition may declare. "graph" holds a nested graph (used by
# container nodes); the validator checks it recursively.
ParameterType = Literal[
    "string", "text", "int", "float", "boolean", "json", "enum", "array", "code",
    "expression", "model", "secret", "graph", "messages",
]


class SocketSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    channel: Channel = "flow"


class Parameter(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str
    type: ParameterType
    label: str = ""
    mode: Literal["constant", "hybrid"] = "constant"
    default: Any = None
    required: bool = False
    description: str = ""
    placeholder: str | None = None
    values: list[Any] | None = None  # allowed values for "enum"
    min: float | None = None
    max: float | None = None
    socket: SocketSpec | None = None
    # When false, strings in this parameter are taken literally (e.g. a code body or a
    # template a node renders itself); the kernel does not evaluate ``{{ }}`` in them.
    expressions: bool = True
    # An int parameter saying how many runs of this node's nested graphs (its graph
    # parameters) may be in flight at once: validation multiplies these along the nesting
    # and refuses a product above the host's bound (see validation.py, "Fan-out").
    fan_out: bool = False
    # A string parameter naming a stored graph the node runs: validation refuses the
    # graph's own id (a graph may not run itself; deeper cycles are refused at run time).
    graph_ref: bool = False

    @model_validator(mode="after")
    def _hybrid_needs_socket(self) -> Parameter:
        if self.mode == "hybrid" and self.socket is None:
            raise ValueError(f"hybrid parameter {self.id!r} needs a socket")
        if self.type == "enum" and not self.values:
            raise ValueError(f"enum parameter {self.id!r} needs values")
        return self


class Port(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    label: str = ""
    socket: str = "data"  # socket type id; "data" is the generic JSON spine
    channel: Channel = "flow"
    required: bool = True  # inputs only: the node is skipped when no value can arrive here
    multiple: bool = False  # inputs only: accepts several edges (value becomes a list)
    description: str = ""


class NodeDefinition(BaseModel):
    """A node type as a front end draws it and the kernel checks it."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z][a-z0-9_\-]*$")
    name: str
    category: str
    description: str = ""
    icon: str = "Box"
    color: str | None = None
    version: int = 1
    # A node that starts runs (no flow inputs; receives the run's input). The kernel uses
    # it to pick a graph's start node; the API maps trigger kinds to such nodes.
    trigger: bool = False
    # Its execution reads only its inputs, parameters and expressions, within the
    # expression budgets, and touches nothing outside (no host, network, files or events
    # of its own): run again, it gives the same result. A host may run it in the step of
    # the node that readies it, stored with it in one call (fusion.py).
    pure: bool = False
    # Extra keys a front end or host may use (e.g. {"trigger_kind": "webhook"}).
    meta: dict[str, Any] = Field(default_factory=dict)
    parameters: list[Parameter] = Field(default_factory=list)
    inputs: list[Port] = Field(default_factory=list)
    outputs: list[Port] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> NodeDefinition:
        seen: set[str] = set()
        for p in self.parameters:
            if p.id in seen:
                raise ValueError(f"duplicate parameter id {p.id!r}")
            seen.add(p.id)
        for group in (self.inputs, self.outputs):
            ids = [p.id for p in group]
            if len(ids) != len(set(ids)):
                raise ValueError("duplicate port id")
        return self

    # -- lookups used by the kernel -------------------------------------------------

    def parameter(self, pid: str) -> Parameter | None:
        return next((p for p in self.parameters if p.id == pid), None)

    def input_port(self, handle: str) -> Port | None:
        """An input handle: a declared input port, or a hybrid parameter's socket."""
        for port in self.inputs:
            if port.id == handle:
                return port
        param = self.parameter(handle)
        if param is not None and param.socket is not None:
            return Port(id=param.id, label=param.label, socket=param.socket.type,
                        channel=param.socket.channel, required=False)
        return None

    def output_port(self, handle: str) -> Port | None:
        return next((p for p in self.outputs if p.id == handle), None)

    def flow_inputs(self) -> list[Port]:
        return [p for p in self.inputs if p.channel == "flow"]

    def flow_outputs(self) -> list[Port]:
        return [p for p in self.outputs if p.channel == "flow"]
