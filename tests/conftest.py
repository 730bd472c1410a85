"""Shared fixtures: a real upstream on loopback and a real proxy in front of it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from proxy.config.settings import load_settings
from proxy.http.app import create_app
from tests.servers import serve
from tests.upstream import FakeUpstream, Reply, running_upstream

UPSTREAM_KEY = "sk-test-upstream-secret-0123456789"
MODEL = "gpt-4o-mini"
ROOT = Path(__file__).resolve().parent.parent


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


@pytest.fixture(scope="session")
def _shared_upstream() -> Iterator[FakeUpstream]:
    with running_upstream() as upstream:
        yield upstream


@pytest.fixture
def upstream(_shared_upstream: FakeUpstream) -> Iterator[FakeUpstream]:
    """The test upstream, with no queued replies and an empty record; left that way for
    the tests that use the shared one as it is."""
    _reset(_shared_upstream)
    yield _shared_upstream
    _reset(_shared_upstream)


def _reset(upstream: FakeUpstream) -> None:
    upstream.requests.clear()
    upstream.replies.clear()
    upstream.default = Reply()
    upstream.require_key = False


def proxy_config(upstream: FakeUpstream, **sections: dict[str, Any]) -> dict[str, Any]:
    """A config dict routing MODEL to the test upstream."""
    config: dict[str, Any] = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": upstream.base_url,
                    "api_key": UPSTREAM_KEY,
                },
            }
        ],
        "router_settings": {"num_retries": 0},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values} if isinstance(values, dict) else values
    return config


@pytest.fixture
def start_proxy(tmp_path: Any) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Start a real proxy (uvicorn on loopback) for a config dict; returns its base URL."""
    import yaml

    stack = ExitStack()

    def start(config: dict[str, Any]) -> str:
        config.setdefault("session", {}).setdefault("path", str(tmp_path / "sessions"))
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        settings = load_settings(path, environ={})
        return stack.enter_context(serve(create_app(settings)))

    with stack:
        yield start


@pytest.fixture
def proxy_url(upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]) -> str:
    return start_proxy(proxy_config(upstream))


@pytest.fixture(params=[True, False], ids=["lean", "litellm"])
def lean(request: pytest.FixtureRequest) -> bool:
    """Both paths a request can take: the lean call to an OpenAI-compatible deployment,
    and LiteLLM's own `acompletion` (`server.lean_upstream: false`)."""
    return bool(request.param)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server of the test session's own, on a loopback port it holds."""
    from tests.redis_servers import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture(params=["disk", "redis"])
def store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The `session` config section of each store: the disk default, or a test Redis."""
    if request.param == "disk":
        return {}
    return {"store": "redis", "redis_url": request.getfixturevalue("redis_url")}


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A three-node Redis Cluster on loopback, for the whole test session."""
    from tests.redis_servers import redis_cluster

    with redis_cluster() as url:
        yield url
