"""The vector_store node: definition.json + executor.py."""
