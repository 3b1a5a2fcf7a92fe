"""The http_request node: definition.json + executor.py."""
