"""Node discovery: folders, extra paths and entry points fill one :class:`Registry`.

A *node folder* is any directory holding ``definition.json`` and ``executor.py``; the
executor module exports ``executor`` (an object with ``node_type`` and ``execute`` and/or
``materialize``). Folders are found recursively; a directory whose name starts with
``_`` or ``.`` is skipped with everything under it.

``load_registry`` scans, in order:

1. the repo's ``nodes/`` tree (the ``nodes`` package beside ``orchestrator``), if present;
2. every folder in ``settings.node_paths`` (``os.pathsep`` separated), then ``extra_paths``;
3. every entry point in ``settings.node_entry_point_group``: it loads to a module or
   package (its directory is scanned), a directory path, or a list of
   ``(definition dict, executor)`` pairs.

"Drop a folder, restart, it appears": nothing else registers a node type. A broken folder
raises :class:`PluginError` naming it; with ``strict=False`` it is logged and skipped.

:func:`colour_of` gives a definition's palette colour (``GET /nodes`` serves it): its
own ``color`` if it sets one, else its category's from ``nodes/categories.json``, else a colour picked from
:data:`FALLBACK_PALETTE` by a hash of the category name (stable across processes, so a
node pack's new category always draws the same).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from orchestrator.kernel.definition import NodeDefinition
from orchestrator.kernel.errors import OrchestratorError
from orchestrator.kernel.registry import Registry
from orchestrator.settings import WorkerSettings

__all__ = ["PluginError", "discover_folder", "get_registry", "load_registry"]

log = logging.getLogger(__name__)

DEFINITION_FILE = "definition.json"
EXECUTOR_FILE = "executor.py"

Found = tuple[NodeDefinition, object, str]  # definition, executor, source (folder or entry point)


class PluginError(OrchestratorError):
    """A node folder or entry point cannot be loaded; the message names it."""

    code = "plugin"


def _node_folders(root: Path) -> Iterator[Path]:
    """Node folders under ``root`` in sorted order, skipping ``_*`` and ``.*`` directories."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        if DEFINITION_FILE in filenames and EXECUTOR_FILE in filenames:
            yield Path(dirpath)


def _import_executor(folder: Path) -> ModuleType:
    path = folder / EXECUTOR_FILE
    # Unique per path, so two packs may both have e.g. nodes/http/executor.py.
    digest = hashlib.sha1(str(path.resolve()).encode(), usedforsecurity=False).hexdigest()[:12]
    name = f"orchestrator_nodes.{folder.name}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"node folder {folder}: cannot import {EXECUTOR_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise PluginError(
            f"node folder {folder}: importing {EXECUTOR_FILE} failed: {type(exc).__name__}: {exc}"
        ) from exc
    return module


def _parse_definition(raw: Any, where: str) -> NodeDefinition:
    try:
        return NodeDefinition.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "definition"
        raise PluginError(f"{where}: invalid definition: {field}: {first['msg']}") from None


def _check_executor(definition: NodeDefinition, executor: object, where: str) -> None:
    node_type = getattr(executor, "node_type", None)
    if node_type != definition.id:
        raise PluginError(
            f"{where}: executor.node_type {node_type!r} does not match definition id "
            f"{definition.id!r}"
        )
    if not (callable(getattr(executor, "execute", None))
            or callable(getattr(executor, "materialize", None))):
        raise PluginError(f"{where}: executor for {definition.id!r} has neither execute "
                          "nor materialize")


def load_folder(folder: Path) -> Found:
    """Load one node folder; raise PluginError naming it when anything is wrong."""
    where = f"node folder {folder}"
    try:
        raw = json.loads((folder / DEFINITION_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PluginError(f"{where}: cannot read {DEFINITION_FILE}: {exc}") from None
    definition = _parse_definition(raw, where)
    module = _import_executor(folder)
    executor = getattr(module, "executor", None)
    if executor is None:
        raise PluginError(f"{where}: {EXECUTOR_FILE} does not export 'executor'")
    _check_executor(definition, executor, where)
    return definition, executor, str(folder)


def _scan(root: Path, *, strict: bool) -> list[Found]:
    found: list[Found] = []
    for folder in _node_folders(root):
        try:
            found.append(load_folder(folder))
        except PluginError as exc:
            if strict:
                raise
            log.warning("skipping %s", exc)
    return found


def discover_folder(root: Path, *, strict: bool = True) -> list[Found]:
    """Every node folder under ``root`` as (definition, executor, folder path)."""
    if not root.is_dir():
        raise PluginError(f"node path {root} is not a directory")
    return _scan(root, strict=strict)


def _repo_nodes_dir() -> Path | None:
    """The ``nodes`` package installed beside ``orchestrator`` (repo checkout or wheel)."""
    beside = Path(__file__).resolve().parents[2] / "nodes"
    if beside.is_dir():
        return beside
    spec = importlib.util.find_spec("nodes")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return None


def _from_entry_point(ep: importlib.metadata.EntryPoint, *, strict: bool) -> list[Found]:
    where = f"entry point {ep.name!r} ({ep.value})"
    try:
        loaded = ep.load()
    except Exception as exc:
        raise PluginError(f"{where}: loading failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(loaded, str | Path):
        return discover_folder(Path(loaded), strict=strict)
    if isinstance(loaded, ModuleType):
        locations = [Path(p) for p in getattr(loaded, "__path__", [])]
        if not locations and loaded.__file__ and "." in loaded.__name__:
            # A module inside a package: scan that package's folder. A top-level module's
            # folder is a sys.path entry (site-packages): never scan that.
            locations = [Path(loaded.__file__).parent]
        if not locations:
            raise PluginError(f"{where}: {loaded.__name__!r} is a top-level module; name a "
                              "package (its folder is scanned) or a list of pairs")
        return [f for loc in locations for f in discover_folder(loc, strict=strict)]
    if isinstance(loaded, list | tuple):
        found: list[Found] = []
        for index, pair in enumerate(loaded):
            if not (isinstance(pair, list | tuple) and len(pair) == 2):
                raise PluginError(f"{where}: item {index} is not a (definition, executor) pair")
            raw, executor = pair
            definition = raw if isinstance(raw, NodeDefinition) else _parse_definition(raw, where)
            _check_executor(definition, executor, where)
            found.append((definition, executor, where))
        return found
    raise PluginError(f"{where}: expected a module, a directory or a list of "
                      f"(definition, executor) pairs, got {type(loaded).__name__}")


def load_registry(settings: WorkerSettings, *, extra_paths: Sequence[Path] = (),
                  strict: bool = True) -> Registry:
    """A fresh registry of every node type found with ``settings``' node discovery
    (``ORCH_NODE_PATHS``, ``ORCH_NODE_ENTRY_POINT_GROUP``; see the module docstring for the
    order). A type id found twice is a PluginError naming both sources.
    """
    found: list[Found] = []
    repo = _repo_nodes_dir()
    if repo is not None:
        found += _scan(repo, strict=strict)
    paths = [Path(p) for p in settings.node_paths.split(os.pathsep) if p.strip()]
    for path in [*paths, *extra_paths]:
        found += discover_folder(path, strict=strict)
    for ep in importlib.metadata.entry_points(group=settings.node_entry_point_group):
        try:
            found += _from_entry_point(ep, strict=strict)
        except PluginError as exc:
            if strict:
                raise
            log.warning("skipping %s", exc)
    registry = Registry()
    for definition, executor, source in found:
        try:
            registry.register(definition, executor, source=source)
        except ValueError as exc:
            if strict:
                raise PluginError(str(exc)) from None
            log.warning("skipping node type %r: %s", definition.id, exc)
    return registry


# Distinct, readable on light and dark backgrounds; for categories no table names.
FALLBACK_PALETTE = ("#ef4444", "#ec4899", "#8b5cf6", "#06b6d4", "#14b8a6", "#22c55e", "#a855f7", "#0ea5e9")


@lru_cache(maxsize=1)
def category_colours() -> dict[str, str]:
    """The category -> colour table shipped with the repo's nodes ({} without it)."""
    repo = _repo_nodes_dir()
    table = repo / "categories.json" if repo is not None else None
    if table is None or not table.is_file():
        return {}
    raw = json.loads(table.read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_") and isinstance(v, str)}


def colour_of(definition: NodeDefinition) -> str:
    if definition.color:
        return definition.color
    known = category_colours().get(definition.category)
    if known:
        return known
    digest = hashlib.sha256(definition.category.encode()).digest()
    return FALLBACK_PALETTE[digest[0] % len(FALLBACK_PALETTE)]


def get_registry(settings: WorkerSettings) -> Registry:
    """The process-wide registry for ``settings``' node discovery, built once (hosts call
    this with the settings their entry point built)."""
    return _registry(settings.node_paths, settings.node_entry_point_group)


@lru_cache(maxsize=4)
def _registry(node_paths: str, node_entry_point_group: str) -> Registry:
    return load_registry(WorkerSettings.model_construct(node_paths=node_paths,
                                                        node_entry_point_group=node_entry_point_group))
