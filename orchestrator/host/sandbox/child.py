"""The Code node's child process: limits, audit hook, then the user's ``main``.

Run as ``python -I -B -c <this file>`` by ``orchestrator/host/sandbox/python.py`` (never imported),
inside the bubblewrap boundary (or, in the opted-in weak mode, without it).
Reads one JSON request on stdin: ``{"code", "input", "scratch", "memory_mb", "cpu_s",
"max_log_bytes", "no_exec_bpf"}``. Writes user prints to a buffer, and finally one line
``MARKER + json`` on the real stdout: ``{"ok": true, "value": ..., "logs": ...}`` or
``{"ok": false, "kind": "exception"|"memory"|"output"|"syntax", "error": ..., "logs": ...}``.
Order matters: everything this script needs is imported and the user code is compiled
before the limits and the hook are installed. An audit hook cannot be unregistered, but
code in the same interpreter can neutralise it (``gc`` finds the hook's closure and its
``deny`` cell can be replaced): it is a tripwire with clear messages, and nothing the OS
layers promise depends on it (SANDBOX.md).
"""

import ast
import builtins
import io
import json
import os
import resource
import sys
import traceback
from typing import Any

MARKER = "\x1e__code_node_result__"
FILENAME = "<code>"

BLOCKED_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "pty.spawn", "os.startfile",
})
BLOCKED_PREFIXES = (
    "socket.", "os.exec", "os.spawn", "os.posix_spawn", "ctypes.", "winreg.", "_winapi.",
)
TWO_PATH_EVENTS = frozenset({"os.rename", "os.link", "os.symlink", "shutil.move"})
BLOCKED_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "_xxsubinterpreters"})
# Events whose first argument (and, for rename/link, second) is a path being changed.
PATH_WRITE_EVENTS = frozenset({
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
    "os.link", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "shutil.rmtree",
    "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move", "os.mkfifo", "os.mknod",
    "os.setxattr", "os.removexattr",
})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
READABLE_DEVICES = frozenset({"/dev/null", "/dev/urandom", "/dev/random"})


def set_limits(memory_mb: int, cpu_s: int) -> None:
    def lower(limit: int, value: int) -> None:
        _soft, hard = resource.getrlimit(limit)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))

    lower(resource.RLIMIT_AS, memory_mb * 1024 * 1024)
    lower(resource.RLIMIT_CPU, cpu_s)
    lower(resource.RLIMIT_FSIZE, 16 * 1024 * 1024)
    lower(resource.RLIMIT_NOFILE, 64)
    lower(resource.RLIMIT_NPROC, 0)  # not enforced for root: the audit hook blocks fork too
    lower(resource.RLIMIT_CORE, 0)


def make_hook(scratch: str, read_roots: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def inside(path: object, roots: tuple[str, ...]) -> bool:
        if isinstance(path, int):
            return True  # an fd this process already holds
        full = os.path.realpath(os.path.join(scratch, os.fsdecode(path)))  # type: ignore[arg-type]
        return any(full == root or full.startswith(root + os.sep) for root in roots)

    def deny(event: str, detail: str = "") -> None:
        raise PermissionError(f"sandbox blocks {event}{detail}")

    def hook(event: str, args: tuple) -> None:  # type: ignore[type-arg]
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writing:
                if not inside(path, (scratch,)):
                    deny("writing", f" {path!r}: only the scratch folder is writable")
            elif not inside(path, (scratch, *read_roots)) and path not in READABLE_DEVICES:
                deny("reading", f" {path!r}: only the scratch folder and the standard library"
                     " are readable")
        elif event == "import":
            name = str(args[0])
            if name in BLOCKED_MODULES or name.split(".")[0] in BLOCKED_MODULES:
                deny("import", f" of {name}")
        elif event in BLOCKED_EVENTS or event.startswith(BLOCKED_PREFIXES):
            deny(event)
        elif event in PATH_WRITE_EVENTS:
            for path in args[:2] if event in TWO_PATH_EVENTS else args[:1]:
                if isinstance(path, (str, bytes, os.PathLike)) and not inside(path, (scratch,)):
                    deny(event, f" {path!r}: only the scratch folder is writable")

    return hook


def forbid_exec(bpf_hex: str | None) -> None:
    """Install the seccomp program that refuses execve/execveat (OS-level boundary only).

    ``bpf_hex`` is a compiled classic-BPF program (``struct sock_filter[]``) from
    ``seccomp.no_exec_bpf``. Uses ``prctl(PR_SET_NO_NEW_PRIVS)`` then
    ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &sock_fprog)``; failing is fatal.
    """
    if not bpf_hex:
        return
    import ctypes

    program = bytes.fromhex(bpf_hex)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_char_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    for name in [n for n in sys.modules if n.split(".")[0] in ("ctypes", "_ctypes")]:
        del sys.modules[name]  # so the user's import of ctypes meets the audit hook again


def compile_main(code: str):  # type: ignore[no-untyped-def]
    """The user's code as the body of ``def main(input, items)``, line numbers kept."""
    body = ast.parse(code, FILENAME).body or [ast.Pass()]
    func = ast.parse("def main(input, items):\n    pass\n", FILENAME).body[0]
    assert isinstance(func, ast.FunctionDef)
    func.body = body
    module = ast.Module(body=[func], type_ignores=[])
    ast.fix_missing_locations(module)
    return compile(module, FILENAME, "exec")


def describe(exc: BaseException) -> str:
    """The traceback's last line, with the user's line number when there is one."""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == FILENAME:
            line = lineno
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return f"line {line}: {last}" if line else last


def main() -> None:
    real_stdout = sys.stdout
    request = json.loads(sys.stdin.read())
    scratch = os.path.realpath(request["scratch"])
    os.chdir(scratch)
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    logs = io.StringIO()

    def finish(payload: dict) -> None:  # type: ignore[type-arg]
        text = logs.getvalue()
        limit = int(request.get("max_log_bytes", 65536))
        if len(text) > limit:
            text = text[:limit] + f"\n... (logs truncated at {limit} characters)"
        payload["logs"] = text
        try:
            line = json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as exc:
            line = json.dumps({"ok": False, "kind": "output", "logs": text,
                               "error": f"the return value is not JSON-serialisable: {exc}"})
        real_stdout.write("\n" + MARKER + line + "\n")
        real_stdout.flush()

    try:
        compiled = compile_main(request["code"])
    except SyntaxError as exc:
        error = f"line {exc.lineno}: SyntaxError: {exc.msg}"
        finish({"ok": False, "kind": "syntax", "error": error})
        return
    namespace: dict[str, Any] = {"__name__": "__code__", "__builtins__": builtins}
    exec(compiled, namespace)  # noqa: S102 -- defines main(); the Code node exists to run user code
    value = request.get("input")
    items = value if isinstance(value, list) else [value]

    expected = request.get("prefix")
    if expected and os.path.realpath(sys.base_prefix) != expected:
        raise SystemExit(f"sandbox: the interpreter found its standard library at "
                         f"{sys.base_prefix}, not {expected}; refusing to run")
    forbid_exec(request.get("no_exec_bpf"))
    set_limits(int(request["memory_mb"]), int(request["cpu_s"]))
    if request.get("audit_hook", True):
        sys.addaudithook(make_hook(scratch, (stdlib,)))
    sys.stdout = sys.stderr = logs
    try:
        out = namespace["main"](value, items)
    except MemoryError:
        sys.stdout, sys.stderr = real_stdout, sys.__stderr__
        finish({"ok": False, "kind": "memory", "error": "MemoryError"})
        return
    except BaseException as exc:  # SystemExit and KeyboardInterrupt are user errors too
        sys.stdout, sys.stderr = real_stdout, sys.__stderr__
        finish({"ok": False, "kind": "exception", "error": describe(exc)})
        return
    sys.stdout, sys.stderr = real_stdout, sys.__stderr__
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        finish({"ok": False, "kind": "output",
                "error": f"the return value is not JSON-serialisable: {exc}"})
        return
    finish({"ok": True, "value": out})


if __name__ == "__main__":
    main()
