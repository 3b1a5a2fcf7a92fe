"""HTTP Request: one request through the egress policy -> ``{status, headers, body, url, elapsed_ms}``.

The request itself is ``orchestrator/host/http.py`` (egress, credential auth, size limit,
status handling, retry on 429/5xx), imported with httpx when the node runs, not at node
discovery. The body is decoded by ``response_format``: ``json``,
``text``, or ``binary`` (stored through the file store and output as a file reference,
``{"$binary": {ref, mime, size}}``); ``auto`` picks by content type, and any body above
``inline_max_bytes`` becomes a file reference too, so large payloads stay out of the
run state. The credential's secret values are masked in the output (a server may echo them).

Pagination (optional): ``next_url`` follows a URL in each JSON page, ``link_header`` the
``Link: <...>; rel="next"`` header, up to ``max_pages``; every page goes through the same
client (egress policy, credential) and the output ``body`` is the pages' items joined.
With a credential, a next URL on an origin the credential does not allow fails the node
(naming the credential and the origin) rather than being fetched: the pages come from
the API the credential is for, and a page link elsewhere is a server steering the node
(an unauthenticated page would fail anyway, or mix another server's items in). Redirects
are different: a cross-origin hop is followed without the credential
(``orchestrator/host/http.py``).

``idempotency_key`` (off by default: the key names the run and the node to the server)
sends ``Idempotency-Key: <ctx.execution_key>``, the same for every execution of one
attempt, so a request sent again because its worker was lost is applied once by a server
that deduplicates on it; page N > 1 of a paginated read sends ``<key>:page-N``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from nodes._rag.services import as_text
from nodes._shared.paths import get_path
from nodes._shared.values import result
from orchestrator.host.credentials import mask
from orchestrator.host.files import as_binary_ref
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import NodeExecutionError, ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

if TYPE_CHECKING:
    from orchestrator.host.http import HttpCall, HttpResponse


def _object(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise ParameterError(f"parameter '{name}' must be an object", parameter=name)
    return {str(k): v for k, v in value.items()}


def _int(data: dict[str, Any], name: str, default: int) -> int:
    value = data.get(name)
    return default if value is None else int(value)


async def _body(call: HttpCall, data: dict[str, Any], ctx: FlowContext) -> None:
    kind = as_text(data.get("body_type")) or "none"
    body = data.get("body")
    content_type = as_text(data.get("content_type"))
    if kind == "none":
        return
    if kind == "json":
        call.json = body
    elif kind == "form":
        if not isinstance(body, dict):
            raise ParameterError("body_type 'form' needs an object body", parameter="body")
        call.form = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in body.items()}
    elif kind == "raw":
        call.content = as_text(body).encode()
        call.headers.setdefault("Content-Type", content_type or "text/plain; charset=utf-8")
    elif kind == "binary":
        ref = as_binary_ref(body)
        if ref is None:
            raise ParameterError("body_type 'binary' needs a file reference ({\"$binary\": {\"ref\": ...}})",
                                 parameter="body")
        async with node_host(ctx).blobs(ctx.run_id) as blobs:
            blob = await blobs.get(ref)
        call.content = blob.data
        call.headers.setdefault("Content-Type", content_type or blob.mime)
    else:
        raise ParameterError(f"parameter 'body_type' must be none, json, form, raw or binary; got {kind!r}",
                             parameter="body_type")


async def _decode(response: HttpResponse, fmt: str, inline_max_bytes: int, ctx: FlowContext) -> Any:
    mime = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if fmt == "auto":
        is_json = mime == "application/json" or mime.endswith("+json")
        is_text = mime.startswith("text/") or mime in ("application/xml", "application/javascript") or not mime
        fmt = "json" if is_json else "text" if is_text else "binary"
    if fmt != "binary" and len(response.content) <= inline_max_bytes:
        if fmt == "json":
            if not response.content:
                return None
            try:
                return json.loads(response.content)
            except ValueError:
                raise NodeExecutionError(f"response of {response.url} is not JSON (status {response.status}); "
                                         "set response_format to text") from None
        return response.content.decode("utf-8", "replace")
    async with node_host(ctx).blobs(ctx.run_id) as blobs:
        ref = await blobs.put(response.content, mime=mime or "application/octet-stream",
                              name=response.url.rsplit("/", 1)[-1][:200])
    return ref.to_json()


def _next_url(data: dict[str, Any], response: HttpResponse, body: Any, call: HttpCall) -> str | None:
    mode = as_text(data.get("pagination")) or "none"
    if mode == "link_header":
        import httpx

        link = httpx.Response(200, headers={"link": response.headers.get("link", "")}).links.get("next")
        found = link.get("url") if link else None
    elif mode == "next_url":
        found = get_path(body, as_text(data.get("next_url_field")) or "next")
    else:
        return None
    return urljoin(call.url, found) if isinstance(found, str) and found else None


def _items(data: dict[str, Any], body: Any, page: int) -> list[Any]:
    field = as_text(data.get("items_field"))
    items = get_path(body, field) if field else body
    if not isinstance(items, list):
        where = f"at {field!r}" if field else "(set parameter 'items_field')"
        raise NodeExecutionError(f"page {page} has no list of items {where}")
    return items


class HttpRequest:
    node_type = "http_request"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        from orchestrator.host.http import HttpCall, fetch

        url = as_text(data.get("url")).strip()
        if not url:
            raise ParameterError("parameter 'url' is required", parameter="url")
        call = HttpCall(
            method=as_text(data.get("method")) or "GET", url=url,
            query={k: v if isinstance(v, str) else json.dumps(v) for k, v in _object(data, "query").items()},
            headers={k: as_text(v) for k, v in _object(data, "headers").items()},
            timeout_s=float(data.get("timeout_s") or 30), follow_redirects=bool(data.get("follow_redirects", True)),
            max_redirects=_int(data, "max_redirects", 5),
            max_bytes=int(data.get("max_bytes") or 32 << 20), credential=as_text(data.get("credential")),
            fail_on_status=bool(data.get("fail_on_status", True)),
            retry_statuses=bool(data.get("retry_on_status", True)))
        await _body(call, data, ctx)
        keyed = bool(data.get("idempotency_key")) and not any(k.lower() == "idempotency-key" for k in call.headers)
        if keyed:
            call.headers["Idempotency-Key"] = ctx.execution_key
        response = await fetch(ctx, call)
        inline = _int(data, "inline_max_bytes", 1 << 20)
        fmt = as_text(data.get("response_format")) or "auto"
        body = await _decode(response, fmt, inline, ctx)
        if (as_text(data.get("pagination")) or "none") != "none":
            items, pages = _items(data, body, 1), 1
            max_pages = _int(data, "max_pages", 10)
            while pages < max_pages and (next_url := _next_url(data, response, body, call)):
                refusal = response.credential.refusal(next_url) if response.credential else None
                if refusal is not None:
                    raise NodeExecutionError(f"page {pages + 1} is on another origin and is not fetched: "
                                             f"{mask(refusal, response.secrets)}")
                call.url, call.query = next_url, {}  # the next URL carries its own query
                if keyed:
                    call.headers["Idempotency-Key"] = f"{ctx.execution_key}:page-{pages + 1}"
                response = await fetch(ctx, call)
                body = await _decode(response, "json", inline, ctx)
                pages += 1
                items.extend(_items(data, body, pages))
            body = items
            extra = {"pages": pages}
        else:
            extra = {}
        headers = {k: v for k, v in response.headers.items() if k not in ("set-cookie",)}
        # A server that echoes the credential back must not put it into the run's events.
        return result({"output": mask({"status": response.status, "headers": headers, "body": body,
                                       "url": response.url, "elapsed_ms": response.elapsed_ms, **extra},
                                      response.secrets)})


executor = HttpRequest()
