"""``orchestrator run GRAPH.json``: run a graph once and stream its events.

With ``REDIS_URL`` unset the command owns everything it needs: an embedded redis-server
and ``--workers N`` Celery worker processes, all stopped by pid when the run
ends. With ``REDIS_URL`` set it uses that Redis and the workers already serving it.

A run that waits for a person's approval (an agent tool marked ``requires_approval``) is
answered by ``--decide approve|reject`` or at a terminal prompt.

Exit codes: 0 the run succeeded, 1 it ended otherwise (failed, cancelled, timed out),
2 the graph or the input is invalid (the error's class, message and location are
printed), 3 it waits for an approval nobody gave (or a Wait node's form or callback), 130
interrupted. A Wait node's timer is waited for (this command's sweeper wakes it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console, RenderableType
from rich.highlighter import JSONHighlighter
from rich.text import Text

from orchestrator.cli.console import JsonConsole, RunConsole, data_text, json_line, print_whole, printable
from orchestrator.host.children import waited_children
from orchestrator.kernel.errors import GraphError, OrchestratorError
from orchestrator.kernel.protocol import BinaryRef, EventType, NodeEvent
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.store import NodeStatus, RunStatus
from orchestrator.local.embedded_workers import WorkerStartError
from orchestrator.settings import get_settings
from orchestrator.store import redis_client
from orchestrator.telemetry import tracing, usage
from orchestrator.telemetry.pricing import load_table

from ._signals import Terminated, interrupted_exit_code, run_async, terminate_as_interrupt

if TYPE_CHECKING:
    from orchestrator.service.runs import RunRequest
    from orchestrator.store.redis_store import RedisRunStore

Decision = Literal["approve", "reject"]
OFFLINE_ENV = "ORCH_OFFLINE_MODELS"  # agent nodes use a deterministic dry-run model
READ_BLOCK_MS = 1000
# How long stopping lets a running node finish: the embedded Redis ends with this command,
# so a warm shutdown saves nothing; Ctrl-C and SIGTERM should not wait a node out.
STOP_GRACE_S = 2.0
BARE_WORD = re.compile(r"[\w.@/:+-]+")
os.environ.setdefault("AGNO_TELEMETRY", "false")  # node packs may import agno in this process


@dataclass(frozen=True)
class FollowOptions:
    """How the command follows its run: the run's view on ``console`` (a live view, or
    JSON lines with ``as_json``), notes and errors on ``err``; and when the run waits for
    an approval, the answer ``decide`` gives (else a prompt on a terminal). With
    ``keep_waiting`` a run nobody answers stays waiting (its Redis outlives the command),
    else it is cancelled."""

    console: Console
    err: Console
    as_json: bool = False
    decide: Decision | None = None
    keep_waiting: bool = False


class InputError(ValueError):
    """The graph file or the run input cannot be read (exit code 2)."""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run", help="run a graph once and stream its events", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("graph", type=Path, help="graph JSON file")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--input", help="run input as JSON; a single bare word (letters, digits, "
                        "_.@/:+-, no spaces or quotes) is taken as a string")
    source.add_argument("--input-file", type=Path, help="file holding the run input as JSON")
    p.add_argument("--trigger", help="name or id of the trigger node to start from")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes to start when REDIS_URL is unset (default 1; each runs "
                        "up to ORCH_NODE_CONCURRENCY node steps at once)")
    p.add_argument("--offline", action="store_true",
                   help="agent nodes use a deterministic offline model (no API keys)")
    p.add_argument("--json", action="store_true", help="print one JSON event per line")
    p.add_argument("--decide", choices=["approve", "reject"],
                   help="answer every approval the run waits for (default: ask on the terminal)")
    p.add_argument("--session", help="session id (e.g. a conversation) for nodes that keep history")
    p.set_defaults(func=run_command)


# -- inputs -----------------------------------------------------------------------------


def load_graph(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"cannot read graph file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"graph file {path} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InputError(f"graph file {path} must hold a JSON object")
    return raw


def load_input(text: str | None, path: Path | None) -> Any:
    if path is not None:
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"cannot read input file {path}: {exc.strerror}") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"input file {path} is not JSON: {exc}") from None
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if is_bare_word(text):
            return text  # `--input hello` means the string "hello"
        raise InputError(f"--input is not valid JSON: {exc.msg} at line {exc.lineno} "
                         f"column {exc.colno} (char {exc.pos})\n  {text}\n  "
                         f"{' ' * exc.pos}^") from None


def is_bare_word(text: str) -> bool:
    """True for input meant as a plain string: one word of letters, digits, ``_.-@/:``
    that is not JSON-looking (no quotes, brackets, braces, commas or spaces)."""
    return BARE_WORD.fullmatch(text) is not None and not text[0].isdigit() and text[0] != "-"


def trigger_node(raw: dict[str, Any], name: str | None) -> list[str] | None:
    """The start node for ``--trigger`` (matched by name, then id); None = the graph's triggers."""
    if name is None:
        return None
    nodes = [n for n in raw.get("nodes", []) if isinstance(n, dict)]
    for key in ("name", "id"):
        for node in nodes:
            if node.get(key) == name:
                return [str(node["id"])]
    known = ", ".join(repr(n.get("name")) for n in nodes)
    raise GraphError(f"no node named {name!r} to trigger; nodes: {known}",
                     graph_id=str(raw.get("id", "graph")))


# -- output -----------------------------------------------------------------------------


def print_error(console: Console, exc: OrchestratorError) -> None:
    where = exc.where()
    console.print(Text.assemble((type(exc).__name__, "bold red"), ": ", printable(exc.message)), highlight=False)
    if where:
        console.print(Text("  at " + printable(where)), highlight=False)


def as_json_view(value: Any) -> RenderableType:
    """A value as the user sees it: a string as its text, anything else as indented JSON
    (never a Python repr: ``true``/``null``/double quotes, pasteable elsewhere). Both are
    literal text (never markup) with control characters escaped (``orchestrator.cli.console``)."""
    if isinstance(value, str):
        return data_text(value)
    return JSONHighlighter()(Text(json_line(value, indent=2)))


def _plain(value: Any) -> Any:
    return value.to_json() if isinstance(value, BinaryRef) else value


async def sink_outputs(store: RedisRunStore, plan: RunPlan,
                       run_id: str) -> dict[str, dict[str, Any]]:
    """Outputs of the nodes that ran and have no flow successor: {node name: {port: value}}."""
    states = await store.node_states(run_id)
    sinks = [n for n in plan.order
             if not plan.nodes[n].out and states.get(n) == NodeStatus.SUCCEEDED]
    stored = await store.read_outputs(run_id, sinks)
    return {
        plan.nodes[n].name: {port: _plain(dv.value) for port, dv in stored.get(n, {}).items()}
        for n in sinks
    }


async def follow(store: RedisRunStore, run_id: str, handle: Any,
                 after: str = "0-0") -> tuple[NodeEvent | None, str]:
    """Feed every event of the run to ``handle`` in order until its terminal run event,
    or until it waits for a decision (``run_waiting``). Returns (that event, its id)."""
    while True:
        batch = await store.read_events(run_id, after=after, count=500, block_ms=READ_BLOCK_MS)
        for event_id, event in batch:
            after = event_id
            handle(event_id, event)
            if not event.node_id and event.event_type in (*EventType.TERMINAL, EventType.RUN_WAITING):
                return event, after
            if child_asks(event):
                return event, after
        if not batch and await store.run_status(run_id) in RunStatus.TERMINAL:
            # terminal without a terminal event in the stream (trimmed): drain once more
            tail = await store.read_events(run_id, after=after, count=500)
            for event_id, event in tail:
                after = event_id
                handle(event_id, event)
            return None, after


def child_asks(event: NodeEvent) -> bool:
    """Is ``event`` a child run's approval question, shown on this run's waiting node
    (``orchestrator/service/child_links.py``)?"""
    data = event.data or {}  # (a Loop's copy of an ended iteration's events names a "subgraph": history)
    return event.event_type == EventType.AGENT_EVENT and data.get("event") == "approval_requested" \
        and bool(data.get("child_run")) and "subgraph" not in data


def waits_for_children(event: NodeEvent) -> bool:
    """Does this ``run_waiting`` wait for child runs (not for a decision)?"""
    return bool(waited_children((event.data or {}).get("payload")))


def _ask(console: Console, event: NodeEvent) -> Decision | None:
    """Ask on the terminal whether to approve what the run waits for (None: no terminal)."""
    if not sys.stdin.isatty():
        return None
    payload = (event.data or {}).get("payload") or {}
    calls = payload.get("tool_calls") or (event.data or {}).get("tool_calls") or payload
    print_whole(console, "the run waits for an approval", as_json_view(calls))
    answer = console.input("approve? [y/N] ").strip().lower()
    return "approve" if answer in ("y", "yes") else "reject"


async def _decide(store: RedisRunStore, run_id: str, event: NodeEvent, dispatch: Any,
                  options: FollowOptions) -> bool:
    """Answer a waiting run (``--decide`` or a prompt); False when nobody can answer."""
    from orchestrator.service.approvals import Approval, submit_approval

    decision = options.decide or _ask(options.console, event)
    if decision is None:
        return False
    if child_asks(event):  # the child run that asks, named by the question copied to this run
        data = event.data or {}
        await submit_approval(store, str(data["child_run"]), data.get("child_node_id"), Approval(decision),
                              dispatch=lambda r, n: dispatch(r, [n]))
        return True
    node_id = (event.data or {}).get("node_id")
    await submit_approval(store, run_id, node_id, Approval(decision),
                          dispatch=lambda r, n: dispatch(r, [n]))
    return True


# -- the command ------------------------------------------------------------------------


def run_command(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    try:
        raw = load_graph(args.graph)
        run_input = load_input(args.input, args.input_file)
    except InputError as exc:
        err.print(Text.assemble(("error", "bold red"), ": ", printable(str(exc))), soft_wrap=True)
        return 2
    try:
        with terminate_as_interrupt():
            return _run_owned(args, raw, run_input, console, err)
    except KeyboardInterrupt as exc:  # the ExitStack has stopped the workers and redis
        err.print("terminated" if isinstance(exc, Terminated) else "interrupted")
        return interrupted_exit_code(exc)
    except WorkerStartError as exc:  # e.g. a broker that refuses the login: its own words, one line
        err.print(Text.assemble(("error", "bold red"), ": ", printable(exc.summary)), soft_wrap=True)
        return 1


def _run_owned(args: argparse.Namespace, raw: dict[str, Any], run_input: Any,
               console: Console, err: Console) -> int:
    """Start what the run needs (embedded redis and workers when REDIS_URL is unset),
    run it, and stop what was started, whatever way this returns or raises."""
    from orchestrator.kernel.validation import validate_graph
    from orchestrator.service.plugins import get_registry

    settings = get_settings()
    worker_env = {OFFLINE_ENV: "1"} if args.offline else {}
    with ExitStack() as stack:
        url = settings.redis_url or None  # an empty REDIS_URL counts as unset
        workers = None
        began = time.monotonic()
        if url is None:
            from orchestrator.local.embedded_redis import EmbeddedRedis
            from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses

            err.print("[dim]starting an embedded redis-server (REDIS_URL is unset)…[/]")
            url = stack.enter_context(EmbeddedRedis(maxmemory_mb=settings.embedded_redis_maxmemory_mb)).url
            count = max(1, args.workers)
            workers = WorkerProcesses(url, WorkerConfig(count=count, env=worker_env,
                                                        grace_s=STOP_GRACE_S), settings=settings)
            stack.callback(workers.stop)
            err.print(f"[dim]starting {count} Celery worker process{'es' if count > 1 else ''} "
                      f"({workers.pool} pool, {workers.concurrency} node steps at once each)"
                      f"{' with offline models' if args.offline else ''}…[/]")
            workers.spawn()  # workers boot while this process loads and checks the graph
        elif args.offline:
            err.print("[yellow]note[/]: --offline only applies to workers this command starts")
        err.print("[dim]loading nodes and checking the graph…[/]")
        registry = get_registry(settings)
        try:
            start = trigger_node(raw, args.trigger)
            validate_graph(raw, registry, get_settings().graph_limits())
        except GraphError as exc:
            print_error(err, exc)
            return 2
        if workers is not None:
            err.print("[dim]waiting for the worker to be ready…[/]")
            workers.wait_ready()
            err.print(f"[dim]ready in {time.monotonic() - began:.1f} s; starting the run[/]")
        from orchestrator.service.runs import RunRequest

        request = RunRequest(run_input, start=start, session_id=args.session, limits=settings.graph_limits())
        options = FollowOptions(console, err, as_json=args.json, decide=args.decide, keep_waiting=workers is None)
        return run_async(_run(url, registry, raw, request, options))


async def _run(url: str, registry: Registry, raw: dict[str, Any], request: RunRequest,
               options: FollowOptions) -> int:
    """Start the run and follow it; exit code 3 when it waits for an approval nobody gives
    (``options.keep_waiting``: the run stays waiting in a Redis that outlives this command)."""

    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.runs import start_run, starting_for
    from orchestrator.store.redis_store import RedisRunStore

    console, err, as_json, keep_waiting = options.console, options.err, options.as_json, options.keep_waiting

    settings = get_settings()
    if tracing.configure("orchestrator-cli"):  # the run's root span, and the publish of its start nodes
        tracing.instrument_celery()
    client = redis_client.client(url, decode_responses=True)
    app = make_celery(url, settings)
    stack = AsyncExitStack()
    try:
        store = RedisRunStore(client, settings)
        try:
            run_id = await start_run(store, registry, raw, replace(request, starting=starting_for(registry, settings)),
                                     dispatch=make_dispatch(app))
        except GraphError as exc:
            print_error(err, exc)
            return 2
        plan = await store.load_plan(run_id)
        nodes = [(n, plan.nodes[n].name, plan.nodes[n].node_type) for n in plan.order]
        view: RunConsole | JsonConsole = (
            JsonConsole(console) if as_json else RunConsole(console, nodes)
        )
        dispatch = make_dispatch(app)
        # The run must end even if a worker dies: sweep while following (a deployment's
        # own sweeper may run too; passes are lock-guarded). It has its own client and is
        # stopped between passes, so no command of it is cut off half-way.
        from orchestrator.service.sweeper import Sweeper, start_sweeper, stop_sweeper

        sweeper_store = RedisRunStore(redis_client.client(url, decode_responses=True), settings)
        stack.push_async_callback(sweeper_store.close)
        stack.push_async_callback(stop_sweeper, start_sweeper(Sweeper(sweeper_store, dispatch, settings)))
        after = "0-0"
        with view:
            while True:
                event, after = await follow(store, run_id, view.handle, after)
                if event is None or event.event_type not in (EventType.RUN_WAITING, EventType.AGENT_EVENT):
                    break
                if event.event_type == EventType.RUN_WAITING and waits_for_children(event):
                    continue  # its child runs run on (a question one asks comes as an agent_event)
                wait = ((event.data or {}).get("payload") or {})
                if "wake" in wait:
                    continue  # a Wait node's timer: the sweeper above resumes it when due
                what = (f"a {wait['wait'].get('kind')} (a Wait node: answer it through the API, "
                        f"orchestrator runs waits {run_id})") if "wait" in wait else \
                    "an approval: pass --decide approve|reject"
                if "wait" in wait or not await _decide(store, run_id, event, dispatch, options):
                    err.print(f"run {run_id} waits for {what}"
                              + ("" if keep_waiting else " (the embedded run is cancelled now)"))
                    if not keep_waiting:
                        await store.finish_run(run_id, RunStatus.CANCELLED,
                                               {"message": "no one to approve (no terminal, no --decide)"})
                    return 3
        record = await store.get_run(run_id)
        outputs = await sink_outputs(store, plan, run_id)
        used = usage.summarize(await usage.usage_events(store, run_id), load_table(settings.price_table_path))
        if as_json:
            summary = {"run_id": run_id, "status": record.status, "outputs": outputs,
                       "error": record.error, "usage": used}
            console.out(json_line(summary), highlight=False)
        else:
            for name, ports in outputs.items():
                shown = next(iter(ports.values())) if len(ports) == 1 else ports
                print_whole(console, f"output of {name}", as_json_view(shown))
            style = "green" if record.status == RunStatus.SUCCEEDED else "red"
            console.print(Text.assemble(f"run {run_id}: ", (str(record.status), f"bold {style}")))
            if used["nodes"]:
                console.print(Text.assemble("usage: ", (usage.short(used["total"]), "yellow")), highlight=False)
            if record.error:
                console.print(as_json_view(record.error), soft_wrap=True)
        return 0 if record.status == RunStatus.SUCCEEDED else 1
    finally:
        await stack.aclose()
        await client.aclose()
        app.close()
        tracing.flush()


__all__ = ["add_parser", "follow", "run_command", "sink_outputs"]
