"""Regular expressions a graph supplies, matched within a time budget.

Python's ``re`` backtracks without bound and holds the GIL while it does: ``^(a|aa)+$``
against forty characters runs for hours and freezes every thread of the worker process,
its event loop included. Every pattern that comes from a graph (Conditional's
``matches_regex``, Structured Output's JSON Schema ``pattern`` and ``patternProperties``)
is matched here instead:

* The engine is the ``regex`` package in its default ``VERSION0`` mode: the syntax and
  results of Python's ``re``, so existing patterns keep their meaning. It releases the GIL
  while it matches a ``str``, and stops at a timeout.
* One :class:`PatternClock` per node execution holds one time budget
  (``ORCH_PATTERN_TIMEOUT_S``, default 1 s) from its first match on; each match gets what
  is left, so many patterns or many matches share one bound.
* Running out raises :class:`PatternTimeout`, a ValueError naming the pattern, the budget
  and the setting; a pattern that does not compile is a ValueError naming it too.
* Patterns longer than ``MAX_PATTERN_CHARS`` are refused; compiled ones are not cached
  (a cache of graph-supplied text grows with what it is sent).

A match within its budget can still take that long: callers run matching off the event
loop (a thread), so the loop never waits on it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from orchestrator.host.node_host import standalone

if TYPE_CHECKING:
    import regex

MAX_PATTERN_CHARS = 20_000


class PatternTimeout(ValueError):
    """A pattern took longer than what was left of its node execution's budget."""


class PatternClock:
    """One node execution's time budget for matching graph-supplied patterns."""

    def __init__(self, budget_s: float | None = None) -> None:
        self.budget_s = standalone().settings.pattern_timeout_s if budget_s is None else budget_s
        self._deadline: float | None = None

    def remaining_s(self) -> float:
        if self._deadline is None:
            self._deadline = time.monotonic() + self.budget_s
        return max(0.0, self._deadline - time.monotonic())

    def search(self, pattern: str, text: str, *, what: str) -> bool:
        """Whether ``pattern`` matches somewhere in ``text`` (``re.search`` semantics).

        ``what`` names the pattern's origin in errors (e.g. "parameter 'compare_to'")."""
        compiled = compile_pattern(pattern, what=what)
        left = self.remaining_s()
        try:
            if left <= 0:
                raise TimeoutError
            return compiled.search(text, timeout=left) is not None
        except TimeoutError:
            raise PatternTimeout(
                f"{what}: the regular expression {_quoted(pattern)} ran past its time budget of "
                f"{self.budget_s:g} s per node execution (ORCH_PATTERN_TIMEOUT_S); simplify it "
                "(nested repetition such as (a+)+ backtracks exponentially)") from None


def compile_pattern(pattern: str, *, what: str) -> regex.Pattern[str]:
    """``pattern`` compiled, uncached; a ValueError naming ``what`` when it is too long or
    not a valid regular expression."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"{what}: the regular expression is {len(pattern)} characters, above the "
                         f"limit of {MAX_PATTERN_CHARS}")
    import regex  # at the first pattern, not when node discovery imports the filter nodes

    try:
        return regex.compile(pattern, cache_pattern=False)
    except regex.error as exc:
        raise ValueError(f"{what} is not a valid regular expression: {exc}") from None


def _quoted(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:80]) + "…"
