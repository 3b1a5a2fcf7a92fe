"""kernel/start.py: which start nodes a run's start resolves, and with what result. Every
case it declines is left to the step, which reports it as before (tested here through
the real trigger nodes: the step's error names the parameter)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.environment import StepEnvironment, StepOptions
from orchestrator.kernel.memory import MemoryStore
from orchestrator.kernel.observer import ObservedEnd, ObservedNode
from orchestrator.kernel.protocol import EventType
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.start import Starting, StartInput, resolve_at_start
from orchestrator.kernel.step import run_step
from orchestrator.kernel.validation import validate_graph
from orchestrator.service.runs import RunRequest, start_run
from tests.fake_nodes import graph, make_registry
from tests.support.inline_worker import repo_registry

FAKES = make_registry()
REPO = repo_registry()


def plan_of(g: dict[str, Any], registry: Any, start: list[str] | None = None) -> RunPlan:
    vg = validate_graph(g, registry)
    return compile_run(vg, "run1", start or [g["nodes"][0]["id"]])


def test_a_manual_trigger_resolves_to_the_run_input_with_the_steps_events() -> None:
    g = graph([("t", "manual_trigger", "Start"), ("s", "manual_trigger", "Other")], [])
    starting = Starting(REPO, "api:1", StepOptions())
    started = resolve_at_start(plan_of(g, REPO, ["t"]), StartInput({"hello": "world"}), starting)
    assert started is not None and started.node_id == "t"
    completion = started.completion
    assert completion.status == "succeeded" and completion.outputs["output"].value == {"hello": "world"}
    assert [e.event_type for e in completion.events] == [EventType.STARTED, EventType.COMPLETED]
    assert all(e.data is not None and e.data["worker_id"] == "api:1" for e in completion.events)
    assert all(e.node_name == "Start" and e.node_type == "manual_trigger" for e in completion.events)
    empty = resolve_at_start(plan_of(g, REPO, ["t"]), StartInput(None), starting)
    assert empty is not None and empty.completion.outputs["output"].value == {}


def test_a_chat_start_gets_the_runs_session() -> None:
    g = graph([("c", "chat_start", "Chat")], [])
    started = resolve_at_start(plan_of(g, REPO), StartInput({"message": "hi"}, "sess-1"),
                               Starting(REPO, "api:1", StepOptions()))
    assert started is not None
    assert started.completion.outputs["output"].value == {"message": "hi", "session_id": "sess-1"}


def test_two_start_nodes_are_not_resolved() -> None:
    g = graph([("a", "entry", "A"), ("b", "entry", "B")], [])
    assert resolve_at_start(plan_of(g, FAKES, ["a", "b"]), StartInput(1), Starting(FAKES, "x", StepOptions())) is None


def test_outputs_past_the_output_limit_are_left_to_the_step() -> None:
    g = graph([("t", "entry", "Start")], [])
    tight = Starting(FAKES, "x", StepOptions(max_output_bytes=100))
    assert resolve_at_start(plan_of(g, FAKES), StartInput("y" * 500), tight) is None
    assert resolve_at_start(plan_of(g, FAKES), StartInput("y" * 50), tight) is not None


async def test_a_bad_parameter_is_left_to_the_step_which_names_it() -> None:
    g = graph([("w", "webhook_trigger", "Hook", {"path": "/", "method": "POST"})], [])
    assert resolve_at_start(plan_of(g, REPO), StartInput(None), Starting(REPO, "x", StepOptions())) is None
    store = MemoryStore()
    sent: list[list[str]] = []
    run_id = await start_run(store, REPO, g, RunRequest(None, starting=Starting(REPO, "x", StepOptions())),
                             dispatch=lambda run_id, nodes: sent.append(nodes))
    assert sent == [["w"]]
    await run_step(StepEnvironment(store=store, registry=REPO, worker_id="w1"), run_id, "w")
    record = await store.get_run(run_id)
    assert record.status == "failed" and "parameter 'path'" in str(record.error)


def test_the_hosts_observer_sees_it_once_as_a_succeeded_execution() -> None:
    seen: list[tuple[ObservedNode, ObservedEnd]] = []

    class Recording:
        def end(self, ended: ObservedEnd) -> None:
            seen.append((node, ended))

    class Observer:
        @contextmanager
        def node(self, observed: ObservedNode) -> Iterator[Recording]:
            nonlocal node
            node = observed
            yield Recording()

    node: Any = None
    g = graph([("t", "entry", "Start")], [])
    starting = Starting(FAKES, "api:7", StepOptions(observer=Observer()))
    assert resolve_at_start(plan_of(g, FAKES), StartInput(1), starting) is not None
    assert [(n.node_id, n.worker_id, n.attempt, e.status) for n, e in seen] == [("t", "api:7", 1, "succeeded")]
    declined = graph([("t", "entry", "Start", {"defer": True})], [])
    assert resolve_at_start(plan_of(declined, FAKES), StartInput(1), starting) is None
    assert len(seen) == 1  # a declined node is observed by its step, not here


def test_a_start_node_with_more_than_one_successor_takes_its_step() -> None:
    """Its step's completion hands a fan-out over in the worker's process (free slots);
    the start would send a message per branch."""
    starting = Starting(FAKES, "x", StepOptions())
    fan = graph([("t", "entry", "Start"), ("a", "relay", "A"), ("b", "relay", "B")],
                [("t", "out", "a", "in"), ("t", "out", "b", "in")])
    assert resolve_at_start(plan_of(fan, FAKES), StartInput(1), starting) is None
    one = graph([("t", "entry", "Start"), ("j", "join", "J")], [("t", "out", "j", "left"), ("t", "out", "j", "right")])
    assert resolve_at_start(plan_of(one, FAKES), StartInput(1), starting) is not None  # two edges, one successor


def test_a_start_nodes_effect_is_the_countdown_of_a_completion_worked_out_once_per_plan() -> None:
    from orchestrator.kernel.scheduling import start_effect

    g = graph([("t", "entry", "Start"), ("j", "join", "J"), ("r", "relay", "R")],
              [("t", "out", "j", "left"), ("t", "out", "j", "right"), ("j", "out", "r", "in")])
    plan = plan_of(g, FAKES)
    effect = start_effect(plan, "t", frozenset({"out"}))
    assert (effect.ready, effect.skipped, effect.remaining, effect.finished) == (["j"], [], 2, False)
    assert effect.arrivals == {"j": 2} and effect.live == {"j": {"left": 1, "right": 1}}
    assert start_effect(plan.for_run("other"), "t", frozenset({"out"})) is effect  # shared by the plan's runs
    silent = start_effect(plan, "t", frozenset())
    assert (silent.ready, silent.skipped, silent.remaining, silent.finished) == ([], ["j", "r"], 0, True)
