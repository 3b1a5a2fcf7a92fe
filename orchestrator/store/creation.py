"""What create.lua is given for a run (``RedisRunStore.create_run``): the compiled plan's
encoded parts, the plan data a stored graph version's runs share (``Keys.plan_data``), the
start guard of a stored graph's run, the run events' templates, and a start node's
completion with its effect on the fresh run. Each is built once per
compiled plan (kept in ``plan.memo``, which every run of the plan shares), so a start
encodes only what is its own: the run id, labels and input."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from orchestrator.errors import GraphConflictError
from orchestrator.kernel.json_text import json_encoder
from orchestrator.kernel.lookahead import plan_graph, step_reads
from orchestrator.kernel.protocol import DataValue, EventType, NodeEvent
from orchestrator.kernel.scheduling import RunPlan, start_effect
from orchestrator.kernel.store import RunStatus

dumps = json_encoder(compact=True)  # built once (kernel/json_text.py): several calls per node step


def event_json(event: NodeEvent) -> str:
    """The event's JSON with ``timestamp`` first (lua/prelude.lua ``stamped`` needs it there):
    the fields of ``NodeEvent.to_json``, put in that order as the object is built (two or
    three events per node step; ``tests/store/test_event_json.py`` holds it to ``to_json``)."""
    return dumps({"timestamp": event.timestamp, "run_id": event.run_id, "node_id": event.node_id,
                  "node_type": event.node_type, "node_name": event.node_name, "event_type": event.event_type,
                  "data": event.data, "attempt": event.attempt})


def completed_json(event: NodeEvent, outputs: Mapping[str, DataValue], outputs_json: str) -> str:
    """``event_json(event)`` for a ``completed`` event whose data shows ``outputs`` whole
    (first, as ``{port: {type, value}}``, in their order: the step's preview of outputs that
    were not cut), with ``outputs_json`` (``dumps`` of those outputs, the text the store
    keeps) written in their place instead of encoding them a second time. The same text;
    any other event or data is encoded as :func:`event_json` does."""
    data = event.data
    if type(data) is not dict or next(iter(data), None) != "outputs":
        return event_json(event)
    shown = data["outputs"]
    if type(shown) is not dict or not _shows_whole(shown, outputs):
        return event_json(event)
    rest = dumps({k: v for k, v in data.items() if k != "outputs"})
    head = dumps({"timestamp": event.timestamp, "run_id": event.run_id, "node_id": event.node_id,
                  "node_type": event.node_type, "node_name": event.node_name, "event_type": event.event_type})
    data_json = f'{{"outputs":{outputs_json}{"," + rest[1:] if len(rest) > 2 else "}"}'
    return f'{head[:-1]},"data":{data_json},"attempt":{dumps(event.attempt)}}}'


def _shows_whole(shown: dict[str, Any], outputs: Mapping[str, DataValue]) -> bool:
    """Whether ``shown`` is ``{port: dv.to_json()}`` of ``outputs``, in their order, each
    value the output's own object (so its JSON is the same text)."""
    if len(shown) != len(outputs):
        return False
    for (port, whole), (name, dv) in zip(shown.items(), outputs.items(), strict=True):
        if port != name or type(whole) is not dict or len(whole) != 2 or list(whole) != _TYPE_VALUE \
                or whole["value"] is not dv.value or whole["type"] != dv.type:
            return False
    return True


_TYPE_VALUE = ["type", "value"]  # DataValue.to_json's keys, in its order


def encoded(plan: RunPlan) -> tuple[str, str, str, str]:
    """create.lua's plan arguments except the run id and labels: the plan JSON without
    them, the pending counts, the adjacency and the start nodes; built once per compiled
    plan (kept in ``plan.memo``)."""
    cached = plan.memo.get("redis_create")
    if cached is None:
        raw = plan.to_json()
        body = {k: v for k, v in raw.items() if k not in ("run_id", "labels")}
        pending = [x for n, p in plan.nodes.items() for x in (n, p.pending)]  # flat: create.lua's variadic HSET
        cached = (dumps(body), dumps(pending), dumps(adjacency_fields(plan)), dumps(plan.start))
        plan.memo["redis_create"] = cached
    return cast(tuple[str, str, str, str], cached)


SHARED_DIGEST_CHARS = 32  # hex digits of sha256 naming shared plan data (128 bits)
# Of the plan data's fields: 2 added ":claim:<node>"; 3 moved it into the node's adjacency
# field (after a newline), and each node's initial count from ":pending:<node>" onto its
# in-edges (each out edge carries its target's).
PLAN_DATA_FORMAT = "3"
SharedArgs = tuple[str, str] | None  # a run's shared plan data: its key and create.lua's data ARGV


@dataclass(frozen=True)
class SharedPlan:
    """The plan data every run of one compiled plan shares (``Keys.plan_data``): its
    digest (of the plan JSON without run id and labels) and create.lua's ARGV that fills
    the key (one flat list: adjacency, ``:plan``; each node's initial count is on its
    in-edges, in its sources' adjacency)."""

    digest: str
    data: str


def shared_plan(plan: RunPlan) -> SharedPlan:
    """The plan's :class:`SharedPlan`, built once per compiled plan (kept in ``plan.memo``)."""
    cached = plan.memo.get("redis_shared")
    if cached is None:
        body = encoded(plan)[0]
        data = dumps([*adjacency_fields(plan), ":plan", body])
        # The format is part of the name: plan data an older release wrote (without the
        # fields this one's scripts read) is never taken for this one's.
        digest = hashlib.sha256(f"{PLAN_DATA_FORMAT}\n{body}".encode()).hexdigest()[:SHARED_DIGEST_CHARS]
        cached = plan.memo["redis_shared"] = SharedPlan(digest, data)
    return cast(SharedPlan, cached)


@dataclass(frozen=True)
class StartGuard:
    """What create.lua checks before it creates a run of a stored graph (see there): the
    graph's hash and run index keys, the creation time and workspace the plan was
    compiled for, its version and whether that must be the latest, and how long the run
    index keeps a run id."""

    graph_key: str
    runs_key: str
    created_at: str
    workspace: str
    version: int
    latest: bool
    keep_s: int

    def to_json(self) -> str:
        return dumps({"created_at": self.created_at, "workspace": self.workspace, "version": self.version,
                       "latest": self.latest, "keep_s": self.keep_s})


class StaleGraphError(GraphConflictError):
    """A start guard refused the run: the stored graph moved on (a new version, deleted)
    since its plan was compiled. Nothing was stored; the starter compiles again and
    retries (a 409 only if the graph keeps changing under it)."""


def adjacency_fields(plan: RunPlan) -> list[str]:
    """The adjacency hash's fields, flat (node id, value, ...), built once per compiled plan
    (kept in ``plan.memo``). A node's value is two JSON texts on two lines. The first is
    what a completion's countdown reads: ``out``, the node's flow out-edges as [edge id,
    target, source handle, target handle, the target's flow in-edges] (the last is what a
    shared plan's run counts its target's arrivals down from: no read of its ``:pending:``
    field); ``required`` and ``in_ports`` (should-run); ``type``, ``name`` and ``rank``
    (its events, plan order). The second, decoded only when a completion or a drain claims
    the node (``Take.claim_taken``): ``ids``, the node's part of its ``started`` event JSON
    (id, type and name, as ``event_json`` writes them), and ``read``, what its step reads
    (``lookahead.step_reads``). JSON text holds no raw newline."""
    cached = plan.memo.get("redis_adjacency")
    if cached is None:
        in_ports: dict[str, list[str]] = {n: [] for n in plan.order}
        for node in plan.nodes.values():
            for edge in node.out:
                if edge.target_handle not in in_ports[edge.target]:
                    in_ports[edge.target].append(edge.target_handle)
        graph = plan_graph(plan)
        cached = []
        for rank, nid in enumerate(plan.order):
            node = plan.nodes[nid]
            adjacency = {
                "out": [[e.edge_id, e.target, e.source_handle, e.target_handle, plan.nodes[e.target].pending]
                        for e in node.out],
                "required": list(node.required),
                "in_ports": in_ports[nid],
                "type": node.node_type,
                "name": node.name,
                "rank": rank,
            }
            ids = dumps({"node_id": nid, "node_type": node.node_type, "node_name": node.name})[1:-1]
            cached += [nid, f'{dumps(adjacency)}\n{dumps({"ids": ids, "read": step_reads(plan, graph, nid)})}']
        plan.memo["redis_adjacency"] = cached
    return cast(list[str], cached)


def started_parts(run_id: str, started_data: str) -> tuple[str, str]:
    """The ``started`` event JSON of a node of run ``run_id`` with ``started_data`` (JSON)
    as its data, around the node's ``ids`` (``adjacency_fields``): complete.lua joins the three."""
    head = f'{{"timestamp":0,"run_id":{dumps(run_id)},'
    tail = f',"event_type":"{EventType.STARTED}","data":{started_data},"attempt":1}}'
    return head, tail


RUN_PLACEHOLDER = '"@run@"'  # the run id in RUN_TEMPLATES (JSON-quoted)
RUN_TEMPLATES = (
    event_json(NodeEvent(run_id="@run@", node_id="", node_type="", event_type=EventType.RUN_COMPLETED,
                          data={"status": RunStatus.SUCCEEDED, "error": None})),
    event_json(NodeEvent(run_id="@run@", node_id="", node_type="", event_type=EventType.SKIPPED)),
)


def started_json(plan: RunPlan, graph_id: str) -> str:
    """The run's ``run_started`` event JSON (create.lua stamps its time): from a template
    built once per compiled plan and graph (kept in ``plan.memo``), the run id put in."""
    key = f"redis_started:{graph_id}"
    template = plan.memo.get(key)
    if template is None:
        template = plan.memo[key] = event_json(NodeEvent(
            run_id="@run@", node_id="", node_type="", event_type=EventType.RUN_STARTED,
            data={"graph_id": graph_id, "start": plan.start}))
    return cast(str, template).replace(RUN_PLACEHOLDER, dumps(plan.run_id), 1)


START_COUNTED_FROM = 4 * 1024  # a start node's completion this large counts toward the storage budgets


@dataclass(frozen=True)
class Completing:
    """create.lua's arguments for a start node's completion: its ARGV from ARGV[17] on,
    and its storage budget's day counters (keys)."""

    args: list[Any]
    budget_keys: list[Any]


@dataclass(frozen=True)
class CreateExtra:
    """What a create.lua call carries besides the run: the shared plan data's key and
    data (or None), and a start node's completion (or None)."""

    shared: SharedArgs
    completing: Completing | None = None


def effect_json(plan: RunPlan, node_id: str, live: frozenset[str]) -> str:
    """create.lua's ARGV[17] for a start node's completion, without its closing brace and
    budget count: the node and its effect on a fresh run (``scheduling.start_effect``),
    encoded once per plan and live ports (``plan.memo``, shared by its runs)."""
    known: dict[tuple[str, frozenset[str]], str] = plan.memo.setdefault("redis_start_effect", {})
    text = known.get((node_id, live))
    if text is None:
        effect = start_effect(plan, node_id, live)
        body = dumps({
            "node": node_id, "ready": effect.ready, "skipped": effect.skipped,
            "arrivals": [x for n, count in effect.arrivals.items() for x in (n, count)],
            "live": [x for n, ports in effect.live.items() for p, count in ports.items() for x in (f"{n}|{p}", count)],
            "remaining": effect.remaining, "finished": effect.finished})
        text = known[(node_id, live)] = body[:-1]
    return text


def created_reply(reply: Any) -> tuple[int, list[str]]:
    """create.lua's reply {verdict, nodes...}: the verdict, and the nodes a start node's
    completion made ready (verdict 2)."""
    return int(reply[0]), [str(n) for n in reply[1:]]
