"""The Type Converter node: definition.json + executor.py."""
