"""``orchestrator graphs list|get|create|update|delete|export|import``.

``export ID FILE`` and ``import FILE`` move graphs between a running API and JSON files;
``export --offline SRC FILE`` / ``import --check`` work on files only (``--check``
validates a file against the local node registry and exits 1 naming the fault).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from orchestrator.kernel.errors import OrchestratorError

from ._remote import add_action, add_connection_args, client, emit, fail


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("graphs", help="manage stored graphs through the API",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_args(p)
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = add_action(sub, "list", "list stored graphs (JSON)")
    ls.add_argument("--offset", type=int, default=0, help="skip this many graphs (default 0)")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    get = add_action(sub, "get", "print a stored graph as JSON")
    get.add_argument("graph_id", help="the graph's id")
    get.add_argument("--version", type=int, default=None,
                     help="that saved version (default: the latest)")
    create = add_action(sub, "create", "create a graph from a JSON file")
    create.add_argument("file", type=Path, help="graph JSON file")
    update = add_action(sub, "update", "save a JSON file as the next version of a graph")
    update.add_argument("graph_id", help="the graph's id")
    update.add_argument("file", type=Path, help="graph JSON file")
    delete = add_action(sub, "delete", "delete a graph and its versions")
    delete.add_argument("graph_id", help="the graph's id")
    export = add_action(sub, "export", "write a stored graph to a JSON file")
    export.add_argument("graph_id", help="the graph's id")
    export.add_argument("file", type=Path, help="where to write the graph")
    export.add_argument("--version", type=int, default=None,
                        help="that saved version (default: the latest)")
    imp = add_action(sub, "import", "create (or update, if it exists) a graph from a file")
    imp.add_argument("file", type=Path, help="graph JSON file")
    imp.add_argument(
        "--check",
        action="store_true",
        help="only validate the file against the local node registry (offline)",
    )
    p.set_defaults(func=graphs_command)


def read_graph(path: Path) -> dict[str, Any]:
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a graph file holds one JSON object")
    return raw


def graphs_command(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BrokenPipeError:
        raise  # stdout closed (`| head`): main() ends quietly
    except (OrchestratorError, OSError, ValueError) as exc:
        return fail(str(exc))


def _run(args: argparse.Namespace) -> int:
    if args.action == "import" and args.check:
        from orchestrator.service.graph_store import validate
        from orchestrator.service.plugins import get_registry
        from orchestrator.settings import load_settings

        settings = load_settings()
        graph = validate(read_graph(args.file), get_registry(settings), settings)
        print(f"{args.file}: valid graph {graph['id']!r} with {len(graph['nodes'])} nodes")
        return 0
    with client(args) as api:
        if args.action == "list":
            emit(api.list_graphs(args.offset, args.limit))
        elif args.action == "get":
            emit(api.get_graph(args.graph_id, args.version))
        elif args.action == "create":
            saved = api.create_graph(read_graph(args.file))
            print(f"created graph {saved['id']} version {saved['version']}")
        elif args.action == "update":
            saved = api.update_graph(args.graph_id, read_graph(args.file))
            print(f"updated graph {saved['id']} to version {saved['version']}")
        elif args.action == "delete":
            api.delete_graph(args.graph_id)
            print(f"deleted graph {args.graph_id}")
        elif args.action == "export":
            graph = api.get_graph(args.graph_id, args.version)
            args.file.write_text(json.dumps(graph, indent=2) + "\n")
            print(f"wrote graph {graph['id']} version {graph['version']} to {args.file}")
        elif args.action == "import":
            raw = read_graph(args.file)
            saved = _create_or_update(api, raw)
            print(f"imported graph {saved['id']} as version {saved['version']}")
    return 0


def _create_or_update(api: Any, raw: dict[str, Any]) -> dict[str, Any]:
    from orchestrator.client import ApiError

    try:
        result: dict[str, Any] = api.create_graph(raw)
        return result
    except ApiError as exc:
        if exc.status == 409 and raw.get("id"):
            updated: dict[str, Any] = api.update_graph(str(raw["id"]), raw)
            return updated
        raise
