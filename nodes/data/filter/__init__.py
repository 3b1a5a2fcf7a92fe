"""The Filter node: definition.json + executor.py."""
