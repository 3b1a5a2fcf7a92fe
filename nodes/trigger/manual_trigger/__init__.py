"""The Manual Trigger node: definition.json + executor.py."""
