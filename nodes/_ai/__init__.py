"""Shared code for the agent and AI nodes (models, dry-run model, toolkits, runner)."""
