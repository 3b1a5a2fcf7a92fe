"""Credentials, files, embedded databases and vectors, readable folders of nodes.

Read by ``orchestrator/host/`` (credentials, files, workspace folders) and
``orchestrator/store/blobs.py``. One group of :class:`orchestrator.settings.Settings`, which
every entry point builds once; a subsystem takes the group it reads (a ``Settings`` is each
of them).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.settings.base import SettingsGroup

# The repository's examples/ folder, beside the package in a source checkout or an editable
# install (an installed wheel has none: set ORCH_EXAMPLES_DIR).
SOURCE_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # <repo>/orchestrator/settings/ -> <repo>


class StorageSettings(SettingsGroup):
    # Fernet keys (comma-separated, newest first) that encrypt stored credentials; the
    # first encrypts, every one decrypts (rotation: prepend a new key, then
    # `orchestrator credentials rotate`). Unset: credentials cannot be stored or read.
    credentials_key: str = ""
    files_max_bytes: int = 32 * 1024 * 1024  # an upload (POST /files) larger than this gets a 413
    # Files up to this size go to Redis (with retention_s); larger ones to S3 when configured.
    blob_redis_max_bytes: int = 8 * 1024 * 1024
    blob_backend: str = "redis"  # "redis" or "s3": where new files go (reads follow the ref)
    s3_endpoint_url: str | None = None  # an S3-compatible server (MinIO); unset = AWS
    s3_bucket: str = "orchestrator"
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    # Embedded state of workspaces other than "default" on the worker's disk: one folder
    # per workspace, <dir>/<workspace>/ (database.sqlite3, vectors.sqlite3; orchestrator/host/workspace.py).
    workspace_data_dir: str = "~/.local/share/orchestrator/workspaces"
    # Workspace "default"'s embedded Database Query database (a node without a credential uses it).
    database_sqlite_path: str = "~/.local/share/orchestrator/database.sqlite3"
    database_statement_timeout_s: float = 30.0  # longest statement a Database Query node may run
    vector_backend: str = "sqlite"  # "sqlite" (embedded, one machine) or "pgvector" (shared server)
    vector_sqlite_path: str = "~/.local/share/orchestrator/vectors.sqlite3"  # workspace "default"'s
    vector_database_url: str | None = None  # postgresql://... with pgvector, for vector_backend=pgvector
    # Folders the Document Loader may read by path (os.pathsep separated); the examples
    # folder is always readable. Empty = nothing else.
    loader_paths: str = ""
    # The example graphs: the console's gallery, and files the Document Loader may read.
    # Unset: the repository's examples/ folder beside the package, when there is one.
    examples_dir: str | None = None


    def examples_path(self) -> Path | None:
        """The examples folder (``examples_dir``, else the source tree's), None if absent."""
        folder = Path(self.examples_dir).expanduser() if self.examples_dir else SOURCE_EXAMPLES
        return folder.resolve() if folder.is_dir() else None
