"""The HTTP API and browsers: keys, limits, slow clients, webhooks, sessions, CORS.

Read by ``orchestrator/api/``. One group of :class:`orchestrator.settings.Settings`, which
every entry point builds once; a subsystem takes the group it reads (a ``Settings`` is each
of them).
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.settings.base import SettingsGroup


class ApiSettings(SettingsGroup):
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
    # API process (0 = no bound; behind a proxy every connection is the proxy's). A
    # client of an event stream with more than 1 MiB waiting for it must take 1 MiB of it
    # within api_send_stall_s, else it is cut (it resumes with Last-Event-ID).
    api_header_timeout_s: float = 15.0
    api_body_timeout_s: float = 60.0
    api_max_connections_per_client: int = 100
    api_send_stall_s: float = Field(default=15.0, ge=0.1, le=3600)
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
    # Wait nodes (orchestrator/service/waits.py): the HMAC key of signed resume URLs. Empty
    # (the shipped default): no resume URL is issued or accepted.
    resume_url_secret: str = ""
    resume_url_ttl_s: int = 7 * 24 * 3600  # a resume URL issued for a wait without a timeout lasts this long
    wait_max_payload_bytes: int = 64 * 1024  # a resume URL's callback body or a submitted form, at most
    sse_ping_s: float = 15.0
    redis_max_connections: int = 512  # the API's Redis pool (blocking: a burst waits, then 503); SSE streams use none
    api_run_sweeper: bool = True  # each API process also runs the (lock-guarded) sweeper
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

