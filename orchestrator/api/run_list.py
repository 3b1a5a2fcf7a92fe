"""``GET /runs``: recent runs across graphs (the console's runs page), newest first.

There is no global run index: the list is gathered from each graph's run list (the
``graphs_scanned`` most recently updated graphs, the newest ``per_graph`` runs of each),
so a run of a graph outside those bounds is not listed; ``GET /graphs/{id}/runs`` pages
through one graph's runs completely. Expired runs are left out.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from orchestrator.kernel.errors import RunNotFoundError
from orchestrator.kernel.store import RunStatus

from .auth import require_key
from .launch import record_json, workspace_of_run
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["runs"])
GRAPHS_SCANNED = 200
STATUSES = sorted(RunStatus.TERMINAL | RunStatus.ACTIVE)


@router.get("/runs")
async def list_runs(
    status: str | None = Query(None, description="only runs in this status: " + ", ".join(STATUSES)),
    per_graph: int = Query(20, ge=1, le=200),
    limit: int = Query(100, ge=1, le=1000),
    services: Services = Depends(get_services),  # noqa: B008
    who: Principal = Depends(require_key),  # noqa: B008
) -> dict[str, Any]:
    """``{items, limit}``: run records (as ``GET /graphs/{id}/runs``), newest first."""
    from orchestrator.kernel.errors import ParameterError

    if status is not None and status not in STATUSES:
        raise ParameterError(f"status {status!r} is not one of {', '.join(STATUSES)}", parameter="status")
    graphs, _ = await services.graphs.page(0, GRAPHS_SCANNED, workspace=who.workspace)
    items: list[dict[str, Any]] = []
    for graph in graphs:
        for run_id in await services.graphs.runs(graph.id, 0, per_graph):
            try:
                record = await services.runs.get_run(run_id)
            except RunNotFoundError:
                continue
            if workspace_of_run(record) == who.workspace and (status is None or record.status == status):
                items.append(record_json(record))
    items.sort(key=lambda r: r["created_at"] or 0, reverse=True)
    return {"items": items[:limit], "limit": limit}
