"""Commands a graph may start (stdio MCP servers): the operator's allow-list + confinement.

A graph names a command line; the operator decides which programs may run
(``ORCH_MCP_STDIO_COMMANDS``, comma-separated; empty = none). :func:`confined_command`
checks the program against that list and returns the argv that starts it inside the
same bubblewrap boundary as the Code node (``bwrap.confine``: own mount, PID, IPC
and network namespaces, a user namespace when the worker is not root, uid 65534,
read-only ``/usr`` and Python prefixes, tmpfs ``/tmp`` and ``/dev/shm`` of
``ORCH_SANDBOX_SCRATCH_MB`` each, death with the worker), with only
the environment the node names (plus a fixed ``PATH`` and ``HOME=/tmp``). Network is off
unless ``ORCH_MCP_STDIO_NETWORK`` is set. Inside the boundary:

- the seccomp program of ``seccomp.command_bpf``, installed by bubblewrap before
  the first instruction of the command: process creation and ``execve`` keep working
  (servers start helpers: ``npx``, ``uvx``), the interfaces that cross the boundary do not;
- resource limits for every process of the server (``prlimit`` in the exec chain, after
  the uid switch and before the server): address space ``ORCH_MCP_STDIO_MEMORY_MB``, CPU
  ``ORCH_MCP_STDIO_CPU_S``, file size ``ORCH_MCP_STDIO_FILE_MB``, descriptors
  ``ORCH_MCP_STDIO_OPEN_FILES``, processes and threads ``ORCH_MCP_STDIO_PROCESSES``, core
  files 0 (limits are inherited by helpers; see docs/security.md for what NPROC counts).

How the seccomp program reaches bubblewrap: the MCP SDK spawns the argv with
``anyio.open_process`` and no ``pass_fds``, so every descriptor but stdin, stdout and
stderr is closed in the child and a memfd cannot be inherited. The argv therefore starts
with ``/bin/sh -c 'exec "$@" 3<"$0"'``: the shell opens the program through the path of
a sealed memfd the worker keeps (``seccomp.program_path``) on descriptor 3 and
becomes bubblewrap (same pid: the SDK's process-group kill and ``--die-with-parent``
still apply), which reads it with ``--seccomp 3``. That costs one ``sh`` exec; a Python
launcher that installs the filter itself costs an interpreter start (docs/security.md).

``ORCH_MCP_STDIO_CONFINE=false`` runs allowed commands unconfined (for trusted servers
that need the host); the allow-list and the environment rule still apply.

Read-only binds besides ``/usr``: the Python prefixes (the venv too, so a Python server's
dependencies import), the program's folder when it lives outside ``/usr``, and an
argument that names a file or folder under a root the operator listed
(``ORCH_MCP_STDIO_ARG_ROOTS``; none by default) that holds nothing protected and that any
user may read (made absolute, so it resolves inside; ``binds`` has the rules). Every
other argument is passed on as text.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass

from orchestrator.host.sandbox.binds import ArgumentRoots, argument_binds, known_sockets
from orchestrator.host.sandbox.bwrap import Confinement, confine, prefixes, unavailable
from orchestrator.host.sandbox.seccomp import SeccompUnavailable, command_bpf, program_path
from orchestrator.settings import SandboxSettings, Settings

PATH = "/usr/local/bin:/usr/bin:/bin"
SHELL = "/bin/sh"
SECCOMP_FD = 3
OPEN_SECCOMP = f'exec "$@" {SECCOMP_FD}<"$0"'  # $0: the program's path; "$@": bubblewrap's argv


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


def limits(settings: Settings) -> list[str]:
    """The ``prlimit`` command line that sets the server's limits and execs what follows."""
    prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
    mib = 1024 * 1024
    return [prlimit, f"--as={settings.mcp_stdio_memory_mb * mib}",
            f"--cpu={settings.mcp_stdio_cpu_s}", f"--fsize={settings.mcp_stdio_file_mb * mib}",
            f"--nofile={settings.mcp_stdio_open_files}", f"--nproc={settings.mcp_stdio_processes}",
            "--core=0", "--"]


def missing_boundary(settings: SandboxSettings) -> str | None:
    """Why commands cannot be confined on this machine with ``settings``, or ``None``."""
    missing = unavailable(settings)
    if missing is None and shutil.which("prlimit") is None:
        missing = "prlimit (util-linux) is not installed; it sets a server's resource limits"
    if missing is None and not os.access(SHELL, os.X_OK):
        missing = f"{SHELL} is missing; it hands the seccomp program to bubblewrap"
    if missing is None:
        try:
            command_bpf()
        except SeccompUnavailable as exc:
            missing = str(exc)
    return missing


def confined_command(command: str, env: dict[str, str], settings: Settings) -> ConfinedCommand:
    """The argv (``sh`` then bubblewrap) that runs ``command`` confined; raises CommandRefused.
    ``settings``: the host's (a node passes ``node_host(ctx).settings``)."""
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
    missing = missing_boundary(settings)
    if missing is not None:
        if not settings.sandbox_allow_weak:
            raise CommandRefused(f"the OS-level sandbox for stdio MCP servers cannot be set up: "
                                 f"{missing}; install it, or set ORCH_SANDBOX_ALLOW_WEAK=true "
                                 "to run allowed commands unconfined")
        return ConfinedCommand(program, argv[1:], inner_env)
    try:
        args, binds, covered = argument_binds(argv[1:], ArgumentRoots.from_settings(settings))
    except ValueError as exc:
        raise CommandRefused(str(exc)) from exc
    binds.insert(0, os.path.realpath(sys.prefix))
    for path in (program, os.path.realpath(program)):
        if not path.startswith("/usr/"):
            binds.append(os.path.dirname(path))
    covered += known_sockets([*binds, *prefixes(), "/usr"], settings.redis_url)
    # /tmp and /dev/shm (Chromium-based servers need it): tmpfs pages are memory outside
    # RLIMIT_AS, so each is sized within one process's memory budget.
    tmpfs_mb = min(settings.sandbox_scratch_mb, settings.mcp_stdio_memory_mb)
    how = Confinement(network=settings.mcp_stdio_network, ro_paths=tuple(dict.fromkeys(binds)),
                      env=inner_env, scratch_mb=tmpfs_mb, shm_mb=tmpfs_mb,
                      seccomp_fd=SECCOMP_FD, covered=tuple(dict.fromkeys(covered)))
    full = confine([*limits(settings), program, *args], how, settings)
    return ConfinedCommand(SHELL, ["-c", OPEN_SECCOMP, program_path(command_bpf()), *full],
                           {"PATH": PATH})
