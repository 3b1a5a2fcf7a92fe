"""Confined child processes: the Code node's sandbox, JSONata evaluators, stdio MCP servers.

Read by ``orchestrator/host/sandbox/`` and ``orchestrator/host/evaluator.py``. One group of
:class:`orchestrator.settings.Settings`, which every entry point builds once; a subsystem
takes the group it reads (a ``Settings`` is each of them).
"""

from __future__ import annotations

from orchestrator.settings.base import SettingsGroup


class SandboxSettings(SettingsGroup):
    # Without bubblewrap/user namespaces/libseccomp the Code node refuses to run; set this
    # to run it anyway with only the in-process audit hook (NOT a security boundary).
    sandbox_allow_weak: bool = False
    sandbox_bwrap_path: str = "bwrap"  # the bubblewrap binary (looked up on PATH)
    # Size of a sandbox's tmpfs scratch folder /tmp (a Code node's: at most its memory_mb); a
    # stdio MCP server also gets a /dev/shm of this size.
    sandbox_scratch_mb: int = 64
    # Code node sandboxes running at once in one worker process; more wait for a slot
    # (nested Loops of Code nodes, wide fan-outs). Each may use its memory_mb and the scratch.
    sandbox_max_concurrent: int = 8
    # The largest memory_mb a graph may give a Code node on this deployment (the node itself
    # allows up to 4096): with sandbox_max_concurrent sandboxes a worker process may hold
    # sandbox_max_concurrent x (this + scratch) MiB at once; size it to the host.
    sandbox_max_memory_mb: int = 1024
    # JSON Transform evaluates JSONata in child processes (orchestrator/host/evaluator.py):
    # this many per worker process, each limited to this much address space.
    transform_processes: int = 2
    transform_memory_mb: int = 512
    # Comma-separated executables a stdio MCP server may be started with (e.g.
    # "/usr/local/bin/my-mcp,uvx"); empty = no stdio MCP server may run.
    mcp_stdio_commands: str = ""
    # Folders (os.pathsep separated, absolute) under which an argument of a confined stdio
    # MCP server that names a file or folder is shown to it, read-only; any other argument
    # is passed as text. Empty = none. A folder holding or inside the keys or secrets file,
    # a data folder or /proc, /sys, /dev, /run is refused (orchestrator/host/sandbox/binds.py).
    mcp_stdio_arg_roots: str = ""
    mcp_stdio_network: bool = False  # give confined stdio MCP servers the host's network
    # false: allowed stdio MCP commands run unconfined (still only the named environment),
    # for trusted servers that need the host; the allow-list still applies.
    mcp_stdio_confine: bool = True
    # Resource limits of every process of a confined stdio MCP server (set inside the
    # sandbox with prlimit before the server starts; docs/security.md).
    mcp_stdio_memory_mb: int = 2048  # address space per process (RLIMIT_AS); Node needs ~1 GB
    mcp_stdio_cpu_s: int = 300  # CPU seconds per process (RLIMIT_CPU)
    mcp_stdio_file_mb: int = 64  # largest file a process may write (RLIMIT_FSIZE)
    mcp_stdio_open_files: int = 1024  # descriptors per process (RLIMIT_NOFILE)
    # Processes and threads of the sandbox's uid (RLIMIT_NPROC). With a root worker that
    # uid is the host's 65534, shared by every sandbox on the host: size it for all of
    # the servers that run at once. With a non-root worker the count is per sandbox.
    mcp_stdio_processes: int = 256

