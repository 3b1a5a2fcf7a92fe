"""``orchestrator runs start GRAPH_ID --input JSON | status ID | events ID | cancel ID | rerun ID NODE
| waits ID | answer ID NODE --data JSON``.

``waits`` lists what a run's Wait nodes wait for; ``answer`` submits a Wait node's form.

``start`` prints the new run's id on stdout; with ``--follow`` stdout carries only the
run's events (one JSON object per line) and the id goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from orchestrator.kernel.errors import OrchestratorError
from orchestrator.kernel.protocol import EventType

from ._remote import add_action, add_connection_args, client, emit, fail


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("runs", help="start and follow runs through the API",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_args(p)
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = add_action(sub, "start", "start a run of a stored graph (prints its id)")
    start.add_argument("graph_id", help="the stored graph's id")
    start.add_argument("--input", default="null", help="run input as JSON (default null)")
    start.add_argument("--trigger", default=None, help="trigger node id or name")
    start.add_argument("--session", default=None, help="session id")
    start.add_argument("--follow", "-f", action="store_true",
                       help="stream events (JSON lines on stdout) to the end; the run id "
                            "then goes to stderr")
    status = add_action(sub, "status", "print a run's status, nodes and output")
    status.add_argument("run_id", help="the run's id")
    events = add_action(sub, "events", "stream a run's events (JSON lines) to its end")
    events.add_argument("run_id", help="the run's id")
    events.add_argument("--after", default=None, help="resume after this event id")
    cancel = add_action(sub, "cancel", "cancel a run")
    cancel.add_argument("run_id", help="the run's id")
    rerun = add_action(sub, "rerun", "re-run a finished run from a node")
    rerun.add_argument("run_id", help="the finished run's id")
    rerun.add_argument("from_node", help="node id or name to re-run from")
    waits = add_action(sub, "waits", "list what a run's Wait nodes wait for")
    waits.add_argument("run_id", help="the run's id")
    answer = add_action(sub, "answer", "submit the form a Wait node waits for")
    answer.add_argument("run_id", help="the waiting run's id")
    answer.add_argument("node_id", help="the Wait node's id")
    answer.add_argument("--data", default="{}", help="the form's data as a JSON object")
    p.set_defaults(func=runs_command)


def runs_command(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (OrchestratorError, ValueError) as exc:
        return fail(str(exc))


def _follow(api: Any, run_id: str, after: str | None = None) -> int:
    last: dict[str, Any] = {}
    for event_id, event in api.iter_events(run_id, after):
        print(json.dumps({"id": event_id, **event}), flush=True)
        last = event
    return 0 if last.get("event_type") == EventType.RUN_COMPLETED else 1


def _run(args: argparse.Namespace) -> int:
    with client(args) as api:
        if args.action == "start":
            try:
                run_input = json.loads(args.input)
            except json.JSONDecodeError as exc:
                return fail(f"--input is not valid JSON: {exc}", 2)
            run_id = api.start_run(
                args.graph_id, run_input, trigger=args.trigger, session_id=args.session
            )
            if not args.follow:
                print(run_id, flush=True)
                return 0
            print(f"started run {run_id}", file=sys.stderr, flush=True)
            return _follow(api, run_id)
        if args.action == "status":
            emit(api.get_run(args.run_id))
        elif args.action == "events":
            return _follow(api, args.run_id, args.after)
        elif args.action == "cancel":
            emit(api.cancel(args.run_id))
        elif args.action == "rerun":
            print(api.rerun(args.run_id, args.from_node))
        elif args.action == "waits":
            emit(api.waits(args.run_id))
        elif args.action == "answer":
            try:
                data = json.loads(args.data)
            except json.JSONDecodeError as exc:
                return fail(f"--data is not valid JSON: {exc}", 2)
            api.submit_form(args.run_id, args.node_id, data)
            print(f"answered node {args.node_id} of run {args.run_id}", file=sys.stderr)
    return 0
