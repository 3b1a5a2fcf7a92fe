"""The API routes the console needs beyond the graph and run API: expression previews,
testing one node, drafts, the examples gallery and where credentials are used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.api.conftest import Api, chain
from tests.fake_nodes import graph


async def test_a_preview_resolves_an_expression_with_the_kernels_evaluator(api: Api) -> None:
    answer = (await api.client.post("/expressions/preview", json={
        "value": "{{ input.score > 5 }}", "input": {"score": 7}})).json()
    assert answer == {"ok": True, "value": True}
    named = (await api.client.post("/expressions/preview", json={
        "value": "Hi {{ $('Start').item.json.name }}", "nodes": {"Start": {"name": "Ada"}}})).json()
    assert named == {"ok": True, "value": "Hi Ada"}


async def test_a_preview_error_names_the_fault_and_the_parameters_declared_type(api: Api) -> None:
    bad = (await api.client.post("/expressions/preview", json={"value": "{{ input. }}"})).json()
    assert bad["ok"] is False and bad["error"]["type"] == "ExpressionError" and "column" in bad["error"]["message"]
    typed = (await api.client.post("/expressions/preview", json={
        "value": "{{ input.name }}", "input": {"name": "x"}, "node_type": "flaky", "parameter": "fail_times"})).json()
    assert typed["ok"] is False and "not a number" in typed["error"]["message"]


async def test_a_preview_over_the_step_budget_is_refused_not_run_long(redis_server: Any) -> None:
    from tests.api.conftest import open_api

    small = await open_api(redis_server, expression_max_steps=50)
    try:
        answer = (await small.client.post("/expressions/preview", json={
            "value": "{{ " + " + ".join(["1"] * 60) + " }}"})).json()
        assert answer["ok"] is False and answer["error"]["type"] == "ExpressionLimitError"
    finally:
        await small.close()


async def test_a_test_step_starts_only_that_node_with_the_given_upstream_outputs(api: Api) -> None:
    assert (await api.client.post("/graphs", json=chain("g1"))).status_code == 201
    answer = await api.client.post("/graphs/g1/test-step", json={
        "node_id": "b", "outputs": {"a": {"out": {"pinned": 1}}}})
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    assert api.dispatched == [(run_id, ["b"])]  # the tested node alone, on the workers
    plan = await api.store.load_plan(run_id)
    assert plan.order == ["b"] and "c" not in {n["id"] for n in plan.graph["nodes"]}
    seeded = await api.store.read_outputs(run_id, ["a"])
    assert seeded["a"]["out"].value == {"pinned": 1}
    record = await api.store.get_run(run_id)
    assert record.meta["trigger"] == "test_step" and record.meta["test_node"] == "b"


async def test_a_test_step_of_an_unsaved_graph_and_of_an_unknown_node(api: Api) -> None:
    edited = chain("fresh")
    answer = await api.client.post("/graphs/fresh/test-step", json={"node_id": "c", "graph": edited})
    assert answer.status_code == 202
    assert api.dispatched[-1][1] == ["c"]
    missing = await api.client.post("/graphs/fresh/test-step", json={"node_id": "nope", "graph": edited})
    assert missing.status_code == 422 and "nope" in missing.text
    assert (await api.client.post("/graphs/none/test-step", json={"node_id": "a"})).status_code == 404


async def test_a_draft_keeps_an_incomplete_graph_but_not_malformed_json(api: Api) -> None:
    incomplete = graph([("a", "emit", "Start"), ("b", "relay", "Middle")],
                       [("a", "out", "b", "nowhere")], id="d1", name="Half built")
    saved = await api.client.put("/graphs/d1/draft", json=incomplete)
    assert saved.status_code == 200, saved.text
    assert saved.json()["problem"]["type"] == "HandleError"
    assert (await api.client.post("/graphs", json=incomplete)).status_code == 422  # not as a version
    back = (await api.client.get("/graphs/d1/draft")).json()
    assert back["graph"]["edges"][0]["targetHandle"] == "nowhere"
    listed = (await api.client.get("/drafts")).json()["items"]
    assert [(d["graph_id"], d["name"]) for d in listed] == [("d1", "Half built")]
    malformed = await api.client.put("/graphs/d1/draft", json={"nodes": [{"id": "x"}]})
    assert malformed.status_code == 422 and "x" in malformed.text
    assert (await api.client.get("/graphs/d1/draft")).json()["graph"]["name"] == "Half built"  # kept
    assert (await api.client.post("/graphs/d1/runs", json={})).status_code == 404  # a draft never runs
    assert (await api.client.delete("/graphs/d1/draft")).status_code == 204
    assert (await api.client.get("/graphs/d1/draft")).json() == {"graph": None, "saved_at": None, "problem": None,
                                                                  "stored": False}


async def test_the_gallery_lists_the_shipped_examples_and_imports_one_with_its_input(redis_server: Any) -> None:
    from orchestrator.service.plugins import load_registry
    from tests.api.conftest import make_settings, open_api

    api = await open_api(redis_server, registry=load_registry(make_settings(redis_server)))
    try:
        items = (await api.client.get("/examples")).json()["items"]
        by_name = {i["name"]: i for i in items}
        assert by_name["branch_merge"]["input"] == {"score": 8}
        assert "--input" not in by_name["branch_merge"]["description"]
        first = (await api.client.post("/examples/branch_merge/import")).json()
        second = (await api.client.post("/examples/branch_merge/import")).json()
        assert (first["id"], second["id"]) == ("branch_merge", "branch_merge_2")
        assert second["settings"]["sample_input"] == {"score": 8}
        assert (await api.client.post("/examples/nope/import")).status_code == 404
    finally:
        await api.close()


async def test_the_gallery_reads_the_examples_folder_the_settings_name(redis_server: Any, tmp_path: Path) -> None:
    """ORCH_EXAMPLES_DIR (the container image sets it: a wheel has no examples/ beside it)
    is where the gallery looks; a folder without index.json is an empty gallery."""
    from tests.api.conftest import open_api

    (tmp_path / "mine.json").write_text(json.dumps({"name": "Mine", "nodes": [], "edges": []}))
    (tmp_path / "index.json").write_text(json.dumps({"examples": [{"file": "mine.json", "input": 1}]}))
    api = await open_api(redis_server, examples_dir=str(tmp_path))
    empty = await open_api(redis_server, examples_dir=str(tmp_path / "none"))
    try:
        items = (await api.client.get("/examples")).json()["items"]
        assert [(i["name"], i["title"], i["input"]) for i in items] == [("mine", "Mine", 1)]
        assert (await empty.client.get("/examples")).json()["items"] == []
    finally:
        await api.close()
        await empty.close()


async def test_credential_usage_names_the_graphs_and_nodes_that_name_each_credential(api: Api) -> None:
    uses = graph([("a", "emit", "Start"), ("b", "relay", "Call")], [("a", "out", "b", "in")], id="u1", name="Uses")
    uses["nodes"][1]["data"] = {"label": "x"}
    assert (await api.client.post("/graphs", json=uses)).status_code == 201
    # The fake types have no credential parameter: store a graph naming one as the real nodes do.
    import json

    stored = json.loads(await api.redis.get(f"{api.settings.key_prefix}:graph:u1:v:1"))
    stored["nodes"][1]["data"]["credential"] = "github"
    await api.redis.set(f"{api.settings.key_prefix}:graph:u1:v:1", json.dumps(stored))
    usage = (await api.client.get("/credential-usage")).json()["usage"]
    assert usage == {"github": [{"graph_id": "u1", "graph_name": "Uses", "node_id": "b", "node_name": "Call",
                                 "parameter": "credential"}]}
