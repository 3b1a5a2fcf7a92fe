"""The MCP Server node: definition.json + executor.py."""
