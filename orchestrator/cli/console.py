"""Live rendering of a run's events in a terminal (rich), or as JSON lines.

:class:`RunConsole` shows a table of node statuses that updates in place, prints one
log line per event above it, and streams text tokens carried by ``progress`` /
``agent_event`` events into a panel under the table (the whole text is printed once the
node finishes). :class:`JsonConsole` prints one JSON object per event instead, for
scripts. Both take events in stream order through ``handle(event_id, event)``.

Text from a model, a user or a node is data, never markup or terminal control: it goes to
rich as :class:`~rich.text.Text` (a ``str`` given to rich is parsed as markup, so a model's
``[/x]`` crashed the view and a ``[handbook.md, chunk 2]`` citation vanished), and
:func:`printable` shows every control character a terminal would act on (the ESC of an
ANSI sequence, C1 codes such as CSI, a carriage return) as its escape, ``\x1b``. Long text
is kept from flooding the view: the live panel shows the tail of a stream, names and event
details are cut; a finished stream and a final output are printed whole, without a frame
(soft-wrapped, so the text can be copied as it was).
"""

from __future__ import annotations

import json
import re
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from orchestrator.kernel.protocol import EventType, NodeEvent

STATUS_STYLE = {
    "pending": "dim", "running": "yellow", "retrying": "magenta", "succeeded": "green",
    "failed": "red", "skipped": "dim italic", "waiting": "cyan", "not_run": "dim strike",
    "cancelled": "yellow strike",
}
EVENT_STATUS = {
    EventType.STARTED: "running", EventType.RETRY: "retrying", EventType.COMPLETED: "succeeded",
    EventType.ERROR: "failed", EventType.SKIPPED: "skipped", EventType.NOT_RUN: "not_run",
    EventType.CANCELLED: "cancelled",
}
TOKEN_KEYS = ("delta", "token", "text")  # where a progress event's text chunk may sit
CONTENT_EVENT_SUFFIX = "RunContent"  # agent_event kinds whose "content" is a text delta
RUN_STARTED_SUFFIX = "RunStarted"  # RunStarted / TeamRunStarted carry model and provider
FORWARD_KEYS = frozenset({"subgraph", "inner_node_id", "inner_node_name", "inner_node_type"})
PREVIEW_CHARS = 100
NAME_CHARS = 60  # a node or agent name in the view's table, log lines and titles
STREAM_LINES = 8
STREAM_TAIL_CHARS = 2000  # the live panel shows at most this much of a stream's end
# What a terminal acts on: C0 controls but tab and newline, DEL, and C1 (CSI is \x9b).
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character shown as its escape (``\x1b[31m`` stays
    readable and colours nothing); tab and newline are kept."""
    return CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def data_text(text: str, style: str = "") -> Text:
    """Text from a model, a user or a node as rich shows it: literal, never markup."""
    return Text(printable(text), style=style)


def name_text(name: str) -> Text:
    """A name for a table cell or a title: literal, on one line, cut at NAME_CHARS."""
    return data_text(preview(name.replace("\n", " "), NAME_CHARS))


def token_text(event: NodeEvent) -> str | None:
    """The text chunk an event streams, if it is a token-like progress/agent event."""
    if not event.data:
        return None
    if event.event_type == EventType.AGENT_EVENT:
        content = event.data.get("content")
        kind = str(event.data.get("event", ""))
        if kind.endswith(CONTENT_EVENT_SUFFIX) and isinstance(content, str) and content:
            return content
        return None
    if event.event_type != EventType.PROGRESS:
        return None
    for key in TOKEN_KEYS:
        value = event.data.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def event_label(event: NodeEvent) -> str:
    """Who an event is about, as the user names it. An event a container forwards from its
    body (``data.subgraph``, e.g. a loop's ``"Loop[2]"``) reads ``Loop[2] > Inner``; a
    team member's agent event (``data.agent`` differs from the node) reads ``Team > Member``.
    """
    outer = event.node_name or event.node_id or "run"
    data = event.data or {}
    subgraph = data.get("subgraph")
    if isinstance(subgraph, str) and subgraph:
        inner = data.get("inner_node_name") or data.get("inner_node_id") or "?"
        outer = f"{subgraph} > {inner}"
    agent = data.get("agent") if event.event_type == EventType.AGENT_EVENT else None
    if isinstance(agent, str) and agent and agent not in (event.node_name, data.get("inner_node_name")):
        return f"{outer} > {agent}"
    return outer


def model_ran(event: NodeEvent) -> str | None:
    """``provider:id`` of the model a run-start agent event reports (the model that runs,
    e.g. ``dryrun:gpt-4o-mini`` under ``--offline``, not the one the graph configured)."""
    data = event.data or {}
    if not str(data.get("event", "")).endswith(RUN_STARTED_SUFFIX) or not data.get("model"):
        return None
    provider = data.get("model_provider")
    return f"{provider}:{data['model']}" if provider else str(data["model"])


def usage_text(usage: Any) -> str | None:
    """``"57 tokens"`` for an event's ``data.usage`` (summed over its models), else None."""
    if not isinstance(usage, dict) or not usage:
        return None
    tokens = 0
    for numbers in usage.values():
        if isinstance(numbers, dict):
            pair = numbers.get("input_tokens", 0) + numbers.get("output_tokens", 0)
            tokens += int(numbers.get("total_tokens") or pair)
    return f"{tokens} tokens"


def is_inner(event: NodeEvent) -> bool:
    """True for an event a container forwards from its body: it is not the node's own."""
    return bool((event.data or {}).get("subgraph"))


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RunConsole:
    """A live node-status table plus an event log; use as a context manager."""

    def __init__(self, console: Console, nodes: list[tuple[str, str, str]]) -> None:
        """``nodes``: (node id, name, type) in plan order."""
        self.console = console
        self.nodes = nodes
        self.status = {node_id: "pending" for node_id, _, _ in nodes}
        self.names = {node_id: name for node_id, name, _ in nodes}
        self.streams: dict[str, str] = {}
        self.started_at: float | None = None  # the first event's time: log times are relative
        self.live = Live(self._render(), console=console, refresh_per_second=12, transient=False)

    def __enter__(self) -> RunConsole:
        self.live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.live.update(self._render(), refresh=True)
        self.live.stop()
        if not self.console.is_terminal:
            self.console.line()  # the final table is printed without a line break

    def handle(self, event_id: str, event: NodeEvent) -> None:
        chunk = token_text(event)
        key = event.node_id if not is_inner(event) and event.event_type != EventType.AGENT_EVENT \
            else event_label(event)
        if chunk is not None:
            self.streams[key] = self.streams.get(key, "") + chunk
            self.names.setdefault(key, key)
        else:
            if not event.node_id and event.event_type == EventType.RUN_WAITING:
                waiting = (event.data or {}).get("node_id")
                if waiting:
                    self.status[waiting] = "waiting"
            if event.node_id and event.event_type in EVENT_STATUS and not is_inner(event):
                self.status[event.node_id] = EVENT_STATUS[event.event_type]
                if event.node_id not in self.names:
                    self.names[event.node_id] = event.node_name or event.node_id
                    self.nodes.append((event.node_id, self.names[event.node_id], event.node_type))
            ended = event.event_type in (EventType.COMPLETED, EventType.ERROR)
            if ended:  # the node's (or inner node's) streams are complete: print them whole
                prefix = event_label(event)
                for done in [k for k in self.streams
                             if k == event.node_id or k == prefix or k.startswith(prefix + " > ")]:
                    print_whole(self.console, self.names.get(done, done), data_text(self.streams.pop(done)))
            self.console.print(self._line(event))
        self.live.update(self._render())

    def _line(self, event: NodeEvent) -> Text:
        if self.started_at is None:
            self.started_at = event.timestamp
        t = f"{event.timestamp - self.started_at:7.3f}s"
        who = event_label(event)
        style = STATUS_STYLE.get(EVENT_STATUS.get(event.event_type, ""), "bold")
        line = Text.assemble((t, "dim"), " ", (f"{event.event_type:<14}", style), " ",
                             printable(preview(who, NAME_CHARS * 2)))
        if event.attempt > 1:
            line.append(f" (attempt {event.attempt})", style="magenta")
        used = usage_text((event.data or {}).get("usage"))
        if used:
            line.append(f"  [{used}]", style="yellow")
        if event.event_type == EventType.AGENT_EVENT and event.data:
            line.append(f"  {printable(preview(str(event.data.get('event', '')), NAME_CHARS))}", style="cyan")
            ran = model_ran(event)
            if ran:
                line.append(f"  model {printable(preview(ran, NAME_CHARS))}", style="dim")
        elif data := {k: v for k, v in (event.data or {}).items() if k not in FORWARD_KEYS}:
            detail: Any = data.get("error") or data.get("message") or data
            if isinstance(detail, dict) and isinstance(detail.get("outputs"), dict):
                # A port the event carries cut short holds a "preview" instead of its value.
                detail = {port: dv.get("value", dv.get("preview")) if isinstance(dv, dict) else dv
                          for port, dv in detail["outputs"].items()}
            line.append("  " + printable(preview(detail)), style="dim")
        return line

    def _render(self) -> Group:
        table = Table(show_header=True, header_style="bold", expand=False)
        table.add_column("node")
        table.add_column("type", style="dim")
        table.add_column("status")
        for node_id, name, node_type in self.nodes:
            status = self.status.get(node_id, "pending")
            table.add_row(name_text(name), name_text(node_type), Text(status, style=STATUS_STYLE.get(status, "")))
        parts: list[Any] = [table]
        for node_id, text in self.streams.items():
            tail = "\n".join(text[-STREAM_TAIL_CHARS:].splitlines()[-STREAM_LINES:])
            title = name_text(self.names.get(node_id, node_id)).append(" (streaming)")
            parts.append(Panel(data_text(tail), title=title))
        return Group(*parts)


def print_whole(console: Console, title: str, body: RenderableType) -> None:
    """``body`` under a rule naming ``title``, soft-wrapped: printed whole and verbatim (no
    frame cuts a line or adds characters to it)."""
    console.print(Rule(name_text(title), align="left"))
    console.print(body, soft_wrap=True)


class JsonConsole:
    """One JSON object per event on stdout (``{"id": <stream id>, ...event}``)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> JsonConsole:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def handle(self, event_id: str, event: NodeEvent) -> None:
        line = json_line({"id": event_id, **event.to_json()})
        self.console.out(line, highlight=False)


def json_line(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON with every control character escaped: JSON escapes C0 itself, and
    C1 (which a terminal may act on) becomes ``\\u009b``, still the same JSON string."""
    text = json.dumps(value, default=str, ensure_ascii=False, indent=indent)
    return CONTROL_CHARS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
