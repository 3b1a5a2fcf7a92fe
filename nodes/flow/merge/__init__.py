"""The Merge node: definition.json + executor.py."""
