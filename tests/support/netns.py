"""Hosts on one machine for host-fault tests: network namespaces on a private bridge.

:class:`Hosts` builds, under a prefix unique to this test process, one namespace per host
(each with its loopback and one ``eth0``) and a ``hub`` namespace holding the bridge that
joins them; the addresses (``10.77.0.0/24``) exist only inside these namespaces, so no
traffic leaves them and nothing on the machine's own interfaces changes. Faults are
namespace-local too:

* :meth:`Hosts.partition` drops every packet between a host and another (nftables, in the
  host's namespace), :meth:`Hosts.one_way` only what ``from_host`` sends to ``to_host``
  (in ``from_host``'s namespace); :meth:`Hosts.heal` removes them;
* :meth:`Hosts.degrade` adds latency and loss to a host's link (``tc netem``; on a kernel
  without netem, loss alone, by nftables dropping packets at random);
* :meth:`Hosts.freeze` SIGSTOPs every process in a host's namespace (a host that hangs),
  :meth:`Hosts.kill` SIGKILLs them (a host dying whole).

:func:`inside` moves the calling thread into a namespace for a ``with`` block: sockets it
opens meanwhile belong to that namespace for good (setns(2) is per thread). Every command
runs with a timeout, and :meth:`Hosts.teardown` (which never raises) kills what is left
in the namespaces by pid and deletes them, their links with them.

Needs root and ``ip``, ``nft``, ``tc`` (Debian: iproute2, nftables); :func:`unavailable`
says what is missing, for a skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

SUBNET = "10.77.0"
COMMAND_TIMEOUT_S = 10.0
CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")
FAULT_TABLE = "hostfault"  # the nftables table of partition rules
LOSS_TABLE = "hostloss"  # the nftables table of random loss (where netem is missing)


def unavailable() -> str | None:
    """Why host-fault tests cannot run here (None when they can)."""
    if os.geteuid() != 0:
        return "host-fault tests need root (network namespaces)"
    missing = [tool for tool in ("ip", "nft", "tc") if shutil.which(tool) is None]
    if missing:
        return f"host-fault tests need {', '.join(missing)} (apt-get install iproute2 nftables)"
    return None


def _run(args: Sequence[str], stdin: str | None = None) -> str:
    done = subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """Run the calling thread in network namespace ``namespace`` for the block."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(NETNS_DIR / namespace, os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


class Hosts:
    """Namespaces named ``<prefix>-<host>`` on one bridge; see the module doc."""

    def __init__(self, names: Sequence[str], prefix: str | None = None) -> None:
        self.prefix = prefix or f"hf{os.getpid()}"
        self.names = list(names)
        self.address = {name: f"{SUBNET}.{10 + i}" for i, name in enumerate(self.names)}
        self._made: list[str] = []  # namespaces created, to delete
        self._links: list[str] = []  # veth ends created in this namespace, to delete if left

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def exec_prefix(self, host: str) -> list[str]:
        """The command prefix that runs a program on ``host``."""
        return ["ip", "netns", "exec", self.ns(host)]

    def build(self) -> Hosts:
        """Create the hub, the hosts and their links; on failure remove what was made."""
        try:
            hub = self._add_ns("hub")
            _run(["ip", "-n", hub, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", hub, "link", "set", "br0", "up"])
            for i, name in enumerate(self.names):
                ns = self._add_ns(name)
                inner, outer = f"{self.prefix}v{i}", f"{self.prefix}h{i}"
                _run(["ip", "link", "add", inner, "type", "veth", "peer", "name", outer])
                self._links.append(inner)
                _run(["ip", "link", "set", inner, "netns", ns])
                _run(["ip", "link", "set", outer, "netns", hub])
                _run(["ip", "-n", hub, "link", "set", outer, "master", "br0", "up"])
                _run(["ip", "-n", ns, "link", "set", inner, "name", "eth0"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address[name]}/24", "dev", "eth0"])
                _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        except BaseException:
            self.teardown()
            raise
        return self

    def _add_ns(self, name: str) -> str:
        ns = self.ns(name)
        _run(["ip", "netns", "add", ns])
        self._made.append(ns)
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        return ns

    # -- faults ------------------------------------------------------------------------

    def _rules(self, host: str, chains: str, table: str = FAULT_TABLE) -> None:
        _run([*self.exec_prefix(host), "nft", "-f", "-"], stdin=f"table inet {table} {{\n{chains}\n}}\n")

    def partition(self, host: str, other: str) -> None:
        """No packet passes between ``host`` and ``other`` (both directions)."""
        peer = self.address[other]
        self._rules(host, f"chain i {{ type filter hook input priority 0; ip saddr {peer} drop; }}\n"
                          f"chain o {{ type filter hook output priority 0; ip daddr {peer} drop; }}")

    def one_way(self, from_host: str, to_host: str) -> None:
        """What ``from_host`` sends to ``to_host`` is dropped; the other way works."""
        self._rules(from_host, f"chain o {{ type filter hook output priority 0; "
                               f"ip daddr {self.address[to_host]} drop; }}")

    def heal(self) -> None:
        """Every partition and loss rule and netem qdisc removed, on every host."""
        for host in self.names:
            for table in (FAULT_TABLE, LOSS_TABLE):
                with contextlib.suppress(RuntimeError):
                    _run([*self.exec_prefix(host), "nft", "delete", "table", "inet", table])
            with contextlib.suppress(RuntimeError):
                _run([*self.exec_prefix(host), "tc", "qdisc", "del", "dev", "eth0", "root"])

    def has_netem(self) -> bool:
        """Whether the kernel has ``tc netem`` (some VM kernels are built without it)."""
        try:
            _run([*self.exec_prefix(self.names[0]), "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                  "delay", "1ms"])
        except RuntimeError:
            return False
        _run([*self.exec_prefix(self.names[0]), "tc", "qdisc", "del", "dev", "lo", "root"])
        return True

    def degrade(self, host: str, *, delay_ms: int, jitter_ms: int, loss_pct: int) -> str:
        """Latency and loss on ``host``'s link, both ways for loss; returns what was applied."""
        if self.has_netem():
            spec = ["delay", f"{delay_ms}ms", f"{jitter_ms}ms", "loss", f"{loss_pct}%"]
            _run([*self.exec_prefix(host), "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", *spec])
            return "netem " + " ".join(spec)
        drop = f"numgen random mod 100 < {loss_pct} drop;"
        self._rules(host, f"chain i {{ type filter hook input priority 0; iifname eth0 {drop} }}\n"
                          f"chain o {{ type filter hook output priority 0; oifname eth0 {drop} }}", LOSS_TABLE)
        return f"{loss_pct}% loss each way (nftables; this kernel has no netem, so no delay)"

    def pids(self, host: str) -> list[int]:
        """Every process in ``host``'s namespace."""
        return [int(p) for p in _run(["ip", "netns", "pids", self.ns(host)]).split()]

    def _signal(self, host: str, sig: signal.Signals) -> list[int]:
        done = []
        for pid in self.pids(host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                done.append(pid)
        return done

    def freeze(self, host: str) -> list[int]:
        """SIGSTOP every process on ``host`` (the host hangs); the pids stopped."""
        return self._signal(host, signal.SIGSTOP)

    def kill(self, host: str) -> list[int]:
        """SIGKILL every process on ``host`` (the host dies whole); the pids killed."""
        return self._signal(host, signal.SIGKILL)

    def teardown(self) -> None:
        """Kill what runs in our namespaces (by pid), delete them and any stray link."""
        for ns in reversed(self._made):
            with contextlib.suppress(RuntimeError, ValueError):
                for pid in (int(p) for p in _run(["ip", "netns", "pids", ns]).split()):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(RuntimeError):
                _run(["ip", "netns", "del", ns])
        self._made.clear()
        for link in self._links:  # left in this namespace only if the build failed midway
            if Path(f"/sys/class/net/{link}").exists():
                with contextlib.suppress(RuntimeError):
                    _run(["ip", "link", "del", link])
        self._links.clear()
