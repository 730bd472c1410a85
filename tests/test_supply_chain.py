"""The environment the tests run in is the locked one, and nothing runs at start-up that
should not: every pin exact and hashed, every installed locked package at its pinned
version, and no `.pth` start-up file but the three a plain install makes. (LiteLLM 1.82.8
was compromised through exactly such a file, run by every Python that started.)"""

from __future__ import annotations

import importlib.metadata
import json
import re
import site
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.servers import DEPLOY_PYTHON

ROOT = Path(__file__).resolve().parent.parent
LOCKS = [ROOT / "tests" / "requirements.lock", ROOT / "deploy" / "requirements.lock"]

# setuptools' shim, the finder of our own editable install, and coverage's hook for
# measuring subprocesses (inert unless COVERAGE_PROCESS_START or _CONFIG is set; the test
# venv only, for tests/test_coverage.py): their exact code.
EXPECTED_PTH = {
    "a1_coverage.pth": re.compile(
        re.escape(
            'import sys; exec(\'import os\\n\\nif os.getenv("COVERAGE_PROCESS_START") or '
            'os.getenv("COVERAGE_PROCESS_CONFIG"):\\n try:\\n  import coverage\\n '
            'except:\\n  pass\\n else:\\n  coverage.process_startup(slug="pth")\')\n'
        )
    ),
    "distutils-precedence.pth": re.compile(
        r"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os\.environ\.get\(var, "
        r"'local'\) == 'local'; enabled and __import__\('_distutils_hack'\)\.add_shim\(\); \s*"
    ),
    "__editable__.context_proxy-0.1.0.pth": re.compile(
        r"import __editable___context_proxy_0_1_0_finder; "
        r"__editable___context_proxy_0_1_0_finder\.install\(\)\s*|" + re.escape(str(ROOT)) + r"\s*"
    ),
}


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every requirement in a pip-compile lock file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text()):
        first = block.split("\n", 1)[0]
        if first.startswith("#") or not first.strip():
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)==([^\s\\]+)", first)
        assert match, f"{path.name}: not an exact pin: {first}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
        assert hashes, f"{path.name}: {first} has no hash"
        entries[_normal(match.group(1))] = (match.group(2), hashes)
    return entries


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_dependency_is_pinned_exactly() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        requirements += extra
    for requirement in requirements:
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==[0-9][^\s;]*", requirement), requirement


def test_the_locks_pin_and_hash_everything() -> None:
    runtime = locked(LOCKS[1])
    everything = locked(LOCKS[0])
    assert runtime["litellm"][0] == everything["litellm"][0] == "1.102.4"
    # The pip every test virtualenv upgrades to first is the one the test lock pins.
    assert locked(ROOT / "tests" / "pip.lock") == {"pip": everything["pip"]}
    for name, (version, _) in runtime.items():  # the test lock only adds test tools
        assert everything.get(name, ("missing",))[0] == version, f"{name}: the locks disagree"


def test_the_proxy_processes_run_on_the_deploy_lock_alone() -> None:
    """`.venv-deploy`, where every proxy process of the suite runs (`tests.servers`), holds
    what deploy/requirements.lock pins, at its versions, and nothing more: a module that
    only the test lock brings (fastapi once came only with llama-cpp-python) is missing."""
    listed = subprocess.run(
        [str(DEPLOY_PYTHON), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {_normal(p["name"]): p["version"] for p in json.loads(listed)}
    runtime = {name: version for name, (version, _) in locked(LOCKS[1]).items()}
    assert installed.pop("context-proxy") == "0.1.0"
    for bundled in ("pip", "setuptools"):  # what `python3 -m venv` puts in every venv
        installed.pop(bundled, None)
    assert installed == runtime


def test_the_environment_is_the_locked_one() -> None:
    everything = locked(LOCKS[0])
    for name, (version, _) in everything.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a build-only or platform-conditional entry
        assert installed == version, f"{name} {installed} is installed, the lock says {version}"


def test_no_unexpected_pth_start_up_files() -> None:
    directories = {*site.getsitepackages(), site.getusersitepackages(), *sys.path}
    found = {
        path
        for directory in directories
        if Path(directory).is_dir()
        for path in Path(directory).glob("*.pth")
    }
    assert found, "site-packages has at least the editable install's .pth"
    for path in sorted(found):
        pattern = EXPECTED_PTH.get(path.name)
        content = path.read_text(errors="replace")
        assert pattern is not None, f"unexpected start-up file {path}:\n{content[:500]}"
        assert pattern.fullmatch(content), f"{path} is not what its installer writes:\n{content}"
