"""The database_query node: definition.json + executor.py."""
