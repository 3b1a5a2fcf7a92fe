"""A small synchronous HTTP client for the API (used by the CLI and by scripts).

``Client(base_url, api_key=None)``; every method raises :class:`ApiError` (an
``OrchestratorError``) for a non-2xx answer, carrying the status and the server's error
body, and for a connection failure; a 429 (the server's queue is full) raises its
subclass :class:`ServerBusyError` with ``retry_after_s`` and the ``limit`` that refused.
:meth:`Client.iter_events` follows a run's SSE stream
to its terminal event, reconnecting with ``Last-Event-ID`` when the connection drops, so
each event is seen once, in order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from orchestrator.kernel.errors import OrchestratorError
from orchestrator.kernel.protocol import EventType

RECONNECT_DELAYS_S = (0.1, 0.25, 0.5, 1.0, 2.0)  # then every 2 s, up to max_reconnects
DEFAULT_RETRY_AFTER_S = 5.0  # a 429 without a usable Retry-After header


def _retry_after_s(header: str | None) -> float:
    try:
        return max(0.0, float(header)) if header else DEFAULT_RETRY_AFTER_S
    except ValueError:
        return DEFAULT_RETRY_AFTER_S


class ApiError(OrchestratorError):
    """The API answered with an error status, or could not be reached."""

    code = "api_error"

    def __init__(self, message: str, *, status: int = 0, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ServerBusyError(ApiError):
    """429: the server's queue is over its bound; nothing was started. Retry after
    ``retry_after_s`` seconds; ``limit`` names the server setting that refused."""

    code = "server_busy"

    def __init__(self, message: str, *, status: int, body: Any, retry_after_s: float, limit: str) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after_s = retry_after_s
        self.limit = limit


class Client:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------

    def _request(self, method: str, url: str, **kw: Any) -> Any:
        try:
            response = self._http.request(method, url, **kw)
        except httpx.HTTPError as exc:
            raise ApiError(f"{method} {url}: {exc}") from exc
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = response.text
            detail = body.get("error", {}).get("message") if isinstance(body, dict) else body
            if response.status_code == 429:
                error = body.get("error", {}) if isinstance(body, dict) else {}
                retry_after_s = _retry_after_s(response.headers.get("Retry-After"))
                raise ServerBusyError(
                    f"server busy: {detail} (retry after {retry_after_s:g} s)",
                    status=429, body=body, retry_after_s=retry_after_s, limit=str(error.get("limit", "")),
                )
            raise ApiError(
                f"{method} {url} -> {response.status_code}: {detail}",
                status=response.status_code,
                body=body,
            )
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def create_graph(self, graph: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", "/graphs", json=graph)
        return result

    def update_graph(self, graph_id: str, graph: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._request("PUT", f"/graphs/{graph_id}", json=graph)
        return result

    def get_graph(self, graph_id: str, version: int | None = None) -> dict[str, Any]:
        params = {"version": version} if version is not None else None
        result: dict[str, Any] = self._request("GET", f"/graphs/{graph_id}", params=params)
        return result

    def list_graphs(self, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "GET", "/graphs", params={"offset": offset, "limit": limit}
        )
        return result

    def delete_graph(self, graph_id: str) -> None:
        self._request("DELETE", f"/graphs/{graph_id}")

    def start_run(
        self,
        graph_id: str,
        run_input: Any = None,
        *,
        trigger: str | None = None,
        session_id: str | None = None,
    ) -> str:
        body = {"input": run_input, "trigger": trigger, "session_id": session_id}
        result = self._request(
            "POST",
            f"/graphs/{graph_id}/runs",
            json={k: v for k, v in body.items() if v is not None},
        )
        return str(result["run_id"])

    def get_run(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", f"/runs/{run_id}")
        return result

    def cancel(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", f"/runs/{run_id}/cancel")
        return result

    def rerun(self, run_id: str, from_node: str) -> str:
        result = self._request("POST", f"/runs/{run_id}/rerun", json={"from_node": from_node})
        return str(result["run_id"])

    def nodes(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "/nodes")
        return result

    # -- Wait nodes --------------------------------------------------------------------

    def waits(self, run_id: str) -> list[dict[str, Any]]:
        """The run's waiting Wait nodes: ``{node_id, kind, message, schema, timeout_s, due_at}``."""
        result: dict[str, Any] = self._request("GET", f"/runs/{run_id}/waits")
        return list(result["items"])

    def submit_form(self, run_id: str, node_id: str, data: dict[str, Any]) -> None:
        """Answer a form wait (``ApiError`` 422 naming the field that does not match, 409 once
        answered)."""
        self._request("POST", f"/runs/{run_id}/waits/{node_id}/form", json=data)

    def resume_url(self, run_id: str, node_id: str) -> str:
        """The signed resume URL of a url wait (a path: join it to the API's base URL)."""
        result = self._request("POST", f"/runs/{run_id}/waits/{node_id}/resume-url")
        return str(result["url"])

    # -- events ------------------------------------------------------------------------

    def iter_events(
        self, run_id: str, last_event_id: str | None = None, *, max_reconnects: int = 20
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(stream id, NodeEvent JSON) until the run's terminal event.

        A dropped connection is reopened with ``Last-Event-ID`` = the last id seen;
        ``max_reconnects`` consecutive failures raise :class:`ApiError`.
        """
        cursor = last_event_id
        failures = 0
        while True:
            headers = {"Last-Event-ID": cursor} if cursor else {}
            try:
                with self._http.stream(
                    "GET",
                    f"/runs/{run_id}/events",
                    headers=headers,
                    timeout=httpx.Timeout(30.0, read=None),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise ApiError(
                            f"GET /runs/{run_id}/events -> {response.status_code}: {response.text}",
                            status=response.status_code,
                        )
                    for event_id, event_type, data in parse_frames(response.iter_lines()):
                        failures = 0
                        cursor = event_id or cursor
                        event = json.loads(data)
                        yield event_id or "", event
                        if event_type in EventType.TERMINAL:
                            return
                    # The server closes the stream only after the terminal event (or once
                    # the run is over): an end without one means it is finished.
                    return
            except (httpx.TransportError, httpx.RemoteProtocolError) as exc:
                failures += 1
                if failures > max_reconnects:
                    raise ApiError(f"event stream of run {run_id} kept failing: {exc}") from exc
                time.sleep(RECONNECT_DELAYS_S[min(failures, len(RECONNECT_DELAYS_S)) - 1])


def parse_frames(lines: Iterator[str]) -> Iterator[tuple[str | None, str, str]]:
    """SSE frames with an ``event:`` as (id, event, data); comments and pings are skipped."""
    event_id: str | None = None
    event_type = ""
    data: list[str] = []
    for line in lines:
        if line == "":
            if event_type and data:
                yield event_id, event_type, "\n".join(data)
            event_id, event_type, data = None, "", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "id":
            event_id = value
        elif key == "event":
            event_type = value
        elif key == "data":
            data.append(value)
