"""Named toolkits a Toolset node can hand to an agent.

A toolkit factory takes the tool names that need human approval and returns an Agno
``Toolkit``. Node packs add their own with :func:`register_toolkit` or through the entry
point group ``orchestrator.toolkits`` (each entry point loads a factory; its name is the
toolkit's name). Built-ins: ``calculator`` (safe arithmetic, no eval) and ``clock``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import entry_points
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agno.tools import Toolkit

from orchestrator.kernel.errors import ParameterError

ToolkitFactory = Callable[[list[str]], Toolkit]
ENTRY_POINT_GROUP = "orchestrator.toolkits"

_FACTORIES: dict[str, ToolkitFactory] = {}
_entry_points_loaded = False


def register_toolkit(name: str, factory: ToolkitFactory) -> None:
    """Make ``name`` available to Toolset nodes (a later registration replaces it)."""
    _FACTORIES[name] = factory


def toolkit_names() -> list[str]:
    _load_entry_points()
    return sorted(_FACTORIES)


def build_toolkit(name: str, requires_approval: list[str] | None = None) -> Toolkit:
    """A fresh toolkit; raises ``ParameterError`` naming the known toolkits."""
    _load_entry_points()
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ParameterError(f"unknown toolkit {name!r}; known: {', '.join(sorted(_FACTORIES))}",
                             parameter="toolkits")
    return factory(list(requires_approval or []))


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _FACTORIES.setdefault(ep.name, ep.load())


def _confirm(names: list[str], available: list[str]) -> list[str]:
    return [n for n in names if n in available]


# -- calculator ---------------------------------------------------------------------


def add(a: float, b: float) -> float:
    """Add two numbers and return a + b."""
    return a + b


def subtract(a: float, b: float) -> float:
    """Subtract b from a and return a - b."""
    return a - b


def multiply(a: float, b: float) -> float:
    """Multiply two numbers and return a * b."""
    return a * b


def divide(a: float, b: float) -> float | str:
    """Divide a by b and return a / b (an error message when b is zero)."""
    if b == 0:
        return "error: division by zero"
    return a / b


def power(base: float, exponent: float) -> float | str:
    """Raise base to exponent (exponent magnitude at most 1000)."""
    if abs(exponent) > 1000:
        return "error: exponent too large"
    result: float = float(base) ** float(exponent)
    return result


def sqrt(x: float) -> float | str:
    """Return the square root of x (x must not be negative)."""
    if x < 0:
        return "error: square root of a negative number"
    return math.sqrt(x)


def calculator(requires_approval: list[str]) -> Toolkit:
    tools: list[Callable[..., Any]] = [add, subtract, multiply, divide, power, sqrt]
    names = [t.__name__ for t in tools]
    return Toolkit(name="calculator", tools=tools,
                   requires_confirmation_tools=_confirm(requires_approval, names))


# -- clock --------------------------------------------------------------------------


def now(tz: str = "UTC") -> str:
    """The current date and time in time zone tz (an IANA name such as Europe/Paris), ISO 8601."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        return f"error: unknown time zone {tz!r}"
    return datetime.now(zone).isoformat(timespec="seconds")


def today() -> str:
    """Today's date in UTC, YYYY-MM-DD."""
    return datetime.now(UTC).date().isoformat()


def clock(requires_approval: list[str]) -> Toolkit:
    return Toolkit(name="clock", tools=[now, today],
                   requires_confirmation_tools=_confirm(requires_approval, ["now", "today"]))


register_toolkit("calculator", calculator)
register_toolkit("clock", clock)
