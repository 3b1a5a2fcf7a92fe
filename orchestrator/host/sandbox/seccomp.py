"""Seccomp filters of the sandbox, compiled to classic BPF with libseccomp (``pyseccomp``).

Every program is "allow by default, refuse a list" (a deny list keeps interpreters and
runtimes working across libc versions; the namespaces are the main boundary, seccomp
removes the kernel interfaces that cross it or attack the kernel). One list,
:data:`BOUNDARY`, names those interfaces (``ptrace``, ``process_vm_readv/writev``,
``unshare``, ``setns``, ``mount`` and the new mount API, ``pivot_root``, ``chroot``,
``bpf``, ``perf_event_open``, the key ring, ``userfaultfd``, ``io_uring_*``, module
loading, ``kexec``, ``reboot``, ``swapon/off``, file handles, ``acct``, ``quotactl``,
``syslog``, ``personality``, ``move_pages``, ``kcmp``, ``io_setup``, ``memfd_secret``,
``modify_ldt``, ``mbind``, ...); every program refuses all of it, and refuses creating
namespaces through ``clone`` (``clone3`` answers ENOSYS so libc and language runtimes
fall back to ``clone``, whose flags a filter can read).

- :func:`confinement_bpf` (the Code node, given to bubblewrap with ``--seccomp FD``)
  adds :data:`CODE_ONLY`: no process creation (``fork``, ``vfork``, ``clone`` without
  ``CLONE_THREAD``), no signals (``kill``, ``tkill``, ``tgkill``, ``rt_*sigqueueinfo``) or
  pidfds, no sockets at all, no memory outside ``RLIMIT_AS`` (memfds, System V shared
  memory and message queues), no ``vmsplice``.
- :func:`command_bpf` (commands such as stdio MCP servers) keeps process creation and
  ``execve`` working, since servers start helpers (``npx``, ``uvx``), and adds
  :data:`COMMAND_ONLY` plus a socket rule: ``socket``/``socketpair`` of any family other
  than ``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` (netlink, packet, vsock, ...) answers
  EAFNOSUPPORT, the answer of a kernel built without that family, which libc handles
  (glibc's address-configuration check falls back when netlink is missing).
  ``kill``, ``tkill``, ``tgkill``, ``pidfd_open`` and ``pidfd_send_signal`` stay allowed:
  the PID namespace shows a command only its own processes (and bubblewrap's init, which
  dies with it), and servers signal and wait for their helpers with them (Python's asyncio
  uses pidfds, Node and npm send signals, Go's runtime preempts its threads with
  ``tgkill``). ``memfd_create`` (Chromium), System V IPC and ``vmsplice`` stay allowed too
  (Docker's default profile allows them; a server's memory is bounded per process only).
  ``pidfd_getfd`` is refused: it copies a descriptor out of another process, the access
  ``ptrace`` gives, and no server needs it.
- :func:`no_exec_bpf` refuses ``execve``/``execveat``; the Code node's child installs it
  itself (after the interpreter has started) before the user's code.

bubblewrap reads a program from a descriptor (``--seccomp FD``): :func:`program_fd` makes
one for a spawn that passes descriptors (the Code node), :func:`program_path` a path that
opens one for a spawner that closes them (the MCP SDK; see ``command``).

Refused calls fail with EPERM (ENOSYS for ``clone3``, EAFNOSUPPORT for socket families),
so the program sees an ``OSError`` rather than being killed. Any non-native architecture
is killed (libseccomp default).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import tempfile
from functools import lru_cache
from typing import Any

CLONE_THREAD = 0x00010000
# Namespace flags of clone(2); CLONE_NEWTIME (0x80) is left out: in clone(2) that bit is
# part of the exit signal, and time namespaces are made with unshare/clone3 (refused).
CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)

# Kernel interfaces that cross the sandbox's boundary or attack the kernel. The second
# block: other processes' pages (move_pages, migrate_pages) and kernel objects (kcmp, an
# ordering oracle used against KASLR), the host-wide AIO context count (io_setup: a
# sandbox could take all of fs.aio-max-nr from the host's databases), secret memory,
# x86 LDT entries and NUMA policy; Docker's default profile refuses all but io_setup and
# memfd_secret, and neither CPython, a fastmcp server nor Node calls any of them (strace).
BOUNDARY = (
    "ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "open_tree_attr",
    "fsopen", "fsmount", "fspick", "fsconfig", "mount_setattr",
    "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "open_by_handle_at", "name_to_handle_at", "acct",
    "quotactl", "quotactl_fd", "syslog", "lookup_dcookie", "personality",
    "move_pages", "migrate_pages", "kcmp", "io_setup", "io_submit", "memfd_secret",
    "modify_ldt", "mbind",
)
# The Code node's additions: its code may not start processes, signal (``tkill``,
# ``tgkill`` and ``rt_*sigqueueinfo`` are ``kill`` by thread id) or connect, nor hold
# memory that ``RLIMIT_AS`` does not count: a memfd's pages, System V shared memory
# segments and message queues outlive their mappings (a fresh IPC namespace allows
# ~ULONG_MAX bytes of segments), so with the audit hook removed they would hold host
# memory past ``memory_mb``. ``vmsplice`` hands user pages to pipes (the Dirty Pipe class
# of bugs); nothing in CPython calls it.
CODE_ONLY = (
    "fork", "vfork", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "kill", "socket",
    "socketpair", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "memfd_create", "shmget", "msgget", "vmsplice",
)
# The additions for commands (process creation, signals and sockets stay allowed).
COMMAND_ONLY = ("pidfd_getfd",)
SOCKET_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its Python binding) is missing; the message names what to install."""


def _filter() -> tuple[Any, Any]:
    try:
        import pyseccomp
    except (ImportError, OSError) as exc:  # OSError: the binding found no libseccomp.so.2
        raise SeccompUnavailable(
            f"libseccomp is not usable ({exc}); install the Debian package libseccomp2 "
            "and the Python package pyseccomp"
        ) from exc
    return pyseccomp, pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)


def _export(flt: Any) -> bytes:
    with tempfile.TemporaryFile() as sink:
        flt.export_bpf(sink)
        sink.seek(0)
        return sink.read()


def _refuse(sc: Any, flt: Any, names: tuple[str, ...]) -> None:
    eperm = sc.ERRNO(errno.EPERM)
    for name in names:
        try:
            flt.add_rule(eperm, name)
        except (OSError, ValueError):
            continue  # a call this kernel/architecture (or libseccomp) does not know
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")


@lru_cache(maxsize=1)
def confinement_bpf() -> bytes:
    """The Code node's filter (bubblewrap installs it); raises :class:`SeccompUnavailable`."""
    sc, flt = _filter()
    _refuse(sc, flt, BOUNDARY + CODE_ONLY)
    # Without CLONE_THREAD a clone makes a process (namespaces included): refused.
    flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    return _export(flt)


@lru_cache(maxsize=1)
def command_bpf() -> bytes:
    """The filter of confined commands (see the module docstring)."""
    sc, flt = _filter()
    _refuse(sc, flt, BOUNDARY + COMMAND_ONLY)
    eperm = sc.ERRNO(errno.EPERM)
    for flag in CLONE_NEW_FLAGS:
        flt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    no_family = sc.ERRNO(errno.EAFNOSUPPORT)
    allowed = sorted(SOCKET_FAMILIES)
    for name in ("socket", "socketpair"):
        # Rules of one call are alternatives: every value below the largest allowed
        # family that is not allowed, and everything above it.
        for family in range(allowed[-1]):
            if family not in allowed:
                flt.add_rule(no_family, name, sc.Arg(0, sc.EQ, family))
        flt.add_rule(no_family, name, sc.Arg(0, sc.GT, allowed[-1]))
    return _export(flt)


@lru_cache(maxsize=1)
def no_exec_bpf() -> bytes:
    """The filter the child adds before user code: no ``execve``/``execveat``."""
    sc, flt = _filter()
    eperm = sc.ERRNO(errno.EPERM)
    for name in ("execve", "execveat"):
        flt.add_rule(eperm, name)
    return _export(flt)


def program_fd(program: bytes) -> int:
    """A new inheritable descriptor (a memfd) holding ``program``, read from its start."""
    fd = os.memfd_create("sandbox-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


_KEPT: dict[tuple[int, bytes], str] = {}  # (pid, program) -> its /proc path


def program_path(program: bytes) -> str:
    """A path that opens ``program`` read-only, for processes this one starts.

    A sealed memfd (no write, no resize) that this process keeps open for its life, one
    per program and process, reached as ``/proc/<pid>/fd/<fd>``; close-on-exec, so no
    child inherits it, while any child of the same uid can open the path.
    """
    key = (os.getpid(), program)
    if key not in _KEPT:
        fd = os.memfd_create("sandbox-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.write(fd, program)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK
                    | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        _KEPT[key] = f"/proc/{os.getpid()}/fd/{fd}"
    return _KEPT[key]
