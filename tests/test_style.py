"""The code base stays `ruff check` and `ruff format` clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    return subprocess.run([executable, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check() -> None:
    result = ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
