"""Start-up cost of the confinement of a stdio MCP server, three ways (and none), in one run.

    .venv/bin/python bench/mcp_stdio_startup.py [--runs 20] [--servers 8]

* ``unconfined``: the program alone, for scale.
* ``bwrap``: the previous boundary: bubblewrap (+ setpriv as root) only.
* ``sh+seccomp+prlimit``: what ``command.confined_command`` builds now: ``sh``
  opens the command seccomp program for bubblewrap (``--seccomp 3``), ``prlimit`` sets
  the limits before the program.
* ``python launcher``: the alternative: bubblewrap then the worker's interpreter running
  a few lines that set the limits, install the same program with ``prctl`` and exec.

Two programs: ``/bin/true`` (the cost of the chain alone, ``--runs`` times each, the
three ways interleaved) and the test suite's echo MCP server (spawn to a listed tool
through a ``fastmcp`` stdio client, ``--servers`` times each). Prints medians in ms as
JSON. Run as the worker's user; spawns are closed by the client or waited for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from orchestrator.host.sandbox.bwrap import interpreter
from orchestrator.host.sandbox.command import OPEN_SECCOMP, confined_command
from orchestrator.host.sandbox.seccomp import command_bpf
from orchestrator.settings import get_settings

ROOT = Path(__file__).resolve().parents[1]
ECHO = ROOT / "tests" / "agents" / "mcp_echo_server.py"
LAUNCHER = """
import ctypes, os, resource, sys
for name, value in zip(("AS", "CPU", "FSIZE", "NOFILE", "NPROC", "CORE"), map(int, sys.argv[2:8])):
    resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
program = bytes.fromhex(sys.argv[1])
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(program, len(program))
libc.prctl(38, 1, 0, 0, 0)
assert libc.prctl(22, 2, ctypes.byref(Prog(len(program) // 8, ctypes.cast(buf, ctypes.c_char_p))), 0, 0) == 0
os.execv(sys.argv[8], sys.argv[8:])
"""


def three_ways(command: str) -> dict[str, list[str]]:
    """The argv of ``command`` under each way (see the module docstring)."""
    confined = confined_command(command, {}, get_settings())
    assert confined.args[:2] == ["-c", OPEN_SECCOMP]
    bwrap = confined.args[3:]
    at = bwrap.index("--seccomp")
    bwrap = bwrap[:at] + bwrap[at + 2:]
    start = next(i for i, a in enumerate(bwrap) if a.endswith("/prlimit"))
    end = bwrap.index("--", start)
    limits = [a.split("=", 1)[1] for a in bwrap[start + 1:end]]
    plain = bwrap[:start] + bwrap[end + 1:]
    launcher = [*bwrap[:start], interpreter(), "-I", "-S", "-c", LAUNCHER, command_bpf().hex(),
                *limits, *bwrap[end + 1:]]
    return {"unconfined": command.split(), "bwrap": plain,
            "sh+seccomp+prlimit": [confined.program, *confined.args], "python launcher": launcher}


def chain_ms(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, check=True, close_fds=True)
    return (time.perf_counter() - started) * 1000


async def server_ms(argv: list[str]) -> float:
    started = time.perf_counter()
    transport = StdioTransport(command=argv[0], args=argv[1:], env={"PATH": "/usr/bin:/bin"},
                               keep_alive=False)
    async with Client(transport, timeout=60) as client:
        assert [t.name for t in await client.list_tools()] == ["echo"]
        elapsed = (time.perf_counter() - started) * 1000
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--servers", type=int, default=8)
    options = parser.parse_args()
    os.environ["ORCH_MCP_STDIO_COMMANDS"] = f"/bin/true,{sys.executable}"
    os.environ["ORCH_MCP_STDIO_ARG_ROOTS"] = str(ECHO.parent)  # the echo server is an argument
    get_settings.cache_clear()
    true_ways = three_ways("/bin/true")
    server_ways = three_ways(f"{sys.executable} {ECHO}")
    chain: dict[str, list[float]] = {name: [] for name in true_ways}
    servers: dict[str, list[float]] = {name: [] for name in server_ways}
    for argv in true_ways.values():  # warm-up
        chain_ms(argv)
    for _ in range(options.runs):
        for name, argv in true_ways.items():
            chain[name].append(chain_ms(argv))
    for _ in range(options.servers):
        for name, argv in server_ways.items():
            servers[name].append(asyncio.run(server_ms(argv)))
    print(json.dumps({
        "runs": options.runs, "servers": options.servers, "load": os.getloadavg()[0],
        "bin_true_median_ms": {k: round(statistics.median(v), 1) for k, v in chain.items()},
        "echo_server_median_ms": {k: round(statistics.median(v), 1) for k, v in servers.items()},
    }, indent=2))


if __name__ == "__main__":
    main()
