"""The graph editor in a real browser against a real API, workers and Redis: graphs built
from an empty canvas by dragging nodes from the palette and wiring ports with the mouse
(and without a mouse), expressions with live previews, test steps with pinned data,
drafts, the gallery, import / export, credentials and the chat beside the canvas."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nodes import graph
from tests.ui.conftest import FITS, Console, example

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
BOTH = ((1280, 720), (1920, 1080))


def point(ui: Console, expr: str) -> tuple[float, float]:
    p = ui.page.evaluate(f"window.EditorTest.{expr}")
    return p["x"], p["y"]


def drag_node(ui: Console, node_type: str, x: float, y: float) -> str:
    """Drag ``node_type`` from the palette to graph position (x, y); return the new node id."""
    before = ui.page.evaluate("window.EditorTest.nodes()")
    item = ui.page.locator(f".palette-item[data-type='{node_type}']")
    item.scroll_into_view_if_needed()
    box = item.bounding_box()
    assert box is not None
    tx, ty = point(ui, f"at({x}, {y})")
    ui.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    ui.page.mouse.down()
    ui.page.mouse.move(tx, ty, steps=8)
    ui.page.mouse.up()
    added = [n for n in ui.page.evaluate("window.EditorTest.nodes()") if n not in before]
    assert len(added) == 1, (before, added)
    return str(added[0])


def wire(ui: Console, source: str, out: str, target: str, into: str, shot: str = "") -> None:
    sx, sy = point(ui, f"slot('{source}', 'out', '{out}')")
    tx, ty = point(ui, f"slot('{target}', 'in', '{into}')")
    ui.page.mouse.move(sx, sy)
    ui.page.mouse.down()
    ui.page.mouse.move(tx, ty, steps=8)
    if shot:  # mid-drag: compatible inputs ringed, the others dimmed
        ui.frames()
        ui.shot(shot)
    ui.page.mouse.up()


def select(ui: Console, node_id: str) -> None:
    """Click the node's title until its panel opens (a click right after a change in the
    side panel is sometimes taken as that field's blur; a person clicks again, and so does
    this helper, at most three times)."""
    selector = f"#node-panel .mono:has-text('{node_id} ·')"
    for attempt in range(3):
        x, y = point(ui, f"title('{node_id}')")
        ui.page.mouse.click(x, y)
        try:
            ui.page.wait_for_selector(selector, timeout=3000)
            return
        except Exception:
            if attempt == 2:
                ui.shot("editor-select-failed")
                raise


def set_param(ui: Console, node_id: str, param: str, value: str) -> None:
    select(ui, node_id)
    field = ui.page.locator(f"#param-{param}")
    if field.evaluate("e => e.tagName") == "SELECT":
        field.select_option(value)
    else:
        field.fill(value)
        field.dispatch_event("change")


def edited(ui: Console) -> dict[str, Any]:
    return dict(ui.page.evaluate("window.EditorTest.graph()"))


def open_editor(ui: Console, route: str = "graphs/new", size: tuple[int, int] = (1600, 1000)) -> None:
    ui.page.set_viewport_size({"width": size[0], "height": size[1]})
    ui.go(route)
    ui.page.wait_for_selector("#canvas[data-ready=true]")


def save_and_run(ui: Console, graph_id: str, name: str, run_input: str) -> dict[str, Any]:
    if ui.page.locator("#graph-id").is_enabled():
        ui.page.fill("#graph-id", graph_id)
        ui.page.dispatch_event("#graph-id", "change")
    ui.page.fill("#graph-name", name)
    ui.page.dispatch_event("#graph-name", "input")
    ui.page.fill("#editor-run-input", run_input)
    ui.page.click("#editor-run-button")
    ui.page.wait_for_selector("#editor-run-status[data-status=succeeded]", timeout=30_000)
    href = ui.page.get_attribute("#editor-run-link", "href") or ""
    return dict(ui.api("GET", f"/runs/{re.sub(r'^#/runs/', '', href)}"))


def run_shipped(ui: Console, name: str, graph_id: str, run_input: Any) -> dict[str, Any]:
    ui.api("POST", "/graphs", example(name, graph_id))
    run_id = ui.api("POST", f"/graphs/{graph_id}/runs", {"input": run_input})["run_id"]
    return finished(ui, run_id)


def finished(ui: Console, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        run = ui.api("GET", f"/runs/{run_id}")
        if run["status"] in ("succeeded", "failed"):
            return dict(run)
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish")


def test_build_branch_merge_by_drag_and_drop_save_and_run(console: Console, tmp_path: Path) -> None:
    ui = console
    open_editor(ui)
    trigger = drag_node(ui, "manual_trigger", 0, 150)
    check = drag_node(ui, "conditional", 250, 150)
    high = drag_node(ui, "set_fields", 520, 0)
    low = drag_node(ui, "set_fields", 520, 330)
    merge = drag_node(ui, "merge", 790, 150)
    wire(ui, trigger, "output", check, "input")
    wire(ui, check, "true", high, "input")
    wire(ui, check, "false", low, "input")
    wire(ui, high, "output", merge, "input_1")
    wire(ui, low, "output", merge, "input_2")
    set_param(ui, check, "value", "{{ input.score }}")
    set_param(ui, check, "operation", "gt")
    set_param(ui, check, "compare_to", "5")
    set_param(ui, high, "fields", '{"band": "high"}')
    set_param(ui, low, "fields", '{"band": "low"}')
    ui.shot("editor-branch-merge-built", BOTH)
    keys = ("source", "sourceHandle", "target", "targetHandle")
    wires = [(*(e[k] for k in keys), e["data"]["channel"]) for e in edited(ui)["edges"]]
    assert wires == [
        (trigger, "output", check, "input", "flow"), (check, "true", high, "input", "flow"),
        (check, "false", low, "input", "flow"), (high, "output", merge, "input_1", "flow"),
        (low, "output", merge, "input_2", "flow"),
    ]
    ran = save_and_run(ui, "ed-branch", "Branch built in the editor", '{"score": 8}')
    shipped = run_shipped(ui, "branch_merge", "ed-branch-shipped", {"score": 8})
    assert ran["nodes"][merge]["outputs"] == shipped["nodes"]["merge"]["outputs"]
    assert ran["nodes"][low]["status"] == shipped["nodes"]["low"]["status"] == "skipped"
    # Completion offers the fields seen in an upstream node's last run output.
    select(ui, high)
    ui.page.click("#param-fields-mode [data-mode=expression]")
    ui.page.fill("#param-fields", "{{ $('Cond")
    ui.page.wait_for_selector(".suggestion:text-is(\"$('Conditional').item.json.score\")")
    ui.page.click("#param-fields-mode [data-mode=fixed]")
    set_param(ui, high, "fields", '{"band": "high"}')
    # The JSON the editor saved is the CLI's format: `./dev run` runs it.
    saved = ui.api("GET", "/graphs/ed-branch")
    path = tmp_path / "from_editor.json"
    path.write_text(json.dumps(saved))
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("orchestrator")), "run", str(path), "--input", '{"score": 3}',
         "--json", "--workers", "1"], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert cli.returncode == 0, cli.stderr[-2000:]
    outputs = json.loads(cli.stdout.strip().splitlines()[-1])["outputs"]
    assert outputs["Merge"]["output"] == [{"score": 3, "band": "low"}]


def test_build_agent_chat_tools_with_typed_wires_and_completion(console: Console) -> None:
    ui = console
    open_editor(ui)
    chat = drag_node(ui, "chat_start", 0, 120)
    agent = drag_node(ui, "agent", 300, 120)
    tools = drag_node(ui, "toolset", 0, 330)
    wire(ui, chat, "output", agent, "input")
    wire(ui, tools, "tools", agent, "tools")
    # A node pack's typed sockets: int into a float socket is accepted (the control dims) ...
    typed = drag_node(ui, "typed_values", 620, 60)
    typed_2 = drag_node(ui, "typed_values", 620, 330)
    wire(ui, typed, "count", agent, "temperature")
    select(ui, agent)
    ui.page.click("#show-advanced")
    assert ui.page.locator("#param-temperature").is_disabled()
    assert "the wire's value wins" in (ui.page.text_content("#param-temperature-help") or "")
    # ... json into an int socket is refused, with the reason.
    wire(ui, typed, "record", typed_2, "limit", shot="editor-dragging-json-wire")
    ui.page.wait_for_selector("#wire-refused")
    reason = ui.page.text_content("#wire-refused") or ""
    assert "json" in reason and "int" in reason and "refused" in reason.lower()
    assert not [e for e in edited(ui)["edges"] if e["target"] == typed_2]
    for node in (typed, typed_2):  # not part of the shipped example
        select(ui, node)
        ui.page.click("#delete-node")
    # {{ }} completion offers the trigger's input; the panel writes the expression.
    select(ui, agent)
    ui.page.fill("#param-prompt", "{{ inp")
    ui.page.click(".suggestion:text-is('input.message')")
    assert ui.page.input_value("#param-prompt") == "{{ input.message }}"
    set_param(ui, agent, "instructions", example("agent_chat_tools", "x")["nodes"][1]["data"]["instructions"])
    select(ui, agent)
    ui.page.check("#param-history")
    set_param(ui, tools, "toolkits", '["calculator", "clock"]')
    channels = {(e["source"], e["target"]): e["data"]["channel"] for e in edited(ui)["edges"]}
    assert channels == {(chat, agent): "flow", (tools, agent): "link"}
    box = ui.page.evaluate(f"window.EditorTest.box('{agent}')")
    assert box["h"] <= 5 * 20 + 2 * 18 + 10  # sockets and at most two key parameters: the rest is in the panel
    question = {"message": "use multiply on 6 and 7"}
    ran = save_and_run(ui, "ed-agent", "Agent built in the editor", json.dumps(question))
    ui.shot("editor-agent-ran", BOTH)
    shipped = run_shipped(ui, "agent_chat_tools", "ed-agent-shipped", question)
    assert ran["nodes"][agent]["outputs"] == shipped["nodes"]["assistant"]["outputs"]
    # The chat beside the canvas: a turn, linked to its run.
    ui.page.click("#toggle-chat")
    ui.page.fill("#chat-pane #chat-input", "use multiply on 6 and 7")
    ui.page.press("#chat-pane #chat-input", "Enter")
    ui.page.wait_for_function("() => !document.querySelector('#chat-input').disabled", timeout=20_000)
    assert "42" in (ui.page.text_content("#chat-pane .msg.assistant") or "")
    ui.shot("editor-chat-beside-canvas", BOTH)
    ui.page.click("#chat-pane .run-link")
    ui.page.wait_for_selector("#run-status [data-status=succeeded]")


def test_undo_redo_cycles_upstream_references_and_version_conflict(console: Console) -> None:
    ui = console
    ui.api("POST", "/graphs", graph(
        [("t", "manual_trigger", "Start"), ("p1", "probe", "First"), ("p2", "probe", "Second")],
        [("t", "output", "p1", "input"), ("p1", "output", "p2", "input")], id="ed-edit", name="Edit me"))
    open_editor(ui, "graphs/ed-edit")
    added = drag_node(ui, "probe", 700, 250)
    ui.page.click("#undo")
    assert added not in ui.page.evaluate("window.EditorTest.nodes()")
    ui.page.click("#redo")
    assert added in ui.page.evaluate("window.EditorTest.nodes()")
    ui.page.click("#undo")
    # A wire that closes a flow cycle is refused with its path; the graph is as before.
    before = edited(ui)["edges"]
    wire(ui, "p2", "output", "p1", "input")
    ui.page.wait_for_selector("#wire-refused[data-type=CycleError]")
    assert "First" in (ui.page.text_content("#wire-refused") or "")
    assert edited(ui)["edges"] == before
    # A reference to a node that is not upstream is marked before saving: a badge on the
    # node, the message under the field, a chip in the toolbar; no banner moves the canvas.
    top = ui.page.locator("#canvas").bounding_box()
    set_param(ui, "p1", "value", "{{ $('Second').item.json }}")
    ui.page.wait_for_selector("#editor-error[data-type=UpstreamReferenceError][data-node=p1]")
    ui.page.wait_for_selector(".field-error[data-pinned=value]")
    assert ui.page.evaluate("window.EditorTest.badges('p1')")
    assert ui.page.locator("#canvas").bounding_box() == top
    ui.shot("editor-upstream-error", BOTH)
    set_param(ui, "p1", "value", "{{ $('Start').item.json }}")
    ui.page.wait_for_selector("#editor-error", state="detached")
    # Rename updates the expressions that name the node.
    select(ui, "t")
    ui.page.fill("#node-name", "Begin")
    ui.page.dispatch_event("#node-name", "change")
    assert {n["id"]: n for n in edited(ui)["nodes"]}["p1"]["data"]["value"] == "{{ $('Begin').item.json }}"
    # Node settings, copy/paste with the keyboard, auto-layout.
    select(ui, "p2")
    ui.page.locator("#node-panel details.settings").evaluate("d => { d.open = true; }")
    ui.page.fill("#set-timeout", "30")
    ui.page.dispatch_event("#set-timeout", "change")
    ui.page.select_option("#set-on-error", "error_port")
    nodes = {n["id"]: n for n in edited(ui)["nodes"]}
    assert (nodes["p2"]["settings"]["timeout_s"], nodes["p2"]["settings"]["on_error"]) == (30, "error_port")
    assert ui.page.evaluate("window.EditorTest.slot('p2', 'out', 'error')")["x"] > 0  # the error port
    select(ui, "p1")
    ui.page.focus("#canvas canvas")
    ui.page.keyboard.press("Control+c")
    ui.page.keyboard.press("Control+v")
    pasted = [n for n in edited(ui)["nodes"] if n["id"] not in ("t", "p1", "p2")]
    assert [(n["type"], n["name"]) for n in pasted] == [("probe", "First 2")]
    ui.page.keyboard.press("Control+z")
    assert len(edited(ui)["nodes"]) == 3
    ui.page.click("#auto-layout")
    xs = {n["id"]: n["position"]["x"] for n in edited(ui)["nodes"]}
    assert xs["t"] < xs["p1"] < xs["p2"]
    # Someone else saves in between: the editor's save is refused and shown, not overwritten.
    other = ui.api("GET", "/graphs/ed-edit")
    other["name"] = "Saved by someone else"
    ui.api("PUT", "/graphs/ed-edit", other)
    ui.page.click("#save-graph")
    ui.page.wait_for_selector("#save-conflict")
    assert "version 2" in (ui.page.text_content("#save-conflict") or "")
    assert ui.api("GET", "/graphs/ed-edit")["name"] == "Saved by someone else"
    ui.page.click("#save-over")
    ui.page.wait_for_selector("#editor-status:has-text('Saved as version 3')")
    saved = {n["id"]: n for n in ui.api("GET", "/graphs/ed-edit")["nodes"]}
    assert saved["t"]["name"] == "Begin" and saved["p1"]["data"]["value"] == "{{ $('Begin').item.json }}"
    ui.errors[:] = [e for e in ui.errors if "409 (Conflict)" not in e]  # the answer the test asked for


def test_every_kind_of_field_switches_to_an_expression_with_a_live_preview(console: Console) -> None:
    ui = console
    ui.api("POST", "/graphs", example("branch_merge", "ed-expr"))
    run_id = ui.api("POST", "/graphs/ed-expr/runs", {"input": {"score": 8}})["run_id"]
    finished(ui, run_id)
    open_editor(ui, "graphs/ed-expr", (1280, 720))
    select(ui, "check")
    ui.page.wait_for_selector("#param-condition[type=checkbox]")  # a boolean: fixed is a checkbox
    ui.page.click("#param-condition-mode [data-mode=expression]")
    ui.page.fill("#param-condition", "{{ input.score > 5 }}")
    ui.page.dispatch_event("#param-condition", "change")
    ui.page.wait_for_selector("#param-condition-preview:has-text('= true')")  # from the last run's input
    ui.page.fill("#param-condition", "{{ input.score > }}")
    ui.page.wait_for_selector("#param-condition-preview.field-error")
    assert "column" in (ui.page.text_content("#param-condition-preview") or "")
    ui.page.fill("#param-condition", "{{ input.score > 5 }}")
    ui.page.dispatch_event("#param-condition", "change")
    # A dropdown too: an expression, held to the enum's values in the preview.
    ui.page.click("#param-operation-mode [data-mode=expression]")
    ui.page.fill("#param-operation", "{{ 'nope' }}")
    ui.page.wait_for_selector("#param-operation-preview.field-error")
    ui.page.click("#param-operation-mode [data-mode=fixed]")
    ui.page.select_option("#param-operation", "gt")
    ui.shot("editor-expression-preview", BOTH)
    data = {n["id"]: n for n in edited(ui)["nodes"]}["check"]["data"]
    assert data["condition"] == "{{ input.score > 5 }}" and data["operation"] == "gt"


def test_a_test_step_runs_one_node_on_the_workers_and_its_output_is_pinned(console: Console) -> None:
    ui = console
    ui.api("POST", "/graphs", graph(
        [("t", "manual_trigger", "Start"), ("a", "probe", "First", {"value": 1}),
         ("b", "probe", "Second", {"value": 2})],
        [("t", "output", "a", "input"), ("a", "output", "b", "input")], id="ed-step"))
    open_editor(ui, "graphs/ed-step", (1280, 720))
    ui.page.fill("#editor-run-input", '{"seed": 7}')
    select(ui, "a")
    ui.page.click("#test-step")
    ui.page.wait_for_selector("#test-status:has-text('test succeeded')", timeout=20_000)
    run_id = (ui.page.get_attribute("#test-run-link", "href") or "").rsplit("/", 1)[-1]
    run = ui.api("GET", f"/runs/{run_id}")
    assert run["meta"]["trigger"] == "test_step" and set(run["nodes"]) == {"a"}  # only the tested node ran
    assert run["nodes"]["a"]["outputs"]["output"]["value"]["input"] == [{"seed": 7}]  # the run input, as its input
    assert "pid" in (ui.page.text_content("#node-output pre") or "")  # the output, in the panel
    ui.page.click("#pin-output")
    ui.page.wait_for_selector("#node-output[data-pinned=true]")
    # The next node's test step is fed the pinned output, not a run of the nodes before it.
    select(ui, "b")
    ui.page.click("#test-step")
    ui.page.wait_for_selector("#test-status:has-text('test succeeded')", timeout=20_000)
    second = ui.api("GET", f"/runs/{(ui.page.get_attribute('#test-run-link', 'href') or '').rsplit('/', 1)[-1]}")
    assert set(second["nodes"]) == {"b"}
    assert second["nodes"]["b"]["outputs"]["output"]["value"]["input"][0]["value"] == 1  # a's pinned output
    ui.shot("editor-test-step", BOTH)
    ui.page.click("#save-graph")
    ui.page.wait_for_selector("#editor-status:has-text('Saved as version 2')")
    assert "a" in ui.api("GET", "/graphs/ed-step")["settings"]["pinData"]  # stored with the graph


def test_an_incomplete_graph_is_badged_saved_as_a_draft_and_never_run(console: Console) -> None:
    ui = console
    open_editor(ui, "graphs/new", (1280, 720))
    ui.page.fill("#graph-id", "ed-draft")
    ui.page.dispatch_event("#graph-id", "change")
    canvas = ui.page.locator("#canvas").bounding_box()
    hook = drag_node(ui, "webhook_trigger", 0, 100)  # its path is required: not set yet
    fields = drag_node(ui, "set_fields", 300, 100)
    wire(ui, hook, "output", fields, "input")
    ui.page.wait_for_selector(f"#editor-error[data-node={hook}][data-parameter=path]")
    assert ui.page.evaluate(f"window.EditorTest.badges('{hook}')")
    assert ui.page.locator("#canvas").bounding_box() == canvas  # no banner pushed the canvas
    ui.shot("editor-draft-badges", BOTH)
    ui.page.click("#save-graph")
    ui.page.wait_for_selector("#editor-status:has-text('draft')")
    draft = ui.api("GET", "/graphs/ed-draft/draft")["graph"]
    assert {n["type"] for n in draft["nodes"]} == {"webhook_trigger", "set_fields"}
    ui.page.click("#editor-run-button")
    ui.page.wait_for_selector("#editor-run-error:has-text('draft')")
    ui.go("graphs")
    ui.page.wait_for_selector("tr[data-graph='ed-draft'] [data-status=draft]")
    assert all(r["graph_id"] != "ed-draft" for r in ui.api("GET", "/runs")["items"])


def test_keyboard_alone_adds_moves_connects_and_deletes_nodes(console: Console) -> None:
    ui = console
    open_editor(ui, "graphs/new", (1280, 720))
    ui.page.focus("#palette-search")
    ui.page.keyboard.type("Manual Trigger")
    ui.page.keyboard.press("Enter")
    ui.page.focus("#palette-search")
    ui.page.fill("#palette-search", "")
    ui.page.keyboard.type("Set Fields")
    ui.page.keyboard.press("Enter")  # added after the selected trigger, wired to it, at a free spot
    ui.page.fill("#palette-search", "")
    ui.page.keyboard.type("Merge")
    ui.page.keyboard.press("Enter")
    g = edited(ui)
    assert [n["type"] for n in g["nodes"]] == ["manual_trigger", "set_fields", "merge"]
    spots = {(n["position"]["x"], n["position"]["y"]) for n in g["nodes"]}
    assert len(spots) == 3  # not stacked on one spot
    wires = [(e["source"], e["target"]) for e in g["edges"]]
    assert wires == [("manual_trigger", "set_fields"), ("set_fields", "merge")]
    ui.page.focus("#canvas canvas")
    before = {n["id"]: n["position"] for n in edited(ui)["nodes"]}["merge"]
    ui.page.keyboard.press("ArrowDown")
    ui.page.keyboard.press("Shift+ArrowRight")
    after = {n["id"]: n["position"] for n in edited(ui)["nodes"]}["merge"]
    assert (after["x"] - before["x"], after["y"] - before["y"]) == (50, 10)
    ui.page.keyboard.press("n")  # the next node (left to right): wraps to the trigger
    ui.page.wait_for_selector("#node-panel .mono:has-text('manual_trigger ·')")
    ui.page.focus("#canvas canvas")
    ui.page.keyboard.press("c")  # connect: the panel's form, by keyboard
    ui.page.select_option("#connect-to", "merge|2")
    ui.page.click("#connect-button")
    wires = [(e["source"], e["target"], e["targetHandle"]) for e in edited(ui)["edges"]]
    assert ("manual_trigger", "merge", "input_2") in wires
    ui.page.focus("#canvas canvas")
    ui.page.keyboard.press("n")
    ui.page.keyboard.press("Delete")
    assert len(edited(ui)["nodes"]) == 2
    positive = ui.page.evaluate(
        "[...document.querySelectorAll('[tabindex]')].filter(e => e.tabIndex > 0).map(e => e.outerHTML.slice(0, 80))")
    assert positive == []
    ui.shot("editor-keyboard")


def test_a_wide_graph_fits_and_unwired_nodes_are_laid_out_in_view(console: Console) -> None:
    ui = console
    nodes: list[Any] = [("t", "manual_trigger", "Start")]
    for i in range(40):
        nodes.append((f"p{i}", "probe", f"Probe {i}"))
    edges: list[Any] = [("t", "output", f"p{i}", "input") for i in range(40)]
    for i in range(8):
        nodes.append((f"loose{i}", "probe", f"Loose {i}"))
    wide = graph(nodes, edges, id="ed-wide")
    for n in wide["nodes"]:
        n["position"] = {"x": 0, "y": 0}  # all on one spot: auto-layout has to sort it out
    ui.api("POST", "/graphs", wide)
    open_editor(ui, "graphs/ed-wide", (1280, 720))
    ui.page.click("#auto-layout")
    spots = {(n["position"]["x"], n["position"]["y"]) for n in edited(ui)["nodes"]}
    assert len(spots) == 49  # unwired ones too: each its own place
    fit = ui.page.evaluate(FITS)
    assert fit["inside"] == 49 and fit["scale"] < 0.7
    scale = fit["scale"]
    ui.page.click("#zoom-in")
    assert ui.page.evaluate("window.EditorTest.scale()") > scale
    ui.page.click("#fit-view")
    assert abs(ui.page.evaluate("window.EditorTest.scale()") - scale) < 1e-6
    ui.shot("editor-wide", BOTH)
