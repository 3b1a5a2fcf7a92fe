"""Small constructors for the values executors return on the data spine."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, NodeEvent

SPINE_INPUT = "input"
SPINE_OUTPUT = "output"


def input_value(inputs: dict[str, DataValue], port: str = SPINE_INPUT) -> Any:
    """The value on an input port, or None when nothing arrived there."""
    dv = inputs.get(port)
    return None if dv is None else dv.value


def result(ports: dict[str, Any], events: list[NodeEvent] | None = None) -> ExecutionResult:
    """An ExecutionResult with each value wrapped as ``DataValue("data", value)``.

    Ports left out are dead branches (the kernel skips what depends only on them).
    """
    return ExecutionResult(
        outputs={port: DataValue(type="data", value=value) for port, value in ports.items()},
        events=list(events or []),
    )
