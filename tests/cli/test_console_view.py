"""The terminal run view (``orchestrator.cli.console``) and how ``run`` prints outputs."""

from __future__ import annotations

import io
import json

from rich.console import Console

from orchestrator.cli.console import RunConsole, event_label
from orchestrator.cli.run_cmd import as_json_view, print_error
from orchestrator.kernel.errors import NodeExecutionError
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


# -- text from a model, a user or a node is data: never markup, never terminal control --


def _stream(view: RunConsole, node_id: str, name: str, text: str) -> None:
    view.handle("1-0", _event(EventType.STARTED, node_id, name, node_type="agent"))
    view.handle("2-0", _event(EventType.PROGRESS, node_id, name, {"delta": text}, "agent"))
    view.handle("3-0", _event(EventType.COMPLETED, node_id, name, {"outputs": {}}, "agent"))


def test_bracketed_model_text_prints_verbatim_and_never_as_markup() -> None:
    view, out = _view()
    with view:
        _stream(view, "t", "Team", "see [/x] and [b]note[/b] from [handbook.md, chunk 2]")
    assert "see [/x] and [b]note[/b] from [handbook.md, chunk 2]" in out.getvalue()


def test_ansi_escapes_and_control_characters_of_node_text_are_shown_not_obeyed() -> None:
    view, out = _view()
    with view:
        _stream(view, "t", "Team", "\x1b[2J\x1b[31mred\x1b[0m\x9b31m\rover\x07")
    text = out.getvalue()
    assert not any(c in text for c in "\x1b\x9b\r\x07")
    assert "\\x1b[2J\\x1b[31mred\\x1b[0m\\x9b31m\\x0dover\\x07" in text


def test_a_node_name_with_markup_and_escapes_is_shown_literally() -> None:
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=False, color_system=None)
    with RunConsole(console, [("n", "[red]Boom[/] \x1b]0;title\x07", "set_fields")]) as view:
        view.handle("1-0", _event(EventType.STARTED, "n", "[red]Boom[/] \x1b]0;title\x07", node_type="set_fields"))
    assert "[red]Boom[/] \\x1b]0;title\\x07" in out.getvalue() and "\x1b" not in out.getvalue()


def test_very_long_streaming_text_keeps_the_live_view_short() -> None:
    view, _ = _view()
    with view:
        view.handle("1-0", _event(EventType.STARTED, "t", "Team", node_type="agent"))
        view.handle("2-0", _event(EventType.PROGRESS, "t", "Team", {"delta": "word " * 100_000}, "agent"))
        shown = io.StringIO()
        Console(file=shown, width=100, color_system=None).print(view._render())
    assert len(shown.getvalue().splitlines()) < 60


def test_a_finished_long_text_is_printed_whole() -> None:
    view, out = _view()
    long_text = "".join(f"[line {i}] " for i in range(20_000))
    with view:
        _stream(view, "t", "Team", long_text)
    assert long_text in out.getvalue().replace("\n", "")


def test_an_output_with_terminal_controls_prints_as_escaped_json() -> None:
    shown = _render({"text": "[b]x[/b]\x1b[31m\x9b"})
    assert "\x1b" not in shown and "\x9b" not in shown
    assert json.loads(shown) == {"text": "[b]x[/b]\x1b[31m\x9b"}  # the same value, escaped


def test_an_error_message_with_brackets_prints_verbatim() -> None:
    out = io.StringIO()
    print_error(Console(file=out, width=200, color_system=None),
                NodeExecutionError("closing tag '[/x]' at [b]", node_id="n1"))
    assert "NodeExecutionError: closing tag '[/x]' at [b]" in out.getvalue()
