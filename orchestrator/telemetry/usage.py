"""A run's model usage and cost, summed from its events.

Nodes report usage through the kernel (``ctx.report_usage(key, numbers)``); each
execution's sums ride on its ``completed`` / ``error`` / ``retry`` event (a node that
suspended: a ``progress`` event ``{"suspended": true}``) as ``data.usage``
(``{"<provider:model>": {"input_tokens", "output_tokens", "cached_tokens",
"reasoning_tokens", "total_tokens", "calls"}}``). :func:`summarize`
adds them up per node and for the run and prices them (``pricing.py``): what
``GET /runs/{id}``, the CLI and the console show. Every attempt counts (a failed
attempt's tokens were spent too), and so do the nodes of a Loop's body (under the loop).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from orchestrator.kernel.observer import carries_usage
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.usage import Usage

from .pricing import PriceTable

READ_BATCH = 1000
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "total_tokens")


def event_usage(event: NodeEvent) -> Usage | None:
    """The usage an execution's own completed/error/retry/suspended event carries, else
    None. An event a container (a Loop) forwards from its nested runs counts too, under
    the container's node id: the container's own event never includes its body's usage."""
    data = event.data or {}
    if not carries_usage(event):
        return None
    raw = data.get("usage")
    return Usage.from_json(raw) if isinstance(raw, dict) else None


def totals(usage: Usage, prices: PriceTable) -> dict[str, Any]:
    """Token sums over every key, the cost in USD (None when nothing is priced) and the
    keys that have no price."""
    out: dict[str, Any] = dict.fromkeys(TOKEN_FIELDS, 0)
    cost: float | None = None
    unpriced: list[str] = []
    for key, numbers in usage.by_key.items():
        for name in TOKEN_FIELDS:
            out[name] += int(numbers.get(name, 0))
        if not numbers.get("total_tokens"):
            out["total_tokens"] += int(numbers.get("input_tokens", 0) + numbers.get("output_tokens", 0))
        priced = prices.cost(key, numbers)
        if priced is None:
            unpriced.append(key)
        else:
            cost = (cost or 0.0) + priced
    out["cost_usd"] = None if cost is None else round(cost, 8)
    out["unpriced"] = unpriced
    return out


def summarize(events: Iterable[NodeEvent], prices: PriceTable) -> dict[str, Any]:
    """``{"total": {...totals, "by_model": usage}, "nodes": {node_id: {...totals,
    "by_model": usage}}}`` over ``events`` (nodes that reported nothing are absent)."""
    run = Usage()
    per_node: dict[str, Usage] = {}
    for event in events:
        usage = event_usage(event)
        if usage is None:
            continue
        run.merge(usage)
        per_node.setdefault(event.node_id, Usage()).merge(usage)
    return {
        "total": {**totals(run, prices), "by_model": run.to_json()},
        "nodes": {nid: {**totals(u, prices), "by_model": u.to_json()} for nid, u in per_node.items()},
    }


def short(total: dict[str, Any]) -> str:
    """``"168 tokens (123 in, 45 out), $0.000213"``: a one-line summary for the CLI."""
    text = f"{total.get('total_tokens', 0)} tokens ({total.get('input_tokens', 0)} in, " \
           f"{total.get('output_tokens', 0)} out)"
    cost = total.get("cost_usd")
    text += f", ${cost:.6f}" if cost is not None else ", cost unknown"
    if total.get("unpriced"):
        text += " (no price for " + ", ".join(total["unpriced"]) + ")"
    return text


class EventReader(Protocol):
    async def read_events(self, run_id: str, after: str = "0-0",
                          count: int = 1000) -> list[tuple[str, NodeEvent]]: ...


async def usage_events(store: EventReader, run_id: str) -> list[NodeEvent]:
    """The run's events that carry usage, oldest first (its whole stream is read)."""
    return (await usage_events_after(store, run_id, "0-0"))[0]


async def usage_events_after(store: EventReader, run_id: str, after: str) -> tuple[list[NodeEvent], str]:
    """The events after stream id ``after`` that carry usage, and the last id read."""
    found: list[NodeEvent] = []
    while True:
        batch = await store.read_events(run_id, after, READ_BATCH)
        found += [event for _id, event in batch if event_usage(event) is not None]
        if batch:
            after = batch[-1][0]
        if len(batch) < READ_BATCH:
            return found, after


def attach(detail: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """A run view with usage: ``detail["usage"]`` the run's totals, each node's ``usage``
    its own (nodes that reported none: absent)."""
    for node_id, node_usage in summary["nodes"].items():
        if node_id in detail.get("nodes", {}):
            detail["nodes"][node_id]["usage"] = node_usage
    detail["usage"] = summary["total"]
    return detail
