"""The Switch node: definition.json + executor.py."""
