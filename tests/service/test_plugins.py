"""Node discovery: drop a folder (or install a pack), restart, the node type appears and runs."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.local import run_graph_local
from orchestrator.service import plugins
from orchestrator.service.plugins import PluginError, discover_folder, load_registry
from orchestrator.settings import Settings

EXECUTOR = """
from orchestrator.kernel.protocol import DataValue, ExecutionResult


class Shout:
    node_type = {type_id!r}

    async def execute(self, data, inputs, ctx):
        return ExecutionResult(outputs={{"out": DataValue("data", str(ctx.run_input).upper())}})


executor = Shout()
"""


def definition(type_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": type_id, "name": type_id.title(), "category": "test", "trigger": True,
            "outputs": [{"id": "out"}], **extra}


def write_node(root: Path, rel: str, type_id: str, *, definition_text: str | None = None,
               executor_text: str | None = None) -> Path:
    folder = root / rel
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(
        definition_text if definition_text is not None else json.dumps(definition(type_id)))
    (folder / "executor.py").write_text(
        executor_text if executor_text is not None else EXECUTOR.format(type_id=type_id))
    return folder


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Scan only what each test sets up: no repo nodes/ tree, no installed entry points."""
    monkeypatch.setattr(plugins, "_repo_nodes_dir", lambda: None)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    plugins.category_colours.cache_clear()
    yield
    plugins.category_colours.cache_clear()  # read without the repo tree: not for later tests


def no_settings(**kw: Any) -> Settings:
    return Settings(node_paths=kw.pop("node_paths", ""), **kw)


async def test_a_dropped_folder_appears_in_the_registry_and_runs(tmp_path: Path) -> None:
    write_node(tmp_path, "text/shout", "shout")
    registry = load_registry(no_settings(), extra_paths=[tmp_path])
    assert "shout" in registry
    assert registry.get("shout").source == str(tmp_path / "text" / "shout")
    graph = {"id": "g", "nodes": [{"id": "s", "type": "shout", "name": "Shout"}], "edges": []}
    result = await run_graph_local(graph, registry, "hello")
    assert result.output("s", "out") == "HELLO"


def test_folders_are_found_at_any_depth_and_private_ones_are_skipped(tmp_path: Path) -> None:
    write_node(tmp_path, "a/b/c/deep", "deep")
    write_node(tmp_path, "_drafts/hidden", "hidden")
    write_node(tmp_path, ".cache/dot", "dot")
    found = discover_folder(tmp_path)
    assert [d.id for d, _, _ in found] == ["deep"]


def test_two_packs_with_the_same_folder_layout_do_not_collide(tmp_path: Path) -> None:
    write_node(tmp_path / "one", "x/node", "first")
    write_node(tmp_path / "two", "x/node", "second")
    registry = load_registry(no_settings(), extra_paths=[tmp_path / "one", tmp_path / "two"])
    assert {"first", "second"} <= {t.id for t in registry}
    assert registry.get("first").executor is not registry.get("second").executor


def test_the_node_paths_setting_is_scanned(tmp_path: Path) -> None:
    write_node(tmp_path / "p1", "n", "alpha")
    write_node(tmp_path / "p2", "n", "beta")
    paths = os.pathsep.join([str(tmp_path / "p1"), str(tmp_path / "p2")])
    registry = load_registry(no_settings(node_paths=paths))
    assert {t.id for t in registry} == {"alpha", "beta"}


def test_an_entry_point_naming_a_package_scans_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site" / "fancy_pack"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    write_node(package, "glow", "glow")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ep = importlib.metadata.EntryPoint("fancy", "fancy_pack", "orchestrator.nodes")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: [ep] if kw.get("group") == "orchestrator.nodes" else [])
    registry = load_registry(no_settings())
    assert "glow" in registry


def test_an_entry_point_may_return_definition_executor_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "pairs_pack.py"
    module.write_text(EXECUTOR.format(type_id="paired") + textwrap.dedent(f"""
        NODES = [({definition("paired")!r}, executor)]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("pairs", "pairs_pack:NODES", "orchestrator.nodes")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [ep])
    registry = load_registry(no_settings())
    assert registry.get("paired").source.startswith("entry point 'pairs'")


def test_an_entry_point_that_fails_to_load_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = importlib.metadata.EntryPoint("gone", "no_such_pack_xyz", "orchestrator.nodes")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [ep])
    with pytest.raises(PluginError, match="entry point 'gone'"):
        load_registry(no_settings())


@pytest.mark.parametrize(
    ("case", "definition_text", "executor_text", "says"),
    [
        ("bad json", "{not json", None, "cannot read definition.json"),
        ("invalid definition", json.dumps({"id": "Bad Id", "name": "x", "category": "c"}), None,
         "invalid definition: id"),
        ("no executor", None, "x = 1\n", "does not export 'executor'"),
        ("type mismatch", None, EXECUTOR.format(type_id="other"), "does not match"),
        ("import fails", None, "raise RuntimeError('kaput')\n", "kaput"),
    ],
)
def test_a_broken_folder_raises_a_plugin_error_naming_the_folder(
    tmp_path: Path, case: str, definition_text: str | None, executor_text: str | None, says: str
) -> None:
    folder = write_node(tmp_path, "broken", "broken", definition_text=definition_text,
                        executor_text=executor_text)
    with pytest.raises(PluginError) as info:
        load_registry(no_settings(), extra_paths=[tmp_path])
    assert str(folder) in info.value.message
    assert says in info.value.message


def test_a_broken_folder_is_skipped_and_logged_when_not_strict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_node(tmp_path, "good", "good")
    bad = write_node(tmp_path, "zbad", "zbad", definition_text="{")
    with caplog.at_level(logging.WARNING, logger="orchestrator.service.plugins"):
        registry = load_registry(no_settings(), extra_paths=[tmp_path], strict=False)
    assert [t.id for t in registry] == ["good"]
    assert str(bad) in caplog.text


def test_the_same_type_in_two_folders_is_an_error_naming_both(tmp_path: Path) -> None:
    first = write_node(tmp_path, "a", "twice")
    second = write_node(tmp_path, "b", "twice")
    with pytest.raises(PluginError) as info:
        load_registry(no_settings(), extra_paths=[tmp_path])
    assert str(first) in info.value.message and str(second) in info.value.message


def test_a_node_path_that_is_not_a_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="not a directory"):
        load_registry(no_settings(node_paths=str(tmp_path / "missing")))


def test_a_definitions_own_colour_wins_and_an_unknown_category_gets_a_stable_one() -> None:
    from orchestrator.kernel.definition import NodeDefinition
    from orchestrator.service.plugins import FALLBACK_PALETTE, colour_of

    own = NodeDefinition.model_validate({"id": "x", "name": "X", "category": "flow", "color": "#123456"})
    assert colour_of(own) == "#123456"
    novel = NodeDefinition.model_validate({"id": "y", "name": "Y", "category": "my-pack"})
    assert colour_of(novel) in FALLBACK_PALETTE
    assert colour_of(novel) == colour_of(novel.model_copy())
