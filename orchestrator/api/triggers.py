"""Triggers from outside: webhooks (``POST /hooks/{path}``) and chat messages.

Webhooks: ``{p}:hooks`` maps a path to the graph whose ``webhook_trigger`` node has that
``data.path``. When the graph sets ``settings.webhook_secret_env`` (an environment
variable holding the secret; only a name starting with ``ORCH_WEBHOOK_SECRET_`` or listed
in ``ORCH_WEBHOOK_SECRET_ENVS``, checked when the graph is saved and again here, so a
graph cannot make another of the API's variables its HMAC key nor learn whether one is
set) or a secret was stored with ``PUT /graphs/{id}/webhook-secret``,
the request must carry ``X-Signature-256: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">``,
fresh and never used before (``signatures.py``); anything else is a 401 and starts nothing.
The node's ``response_mode``:
``immediate`` (default) answers 202 ``{run_id}``; ``wait`` waits up to ``wait_timeout_s``
for the run to end and answers 200 ``{run_id, status, output}``, or 202 if it is still going.
"""

from __future__ import annotations

import json
import os
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from orchestrator.errors import AuthError
from orchestrator.kernel.errors import GraphError, ParameterError
from orchestrator.kernel.protocol import EventType
from orchestrator.service.graph_store import WEBHOOK_NODE_TYPE, webhook_paths
from orchestrator.service.runs import RunRequest, StoredGraph
from orchestrator.settings import Settings

from .auth import role
from .event_hub import EventHub
from .launch import launch, nodes_of_type, run_detail
from .models import ChatId, ChatMessage
from .principal import Principal
from .services import Services, get_services
from .signatures import SIGNATURE_HEADER, ReplayWindow, verify

CHAT_NODE_TYPE = "chat_start"  # the trigger type a chat message starts
WEBHOOK_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 300.0
# Headers passed to the run input; credentials and the signature stay out of run state:
# these, and every header named like a credential (``X-Api-Key``, ``X-Auth-Token``,
# ``X-Webhook-Secret``: the names the worker's secret variables end in, with ``-``).
HIDDEN_HEADERS = frozenset({"authorization", "cookie", SIGNATURE_HEADER.lower(), "proxy-authorization"})
HIDDEN_HEADER_SUFFIXES = ("-key", "-keys", "-token", "-secret", "-password")


def passed_header(name: str) -> bool:
    """Whether the header ``name`` goes into a webhook run's input."""
    lowered = name.lower()
    return lowered not in HIDDEN_HEADERS and not lowered.endswith(HIDDEN_HEADER_SUFFIXES)
SECRET_ENV_PREFIX = "ORCH_WEBHOOK_SECRET_"  # noqa: S105 - the names a graph may use, not a secret

hooks = APIRouter(tags=["triggers"])
chats = APIRouter(tags=["triggers"])
SERVICES = Depends(get_services)


def secret_env_refusal(name: Any, settings: Settings) -> str | None:
    """Why a graph may not name ``name`` as its webhook secret variable (None: it may).
    The answer depends on the name only, never on whether the variable is set."""
    listed = {n.strip() for n in settings.webhook_secret_envs.split(",") if n.strip()}
    if isinstance(name, str) and (name in listed or (name.startswith(SECRET_ENV_PREFIX)
                                                     and len(name) > len(SECRET_ENV_PREFIX))):
        return None
    return (f"settings.webhook_secret_env must name a variable starting with {SECRET_ENV_PREFIX} or "
            f"one listed in ORCH_WEBHOOK_SECRET_ENVS; {name!r} is neither")


def check_secret_env(graph: Any, settings: Settings) -> None:
    """A ParameterError (422 at save) when the graph names a variable it may not."""
    name = ((graph.get("settings") if isinstance(graph, dict) else None) or {}).get("webhook_secret_env")
    refusal = secret_env_refusal(name, settings) if name else None
    if refusal is not None:
        raise ParameterError(refusal, graph_id=graph.get("id"), parameter="webhook_secret_env")


async def secret_for(services: Services, graph: dict[str, Any]) -> str | None:
    env_name = (graph.get("settings") or {}).get("webhook_secret_env")
    if env_name:
        refusal = secret_env_refusal(env_name, services.settings)
        if refusal is not None:  # a graph saved before the rule: the same answer, set or not
            raise AuthError(refusal, graph_id=graph.get("id"))
        value = os.environ.get(str(env_name))
        if not value:
            raise AuthError(
                f"the webhook secret variable {env_name!r} is not set on the server",
                graph_id=graph.get("id"),
            )
        return value
    return await services.graphs.webhook_secret(str(graph["id"]))


def parse_body(body: bytes, content_type: str) -> Any:
    if "json" in content_type.lower() and body.strip():
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise GraphError(f"webhook body is not valid JSON: {exc}", parameter="body") from None
    return body.decode(errors="replace")


async def webhook(path: str, request: Request, services: Services = SERVICES) -> JSONResponse:
    """Start the run of the graph that owns this webhook path (see the module docstring)."""
    path = path.strip("/")
    graph_id = await services.graphs.graph_for_hook(path)
    if graph_id is None:
        return JSONResponse(
            {
                "error": {
                    "type": "HTTPError",
                    "code": "not_found",
                    "message": f"no graph has a webhook at {path!r}",
                }
            },
            status_code=404,
        )
    graph = await services.graphs.get(graph_id)
    body = await request.body()
    secret = await secret_for(services, graph)
    if secret:
        window = ReplayWindow(services.redis, services.keys, tolerance_s=services.settings.webhook_tolerance_s)
        await verify(window, secret, body, request.headers.get(SIGNATURE_HEADER))
    node = next(n for n in nodes_of_type(graph, WEBHOOK_NODE_TYPE) if webhook_paths({"nodes": [n]}) == [path])
    data = node.get("data") or {}
    method = str(data.get("method") or "POST").upper()
    if request.method != method:
        return JSONResponse(
            {
                "error": {
                    "type": "HTTPError",
                    "code": "method_not_allowed",
                    "message": f"webhook {path!r} accepts {method}, not {request.method}",
                }
            },
            status_code=405,
            headers={"Allow": method},
        )
    run_input = {
        "body": parse_body(body, request.headers.get("content-type", "")),
        "headers": {k: v for k, v in request.headers.items() if passed_header(k)},
        "query": dict(request.query_params),
        "path": path,
        "method": request.method,
    }
    run_id = await launch(
        services,
        StoredGraph(graph_id, version=graph["version"]),
        RunRequest(run_input, start=[node["id"]]),
        trigger="webhook",
    )
    if data.get("response_mode") != "wait":
        return JSONResponse({"run_id": run_id, "events_url": f"/runs/{run_id}/events"}, status_code=202)
    wait_s = min(float(data.get("wait_timeout_s") or DEFAULT_WAIT_S), MAX_WAIT_S)
    if await wait_for_end(request.app.state.event_hub, run_id, wait_s):
        detail = await run_detail(services, run_id, usage_too=False)
        return JSONResponse(
            {
                "run_id": run_id,
                "status": detail["status"],
                "output": detail["output"],
                "error": detail["error"],
            }
        )
    return JSONResponse(
        {"run_id": run_id, "status": "running", "events_url": f"/runs/{run_id}/events"},
        status_code=202,
    )


for _method in WEBHOOK_METHODS:  # one route per method: distinct OpenAPI operation ids
    hooks.add_api_route("/hooks/{path:path}", webhook, methods=[_method], operation_id=f"webhook_{_method.lower()}")


async def wait_for_end(hub: EventHub, run_id: str, timeout_s: float) -> bool:
    """Follow the run through the process's event hub (no pooled connection held) until
    its terminal event; False after ``timeout_s``."""
    import anyio

    with anyio.move_on_after(max(0.0, timeout_s)):
        async for delivery in hub.subscribe(run_id, "0-0"):
            if delivery.event.event_type in EventType.TERMINAL:
                return True
        return True  # the stream ended because the run is over
    return False


@chats.post("/chats/{chat_id}/messages", status_code=202)
async def chat_message(chat_id: ChatId, body: ChatMessage, services: Services = SERVICES,
                       who: Principal = Depends(role("runner"))) -> JSONResponse:  # noqa: B008
    """Run the graph's ``chat_start`` node with ``session_id = chat_id``.

    202 ``{run_id, events_url}``; the events URL streams in the chat format.
    """
    graph = await services.graphs.get(body.graph_id, workspace=who.workspace)
    starts = nodes_of_type(graph, CHAT_NODE_TYPE)
    if not starts:
        raise GraphError(
            f"graph {body.graph_id!r} has no {CHAT_NODE_TYPE} node to receive messages",
            graph_id=body.graph_id,
            parameter="graph_id",
        )
    run_input = {"message": body.message, "chat_id": chat_id}
    run_id = await launch(
        services,
        StoredGraph(body.graph_id, version=graph["version"], workspace=who.workspace),
        RunRequest(run_input, start=[str(starts[0]["id"])], session_id=chat_id),
        trigger="chat",
    )
    return JSONResponse({"run_id": run_id, "events_url": f"/runs/{run_id}/events?format=chat"}, status_code=202)
