"""The code base stays `ruff check` and `ruff format` clean, and `mypy` clean (its
settings, strict on the pure core, are pyproject.toml's [tool.mypy])."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which(name, path=str(Path(sys.executable).parent)) or name
    return subprocess.run([executable, *args], cwd=ROOT, capture_output=True, text=True)


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return tool("ruff", *args)


def test_ruff_check() -> None:
    result = ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    """Every file pyproject.toml names (proxy/ and tests/unit) type-checks."""
    result = tool("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout
