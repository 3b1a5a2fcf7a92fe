"""What a confined command sees of the host: read-only binds, minus the unix sockets in them.

A read-only bind does not stop ``connect()`` to a unix socket beneath it: connecting
needs write permission on the socket's inode, which a read-only mount does not take away
(checked with bubblewrap on this project's development kernel). A socket whose mode lets
the sandbox's uid in (``o+w``; with a non-root worker, a socket of the worker's own uid
or one of its groups, which an unprivileged user namespace cannot drop) would be a way
out: the Docker socket is root on the host, the embedded Redis socket is every run's
state. So a socket is never visible inside:

- :func:`argument_binds`: a graph names the command's arguments, and an argument that
  names an existing path is bound read-only so that it resolves inside. Paths under
  ``/proc``, ``/sys``, ``/dev`` and ``/run`` (``/var/run``) and sockets themselves are
  refused; a folder is walked (symbolic links are not followed) and every socket in it
  is covered by a read-only bind of ``/dev/null`` (``connect`` then fails with
  ECONNREFUSED); a folder of more than :data:`MAX_SCANNED_ENTRIES` entries is refused
  rather than bound unchecked.
- :func:`known_sockets`: the Redis socket of ``REDIS_URL`` and Docker's are covered
  wherever they fall inside any bind, the operator's (the venv, the program's folder)
  included, which are not walked.

What remains: a socket created in a bound folder after the command started is visible
(the bind is live), and binds the operator chooses are trusted apart from the known
sockets.
"""

from __future__ import annotations

import os
import stat
from urllib.parse import urlsplit

MAX_SCANNED_ENTRIES = 10_000
NEVER_BOUND = ("/proc", "/sys", "/dev", "/run")
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _sockets_in(folder: str) -> list[str]:
    """Every unix socket under ``folder``; ValueError past MAX_SCANNED_ENTRIES entries."""
    found: list[str] = []
    pending = [folder]
    seen = 0
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue  # unreadable for the worker: the sandbox's uid cannot read it either
        seen += len(entries)
        if seen > MAX_SCANNED_ENTRIES:
            raise ValueError(f"the argument {folder!r} names a folder of more than "
                             f"{MAX_SCANNED_ENTRIES} entries; it is bound into the sandbox only "
                             "after a check for unix sockets, so name a smaller folder")
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                if _is_socket(entry.path):  # sockets, fifos and devices get here; rare
                    found.append(entry.path)
    return found


def argument_binds(arguments: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(arguments with existing paths made absolute, paths to bind, sockets to cover).

    Raises ValueError naming the argument when a path may not be bound.
    """
    args: list[str] = []
    binds: list[str] = []
    covered: list[str] = []
    for arg in arguments:
        if arg.startswith("-") or not os.path.exists(arg):
            args.append(arg)
            continue
        path = os.path.realpath(arg)
        if any(_inside(path, root) for root in NEVER_BOUND):
            raise ValueError(f"the argument {arg!r} names {path}, which is never shown to a "
                             f"sandbox ({', '.join(NEVER_BOUND)} hold sockets and kernel state)")
        if _is_socket(path):
            raise ValueError(f"the argument {arg!r} names a unix socket, which is never shown "
                             "to a sandbox")
        if os.path.isdir(path):
            covered += _sockets_in(path)
        binds.append(path)
        args.append(path)
    return args, binds, covered


def _unix_path(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme in ("unix", "redis+socket", "redis+unix") and parts.path:
        return parts.path
    return None


def known_sockets(binds: list[str], redis_url: str | None) -> list[str]:
    """The Redis and Docker sockets that lie inside one of ``binds`` (symlinks resolved)."""
    docker_host = _unix_path(os.environ.get("DOCKER_HOST"))
    candidates = [p for p in (_unix_path(redis_url), docker_host, *DOCKER_SOCKETS) if p]
    found: list[str] = []
    for candidate in dict.fromkeys(os.path.realpath(p) for p in candidates):
        if _is_socket(candidate) and any(_inside(candidate, b) for b in binds):
            found.append(candidate)
    return found
