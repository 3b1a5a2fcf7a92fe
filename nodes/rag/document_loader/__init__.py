"""The document_loader node: definition.json + executor.py."""
