"""Flow control of a node's outbound calls: provider limits and 429s, shared by the cluster.

A node that calls a provider (a model endpoint, an HTTP origin) asks a :class:`FlowGate`
before each request and tells it each answer; one gate serves one node execution:

* **before the client is built**, :meth:`FlowGate.prepay` probes the first request's rate
  (a refusal then costs one script call, not an agent built and a model run started; a grant
  is taken only by the acquire right before the request);
* **before** a request, :meth:`FlowGate.before` acquires the provider's limits in one Redis
  script call (``orchestrator/store/limits.py``): a request of the endpoint's requests per
  minute, and the request's estimated tokens of its tokens per minute. Limits come from the
  credential (``limits`` ``{rpm, tpm}``) or, for the operator's endpoints, from
  ``ORCH_MODEL_LIMITS``; an endpoint with none declared runs unlimited until a 429 teaches it
  a rate. Declared rates run at ``HEADROOM`` of the quota (a request granted at its slot
  reaches the provider a little later or earlier; a provider's window counts arrivals).
* a refusal raises :class:`~orchestrator.kernel.errors.WaitRequested`: the node's slot is
  freed and the same attempt runs again when its reserved slot is due. The gate keeps the
  signal (``signal``) because a model library may wrap what a request hook raises; the node
  raises it again when its call fails.
* **after** a 429, :meth:`FlowGate.refused` blocks the key for every worker until the
  ``Retry-After`` and cuts its rate (adaptive), and raises WaitRequested for this node too.
* **after** a call with real usage, :meth:`FlowGate.settle` corrects the tokens charged with
  the estimate.

Keys: ``cred:<workspace>:<credential>`` for a credential's endpoint (one provider account),
``endpoint:<base url>`` for the operator's, ``origin:<workspace>:<origin>`` for an HTTP
Request node's origin; ``:rpm`` / ``:tpm`` appended.
"""

from __future__ import annotations

import json
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import WaitRequested
from orchestrator.kernel.limits import LimitRequest
from orchestrator.kernel.protocol import FlowContext
from orchestrator.settings import Settings
from orchestrator.store.limits import UNAVAILABLE, UNAVAILABLE_WAIT_S

log = logging.getLogger("orchestrator.flow")

HEADROOM = 0.98  # declared quotas run at 98%: arrivals jitter around their granted slots
PER_MINUTE_S = 60.0
DEFAULT_OUTPUT_TOKENS = 256  # estimate of a reply's tokens when the request sets no maximum
CHARS_PER_TOKEN = 4
MIN_WAIT_S = 0.05  # a 429 without Retry-After waits at least this long


@dataclass(frozen=True)
class ProviderLimits:
    """The limits one provider key has: ``key`` scopes them, ``rpm``/``tpm`` 0 when unknown."""

    key: str
    rpm: int = 0
    tpm: int = 0

    def requests(self, tokens: int) -> list[LimitRequest]:
        """What one request asks: a request (learned when no rpm), and ``tokens`` of tpm."""
        asks = [LimitRequest(f"{self.key}:rpm", rate=self.rpm * HEADROOM, per_s=PER_MINUTE_S)
                if self.rpm else LimitRequest(f"{self.key}:rpm", per_s=PER_MINUTE_S, learn=True)]
        if self.tpm:
            asks.append(self.tokens(tokens))
        return asks

    def tokens(self, tokens: int) -> LimitRequest:
        return LimitRequest(f"{self.key}:tpm", rate=self.tpm * HEADROOM, per_s=PER_MINUTE_S,
                            cost=max(1, tokens), burst=1)


def operator_limits(settings: Settings, base_url: str) -> dict[str, int]:
    """``ORCH_MODEL_LIMITS``' entry for ``base_url`` ({} when none or unreadable)."""
    try:
        table = json.loads(settings.model_limits or "{}")
    except ValueError:
        return {}
    entry = table.get(base_url) or table.get(base_url.rstrip("/")) if isinstance(table, dict) else None
    return {k: int(v) for k, v in entry.items() if k in ("rpm", "tpm")} if isinstance(entry, dict) else {}


def estimate_tokens(body: bytes) -> int:
    """Tokens a request may cost before its answer says: its text at ``CHARS_PER_TOKEN``,
    plus the reply's maximum (``max_tokens`` / ``max_completion_tokens``) or a default."""
    try:
        payload = json.loads(body) if body else {}
    except ValueError:
        payload = {}
    reply = DEFAULT_OUTPUT_TOKENS
    if isinstance(payload, dict):
        reply = int(payload.get("max_completion_tokens") or payload.get("max_tokens") or reply)
    return len(body) // CHARS_PER_TOKEN + reply


@dataclass
class FlowGate:
    """One node execution's gate (see the module docstring)."""

    ctx: FlowContext
    signal: WaitRequested | None = None
    _sent: int = 0
    _charged: list[tuple[LimitRequest, int]] = field(default_factory=list)

    async def prepay(self, limits: ProviderLimits | None) -> None:
        """Ask the first request's rate before the node builds its client or agent
        (``nodes/_ai/models.py``), as a probe: a node that must wait is refused for the
        price of one script call, not of an agent built and a model run started (its slot is
        reserved as for any refusal); a node that may go takes nothing yet, since the grant
        is taken right before the request is sent (:meth:`before`), where the time from grant
        to the provider is shortest. Raises WaitRequested like :meth:`before`."""
        limiter = node_host(self.ctx).limiter
        if limits is None or self._sent or limiter is None:
            return
        try:
            got = await limiter.take(limits.requests(0)[:1], holder=f"{self.ctx.execution_key}:1", probe=True)
        except UNAVAILABLE:  # the limit cannot be asked: wait and ask again, never call blindly
            self._raise(UNAVAILABLE_WAIT_S, {"limit": limits.key, "source": "limiter_unavailable"})
        if got.wait_s > 0:
            self._raise(got.wait_s, {"limit": got.key, "source": "provider_limit"})

    async def before(self, limits: ProviderLimits, body: bytes = b"") -> None:
        """Acquire one request's limits; raise WaitRequested (kept in ``signal``) if it must wait."""
        limiter = node_host(self.ctx).limiter
        if limiter is None:
            return
        self._sent += 1
        estimate = estimate_tokens(body) if limits.tpm else 0
        try:
            got = await limiter.take(limits.requests(estimate), holder=f"{self.ctx.execution_key}:{self._sent}")
        except UNAVAILABLE:  # the limit cannot be asked: wait and ask again, never call blindly
            self._raise(UNAVAILABLE_WAIT_S, {"limit": limits.key, "source": "limiter_unavailable"})
        if got.wait_s > 0:
            self._raise(got.wait_s, {"limit": got.key, "source": "provider_limit"})
        if limits.tpm:
            self._charged.append((limits.tokens(estimate), estimate))

    async def refused(self, limits: ProviderLimits, retry_after_s: float | None) -> None:
        """The provider answered 429: tighten the key for everyone, then wait (raises)."""
        limiter = node_host(self.ctx).limiter
        request = limits.requests(0)[0]
        if limiter is not None:
            try:
                await limiter.penalize(request, retry_after_s)
            except UNAVAILABLE:
                log.warning("run %s node %s: a 429 of %s could not be shared (Redis unavailable)",
                            self.ctx.run_id, self.ctx.node_id, request.key)
        self._raise(max(MIN_WAIT_S, retry_after_s or 0.0), {"limit": request.key, "source": "provider_429"})

    async def settle(self, tokens_used: int) -> None:
        """The oldest charged request used ``tokens_used``: correct its estimate."""
        limiter = node_host(self.ctx).limiter
        if not self._charged or limiter is None:
            return
        request, estimate = self._charged.pop(0)
        try:
            await limiter.adjust(request, tokens_used - estimate)
        except UNAVAILABLE:  # the estimate stays charged: the key runs a little slow, never fast
            log.warning("run %s node %s: tokens of %s not corrected (Redis unavailable)",
                        self.ctx.run_id, self.ctx.node_id, request.key)

    def _raise(self, wait_s: float, reason: dict[str, Any]) -> None:
        self.signal = WaitRequested(f"waiting for {reason['limit']}", delay_s=wait_s, reason=reason,
                                    node_id=self.ctx.node_id, run_id=self.ctx.run_id)
        raise self.signal


_gates: weakref.WeakValueDictionary[str, FlowGate] = weakref.WeakValueDictionary()


def gate_for(ctx: FlowContext) -> FlowGate:
    """The gate of ``ctx``'s execution (one per execution, while something holds it)."""
    gate = _gates.get(ctx.execution_key)
    if gate is None or gate.ctx is not ctx:
        gate = FlowGate(ctx)
        _gates[ctx.execution_key] = gate
    return gate


def pending_signal(ctx: FlowContext) -> WaitRequested | None:
    """The wait a gate of this execution asked for, if a library swallowed its raise."""
    gate = _gates.get(ctx.execution_key)
    return gate.signal if gate is not None and gate.ctx is ctx else None
