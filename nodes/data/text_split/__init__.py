"""The Text Split node: definition.json + executor.py."""
