"""An upstream's failure reaches the client in the proxy's own words with the provider's
message in them, on every door and route, whole and streamed, and never with LiteLLM's
class names, retry notes, model-group dumps or advice to its own users; whatever shape
the provider's failure takes, no reply or stream event carries a traceback, a module's
file, LiteLLM's name or an exception class."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config, serving
from tests.upstream import FakeUpstream, Reply

WORDS = "the provider says the quota for this project is spent"
# What LiteLLM puts around a provider's message: a client of this proxy has no use for it.
LITELLM_NOISE = re.compile(
    r"litellm|Exception\b|Error:|Handle with|model_group|Model Group|Fallbacks|Retried"
    r"|docs\.|Traceback|NoneType|\bkwargs\b",
    re.IGNORECASE,
)
NATIVE_GPT, CLAUDE = "native-gpt", "claude-native"


def config(upstream: FakeUpstream) -> dict[str, Any]:
    base = proxy_config(upstream, router_settings={"num_retries": 0, "disable_cooldowns": True})
    base["model_list"] += [
        {
            "model_name": NATIVE_GPT,
            "litellm_params": {
                "model": "openai/gpt-5-mini",
                "api_base": upstream.base_url,
                "api_key": UPSTREAM_KEY,
            },
            "model_info": {"native_api": True},
        },
        {
            "model_name": CLAUDE,
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": upstream.base_url.removesuffix("/v1"),
                "api_key": UPSTREAM_KEY,
            },
        },
    ]
    return base


@pytest.fixture(scope="module")
def module_url_config(_shared_upstream: FakeUpstream) -> dict[str, Any]:
    return config(_shared_upstream)


# (door path, model, body): every route a request can take to a provider.
ROUTES = {
    "chat": ("/v1/chat/completions", MODEL, {"messages": [{"role": "user", "content": "hi"}]}),
    "messages-native": (
        "/v1/messages",
        CLAUDE,
        {"max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "messages-translated": (
        "/v1/messages",
        MODEL,
        {"max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "responses-native": ("/v1/responses", NATIVE_GPT, {"input": "hi"}),
    "responses-translated": ("/v1/responses", MODEL, {"input": "hi"}),
}


def error_text(response: httpx.Response) -> str:
    """The error's message: the body's, or the stream's error event's."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data: ") and '"error"' in line:
                return httpx.Response(200, content=line[6:]).json()["error"]["message"]
        raise AssertionError(f"no error event in {response.text[-500:]}")
    return response.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_providers_message_in_the_proxys_words(
    module_url: str, upstream: FakeUpstream, route: str, status: int, stream: bool
) -> None:
    path, model, body = ROUTES[route]
    upstream.queue(Reply(status=status, error_message=WORDS))
    response = httpx.post(
        module_url + path,
        json={"model": model, **body, "stream": stream},
        headers={"Authorization": "Bearer client-key-0123456789abcdef"},
        timeout=30,
    )
    assert response.status_code == status or (status >= 500 and response.status_code >= 500)
    message = error_text(response)
    assert WORDS in message, message
    assert not LITELLM_NOISE.search(message), message


def test_an_unreachable_provider_is_said_plainly(upstream: FakeUpstream, start_proxy: Any) -> None:
    broken = config(upstream)
    for entry in broken["model_list"]:
        entry["litellm_params"]["api_base"] = "http://127.0.0.1:9/"
    proxied = start_proxy(broken)
    for name, (path, model, body) in ROUTES.items():
        response = httpx.post(proxied + path, json={"model": model, **body}, timeout=30)
        assert response.status_code == 502, (name, response.text)
        message = error_text(response)
        assert not LITELLM_NOISE.search(message), (name, message)


def test_a_model_resting_after_failures_is_said_plainly(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """The Router benches deployments that answered 429; once all of a model's are
    benched, the client hears that in a sentence, not the Router's dump of deployment ids."""
    pool = [
        {
            "model_name": "pool",
            "litellm_params": {
                "model": f"openai/{name}",
                "api_base": upstream.base_url,
                "api_key": UPSTREAM_KEY,
            },
        }
        for name in ("model-a", "model-b")
    ]
    router = {"num_retries": 0, "cooldown_time": 60}
    resting = start_proxy({"model_list": pool, "router_settings": router})
    upstream.default = Reply(status=429, error_message=WORDS)
    messages: list[str] = []
    try:
        for _ in range(20):
            body = {"model": "pool", "messages": [{"role": "user", "content": "hi"}]}
            answer = httpx.post(resting + "/v1/chat/completions", json=body, timeout=30)
            messages.append(error_text(answer))
            if not messages[-1].startswith(WORDS):
                break
    finally:
        upstream.default = Reply()
    assert WORDS in messages[0]
    assert messages[-1].startswith("Every deployment of this model failed just now"), messages
    assert not any(LITELLM_NOISE.search(m) or "cooldown" in m for m in messages), messages


# -- every shape of failure, every door, both paths -------------------------------------

INSIDES = re.compile(r"Traceback|\.py\b|litellm|\w+Error - |\w+Exception|File \"", re.IGNORECASE)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/provider/server.py", line 88, in generate\n'
    "KeyError: 'choices'"
)
# What a provider's failure can look like: an answer's status and body, or a stream
# that goes wrong after it began. (name, reply, whether the provider's message is WORDS)
SHAPES: list[tuple[str, Reply, bool]] = [
    *[
        (f"json-{status}", Reply(status=status, error_message=WORDS), True)
        for status in (400, 404, 429, 500, 503)
    ],
    ("overloaded-529", Reply(status=529, error_message="Overloaded"), False),
    ("unknown-500", Reply(status=500, error_message="Internal server error"), False),
    (
        "html-502",
        Reply(status=502, raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
        False,
    ),
    ("empty-500", Reply(status=500, raw=b""), False),
    ("detail-422", Reply(status=422, raw=b'{"detail": "' + WORDS.encode() + b'"}'), True),
    ("traceback-body-500", Reply(status=500, raw=TRACEBACK.encode()), False),
    ("traceback-message-500", Reply(status=500, error_message=TRACEBACK), False),
    ("not-json-200", Reply(raw=b"<html>fine</html>"), False),
]
STREAM_SHAPES: list[tuple[str, Reply, bool]] = [
    (
        "error-event-first",
        Reply(fail_after_chunks=0, stream_end="error", error_message="Internal server error"),
        False,
    ),
    (
        "error-event-mid",
        Reply(fail_after_chunks=2, stream_end="error", error_message="Internal server error"),
        False,
    ),
    (
        "traceback-event",
        Reply(fail_after_chunks=2, stream_end="error", error_message=TRACEBACK),
        False,
    ),
    ("garbage", Reply(fail_after_chunks=2, stream_end="garbage"), False),
    ("reset", Reply(fail_after_chunks=2), False),
    ("clean-close", Reply(fail_after_chunks=2, stream_end="clean"), False),
]
# Every route, the chat door to Claude (LiteLLM's translation) too.
ALL_ROUTES = ROUTES | {
    "chat-to-claude": (
        "/v1/chat/completions",
        CLAUDE,
        {"max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]},
    )
}


@pytest.fixture(scope="module", params=["lean", "litellm"])
def either_path(
    request: pytest.FixtureRequest,
    _shared_upstream: FakeUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A proxy of every route, on the lean path or on LiteLLM's for every call."""
    both = config(_shared_upstream)
    both["server"] = {"lean_upstream": request.param == "lean"}
    with serving(both, tmp_path_factory.mktemp("proxy")) as url:
        yield url


CASES = [
    pytest.param(reply, words, stream, id=f"{name}-{'stream' if stream else 'whole'}")
    for name, reply, words in SHAPES
    for stream in (False, True)
] + [pytest.param(reply, words, True, id=name) for name, reply, words in STREAM_SHAPES]


@pytest.mark.parametrize("route", sorted(ALL_ROUTES))
@pytest.mark.parametrize(("reply", "words", "stream"), CASES)
def test_no_failure_shows_the_proxys_insides(
    either_path: str,
    upstream: FakeUpstream,
    route: str,
    reply: Reply,
    words: bool,
    stream: bool,
) -> None:
    path, model, body = ALL_ROUTES[route]
    upstream.queue(reply)
    response = httpx.post(
        either_path + path,
        json={"model": model, **body, "stream": stream},
        headers={"Authorization": "Bearer client-key-0123456789abcdef"},
        timeout=30,
    )
    failed = response.status_code >= 400 or "error" in response.text
    assert failed, response.text[-300:]
    assert not INSIDES.search(response.text), response.text[-600:]
    if words:
        assert WORDS in error_text(response)
