"""The Loop node: definition.json + executor.py."""
