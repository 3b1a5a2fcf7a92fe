"""Loop: runs the nested graph ``body`` per item (``for_each``) or until a condition holds.

Each iteration is ``ctx.runtime.run_subgraph(body, value, label="<node name>[i]")``: the
body's single ``loop_input`` node receives ``value`` as its run input. An iteration's
result is the value of the body's single sink output (a list when there are several,
null when there are none).

for_each  ``items`` (default: the input if it is a list, else ``input.items``); up to
          ``concurrency`` iterations run at once, results keep item order.
          Output ``{"results": [...], "iterations": n}``.
until     starts from ``items`` (default: the input) and feeds each result into the next
          iteration; after each, ``condition`` is evaluated with input = the result and
          ``$index`` = i, and the loop stops when it is true. Output
          ``{"result": last, "iterations": n}``. Reaching ``max_iterations`` first is a
          ValueError.

A failed iteration raises RuntimeError naming the iteration index and the inner error.

On a worker each iteration is a child run of the body instead, its nodes distributed
tasks on any worker, the Loop holding no slot between them (``nodes/_shared/loop_children.py``);
the results, error modes and labels are the same. A host without workers (a local run,
the API's single-node preview) runs the body in process as described above.

Nested loops multiply: a for_each running 8 at once whose body runs a for_each of 8 keeps
64 iterations (and their Code sandboxes, model calls) in flight from one node step. The
product of the concurrencies of the loops around an iteration may not pass
``ORCH_LOOP_MAX_IN_FLIGHT``: graph validation refuses literal values over it (``concurrency``
is a ``fan_out`` parameter); a value an expression gives is checked here, when it runs.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

from nodes._shared import loop_children
from nodes._shared.conditions import evaluate_condition, make_scope
from nodes._shared.values import input_value, result
from orchestrator.host.node_host import node_host
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, SubgraphResult

MAX_ITERATIONS = 10_000
MAX_CONCURRENCY = 64
BODY_TRIGGER = "loop_input"

# Iterations in flight in the loops around the current task (1 outside any loop): the
# iteration tasks of a for_each inherit it, multiplied by its concurrency.
IN_FLIGHT: ContextVar[int] = ContextVar("loop_iterations_in_flight", default=1)


def in_flight_within_bound(concurrency: int, bound: int) -> int:
    """Iterations in flight once a for_each of ``concurrency`` runs here; a ValueError
    naming the parameter and the setting when that passes ``ORCH_LOOP_MAX_IN_FLIGHT``."""
    outer = IN_FLIGHT.get()
    total = outer * concurrency
    if total > bound:
        raise ValueError(
            f"parameter 'concurrency' ({concurrency}) inside loops running {outer} iterations at "
            f"once would keep {total} in flight, above ORCH_LOOP_MAX_IN_FLIGHT ({bound})")
    return total


def check_body(body: Any) -> dict[str, Any]:
    """The body must be a graph object with exactly one loop_input node."""
    if not isinstance(body, dict) or not isinstance(body.get("nodes"), list):
        raise ValueError("parameter 'body' must be a graph object with 'nodes' and 'edges'")
    starts = [n for n in body["nodes"] if isinstance(n, dict) and n.get("type") == BODY_TRIGGER]
    if len(starts) != 1:
        raise ValueError(
            f"parameter 'body' must contain exactly one {BODY_TRIGGER} node; found {len(starts)}"
        )
    return body


def iteration_value(sub: SubgraphResult) -> Any:
    values = [dv.value for dv in sub.sink_outputs]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def _bounded(data: dict[str, Any], key: str, default: int, upper: int) -> int:
    raw = data.get(key)
    try:
        value = default if raw is None else int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"parameter {key!r} must be an integer; got {raw!r}") from None
    if not 1 <= value <= upper:
        raise ValueError(f"parameter {key!r} must be between 1 and {upper}; got {value}")
    return value


class Loop:
    node_type = "loop"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        body = check_body(data.get("body"))
        mode = data.get("mode") or "for_each"
        max_iterations = _bounded(data, "max_iterations", 100, MAX_ITERATIONS)
        value = input_value(inputs)
        if mode == "for_each":
            items = self._items(data.get("items"), value)
            if len(items) > max_iterations:
                raise ValueError(
                    f"loop has {len(items)} items, more than parameter 'max_iterations' "
                    f"({max_iterations})"
                )
            concurrency = _bounded(data, "concurrency", 1, MAX_CONCURRENCY)
            if loop_children.runs_children(ctx):
                results = await loop_children.for_each(body, items, concurrency, ctx)
            else:
                results = await self._for_each(body, items, concurrency, ctx)
            return result({"output": {"results": results, "iterations": len(items)}})
        if mode == "until":
            condition = data.get("condition")
            if not condition:
                raise ValueError("parameter 'condition' is required in mode 'until'")
            start = value if data.get("items") is None else data["items"]
            if loop_children.runs_children(ctx):
                last, n = await loop_children.until(body, start, condition, max_iterations, ctx)
            else:
                last, n = await self._until(body, start, condition, max_iterations, ctx)
            return result({"output": {"result": last, "iterations": n}})
        raise ValueError(f"parameter 'mode' must be 'for_each' or 'until'; got {mode!r}")

    @staticmethod
    def _items(param: Any, value: Any) -> list[Any]:
        if param is not None:
            if not isinstance(param, list):
                raise ValueError(f"parameter 'items' must be a list; got {type(param).__name__}")
            return param
        if isinstance(value, list):
            return value
        if isinstance(value, dict) and isinstance(value.get("items"), list):
            return list(value["items"])
        raise ValueError(
            "loop needs a list: set parameter 'items' or send a list "
            "(or {\"items\": [...]}) to input"
        )

    async def _iterate(self, body: dict[str, Any], value: Any, i: int, ctx: FlowContext) -> Any:
        sub = await ctx.runtime.run_subgraph(body, value, label=f"{ctx.node_name}[{i}]")
        if sub.status != "succeeded":
            detail = (sub.error or {}).get("message") or sub.error or sub.status
            raise RuntimeError(f"loop iteration {i} failed: {detail}")
        return iteration_value(sub)

    async def _for_each(
        self, body: dict[str, Any], items: list[Any], concurrency: int, ctx: FlowContext
    ) -> list[Any]:
        results: list[Any] = []
        bound = node_host(ctx).settings.loop_max_in_flight
        token = IN_FLIGHT.set(in_flight_within_bound(concurrency, bound))  # the tasks below inherit it
        try:
            for start in range(0, len(items), concurrency):
                batch = items[start:start + concurrency]
                try:
                    # A TaskGroup (not gather) so one failed iteration cancels its siblings.
                    async with asyncio.TaskGroup() as group:
                        tasks = [
                            group.create_task(self._iterate(body, item, start + k, ctx))
                            for k, item in enumerate(batch)
                        ]
                except BaseExceptionGroup as grouped:
                    raise _first_error(grouped) from None
                results.extend(task.result() for task in tasks)
        finally:
            IN_FLIGHT.reset(token)
        return results

    async def _until(
        self, body: dict[str, Any], start: Any, condition: Any, max_iterations: int,
        ctx: FlowContext,
    ) -> tuple[Any, int]:
        current = start
        for i in range(max_iterations):
            current = await self._iterate(body, current, i, ctx)
            scope = make_scope(ctx, current, {"$index": i})
            # Off the loop: a condition may take up to the expression budgets' steps.
            if await asyncio.to_thread(evaluate_condition, condition, scope, parameter="condition",
                                       where=f"iteration {i}"):
                return current, i + 1
        raise ValueError(
            f"loop reached parameter 'max_iterations' ({max_iterations}) "
            "before its condition was true"
        )


def _first_error(grouped: BaseExceptionGroup[BaseException]) -> BaseException:
    first = grouped.exceptions[0]
    return _first_error(first) if isinstance(first, BaseExceptionGroup) else first


executor = Loop()
