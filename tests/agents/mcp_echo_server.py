"""A tiny MCP server over stdio (fastmcp, on the mcp 2.x SDK) with two tools: echo, and refuse (always fails)."""

from __future__ import annotations

from fastmcp import FastMCP

server = FastMCP("echo")


@server.tool()
def echo(text: str) -> str:
    """Return the text prefixed with 'echo: '."""
    return f"echo: {text}"


@server.tool()
def refuse(reason: str) -> str:
    """Always fails (the server reports a tool error)."""
    raise ValueError(f"refused: {reason}")


if __name__ == "__main__":
    server.run("stdio", show_banner=False)
