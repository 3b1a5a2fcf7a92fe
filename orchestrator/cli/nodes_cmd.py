"""``orchestrator nodes``: the node catalogue, from a running API or (``--local``) this
machine's node folders and packs."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.kernel.errors import OrchestratorError

from ._remote import add_connection_args, client, emit, fail


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("nodes", help="list the node types (catalogue)")
    add_connection_args(p)
    p.add_argument("--local", action="store_true", help="load node folders here, not via the API")
    p.add_argument("--json", action="store_true", help="print the full definitions as JSON")
    p.set_defaults(func=nodes_command)


def nodes_command(args: argparse.Namespace) -> int:
    try:
        if args.local:
            from orchestrator.service.plugins import get_registry
            from orchestrator.settings import load_settings

            nodes = [d.model_dump(mode="json") for d in get_registry(load_settings()).definitions()]
        else:
            with client(args) as api:
                nodes = api.nodes()["nodes"]
    except OrchestratorError as exc:
        return fail(str(exc))
    if args.json:
        emit(nodes)
        return 0
    width = max((len(n["id"]) for n in nodes), default=0)
    for n in sorted(nodes, key=lambda n: (n["category"], n["id"])):
        print(f"{n['id']:<{width}}  {n['category']:<12}  {n.get('description', '')}")
    return 0
