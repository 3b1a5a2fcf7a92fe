"""The Toolset node: definition.json + executor.py."""
