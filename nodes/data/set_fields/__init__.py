"""The Set Fields node: definition.json + executor.py."""
