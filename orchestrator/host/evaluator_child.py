"""The child side of ``evaluator.py``: evaluates JSONata requests under its own limits.

Started as ``python -I -c <this file's text> <memory_mb>`` (a fresh interpreter, no
project code on its path). Before anything else it limits its address space to
``memory_mb``; then it answers one JSON request line on stdin with one JSON reply line on
stdout, until stdin closes. Each request also sets a CPU-time limit (what the process has
used plus ``cpu_s``), so a runaway evaluation dies of SIGXCPU even if its parent died
before it could kill it.

Request: ``{"expression", "input", "timeout_ms", "max_depth", "cpu_s"}``. Reply:
``{"ok": true, "value": ...}`` or ``{"ok": false, "kind": "error" | "memory", "message"}``.
:func:`transform` is importable on its own (tests, benchmarks).
"""

from __future__ import annotations

import json
import math
import resource
import sys
from typing import Any


def transform(expression: str, value: Any, *, timeout_ms: int = 5000, max_depth: int = 500) -> Any:
    """Evaluate ``expression`` against ``value``; a JSONata error is a ValueError."""
    import jsonata

    try:
        compiled = jsonata.Jsonata(expression, timeout=timeout_ms, stack=max_depth)
        return compiled.evaluate(value)
    except jsonata.JException as exc:
        where = f" at position {exc.location}" if exc.location and exc.location > 0 else ""
        raise ValueError(
            f"parameter 'expression': JSONata error {exc.error}{where}: {exc} "
            f"(expression {expression!r})"
        ) from exc
    except (RecursionError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(
            f"parameter 'expression': JSONata evaluation failed: {exc} (expression {expression!r})"
        ) from exc


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = math.ceil(used.ru_utime + used.ru_stime + float(request["cpu_s"]))
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s if hard < 0 else min(cpu_s, hard), hard))
    try:
        value = transform(request["expression"], request["input"], timeout_ms=int(request["timeout_ms"]),
                          max_depth=int(request["max_depth"]))
        return {"ok": True, "value": value}
    except MemoryError:
        return {"ok": False, "kind": "memory", "message": "out of memory"}
    except ValueError as exc:
        return {"ok": False, "kind": "error", "message": str(exc)}


def _reply(answer: dict[str, Any]) -> bytes:
    try:
        return json.dumps(answer, ensure_ascii=False).encode("utf-8")
    except MemoryError:
        return b'{"ok": false, "kind": "memory", "message": "out of memory"}'
    except (TypeError, ValueError) as exc:
        return json.dumps({"ok": False, "kind": "error",
                           "message": f"parameter 'expression': the result is not JSON ({exc})"}).encode()


def main() -> None:
    limit = int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import jsonata  # noqa: F401  (imported once, before the first request)

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while line := stdin.readline():
        stdout.write(_reply(_answer(json.loads(line))) + b"\n")
        stdout.flush()


if __name__ == "__main__":
    main()
