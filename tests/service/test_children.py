"""Starting child runs: the refusals that come before anything is stored (depth, fan-out,
recursion, an unknown graph), and the child's id (the same spec, the same run). The whole
mechanism on real workers: tests/integration/test_child_runs.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from orchestrator.errors import GraphNotFoundError
from orchestrator.host.children import ChildSpec
from orchestrator.kernel.errors import ParameterError, RunNotFoundError
from orchestrator.kernel.store import RunRecord
from orchestrator.service.children import Children, child_run_id
from orchestrator.settings import Settings
from orchestrator.store.keys import Keys


@dataclass
class FakeStore:
    """What ``Children.start`` reads before it starts anything: run records."""

    records: dict[str, RunRecord] = field(default_factory=dict)
    redis: Any = None
    keys: Keys = field(default_factory=Keys)

    async def get_run(self, run_id: str) -> RunRecord:
        if run_id not in self.records:
            raise RunNotFoundError("no such run", run_id=run_id)
        return self.records[run_id]


class FakeGraphs:
    async def get(self, graph_id: str, version: int | None = None, *, workspace: str | None = None) -> Any:
        raise GraphNotFoundError(f"unknown graph {graph_id!r}")


@dataclass
class FakeServices:
    settings: Settings
    graphs: FakeGraphs = field(default_factory=FakeGraphs)
    redis: Any = None
    registry: Any = None
    run_store: Any = None

    def dispatch(self, run_id: str, node_ids: list[str]) -> None:
        raise AssertionError("nothing may be dispatched")


def children(parent_meta: dict[str, Any], started: int = 0, **settings: Any) -> Children:
    store = FakeStore({"p": RunRecord(run_id="p", status="running", graph_id="outer", meta=parent_meta)})
    made = Children(FakeServices(Settings(**settings)), store)  # type: ignore[arg-type]

    async def count(run_id: str) -> int:
        return started

    made.count = count  # type: ignore[method-assign]
    return made


def spec(graph_id: str = "inner", **kw: Any) -> ChildSpec:
    return ChildSpec(parent_run="p", parent_node="sub", graph_id=graph_id, run_input={}, **kw)


async def test_a_child_past_the_depth_bound_is_refused_naming_the_setting() -> None:
    deep = children({"child_depth": 3}, child_max_depth=3)
    with pytest.raises(ParameterError, match="would be 4 levels deep; ORCH_CHILD_MAX_DEPTH is 3") as refused:
        await deep.start(spec())
    assert (refused.value.node_id, refused.value.parameter) == ("sub", "graph_id")


async def test_a_run_past_its_children_bound_is_refused_naming_the_setting() -> None:
    full = children({}, started=5, child_max_per_run=5)
    with pytest.raises(ParameterError, match=r"already started 5 child runs \(ORCH_CHILD_MAX_PER_RUN\)"):
        await full.start(spec())


async def test_a_graph_in_its_own_lineage_is_refused_naming_the_path() -> None:
    nested = children({"graph_lineage": ["top"]})
    with pytest.raises(ParameterError, match=r"graph 'top' would run inside itself \(top > outer > top\)"):
        await nested.start(spec("top"))
    with pytest.raises(ParameterError, match=r"\(top > outer > outer\)"):
        await nested.start(spec("outer"))


async def test_an_unknown_graph_is_refused_naming_it_and_the_workspace() -> None:
    with pytest.raises(ParameterError, match="no stored graph 'inner' in workspace 'team-a' at version 2"):
        await children({"workspace": "team-a"}).start(spec(version=2))


def test_the_same_spec_names_the_same_child_and_a_retry_or_another_key_a_new_one() -> None:
    first = child_run_id(spec())
    assert child_run_id(spec()) == first
    assert len({first, child_run_id(spec(attempt=2)), child_run_id(spec(key="1"))}) == 3
