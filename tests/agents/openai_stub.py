"""A local OpenAI-compatible server (Chat Completions) for offline tests.

``POST /v1/chat/completions``: with ``tools`` and no tool result yet, it calls the first
tool (the call split over two SSE chunks, as real servers do); otherwise it answers
``"Stub says: <last tool result or user message>"`` (or the request's ``Authorization``
header with ``echo_auth``: a server reflecting the key). Streams ``chat.completion.chunk``s
and ends with a usage chunk; non-stream requests get one ``chat.completion``. Requests
are recorded on ``server.requests`` (headers + body) for assertions.

``POST /v1/embeddings``: one vector per input text, ``[len(text), count of 'a', 1.0]``
(or ``dimensions`` long, padded with zeros), in shuffled ``index`` order as the API allows.

Fixtures for the tests of where model keys go: ``stub`` (the endpoint the operator
configures), ``attacker`` (a host a graph would choose) and ``operator_key`` (the worker's
``OPENAI_API_KEY`` set to :data:`OPERATOR_KEY`, settings re-read).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from orchestrator.settings import get_settings

OPERATOR_KEY = "sk-operator-canary-0123456789"


class _Handler(BaseHTTPRequestHandler):
    server: StubServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()},
                                     "body": body})
        if self.server.fail_status:
            self._send(self.server.fail_status, {"error": {"message": "stub failure"}},
                       {"Retry-After": self.server.retry_after} if self.server.retry_after else None)
            return
        if self.path.endswith("/embeddings"):
            self._embeddings(body)
            return
        messages = body.get("messages", [])
        tool_results = [m for m in messages if m.get("role") == "tool"]
        call = body.get("tools") and not tool_results
        if call:
            fn = body["tools"][0]["function"]
            props = fn.get("parameters", {}).get("properties", {})
            args = json.dumps({k: 2 if v.get("type") in ("number", "integer") else "x"
                               for k, v in props.items()})
            chunks = [
                {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                      "function": {"name": fn["name"],
                                                                   "arguments": args[:3]}}]},
                {"tool_calls": [{"index": 0, "function": {"arguments": args[3:]}}]},
            ]
            finish = "tool_calls"
        else:
            last = tool_results[-1]["content"] if tool_results else messages[-1]["content"]
            if self.server.echo_auth:  # a server that reflects the key it was sent
                last = self.headers.get("Authorization", "")
            text = f"Stub says: {last}"
            chunks = [{"role": "assistant", "content": ""}] + [
                {"content": w} for w in text.split(" ") for w in (w + " ",)]
            finish = "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant"}
            if call:
                message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {
                    "name": chunks[0]["tool_calls"][0]["function"]["name"], "arguments": args}}]
            else:
                message["content"] = text
            self._send(200, {"id": "c1", "object": "chat.completion", "created": 0,
                             "model": body["model"], "choices": [{"index": 0, "message": message,
                                                                   "finish_reason": finish}],
                             "usage": {"prompt_tokens": 5, "completion_tokens": 3,
                                       "total_tokens": 8}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        for i, delta in enumerate(chunks):
            done = finish if i == len(chunks) - 1 else None
            if i and self.server.chunk_delay_s:
                time.sleep(self.server.chunk_delay_s)  # a model that takes its time per token
            self._sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": done}]})
        self._sse({**base, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3,
                                                    "total_tokens": 8}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _embeddings(self, body: dict[str, Any]) -> None:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        size = int(body.get("dimensions") or 3)
        data = []
        for i, text in enumerate(texts):
            vector = ([float(len(text)), float(text.count("a")), 1.0] + [0.0] * size)[:size]
            data.append({"object": "embedding", "index": i, "embedding": vector})
        data.reverse()
        self._send(200, {"object": "list", "data": data, "model": body["model"],
                         "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}})

    def _sse(self, payload: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


class StubServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog: a hundred clients connect at once

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.fail_status = 0
        self.retry_after = ""  # the Retry-After header of a failure, if any
        self.chunk_delay_s = 0.0  # pause between streamed chunks
        self.echo_auth = False  # answer with the request's Authorization header
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture
def attacker() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture
def operator_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_KEY)
    get_settings.cache_clear()
    yield OPERATOR_KEY
    get_settings.cache_clear()
