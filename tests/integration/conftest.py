"""The integration tier's fixtures: a real upstream on loopback (`tests/upstream.py`) and a
real proxy in front of it (`tests/proxies.py`), on both upstream paths and both stores.

A test's proxy is `url`. A module whose proxy needs a config of its own overrides
`url_config` (pytest's override of a fixture by a module); a test that needs several
proxies, or one configured by the test itself, calls `start_proxy`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.proxies import proxy_config, serving
from tests.upstream import FakeUpstream, Reply, running_upstream


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
    upstream.hung_up = 0
    upstream.clock = time.time
    upstream.forget()  # every test's first request finds the prompt caches empty


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Start a real proxy (uvicorn on loopback) for a config dict; returns its base URL.
    Every proxy started is stopped when the test ends."""
    with ExitStack() as stack:
        yield lambda config: stack.enter_context(serving(config, tmp_path))


@pytest.fixture
def url_config(upstream: FakeUpstream) -> dict[str, Any]:
    """The config of the test's proxy (`url`): MODEL on the test upstream."""
    return proxy_config(upstream)


@pytest.fixture
def url(start_proxy: Callable[[dict[str, Any]], str], url_config: dict[str, Any]) -> str:
    """The base URL of a real proxy started for the test with `url_config`."""
    return start_proxy(url_config)


@pytest.fixture(params=[True, False], ids=["lean", "litellm"])
def lean(request: pytest.FixtureRequest) -> bool:
    """Both paths a request can take: the lean call to an OpenAI-compatible deployment,
    and LiteLLM's own `acompletion` (`server.lean_upstream: false`)."""
    return bool(request.param)


@pytest.fixture(params=["disk", "redis"])
def store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The `session` config section of each store: the disk default, or a test Redis."""
    if request.param == "disk":
        return {}
    return {"store": "redis", "redis_url": request.getfixturevalue("redis_url")}


@pytest.fixture(scope="module")
def module_url_config(_shared_upstream: FakeUpstream) -> dict[str, Any]:
    """The config of the module's proxy (`module_url`): MODEL on the test upstream."""
    return proxy_config(_shared_upstream)


@pytest.fixture(scope="module")
def module_url(
    module_url_config: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The base URL of one real proxy for all of a module's tests, with
    `module_url_config`: for a module of many quick cases (its tests share the upstream
    as it is, `_shared_upstream`)."""
    with serving(module_url_config, tmp_path_factory.mktemp("proxy")) as url:
        yield url
