"""The vector_search node: definition.json + executor.py."""
