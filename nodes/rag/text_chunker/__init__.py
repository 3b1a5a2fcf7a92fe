"""The text_chunker node: definition.json + executor.py."""
