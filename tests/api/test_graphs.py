"""Graph CRUD over HTTP: versions, validation errors, unknown ids."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api, chain
from tests.fake_nodes import graph


async def test_created_graph_reads_back_as_version_one(api: Api) -> None:
    created = await api.client.post("/graphs", json=chain("g1"))
    assert created.status_code == 201
    read = await api.client.get("/graphs/g1")
    assert read.status_code == 200
    body = read.json()
    assert body["id"] == "g1" and body["version"] == 1
    assert [n["id"] for n in body["nodes"]] == ["a", "b", "c"]


async def test_graph_without_id_gets_a_generated_one(api: Api) -> None:
    raw = chain()
    del raw["id"]
    created = (await api.client.post("/graphs", json=raw)).json()
    assert created["id"]
    assert (await api.client.get(f"/graphs/{created['id']}")).status_code == 200


async def test_update_makes_a_new_version_and_keeps_the_old_one(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    changed = chain("g1")
    changed["name"] = "renamed"
    updated = await api.client.put("/graphs/g1", json=changed)
    assert updated.status_code == 200 and updated.json()["version"] == 2
    assert (await api.client.get("/graphs/g1")).json()["name"] == "renamed"
    old = (await api.client.get("/graphs/g1", params={"version": 1})).json()
    assert old["name"] == "chain" and old["version"] == 1
    versions = (await api.client.get("/graphs/g1/versions")).json()["versions"]
    assert versions == [1, 2]


async def test_creating_an_existing_id_is_a_conflict(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    again = await api.client.post("/graphs", json=chain("g1"))
    assert again.status_code == 409
    assert again.json()["error"]["graph_id"] == "g1"


async def test_list_pages_through_graphs_newest_first(api: Api) -> None:
    for gid in ("g1", "g2", "g3"):
        await api.client.post("/graphs", json=chain(gid))
    first = (await api.client.get("/graphs", params={"limit": 2})).json()
    second = (await api.client.get("/graphs", params={"limit": 2, "offset": 2})).json()
    assert first["total"] == 3
    assert [g["id"] for g in first["items"]] == ["g3", "g2"]
    assert [g["id"] for g in second["items"]] == ["g1"]


async def test_deleted_graph_is_gone(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    assert (await api.client.delete("/graphs/g1")).status_code == 204
    assert (await api.client.get("/graphs/g1")).status_code == 404
    assert (await api.client.get("/graphs")).json()["total"] == 0


async def test_unknown_graph_and_version_are_404(api: Api) -> None:
    assert (await api.client.get("/graphs/nope")).status_code == 404
    assert (await api.client.put("/graphs/nope", json=chain("nope"))).status_code == 404
    assert (await api.client.delete("/graphs/nope")).status_code == 404
    await api.client.post("/graphs", json=chain("g1"))
    missing = await api.client.get("/graphs/g1", params={"version": 7})
    assert missing.status_code == 404
    assert "version 7" in missing.json()["error"]["message"]


async def test_unknown_node_type_is_422_naming_the_node(api: Api) -> None:
    raw = chain("g1")
    raw["nodes"][1]["type"] = "relya"
    response = await api.client.post("/graphs", json=raw)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["node_id"] == "b"
    assert "relay" in error["message"]  # the did-you-mean hint


async def test_edge_without_channel_is_422_naming_the_edge(api: Api) -> None:
    raw = chain("g1")
    raw["edges"][1]["data"] = {}
    response = await api.client.post("/graphs", json=raw)
    assert response.status_code == 422
    assert response.json()["error"]["edge_id"] == raw["edges"][1]["id"]


async def test_dangling_handle_is_422_naming_edge_and_handle(api: Api) -> None:
    raw = chain("g1")
    raw["edges"][0]["targetHandle"] = "nowhere"
    response = await api.client.post("/graphs", json=raw)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["edge_id"] == raw["edges"][0]["id"]
    assert "nowhere" in error["message"]


async def test_invalid_update_keeps_the_previous_version(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    raw = chain("g1")
    raw["nodes"][2]["data"] = {"no_such_param": 1}
    response = await api.client.put("/graphs/g1", json=raw)
    assert response.status_code == 422
    assert response.json()["error"]["node_id"] == "c"
    assert (await api.client.get("/graphs/g1/versions")).json()["versions"] == [1]


async def test_malformed_json_is_400_saying_so(api: Api) -> None:
    response = await api.client.post("/graphs", content=b'{"nodes": [', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]


async def test_nodes_lists_every_definition_and_the_socket_catalogue(api: Api) -> None:
    body = (await api.client.get("/nodes")).json()
    ids = {n["id"] for n in body["nodes"]}
    assert {"emit", "relay", "webhook_trigger"} <= ids
    relay = next(n for n in body["nodes"] if n["id"] == "relay")
    assert [p["id"] for p in relay["inputs"]] == ["in"]
    assert all({"id", "color"} <= set(s) for s in body["sockets"])


BAD_IDS = ["a\x00b", "a\nb", "a/b", "a?b", "a#b", "a%2Fb", "a b", ".hidden", "x" * 129]


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_a_graph_id_outside_the_pattern_is_422_naming_the_field(api: Api, bad: str) -> None:
    body = chain("ok")
    body["id"] = bad
    response = await api.client.post("/graphs", json=body)
    assert response.status_code == 422
    assert "id" in response.json()["error"]["message"]
    assert (await api.client.get("/graphs")).json()["items"] == []


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_a_node_id_outside_the_pattern_is_422_naming_the_node(api: Api, bad: str) -> None:
    body = chain("ok")
    body["nodes"][0]["id"] = bad
    response = await api.client.post("/graphs", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert "nodes.0.id" in error["message"]


async def test_an_edge_id_outside_the_pattern_is_422_naming_the_field(api: Api) -> None:
    body = chain("ok")
    body["edges"][0]["id"] = "e/1"
    response = await api.client.post("/graphs", json=body)
    assert response.status_code == 422
    assert "edges.0.id" in response.json()["error"]["message"]


async def test_a_webhook_path_with_odd_characters_is_422_naming_the_parameter(api: Api) -> None:
    body = graph([("w", "webhook_trigger", "Hook", {"path": "a/../b?x=1"}), ("r", "relay", "Relay")],
                 [("w", "out", "r", "in")], id="hooked")
    response = await api.client.post("/graphs", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["node_id"] == "w" and error["parameter"] == "path"


@pytest.mark.parametrize("url", ["/graphs/a%00b", "/graphs/a%0Ab/versions", "/graphs/a%20b/runs"])
async def test_a_path_id_outside_the_pattern_is_422(api: Api, url: str) -> None:
    response = await api.client.get(url)
    assert response.status_code == 422
    assert "graph_id" in response.text


async def test_node_catalogue_gives_every_node_a_colour(api: Api) -> None:
    nodes = (await api.client.get("/nodes")).json()["nodes"]
    assert nodes and all(isinstance(n["color"], str) and n["color"].startswith("#") for n in nodes)


async def test_a_malformed_run_budget_is_refused_when_the_graph_is_saved(api: Api) -> None:
    """settings.budget is checked at save (422 naming it), so no stored graph fails each start."""
    bad = chain("g1")
    bad["settings"] = {"budget": {"max_tokens": "lots"}}
    created = await api.client.post("/graphs", json=bad)
    assert created.status_code == 422
    assert "settings.budget" in created.json()["error"]["message"]
    assert (await api.client.get("/graphs/g1")).status_code == 404
    await api.client.post("/graphs", json=chain("g1"))
    assert (await api.client.put("/graphs/g1", json=bad)).status_code == 422
    assert (await api.client.get("/graphs/g1")).json()["version"] == 1


@pytest.mark.parametrize(("concurrency", "named"), [
    ({"key": "{{ input.user ", "max_runs": 1}, "settings.concurrency.key"),
    ({"key": "x", "max_runs": 0}, "settings.concurrency.max_runs"),
    ({"key": "x", "strategy": "lifo"}, "settings.concurrency.strategy"),
])
async def test_a_malformed_concurrency_key_is_refused_when_the_graph_is_saved(
    api: Api, concurrency: dict[str, object], named: str,
) -> None:
    bad = chain("g1")
    bad["settings"] = {"concurrency": concurrency}
    created = await api.client.post("/graphs", json=bad)
    assert created.status_code == 422
    assert named in created.json()["error"]["message"]
    good = chain("g1")
    good["settings"] = {"concurrency": {"key": "{{ input.user }}", "max_runs": 2}}
    assert (await api.client.post("/graphs", json=good)).status_code == 201
