"""The CLI's argument handling, in-process: help text, --version, flag placement, --input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import build_parser, main, version
from orchestrator.cli.run_cmd import InputError, load_input

ROOT = Path(__file__).resolve().parents[2]


def _walk(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found: list[tuple[str, argparse.Action]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((f"{path} {name}", argparse.Action([name], name, help=helps.get(name))))
                found.extend(_walk(sub, f"{path} {name}"))
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            found.append((path, action))
    return found


def test_every_sub_command_flag_and_argument_has_help_text() -> None:
    missing = [f"{where}: {a.option_strings or a.dest}"
               for where, a in _walk(build_parser(), "orchestrator")
               if not (a.help or "").strip()]
    assert missing == []


def test_version_flag_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("orchestrator ")
    assert version() in out and version() != "unknown"


@pytest.mark.parametrize("argv", [
    ["graphs", "list", "--api-url", "http://h:1", "--api-key", "k"],
    ["graphs", "--api-url", "http://h:1", "--api-key", "k", "list"],
    ["runs", "status", "r1", "--api-url", "http://h:1", "--api-key", "k"],
    ["runs", "--api-url", "http://h:1", "--api-key", "k", "status", "r1"],
])
def test_connection_flags_work_before_or_after_the_action(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.api_url, args.api_key) == ("http://h:1", "k")


def test_connection_flags_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_API_URL", "http://env:2")
    args = build_parser().parse_args(["graphs", "list"])
    assert args.api_url == "http://env:2"


def test_malformed_json_input_is_an_error_naming_the_position() -> None:
    with pytest.raises(InputError) as info:
        load_input("{bad", None)
    message = str(info.value)
    assert "--input is not valid JSON" in message
    assert "line 1 column 2 (char 1)" in message
    assert message.splitlines()[-1] == "   ^"  # a caret under the bad character


@pytest.mark.parametrize("text", ["[1, 2", '"unterminated', "hello world", "12abc", "{'a': 1}"])
def test_input_that_is_not_json_and_not_one_bare_word_is_refused(text: str) -> None:
    with pytest.raises(InputError):
        load_input(text, None)


@pytest.mark.parametrize(("text", "value"), [
    ("hello", "hello"), ("ada@example.com", "ada@example.com"), ('{"a": 1}', {"a": 1}),
    ("42", 42), ("null", None), ('"quoted"', "quoted"),
])
def test_json_and_documented_bare_words_are_accepted(text: str, value: Any) -> None:
    assert load_input(text, None) == value


def test_run_with_malformed_input_exits_2_before_starting_anything(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    code = main(["run", str(ROOT / "examples" / "hello.json"), "--input", "{bad"])
    err = capsys.readouterr().err
    assert code == 2
    assert "column 2" in err
    assert "starting" not in err  # no redis-server or worker was started
    assert main(["run", str(ROOT / "examples" / "hello.json"), "--input", "[bold]x"]) == 2
    assert "[bold]x" in capsys.readouterr().err  # shown as typed, not as terminal markup


def test_runs_start_follow_keeps_stdout_to_json_lines(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import orchestrator.cli.runs_cmd as runs_cmd

    class FakeApi:  # the HTTP side is covered by tests/integration/test_api_http.py
        def __enter__(self) -> FakeApi:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def start_run(self, graph_id: str, run_input: Any, **kw: Any) -> str:
            return "run-123"

        def iter_events(self, run_id: str, after: str | None) -> Any:
            yield "1-0", {"event_type": "run_started", "node_id": ""}
            yield "2-0", {"event_type": "run_completed", "node_id": ""}

    monkeypatch.setattr(runs_cmd, "client", lambda args: FakeApi())
    assert main(["runs", "start", "g", "--follow"]) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [e["id"] for e in lines] == ["1-0", "2-0"]
    assert "run-123" in err
    assert main(["runs", "start", "g"]) == 0
    assert capsys.readouterr().out.strip() == "run-123"  # without --follow: just the id


def test_runs_answer_submits_a_wait_nodes_form_and_refuses_data_that_is_not_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import orchestrator.cli.runs_cmd as runs_cmd

    sent: list[tuple[str, str, Any]] = []

    class FakeApi:  # the HTTP side is covered by tests/integration/test_wait_node.py
        def __enter__(self) -> FakeApi:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def submit_form(self, run_id: str, node_id: str, data: Any) -> None:
            sent.append((run_id, node_id, data))

        def waits(self, run_id: str) -> list[dict[str, Any]]:
            return [{"node_id": "w", "kind": "form"}]

    monkeypatch.setattr(runs_cmd, "client", lambda args: FakeApi())
    assert main(["runs", "answer", "r1", "w", "--data", '{"ok": true}']) == 0
    assert sent == [("r1", "w", {"ok": True})]
    assert main(["runs", "answer", "r1", "w", "--data", "{ok"]) == 2
    assert "--data is not valid JSON" in capsys.readouterr().err
    assert main(["runs", "waits", "r1"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"node_id": "w", "kind": "form"}]
