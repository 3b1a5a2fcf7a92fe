"""The terminal run view (``orchestrator.console``) and how ``run`` prints outputs."""

from __future__ import annotations

import io
import json

from rich.console import Console

from orchestrator.cli.run_cmd import as_json_view
from orchestrator.console import RunConsole, event_label
from orchestrator.kernel.protocol import EventType, NodeEvent


def _event(event_type: str, node_id: str, name: str, data: dict[str, object] | None = None,
           node_type: str = "loop") -> NodeEvent:
    return NodeEvent(run_id="r", node_id=node_id, node_type=node_type, node_name=name,
                     event_type=event_type, data=data)


def _view() -> tuple[RunConsole, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=False, color_system=None)
    return RunConsole(console, [("l", "Loop", "loop"), ("t", "Team", "agent")]), out


def test_loop_body_events_are_labelled_with_the_inner_node_and_leave_the_loop_running() -> None:
    view, out = _view()
    with view:
        view.handle("1-0", _event(EventType.STARTED, "l", "Loop"))
        inner = {"subgraph": "Loop[1]", "inner_node_id": "s", "inner_node_name": "Shout",
                 "inner_node_type": "set_fields", "outputs": {}}
        view.handle("2-0", _event(EventType.COMPLETED, "l", "Loop", inner))
        assert view.status["l"] == "running"  # an inner node finished, not the loop
    text = out.getvalue()
    assert "Loop[1] > Shout" in text


def test_team_member_agent_events_are_labelled_with_the_member() -> None:
    view, out = _view()
    with view:
        view.handle("1-0", _event(EventType.AGENT_EVENT, "t", "Team",
                                  {"event": "RunStarted", "agent": "Researcher"}, "agent"))
        view.handle("2-0", _event(EventType.AGENT_EVENT, "t", "Team",
                                  {"event": "TeamRunStarted", "agent": "Team"}, "agent"))
    lines = [line for line in out.getvalue().splitlines() if "RunStarted" in line]
    assert "Team > Researcher" in lines[0]
    assert "Team > " not in lines[1]  # the team's own event keeps the node's name


def test_event_label_of_a_run_level_event_is_run() -> None:
    assert event_label(NodeEvent(run_id="r", node_id="", node_type="", node_name=None,
                                 event_type=EventType.RUN_STARTED)) == "run"


def _render(value: object) -> str:
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(as_json_view(value))
    return out.getvalue()


def test_final_outputs_print_as_json_not_python_repr() -> None:
    value = {"ok": True, "missing": None, "name": "Ada", "items": [1, 2]}
    shown = _render(value)
    assert json.loads(shown) == value  # pasteable JSON: true/null/double quotes
    assert "True" not in shown and "None" not in shown and "'" not in shown


def test_a_text_output_prints_as_its_text() -> None:
    assert _render("Hello, Ada!").strip() == "Hello, Ada!"


def test_agent_run_start_names_the_model_that_ran() -> None:
    view, out = _view()
    with view:
        view.handle("1-0", _event(EventType.AGENT_EVENT, "t", "Team", {
            "event": "TeamRunStarted", "agent": "Team", "model": "gpt-4o-mini",
            "model_provider": "dryrun"}, "agent"))
    assert "model dryrun:gpt-4o-mini" in out.getvalue()
