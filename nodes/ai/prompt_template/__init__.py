"""The Prompt Template node: definition.json + executor.py."""
