"""The OS-level boundary: a bubblewrap command line that confines one program.

:func:`confine` turns ``[program, *args]`` into ``[bwrap, ..., program, *args]``:

- new user (when the worker is not root), mount, PID, IPC, UTS, cgroup and network
  namespaces (the network one is skipped only when ``Confinement.network`` is set);
- a root filesystem that holds only read-only binds of ``/usr`` (plus the ``/lib*``
  symlinks), the interpreter's real prefix (``sys.base_prefix``, not a venv) and
  ``Confinement.ro_paths`` (minus ``Confinement.covered``, hidden behind ``/dev/null``);
  a fresh ``/proc`` of its own PID namespace, a minimal ``/dev``
  and a size-limited tmpfs at ``/tmp`` (the scratch folder), plus, when
  ``Confinement.shm_mb`` is set, a size-limited tmpfs at ``/dev/shm``: the only writable
  places. bubblewrap's own tmpfs (the root that holds the mount points, and ``/dev``) have
  no size limit and, in a user namespace, belong to the sandbox's uid; both are remounted
  read-only, so no write reaches memory outside the sizes given (bubblewrap 0.8's
  ``--remount-ro`` does not recurse: the mounts on them stay as they are);
- an unprivileged uid/gid 65534 (``nobody``) with no capabilities and ``no_new_privs``.
  When the worker is not root the sandbox runs in a user namespace as the worker's own
  uid on the host. When the worker is root, bubblewrap runs without a user namespace (as
  root it needs none) and execs the program through ``setpriv``, which switches to the
  host's uid/gid 65534 and clears every capability set: the program is *not* root on the
  host, not even a root without capabilities;
- ``--die-with-parent`` and ``--new-session``: the sandbox dies with the process that
  started it (the worker), and cannot push input into the worker's terminal;
- an empty environment plus ``Confinement.env``; optionally a seccomp program (``--seccomp``).

:func:`unavailable` says why the boundary cannot be set up here (``None`` when it can).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from orchestrator.settings import SandboxSettings

NOBODY = 65534
SCRATCH = "/tmp"  # noqa: S108 -- a path inside the sandbox: its own tmpfs
SHM = "/dev/shm"  # noqa: S108 -- a path inside the sandbox: its own tmpfs, or read-only
MIB = 1024 * 1024


@dataclass(frozen=True)
class Confinement:
    """What the confined program may see; defaults are the strictest."""

    network: bool = False
    ro_paths: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    scratch_mb: int = 64
    shm_mb: int = 0  # a writable /dev/shm of this size; 0 = read-only /dev/shm, holding nothing
    seccomp_fd: int | None = None
    chdir: str = SCRATCH
    covered: tuple[str, ...] = ()  # paths inside ro_paths hidden behind /dev/null (sockets)


def bwrap_path(settings: SandboxSettings) -> str | None:
    """The bubblewrap binary ``ORCH_SANDBOX_BWRAP_PATH`` names, found on PATH, or None."""
    return shutil.which(settings.sandbox_bwrap_path)


def interpreter() -> str:
    """The worker's Python interpreter, symlinks resolved (a venv's python is a symlink)."""
    return os.path.realpath(sys.executable)


def prefixes() -> tuple[str, ...]:
    seen: list[str] = []
    for raw in (sys.base_prefix, sys.base_exec_prefix,
                os.path.dirname(os.path.dirname(interpreter()))):
        path = os.path.realpath(raw)
        if path not in seen and not any(path.startswith(p + os.sep) for p in seen):
            seen.append(path)
    return tuple(seen)


def unavailable(settings: SandboxSettings) -> str | None:
    """Why :func:`confine` cannot work on this machine with ``settings``, or ``None``."""
    if bwrap_path(settings) is None:
        return (f"bubblewrap ('{settings.sandbox_bwrap_path}') is not installed "
                "(Debian: apt-get install bubblewrap)")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed; it drops root for the sandbox"
    return None


def _root_filesystem(extra: tuple[str, ...]) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("lib", "lib64", "lib32", "bin", "sbin"):
        target = os.path.join("/", name)
        if os.path.islink(target):
            args += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            args += ["--ro-bind", target, target]
    made: set[str] = {SCRATCH}  # mounted first (see confine): binds below it land on it
    made_binds: set[str] = set()  # a path inside one already bound needs no bind of its own
    for path in sorted(dict.fromkeys((*prefixes(), *extra)), key=lambda p: p.count("/")):
        if path.startswith("/usr/") or any(path.startswith(p + "/") for p in made_binds):
            continue
        made_binds.add(path)
        # Parents are created traversable (bubblewrap would copy a 0700 /root's mode).
        parent = os.path.dirname(path)
        chain: list[str] = []
        while parent not in ("/", "") and parent not in made:
            chain.insert(0, parent)
            parent = os.path.dirname(parent)
        for folder in chain:
            args += ["--perms", "0755", "--dir", folder]
            made.add(folder)
        args += ["--ro-bind", path, path]
    return args


def confine(argv: list[str], how: Confinement, settings: SandboxSettings) -> list[str]:
    """``argv`` wrapped in bubblewrap (the one ``settings`` name) with the confinement
    ``how`` (see the module doc)."""
    bwrap = bwrap_path(settings)
    if bwrap is None:
        raise RuntimeError(unavailable(settings) or "bubblewrap is not installed")
    root = os.geteuid() == 0
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]
    if not how.network:
        args.append("--unshare-net")
    if not root:
        args += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    args += ["--cap-drop", "ALL"] if not root else []
    # The scratch tmpfs first: a read-only bind of a path under /tmp (a checkout or venv
    # that lives there) is then mounted on top of it instead of being hidden by it.
    args += ["--perms", "1777", "--size", str(how.scratch_mb * MIB), "--tmpfs", SCRATCH]
    args += _root_filesystem(how.ro_paths)
    for path in how.covered:
        args += ["--ro-bind", "/dev/null", path]
    if how.network:
        args += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf",
                 "--ro-bind-try", "/etc/ssl", "/etc/ssl", "--ro-bind-try", "/etc/hosts", "/etc/hosts"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if how.shm_mb:
        args += ["--perms", "1777", "--size", str(how.shm_mb * MIB), "--tmpfs", SHM]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", how.chdir, "--clearenv"]
    for name, value in how.env.items():
        args += ["--setenv", name, value]
    if how.seccomp_fd is not None:
        args += ["--seccomp", str(how.seccomp_fd)]
    args.append("--")
    if root:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        args += [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
                 "--pdeathsig=KILL", "--"]
    return args + argv
