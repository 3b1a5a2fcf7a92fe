"""Shared by the CLI commands that talk to a running API (``ORCH_API_URL``, ``ORCH_API_KEY``)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from orchestrator.client import Client

DEFAULT_URL = "http://127.0.0.1:8000"


def add_connection_args(parser: Any) -> None:
    parser.add_argument(
        "--api-url",
        default=os.environ.get("ORCH_API_URL", DEFAULT_URL),
        help="API base URL (default: ORCH_API_URL or %(default)s)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("ORCH_API_KEY"),
        help="bearer API key (default: ORCH_API_KEY)",
    )


def client(args: Any) -> Client:
    return Client(args.api_url, args.api_key)


def emit(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False, default=str))


def fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code
