"""What a host process plugs into the kernel's step options for observability: the node
span observer (only when traces are on) and the run budget check."""

from __future__ import annotations

from typing import Any

from orchestrator.settings import Settings

from . import tracing
from .budgets import BudgetCheck, RunReader, workspace_budgets
from .pricing import load_table


def step_hooks(store: RunReader, settings: Settings, *, service: str) -> dict[str, Any]:
    """``StepOptions`` keyword arguments: ``observer`` and ``usage_check``."""
    observer = tracing.NodeSpans() if tracing.configure(service) else None
    check = BudgetCheck(store, load_table(settings.price_table_path), workspace_budgets(settings.run_budgets))
    return {"observer": observer, "usage_check": check}
