"""A CPU quota per process (Linux cgroups, v1 ``cpu`` controller or v2), for benches that
ask how throughput scales with worker processes on a machine too small to give each its
own core.

On 2 cores shared with the load generator and Redis, adding a worker process cannot add
more than the cores the others leave (``bench/README.md``): one worker that uses one core
leaves too little for a second. With a quota of ``cores`` per worker process (each in a
cgroup of its own, ``cfs_quota_us = cores x cfs_period_us``), one worker's point is bound
by its quota, as on a machine with a core per worker, while the load generator and Redis
run unbounded beside it: N workers can then show N times one worker's throughput as long
as the machine has the N x ``cores`` plus what the others use. Needs root (the benches'
machine); without a writable cgroup controller it raises.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PERIOD_US = 100_000
V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")


class CpuQuotas:
    """Cgroups this process made, one per process given a quota; :meth:`close` removes them."""

    def __init__(self, cores: float) -> None:
        if cores <= 0:
            raise ValueError(f"a CPU quota of {cores} cores")
        self.cores = cores
        self.root, self.v2 = (V1, False) if (V1 / "cgroup.procs").exists() else (V2, True)
        if self.v2 and "cpu" not in (V2 / "cgroup.controllers").read_text().split():
            raise RuntimeError("no cgroup cpu controller on this machine: run without --worker-cores")
        self.groups: list[Path] = []

    def limit(self, pid: int) -> None:
        """Put ``pid`` (every thread of it) in a cgroup of its own capped at ``cores``."""
        group = self.root / f"orch-bench-{os.getpid()}-{len(self.groups)}"
        group.mkdir()
        self.groups.append(group)
        quota = int(self.cores * PERIOD_US)
        if self.v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        (group / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        """Move what is left back to the root group and remove the groups."""
        for group in self.groups:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self.root / "cgroup.procs").write_text(pid)
                group.rmdir()
        self.groups = []
