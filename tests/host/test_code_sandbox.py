"""Attacks on the Code node's OS-level boundary (real bubblewrap): each must fail.

Most attacks run twice: through the Code node (every layer), and with the audit hook left
out (``audit_hook=False``), which shows that the OS boundary alone stops them. Needs
bubblewrap (``.ci/system-deps`` installs it); without it these tests fail naming it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.host.sandbox import bwrap
from orchestrator.host.sandbox.python import SandboxError, SandboxLimits, run_python
from orchestrator.settings import Settings, load_settings
from tests.nodes.test_code import run_code

SECRET = f"sk-fake-{uuid.uuid4().hex}"
HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def boundary_present() -> None:
    missing = bwrap.unavailable(load_settings())
    assert missing is None, f"the sandbox tests need the OS boundary: {missing}"


@pytest.fixture
def worker_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake model key in this (worker) process's environment, as in a deployment."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return SECRET


async def bare(code: str, **limits: float) -> object:
    """Run with the audit hook left out: only the OS boundary stands in the way."""
    ran = await run_python(code, None, SandboxLimits(limits.get("timeout_s", 5), int(limits.get("memory_mb", 256))),
                           settings=load_settings(), audit_hook=False)
    return ran.value


async def outcome(code: str, *, hook: bool) -> str:
    """Everything a user could see of a run: the output, or the error and its logs."""
    try:
        if hook:
            out, events = await run_code(code)
            return repr(out) + repr([e.data for e in events])
        return repr(await bare(code))
    except RuntimeError as exc:
        return f"error: {exc} {getattr(exc, 'logs', '')}"


POSIXSUBPROCESS_SPAWN = textwrap.dedent("""\
    import importlib.util, os
    folder = os.path.dirname(os.__file__) + '/lib-dynload'
    so = folder + '/' + [f for f in os.listdir(folder) if f.startswith('_posixsubprocess')][0]
    spec = importlib.util.spec_from_file_location('innocent._posixsubprocess', so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r, w = os.pipe()
    er, ew = os.pipe()
    script = b'echo spawned; cat /proc/$PPID/environ /proc/1/environ'
    mod.fork_exec([b'/bin/sh', b'-c', script], [b'/bin/sh'], True, tuple(sorted((w, ew))),
                  None, None, -1, -1, -1, w, -1, -1, er, ew, False, False, -1, None, None,
                  None, -1, None, False)
    os.close(w)
    os.close(ew)
    return os.read(r, 100000).decode(errors='replace')
    """)


@pytest.mark.parametrize("hook", [True, False])
async def test_the_posixsubprocess_alias_spawn_fails(hook: bool, worker_secret: str) -> None:
    seen = await outcome(POSIXSUBPROCESS_SPAWN, hook=hook)
    assert seen.startswith("error:")
    assert "spawned" not in seen.replace("'spawned", "") and worker_secret not in seen


async def test_without_the_boundary_the_alias_spawn_works_which_is_why_weak_mode_is_opt_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    weak = Settings(sandbox_allow_weak=True, sandbox_bwrap_path="no-such-bwrap")
    out, _ = await run_code(POSIXSUBPROCESS_SPAWN, settings=weak)
    assert "spawned" in str(out.outputs["output"].value)


async def test_without_the_boundary_the_code_node_refuses_and_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed = Settings(sandbox_bwrap_path="no-such-bwrap")
    with pytest.raises(SandboxError, match=r"bubblewrap.*ORCH_SANDBOX_ALLOW_WEAK") as refused:
        await run_code("return 1", settings=closed)
    assert refused.value.kind == "unavailable"


@pytest.mark.parametrize("weak", [False, True])
async def test_a_bubblewrap_that_cannot_create_namespaces_means_refusal_unless_weak_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weak: bool,
) -> None:
    fake = tmp_path / "bwrap"  # what bwrap says under Docker's default seccomp profile
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    settings = Settings(sandbox_bwrap_path=str(fake), sandbox_allow_weak=weak)
    if weak:
        out, _ = await run_code("return 7", settings=settings)
        assert out.outputs["output"].value == 7
        return
    with pytest.raises(SandboxError, match=r"No permissions.*ORCH_SANDBOX_ALLOW_WEAK"):
        await run_code("return 7", settings=settings)


READ_ENVIRONS = textwrap.dedent("""\
    import os
    seen = []
    for pid in {1, 2, 3, os.getppid(), %d}:
        try:
            seen.append(open('/proc/%%d/environ' %% pid, 'rb').read().decode(errors='replace'))
        except OSError as exc:
            seen.append(repr(exc))
    return seen
    """)


@pytest.mark.parametrize("hook", [True, False])
async def test_the_workers_environment_cannot_be_read(hook: bool, worker_secret: str) -> None:
    seen = await outcome(READ_ENVIRONS % os.getpid(), hook=hook)
    assert worker_secret not in seen


@pytest.mark.parametrize("hook", [True, False])
async def test_sqlite_and_other_writes_outside_scratch_fail(hook: bool) -> None:
    targets = [HERE / f"escape-{uuid.uuid4().hex}.db",
               Path(os.path.dirname(os.__file__)) / f"escape-{uuid.uuid4().hex}.db"]
    code = "\n".join(
        ["import sqlite3", "errors = []"]
        + [f"try:\n    sqlite3.connect({str(t)!r}).execute('create table t(x)')\n"
           f"except Exception as exc:\n    errors.append(repr(exc))" for t in targets]
        + [f"try:\n    open({str(targets[0]) + '.txt'!r}, 'w').write('x')\n"
           f"except Exception as exc:\n    errors.append(repr(exc))",
           "return errors"])
    seen = await outcome(code, hook=hook)
    for target in targets:
        assert not target.exists() and not Path(str(target) + ".txt").exists(), seen


@pytest.mark.parametrize("hook", [True, False])
async def test_pidfd_signals_fail(hook: bool) -> None:
    code = ("import os, signal\nfd = os.pidfd_open(os.getppid())\n"
            "signal.pidfd_send_signal(fd, signal.SIGKILL)\nreturn 'sent'")
    seen = await outcome(code, hook=hook)
    assert seen.startswith("error:") and "Operation not permitted" in seen


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.3)
    yield server
    server.close()


@pytest.mark.parametrize("hook", [True, False])
async def test_sockets_fail(hook: bool, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nreturn 'in'"
    seen = await outcome(code, hook=hook)
    assert seen.startswith("error:")
    with pytest.raises(TimeoutError):
        listener.accept()  # nobody connected


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("hook", [True, False])
async def test_ctypes_fork_and_kill_fail(hook: bool, victim: subprocess.Popen[bytes]) -> None:
    code = (f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"return [libc.fork(), libc.kill({victim.pid}, 9), libc.kill(1, 9)]")
    seen = await outcome(code, hook=hook)
    assert seen.startswith("error:") or seen == repr([-1, -1, -1])
    assert victim.poll() is None


@pytest.mark.parametrize("hook", [True, False])
async def test_a_fork_bomb_fails_at_once(hook: bool) -> None:
    seen = await outcome("import os\nwhile True:\n    os.fork()", hook=hook)
    assert seen.startswith("error:") and ("Operation not permitted" in seen or "blocks" in seen)


async def test_exec_after_start_fails() -> None:
    seen = await outcome("import os\nos.execv('/usr/bin/true', ['true'])", hook=False)
    assert "Operation not permitted" in seen


async def test_a_memory_bomb_hits_the_memory_limit() -> None:
    with pytest.raises(SandboxError) as failed:
        await bare("x = bytearray(1 << 30)\nreturn len(x)", memory_mb=128)
    assert failed.value.kind == "memory"


async def test_host_files_and_other_processes_are_not_visible() -> None:
    host_passwd = Path("/etc/passwd").read_text().splitlines()[0]
    code = textwrap.dedent("""\
        import os
        seen = {}
        for path in ('/etc/passwd', '/etc/shadow', '/root/.bashrc'):
            try:
                seen[path] = open(path).read()
            except OSError as exc:
                seen[path] = type(exc).__name__
        seen['pids'] = sorted(p for p in os.listdir('/proc') if p.isdigit())
        seen['uid'] = [os.getuid(), os.getgid()]
        return seen
        """)
    seen = await bare(code)
    assert isinstance(seen, dict)
    assert host_passwd not in str(seen)
    assert seen["/etc/shadow"] in ("FileNotFoundError", "PermissionError")
    assert str(os.getpid()) not in seen["pids"] and len(seen["pids"]) <= 2
    assert seen["uid"] == [65534, 65534]


async def test_legit_code_works_and_the_loop_stays_free() -> None:
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(10):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    code = ("import json, math, time\nopen('n.json', 'w').write(json.dumps(items))\n"
            "time.sleep(0.5)\nreturn {'sum': math.fsum(json.load(open('n.json')))}")
    (out, _), _none = await asyncio.gather(run_code(code, [1.5, 2.5]), ticker())
    assert out.outputs["output"].value == {"sum": 4.0}
    assert len(ticks) == 10 and ticks[-1] - ticks[0] < 0.45  # ticked while the code ran


DIES_WITH_PARENT = textwrap.dedent("""\
    import asyncio, sys
    sys.path.insert(0, %r)
    from orchestrator.host.sandbox.python import SandboxLimits, run_python
    from orchestrator.settings import load_settings
    async def main():
        task = asyncio.ensure_future(run_python('import time\\ntime.sleep(60)', None, SandboxLimits(60, 128),
                                                settings=load_settings()))
        await asyncio.sleep(1.0)
        print('ready', flush=True)
        await task
    asyncio.run(main())
    """)


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_sandbox_dies_with_its_worker() -> None:
    worker = subprocess.Popen([sys.executable, "-c", DIES_WITH_PARENT % str(HERE.parents[1])],
                              stdout=subprocess.PIPE)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == b"ready"
        inside = _descendants(worker.pid)
        assert len(inside) >= 2  # bubblewrap and the sandboxed interpreter (at least)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in inside) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in inside if _alive(p)]
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()


async def test_an_output_flood_is_cut_off_without_filling_the_workers_memory() -> None:
    with pytest.raises(SandboxError, match="wrote more than") as failed:
        await run_code("import os\nwhile True:\n    os.write(1, b'x' * 65536)", timeout_s=20)
    assert failed.value.kind == "output"


def test_a_read_only_path_under_tmp_is_visible_inside_the_sandbox(tmp_path: Path) -> None:
    """A checkout or venv under /tmp (CI clones live anywhere) is bound on top of the
    sandbox's own /tmp, not hidden by it; it stays read-only."""
    assert str(tmp_path).startswith("/tmp/")
    tmp_path.chmod(0o755)  # readable by the sandbox's uid 65534, as a checkout is
    (tmp_path / "data.txt").write_text("seen inside\n")
    argv = bwrap.confine(
        ["/bin/sh", "-c", f"cat {tmp_path}/data.txt; echo x > {tmp_path}/new.txt || echo read-only"],
        bwrap.Confinement(ro_paths=(str(tmp_path),)), load_settings())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines() == ["seen inside", "read-only"], done.stderr
    assert not (tmp_path / "new.txt").exists()


async def test_no_pipe_of_a_killed_sandbox_outlives_the_call() -> None:
    """A sandbox killed for flooding stdout, or timed out while flooding stderr, leaves no
    pipe transport open (one closed later by the garbage collector broke a fresh-clone CI
    run with a ResourceWarning in an unrelated test)."""
    floods = [("import os\nwhile True:\n    os.write(1, b'x' * 65536)", 20.0, "output"),
              ("import os\nwhile True:\n    os.write(2, b'y' * 65536)", 1.0, "timeout")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for code, timeout_s, kind in floods:
            with pytest.raises(SandboxError) as failed:
                await run_python(code, None, SandboxLimits(timeout_s, 256), settings=load_settings())
            assert failed.value.kind == kind
        gc.collect()
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


# Removes the audit hook from inside, as an attacker can: gc finds the hook's closure and
# its ``deny`` cell is replaced. Then writes 1 MiB chunks, 16 MiB per file, up to 256 MiB,
# into each folder, and reports [MiB written, the error that stopped it].
FILL_WITHOUT_HOOK = textwrap.dedent("""\
    import gc, os
    for obj in gc.get_objects():
        if getattr(obj, '__name__', '') == 'hook' and getattr(obj, '__closure__', None):
            for cell in obj.__closure__:
                if getattr(cell.cell_contents, '__name__', '') == 'deny':
                    cell.cell_contents = lambda *args, **kwargs: None
    chunk = b'x' * (1 << 20)
    out = {}
    for folder in ('/dev/shm', '/dev', '/', '/tmp'):
        written, error = 0, ''
        try:
            for n in range(16):
                with open(f'{folder}/fill-{n}', 'wb') as f:
                    for _ in range(16):
                        f.write(chunk)
                        written += 1
        except OSError as exc:
            error = os.strerror(exc.errno)
        out[folder] = [written, error]
        for n in range(16):
            try:
                os.unlink(f'{folder}/fill-{n}')
            except OSError:
                pass
    return out
    """)
NON_ROOT_UID = 4242
NON_ROOT_WORKER = textwrap.dedent("""\
    import asyncio, json, sys
    from orchestrator.host.sandbox.python import SandboxLimits, run_python
    from orchestrator.settings import load_settings
    ran = asyncio.run(run_python(sys.argv[1], None, SandboxLimits(30, int(sys.argv[2])), settings=load_settings()))
    print(json.dumps(ran.value))
    """)
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"


def as_non_root_worker(code: str, memory_mb: int) -> object:
    """The value of ``code`` run by a Code sandbox of a worker that is an ordinary uid
    (bubblewrap then makes a user namespace and the sandbox is that uid on the host)."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    done = subprocess.run(
        ["setpriv", f"--reuid={NON_ROOT_UID}", f"--regid={NON_ROOT_UID}", "--clear-groups", "--",
         SYSTEM_PYTHON, "-c", NON_ROOT_WORKER, code, str(memory_mb)],
        cwd="/", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{HERE.parents[1]}:{site}"},
        capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to a non-root uid")
@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON),
                    reason="needs the system's interpreter of the same version as this one")
def test_with_the_hook_removed_a_non_root_workers_sandbox_writes_only_its_sized_scratch() -> None:
    """The sandbox owns bubblewrap's root and /dev tmpfs in its user namespace: before, it
    wrote 256 MiB to each of /dev/shm, /dev and / (half the host's RAM was the bound)."""
    seen = as_non_root_worker(FILL_WITHOUT_HOOK, memory_mb=48)
    assert isinstance(seen, dict)
    for folder in ("/dev/shm", "/dev", "/"):
        assert seen[folder] == [0, "Read-only file system"], seen
    assert seen["/tmp"] == [48, "No space left on device"]  # the scratch: min(64, memory_mb)


READ_TMPFS = textwrap.dedent("""\
    mounts = []
    for line in open('/proc/self/mountinfo'):
        fields = line.split()
        at = fields.index('-')
        if fields[at + 1] == 'tmpfs':
            size = [o[5:] for o in fields[-1].split(',') if o.startswith('size=')]
            mounts.append([fields[4], 'ro' in fields[5].split(','), size[0] if size else None])
    return mounts
    """)


@pytest.mark.parametrize("memory_mb", [40, 256])
async def test_every_tmpfs_is_read_only_or_sized_within_the_memory_budget(memory_mb: int) -> None:
    """Tmpfs pages are memory that RLIMIT_AS does not count."""
    mounts = await bare(READ_TMPFS, memory_mb=memory_mb)
    assert isinstance(mounts, list)
    writable = {point: size for point, read_only, size in mounts if not read_only}
    assert writable == {"/tmp": f"{min(64, memory_mb) * 1024}k"}, mounts
    assert {point for point, read_only, _size in mounts if read_only} == {"/", "/dev"}


# Calls the OS layer refuses, with why, whatever their arguments (zeros here).
REFUSED_CALLS = ["tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "memfd_secret", "io_setup",
                 "io_submit", "modify_ldt", "move_pages", "migrate_pages", "mbind", "kcmp", "vmsplice",
                 "memfd_create", "shmget", "msgget", "kill", "ptrace"]


@pytest.mark.parametrize("name", REFUSED_CALLS)
async def test_a_refused_system_call_answers_eperm_with_the_hook_off(name: str) -> None:
    import pyseccomp

    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    code = (f"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"got = libc.syscall({number}, 0, 0, 0, 0, 0, 0)\n"
            f"return [got, os.strerror(ctypes.get_errno()) if got == -1 else '']")
    assert await bare(code) == [-1, "Operation not permitted"]
