"""Observability: trace content, the console's trace link, the price table, run budgets.

Read by ``orchestrator/telemetry/`` (docs/observability.md). Traces themselves are on when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set: the OpenTelemetry
variables are read by the SDK, not here.
"""

from __future__ import annotations

from orchestrator.settings.base import SettingsGroup


class TelemetrySettings(SettingsGroup):
    # Prompt and completion text (tool arguments, answers) in span attributes: off unless set.
    trace_content: bool = False
    # The console links a run's trace id with this template ("{trace_id}" is replaced),
    # e.g. "http://localhost:16686/trace/{trace_id}" for Jaeger; empty: no link.
    trace_link_template: str = ""
    # The price table (JSON, USD per million tokens by model id); empty: the shipped one.
    price_table_path: str = ""
    # Workspace default run budgets, a JSON object: {"<workspace>" | "*": {"max_tokens": N,
    # "max_cost_usd": X}}; a graph's settings.budget overrides them per field.
    run_budgets: str = ""
