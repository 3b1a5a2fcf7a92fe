"""The Agent node: definition.json + executor.py."""
