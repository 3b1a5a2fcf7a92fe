"""The Python client of the HTTP API (``from orchestrator.client import Client``): start a
run, follow its events over SSE (resuming with ``Last-Event-ID``), read its outputs."""

from orchestrator.client.http import ApiError, Client, ServerBusyError, parse_frames

__all__ = ["ApiError", "Client", "ServerBusyError", "parse_frames"]
