"""uv.lock pins what ./dev and the Dockerfile install, and matches pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        pytest.skip("uv is not installed")  # ./dev always installs it
    return found


def test_the_lock_file_matches_pyproject() -> None:
    result = subprocess.run([uv(), "lock", "--check", "--offline"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_dockerfile_export_of_runtime_requirements_is_pinned_and_has_no_test_tools() -> None:
    result = subprocess.run([uv(), "export", "--frozen", "--no-emit-project", "--extra", "ops"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    pins = [line.split(" ")[0] for line in result.stdout.splitlines() if "==" in line and not line.startswith(" ")]
    names = {pin.split("==")[0].lower() for pin in pins}
    assert {"agno", "celery", "fastapi", "pydantic-settings", "flower", "fastmcp"} <= names
    assert not names & {"pytest", "mypy", "playwright", "pgserver", "hypothesis"}
