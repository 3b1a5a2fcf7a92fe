"""Run budgets: a cap on the model tokens or the cost of one run, checked between model
calls.

A budget has up to two fields::

    {"max_tokens": 20000, "max_cost_usd": 0.50}

``max_tokens`` caps input + output tokens of every model request of the run (all
nodes, all attempts); ``max_cost_usd`` caps their cost by the price table (usage with no
price counts 0 there). Where a run's budget comes from, field by field:

1. the graph's ``settings.budget``;
2. the workspace default, ``ORCH_RUN_BUDGETS`` = ``{"<workspace>": {...}, "*": {...}}``
   (the run's workspace, else ``"*"``).

The check (:class:`BudgetCheck`, the kernel's ``usage_check``) runs after every usage
report of a node, so between two model calls: when the run's usage so far (the
completed executions' events plus what the current one reported) is over a field, the
node fails with ``UsageBudgetError`` naming the field, the limit and where it was set,
and the run fails with it (whatever the node's error mode; never retried). A child run
with no budget of its own (a Loop's iteration on workers, an Execute Workflow's graph)
spends from its parent's: its nodes check the parent's usage so far, which counts a
child's usage once the parent collected it (a Loop copies an ended iteration's events; an
Execute Workflow node or a workflow tool reports the child's usage as its own), so
``concurrency`` iterations may pass the budget together. Runs with no budget pay
nothing: the budget is looked up once per run and process. With one, each
check reads only the run's events appended since the process's previous check.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.kernel.errors import ConfigurationError, ParameterError, UsageBudgetError
from orchestrator.kernel.protocol import FlowContext
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.usage import Usage

from .pricing import PriceTable
from .usage import EventReader, event_usage, totals, usage_events_after

FIELDS = ("max_tokens", "max_cost_usd")
WORKSPACE_LABEL = "workspace"
CACHED_RUNS = 256
PARENT_LABEL = "parent_run"  # a child run's plan label naming its parent (service/children.py)
MAX_PARENTS = 32  # parent links followed to a budget (above any ORCH_CHILD_MAX_DEPTH in use)


@dataclass(frozen=True)
class Budget:
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    where: dict[str, str] = field(default_factory=dict)  # field -> where it was set

    def __bool__(self) -> bool:
        return self.max_tokens is not None or self.max_cost_usd is not None


def parse_budget(raw: Any, where: str) -> dict[str, float]:
    """The fields of one budget object; ``ValueError`` naming ``where`` and the field."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or set(raw) - set(FIELDS):
        raise ValueError(f"{where} must be an object with only {', '.join(FIELDS)}, not {raw!r}")
    out: dict[str, float] = {}
    for name, value in raw.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{where}.{name} must be a number >= 0, not {value!r}")
        out[name] = float(value)
    return out


def graph_budget(graph: dict[str, Any]) -> dict[str, float]:
    """A graph's ``settings.budget``; a ``ParameterError`` (400) naming it when malformed."""
    try:
        return parse_budget((graph.get("settings") or {}).get("budget"), "settings.budget")
    except ValueError as exc:
        raise ParameterError(f"graph setting {exc}", graph_id=graph.get("id"), parameter="budget") from None


def workspace_budgets(text: str) -> dict[str, dict[str, float]]:
    """``ORCH_RUN_BUDGETS`` parsed; a ``ConfigurationError`` naming it when malformed."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("must be a JSON object of workspace names (or \"*\") to budgets")
        return {str(ws): parse_budget(b, f"ORCH_RUN_BUDGETS[{ws!r}]") for ws, b in raw.items()}
    except ValueError as exc:
        raise ConfigurationError(f"ORCH_RUN_BUDGETS: {exc}") from None


def budget_for(graph: dict[str, Any], workspace: str, defaults: dict[str, dict[str, float]]) -> Budget:
    """The run budget, field by field: the graph's setting, else the workspace default."""
    layers = [(graph_budget(graph), f"graph {graph.get('id') or '?'} settings.budget"),
              (defaults.get(workspace, {}), f"ORCH_RUN_BUDGETS for workspace {workspace!r}"),
              (defaults.get("*", {}), "ORCH_RUN_BUDGETS \"*\"")]
    found: dict[str, float] = {}
    where: dict[str, str] = {}
    for values, source in layers:
        for name, value in values.items():
            if name not in found:
                found[name], where[name] = value, source
    tokens = found.get("max_tokens")
    return Budget(max_tokens=int(tokens) if tokens is not None else None,
                  max_cost_usd=found.get("max_cost_usd"), where=where)


class RunReader(EventReader, Protocol):
    async def load_plan(self, run_id: str) -> RunPlan: ...


async def spent(store: EventReader, run_id: str, since: tuple[str, Usage] = ("0-0", Usage())
                ) -> tuple[str, Usage]:
    """The usage a run's events carry so far: ``since`` (a stream id and the usage up to
    it) plus what came after it; returns the new pair (events are only ever appended)."""
    events, last = await usage_events_after(store, run_id, since[0])
    total = Usage()
    total.merge(since[1])
    for event in events:
        total.merge(event_usage(event) or Usage())
    return last, total


def outer_run(run_id: str) -> str:
    """The stored run a context belongs to: a Loop's body runs as ``<run id>/<label>``
    (``RuntimeApi.run_subgraph``) and spends from its outer run's budget."""
    return run_id.split("/", 1)[0]


class BudgetCheck:
    """The kernel's ``usage_check`` for a host process (see the module docstring)."""

    def __init__(self, store: RunReader, prices: PriceTable, defaults: dict[str, dict[str, float]]) -> None:
        self.store = store
        self.prices = prices
        self.defaults = defaults
        self._budgets: OrderedDict[str, Budget] = OrderedDict()
        self._spent: OrderedDict[str, tuple[str, Usage]] = OrderedDict()  # run -> (stream id, usage to it)

    async def budget(self, run_id: str) -> Budget:
        known = self._budgets.get(run_id)
        if known is None:
            plan = await self.store.load_plan(run_id)
            known = budget_for(plan.graph, plan.labels.get(WORKSPACE_LABEL) or "default", self.defaults)
            self._budgets[run_id] = known
            while len(self._budgets) > CACHED_RUNS:
                self._budgets.popitem(last=False)
        return known

    async def owner(self, run_id: str) -> str:
        """The run whose budget ``run_id`` spends from: its own, else (a child run with no
        budget of its own: a Loop's iteration, an Execute Workflow's graph) its parent's,
        up the ``parent_run`` plan labels (``orchestrator/service/children.py``)."""
        for _ in range(MAX_PARENTS):
            if await self.budget(run_id):
                return run_id
            parent = (await self.store.load_plan(run_id)).labels.get(PARENT_LABEL)
            if not parent:
                return run_id
            run_id = parent
        return run_id

    async def __call__(self, ctx: FlowContext) -> None:
        run_id = await self.owner(outer_run(ctx.run_id))
        budget = await self.budget(run_id)
        if not budget:
            return
        known = await spent(self.store, run_id, self._spent.get(run_id, ("0-0", Usage())))
        self._spent[run_id] = known
        self._spent.move_to_end(run_id)
        while len(self._spent) > CACHED_RUNS:
            self._spent.popitem(last=False)
        usage = Usage()
        usage.merge(known[1])
        usage.merge(ctx.usage)
        used = totals(usage, self.prices)
        over: list[tuple[str, float, float]] = []
        if budget.max_tokens is not None and used["total_tokens"] > budget.max_tokens:
            over.append(("max_tokens", used["total_tokens"], budget.max_tokens))
        if budget.max_cost_usd is not None and (used["cost_usd"] or 0.0) > budget.max_cost_usd:
            over.append(("max_cost_usd", used["cost_usd"], budget.max_cost_usd))
        if over:
            name, value, limit = over[0]
            raise UsageBudgetError(
                f"run budget {name} exceeded: the run used {value:g}, its limit is {limit:g} "
                f"(set in {budget.where[name]})",
                budget=name, run_id=run_id, node_id=ctx.node_id, node_name=ctx.node_name)
