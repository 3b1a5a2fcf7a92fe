"""The Chat Start node: definition.json + executor.py."""
