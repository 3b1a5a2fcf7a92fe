"""The JSON Transform node: definition.json + executor.py."""
