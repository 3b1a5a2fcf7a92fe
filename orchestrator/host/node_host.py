"""``NodeHost``: everything a node may use of the process it runs in, as one typed object.

The kernel hands an executor a ``FlowContext`` whose ``host`` slot it never looks inside;
in this product that slot holds a ``NodeHost``, built once per run by the host process:

* the worker (``workers/process_state.py``) makes a :class:`HostFactory` per process and
  the step asks it for the host of the run it claimed: the run's workspace comes with the
  claim (``Claim.workspace``), so no node reads the run record;
* a local run (``orchestrator run`` without workers, the API's single-node preview, node
  unit tests) passes one or none: :func:`node_host` then gives :func:`standalone`, the
  process's settings with no Redis and workspace ``default`` (no workspaces there).

What a node gets through it: the settings (``settings``), the run's workspace and its
folder (``workspace``, :meth:`NodeHost.workspace_file`), credentials
(:meth:`NodeHost.credential`), files (:meth:`NodeHost.blobs`), files it may read from disk
(:meth:`NodeHost.readable_path`) and the Redis URL for what it stores there (agent
sessions), and the host's own subsystems with its settings applied: the egress policy
(:meth:`NodeHost.egress_policy`, for the guarded clients of ``orchestrator/host/egress/``
and ``orchestrator/host/http.py``), the Code node's sandbox (:meth:`NodeHost.run_python`,
``orchestrator/host/sandbox/``), the JSONata evaluator (:meth:`NodeHost.evaluate_jsonata`)
and redaction (:meth:`NodeHost.redact`, :meth:`NodeHost.operator_secrets`). None of those
modules reads the process settings: the host hands them its own. A worker's host also
starts child runs (:meth:`NodeHost.start_child`, ``orchestrator/host/children.py``).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import RequestError
from orchestrator.host import evaluator, redaction
from orchestrator.host.children import ChildResult, ChildRuns, ChildSpec
from orchestrator.host.credentials import DEFAULT_WORKSPACE, Credential, CredentialStore
from orchestrator.host.egress.policy import EgressPolicy
from orchestrator.host.sandbox.python import SandboxLimits, SandboxResult, run_python
from orchestrator.host.workspace import checked_workspace, workspace_dir, workspace_file
from orchestrator.kernel.errors import ConfigurationError, ParameterError
from orchestrator.kernel.protocol import FlowContext, NodeEvent
from orchestrator.settings import Settings, load_settings
from orchestrator.settings.store import is_cluster_url
from orchestrator.store import redis_client
from orchestrator.store.blobs import Blobs
from orchestrator.store.limits import RateLimiter

MAX_CACHED_RUNS = 4096  # a worker keeps the hosts of its recent runs (a few hundred bytes each)


@dataclass(frozen=True, kw_only=True)
class NodeHost:
    """What a node of one run may use (see the module docstring)."""

    settings: Settings
    redis_url: str | None = None  # None: a host with no Redis (no credentials, no files)
    workspace: str = DEFAULT_WORKSPACE
    limiter: RateLimiter | None = None  # cluster-wide rate limits (orchestrator/host/flow.py)
    children: ChildRuns | None = None  # None: a host that runs no child runs (a local run)

    async def start_child(self, spec: ChildSpec) -> str:
        """Start the child run ``spec`` asks for (``orchestrator/service/children.py``);
        its run id. A host without workers cannot: a ConfigurationError says so."""
        return await self._children(spec.parent_run, spec.parent_node).start(spec)

    async def collect_children(self, run_ids: list[str]) -> dict[str, ChildResult]:
        """How the ended ones among child runs ``run_ids`` ended (``ChildRuns.collect``)."""
        return await self._children().collect(run_ids)

    async def child_events(self, run_id: str) -> list[NodeEvent]:
        """The node events of child run ``run_id``."""
        return await self._children().node_events(run_id)

    async def cancel_children(self, run_ids: list[str], reason: str) -> None:
        """Cancel the active ones among child runs ``run_ids``."""
        await self._children().cancel(run_ids, reason)

    def _children(self, run_id: str | None = None, node_id: str | None = None) -> ChildRuns:
        if self.children is None:
            raise ConfigurationError("running a graph as a child run needs workers (the host of this run has "
                                     "none: run the graph through the API or `orchestrator run` with workers)",
                                     run_id=run_id, node_id=node_id)
        return self.children

    def egress_policy(self) -> EgressPolicy:
        """Where this host lets a node connect (``ORCH_EGRESS_ALLOW_PRIVATE``, ``ORCH_EGRESS_ALLOW``)."""
        return EgressPolicy.from_settings(self.settings)

    async def run_python(self, code: str, value: Any, *, timeout_s: float, memory_mb: int) -> SandboxResult:
        """``code`` run in this host's sandbox (``orchestrator/host/sandbox/python.py``)."""
        return await run_python(code, value, SandboxLimits(timeout_s, memory_mb), settings=self.settings)

    async def evaluate_jsonata(self, expression: str, value: Any, *, timeout_ms: int, max_depth: int) -> Any:
        """``expression`` on ``value`` in this host's evaluator pool (``orchestrator/host/evaluator.py``)."""
        return await evaluator.evaluate_jsonata(expression, value, settings=self.settings, timeout_ms=timeout_ms,
                                                max_depth=max_depth)

    def operator_secrets(self) -> list[str]:
        """The secret values of this host's configuration (``orchestrator/host/redaction.py``)."""
        return redaction.operator_secrets(self.settings)

    def redact(self, value: Any) -> Any:
        """``value`` with this host's secrets (and the execution's registered ones) masked."""
        return redaction.redact(value, self.settings)

    def need_redis(self) -> str:
        """The Redis URL, or a RequestError saying the node needs one."""
        if not self.redis_url:
            raise RequestError("this node needs Redis (credentials, files): the host passed no redis_url")
        return self.redis_url

    def plain_redis_url(self) -> str | None:
        """A plain (non-cluster) Redis for clients that cannot use a Redis Cluster (Agno's
        session storage): the host's Redis, or on a cluster ``ORCH_CONTROL_REDIS_URL``
        (a RequestError naming it when unset); None for a host with no Redis."""
        if not self.redis_url or not is_cluster_url(self.redis_url):
            return self.redis_url
        if not self.settings.control_redis_url:
            raise RequestError("agent sessions need a plain Redis: REDIS_URL names a Redis Cluster, so set "
                               "ORCH_CONTROL_REDIS_URL=redis://host:port/db")
        return self.settings.control_redis_url

    def workspace_dir(self) -> Path:
        """The folder of the run's workspace on this worker's disk (not created)."""
        return workspace_dir(self.settings, self.workspace)

    def workspace_file(self, name: str) -> Path:
        """``name`` inside the workspace's folder, created as ``workspace.create_owned`` says."""
        return workspace_file(self.settings, self.workspace, name)

    async def credential(self, name: str, types: tuple[str, ...], parameter: str = "credential") -> Credential:
        """The workspace's credential ``name``, which must be one of ``types``; errors name
        the node's ``parameter``."""
        redis = redis_client.client(self.need_redis(), decode_responses=True)
        try:
            found = await CredentialStore(redis, self.settings, workspace=self.workspace).get(name)
        except RequestError as exc:
            raise ParameterError(f"parameter '{parameter}': {exc.message}", parameter=parameter) from None
        finally:
            await redis.aclose()
        if found.type not in types:
            raise ParameterError(f"parameter '{parameter}': credential {name!r} is of type {found.type}; "
                                 f"this node takes {', '.join(types)}", parameter=parameter)
        return found

    @asynccontextmanager
    async def blobs(self, run_id: str) -> AsyncIterator[Blobs]:
        """The workspace's file store for one execution; what a node stores counts against
        run ``run_id``'s storage budget too."""
        blobs = Blobs.from_settings(self.settings, self.need_redis(), workspace=self.workspace, run_id=run_id)
        try:
            yield blobs
        finally:
            await blobs.aclose()

    def readable_roots(self) -> list[Path]:
        """The folders a node may read files from: the examples folder and the folders an
        operator lists in ``ORCH_LOADER_PATHS``."""
        extra = [Path(p).expanduser().resolve() for p in self.settings.loader_paths.split(os.pathsep) if p.strip()]
        examples = self.settings.examples_path()
        return [*([examples] if examples is not None else []), *extra]

    def readable_path(self, raw: str) -> Path:
        """``raw`` resolved inside one of the readable roots (relative paths: from each root,
        or from the examples folder's parent for ``examples/...``), else a ParameterError.
        The error names the path as the graph gave it and the roots by their settings, never
        a folder of the host: a graph author learns nothing of the worker's disk from it."""
        roots = self.readable_roots()
        candidate = Path(raw).expanduser()
        examples = self.settings.examples_path()
        bases = [examples.parent] if examples is not None else []
        tries = [candidate] if candidate.is_absolute() else [*(b / candidate for b in bases),
                                                             *(root / candidate for root in roots)]
        for path in tries:
            resolved = path.resolve()
            if any(resolved.is_relative_to(root) for root in roots) and resolved.is_file():
                return resolved
        raise ParameterError(f"parameter 'path': {raw!r} is not a file inside the readable folders (the "
                             "examples folder, ORCH_EXAMPLES_DIR, and the folders an operator lists in "
                             "ORCH_LOADER_PATHS)", parameter="path")


class HostFactory:
    """Builds the :class:`NodeHost` of each run once, for one process's settings and Redis;
    the worker asks it with the run id and the workspace its claim carries."""

    def __init__(self, settings: Settings, redis_url: str | None, *, limiter: RateLimiter | None = None,
                 children: ChildRuns | None = None) -> None:
        self.settings = settings
        self.redis_url = redis_url
        self.limiter = limiter
        self.children = children
        self._hosts: OrderedDict[str, NodeHost] = OrderedDict()

    def __call__(self, run_id: str, workspace: str | None) -> NodeHost:
        host = self._hosts.get(run_id)
        if host is None or host.workspace != (workspace or DEFAULT_WORKSPACE):
            host = NodeHost(settings=self.settings, redis_url=self.redis_url,
                            workspace=checked_workspace(workspace or DEFAULT_WORKSPACE), limiter=self.limiter,
                            children=self.children)
            self._hosts[run_id] = host
            while len(self._hosts) > MAX_CACHED_RUNS:
                self._hosts.popitem(last=False)
        self._hosts.move_to_end(run_id)
        return host


def standalone() -> NodeHost:
    """The host of a run started with none (a local run, a node unit test): the process's
    settings (``load_settings``, read once per process), their Redis if any, workspace
    ``default`` (a host without workers has no workspaces).

    An entry point, like the API app factory, the worker process, the CLI and beat: the one
    place outside them allowed to read the process settings (tests/layout checks it)."""
    settings = load_settings()
    return NodeHost(settings=settings, redis_url=settings.redis_url)


def node_host(ctx: FlowContext) -> NodeHost:
    """The host of the node running with ``ctx`` (see the module docstring)."""
    host = ctx.host
    if host is None:
        return standalone()
    if not isinstance(host, NodeHost):
        raise ConfigurationError(f"run {ctx.run_id}: the host passed {type(host).__name__}, not a NodeHost")
    return host
