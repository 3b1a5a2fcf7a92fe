"""The Loop Input node: definition.json + executor.py."""
