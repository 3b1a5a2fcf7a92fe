"""Prometheus counters of model usage and cost (in the registry of ``metrics.py``).

==================================  =======  ======================================
metric                              type     labels
==================================  =======  ======================================
orchestrator_model_tokens_total     counter  model, graph, workspace, kind (input,
                                             output, cached, reasoning)
orchestrator_model_cost_usd_total   counter  model, graph, workspace (priced usage only)
orchestrator_model_calls_total      counter  model, graph, workspace
==================================  =======  ======================================

Counted by the worker that ran the node, when its completion was applied.
"""

from __future__ import annotations

from prometheus_client import Counter

from .metrics import REGISTRY
from .pricing import PriceTable

LABELS = ["model", "graph", "workspace"]
KINDS = {"input_tokens": "input", "output_tokens": "output", "cached_tokens": "cached",
         "reasoning_tokens": "reasoning"}

MODEL_TOKENS = Counter("orchestrator_model_tokens", "Model tokens used, by model, graph, workspace and kind.",
                       [*LABELS, "kind"], registry=REGISTRY)
MODEL_COST = Counter("orchestrator_model_cost_usd", "Model cost in USD (price table), by model, graph, workspace.",
                     LABELS, registry=REGISTRY)
MODEL_CALLS = Counter("orchestrator_model_calls", "Model requests, by model, graph and workspace.",
                      LABELS, registry=REGISTRY)


def record(usage: dict[str, dict[str, float]], *, graph: str, workspace: str, prices: PriceTable) -> None:
    """Count one node execution's reported usage."""
    for model, numbers in usage.items():
        for name, kind in KINDS.items():
            if numbers.get(name):
                MODEL_TOKENS.labels(model=model, graph=graph, workspace=workspace, kind=kind).inc(numbers[name])
        if numbers.get("calls"):
            MODEL_CALLS.labels(model=model, graph=graph, workspace=workspace).inc(numbers["calls"])
        cost = prices.cost(model, numbers)
        if cost:
            MODEL_COST.labels(model=model, graph=graph, workspace=workspace).inc(cost)
