"""Trigger nodes: they start runs and receive the run input."""
