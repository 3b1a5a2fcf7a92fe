"""What the console's graph editor asks the API: the socket table, validation without
saving, and saves that refuse to overwrite a version saved in between."""

from __future__ import annotations

from orchestrator.kernel.sockets import can_connect
from tests.api.conftest import Api, chain
from tests.fake_nodes import graph


async def test_socket_rules_are_the_kernels_table(api: Api) -> None:
    rules = (await api.client.get("/nodes/sockets")).json()
    pairs = {tuple(p) for p in rules["coercions"]}
    assert ("int", "float") in pairs and ("json", "int") not in pairs
    assert set(rules["generic"]) == {"data", "any"}
    ids = [t["id"] for t in rules["types"]]
    for source in ids:  # the served rule agrees with the validator's for every pair
        for target in ids:
            served = source == target or source in rules["generic"] or target in rules["generic"] \
                or (source, target) in pairs
            assert served == can_connect(source, target), (source, target)


async def test_validate_answers_without_saving(api: Api) -> None:
    ok = (await api.client.post("/graphs/validate", json=chain("draft"))).json()
    assert ok["valid"] is True and [n["id"] for n in ok["graph"]["nodes"]] == ["a", "b", "c"]
    looped = graph(
        [("a", "emit", "Start"), ("b", "collect", "Gather"), ("c", "relay", "Back")],
        [("a", "out", "b", "in"), ("b", "out", "c", "in"), ("c", "out", "b", "in")], id="draft")
    bad = (await api.client.post("/graphs/validate", json=looped)).json()
    assert bad["valid"] is False and bad["error"]["type"] == "CycleError"
    assert bad["error"]["path"][0] == bad["error"]["path"][-1]
    assert (await api.client.get("/graphs/draft")).status_code == 404


async def test_save_with_a_stale_base_version_is_a_conflict_and_keeps_the_other_save(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    theirs = {**chain("g1"), "name": "theirs"}
    assert (await api.client.put("/graphs/g1", params={"base_version": 1}, json=theirs)).status_code == 200
    mine = {**chain("g1"), "name": "mine"}
    refused = await api.client.put("/graphs/g1", params={"base_version": 1}, json=mine)
    assert refused.status_code == 409
    assert "version 2" in refused.json()["error"]["message"]
    latest = (await api.client.get("/graphs/g1")).json()
    assert latest["version"] == 2 and latest["name"] == "theirs"
    assert (await api.client.put("/graphs/g1", params={"base_version": 2}, json=mine)).json()["version"] == 3


async def test_validate_refuses_an_expression_text_over_the_limit_and_keeps_nothing_parsed(api: Api) -> None:
    """The red-team attack: a viewer's distinct 1.9 MB expressions grew the API ~3.6 MB each."""
    from orchestrator.kernel.expressions import TEMPLATES

    held = TEMPLATES.total_chars
    for i in range(3):
        text = "{{ '" + str(i) + "x" * 1_900_000 + "' }}"
        big = graph([("a", "emit", "Start"), ("b", "relay", "Big", {"value": text})], [("a", "out", "b", "in")],
                    id="big")
        answer = (await api.client.post("/graphs/validate", json=big)).json()
        assert answer["valid"] is False
        error = answer["error"]
        assert (error["node_id"], error["parameter"]) == ("b", "value")
        assert "above the limit of 100000 (max_source_chars)" in error["message"]
    assert TEMPLATES.total_chars <= max(held, TEMPLATES.max_total_chars)
    short = graph([("a", "emit", "Start"), ("b", "relay", "Ok", {"value": "{{ input.x + 1 }}"})],
                  [("a", "out", "b", "in")], id="ok")
    assert (await api.client.post("/graphs/validate", json=short)).json()["valid"] is True
