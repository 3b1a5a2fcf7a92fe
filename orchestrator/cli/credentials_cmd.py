"""``orchestrator credentials keygen|set|origins|list|get|delete|rotate``.

``set``, ``origins``, ``list``, ``get`` and ``delete`` talk to a running API
(``ORCH_API_URL``, ``ORCH_API_KEY``); no command ever prints a secret value. ``set NAME
--type T --value key=value ... --origin https://api.example.com`` stores a credential;
``--value key=-`` reads that value from standard input (keeps it out of the shell
history); ``--origin`` (repeat) names where nodes may send it. ``origins NAME ORIGIN...``
replaces the origins of a stored credential. ``keygen`` prints a new Fernet key for
``ORCH_CREDENTIALS_KEY``. ``rotate`` (run where ``REDIS_URL`` and the keys are set)
re-encrypts every stored credential with the first key of ``ORCH_CREDENTIALS_KEY``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from orchestrator.host.credentials import TYPES, generate_key
from orchestrator.kernel.errors import OrchestratorError
from orchestrator.store import redis_client

from ._remote import add_connection_args, client, emit, fail


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("credentials", help="manage named secrets that graphs reference",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_args(p)
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("keygen", help="print a new encryption key for ORCH_CREDENTIALS_KEY")
    put = sub.add_parser("set", help="store (or replace) a credential")
    put.add_argument("name", help="the credential's name, as graphs reference it")
    put.add_argument("--type", required=True, choices=sorted(TYPES), help="what kind of secret it holds")
    put.add_argument("--value", action="append", default=[], metavar="KEY=VALUE",
                     help="one value (repeat); VALUE '-' reads it from standard input")
    put.add_argument("--origin", action="append", default=[], metavar="ORIGIN",
                     help="scheme://host[:port] nodes may send it to (repeat; host may start with '*.')")
    origins = sub.add_parser("origins", help="replace where nodes may send a stored credential")
    origins.add_argument("name", help="the credential's name")
    origins.add_argument("origin", nargs="*", help="scheme://host[:port] (host may start with '*.'); none = nowhere")
    sub.add_parser("list", help="list credentials (names, types; never values)")
    get = sub.add_parser("get", help="describe one credential (never its secret values)")
    get.add_argument("name", help="the credential's name")
    delete = sub.add_parser("delete", help="delete a credential")
    delete.add_argument("name", help="the credential's name")
    sub.add_parser("rotate", help="re-encrypt every credential with the first key (needs REDIS_URL)")
    p.set_defaults(func=credentials_command)


def parse_values(items: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--value {item!r}: expected KEY=VALUE")
        values[key] = sys.stdin.readline().rstrip("\n") if value == "-" else value
    return values


async def _rotate() -> int:

    from orchestrator.host.credentials import CredentialStore
    from orchestrator.settings import get_settings

    settings = get_settings()
    if not settings.redis_url:
        raise ValueError("rotate needs REDIS_URL (the Redis that holds the credentials)")
    redis = redis_client.client(settings.redis_url, decode_responses=True)
    try:
        return await CredentialStore(redis, settings).rotate()
    finally:
        await redis.aclose()


def credentials_command(args: argparse.Namespace) -> int:
    try:
        if args.action == "keygen":
            print(generate_key())
            return 0
        if args.action == "rotate":
            print(f"re-encrypted {asyncio.run(_rotate())} credentials with the first key")
            return 0
        with client(args) as api:
            if args.action == "set":
                body = {"name": args.name, "type": args.type, "values": parse_values(args.value),
                        "origins": args.origin}
                emit(api._request("POST", "/credentials", json=body))
            elif args.action == "origins":
                emit(api._request("PATCH", f"/credentials/{args.name}", json={"origins": args.origin}))
            elif args.action == "list":
                emit(api._request("GET", "/credentials"))
            elif args.action == "get":
                emit(api._request("GET", f"/credentials/{args.name}"))
            elif args.action == "delete":
                api._request("DELETE", f"/credentials/{args.name}")
                print(f"deleted credential {args.name}")
        return 0
    except (OrchestratorError, OSError, ValueError) as exc:
        return fail(str(exc))
