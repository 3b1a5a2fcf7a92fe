"""Budgets for evaluating one expression: steps, string length, list length, result size.

An expression is user text evaluated inside a worker process, outside any sandbox, so a
short one must not be able to ask for gigabytes (``replace(replace(x, '', x), '', x)``
multiplies a string's length at each level) or loop for minutes. Every operation that
builds a string or a list checks the size it *will* produce before producing it
(:meth:`Budget.string`, :meth:`Budget.items`); every evaluated node costs one step; the
final value is measured once. Exceeding a limit raises :class:`ExpressionLimitError`,
which the parameter resolver turns into a node failure naming the parameter and the limit.

``max_steps``, ``max_string_chars``, ``max_list_items`` and ``max_result_bytes`` are per
evaluated template. ``max_total_chars`` bounds the *sum* of every string's characters and
every list's items built by all the evaluations that share one :class:`Spending` (the
kernel gives one per node execution: all of a node's parameters), so neither many
operations in one expression (a list literal of a thousand large ``replace`` calls) nor
many parameters can add up to gigabytes that per-operation limits would each allow.
Values that only pass through (an upstream node's output read whole) are not "built" and
count only toward ``max_result_bytes``. ``max_total_steps`` does the same for time: the
steps of every evaluation sharing a :class:`Spending` (a condition evaluated per item of
a long list, each within ``max_steps``) add up to one bound.

A :class:`Spending` can also be *stopped* (the node execution it belongs to timed out or
was cancelled): every evaluation sharing it then fails at its next step, so work left
running in a thread that cannot be killed ends within one step. And it can carry an
``allowance``: past that many steps its evaluations raise :class:`OverAllowance` (not an
error: a signal to its owner, who tried cheap work on the event loop and will redo it in a
thread, see ``parameters.resolve_parameters_off_loop``).

``max_source_chars`` bounds the text of one template (what is parsed), checked before
parsing, at validation and at run time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import ExpressionLimitError


@dataclass(frozen=True)
class ExpressionLimits:
    max_steps: int = 100_000  # evaluated AST nodes
    max_string_chars: int = 1_000_000  # a string an operation or function builds
    max_list_items: int = 100_000  # a list an operation or function builds
    max_result_bytes: int = 8 * 1024 * 1024  # the template's value, as JSON
    max_total_chars: int = 16_000_000  # characters + items built by all evaluations of one Spending
    max_total_steps: int = 2_000_000  # evaluation steps of all evaluations of one Spending
    max_source_chars: int = 100_000  # the text of one template, before it is parsed


DEFAULT_LIMITS = ExpressionLimits()


class OverAllowance(Exception):
    """Evaluations went past their :class:`Spending`'s ``allowance``."""


class Spending:
    """Characters and list items built, and steps taken, so far by the evaluations that
    share this tally; ``stopped`` once its owner ended (see :meth:`stop`)."""

    __slots__ = ("allowance", "built", "steps", "stopped")

    def __init__(self, allowance: int | None = None) -> None:
        self.built = 0
        self.steps = 0
        self.stopped = ""
        self.allowance = allowance

    def trial(self, steps: int) -> Spending:
        """A copy of this tally allowed ``steps`` more steps; :meth:`adopt` takes it back."""
        copy = Spending(allowance=self.steps + steps)
        copy.built, copy.steps, copy.stopped = self.built, self.steps, self.stopped
        return copy

    def adopt(self, trial: Spending) -> None:
        """What a :meth:`trial` that succeeded spent is what this tally spent."""
        self.built, self.steps = trial.built, trial.steps

    def stop(self, why: str) -> None:
        """Make every evaluation sharing this tally fail at its next step, saying ``why``."""
        self.stopped = why


class Budget:
    """What one evaluation has used so far of its :class:`ExpressionLimits`; what it builds
    also counts toward the shared ``spending`` (a fresh one when not given)."""

    __slots__ = ("limits", "spending", "steps")

    def __init__(self, limits: ExpressionLimits, spending: Spending | None = None) -> None:
        self.limits = limits
        self.spending = spending if spending is not None else Spending()
        self.steps = 0

    def _spend(self, amount: int, what: str) -> None:
        self.spending.built += amount
        if self.spending.built > self.limits.max_total_chars:
            raise ExpressionLimitError(
                f"{what} brings what expressions built to {self.spending.built} characters and "
                f"list items in total, above the limit of {self.limits.max_total_chars} "
                "(max_total_chars)")

    def step(self) -> None:
        self.steps += 1
        spending = self.spending
        spending.steps += 1
        if self.steps > self.limits.max_steps:
            raise ExpressionLimitError(
                f"expression exceeds the limit of {self.limits.max_steps} evaluation steps (max_steps)")
        if spending.steps > self.limits.max_total_steps:
            raise ExpressionLimitError(
                f"expressions of this node execution took {spending.steps} evaluation steps in total, "
                f"above the limit of {self.limits.max_total_steps} (max_total_steps)")
        if spending.stopped:
            raise ExpressionLimitError(f"evaluation stopped: {spending.stopped}")
        if spending.allowance is not None and spending.steps > spending.allowance:
            raise OverAllowance

    def string(self, chars: int, what: str) -> None:
        if chars > self.limits.max_string_chars:
            raise ExpressionLimitError(
                f"{what} would build a string of {chars} characters, above the limit of "
                f"{self.limits.max_string_chars} (max_string_chars)")
        self._spend(chars, what)

    def items(self, count: int, what: str) -> None:
        if count > self.limits.max_list_items:
            raise ExpressionLimitError(
                f"{what} would build a list of {count} items, above the limit of "
                f"{self.limits.max_list_items} (max_list_items)")
        self._spend(count, what)

    def result(self, value: Any) -> None:
        size = len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
        if size > self.limits.max_result_bytes:
            raise ExpressionLimitError(
                f"expression value is {size} bytes, above the limit of "
                f"{self.limits.max_result_bytes} (max_result_bytes)")


def check_source(text: str, limits: ExpressionLimits) -> None:
    """Refuse a template whose text is longer than ``max_source_chars`` (before parsing it)."""
    if len(text) > limits.max_source_chars:
        raise ExpressionLimitError(
            f"expression text is {len(text)} characters, above the limit of "
            f"{limits.max_source_chars} (max_source_chars)")


def predicted_chars(name: str, args: list[Any]) -> int | None:
    """The length of the string ``name(*args)`` will build, for the functions whose output
    can be much larger than their input; None when there is nothing to predict."""
    if name == "replace" and len(args) == 3 and all(isinstance(a, str) for a in args):
        text, old, new = args
        count = len(text) + 1 if old == "" else text.count(old)
        return len(text) + count * (len(new) - len(old))
    if name == "join" and args and isinstance(args[0], list | tuple):
        sep = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
        items = args[0]
        sizes = sum(len(x) if isinstance(x, str) else 16 for x in items)
        return sizes + max(0, len(items) - 1) * len(sep)
    return None
