"""Usage: numbers a node reports by name while it runs, summed per key.

A node that consumes a metered resource reports what it used with
``await ctx.report_usage(key, {"input_tokens": 120, "output_tokens": 30})``. The kernel
knows neither the keys (the host names them: which service, which metered thing) nor the
number names; it only adds them up. What one execution reported rides on its
``completed`` (or ``error`` / ``retry``) event as ``data.usage``::

    {"<key>": {"<number name>": <sum>, ...}, ...}

and the host's :data:`UsageCheck`, when given, is awaited after every report: it may
raise :class:`~orchestrator.kernel.errors.UsageBudgetError` to end the run (a budget).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol import FlowContext

UsageNumbers = dict[str, float]
UsageByKey = dict[str, UsageNumbers]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass
class Usage:
    """Sums of reported numbers, by key then by number name."""

    by_key: UsageByKey = field(default_factory=dict)

    def add(self, key: str, numbers: Mapping[str, Any]) -> None:
        """Add ``numbers`` (non-numeric and negative values are ignored) under ``key``."""
        sums = self.by_key.setdefault(str(key), {})
        for name, value in numbers.items():
            number = _number(value)
            if number is not None and number >= 0:
                sums[name] = sums.get(name, 0.0) + number

    def __bool__(self) -> bool:
        return any(self.by_key.values())

    def to_json(self) -> UsageByKey:
        """The sums, whole numbers as ints (JSON-friendly, as events carry them)."""
        return {key: {name: int(v) if float(v).is_integer() else v for name, v in numbers.items()}
                for key, numbers in self.by_key.items() if numbers}

    @classmethod
    def from_json(cls, raw: Any) -> Usage:
        usage = cls()
        if isinstance(raw, dict):
            for key, numbers in raw.items():
                if isinstance(numbers, dict):
                    usage.add(key, numbers)
        return usage

    def merge(self, other: Usage) -> None:
        for key, numbers in other.by_key.items():
            self.add(key, numbers)


# Awaited after each report with the reporting node's context (its ``usage`` holds what
# this execution reported so far); raising ends the node.
UsageCheck = Callable[["FlowContext"], Awaitable[None]]
