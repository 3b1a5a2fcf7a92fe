"""The web console in a real browser against a real API, workers and Redis."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.fake_nodes import graph
from tests.ui.conftest import KEY, Console, Stack, example

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def slow_graph(graph_id: str, delay_s: float = 1.2) -> dict[str, Any]:
    return graph(
        [
            ("t", "manual_trigger", "Start"),
            ("p1", "probe", "First", {"delay_s": delay_s}),
            ("p2", "probe", "Second", {"delay_s": delay_s}),
        ],
        [("t", "output", "p1", "input"), ("p1", "output", "p2", "input")],
        id=graph_id,
        name=f"Slow {graph_id}",
    )


def node_state(ui: Console, node_id: str) -> str:
    return str(ui.page.get_attribute(f".node-item[data-node='{node_id}']", "data-state"))


def wait_state(ui: Console, node_id: str, state: str, timeout_ms: int = 20_000) -> None:
    ui.page.wait_for_selector(f".node-item[data-node='{node_id}'][data-state='{state}']", timeout=timeout_ms)


def test_pages_render_graphs_canvas_palette_and_runs(console: Console) -> None:
    console.api("POST", "/graphs", example("agent_team", "ui-team"))
    console.api("POST", "/graphs", example("hello", "ui-hello"))
    console.go("graphs")
    console.page.wait_for_selector("a:has-text('Hello')")
    console.page.fill("#graph-search", "team")
    assert console.page.locator("tbody a:has-text('Hello')").count() == 0
    console.shot("graphs")
    console.go("graphs/ui-team")
    console.page.wait_for_selector("#canvas canvas")
    assert console.page.locator(".node-item").count() == len(example("agent_team", "x")["nodes"])
    console.page.click(".node-item >> nth=1")
    console.page.wait_for_selector(".detail h3:has-text('Parameters')")
    console.shot("graph-canvas")
    console.go("nodes")
    console.page.wait_for_selector(".node-card[data-type='agent']")
    assert console.page.locator(".node-card").count() >= 20
    console.shot("nodes")
    console.go("runs")
    console.page.wait_for_selector("h1:has-text('Runs')")
    console.shot("runs")


def test_invalid_run_input_is_shown_where_it_points(console: Console) -> None:
    console.api("POST", "/graphs", slow_graph("ui-bad-input", 0.0))
    console.go("graphs/ui-bad-input")
    console.page.fill("#run-input", '{"a": 1,\n "b": }')
    console.page.click("#start-run button[type=submit]")
    console.page.wait_for_selector("#run-input[aria-invalid=true]")
    message = console.page.text_content("#run-input-error") or ""
    assert "not valid JSON" in message and "line 2" in message
    assert console.api("GET", "/graphs/ui-bad-input/runs")["items"] == []


def test_a_run_lights_up_live_and_shows_node_outputs(console: Console) -> None:
    console.api("POST", "/graphs", slow_graph("ui-live"))
    console.go("graphs/ui-live")
    console.page.fill("#run-input", '{"hello": "world"}')
    console.page.click("#start-run button[type=submit]")
    console.page.wait_for_url(re.compile(r".*#/runs/.+"))
    wait_state(console, "p1", "running")
    assert node_state(console, "p2") in ("queued", "pending")
    console.shot("run-live")
    wait_state(console, "p1", "succeeded")
    wait_state(console, "p2", "succeeded")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    console.page.click(".node-item[data-node='p2']")
    console.page.wait_for_selector("#node-outputs")
    outputs = console.page.locator("#node-outputs + pre").text_content() or ""
    assert "world" in outputs
    resolved = console.page.locator("h3:has-text('Parameters (resolved)') + pre").text_content() or ""
    assert '"delay_s": 1.2' in resolved  # from the completed event: the value the node ran with
    assert console.page.locator(".tl-row").count() == 3
    console.shot("run-done")


def test_reload_mid_run_continues_without_gaps(console: Console, stack: Stack) -> None:
    console.api("POST", "/graphs", slow_graph("ui-reload"))
    run_id = console.api("POST", "/graphs/ui-reload/runs", {"input": {"n": 1}})["run_id"]
    console.go(f"runs/{run_id}")
    wait_state(console, "p1", "running")
    console.page.reload()
    wait_state(console, "p2", "succeeded")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    shown = [c.strip() for c in console.page.locator("#event-log tr td:first-child").all_text_contents()]
    import httpx

    with httpx.stream("GET", f"{stack.api_url}/runs/{run_id}/events", headers={"Authorization": f"Bearer {KEY}"}) as r:
        stored = [line[3:].strip() for line in r.iter_lines() if line.startswith("id:")]
    assert shown == stored  # every event once, in order, none missing


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


def test_chat_three_turns_with_tool_calls(console: Console) -> None:
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
    console.shot("chat-approval")


def test_retry_failure_error_details_and_rerun_from_the_failed_node(console: Console) -> None:
    failing = graph(
        [
            ("t", "manual_trigger", "Start"),
            ("f", "flaky", "Flaky", {"fail_times": 1}),
            ("b", "boom", "Boom", {"message": "bad input"}),
        ],
        [("t", "output", "f", "input"), ("f", "output", "b", "input")],
        id="ui-fail",
    )
    failing["nodes"][1]["settings"] = {"retry": {"max_attempts": 2, "initial_interval_s": 0.8}}
    console.api("POST", "/graphs", failing)
    run_id = console.api("POST", "/graphs/ui-fail/runs", {"input": {}})["run_id"]
    console.go(f"runs/{run_id}")
    wait_state(console, "f", "retrying")
    wait_state(console, "f", "succeeded")
    wait_state(console, "b", "failed")
    console.page.wait_for_selector("#run-status [data-status=failed]")
    console.page.click(".node-item[data-node='b']")
    console.page.wait_for_selector(".detail .error")
    assert "boom: bad input" in (console.page.text_content(".detail .error") or "")
    console.page.click(".node-item[data-node='f']")
    console.page.wait_for_selector(".detail p:has-text('Attempts: 2')")
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
    # Keyboard: tab from the page start to the node list and open a node with Enter.
    console.page.focus(".node-item[data-node='p2']")
    console.page.keyboard.press("Enter")
    console.page.wait_for_selector(".detail h2:has-text('Second')")
    console.page.keyboard.press("Shift+Tab")
    focused = console.page.evaluate("document.activeElement.dataset.node")
    assert focused == "p1"
    console.go("runs")
    console.page.select_option("#status-filter", "cancelled")
    console.page.wait_for_selector(f"tr[data-run='{run_id}']")
    assert console.page.locator("tbody tr").count() == console.page.locator("tbody [data-status=cancelled]").count()


def test_a_graph_without_positions_is_laid_out_and_the_layout_can_be_saved(console: Console) -> None:
    console.api("POST", "/graphs", slow_graph("ui-layout", 0.0))
    console.go("graphs/ui-layout")
    console.page.wait_for_selector("#canvas canvas")
    console.page.click("#save-layout")
    console.page.wait_for_url(re.compile(r".*version=2"))
    saved = console.api("GET", "/graphs/ui-layout")
    xs = {n["id"]: n["position"]["x"] for n in saved["nodes"]}
    assert saved["version"] == 2 and xs["t"] < xs["p1"] < xs["p2"]  # layered left to right


def test_an_api_restart_mid_run_is_bridged_with_last_event_id(console: Console, stack: Stack) -> None:
    """The console's own API process goes away mid-run and comes back on the same port:
    the browser's EventSource reconnects with Last-Event-ID and the log ends up equal to
    the stored stream (nothing lost, nothing twice)."""
    from orchestrator.embedded_redis import free_port
    from tests.ui.conftest import serve_api

    port = free_port()
    api = serve_api(stack.settings, port)
    try:
        console.api("POST", "/graphs", slow_graph("ui-restart", 1.5))
        run_id = console.api("POST", "/graphs/ui-restart/runs", {"input": {}})["run_id"]
        console.page.goto(f"http://127.0.0.1:{port}/ui/#/runs/{run_id}")
        wait_state(console, "p1", "running")
        api.stop()
        console.page.wait_for_selector("#stream-state[data-state=reconnecting]")
        api = serve_api(stack.settings, port)
        wait_state(console, "p2", "succeeded")
        console.page.wait_for_selector("#run-status [data-status=succeeded]")
        shown = [c.strip() for c in console.page.locator("#event-log tr td:first-child").all_text_contents()]
        import httpx

        url = f"{stack.api_url}/runs/{run_id}/events"
        with httpx.stream("GET", url, headers={"Authorization": f"Bearer {KEY}"}) as r:
            stored = [line[3:].strip() for line in r.iter_lines() if line.startswith("id:")]
        assert shown == stored
    finally:
        api.stop()
    console.errors[:] = [e for e in console.errors if "ERR_CONNECTION_REFUSED" not in e and "ERR_INCOMPLETE" not in e]


def test_chat_with_a_team_shows_member_runs_and_flow_steps(console: Console) -> None:
    console.api("POST", "/graphs", example("agent_team", "ui-chat-team"))
    console.go("chat/ui-chat-team")
    console.page.fill("#chat-input", "a note about owls")
    console.page.press("#chat-input", "Enter")
    console.page.wait_for_function("() => !document.querySelector('#chat-input').disabled", timeout=20_000)
    reply = console.page.locator(".msg.assistant")
    assert reply.locator(".member").count() >= 2
    assert reply.locator(".flow-step").count() >= 2
    assert (reply.locator(".text").text_content() or "").startswith("Team answer")  # members nested, not inline
    console.shot("chat-team")


def test_a_file_in_a_node_output_downloads_from_the_file_store(console: Console, stack: Stack) -> None:
    import httpx

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
    console.shot("run-file-download")
    # A ref that reads as a protocol-relative URL is not a link to another site.
    odd = {"$binary": {"ref": "//evil.example/x.html", "mime": "text/html", "size": 1}}
    run_id = console.api("POST", "/graphs/ui-file/runs", {"input": odd})["run_id"]
    console.go(f"runs/{run_id}")
    console.page.wait_for_selector("#run-status [data-status=succeeded]")
    console.page.click(".node-item[data-node='t']")
    href = console.page.locator(".binary a").get_attribute("href")
    assert href and "/files/%2F%2Fevil.example" in href and not href.startswith("//")
