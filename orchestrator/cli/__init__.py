"""The ``orchestrator`` command. Each sub-command lives in its own module exposing
``add_parser(subparsers)``; the parser sets ``func(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ("run", "worker", "serve", "graphs", "runs", "nodes", "sweeper",
               "credentials")  # sweeper_cmd also adds "beat"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orchestrator", description="Run agent workflow graphs.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"orchestrator.cli.{name}_cmd")
        except ModuleNotFoundError as exc:
            if exc.name == f"orchestrator.cli.{name}_cmd":
                continue  # sub-command not installed in this build
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
