"""Commands a graph may start (stdio MCP servers): the operator's allow-list + confinement.

A graph names a command line; the operator decides which programs may run
(``ORCH_MCP_STDIO_COMMANDS``, comma-separated; empty = none). :func:`confined_command`
checks the program against that list and returns the argv that starts it inside the
same bubblewrap boundary as the Code node (``sandbox_bwrap.confine``: own user, mount,
PID, IPC and network namespaces, uid 65534, read-only ``/usr`` and Python prefixes,
tmpfs ``/tmp``, death with the worker), with only the environment the node names
(plus a fixed ``PATH`` and ``HOME=/tmp``). Network is off unless
``ORCH_MCP_STDIO_NETWORK`` is set. No seccomp program here: a server may legitimately
start helper processes (``npx``, ``uvx``), so fork and exec stay allowed inside.

``ORCH_MCP_STDIO_CONFINE=false`` runs allowed commands unconfined (for trusted servers
that need the host); the allow-list and the environment rule still apply.

Read-only binds besides ``/usr``: the Python prefixes (the venv too, so a Python server's
dependencies import), the program's folder when it lives outside ``/usr``, and every
argument that names an existing file or folder (made absolute, so it resolves inside).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass

from nodes._shared.sandbox_bwrap import Confinement, confine, unavailable
from orchestrator.settings import Settings, get_settings

PATH = "/usr/local/bin:/usr/bin:/bin"


class CommandRefused(ValueError):
    """The command may not run; the message names the setting that governs it."""


@dataclass(frozen=True)
class ConfinedCommand:
    program: str
    args: list[str]
    env: dict[str, str]  # the environment of bubblewrap itself (the server's is inside)


def _which(program: str) -> str | None:
    found = shutil.which(program, path=os.environ.get("PATH", PATH))
    return os.path.abspath(found) if found else None


def _resolve(program: str) -> str | None:
    found = _which(program)
    return os.path.realpath(found) if found else None


def allowed(program: str, settings: Settings) -> bool:
    """``program`` is on the allow-list, by exact text or by the file it resolves to."""
    entries = [e.strip() for e in settings.mcp_stdio_commands.split(",") if e.strip()]
    target = _resolve(program)
    for entry in entries:
        if program == entry or (target is not None and target == _resolve(entry)):
            return True
    return False


def confined_command(command: str, env: dict[str, str],
                     settings: Settings | None = None) -> ConfinedCommand:
    """The argv (bubblewrap first) that runs ``command`` confined; raises CommandRefused."""
    settings = settings or get_settings()
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CommandRefused(f"the command cannot be parsed: {exc}") from exc
    if not argv:
        raise CommandRefused("the command is empty")
    if not settings.mcp_stdio_commands.strip():
        raise CommandRefused("stdio MCP servers are disabled: the operator allows no command "
                             "(setting ORCH_MCP_STDIO_COMMANDS)")
    if not allowed(argv[0], settings):
        raise CommandRefused(f"command {argv[0]!r} is not on the operator's allow-list "
                             "(setting ORCH_MCP_STDIO_COMMANDS)")
    program = _which(argv[0])  # not symlink-resolved: a venv's python must stay a venv's
    if program is None:
        raise CommandRefused(f"command {argv[0]!r} is not found")
    inner_env = {"PATH": PATH, "HOME": "/tmp", **env}  # noqa: S108 -- the sandbox's own tmpfs
    if not settings.mcp_stdio_confine:
        return ConfinedCommand(program, argv[1:], inner_env)
    missing = unavailable()
    if missing is not None:
        if not settings.sandbox_allow_weak:
            raise CommandRefused(f"the OS-level sandbox for stdio MCP servers cannot be set up: "
                                 f"{missing}; install it, or set ORCH_SANDBOX_ALLOW_WEAK=true "
                                 "to run allowed commands unconfined")
        return ConfinedCommand(program, argv[1:], inner_env)
    binds: list[str] = [os.path.realpath(sys.prefix)]
    for path in (program, os.path.realpath(program)):
        if not path.startswith("/usr/"):
            binds.append(os.path.dirname(path))
    args: list[str] = []
    for arg in argv[1:]:
        if not arg.startswith("-") and os.path.exists(arg):
            arg = os.path.realpath(arg)
            binds.append(arg)
        args.append(arg)
    how = Confinement(network=settings.mcp_stdio_network, ro_paths=tuple(dict.fromkeys(binds)),
                      env=inner_env, scratch_mb=settings.sandbox_scratch_mb)
    full = confine([program, *args], how)
    return ConfinedCommand(full[0], full[1:], {"PATH": PATH})
