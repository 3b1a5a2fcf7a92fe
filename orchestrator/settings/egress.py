"""Every outbound connection a node opens.

Read by ``orchestrator/host/egress/policy.py``. One group of
:class:`orchestrator.settings.Settings`, which every entry point builds once; a subsystem
takes the group it reads (a ``Settings`` is each of them).
"""

from __future__ import annotations

from orchestrator.settings.base import SettingsGroup


class EgressSettings(SettingsGroup):
    # Loopback, private, link-local, shared (CGNAT), reserved and multicast addresses are
    # refused unless this is set; cloud-metadata addresses stay refused even then.
    egress_allow_private: bool = False
    # Comma-separated hosts, IP addresses or CIDR networks allowed despite the rule above
    # (e.g. "127.0.0.1,10.1.0.0/16,db.internal"); the only way to reach a metadata address.
    egress_allow: str = ""

