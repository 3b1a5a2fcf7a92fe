"""The LLM Completion node: definition.json + executor.py."""
