"""What a confined command sees of the host beyond the operator's binds.

A graph names a stdio server's arguments; it never chooses what the server may read.
:func:`argument_binds` binds an argument into the sandbox (read-only, made absolute so
that it resolves inside) only when all of this holds, and passes every other argument on
as text, unchanged (a path outside the roots then simply does not exist inside):

- it names an existing file or folder inside one of the operator's roots
  (``ORCH_MCP_STDIO_ARG_ROOTS``, :class:`ArgumentRoots`; none by default, so by default no
  argument is bound). Symbolic links and ``..`` are resolved first, on the host: a link
  under a root that points outside it is not inside it;
- it is not, does not hold and is not inside a protected path (:func:`protected_paths`:
  the keys and secrets files, the embedded databases' and vector stores' folders, the
  workspace data folder, the embedded Redis's folder) and is no hard link to a protected
  file. A root that holds or lies inside a protected path, or inside ``/proc``, ``/sys``,
  ``/dev`` or ``/run``, is refused as a whole: the setting is wrong;
- it, and everything in a named folder (walked without following links, at most
  :data:`MAX_SCANNED_ENTRIES` entries), is readable by any user of the host: files
  ``o+r``, folders ``o+rx``. With a root worker the sandbox's uid 65534 could read no more
  anyway; with a non-root worker the sandbox runs as the worker's own uid (and groups),
  which an unprivileged user namespace cannot drop, so without this rule it would read
  every file of the worker's that the kernel lets its owner read.

Unix sockets: a read-only bind does not stop ``connect()`` to a socket beneath it
(connecting needs write permission on the socket's inode, which a read-only mount does not
take away; checked with bubblewrap on this project's development kernel). A socket whose
mode lets the sandbox in would be a way out (the Docker socket is root on the host, the
embedded Redis socket is every run's state), so a socket named as an argument is refused,
every socket inside a bound folder is covered by a read-only bind of ``/dev/null``
(``connect`` then fails with ECONNREFUSED), and :func:`known_sockets` covers the Redis
socket of ``REDIS_URL`` and Docker's wherever they fall inside any bind, the operator's
(the venv, the program's folder) included, which are not walked.

What remains: a socket or file created in a bound folder after the command started is
visible (the bind is live), so a root must not be writable by anything a graph controls;
binds the operator chooses are trusted apart from the known sockets.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from urllib.parse import urlsplit

from orchestrator.settings import Settings

MAX_SCANNED_ENTRIES = 10_000
NEVER_BOUND = ("/proc", "/sys", "/dev", "/run")
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")
ROOTS_SETTING = "ORCH_MCP_STDIO_ARG_ROOTS"


@dataclass(frozen=True)
class Protected:
    """A host path no argument may show a sandbox, symlinks resolved, and what it holds."""

    path: str
    what: str


@dataclass(frozen=True)
class ArgumentRoots:
    """The folders under which an argument may be bound, and the paths that never are."""

    roots: tuple[str, ...]
    protected: tuple[Protected, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> ArgumentRoots:
        """The roots of ``ORCH_MCP_STDIO_ARG_ROOTS``, resolved; ValueError naming the setting
        for a root that is relative, missing, or holds or lies in a protected path."""
        protected = protected_paths(settings)
        roots: list[str] = []
        for raw in (r.strip() for r in settings.mcp_stdio_arg_roots.split(os.pathsep)):
            if not raw:
                continue
            root = os.path.realpath(os.path.expanduser(raw))
            if not os.path.isabs(os.path.expanduser(raw)) or not os.path.isdir(root):
                raise ValueError(f"{ROOTS_SETTING}: {raw!r} is not the absolute path of a folder")
            for guarded in (*(Protected(n, "sockets and kernel state") for n in NEVER_BOUND), *protected):
                if _inside(root, guarded.path) or _inside(guarded.path, root):
                    raise ValueError(
                        f"{ROOTS_SETTING}: {raw!r} ({root}) holds or lies inside {guarded.path}, "
                        f"which holds {guarded.what}: list only folders whose every file stdio "
                        "servers may read")
            roots.append(root)
        return cls(tuple(roots), protected)


def _folder(path: str | None) -> str | None:
    return os.path.dirname(os.path.expanduser(path)) if path else None


def protected_paths(settings: Settings) -> tuple[Protected, ...]:
    """The worker's secrets and stored data on this host (see the module docstring)."""
    named = (
        (settings.api_keys_file, "the API keys (ORCH_API_KEYS_FILE)"),
        (settings.secrets_file, "the worker's secrets (ORCH_SECRETS_FILE)"),
        (settings.workspace_data_dir, "the workspaces' databases and vectors (ORCH_WORKSPACE_DATA_DIR)"),
        (_folder(settings.database_sqlite_path), "the embedded database (ORCH_DATABASE_SQLITE_PATH)"),
        (_folder(settings.vector_sqlite_path), "the embedded vector store (ORCH_VECTOR_SQLITE_PATH)"),
        (_folder(_unix_path(settings.redis_url)), "the Redis socket and its data (REDIS_URL)"),
    )
    found = {os.path.realpath(os.path.expanduser(path)): what for path, what in named if path}
    return tuple(Protected(path, what) for path, what in found.items())


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _anyone_may_read(mode: int) -> bool:
    """Files ``o+r``, folders ``o+rx``: what a stranger to the file's owner may read."""
    need = 0o005 if stat.S_ISDIR(mode) else 0o004
    return mode & need == need


def _protected_inodes(protected: tuple[Protected, ...]) -> set[tuple[int, int]]:
    """(device, inode) of the protected files and of the files in protected folders (the
    first MAX_SCANNED_ENTRIES): a hard link elsewhere shares them."""
    found: set[tuple[int, int]] = set()
    pending = [p.path for p in protected]
    seen = 0
    while pending and seen < MAX_SCANNED_ENTRIES:
        path = pending.pop()
        try:
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode):
                entries = list(os.scandir(path))
                seen += len(entries)
                pending += [e.path for e in entries]
            elif stat.S_ISREG(info.st_mode):
                found.add((info.st_dev, info.st_ino))
        except OSError:
            continue  # gone, or unreadable for the worker: then also for the sandbox
    return found


class _Check:
    """Checks one argument's path and everything under it; collects the specials to cover."""

    def __init__(self, arg: str, root: str, protected: tuple[Protected, ...]) -> None:
        self.arg = arg
        self.root = root
        self.protected = protected
        self.inodes: set[tuple[int, int]] | None = None  # computed at the first hard link
        self.covered: list[str] = []
        self.seen = 0

    def refuse(self, path: str, why: str) -> ValueError:
        at = "" if path == os.path.realpath(self.arg) else f" (at {path})"
        return ValueError(f"the argument {self.arg!r}{at} {why}; a stdio server is shown only "
                          f"files under {ROOTS_SETTING} that any user of the host may read")

    def entry(self, path: str, info: os.stat_result, top: bool) -> bool:
        """Check one path; True when it is a folder to walk."""
        mode = info.st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            if top:  # a socket, fifo or device: a door to whoever holds the other end
                raise self.refuse(path, "names a unix socket or another special file, which is "
                                        "never shown to a sandbox")
            self.covered.append(path)
            return False
        if stat.S_ISLNK(mode):
            return False  # resolved inside the sandbox, where only binds exist
        if not _anyone_may_read(mode):
            raise self.refuse(path, f"is readable only by its owner or group (mode "
                                    f"{stat.filemode(mode)})")
        if stat.S_ISREG(mode) and info.st_nlink > 1:
            if self.inodes is None:
                self.inodes = _protected_inodes(self.protected)
            if (info.st_dev, info.st_ino) in self.inodes:
                raise self.refuse(path, "is a hard link to a protected file")
        return stat.S_ISDIR(mode)

    def run(self, path: str) -> list[str]:
        """Every ancestor below the root must be searchable, the path and its contents
        readable, by anyone; returns the special files inside to cover."""
        ancestor = os.path.dirname(path)
        while _inside(ancestor, self.root):
            if not _anyone_may_read(os.stat(ancestor).st_mode):
                raise self.refuse(ancestor, "lies in a folder that only its owner or group may read")
            if ancestor == self.root:
                break
            ancestor = os.path.dirname(ancestor)
        pending = [path] if self.entry(path, os.lstat(path), True) else []
        while pending:
            entries = list(os.scandir(pending.pop()))
            self.seen += len(entries)
            if self.seen > MAX_SCANNED_ENTRIES:
                raise self.refuse(path, f"names a folder of more than {MAX_SCANNED_ENTRIES} "
                                        "entries, which is bound only after a check of each; "
                                        "name a smaller folder")
            for found in entries:
                if self.entry(found.path, found.stat(follow_symlinks=False), False):
                    pending.append(found.path)
        return self.covered


def _bindable(arg: str, allowed: ArgumentRoots) -> tuple[str, str] | None:
    """(resolved path, its root) when ``arg`` names an existing path under a root."""
    if arg.startswith("-") or not allowed.roots or not os.path.exists(arg):
        return None
    path = os.path.realpath(arg)
    root = next((r for r in allowed.roots if _inside(path, r)), None)
    return None if root is None else (path, root)


def argument_binds(arguments: list[str], allowed: ArgumentRoots) -> tuple[list[str], list[str], list[str]]:
    """(arguments, paths to bind, special files to cover) under the module docstring's rules.

    A bound argument is replaced by its resolved path; any other is passed on as it is.
    Raises ValueError naming the argument when it lies under a root but may not be shown.
    A root never holds nor lies in a protected path (``ArgumentRoots.from_settings``), so a
    resolved path under a root is outside them; hard links are checked by inode.
    """
    args: list[str] = []
    binds: list[str] = []
    covered: list[str] = []
    for arg in arguments:
        found = _bindable(arg, allowed)
        if found is None:
            args.append(arg)
            continue
        path, root = found
        try:
            covered += _Check(arg, root, allowed.protected).run(path)
        except OSError as exc:
            raise ValueError(f"the argument {arg!r} cannot be checked: {exc}") from exc
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
