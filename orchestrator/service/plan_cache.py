"""Validated, compiled plans of stored graph versions, kept in Redis and in process.

A stored graph version never changes, so its validation and compilation are done once
per version, start node choice and node registry, not once per run:

* in process, :class:`PlanCache` keeps the last ``PLAN_CACHE_SIZE`` compiled plans and,
  per graph, the last :class:`GraphHead` it read (latest version, creation time,
  workspace); a start of a graph whose head it knows reads nothing before it creates the
  run, and the run store's create script refuses the run (nothing stored) when the head
  moved in between (``orchestrator/store/lua/create.lua``, the start guard), so a start
  never runs a version that is not the latest it asked for;
* in Redis (``{p}:graph:{gid}:plans``, :func:`orchestrator.store.keys.Keys.graph_plans`),
  the plan JSON of each version (without the graph, which is the version's stored JSON),
  so another API process (or a restarted one) loads it without validating. Fields carry
  the registry's :func:`fingerprint` (node definitions and graph limits): a registry
  change compiles again, and the new registry validates the graph again.

The key of a compiled plan includes the graph's creation time: a graph deleted and
created again under the same id is another graph, whatever its version numbers.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.errors import GraphError
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.validation import GraphLimits, ValidatedGraph
from orchestrator.telemetry.budgets import graph_budget

PLAN_CACHE_SIZE = 256  # compiled plans (graph version x start choice) one process keeps
HEAD_CACHE_SIZE = 1024  # graphs whose latest version one process remembers


@dataclass(frozen=True)
class GraphHead:
    """What a stored graph is now: its latest version, its creation time (Redis's text,
    unique per graph under one id) and its workspace."""

    graph_id: str
    latest: int
    created_at: str
    workspace: str


@dataclass(frozen=True)
class StoredPlan:
    """A stored graph version compiled for one start choice: ``plan`` has no run id (one
    run's is :meth:`RunPlan.for_run`); ``deadline_s`` is the graph's ``settings.deadline_s``."""

    head: GraphHead
    version: int
    plan: RunPlan
    deadline_s: float | None

    @property
    def graph(self) -> dict[str, Any]:
        return self.plan.graph

    def to_json(self) -> str:
        """The plan without its graph (Redis keeps that once, as the version's JSON)."""
        plan = {k: v for k, v in self.plan.to_json().items() if k != "graph"}
        return json.dumps({"plan": plan, "deadline_s": self.deadline_s}, separators=(",", ":"))

    @classmethod
    def from_json(cls, head: GraphHead, version: int, raw: str, graph: dict[str, Any]) -> StoredPlan:
        """:meth:`to_json`'s text back, with the version's validated ``graph``."""
        data = json.loads(raw)
        return cls(head, version, RunPlan.from_json({**data["plan"], "graph": graph}), data["deadline_s"])


def choose_start(vg: ValidatedGraph, start: list[str] | None) -> list[str]:
    """``start`` as given, else the graph's single trigger node.

    Raises ``GraphError`` when there is no trigger, or several and no choice (naming them).
    """
    if start is not None:
        if not start:
            raise GraphError("a run needs at least one start node", graph_id=vg.graph.id)
        return list(start)
    triggers = vg.start_nodes()
    if not triggers:
        raise GraphError("the graph has no trigger node to start a run from; pass start=[node id]",
                         graph_id=vg.graph.id)
    if len(triggers) > 1:
        names = ", ".join(f'{n} ("{vg.graph.node_by_id[n].name}")' for n in triggers)
        raise GraphError(f"the graph has several trigger nodes ({names}); choose one with start",
                         graph_id=vg.graph.id)
    return triggers


def graph_deadline_s(vg: ValidatedGraph) -> float | None:
    """The graph's ``settings.deadline_s``; a ``GraphError`` naming it when not a number."""
    raw = vg.graph.settings.get("deadline_s")
    if raw is None:
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise GraphError(f"graph setting deadline_s must be a number of seconds, not {raw!r}",
                         graph_id=vg.graph.id, parameter="deadline_s") from None


def compile_template(vg: ValidatedGraph, start: list[str] | None) -> tuple[RunPlan, float | None]:
    """The plan every run of ``vg`` from ``start`` executes (run id ""), and the graph's
    deadline; every graph fault a start can meet is raised here, before anything is stored."""
    starts = choose_start(vg, start)
    graph_budget(vg.graph.to_json())  # a malformed settings.budget is a graph error
    deadline_s = graph_deadline_s(vg)
    return compile_run(vg, "", starts), deadline_s


_fingerprints: dict[tuple[int, int, GraphLimits], str] = {}


def fingerprint(registry: Registry, limits: GraphLimits) -> str:
    """A short digest of the node definitions and the graph limits a plan was validated
    with; computed once per registry (and size) and limits."""
    key = (id(registry), len(registry), limits)
    known = _fingerprints.get(key)
    if known is None:
        digest = hashlib.sha256(repr(limits).encode())
        for definition in sorted(registry.definitions(), key=lambda d: d.id):
            digest.update(definition.model_dump_json().encode())
        known = _fingerprints[key] = digest.hexdigest()[:16]
    return known


def start_key(start: list[str] | None) -> str:
    """The start choice as a field suffix ("" for the graph's single trigger)."""
    return "" if start is None else ",".join(start) or ","


class PlanCache:
    """One process's compiled plans and graph heads (see the module docstring)."""

    def __init__(self) -> None:
        self._plans: OrderedDict[tuple[str, str, int, str, str], StoredPlan] = OrderedDict()
        self._heads: OrderedDict[str, GraphHead] = OrderedDict()
        self._graphs: OrderedDict[tuple[str, str, int, str], str] = OrderedDict()  # validated graph JSON

    def head(self, graph_id: str) -> GraphHead | None:
        return self._heads.get(graph_id)

    def know_head(self, head: GraphHead) -> None:
        _put(self._heads, head.graph_id, head, HEAD_CACHE_SIZE)

    def forget(self, graph_id: str) -> None:
        self._heads.pop(graph_id, None)

    def plan(self, head: GraphHead, version: int, fp: str, start: str) -> StoredPlan | None:
        hit = self._plans.get((head.graph_id, head.created_at, version, fp, start))
        if hit is not None:
            self._plans.move_to_end((head.graph_id, head.created_at, version, fp, start))
        return hit

    def keep_plan(self, stored: StoredPlan, fp: str, start: str) -> None:
        key = (stored.head.graph_id, stored.head.created_at, stored.version, fp, start)
        _put(self._plans, key, stored, PLAN_CACHE_SIZE)

    def graph(self, head: GraphHead, version: int, fp: str) -> str | None:
        return self._graphs.get((head.graph_id, head.created_at, version, fp))

    def keep_graph(self, head: GraphHead, version: int, fp: str, graph_json: str) -> None:
        _put(self._graphs, (head.graph_id, head.created_at, version, fp), graph_json, PLAN_CACHE_SIZE)


def _put(cache: OrderedDict[Any, Any], key: Any, value: Any, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)

