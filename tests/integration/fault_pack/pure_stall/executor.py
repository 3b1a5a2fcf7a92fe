"""The stall node (``../stall``) declared pure: it runs as a chain's link."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_STALL = Path(__file__).parent.parent / "stall" / "executor.py"
_spec = importlib.util.spec_from_file_location("fault_pack_stall", _STALL)
assert _spec is not None and _spec.loader is not None
_stall = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stall)


class PureStall(_stall.Stall):  # type: ignore[name-defined,misc]
    node_type = "pure_stall"


executor = PureStall()
