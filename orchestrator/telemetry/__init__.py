"""Observability beyond the event stream: traces (``tracing.py``), model usage and its
cost (``usage.py``, ``pricing.py``), run budgets (``budgets.py``) and the model
metrics (``model_metrics.py``). See docs/observability.md."""
