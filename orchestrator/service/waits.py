"""Wait nodes: answer a form, resume by a signed URL, wake on a timer.

A Wait node (``nodes/flow/wait``) suspends with ``{"wait": {"kind", ...}, "wake"?}``
(see its executor). This module resumes it, through the store's atomic ``resume_node``
(``resume.lua``: only a ``waiting`` node of an active run moves back to pending), so
whichever answer comes first wins and every later one is refused with
:class:`WaitAnsweredError` (409):

* :func:`submit_form`: a person's data, validated against the node's ``form_schema``
  (:class:`FormError`, a 422 naming the field), becomes the node's output;
* :func:`resume_by_url`: ``POST /resume/{run}/{node}?exp=&sig=``; ``sig`` is an HMAC-SHA256
  over run, node and expiry with ``ORCH_RESUME_URL_SECRET`` (:func:`sign`); a bad or expired
  signature is :class:`ResumeLinkError` (403) with one message whatever was wrong, so a
  caller learns nothing of what exists; the JSON body becomes the output;
* :func:`wake_due`: each sweeper pass resumes the nodes whose timer is due on Redis's
  clock (``orchestrator/store/waits.py``) with the ``wake.input`` of their payload
  (``{"via": "time"}`` or ``{"via": "timeout"}``).

Each resume removes the node's timer and dispatches the node, as approvals do.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from orchestrator.errors import ForbiddenError
from orchestrator.kernel.errors import ParameterError, RunError, RunNotFoundError
from orchestrator.kernel.store import NodeStatus, RunStatus
from orchestrator.store.redis_store import RedisRunStore

log = logging.getLogger("orchestrator.service.waits")
DispatchFn = Callable[[str, str], Awaitable[Any] | Any]
LINK_REFUSED = "invalid or expired resume link"


class WaitAnsweredError(RunError):
    """The node is not waiting (any more): answered already, timed out, or its run ended."""

    code = "wait_answered"


class FormError(ParameterError):
    """Submitted form data that does not match the node's form schema (422, naming the field)."""

    code = "form"


class ResumeLinkError(ForbiddenError):
    """A resume URL whose signature is wrong or expired (403; says nothing more)."""

    code = "resume_link"


@dataclass(frozen=True)
class WaitInfo:
    """A waiting Wait node as the API, console and chat show it."""

    node_id: str
    kind: str
    message: str
    schema: dict[str, Any] | None
    timeout_s: float | None
    due_at: float | None

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "kind": self.kind, "message": self.message,
                "schema": self.schema, "timeout_s": self.timeout_s, "due_at": self.due_at}


def sign(secret: str, run_id: str, node_id: str, expires: int) -> str:
    message = f"{run_id}\n{node_id}\n{expires}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def resume_path(secret: str, run_id: str, node_id: str, expires: int) -> str:
    """The path (and query) of a node's signed resume URL."""
    return f"/resume/{run_id}/{node_id}?exp={expires}&sig={sign(secret, run_id, node_id, expires)}"


@dataclass(frozen=True)
class ResumeLink:
    """What a resume URL carries: the run and node in its path, ``exp`` and ``sig`` (as sent)."""

    run_id: str
    node_id: str
    expires: str
    sig: str


def check_signature(secret: str, link: ResumeLink, now: float) -> None:
    """``ResumeLinkError`` unless ``link.sig`` signs its run, node and expiry under ``secret``
    and ``now`` (Redis's clock) is before that expiry."""
    ok = bool(secret) and link.expires.isdigit() and len(link.expires) <= 12
    expected = sign(secret, link.run_id, link.node_id, int(link.expires)) if ok else ""
    if not (hmac.compare_digest(expected.encode(), link.sig.encode()) and ok and now < int(link.expires)):
        raise ResumeLinkError(LINK_REFUSED)


async def _wait_payload(store: RedisRunStore, run_id: str, node_id: str) -> dict[str, Any]:
    """The node's ``wait`` payload while it waits; ``WaitAnsweredError`` (409) otherwise."""
    states = await store.node_states(run_id)
    record = await store.get_run(run_id)
    if states.get(node_id) is None:
        raise RunNotFoundError(f"run {run_id} has no node {node_id!r}", run_id=run_id,
                               node_id=node_id)
    payload = await store.suspended_payload(run_id, node_id) or {}
    wait = payload.get("wait")
    if not isinstance(wait, dict):
        if states[node_id] == NodeStatus.WAITING:
            raise WaitAnsweredError(f"node {node_id!r} waits for an approval, not a Wait answer",
                                    run_id=run_id, node_id=node_id)
        raise WaitAnsweredError(f"node {node_id!r} is not a waiting Wait node "
                                f"(it is {states[node_id]})", run_id=run_id, node_id=node_id)
    if states[node_id] != NodeStatus.WAITING or record.status not in RunStatus.ACTIVE:
        raise WaitAnsweredError(f"node {node_id!r} is no longer waiting (it is {states[node_id]}, "
                                f"the run {record.status}): it was answered already",
                                run_id=run_id, node_id=node_id)
    return wait


async def waiting(store: RedisRunStore, run_id: str) -> list[WaitInfo]:
    """The run's Wait nodes that wait now."""
    states = await store.node_states(run_id)
    out: list[WaitInfo] = []
    for node_id in sorted(n for n, s in states.items() if s == NodeStatus.WAITING):
        wait = (await store.suspended_payload(run_id, node_id) or {}).get("wait")
        if isinstance(wait, dict):
            out.append(WaitInfo(node_id=node_id, kind=str(wait.get("kind")),
                                message=str(wait.get("message") or ""), schema=wait.get("schema"),
                                timeout_s=wait.get("timeout_s"),
                                due_at=await store.timers.due_at(run_id, node_id)))
    return out


def check_form(schema: dict[str, Any], data: Any, run_id: str, node_id: str) -> None:
    """``FormError`` naming the first field that does not match (the schema has no regexes:
    the Wait node refuses pattern keywords)."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        field = ".".join(str(p) for p in error.absolute_path) or None
        where = f"form field {field!r}" if field else "the form"
        raise FormError(f"{where}: {error.message}", run_id=run_id, node_id=node_id,
                        parameter=f"data.{field}" if field else "data")


async def _resume(store: RedisRunStore, run_id: str, node_id: str, answer: dict[str, Any],
                  dispatch: DispatchFn) -> None:
    if not await store.resume_node(run_id, node_id, answer):
        raise WaitAnsweredError(f"node {node_id!r} is no longer waiting: it was answered already",
                                run_id=run_id, node_id=node_id)
    await store.timers.remove(run_id, node_id)
    sent = dispatch(run_id, node_id)
    if inspect.isawaitable(sent):
        await sent


async def submit_form(store: RedisRunStore, run_id: str, node_id: str, data: Any, *,
                      dispatch: DispatchFn) -> None:
    """Resume a form wait with ``data`` (checked against its schema first)."""
    wait = await _wait_payload(store, run_id, node_id)
    if wait.get("kind") != "form":
        raise WaitAnsweredError(f"node {node_id!r} waits for a {wait.get('kind')}, not a form",
                                run_id=run_id, node_id=node_id)
    check_form(wait.get("schema") or {"type": "object"}, data, run_id, node_id)
    await _resume(store, run_id, node_id, {"via": "form", "data": data}, dispatch)


async def resume_by_url(store: RedisRunStore, run_id: str, node_id: str, data: Any, *,
                        dispatch: DispatchFn) -> None:
    """Resume a url wait with the callback's body (call after :func:`check_signature`)."""
    try:
        wait = await _wait_payload(store, run_id, node_id)
    except RunNotFoundError:
        raise ResumeLinkError(LINK_REFUSED) from None  # a signed link to nothing: say nothing
    if wait.get("kind") != "url":
        raise ResumeLinkError(LINK_REFUSED)
    await _resume(store, run_id, node_id, {"via": "url", "data": data}, dispatch)


async def url_wait(store: RedisRunStore, run_id: str, node_id: str) -> dict[str, Any]:
    """The ``wait`` payload of a node that waits for its resume URL (409 / 404 otherwise)."""
    wait = await _wait_payload(store, run_id, node_id)
    if wait.get("kind") != "url":
        raise WaitAnsweredError(f"node {node_id!r} waits for a {wait.get('kind')}, not a resume URL",
                                run_id=run_id, node_id=node_id)
    return wait


async def wake_due(store: RedisRunStore, dispatch: DispatchFn, now: float) -> list[tuple[str, str]]:
    """Resume every waiting node whose timer is due at ``now`` (Redis's clock); the
    (run, node) pairs resumed. Entries of nodes that resumed otherwise, finished or whose run
    ended are dropped; a node still running (its suspension not stored yet) keeps its entry."""
    woken: list[tuple[str, str]] = []
    for run_id, node_id in await store.timers.due(now):
        state = (await store.node_states(run_id)).get(node_id)
        if state == NodeStatus.WAITING:
            payload = await store.suspended_payload(run_id, node_id) or {}
            answer = dict((payload.get("wake") or {}).get("input") or {"via": "time"})
            if await store.resume_node(run_id, node_id, {**answer, "at": now}):
                woken.append((run_id, node_id))
                log.info("run %s node %s woken (%s)", run_id, node_id, answer.get("via"))
                sent = dispatch(run_id, node_id)
                if inspect.isawaitable(sent):
                    await sent
        elif state in (NodeStatus.RUNNING, NodeStatus.PENDING):
            try:
                if (await store.get_run(run_id)).status in RunStatus.ACTIVE:
                    continue  # suspending right now, or resumed and not yet claimed: keep
            except RunNotFoundError:
                pass
        await store.timers.remove(run_id, node_id)
    return woken
