"""What every tier of the suite shares: a home directory of the suite's own, the tier
markers, and the Redis servers the tests start. Nothing here imports the proxy: a unit
test starts in a fraction of a second (the proxy and its upstream are
`tests/integration/conftest.py`'s).

Tiers, each a marker set here by where a test lives (`pytest -m unit` is the fast loop;
plain `pytest` runs everything, as CI does):

- `unit`: tests/unit and the checks at the top of tests/ (style, supply chain). A unit
  test starts no proxy, no upstream server, no Redis and no Prometheus; one in
  tests/unit that needs a server says so with `pytest.mark.integration` (a unit test
  that asks for a server's fixture fails the collection).
- `integration`: tests/integration and tests/benchmarks: a real proxy, upstream, Redis.
- `agents`: the real agent CLIs and SDK client programs (`AGENTS`), also `integration`.
- `slow`: the longest modules and tests (`SLOW`, measured with `--durations`).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from hypothesis import HealthCheck, settings

# Property tests are judged by what they find, never by how fast: on a busy 2-core
# machine one draw took 2.3 s, and Hypothesis's timing checks failed a correct test.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("unit", "integration", "agents", "slow")
# What a unit test may not ask for: each starts a server (or is a proxy in front of one).
SERVERS = frozenset(
    {
        "_shared_upstream",
        "upstream",
        "start_proxy",
        "url",
        "module_url",
        "redis_url",
        "redis_cluster_url",
    }
)
# Test modules that drive real agents and SDK client programs.
AGENTS = frozenset(
    {
        "integration/test_agents.py",
        "integration/test_node_clients.py",
        "integration/test_python_clients.py",
    }
)
# The longest (`--durations`): whole modules, or tests by node id under tests/ (their
# parameters aside), each over 20 s on the 2-core CI machine; installs are here too.
SLOW = frozenset(
    {
        *AGENTS,
        "integration/test_local_model.py",
        "test_coverage.py",
        "integration/test_long_conversation.py",
        "benchmarks/test_harness.py",
        "benchmarks/test_adversarial.py::test_the_quick_form_prints_every_row_and_meets_the_gate",
        "integration/test_readme.py::test_local_model_demo_block",
        "integration/test_readme.py::test_install_and_run_command",
        "integration/test_readme.py::test_lock_commands",
        "integration/test_metrics.py::test_two_workers_count_each_request_once",
    }
)


def pytest_configure(config: pytest.Config) -> None:
    """The suite and everything it starts see an empty home of their own, which must still
    be empty at the end: nothing is written outside the checkout and the temp dir. Caches
    (pip's, pip-tools') go to the checkout's `.cache/`. What the user's home holds for
    tools to read keeps its place: pip's config, and the rustup toolchain that pip asks
    for its version (rustup writes its settings into a home that has none)."""
    home = Path.home()
    for pip_config in (home / ".config" / "pip" / "pip.conf", home / ".pip" / "pip.conf"):
        if pip_config.is_file():
            os.environ.setdefault("PIP_CONFIG_FILE", str(pip_config))
    for variable, directory in (("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")):
        if (home / directory).is_dir():
            os.environ.setdefault(variable, str(home / directory))
    os.environ["XDG_CACHE_HOME"] = str(ROOT / ".cache")
    # Every proxy the suite runs, in-process or served, parses each resent body whole as
    # well and compares (`proxy.http.resends`): a kept message changed in place by any
    # part of a turn fails the test that made it.
    os.environ["PROXY_CHECK_RESENDS"] = "1"
    config.stash[_home_key] = tempfile.mkdtemp(prefix="context-proxy-tests-home-")
    os.environ["HOME"] = config.stash[_home_key]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    home = session.config.stash.get(_home_key, None)
    if home is None:
        return
    written = sorted(str(path.relative_to(home)) for path in Path(home).rglob("*"))
    shutil.rmtree(home, ignore_errors=True)
    if written:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"FAILED: the tests wrote into the home directory: {written[:20]}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_home_key = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tiers (see the module's docstring)."""
    misplaced = []
    for item in items:
        tiers = tiers_of(item)
        for tier in tiers:
            item.add_marker(tier)
        fixtures = SERVERS.intersection(getattr(item, "fixturenames", ()))
        if "unit" in tiers and fixtures:
            misplaced.append(f"{item.nodeid} ({', '.join(sorted(fixtures))})")
    if misplaced:
        raise pytest.UsageError(
            "unit tests that start a server (mark them `integration`):\n  " + "\n  ".join(misplaced)
        )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under a marker expression that no integration test can match (`-m unit`), the
    integration folders are not even imported (their imports take most of a unit run)."""
    if collection_path.parent == ROOT / "tests" and collection_path.name in INTEGRATION:
        return True if _no_integration_test_matches(config.getoption("markexpr")) else None
    return None


INTEGRATION = ("integration", "benchmarks")  # folders whose every test is `integration`
_MARKS = frozenset({*TIERS, "local_model"})  # all the marks an integration test may match by


def _no_integration_test_matches(markexpr: str) -> bool:
    names = set(re.findall(r"[\w.-]+", markexpr)) - {"and", "or", "not"}
    if not markexpr or not names <= _MARKS:
        return False
    expression = Expression.compile(markexpr)
    others = sorted(_MARKS - {"integration", "unit"})
    for count in range(len(others) + 1):
        for extra in itertools.combinations(others, count):
            if _matches(expression, {"integration", *extra}):
                return False
    return True


def _matches(expression: Expression, marks: set[str]) -> bool:
    return expression.evaluate(lambda name, /, **_: name in marks)


def tiers_of(item: pytest.Item) -> set[str]:
    where = Path(item.path).resolve().relative_to(ROOT / "tests").as_posix()
    marked = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
    unit = where.startswith("unit/") or "/" not in where
    tiers = marked | {"integration" if "integration" in marked or not unit else "unit"}
    if where in AGENTS:
        tiers |= {"agents", "integration"}
    if where in SLOW or item.nodeid.removeprefix("tests/").split("[")[0] in SLOW:
        tiers.add("slow")
    return tiers


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server of the test session's own, on a loopback port it holds."""
    from tests.redis_servers import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A three-node Redis Cluster on loopback, for the whole test session."""
    from tests.redis_servers import redis_cluster

    with redis_cluster() as url:
        yield url
