"""A stdio MCP server (fastmcp) whose one tool attempts an attack and reports, as JSON,
what happened: the tests run it confined through the MCP Server node.

``python mcp_attack_server.py --once status,ptrace`` runs the named attacks once and
prints one JSON object instead (standard library only: the non-root test runs it with
the system's interpreter, where fastmcp is not importable inside the sandbox).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

libc = ctypes.CDLL(None, use_errno=True)
# A raw clone must keep the GIL across the call: CDLL releases it, and when another thread
# of the server takes it in that window the child wakes up owning nothing it can run on and
# hangs, and the parent's waitpid with it (a tool call that timed out, now and then, under
# load). PyDLL holds the GIL, so the child returns holding it and can _exit at once.
libc_holding_gil = ctypes.PyDLL(None, use_errno=True)
PTRACE_ATTACH = 16
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
SYS_CLONE = 56  # x86_64


def _failed(call: str) -> str:
    code = ctypes.get_errno()
    return f"refused: {call}: {errno.errorcode.get(code, code)}"


def _sleeper() -> int:
    pid = os.fork()
    if pid == 0:
        signal.pause()
        os._exit(0)
    return pid


def ptrace(_arg: str) -> dict[str, Any]:
    secret = ctypes.create_string_buffer(b"secret-in-child")
    child = _sleeper()  # its copy of `secret` sits at the same address
    try:
        out: dict[str, Any] = {}
        attached = libc.ptrace(PTRACE_ATTACH, child, None, None)
        out["ptrace"] = "attached" if attached == 0 else _failed("ptrace")

        class IoVec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

        sink = ctypes.create_string_buffer(len(secret))
        local = IoVec(ctypes.addressof(sink), len(secret))
        remote = IoVec(ctypes.addressof(secret), len(secret))
        got = libc.process_vm_readv(child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        out["process_vm_readv"] = (f"read: {sink.value.decode()}" if got > 0
                                   else _failed("process_vm_readv"))
        return out
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def _unshare_and_mount() -> dict[str, str]:
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        return {"unshare": _failed("unshare")}
    done = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)  # /tmp exists: nothing to create
    return {"unshare": "unshared", "mount": "mounted" if done == 0 else _failed("mount")}


def namespaces(_arg: str) -> dict[str, Any]:
    # clone(CLONE_NEWUSER) and unshare(CLONE_NEWUSER) are tried in a fresh, single-threaded
    # interpreter (fork + exec): unshare needs a single-threaded process, and the child of a
    # raw clone of this threaded server returns into Python, where it could block for good
    # on a lock (malloc's, say) another thread held at the clone, and its parent with it.
    out: dict[str, Any] = {}
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--once", "clone_newuser,unshare_mount"],
                              capture_output=True, text=True, timeout=20, check=False)
        report = json.loads(done.stdout)
        out.update(report["clone_newuser"])
        out.update(report["unshare_mount"])
    except (subprocess.TimeoutExpired, ValueError, KeyError) as exc:
        out["unshare"] = f"no report: {exc!r}"
    return out


def clone_newuser(_arg: str) -> dict[str, Any]:
    pid = libc_holding_gil.syscall(SYS_CLONE, CLONE_NEWUSER | signal.SIGCHLD, None, None, None, None)
    if pid == 0:
        os._exit(0)
    out = {"clone_newuser": _failed("clone") if pid < 0 else "cloned"}
    if pid > 0:
        for _ in range(100):  # bounded: 10 s
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            out["clone_newuser"] = "cloned, the child hung"
    return out


def unshare_mount(_arg: str) -> dict[str, Any]:
    return _unshare_and_mount()


def fork_bomb(_arg: str) -> dict[str, Any]:
    children: list[int] = []
    error = ""
    try:
        for _ in range(4096):  # the test's bound, whatever the limits say
            children.append(_sleeper())
    except OSError as exc:
        error = errno.errorcode.get(exc.errno or 0, str(exc))
    for child in children:
        os.kill(child, signal.SIGKILL)
    for child in children:
        os.waitpid(child, 0)
    return {"forked": len(children), "error": error}


def memory_bomb(_arg: str) -> dict[str, Any]:
    held: list[bytearray] = []
    try:
        for _ in range(4096 // 16):  # at most 4 GiB, whatever the limits say
            held.append(bytearray(16 << 20))
    except MemoryError:
        return {"allocated_mb": 16 * len(held), "error": "MemoryError"}
    return {"allocated_mb": 16 * len(held), "error": ""}


def sockets(_arg: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, family, kind in (("netlink", socket.AF_NETLINK, socket.SOCK_RAW),
                               ("packet", socket.AF_PACKET, socket.SOCK_RAW),
                               ("unix", socket.AF_UNIX, socket.SOCK_STREAM),
                               ("inet", socket.AF_INET, socket.SOCK_STREAM)):
        try:
            socket.socket(family, kind, 0).close()
            out[name] = "created"
        except OSError as exc:
            out[name] = f"refused: {errno.errorcode.get(exc.errno or 0, exc)}"
    return out


def environ(arg: str) -> dict[str, Any]:
    """Read /proc/<arg>/environ and every other environ this server can see."""
    seen: dict[str, str] = {}
    for pid in [arg, *sorted(p for p in os.listdir("/proc") if p.isdigit())]:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                seen[pid] = f.read().decode("utf-8", "replace")
        except OSError as exc:
            seen[pid] = f"refused: {errno.errorcode.get(exc.errno or 0, exc)}"
    return seen


def write(arg: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in ("/tmp", "/", "/usr/lib", "/etc", sys.prefix, here, arg):
        path = os.path.join(folder, "written-by-mcp-server")
        try:
            with open(path, "w") as f:
                f.write("x")
            out[folder] = "written"
        except OSError as exc:
            out[folder] = f"refused: {errno.errorcode.get(exc.errno or 0, exc)}"
    return out


def unix_socket(arg: str) -> dict[str, Any]:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(arg)
        client.sendall(b"hello from the sandbox")
        return {"connect": "connected"}
    except OSError as exc:
        return {"connect": f"refused: {errno.errorcode.get(exc.errno or 0, exc)}"}
    finally:
        client.close()


def helper(arg: str) -> dict[str, Any]:
    """A normal server's work: helper processes, and a long-lived one marked with ``arg``."""
    python = subprocess.run([sys.executable, "-c", "print('helper ok')"], capture_output=True,
                            text=True, timeout=30)
    shell = subprocess.run(["/bin/sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True,
                           timeout=30)
    out: dict[str, Any] = {"python": python.stdout.strip(), "shell": shell.stdout.strip()}
    if arg:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", arg],
                         start_new_session=True)
        out["sleeper"] = "started"
    return out


def status(_arg: str) -> dict[str, Any]:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    names = ("AS", "CPU", "FSIZE", "NOFILE", "NPROC", "CORE")
    return {"uid": os.getuid(), "seccomp": fields["Seccomp"].strip(),
            "no_new_privs": fields["NoNewPrivs"].strip(),
            "limits": {n: resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))[0] for n in names}}


def tmpfs(_arg: str) -> dict[str, Any]:
    """Every tmpfs mount ([read-only, size option]) and whether /, /dev, /dev/shm take a file."""
    mounts: dict[str, Any] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            at = fields.index("-")
            if fields[at + 1] == "tmpfs":
                size = [o[5:] for o in fields[-1].split(",") if o.startswith("size=")]
                mounts[fields[4]] = ["ro" in fields[5].split(","), size[0] if size else None]
    out: dict[str, Any] = {"mounts": mounts}
    for folder in ("/", "/dev", "/dev/shm"):
        path = os.path.join(folder, "written-by-mcp-server")
        try:
            with open(path, "w") as written:
                written.write("x")
            os.unlink(path)
            out[folder] = "written"
        except OSError as exc:
            out[folder] = f"refused: {errno.errorcode.get(exc.errno or 0, exc)}"
    return out


def syscalls(arg: str) -> dict[str, Any]:
    """Call each ``name=number`` of ``arg`` (comma-separated) with zero arguments."""
    out: dict[str, Any] = {}
    for item in arg.split(","):
        name, number = item.split("=")
        got = libc.syscall(int(number), 0, 0, 0, 0, 0, 0)
        out[name] = _failed(name) if got == -1 else "allowed"
    return out


ATTACKS: dict[str, Callable[[str], dict[str, Any]]] = {
    f.__name__: f for f in (ptrace, namespaces, clone_newuser, unshare_mount, fork_bomb, memory_bomb, sockets, environ,
                            write, unix_socket, helper, status, tmpfs, syscalls)
}


def attempt(attack: str, arg: str = "") -> str:
    """Attempt ``attack`` (a name of ATTACKS) and report what happened."""
    started = time.monotonic()
    result = ATTACKS[attack](arg)
    result["elapsed_s"] = round(time.monotonic() - started, 2)
    return json.dumps(result)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--once"]:
        print(json.dumps({name: json.loads(attempt(name)) for name in sys.argv[2].split(",")}))
    else:
        from fastmcp import FastMCP

        server = FastMCP("attack")
        server.tool()(attempt)
        server.run("stdio", show_banner=False)
