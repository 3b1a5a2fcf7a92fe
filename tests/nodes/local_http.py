"""A local HTTP server for the HTTP Request tests: routes answer from a small table."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class _Handler(BaseHTTPRequestHandler):
    server: LocalHttp

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen = {"method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body}
        self.server.requests.append(seen)
        route = self.path.split("?")[0]
        if route == "/echo":
            self._json(200, {"method": self.command, "path": self.path, "headers": seen["headers"],
                             "body": body.decode("utf-8", "replace")})
        elif route == "/flaky":
            self.server.flaky_calls += 1
            if self.server.flaky_calls == 1:
                self._json(503, {"error": "busy"}, {"Retry-After": "0"})
            else:
                self._json(200, {"ok": True, "calls": self.server.flaky_calls})
        elif route == "/limited":
            self._json(429, {"error": "slow down"}, {"Retry-After": "2"})
        elif route == "/missing":
            self._json(404, {"error": "no such item"})
        elif route == "/reflect-auth":
            self._json(403, {"denied": self.headers.get("Authorization", ""), "path": self.path})
        elif route == "/big":
            self._raw(200, b"x" * 5000, "application/octet-stream")
        elif route == "/text":
            self._raw(200, b"plain words", "text/plain")
        elif route == "/slow":
            self.server.release.wait(5)
            self._json(200, {})
        elif route == "/redirect":
            self._redirect("/echo")
        elif route == "/redirect-to":  # anywhere: ?to=<absolute URL>
            self._redirect(parse_qs(urlsplit(self.path).query)["to"][0])
        elif route == "/page-to":  # one page whose next link is ?next=<absolute URL>
            self._json(200, {"results": [1], "next": parse_qs(urlsplit(self.path).query)["next"][0]})
        elif route == "/pages":  # three pages; each names the next in its body
            page = int(parse_qs(urlsplit(self.path).query).get("p", ["1"])[0])
            nxt = f"/pages?p={page + 1}" if page < 3 else None
            self._json(200, {"results": [page * 10, page * 10 + 1], "next": nxt})
        elif route == "/linked":  # two pages chained by a Link header
            page = int(self.path.split("p=")[1]) if "p=" in self.path else 1
            link = {"Link": f'<{self.server.url}/linked?p=2>; rel="next"'} if page == 1 else {}
            self._json(200, [f"item-{page}"], link)
        elif route == "/items":
            self._json(200, [{"id": 1, "name": "anvil", "price": 12.5}, {"id": 2, "name": "rope", "price": 3.0}])
        else:
            self._json(404, {"error": route})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _raw(self, status: int, raw: bytes, mime: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", mime)
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)


class LocalHttp(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.flaky_calls = 0
        self.release = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> LocalHttp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)
