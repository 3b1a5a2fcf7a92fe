"""Shared by the CLI commands that talk to a running API (``ORCH_API_URL``, ``ORCH_API_KEY``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from orchestrator.cli.console import printable
from orchestrator.client import Client

DEFAULT_URL = "http://127.0.0.1:8000"


def add_connection_args(parser: Any, *, leaf: bool = False) -> None:
    """``--api-url`` and ``--api-key`` on a command group (``graphs``). :func:`main`'s parser
    adds them again (``leaf=True``) to each action of such a group, so ``graphs list
    --api-url U`` works as ``graphs --api-url U list`` does; a leaf's default is SUPPRESS,
    so it never overwrites the group's value."""
    url_default = os.environ.get("ORCH_API_URL", DEFAULT_URL)
    parser.add_argument(
        "--api-url",
        default=argparse.SUPPRESS if leaf else url_default,
        help=f"API base URL (default: ORCH_API_URL or {url_default})",
    )
    parser.add_argument(
        "--api-key",
        default=argparse.SUPPRESS if leaf else os.environ.get("ORCH_API_KEY"),
        help="bearer API key (default: ORCH_API_KEY)",
    )


def add_action(actions: Any, name: str, help: str) -> argparse.ArgumentParser:
    """One action of a command group (``graphs list``); its help is also its description."""
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help)
    return parser


def share_connection_args(group: argparse.ArgumentParser) -> None:
    """Give every action of ``group`` the group's connection flags (when it has them)."""
    if "--api-url" not in group._option_string_actions:
        return
    for action in group._actions:
        if isinstance(action, argparse._SubParsersAction):
            for leaf in action.choices.values():
                if "--api-url" not in leaf._option_string_actions:
                    add_connection_args(leaf, leaf=True)


def client(args: Any) -> Client:
    return Client(args.api_url, args.api_key)


def emit(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False, default=str))


def fail(message: str, code: int = 1) -> int:
    print(f"error: {printable(message)}", file=sys.stderr)  # an API error may quote graph text
    return code
