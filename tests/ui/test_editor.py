"""The graph editor in a real browser against a real API, workers and Redis: graphs built
from an empty canvas by dragging nodes from the palette and wiring ports with the mouse,
then saved, run and compared with the shipped examples."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.ui.conftest import Console, example

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


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
    after = ui.page.evaluate("window.EditorTest.nodes()")
    added = [n for n in after if n not in before]
    assert len(added) == 1, (before, after)
    return str(added[0])


def wire(ui: Console, source: str, out: str, target: str, into: str) -> None:
    sx, sy = point(ui, f"slot('{source}', 'out', '{out}')")
    tx, ty = point(ui, f"slot('{target}', 'in', '{into}')")
    ui.page.mouse.move(sx, sy)
    ui.page.mouse.down()
    ui.page.mouse.move(tx, ty, steps=8)
    ui.page.mouse.up()


def select(ui: Console, node_id: str) -> None:
    x, y = point(ui, f"title('{node_id}')")
    ui.page.mouse.click(x, y)
    ui.page.wait_for_selector(f"#node-panel .mono:has-text('{node_id} ·')")


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


def open_editor(ui: Console, route: str = "graphs/new") -> None:
    ui.page.set_viewport_size({"width": 1600, "height": 1000})
    ui.go(route)
    ui.page.wait_for_selector("#canvas[data-ready=true]")


def save_and_run(ui: Console, graph_id: str, name: str, run_input: str) -> dict[str, Any]:
    if ui.page.locator("#graph-id").is_enabled():
        ui.page.fill("#graph-id", graph_id)
    ui.page.fill("#graph-name", name)
    ui.page.dispatch_event("#graph-name", "input")
    ui.page.fill("#editor-run-input", run_input)
    ui.page.click("#editor-run-button")
    ui.page.wait_for_selector("#editor-run-status[data-status=succeeded]", timeout=30_000)
    href = ui.page.get_attribute("#editor-run-link", "href") or ""
    run_id = re.sub(r"^#/runs/", "", href)
    return dict(ui.api("GET", f"/runs/{run_id}"))


def run_shipped(ui: Console, name: str, graph_id: str, run_input: Any) -> dict[str, Any]:
    import time

    ui.api("POST", "/graphs", example(name, graph_id))
    run_id = ui.api("POST", f"/graphs/{graph_id}/runs", {"input": run_input})["run_id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        run = ui.api("GET", f"/runs/{run_id}")
        if run["status"] in ("succeeded", "failed"):
            return dict(run)
        time.sleep(0.2)
    raise AssertionError(f"shipped {name} did not finish")


def test_build_branch_merge_by_drag_and_drop_save_and_run(console: Console) -> None:
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
    ui.shot("editor-branch-merge-built")
    graph = edited(ui)
    assert [(e["source"], e["sourceHandle"], e["target"], e["targetHandle"], e["data"]["channel"]) for e in graph["edges"]] == [
        (trigger, "output", check, "input", "flow"), (check, "true", high, "input", "flow"),
        (check, "false", low, "input", "flow"), (high, "output", merge, "input_1", "flow"),
        (low, "output", merge, "input_2", "flow"),
    ]
    assert all("position" in n for n in graph["nodes"])
    ran = save_and_run(ui, "ed-branch", "Branch built in the editor", '{"score": 8}')
    ui.shot("editor-branch-merge-ran")
    shipped = run_shipped(ui, "branch_merge", "ed-branch-shipped", {"score": 8})
    assert ran["nodes"][merge]["outputs"] == shipped["nodes"]["merge"]["outputs"]
    assert ran["nodes"][low]["status"] == shipped["nodes"]["low"]["status"] == "skipped"
    saved = ui.api("GET", "/graphs/ed-branch")
    assert saved["version"] == 1 and len(saved["nodes"]) == 5
