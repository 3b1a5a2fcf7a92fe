"""The price table: model usage to US dollars.

A JSON file the operator can edit (``Settings.price_table_path``; empty: the shipped
``prices.json``)::

    {"models": {"<model key>": {"input": 2.5, "cached_input": 1.25, "output": 10.0}}}

Prices are USD per million tokens. A usage key ``provider:model`` (as nodes report it,
e.g. ``openai:gpt-4o``, ``dryrun:gpt-4o-mini``) takes the first entry found among
``provider:model``, ``provider:*`` and ``model`` (so ``dryrun:*`` prices every dry-run
model, and ``gpt-4o`` any provider's gpt-4o); none: the usage is *unpriced* (its cost is
unknown, never 0). Cost of one key's numbers::

    (input_tokens - cached_tokens) * input + cached_tokens * cached_input (default: input)
    + output_tokens * output                                        (all / 1,000,000)

Reasoning tokens are part of ``output_tokens`` as providers count them. A file that
cannot be read, or an entry that is not numbers, is a ``ConfigurationError`` naming the
file and the entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestrator.kernel.errors import ConfigurationError

SHIPPED = Path(__file__).with_name("prices.json")
PRICE_FIELDS = ("input", "cached_input", "output")
PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class Price:
    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None

    def cost(self, numbers: dict[str, float]) -> float:
        inp = float(numbers.get("input_tokens", 0))
        cached = min(float(numbers.get("cached_tokens", 0)), inp)
        cached_price = self.input if self.cached_input is None else self.cached_input
        out = float(numbers.get("output_tokens", 0))
        return ((inp - cached) * self.input + cached * cached_price + out * self.output) / PER_TOKENS


@dataclass(frozen=True)
class PriceTable:
    prices: dict[str, Price]
    source: str = ""

    def price_of(self, key: str) -> Price | None:
        provider, sep, model = key.partition(":")
        candidates = [key, f"{provider}:*", model] if sep else [key]
        return next((self.prices[c] for c in candidates if c in self.prices), None)

    def cost(self, key: str, numbers: dict[str, float]) -> float | None:
        """USD for ``numbers`` under usage key ``key``; None when it has no price."""
        price = self.price_of(key)
        return None if price is None else price.cost(numbers)


def _price(source: str, key: str, raw: Any) -> Price:
    if not isinstance(raw, dict) or set(raw) - set(PRICE_FIELDS):
        raise ConfigurationError(f"price table {source}: entry {key!r} must be an object with only "
                                 f"{', '.join(PRICE_FIELDS)} (USD per million tokens)")
    values: dict[str, float] = {}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigurationError(f"price table {source}: {key!r}.{name} must be a number >= 0, not {value!r}")
        values[name] = float(value)
    return Price(input=values.get("input", 0.0), output=values.get("output", 0.0),
                 cached_input=values.get("cached_input"))


def parse_table(raw: Any, source: str) -> PriceTable:
    models = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(models, dict):
        raise ConfigurationError(f"price table {source}: must be a JSON object with a \"models\" object")
    return PriceTable({str(k): _price(source, str(k), v) for k, v in models.items()}, source)


@lru_cache(maxsize=4)
def load_table(path: str = "") -> PriceTable:
    """The price table at ``path`` (empty: the shipped one); read once per process."""
    file = Path(path).expanduser() if path else SHIPPED
    try:
        raw = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"price table {file}: cannot read JSON ({exc}); "
                                 "set ORCH_PRICE_TABLE_PATH to a readable file") from None
    return parse_table(raw, str(file))
