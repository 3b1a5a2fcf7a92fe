"""Seccomp filters of the sandbox, compiled to classic BPF with libseccomp (``pyseccomp``).

Two programs, both "allow by default, refuse a list" (a deny list keeps the interpreter
working across libc versions; the namespaces are the main boundary, seccomp removes the
kernel interfaces that cross it or attack the kernel):

- :func:`confinement_bpf` is given to bubblewrap (``--seccomp FD``) and applies from the
  first instruction of the sandboxed program. It refuses process creation (``fork``,
  ``vfork``, ``clone`` without ``CLONE_THREAD``; ``clone3`` answers ENOSYS so libc falls
  back to ``clone`` whose flags can be inspected), ``ptrace``, ``process_vm_readv/writev``,
  ``pidfd_open/send_signal/getfd``, ``kill``, every ``socket``, and the interfaces that
  reconfigure the kernel or namespaces (``unshare``, ``setns``, ``mount``, ``bpf``,
  ``perf_event_open``, ``keyctl``, ``userfaultfd``, ``io_uring_*``, module loading, ...).
- :func:`no_exec_bpf` refuses ``execve``/``execveat``; the child installs it itself (after
  the interpreter has started, so the start-up exec still works) before the user's code.

Refused calls fail with EPERM (ENOSYS for ``clone3``), so user code sees an ``OSError``
rather than a killed process. Any non-native architecture is killed (libseccomp default).
"""

from __future__ import annotations

import errno
import tempfile
from functools import lru_cache
from typing import Any

CLONE_THREAD = 0x00010000

DENIED = (
    "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev",
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "kill", "socket", "socketpair",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsmount", "fspick", "bpf", "perf_event_open", "keyctl", "add_key",
    "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "open_by_handle_at", "name_to_handle_at", "acct",
    "quotactl", "syslog", "lookup_dcookie", "personality",
)


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


@lru_cache(maxsize=1)
def confinement_bpf() -> bytes:
    """The filter bubblewrap installs; raises :class:`SeccompUnavailable`."""
    sc, flt = _filter()
    eperm = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            flt.add_rule(eperm, name)
        except (OSError, ValueError):
            continue  # a call this kernel/architecture does not have
    flt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return _export(flt)


@lru_cache(maxsize=1)
def no_exec_bpf() -> bytes:
    """The filter the child adds before user code: no ``execve``/``execveat``."""
    sc, flt = _filter()
    eperm = sc.ERRNO(errno.EPERM)
    for name in ("execve", "execveat"):
        flt.add_rule(eperm, name)
    return _export(flt)
