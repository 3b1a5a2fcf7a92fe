"""The Code node: definition.json + executor.py."""
