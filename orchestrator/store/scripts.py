"""The run store's Lua scripts (``lua/``), the arguments they take that are not plain
fields, and their replies: each script's source with the shared prelude (and
``completion.lua`` for the scripts that apply completions), the claim's named arguments,
a completion's texts and ``taken`` and budget arguments, what is stored instead of a
completion over a budget, the published-events count of what a script appended, and the
claims and ready nodes a claim's or a completion's reply holds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

from orchestrator.errors import StorageBudgetError
from orchestrator.kernel.json_text import json_value, utf8_len
from orchestrator.kernel.protocol import DataValue, EventType, NodeEvent
from orchestrator.kernel.store import Claim, ClaimRequest, NodeCompletion, NodeStatus, Ready
from orchestrator.store.creation import event_json
from orchestrator.telemetry import metrics

LUA_DIR = Path(__file__).parent / "lua"
SCRIPTS = (
    "create", "claim", "renew", "append", "dispatched", "complete", "complete_chain", "finish", "resume",
    "seed", "take", "start_guard",
)

STANDALONE = frozenset({"renew", "start_guard"})  # scripts with keys of their own (no run key layout)
COMPLETING = frozenset({"complete", "complete_chain"})  # scripts that apply completions (lua/completion.lua)


@cache
def lua_source(name: str) -> str:
    """A script with the shared prelude (key layout and helpers) in front."""
    source = (LUA_DIR / f"{name}.lua").read_text()
    if name in STANDALONE:
        return source
    if name in COMPLETING:
        source = (LUA_DIR / "completion.lua").read_text() + "\n" + source
    return (LUA_DIR / "prelude.lua").read_text() + "\n" + source


# A completion's texts in complete.lua's and complete_chain.lua's arguments, in this order,
# then its own events (as many as its named fields' `events`: completion.lua's
# completion_texts); see RedisRunStore._completion_args.
COMPLETE_TEXTS = ("outputs", "payload", "error", "run_failed", "run_waiting")
COMPLETE_EVENTS = len(COMPLETE_TEXTS)


def stored_bytes(texts: list[str]) -> int:
    """The bytes a completion's texts (``RedisRunStore._completion_args``) store: its
    outputs, its suspend payload and its events, counted against the storage budgets."""
    return utf8_len(texts[0]) + utf8_len(texts[1]) + sum(utf8_len(e) for e in texts[COMPLETE_EVENTS:])


def claim_args(request: ClaimRequest) -> dict[str, Any]:
    """lua/prelude.lua ``claim``'s named arguments (claim.lua's)."""
    return {"node": request.node_id, "lease_ms": max(1, int(request.lease_s * 1000)),
            "started": event_json(request.started), "read": list(request.read)}


def count_published(events: Iterable[NodeEvent]) -> None:
    """The events a script call appended, in the published-events metric (one increment
    per event type)."""
    for event_type, count in Counter(event.event_type for event in events).items():
        metrics.child(metrics.EVENTS_PUBLISHED, event_type).inc(count)


def with_taken(args_json: str, taken_json: str) -> str:
    """complete.lua's named arguments (a JSON object's text) with ``taken`` (JSON text, or
    '' for none) added as its last field, without encoding it again."""
    return f'{args_json[:-1]},"taken":{taken_json}}}' if taken_json else args_json


def budget_limits(limits: tuple[int, int, int]) -> str:
    """The storage budgets' limits a script counts bytes within (prelude ``charge_budget``):
    the JSON object ``{"ws_max", "run_max", "expire_at"}`` (today's counter expires then),
    written without an encoder."""
    ws_max, run_max, expire_at = limits
    return f'{{"ws_max":{int(ws_max)},"run_max":{int(run_max)},"expire_at":{int(expire_at)}}}'


def budget_json(nbytes: int, limits: tuple[int, int, int]) -> str:
    """create.lua's budget argument: ``budget_limits`` with the ``bytes`` it counts."""
    return f'{{"bytes":{int(nbytes)},{budget_limits(limits)[1:]}'


def over_budget(run_id: str, node_id: str, completion: NodeCompletion, exc: StorageBudgetError) -> NodeCompletion:
    """What is stored instead of a completion that would pass a storage budget: the node
    failed, naming the budget, and its run stops (it could store nothing more)."""
    own = next((e for e in completion.events if e.node_id == node_id), None)
    info = {**exc.to_dict(), "node_id": node_id}
    if own is not None and own.node_name:
        info["node_name"] = own.node_name
    event = NodeEvent(run_id=run_id, node_id=node_id, node_type=own.node_type if own else "",
                      node_name=own.node_name if own else None, event_type=EventType.ERROR,
                      data={"error": info, "recoverable": False, "mode": "stop"},
                      attempt=own.attempt if own else 1)
    return NodeCompletion(status=NodeStatus.FAILED, error=info, stop_run=True, events=[event])


def claim_from(reply: list[Any], seen: dict[str, str] | None = None) -> Claim:
    """A claim from the reply of lua/prelude.lua ``claim``. ``seen``: the texts the claims
    before it in the same list carried (``claims_from``), which this one gives as None."""
    kind, claims, *rest = reply
    if kind == "run":
        run_input, session_id, resume, attempt, token, workspace, *stored = rest
        if seen is not None:
            run_input = _once(seen, ":input", run_input)
        outputs = {
            stored[i]: {port: DataValue.from_json(v) for port, v in json_value(
                stored[i + 1] if seen is None else _once(seen, stored[i], stored[i + 1])).items()}
            for i in range(0, len(stored), 2)
        }
        return Claim(kind="run", claims=int(claims), run_input=json_value(run_input),
                     session_id=session_id or None, workspace=workspace or None,
                     resume=json_value(resume) if resume else None,
                     outputs=outputs, attempt=int(attempt), token=int(token))
    if kind == "early":
        return Claim(kind="early", claims=int(claims), retry_in_s=int(rest[0]) / 1000)
    return Claim(kind=kind, claims=int(claims), pending_dispatch=list(rest))


def _once(seen: dict[str, str], key: str, text: str | None) -> str:
    """``text``, kept in ``seen`` under ``key``; None: the one an earlier claim carried."""
    if text is None:
        return seen[key]
    seen[key] = text
    return text


def claims_from(granted: list[Any], claim: Callable[[list[Any], dict[str, str]], Claim]) -> dict[str, Claim]:
    """The claims of a list {node, claim reply, ...} (lua/prelude.lua ``claim_nodes``), each
    read with ``claim``: each text once in the list, so each reply is read with the texts
    of those before it. Each claim parses its own values: two nodes never share one."""
    seen: dict[str, str] = {}
    return {granted[i]: claim(granted[i + 1], seen) for i in range(0, len(granted), 2)}


def ready_from(reply: list[Any], claim: Callable[[list[Any], dict[str, str]], Claim]) -> Ready:
    """A ``Ready`` from one completion's reply (``complete`` in lua/completion.lua), each
    claim it granted read with ``claim``; a refusal for a superseded token is counted."""
    granted: dict[str, Claim] = {}
    if reply[0] == "claimed":
        granted = claims_from(reply[1], claim)
        reply = reply[2:]
    queued, backlog, *nodes = reply
    if queued == "stale":
        metrics.STALE_REFUSED.labels(action="complete").inc()
        return Ready(stale=True)
    return Ready(list(nodes), queued=int(queued), backlog=int(backlog), claims=granted)
