"""Telemetry: Prometheus metrics (``metrics.py``) and a worker's metrics endpoint
(``metrics_server.py``)."""
