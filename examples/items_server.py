"""A tiny local JSON API for examples/http_to_db.json: ``GET /items`` lists three items.

Run: ``python examples/items_server.py`` (port 8765, or the first argument), then in
another shell ``ORCH_EGRESS_ALLOW=127.0.0.1 ./dev run examples/http_to_db.json``.
(The egress policy refuses loopback addresses unless the operator allows them.)
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ITEMS = [
    {"id": 1, "name": "anvil", "price": 12.5},
    {"id": 2, "name": "rope", "price": 3.0},
    {"id": 3, "name": "lantern", "price": 7.25},
]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/items":
            self.send_error(404)
            return
        raw = json.dumps(ITEMS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8765
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"serving http://127.0.0.1:{port}/items", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
