"""The ``orchestrator`` command. Each sub-command lives in its own module
``orchestrator/cli/<name>_cmd.py`` exposing ``add_parser(subparsers)``; the parser sets
``func(args) -> int``. A module listed in :data:`SUBCOMMANDS` that is not installed is
skipped, so adding a command is one module plus one name here.

Conventions every sub-command keeps: each flag has help text; connection flags
(``--api-url``/``--api-key``) are accepted before or after the action; data goes to
stdout (JSON where it is structured), progress and errors to stderr. A closed stdout
(``orchestrator graphs get X | head``) ends the command quietly with code 141.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib import metadata

from pydantic import ValidationError

from orchestrator.kernel.errors import ConfigurationError

from ._remote import share_connection_args

SUBCOMMANDS = (  # sweeper_cmd also adds "beat"
    "run", "worker", "serve", "graphs", "runs", "nodes", "sweeper", "credentials",
)
DISTRIBUTION = "agentflow-orchestrator"
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left
CONFIG_ERROR_EXIT = 2  # a setting that cannot be used, as for other bad input


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orchestrator", description="Run agent workflow graphs.",
        epilog="Run `orchestrator COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {version()} ({DISTRIBUTION})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"orchestrator.cli.{name}_cmd")
        except ModuleNotFoundError as exc:
            if exc.name == f"orchestrator.cli.{name}_cmd":
                continue  # sub-command not installed in this build
            raise
        module.add_parser(sub)
    for command in sub.choices.values():
        share_connection_args(command)
    return parser


def setting_errors(exc: ValidationError) -> list[str]:
    """One line per malformed setting: its environment variable and what is wrong with it
    (pydantic's words name the value, except for fields that may hold a secret)."""
    from orchestrator.settings import Settings

    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        field = str(error["loc"][0]) if error["loc"] else ""
        info = Settings.model_fields.get(field)
        alias = getattr(info.validation_alias, "choices", None) if info is not None else None
        # pydantic names a field read through an alias by that alias (REDIS_URL)
        name = str(alias[0]) if alias else field if field.isupper() else f"ORCH_{field.upper()}"
        lines.append(f"setting {name}: {str(error['msg']).removeprefix('Value error, ')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # the parser reads settings for its defaults
        code: int = args.func(args)
        sys.stdout.flush()
    except ConfigurationError as exc:  # a setting that cannot be used: its own words, one line
        print(f"error: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    except ValidationError as exc:  # a malformed setting (environment): a line each, naming it
        if not exc.title.endswith("Settings"):
            raise
        for line in setting_errors(exc):
            print(f"error: {line}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly. Point stdout at /dev/null so the
        # interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    return code


if __name__ == "__main__":
    sys.exit(main())
