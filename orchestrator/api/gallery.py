"""``/examples``: the shipped example graphs, for the console's gallery.

``GET /examples`` lists the graphs of ``index.json`` in the examples folder
(``ORCH_EXAMPLES_DIR``; unset: the repository's ``examples/`` beside the package in a
source checkout or an editable install; the container image sets it to the copy it
holds), each with its suggested run input; ``POST /examples/{name}/import`` saves one into the
caller's workspace as a new graph (id: the example's, or with ``_2``, ``_3``... when that
is taken), its suggested input kept in the graph's ``settings.sample_input`` so the console
pre-fills the run form with it. An install without the folder (a wheel with no
ORCH_EXAMPLES_DIR) answers an empty list.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends

from orchestrator.errors import GraphConflictError, ResourceNotFoundError

from .auth import role
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["console"])
MAX_ID_TRIES = 50  # graph ids tried (name, name_2, ...) before giving up with a 409


@lru_cache(maxsize=4)
def catalogue(folder: Path | None) -> dict[str, dict[str, Any]]:
    """Example name -> ``{name, graph, input, note}``, from ``folder/index.json`` (the
    settings' examples folder, ``ORCH_EXAMPLES_DIR``; none: no examples)."""
    index = folder / "index.json" if folder is not None else None
    if index is None or not index.is_file():
        return {}
    out: dict[str, dict[str, Any]] = {}
    for entry in json.loads(index.read_text())["examples"]:
        path = folder / entry["file"]
        out[path.stem] = {"name": path.stem, "graph": json.loads(path.read_text()),
                          "input": entry.get("input"), "note": entry.get("note", "")}
    return out


def summary(example: dict[str, Any]) -> dict[str, Any]:
    graph = example["graph"]
    return {"name": example["name"], "title": graph.get("name") or example["name"],
            "description": graph.get("description", ""), "input": example["input"], "note": example["note"],
            "node_types": sorted({n["type"] for n in graph.get("nodes", [])}), "nodes": len(graph.get("nodes", []))}


@router.get("/examples")
async def list_examples(services: Services = Depends(get_services),  # noqa: B008
                        who: Principal = Depends(role("viewer"))) -> dict[str, Any]:  # noqa: B008
    """``{items: [{name, title, description, input, note, node_types, nodes}]}``."""
    return {"items": [summary(e) for e in catalogue(services.settings.examples_path()).values()]}


@router.post("/examples/{name}/import", status_code=201)
async def import_example(name: str, services: Services = Depends(get_services),  # noqa: B008
                         who: Principal = Depends(role("editor"))) -> dict[str, Any]:  # noqa: B008
    """Save example ``name`` as a new graph of the caller's workspace; the saved graph."""
    example = catalogue(services.settings.examples_path()).get(name)
    if example is None:
        raise ResourceNotFoundError(f"no example named {name!r}", parameter="name")
    graph = dict(example["graph"])
    graph["settings"] = {**graph.get("settings", {}), "sample_input": example["input"]}
    base = str(graph.get("id") or name)
    for attempt in range(1, MAX_ID_TRIES + 1):
        graph_id = base if attempt == 1 else f"{base}_{attempt}"
        try:
            return await services.graphs.create(graph, graph_id, workspace=who.workspace)
        except GraphConflictError:
            continue
    raise GraphConflictError(f"graph ids {base!r} to {base}_{MAX_ID_TRIES} are all taken", graph_id=base)
