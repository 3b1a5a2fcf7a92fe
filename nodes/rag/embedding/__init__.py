"""The embedding node: definition.json + executor.py."""
