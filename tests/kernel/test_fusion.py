"""Chains of pure nodes (kernel/fusion.py): run in the step that readies them and stored
with it in one ``complete_chain`` call, leaving the run as a step per node would; a link
that fails, a node that is not pure, the chain's cap, all end the chain, and what follows
runs as nodes handed over do."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.environment import StepOptions
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.protocol import EventType
from orchestrator.kernel.step import StepOutcome, run_step
from orchestrator.kernel.store import RunRecord, RunStatus
from orchestrator.kernel.validation import validate_graph
from tests.fake_nodes import graph, make_registry

REG = make_registry()


def chain(*links: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """Trigger ``a`` (value 1), then ``links`` (id, type, data) one after the other."""
    nodes = [("a", "emit", "A", {"value": 1}), *((n, t, n.upper(), d) for n, t, d in links)]
    ids = ["a", *(n for n, _, _ in links)]
    return graph(nodes, [(x, "out", y, "in") for x, y in pairwise(ids)])


class Host:
    """Steps a run as a worker does: each step takes what its completion hands over."""

    def __init__(self, g: dict[str, Any], fuse: int) -> None:
        self.runner = LocalRunner(REG, options=StepOptions(fuse_max_nodes=fuse, fuse_max_s=10.0))
        self.store = self.runner.store
        self.plan = compile_run(validate_graph(g, REG), f"r-{fuse}", None)
        self.run_id = self.plan.run_id
        self.calls: list[str] = []
        for name in ("claim_node", "complete_node", "complete_chain"):
            self._count(name)

    def _count(self, name: str) -> None:
        real = getattr(self.store, name)

        async def counted(*args: Any, **kw: Any) -> Any:
            self.calls.append(name)
            return await real(*args, **kw)

        setattr(self.store, name, counted)

    async def run(self) -> list[StepOutcome]:
        await self.store.create_run(self.plan, RunRecord(run_id=self.run_id, status=RunStatus.QUEUED, graph_id="g"))
        outcomes, node, claimed = [], "a", None
        while True:
            outcome = await run_step(self.runner.env, self.run_id, node, take=lambda _: 1, claimed=claimed)
            outcomes.append(outcome)
            if not outcome.ready:
                return outcomes
            node = outcome.ready[0]
            claimed = outcome.claims.get(node)

    def story(self) -> list[tuple[str, str]]:
        return [(e.node_id, e.event_type) for e in self.store.events(self.run_id)]


async def test_a_chain_of_pure_nodes_is_one_step_and_one_store_call_with_the_same_events() -> None:
    g = chain(("b", "shift", {}), ("c", "shift", {"add": 10}), ("d", "shift", {}))
    fused, plain = Host(g, fuse=8), Host(g, fuse=0)
    outcomes = await fused.run()
    await plain.run()
    assert len(outcomes) == 1
    assert [(t, s) for t, s, _ in outcomes[0].fused] == [("shift", "succeeded")] * 3
    # The trigger's claim, then one call that stores all four (the default complete_chain
    # stores them one by one: a store may do it in one, as the Redis store does).
    assert fused.calls[:2] == ["claim_node", "complete_chain"] and "claim_node" not in fused.calls[2:]
    assert plain.calls.count("claim_node") == 1 and "complete_chain" not in plain.calls
    assert (await fused.store.get_run(fused.run_id)).status == RunStatus.SUCCEEDED
    assert fused.store.outputs(fused.run_id)["d"]["out"].value == 13
    assert fused.story() == plain.story()
    done = {e.node_id: e.data for e in fused.store.events(fused.run_id) if e.event_type == EventType.COMPLETED}
    assert all(done[n]["duration_ms"] >= 0 for n in "bcd") and done["c"]["parameters"]["add"] == 10


async def test_a_link_that_fails_ends_the_chain_unstored_and_fails_as_a_handed_over_node() -> None:
    g = chain(("b", "shift", {}), ("c", "shift", {"fail": "no"}), ("d", "shift", {}))
    host = Host(g, fuse=8)
    outcomes = await host.run()
    assert [o.status for o in outcomes] == ["succeeded", "failed"]
    assert [t for t, _, _ in outcomes[0].fused] == ["shift"]  # b only
    assert outcomes[0].ready == ["c"] and "c" in outcomes[0].claims
    story = host.story()
    # c ran twice (in the chain, then on its own claim) but its events are those of one run.
    assert story.count(("c", "started")) == 1 and story.count(("c", "error")) == 1
    assert ("d", "started") not in story
    run = await host.store.get_run(host.run_id)
    assert run.status == RunStatus.FAILED and "shift: no" in str(run.error)


async def test_a_node_that_is_not_pure_and_the_cap_end_the_chain() -> None:
    g = chain(("b", "shift", {}), ("c", "relay", {}), ("d", "shift", {}), ("e", "shift", {}), ("f", "shift", {}))
    host = Host(g, fuse=2)
    outcomes = await host.run()
    assert [[t for t, _, _ in o.fused] for o in outcomes] == [["shift"], ["shift", "shift"], []]
    assert [o.ready for o in outcomes] == [["c"], ["f"], []]
    assert host.store.outputs(host.run_id)["f"]["out"].value == 5
    assert (await host.store.get_run(host.run_id)).status == RunStatus.SUCCEEDED


async def test_a_link_that_reads_a_node_not_in_hand_is_not_run_in_the_chain() -> None:
    g = chain(("b", "shift", {}), ("c", "relay", {}), ("d", "shift", {"add": "{{ $('A').item.json }}"}))
    host = Host(g, fuse=8)
    outcomes = await host.run()
    # d reads a, which c's claim did not bring (it read b, its source): d runs on its own
    # claim, which reads a from the store
    assert [[t for t, _, _ in o.fused] for o in outcomes] == [["shift"], [], []]
    assert host.store.outputs(host.run_id)["d"]["out"].value == 3


async def test_a_chain_stops_growing_once_its_outputs_pass_the_bytes_one_call_may_carry(monkeypatch: Any) -> None:
    from orchestrator.kernel import fusion

    monkeypatch.setattr(fusion, "MAX_CHARS", 1)  # each output here is one digit of JSON
    host = Host(chain(("b", "shift", {}), ("c", "shift", {}), ("d", "shift", {})), fuse=8)
    outcomes = await host.run()
    assert [[t for t, _, _ in o.fused] for o in outcomes] == [["shift"], ["shift"]]
    assert host.store.outputs(host.run_id)["d"]["out"].value == 4


async def test_a_fault_of_the_chain_itself_stores_what_ran_and_the_run_goes_on(monkeypatch: Any) -> None:
    from orchestrator.kernel import fusion

    real = fusion.InHand.next_link

    def faulty(self: Any, node_id: str, completion: Any) -> str | None:
        if node_id == "b":
            raise RuntimeError("a bug")
        return real(self, node_id, completion)

    monkeypatch.setattr(fusion.InHand, "next_link", faulty)
    host = Host(chain(("b", "shift", {}), ("c", "shift", {}), ("d", "shift", {})), fuse=8)
    outcomes = await host.run()
    assert [[t for t, _, _ in o.fused] for o in outcomes] == [["shift"], ["shift"]]  # b; then c's step ran d
    assert host.store.outputs(host.run_id)["d"]["out"].value == 4
    assert (await host.store.get_run(host.run_id)).status == RunStatus.SUCCEEDED
