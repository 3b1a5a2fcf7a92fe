"""A run's workspace on the worker's disk: its folder, and files created with the right owner.

A run belongs to one workspace, recorded by the API in the run record and handed to the
node with its claim (``NodeHost.workspace``, ``orchestrator/host/node_host.py``); every
store a node opens (credentials, files, the embedded database, vector collections, agent
sessions) is that workspace's. A host with no Redis (a local ``orchestrator run``, node
unit tests) has no workspaces, so its runs are of ``default``.

Embedded state on the worker's disk lives in one folder per workspace,
:func:`workspace_dir`: ``<ORCH_WORKSPACE_DATA_DIR>/<workspace>/``. The folder name is the
workspace id itself, which the API's keys file validates (``kernel/graph.py:ID_PATTERN``:
letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit, so never ``..`` or a
path separator); it is validated again here, and the resolved folder must stay inside the
data folder. Workspace ``default`` keeps the files it always had
(``ORCH_DATABASE_SQLITE_PATH``, ``ORCH_VECTOR_SQLITE_PATH``), so a single-workspace
deployment finds its data where it left it.

Who owns the files: a deployment may run root and non-root workers on one queue over one
data folder, so whichever worker comes first must leave a workspace's folder and files
usable by the other, and by no one else. Everything under ``ORCH_WORKSPACE_DATA_DIR`` is
owned like that folder itself, mode 0700 (folders) and 0600 (files): a non-root worker
creates as itself (it must be the folder's owner: the documented set-up,
docs/deployment.md), a root worker gives what it creates to the folder's owner and group
(:func:`create_owned`, through descriptors opened without following links), and SQLite
gives a journal or WAL file the owner and mode of its database. Root reads everything
anyway; other users and groups get nothing. Why not group-shared folders: 0770 plus a
shared group opens every workspace to every member of that group, and SQLite would still
create journals 0644 under a umask of 022 unless each file were chmod'ed.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from orchestrator.kernel.errors import ConfigurationError
from orchestrator.kernel.graph import ID_PATTERN
from orchestrator.settings import Settings

logger = logging.getLogger(__name__)


def checked_workspace(workspace: str) -> str:
    """``workspace`` when it is a valid id; else a ConfigurationError (never a path)."""
    if not isinstance(workspace, str) or not re.fullmatch(ID_PATTERN, workspace):
        raise ConfigurationError(f"workspace {workspace!r} is not a valid workspace id")
    return workspace


def workspace_dir(settings: Settings, workspace: str) -> Path:
    """The folder of ``workspace``'s embedded state (see the module docstring); not created."""
    root = Path(settings.workspace_data_dir).expanduser().resolve()
    folder = (root / checked_workspace(workspace)).resolve()
    if folder.parent != root:  # defence in depth: the id check already excludes this
        raise ConfigurationError(f"workspace {workspace!r} does not name a folder inside {root}")
    return folder


def workspace_file(settings: Settings, workspace: str, name: str) -> Path:
    """``name`` (a relative path) inside ``workspace``'s folder, it and its folders created
    as :func:`create_owned` says; a folder this worker cannot write is a ConfigurationError
    that says how to fix it (and names no host path: a graph author reads it)."""
    folder = workspace_dir(settings, workspace)
    file = create_owned(folder.parent, folder / name)
    if not os.access(file.parent, os.W_OK | os.X_OK) or not os.access(file, os.R_OK | os.W_OK):
        logger.error("workspace %s: %s is not writable by uid %d", workspace, file, os.geteuid())
        raise ConfigurationError(
            f"the data folder of workspace {workspace!r} is not writable by this worker (uid {os.geteuid()}): "
            "ORCH_WORKSPACE_DATA_DIR and everything in it must belong to the user non-root workers run as "
            "(docs/deployment.md, 'Workspace data on disk')")
    return file


def create_owned(root: Path, file: Path) -> Path:
    """``file`` below ``root``, created if missing with its folders (0700, file 0600); when
    this process is root, each thing it creates is given ``root``'s owner and group. The
    chown goes through a descriptor of the new entry opened with ``O_NOFOLLOW``, so a link
    put in its place is never followed. ``root`` is created (by the process) if missing."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    owner = root.stat()
    give = os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (0, 0)
    current = root
    for part in file.relative_to(root).parent.parts:
        current = current / part
        try:
            os.mkdir(current, 0o700)
        except FileExistsError:
            continue
        if give:
            _give(current, os.O_RDONLY | os.O_DIRECTORY, owner)
    try:
        fd = os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return file
    try:
        if give:
            os.fchown(fd, owner.st_uid, owner.st_gid)
    finally:
        os.close(fd)
    return file


def _give(path: Path, flags: int, owner: os.stat_result) -> None:
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchown(fd, owner.st_uid, owner.st_gid)
    finally:
        os.close(fd)
