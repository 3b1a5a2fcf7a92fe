"""The Structured Output node: definition.json + executor.py."""
