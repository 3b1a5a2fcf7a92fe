"""Request errors: a caller's request cannot be served. They belong to the layers above
the kernel (store, host, service, API); the API turns each into its HTTP status
(``orchestrator/api/errors.py``). The root and the kernel's own errors are
``orchestrator.kernel.errors``.

::

    OrchestratorError (kernel)
    └── RequestError                   a caller's request cannot be served
        ├── GraphNotFoundError         unknown graph id or version
        ├── GraphConflictError         a graph id or webhook path already taken
        ├── ResourceNotFoundError      a named stored resource (credential, file) does not exist
        ├── AuthError                  missing/wrong API key, bad webhook signature
        ├── ForbiddenError             the key's role does not allow the request
        ├── PayloadTooLargeError       a request body over the configured limit
        ├── OverloadedError            queued work above a configured bound: retry later
        ├── StorageBudgetError         a run's or a workspace's stored bytes would pass its budget
        ├── StoreFullError             the state store refuses writes: it is full
        └── StoreNotReplicatedError    a new run's state did not reach the replicas asked for in time
"""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.errors import OrchestratorError


class RequestError(OrchestratorError):
    code = "bad_request"


class GraphNotFoundError(RequestError):
    code = "graph_not_found"


class GraphConflictError(RequestError):
    code = "graph_conflict"


class ResourceNotFoundError(RequestError):
    """A named stored resource (a credential, a file) does not exist."""

    code = "not_found"


class AuthError(RequestError):
    code = "unauthorized"


class ForbiddenError(RequestError):
    code = "forbidden"


class PayloadTooLargeError(RequestError):
    code = "payload_too_large"


class OverloadedError(RequestError):
    """Queued work is above a configured bound; nothing was stored. ``limit`` names the
    setting, ``queued`` and ``bound`` say how far over it is, ``retry_after_s`` when to
    try again."""

    code = "overloaded"

    def __init__(self, message: str, *, limit: str, queued: int, bound: int, retry_after_s: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.queued = queued
        self.bound = bound
        self.retry_after_s = retry_after_s

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "limit": self.limit, "queued": self.queued, "bound": self.bound,
                "retry_after_s": self.retry_after_s}


class StorageBudgetError(RequestError):
    """Storing ``requested`` more bytes would take a run or a workspace past its budget
    (``limit`` names the setting); nothing was stored."""

    code = "storage_budget"

    def __init__(self, message: str, *, limit: str, used: int, requested: int, bound: int,
                 **context: Any) -> None:
        super().__init__(message, **context)
        self.limit = limit
        self.used = used
        self.requested = requested
        self.bound = bound

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "limit": self.limit, "used": self.used, "requested": self.requested,
                "bound": self.bound}


class StoreFullError(RequestError):
    """The state store refused a write because it is full (its memory limit)."""

    code = "store_full"


class StoreNotReplicatedError(RequestError):
    """A new run's state was written to its Redis primary but not acknowledged by
    ``ORCH_REDIS_WAIT_REPLICAS`` replicas within ``ORCH_REDIS_WAIT_TIMEOUT_MS``: a failover
    now could lose it, so the start is not confirmed (nothing was dispatched). Retry later."""

    code = "store_not_replicated"
