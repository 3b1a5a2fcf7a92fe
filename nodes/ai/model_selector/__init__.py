"""The Model Selector node: definition.json + executor.py."""
