"""The unit tier's coverage of `proxy/`, measured as CI runs it and gated: a part of the
code no fast test reaches is a part whose change the inner loop cannot catch. What the
development guide says it is, is what it is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = 75.0  # percent of `proxy/`'s statements the unit tier runs, at least


def test_the_unit_tier_covers_the_code_as_documented(tmp_path: Path) -> None:
    report = tmp_path / "coverage.json"
    env = os.environ | {"COVERAGE_FILE": str(tmp_path / ".coverage")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit"]
    command += ["--cov=proxy", f"--cov-report=json:{report}", "--cov-report="]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    measured = json.loads(report.read_text())["totals"]["percent_covered"]
    assert measured >= FLOOR
    guide = (ROOT / "docs" / "development.md").read_text()
    documented = re.search(r"covers (\d+)% of the statements in `proxy/`", guide)
    assert documented is not None, "docs/development.md gives the unit tier's coverage"
    assert abs(float(documented.group(1)) - measured) <= 2, f"measured {measured:.1f}%"
