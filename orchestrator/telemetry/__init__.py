"""Telemetry: Prometheus metrics (``metrics.py``) and a worker's metrics endpoint
(``metrics_server.py``); traces (``tracing.py``), model usage and its cost (``usage.py``,
``pricing.py``), run budgets (``budgets.py``) and the model metrics (``model_metrics.py``).
See docs/observability.md."""
