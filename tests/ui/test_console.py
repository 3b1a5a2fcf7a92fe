"""The web console's pages, run view and chat in a real browser against a real API,
workers and Redis (fixtures in conftest.py). Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fake_nodes import graph
from tests.ui.conftest import FITS, KEY, SCREENSHOTS, Console, Stack, example

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
BOTH = ((1280, 720), (1920, 1080))


def slow_graph(graph_id: str, delay_s: float = 1.2) -> dict[str, Any]:
    return graph(
        [("t", "manual_trigger", "Start"), ("p1", "probe", "First", {"delay_s": delay_s}),
         ("p2", "probe", "Second", {"delay_s": delay_s})],
        [("t", "output", "p1", "input"), ("p1", "output", "p2", "input")],
        id=graph_id, name=f"Slow {graph_id}",
    )


def fan_out(graph_id: str, width: int) -> dict[str, Any]:
    """A trigger, ``width`` probes after it, and one probe all of them feed (no positions)."""
    nodes: list[Any] = [("t", "manual_trigger", "Start")]
    edges: list[Any] = []
    for i in range(width):
        nodes.append((f"p{i}", "probe", f"Probe {i}"))
        edges += [("t", "output", f"p{i}", "input"), (f"p{i}", "output", "sink", "input")]
    nodes.append(("sink", "probe", "Collect"))
    return graph(nodes, edges, id=graph_id, name=f"Fan-out of {width}")


def wait_state(ui: Console, node_id: str, state: str, timeout_ms: int = 20_000) -> None:
    ui.page.wait_for_selector(f".node-item[data-node='{node_id}'][data-state='{state}']", timeout=timeout_ms)


def stored_ids(stack: Stack, run_id: str) -> list[str]:
    with httpx.stream("GET", f"{stack.api_url}/runs/{run_id}/events", headers={"Authorization": f"Bearer {KEY}"}) as r:
        return [line[3:].strip() for line in r.iter_lines() if line.startswith("id:")]


def shown_ids(ui: Console) -> list[str]:
    """The stream ids the event log shows, row by row (a grouped row lists several)."""
    rows = ui.page.locator("#event-log tr").evaluate_all("rows => rows.map(r => r.dataset.ids)")
    return [i for row in rows for i in row.split()]


def test_every_page_renders_at_1280_and_1920_with_an_icon_for_every_node(console: Console) -> None:
    console.api("POST", "/graphs", example("agent_team", "ui-team"))
    console.go("graphs")
    console.page.wait_for_selector(".example[data-example='branch_merge']")
    assert "orchestrator graphs create" not in console.page.inner_text("main")  # no CLI in the empty state
    console.page.fill("#graph-search", "zzz")
    assert console.page.locator("tbody a").count() == 0
    console.page.fill("#graph-search", "")
    console.shot("graphs", BOTH)
    console.go("nodes")
    console.page.wait_for_selector(".node-card[data-type='agent']")
    shipped = console.page.eval_on_selector_all(
        ".node-card", "cards => cards.filter(c => c.dataset.type !== c.dataset.type.toUpperCase())"
        ".map(c => [c.dataset.type, c.querySelector('use').getAttribute('href')])")
    test_pack = ("emit", "probe", "flaky", "boom", "typed_values")
    generic = [t for t, href in shipped if href.endswith("#box") and t not in test_pack]
    assert len(shipped) >= 25 and generic == []  # a Lucide icon for every shipped node, no initials
    console.shot("nodes", BOTH)
    console.go("runs")
    console.page.wait_for_selector("h1:has-text('Runs')")
    console.go("credentials")
    console.page.wait_for_selector("#credential-form")
    console.shot("credentials", BOTH)
    assert console.page.evaluate("[...document.querySelectorAll('[tabindex]')].every(e => e.tabIndex <= 0)")


def test_the_sign_in_page_says_where_keys_come_from_and_offers_no_sign_out(console: Console) -> None:
    console.page.context.clear_cookies()
    console.go("graphs")
    console.page.wait_for_selector("#signin")
    assert console.page.locator("#sign-out").is_hidden()
    assert "ORCH_API_KEYS" in (console.page.text_content("#key-source") or "")
    console.shot("signin", BOTH)
    console.page.fill("#api-key", KEY)
    console.page.click("#signin button[type=submit]")
    console.page.wait_for_selector("h1:has-text('Graphs')")
    assert console.page.locator("#sign-out").is_visible()


def test_a_run_lights_up_live_and_shows_node_outputs(console: Console) -> None:
    # p1 runs 2.5 s: long enough that a page opened on a loaded machine still sees it live
    # (with 1.2 s it was seen replaying a p1 that had already handed over to p2)
    console.api("POST", "/graphs", slow_graph("ui-live", delay_s=2.5))
    run_id = console.api("POST", "/graphs/ui-live/runs", {"input": {"hello": "world"}})["run_id"]
    console.go(f"runs/{run_id}")
    wait_state(console, "p1", "running")
    assert console.page.get_attribute(".node-item[data-node='p2']", "data-state") in ("queued", "pending")
    console.shot("run-live")
    wait_state(console, "p2", "succeeded")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    console.page.click(".node-item[data-node='p2']")
    assert "world" in (console.page.locator("#node-outputs + pre").text_content() or "")
    resolved = console.page.locator("h3:has-text('Parameters (resolved)') + pre").text_content() or ""
    assert '"delay_s": 2.5' in resolved  # from the completed event: the value the node ran with
    console.page.click("#tab-timeline")
    assert console.page.locator(".tl-row").count() == 3
    console.shot("run-done", BOTH)


def test_reload_mid_run_continues_without_gaps(console: Console, stack: Stack) -> None:
    console.api("POST", "/graphs", slow_graph("ui-reload"))
    run_id = console.api("POST", "/graphs/ui-reload/runs", {"input": {"n": 1}})["run_id"]
    console.go(f"runs/{run_id}")
    wait_state(console, "p1", "running")
    console.page.reload()
    wait_state(console, "p2", "succeeded")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    assert shown_ids(console) == stored_ids(stack, run_id)  # every event once, in order, none missing


def test_approval_is_answered_from_the_run_view(console: Console) -> None:
    console.api("POST", "/graphs", example("agent_approval", "ui-approval"))
    run_id = console.api("POST", "/graphs/ui-approval/runs", {"input": {"message": "use divide on 10 and 4"}})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#approval .approve")
    wait_state(console, "assistant", "waiting")
    console.shot("run-approval")
    console.page.click("#approval .approve")
    wait_state(console, "assistant", "succeeded")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    assert "2.5" in json.dumps(console.api("GET", f"/runs/{run_id}")["output"])


def test_a_wait_node_form_is_answered_from_the_run_view(console: Console) -> None:
    form = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
    console.api("POST", "/graphs", graph(
        [("t", "manual_trigger", "Start"), ("w", "wait", "Sign off", {"resume_on": "form", "form_schema": form,
                                                                     "message": "Ship the release?"}),
         ("s", "set_fields", "Done", {"fields": {"shipped": True}})],
        [("t", "output", "w", "input"), ("w", "output", "s", "input")], id="ui-wait"))
    run_id = console.api("POST", "/graphs/ui-wait/runs", {"input": {"v": 1}})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#approval .wait .submit-form")
    wait_state(console, "w", "waiting")
    assert "Ship the release?" in (console.page.text_content("#approval .wait") or "")
    console.page.fill("#approval .wait textarea", '{"approved": ')  # not JSON: said before sending
    console.page.click("#approval .submit-form")
    assert console.page.text_content("#approval .wait .field-error")
    console.shot("run-wait-form")
    console.page.fill("#approval .wait textarea", '{"approved": true}')
    console.page.click("#approval .submit-form")
    wait_state(console, "s", "succeeded")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    assert console.api("GET", f"/runs/{run_id}")["nodes"]["w"]["outputs"]["output"]["value"] == {"approved": True}


def test_the_run_view_shows_tokens_and_cost_per_run_and_per_node(console: Console) -> None:
    console.api("POST", "/graphs", example("agent_chat_tools", "ui-usage"))
    run_id = console.api("POST", "/graphs/ui-usage/runs", {"input": {"message": "use multiply on 6 and 7"}})["run_id"]
    console.go(f"runs/{run_id}")
    wait_state(console, "assistant", "succeeded")
    console.page.wait_for_selector("#run-usage:has-text('tokens')")
    stored = console.api("GET", f"/runs/{run_id}")
    total = stored["usage"]
    line = console.page.text_content("#run-usage") or ""
    assert f"{total['total_tokens']} tokens" in line and f"${total['cost_usd']:.6f}" in line
    console.page.click(".node-item[data-node='assistant']")
    node = stored["nodes"]["assistant"]["usage"]
    shown = console.page.text_content("#node-usage") or ""
    assert f"{node['total_tokens']} tokens ({node['input_tokens']} in, {node['output_tokens']} out)" in shown
    assert "$" in shown
    console.shot("run-usage")


def test_a_team_run_shows_inner_nodes_and_one_log_row_per_message(console: Console, stack: Stack) -> None:
    console.api("POST", "/graphs", example("agent_team", "ui-team-run"))
    run_id = console.api("POST", "/graphs/ui-team-run/runs", {"input": {"message": "a note about owls"}})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#run-status [data-status=succeeded]", timeout=30_000)
    team = example("agent_team", "x")
    inner = [n["id"] for n in team["nodes"] if n["type"] in ("model_selector", "toolset")]
    members = [n["id"] for n in team["nodes"] if n["type"] == "agent" and n["id"] != "lead"]
    for node_id in inner + members:  # they ran inside the lead: never left "pending"
        wait_state(console, node_id, "succeeded")
    assert "inside" in (console.page.text_content(f".node-item[data-node='{inner[0]}'] .state") or "")
    stored = stored_ids(stack, run_id)
    assert sorted(shown_ids(console)) == sorted(stored)  # grouped rows: each event once, none missing
    contents = len(stored)
    messages = console.page.locator("#event-log tr[data-kind=message]").count()
    assert 0 < messages < contents / 3  # streamed tokens grouped, one row per message
    console.page.select_option("#log-kind", "message")
    assert console.page.locator("#event-log tr:not([hidden])").count() == messages
    console.page.select_option("#log-kind", index=0)
    console.page.select_option("#log-node", inner[0])
    assert console.page.locator("#event-log tr:not([hidden])").count() == 0  # it has no events of its own
    console.page.select_option("#log-node", index=0)
    console.shot("run-team", BOTH)


def test_a_node_whose_error_continued_as_data_says_so(console: Console) -> None:
    failing = graph([("t", "manual_trigger", "Start"), ("b", "boom", "Boom", {"message": "bad input"}),
                     ("after", "probe", "After")], [("t", "output", "b", "input"), ("b", "output", "after", "input")],
                    id="ui-continue")
    failing["nodes"][1]["settings"] = {"on_error": "continue"}
    console.api("POST", "/graphs", failing)
    run_id = console.api("POST", "/graphs/ui-continue/runs", {"input": {}})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    wait_state(console, "b", "continued")
    assert "error continued as data" in (console.page.text_content(".node-item[data-node='b'] .state") or "")
    wait_state(console, "after", "succeeded")


def test_a_loop_shows_the_state_of_each_body_run_apart_from_its_own(console: Console) -> None:
    console.api("POST", "/graphs", example("loop", "ui-loop"))
    run_id = console.api("POST", "/graphs/ui-loop/runs", {"input": [{"n": 1}, {"n": 2}]})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    wait_state(console, "loop", "succeeded")
    console.page.click(".node-item[data-node='loop']")
    assert console.page.locator("#nested-runs > li").count() == 2  # one nested run per item
    assert console.page.locator("#nested-runs li[data-state=succeeded]").count() == 4  # Item and Mark, twice
    assert console.page.locator("#event-log td:has-text('For each \u203a ')").count() >= 4  # body events named
    console.shot("run-loop")


def test_chat_three_turns_with_tool_calls_each_linked_to_its_run(console: Console) -> None:
    console.api("POST", "/graphs", example("agent_chat_tools", "ui-chat"))
    console.go("chat/ui-chat")
    console.page.wait_for_selector("#chat-input")
    for i, text in enumerate(["hello there", "use multiply on 6 and 7", "thanks"]):
        console.page.fill("#chat-input", text)
        console.page.press("#chat-input", "Enter")
        console.page.wait_for_selector(f".msg.assistant >> nth={i}")
        console.page.wait_for_function(
            "n => { const m = document.querySelectorAll('.msg.assistant')[n];"
            " return m && !document.querySelector('#chat-input').disabled; }", arg=i, timeout=20_000,
        )
    assert console.page.locator(".msg.user").count() == 3
    assert "42" in (console.page.locator(".msg.assistant >> nth=1").text_content() or "")
    console.shot("chat")
    chat_url = console.page.url
    console.page.reload()
    console.page.wait_for_selector(".msg.assistant >> nth=2")
    assert console.page.url == chat_url and console.page.locator(".msg.user").count() == 3
    console.page.click(".msg.assistant >> nth=1 >> .run-link")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    assert re.search(r"#/runs/\w+", console.page.url)


def test_eventsource_on_a_listed_origin_follows_a_run(console: Console, stack: Stack) -> None:
    console.api("POST", "/graphs", slow_graph("ui-cors", 0.2))
    run_id = console.api("POST", "/graphs/ui-cors/runs", {"input": {}})["run_id"]
    page = console.page
    page.goto(f"{stack.other_origin}/follow.html")
    events = page.evaluate("([api, key, run]) => window.follow(api, key, run)", [stack.api_url, KEY, run_id])
    assert events[0][1] == "run_started" and events[-1][1] == "run_completed"
    assert [t for _, t in events].count("completed") == 3
    page.goto(f"{stack.unlisted_origin}/follow.html")
    with pytest.raises(Exception, match="Failed to fetch"):
        page.evaluate("([api, key, run]) => window.follow(api, key, run)", [stack.api_url, KEY, run_id])
    console.errors.clear()  # the refused cross-origin request is logged by the browser, as it should be


def test_chat_shows_an_approval_request_and_edited_arguments_are_used(console: Console) -> None:
    console.api("POST", "/graphs", example("agent_approval", "ui-chat-approval"))
    console.go("chat/ui-chat-approval")
    console.page.fill("#chat-input", "use divide on 10 and 4")
    console.page.press("#chat-input", "Enter")
    console.page.wait_for_selector(".msg.assistant .approval .edit")
    console.page.click(".msg.assistant .approval .edit")
    console.page.fill(".msg.assistant .approval textarea", '{"a": 9, "b": 3}')
    console.page.click(".msg.assistant .approval .approve")
    console.page.wait_for_function("() => !document.querySelector('#chat-input').disabled", timeout=20_000)
    reply = console.page.locator(".msg.assistant").text_content() or ""
    assert "3.0" in reply and "2.5" not in reply


def test_retry_failure_error_details_and_rerun_from_the_failed_node(console: Console) -> None:
    failing = graph(
        [("t", "manual_trigger", "Start"), ("f", "flaky", "Flaky", {"fail_times": 1}),
         ("b", "boom", "Boom", {"message": "bad input"})],
        [("t", "output", "f", "input"), ("f", "output", "b", "input")], id="ui-fail",
    )
    # long enough a wait that the page, opened after the start, still sees the node retrying
    failing["nodes"][1]["settings"] = {"retry": {"max_attempts": 2, "initial_interval_s": 3.0}}
    console.api("POST", "/graphs", failing)
    run_id = console.api("POST", "/graphs/ui-fail/runs", {"input": {}})["run_id"]
    console.go(f"runs/{run_id}")
    wait_state(console, "f", "retrying")
    wait_state(console, "f", "succeeded")
    wait_state(console, "b", "failed")
    console.page.wait_for_selector("#run-status [data-status=failed]")
    console.page.click(".node-item[data-node='b']")
    assert "boom: bad input" in (console.page.text_content(".detail .error") or "")
    console.page.click(".node-item[data-node='f']")
    console.page.wait_for_selector(".detail p:has-text('Attempts: 2')")
    console.page.select_option("#log-kind", "error")
    assert console.page.locator("#event-log tr:not([hidden])").count() == 2  # the retry and the failure
    console.shot("run-failed")
    console.page.click(".node-item[data-node='b']")
    console.page.click("#rerun")
    console.page.wait_for_url(re.compile(r".*#/runs/(?!" + run_id + r").+"))
    new_run = console.page.url.rsplit("/", 1)[-1]
    assert console.api("GET", f"/runs/{new_run}")["meta"]["rerun_of"] == run_id


def test_cancel_from_the_run_view_and_keyboard_access(console: Console) -> None:
    console.api("POST", "/graphs", slow_graph("ui-cancel", 3.0))
    run_id = console.api("POST", "/graphs/ui-cancel/runs", {"input": {}})["run_id"]
    console.go(f"runs/{run_id}")
    wait_state(console, "p1", "running")
    console.page.click("#cancel-run")
    console.page.wait_for_selector("#run-status [data-status=cancelled]")
    wait_state(console, "p2", "not_run")
    console.page.focus(".node-item[data-node='p2']")
    console.page.keyboard.press("Enter")
    console.page.wait_for_selector(".detail h2:has-text('Second')")
    console.page.keyboard.press("Shift+Tab")
    assert console.page.evaluate("document.activeElement.dataset.node") == "p1"
    console.go("runs")
    console.page.select_option("#status-filter", "cancelled")
    console.page.wait_for_selector(f"tr[data-run='{run_id}']")
    assert console.page.locator("tbody tr").count() == console.page.locator("tbody [data-status=cancelled]").count()


def test_an_api_restart_mid_run_is_bridged_with_last_event_id(console: Console, stack: Stack) -> None:
    """The console's own API process goes away mid-run and comes back on the same port:
    the browser's EventSource reconnects with Last-Event-ID and the log ends up equal to
    the stored stream (nothing lost, nothing twice)."""
    from orchestrator.local.embedded_redis import free_port
    from tests.ui.conftest import serve_api

    port = free_port()
    api = serve_api(stack.settings, port)
    try:
        # each probe long enough that a loaded machine's fresh page load still finds p1
        # running, and the restart below still finds the run going (p2)
        console.api("POST", "/graphs", slow_graph("ui-restart", 4.0))
        run_id = console.api("POST", "/graphs/ui-restart/runs", {"input": {}})["run_id"]
        console.page.goto(f"http://127.0.0.1:{port}/ui/#/runs/{run_id}")
        wait_state(console, "p1", "running")
        api.stop()
        console.page.wait_for_selector("#stream-state[data-state=reconnecting]")
        api = serve_api(stack.settings, port)
        wait_state(console, "p2", "succeeded")
        console.page.wait_for_selector("#run-status [data-status=succeeded]")
        assert shown_ids(console) == stored_ids(stack, run_id)
    finally:
        api.stop()
    console.errors[:] = [e for e in console.errors if "ERR_CONNECTION_REFUSED" not in e and "ERR_INCOMPLETE" not in e]


def test_a_file_in_a_node_output_downloads_from_the_file_store(console: Console, stack: Stack) -> None:
    uploaded = httpx.post(f"{stack.api_url}/files", files={"file": ("note.txt", b"file bytes 42", "text/plain")},
                          headers={"Authorization": f"Bearer {KEY}"})
    assert uploaded.status_code == 201, uploaded.text
    console.api("POST", "/graphs", graph([("t", "manual_trigger", "Start")], [], id="ui-file"))
    run_id = console.api("POST", "/graphs/ui-file/runs", {"input": uploaded.json()})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    console.page.click(".node-item[data-node='t']")
    href = console.page.locator(".binary a").get_attribute("href")
    assert href and "/files/" in href
    response = console.page.request.get(href if href.startswith("http") else stack.api_url + href)
    assert response.ok and response.body() == b"file bytes 42"  # with the session cookie, no header
    assert response.headers["content-disposition"] == 'attachment; filename="note.txt"'
    odd = {"$binary": {"ref": "//evil.example/x.html", "mime": "text/html", "size": 1}}
    run_id = console.api("POST", "/graphs/ui-file/runs", {"input": odd})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    console.page.click(".node-item[data-node='t']")
    href = console.page.locator(".binary a").get_attribute("href")
    assert href and "/files/%2F%2Fevil.example" in href and not href.startswith("//")




def test_a_60_node_run_is_readable_at_a_glance(console: Console) -> None:
    """Sixty probes between a trigger and a collector: every state shows in the node list
    and on the canvas, which fits all 62 nodes (no 0.7 clamp) with the 60 wires into the
    collector drawn. The times are written to artifacts/ (measured, not asserted)."""
    console.api("POST", "/graphs", fan_out("ui-wide", 60))
    run_id = console.api("POST", "/graphs/ui-wide/runs", {"input": {"n": 1}})["run_id"]
    deadline = time.monotonic() + 40
    while console.api("GET", f"/runs/{run_id}")["status"] != "succeeded":
        assert time.monotonic() < deadline, "the 60-node run did not finish"
        time.sleep(0.2)
    started = time.monotonic()
    console.go(f"runs/{run_id}")
    console.page.wait_for_function(
        "() => document.querySelectorAll('.node-item[data-state=succeeded]').length === 62", timeout=10_000)
    run_view_s = time.monotonic() - started
    fit = console.page.evaluate(FITS)
    assert fit["nodes"] == fit["inside"] == 62 and fit["scale"] < 0.7  # all on screen, below the old clamp
    assert fit["wires"] == 120  # every wire into the collector kept, not just the first
    console.shot("run-60-nodes", BOTH)
    started = time.monotonic()
    console.go("graphs")
    console.page.wait_for_selector("h1:has-text('Graphs')")
    load_s = time.monotonic() - started
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS.parent / "console-timings.json").write_text(json.dumps(
        {"console_load_s": round(load_s, 3), "run_view_60_nodes_s": round(run_view_s, 3)}))


def test_an_example_from_the_gallery_runs_with_its_suggested_input(console: Console) -> None:
    console.go("graphs")
    console.page.click(".example[data-example='branch_merge'] .add-example")
    console.page.wait_for_selector("#canvas[data-ready=true]")
    assert json.loads(console.page.input_value("#editor-run-input")) == {"score": 8}  # pre-filled
    console.shot("gallery-added", BOTH)
    console.page.click("#editor-run-button")
    console.page.wait_for_selector("#editor-run-status[data-status=succeeded]", timeout=20_000)
    graph_id = console.page.url.rsplit("/", 1)[-1]
    assert graph_id.startswith("branch_merge")


def test_graphs_are_imported_exported_duplicated_and_deleted_after_a_confirmation(console: Console) -> None:
    console.api("POST", "/graphs", example("hello", "ui-io"))
    console.go("graphs")
    with console.page.expect_download() as download:
        console.page.click("tr[data-graph='ui-io'] .export")
    exported = json.loads(Path(download.value.path()).read_text())
    assert exported["id"] == "ui-io" and len(exported["nodes"]) == 3
    console.page.click("tr[data-graph='ui-io'] .duplicate")
    console.page.wait_for_selector("#canvas[data-ready=true]")
    copy_id = console.page.url.rsplit("/", 1)[-1]
    assert copy_id != "ui-io" and console.api("GET", f"/graphs/{copy_id}")["name"].endswith("(copy)")
    console.go("graphs")
    console.page.click("#import-graph")
    pasted = {**exported, "id": "ui-io-pasted", "name": "Pasted"}
    console.page.fill("#import-text", json.dumps(pasted))
    console.page.click("#import-submit")
    console.page.wait_for_url(re.compile(r".*#/graphs/ui-io-pasted$"))
    console.go("graphs")
    console.page.click(f"tr[data-graph='{copy_id}'] .delete")
    console.page.wait_for_selector("#confirm-dialog")
    console.shot("delete-confirmation")
    console.page.click("#confirm-cancel")
    assert console.api("GET", f"/graphs/{copy_id}")["id"] == copy_id  # kept: the answer was no
    console.page.click(f"tr[data-graph='{copy_id}'] .delete")
    console.page.click("#confirm-ok")
    console.page.wait_for_selector(f"tr[data-graph='{copy_id}']", state="detached")
    assert copy_id not in {g["id"] for g in console.api("GET", "/graphs")["items"]}


def test_credentials_are_created_rotated_and_deleted_and_show_where_they_are_used(console: Console) -> None:
    secret, rotated = "tok-first-1234567", "tok-second-7654321"
    console.api("POST", "/graphs", graph(
        [("t", "manual_trigger", "Start"),
         ("call", "http_request", "Call GitHub", {"url": "https://api.github.com", "credential": "github"})],
        [("t", "output", "call", "input")], id="ui-uses-cred", name="Uses GitHub"))
    console.go("credentials")
    console.page.fill("#cred-name", "github")
    console.page.select_option("#cred-type", "bearer")
    console.page.fill("#cred-value-token", secret)
    console.page.fill("#cred-origins", "https://api.github.com")
    console.page.click("#cred-save")
    console.page.wait_for_selector("tr[data-credential='github']")
    assert "Uses GitHub" in (console.page.text_content("tr[data-credential='github'] .used-by") or "")
    console.page.click("tr[data-credential='github'] .rotate")
    console.page.fill("#rotate-form #cred-value-token", rotated)
    console.page.click("#rotate-form #cred-save")
    console.page.wait_for_selector("#rotate-form", state="detached")  # the page reloaded the list
    console.page.wait_for_selector("tr[data-credential='github']")
    assert secret not in console.page.content() and rotated not in console.page.content()  # never shown back
    console.shot("credentials-used", BOTH)
    console.page.click("tr[data-credential='github'] .delete")
    assert "1 node" in (console.page.text_content("#confirm-dialog") or "")
    console.page.click("#confirm-ok")
    console.page.wait_for_selector("tr[data-credential='github']", state="detached")
    assert console.api("GET", "/credentials")["credentials"] == []
