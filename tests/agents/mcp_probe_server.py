"""A stdio MCP server (fastmcp) whose one tool reports how it is confined, as JSON."""

from __future__ import annotations

import json
import os
import socket

from fastmcp import FastMCP

server = FastMCP("probe")


def _socket() -> str:
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1).close()
    except OSError as exc:
        return f"refused: {exc}"
    return "connected"


@server.tool()
def whoami() -> str:
    """Uid, environment, network, host files and processes this server can see."""
    return json.dumps({
        "uid": os.getuid(),
        "env": dict(os.environ),
        "socket": _socket(),
        "passwd": "present" if os.path.exists("/etc/passwd") else "absent",
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    })


if __name__ == "__main__":
    server.run("stdio", show_banner=False)
