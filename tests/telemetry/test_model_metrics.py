"""The model counters: tokens by kind, calls and priced cost, by model, graph and workspace."""

from __future__ import annotations

from orchestrator.telemetry.metrics import REGISTRY
from orchestrator.telemetry.model_metrics import record
from orchestrator.telemetry.pricing import parse_table

PRICES = parse_table({"models": {"dryrun:*": {"input": 1.0, "output": 2.0}}}, "test")


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_one_execution_counts_its_tokens_calls_and_cost() -> None:
    where = {"graph": "g-metrics", "workspace": "w1"}
    record({"dryrun:m": {"input_tokens": 100, "output_tokens": 50, "calls": 2},
            "acme:x": {"input_tokens": 7}}, prices=PRICES, **where)
    assert value("orchestrator_model_tokens_total", model="dryrun:m", kind="input", **where) == 100
    assert value("orchestrator_model_tokens_total", model="dryrun:m", kind="output", **where) == 50
    assert value("orchestrator_model_calls_total", model="dryrun:m", **where) == 2
    assert value("orchestrator_model_cost_usd_total", model="dryrun:m", **where) == (100 + 100) / 1e6
    assert value("orchestrator_model_tokens_total", model="acme:x", kind="input", **where) == 7
    assert value("orchestrator_model_cost_usd_total", model="acme:x", **where) == 0  # no price, no cost
