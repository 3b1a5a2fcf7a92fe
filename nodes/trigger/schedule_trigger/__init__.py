"""The Schedule Trigger node: definition.json + executor.py."""
