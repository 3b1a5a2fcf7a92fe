"""Limits the kernel enforces on every step: outputs, expressions, patterns, loops, graph size.

Read by the step function and validation (``orchestrator/kernel/``), through
``StepOptions``, ``ExpressionLimits`` and ``GraphLimits``. One group of
:class:`orchestrator.settings.Settings`, which every entry point builds once; a subsystem
takes the group it reads (a ``Settings`` is each of them).
"""

from __future__ import annotations

from orchestrator.kernel.expression_limits import ExpressionLimits
from orchestrator.kernel.validation import GraphLimits
from orchestrator.settings.base import SettingsGroup


class KernelLimits(SettingsGroup):
    max_output_bytes: int = 8 * 1024 * 1024  # a node output larger than this fails the node
    # A node output nested deeper than this (lists and objects) fails the node: the API
    # could not serialize the run (its JSON encoder stops at 255 levels).
    max_output_depth: int = 128
    # Budgets of one parameter expression's evaluation (kernel/expression_limits.py).
    expression_max_steps: int = 100_000
    expression_max_string_chars: int = 1_000_000
    expression_max_list_items: int = 100_000
    expression_max_result_bytes: int = 8 * 1024 * 1024
    # Characters and list items built, and evaluation steps taken, summed over all
    # expressions of one node execution (its parameters, conditions it evaluates per item).
    expression_max_total_chars: int = 16_000_000
    expression_max_total_steps: int = 2_000_000
    # The text of one expression (a string holding {{ }}): longer ones are refused at
    # validation and at run time; only short ones are kept parsed in memory.
    expression_max_source_chars: int = 100_000
    # A regular expression a graph supplies (Conditional matches_regex, Structured Output's
    # schema patterns) may take this long in all per node execution (nodes/_shared/patterns.py).
    pattern_timeout_s: float = 1.0
    # Iterations of nested Loops in flight at once, multiplied along the nesting (8 x 8 = 64).
    loop_max_in_flight: int = 64
    graph_max_nodes: int = 5_000  # nodes of one graph (each nested body on its own)
    graph_max_edges: int = 20_000


    def expression_limits(self) -> ExpressionLimits:
        return ExpressionLimits(max_steps=self.expression_max_steps,
                                max_string_chars=self.expression_max_string_chars,
                                max_list_items=self.expression_max_list_items,
                                max_result_bytes=self.expression_max_result_bytes,
                                max_total_chars=self.expression_max_total_chars,
                                max_total_steps=self.expression_max_total_steps,
                                max_source_chars=self.expression_max_source_chars)

    def graph_limits(self) -> GraphLimits:
        return GraphLimits(max_source_chars=self.expression_max_source_chars,
                           max_fan_out=self.loop_max_in_flight, max_nodes=self.graph_max_nodes,
                           max_edges=self.graph_max_edges)
