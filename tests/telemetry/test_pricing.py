"""The price table: lookups, the cost formula, and errors that name the file and entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.kernel.errors import ConfigurationError
from orchestrator.telemetry.pricing import SHIPPED, load_table, parse_table

TABLE = parse_table({"models": {
    "gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0},
    "openai:gpt-4o": {"input": 3.0, "output": 12.0},
    "dryrun:*": {"input": 1.0, "output": 2.0},
}}, "test")


def test_the_exact_provider_and_model_wins_then_the_provider_wildcard_then_the_bare_model() -> None:
    assert TABLE.cost("openai:gpt-4o", {"input_tokens": 1_000_000}) == 3.0
    assert TABLE.cost("dryrun:gpt-4o", {"input_tokens": 1_000_000}) == 1.0
    assert TABLE.cost("azure:gpt-4o", {"input_tokens": 1_000_000}) == 2.5


def test_cached_input_tokens_are_priced_apart_and_output_at_its_own_price() -> None:
    cost = TABLE.cost("azure:gpt-4o", {"input_tokens": 1000, "cached_tokens": 400, "output_tokens": 100})
    assert cost == pytest.approx((600 * 2.5 + 400 * 1.25 + 100 * 10.0) / 1e6)


def test_a_model_with_no_price_has_no_cost_rather_than_zero() -> None:
    assert TABLE.cost("acme:unknown", {"input_tokens": 10}) is None


def test_the_shipped_table_loads_and_prices_dry_run_models() -> None:
    table = load_table()
    assert table.source == str(SHIPPED)
    assert table.cost("dryrun:anything", {"input_tokens": 1_000_000, "output_tokens": 1_000_000}) == 3.0


def test_a_malformed_entry_is_an_error_naming_the_file_and_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text(json.dumps({"models": {"m1": {"input": "cheap"}}}))
    with pytest.raises(ConfigurationError, match=r"prices.json: 'm1'.input must be a number"):
        load_table(str(bad))
    with pytest.raises(ConfigurationError, match="only input, cached_input, output"):
        parse_table({"models": {"m2": {"inptu": 1}}}, "x")


def test_an_unreadable_file_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ORCH_PRICE_TABLE_PATH"):
        load_table(str(tmp_path / "missing.json"))
