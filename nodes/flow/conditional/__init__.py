"""The Conditional node: definition.json + executor.py."""
