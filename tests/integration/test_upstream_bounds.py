"""A provider's reply is read within `server.max_upstream_reply_bytes`: a whole reply, or
one event of a stream, that passes it (here from a provider that never stops sending)
is read no further, and the client is told so, naming the setting: a 502 before the
stream began, the door's error event after. Nothing of such a turn is stored, and the
proxy answers everyone else meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import httpx
import pytest

from proxy.config.settings import ServerSettings
from tests.integration.test_error_words import ALL_ROUTES, ROUTES, config
from tests.proxies import serving
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

CAP = 1 << 20  # the test proxy's cap: a flood is refused after a MiB
KEY = "bounds-key-0123456789abcdef"
FINISHED = ("[DONE]", "message_stop", "response.completed")


class Proxy(NamedTuple):
    url: str
    path: str  # the upstream path it takes: "lean", or "litellm" for every call


@pytest.fixture(scope="module")
def lean_proxy(
    _shared_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    with bounded_proxy("lean", _shared_upstream, tmp_path_factory) as served:
        yield served


@pytest.fixture(scope="module")
def litellm_proxy(
    _shared_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    with bounded_proxy("litellm", _shared_upstream, tmp_path_factory) as served:
        yield served


@pytest.fixture(params=["lean", "litellm"])
def proxy(request: pytest.FixtureRequest) -> Proxy:
    """A proxy of every route with a 1 MiB cap, on either path."""
    served: Proxy = request.getfixturevalue(f"{request.param}_proxy")
    return served


@contextmanager
def bounded_proxy(
    path: str, upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    bounded = config(upstream)
    bounded["server"] = {
        "lean_upstream": path == "lean",
        "max_upstream_reply_bytes": CAP,
        "request_timeout_seconds": 20,  # a proxy reading a flood for ever fails by then
    }
    bounded["auth"] = {"keys": [{"key": KEY, "tenant": "bounds"}]}
    with serving(bounded, tmp_path_factory.mktemp("proxy")) as url:
        yield Proxy(url=url, path=path)


def send(url: str, route: str, session: str, stream: bool) -> httpx.Response:
    path, model, body = ALL_ROUTES[route]
    headers = {"Authorization": f"Bearer {KEY}", "X-Session-Id": session}
    body = {"model": model, **body, "stream": stream}
    return httpx.post(url + path, json=body, headers=headers, timeout=30)


def stored(url: str, session: str) -> list[Any]:
    headers = {"Authorization": f"Bearer {KEY}"}
    answer = httpx.get(f"{url}/v1/sessions/{session}", headers=headers)
    return answer.json()["messages"] if answer.status_code == 200 else []


def says_the_cap(text: str, cap: int = CAP) -> bool:
    return "server.max_upstream_reply_bytes" in text and f"({cap} bytes)" in text


CASES = [
    pytest.param(False, None, id="whole"),
    pytest.param(True, 0, id="stream-first-event"),
    pytest.param(True, None, id="stream-mid"),
]


@pytest.mark.parametrize(("stream", "before"), CASES)
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_flood_is_refused_naming_the_cap_and_nothing_is_stored(
    lean_proxy: Proxy, upstream: FakeUpstream, route: str, stream: bool, before: int | None
) -> None:
    """On the lean path, which reads every reply itself."""
    refused(lean_proxy, upstream, route, stream, before)


@pytest.mark.parametrize(("stream", "before"), CASES)
@pytest.mark.parametrize(
    "route", ["chat", "chat-to-claude", "messages-translated", "responses-translated"]
)
def test_litellms_calls_on_the_pool_are_bounded_too(
    litellm_proxy: Proxy, upstream: FakeUpstream, route: str, stream: bool, before: int | None
) -> None:
    """LiteLLM's calls read their replies themselves, on the proxy's pool: its OpenAI
    route and its chat translation to Claude are read within the cap as the lean path's
    are (a whole reply that never ended was read, decoded and quoted, tens of MB). Its
    translation of Claude's stream has no chunk to relay before the text: a flood there
    is a 502."""
    began = route != "chat-to-claude"
    refused(litellm_proxy, upstream, route, stream, before, began)


@pytest.mark.parametrize(("stream", "before"), CASES[1:])
def test_litellms_messages_stream_is_bounded_too(
    litellm_proxy: Proxy, upstream: FakeUpstream, stream: bool, before: int | None
) -> None:
    """LiteLLM's call reads its replies itself, but for a Messages stream, whose bytes it
    hands over (docs/configuration.md)."""
    refused(litellm_proxy, upstream, "messages-native", stream, before)


def refused(
    proxy: Proxy,
    upstream: FakeUpstream,
    route: str,
    stream: bool,
    before: int | None,
    began: bool = True,
) -> None:
    """A flood on `route` refused; `began`: the stream relays its events before the
    flood's (else the flood comes before anything is relayed)."""
    session = f"flood-{proxy.path}-{route}-{stream}-{before}"
    upstream.queue(Reply(flood=-1, fail_after_chunks=before))  # it never stops sending
    answer = send(proxy.url, route, session, stream)
    eventually(lambda: upstream.hung_up == 1, "the proxy to hang up on the flood")
    if stream and before is None and began:  # the stream had begun: the door's error event
        assert answer.status_code == 200, answer.text[:300]
        assert "error" in answer.text and not any(end in answer.text for end in FINISHED)
    else:
        assert answer.status_code == 502, answer.text[:300]
    assert says_the_cap(answer.text), answer.text[-400:]
    assert stored(proxy.url, session) == []
    upstream.queue(Reply(content="after the flood"))
    assert send(proxy.url, route, session, stream).status_code == 200  # served as ever
    assert [m["role"] for m in stored(proxy.url, session)] == ["user", "assistant"]


@pytest.mark.parametrize("route", ["chat", "messages-native", "responses-native"])
def test_a_reply_within_the_cap_is_answered_whole(
    proxy: Proxy, upstream: FakeUpstream, route: str
) -> None:
    upstream.queue(Reply(flood=CAP // 2))
    answer = send(proxy.url, route, f"half-{proxy.path}-{route}", stream=False)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.text.count("lorem ipsum") >= CAP // 2 // 28  # the whole text came


def test_the_proxy_stays_live_while_a_flood_is_read_and_refused(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """At the default cap: a stream whose event never ends is refused once it passes the
    cap, while /health/live answers every poll within a second."""
    url = start_proxy(config(upstream))
    cap = ServerSettings().max_upstream_reply_bytes
    upstream.queue(Reply(flood=-1, fail_after_chunks=1))
    flooded: list[httpx.Response] = []
    reader = threading.Thread(target=lambda: flooded.append(send(url, "chat", "live", True)))
    reader.start()
    polls = 0
    while reader.is_alive() or polls == 0:
        assert httpx.get(url + "/health/live", timeout=1).status_code == 200
        polls += 1
    reader.join()
    assert says_the_cap(flooded[0].text, cap), flooded[0].text[-400:]
