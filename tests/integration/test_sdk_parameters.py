"""No parameter of the pinned SDKs is ever a 400 for being unknown. Every key of their
own request types (openai's chat and Responses `create`, anthropic's `messages.create`)
is sent, by the SDK itself, through its door on each route to the loopback upstream:
it reaches the provider (under its own name or the provider's) or is named in
`X-Context-Dropped`; a few are served by the proxy itself. A new SDK release that adds a
parameter fails here, not in users' hands, until a sample and a decision are made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import orjson
import pytest
from anthropic.types.message_create_params import MessageCreateParamsBase
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from proxy.http.headers import DROPPED
from proxy.upstream import adapter
from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.upstream import FakeUpstream

CLAUDE = "claude-test"  # adaptive thinking, effort and fast mode, by LiteLLM's model map
NATIVE = "gpt-native"  # a reasoning model on the upstream's own Responses API
TEXT = "Say hi, sdk-parameters."
FUNCTION = {"name": "lookup", "parameters": {"type": "object", "properties": {}}}
CHAT_TOOLS = [{"type": "function", "function": FUNCTION}]
RESPONSES_TOOLS = [{"type": "function", **FUNCTION}]
CLAUDE_TOOLS = [{"name": "lookup", "description": "Looks up.", "input_schema": {"type": "object"}}]

# Each parameter's request fields: the parameter's own sample, with what it needs beside
# it to mean anything (a tool choice, tools to choose from).
CHAT: dict[str, dict[str, Any]] = {
    "messages": {"messages": [{"role": "user", "content": TEXT}]},
    "model": {},
    "audio": {"audio": {"voice": "alloy", "format": "wav"}},
    "frequency_penalty": {"frequency_penalty": 0.5},
    "function_call": {"function_call": "auto", "functions": [FUNCTION]},
    "functions": {"functions": [FUNCTION]},
    "logit_bias": {"logit_bias": {"50256": -100}},
    "logprobs": {"logprobs": True},
    "max_completion_tokens": {"max_completion_tokens": 64},
    "max_tokens": {"max_tokens": 64},
    "metadata": {"metadata": {"run": "sdk-parameters"}},
    "modalities": {"modalities": ["text"]},
    "moderation": {"moderation": {"model": "omni-moderation-latest"}},
    "n": {"n": 1},
    "parallel_tool_calls": {"parallel_tool_calls": False, "tools": CHAT_TOOLS},
    "prediction": {"prediction": {"type": "content", "content": "Hi."}},
    "presence_penalty": {"presence_penalty": 0.5},
    "prompt_cache_key": {"prompt_cache_key": "sdk-parameters"},
    "prompt_cache_options": {"prompt_cache_options": {"mode": "implicit", "ttl": "30m"}},
    "prompt_cache_retention": {"prompt_cache_retention": "24h"},
    "reasoning_effort": {"reasoning_effort": "low"},
    "response_format": {"response_format": {"type": "json_object"}},
    "safety_identifier": {"safety_identifier": "user-1234"},
    "seed": {"seed": 7},
    "service_tier": {"service_tier": "auto"},
    "stop": {"stop": ["\n\n"]},
    "store": {"store": True},
    "stream_options": {"stream_options": {"include_usage": True}},
    "temperature": {"temperature": 0.5},
    "tool_choice": {"tool_choice": "auto", "tools": CHAT_TOOLS},
    "tools": {"tools": CHAT_TOOLS},
    "top_logprobs": {"top_logprobs": 2, "logprobs": True},
    "top_p": {"top_p": 0.5},
    "user": {"user": "user-1234"},
    "verbosity": {"verbosity": "low"},
    "web_search_options": {"web_search_options": {"search_context_size": "low"}},
}
RESPONSES: dict[str, dict[str, Any]] = {
    "input": {"input": TEXT},
    "model": {},
    "background": {"background": False},
    "context_management": {
        "context_management": [{"type": "compaction", "compact_threshold": 200000}]
    },
    "conversation": {"conversation": "conv_sdk_parameters"},
    "include": {"include": ["reasoning.encrypted_content"]},
    "instructions": {"instructions": "Answer tersely, sdk-instructions."},
    "max_output_tokens": {"max_output_tokens": 64},
    "max_tool_calls": {"max_tool_calls": 4},
    "metadata": {"metadata": {"run": "sdk-parameters"}},
    "moderation": {"moderation": {"model": "omni-moderation-latest"}},
    "parallel_tool_calls": {"parallel_tool_calls": False, "tools": RESPONSES_TOOLS},
    "previous_response_id": {},  # an earlier response's id: `served`
    "prompt": {"prompt": {"id": "pmpt_sdk_parameters"}},
    "prompt_cache_key": {"prompt_cache_key": "sdk-parameters"},
    "prompt_cache_options": {"prompt_cache_options": {"mode": "implicit", "ttl": "30m"}},
    "prompt_cache_retention": {"prompt_cache_retention": "24h"},
    "reasoning": {"reasoning": {"effort": "low"}},
    "safety_identifier": {"safety_identifier": "user-1234"},
    "service_tier": {"service_tier": "auto"},
    "store": {"store": False},
    "stream_options": {"stream_options": {"include_obfuscation": False}},
    "temperature": {"temperature": 1},  # what a reasoning model takes
    "text": {"text": {"verbosity": "low"}},
    "tool_choice": {"tool_choice": "auto", "tools": RESPONSES_TOOLS},
    "tools": {"tools": RESPONSES_TOOLS},
    "top_logprobs": {"top_logprobs": 2},
    "top_p": {"top_p": 0.5},
    "truncation": {"truncation": "auto"},
    "user": {"user": "user-1234"},
}
MESSAGES: dict[str, dict[str, Any]] = {
    "max_tokens": {},
    "messages": {},
    "model": {},
    "cache_control": {"cache_control": {"type": "ephemeral"}},
    "container": {"container": "container_sdk_parameters"},
    "diagnostics": {"diagnostics": {"previous_message_id": "msg_sdk_parameters"}},
    "inference_geo": {"inference_geo": "us"},
    "metadata": {"metadata": {"user_id": "sdk-parameters"}},
    "output_config": {"output_config": {"effort": "low"}},
    "service_tier": {"service_tier": "auto"},
    "speed": {"speed": "fast"},
    "stop_sequences": {"stop_sequences": ["\n\nHuman:"]},
    "system": {"system": "Answer tersely, sdk-system."},
    "thinking": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    "tool_choice": {"tool_choice": {"type": "auto"}, "tools": CLAUDE_TOOLS},
    "tools": {"tools": CLAUDE_TOOLS},
    "user_profile_id": {"user_profile_id": "up_sdk_parameters"},
    "workspace_id": {"workspace_id": "wrkspc_sdk_parameters"},
}

# What a provider calls a parameter a door translates (the chat translation's names).
RENAMED: dict[str, tuple[str, ...]] = {
    "max_output_tokens": ("max_tokens",),
    "reasoning": ("reasoning_effort",),
    "text": ("verbosity", "response_format"),
    "stop_sequences": ("stop",),
    "thinking": ("thinking", "reasoning_effort"),
    "output_config": ("reasoning_effort", "response_format"),
}
# Parameters whose text becomes part of the conversation (a system or user message).
SPOKEN = {
    "messages": TEXT,
    "input": TEXT,
    "system": "sdk-system",
    "instructions": "sdk-instructions",
}
# Served by the proxy itself, never sent: the conversation they name is (the whole of it).
SERVED = {"previous_response_id", "conversation"}
FIRST = "First turn, sdk-continued."
# Sent by the anthropic SDK as request headers, which the proxy passes to no provider
# (they act on the provider's account, and the proxy calls with its own key): named.
AS_HEADERS = {
    "user_profile_id": "anthropic-user-profile-id",
    "workspace_id": "anthropic-workspace-id",
}


def keys(params: Any) -> set[str]:
    """A request type's every key, its bases' included."""
    return set(params.__required_keys__ | params.__optional_keys__)


@dataclass
class Sent:
    """One request's fate: its status, what the proxy said it dropped, what reached the
    upstream, and the headers the SDK sent."""

    status: int
    dropped: list[str]
    body: dict[str, Any] | None  # what the upstream received, if anything
    headers: dict[str, str] = field(default_factory=dict)  # as the proxy received them
    error: str = ""


@dataclass(frozen=True)
class Route:
    name: str
    door: str
    model: str
    lean: bool = True

    def send(self, url: str, upstream: FakeUpstream, fields: dict[str, Any]) -> Sent:
        """One request through the door, made by the door's own SDK."""
        upstream.requests.clear()
        received: dict[str, str] = {}

        def record(request: Any) -> None:  # an httpx request (anthropic's own httpx)
            received.update(request.headers)

        try:
            headers = self._call(url, {"request": [record]}, fields)
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            return Sent(exc.status_code, [], None, received, exc.response.text)
        body = upstream.requests[-1].body if upstream.requests else None
        named = headers.get(DROPPED)
        return Sent(200, named.split(", ") if named else [], body, received)

    def _call(self, url: str, hooks: dict[str, list[Any]], fields: dict[str, Any]) -> Any:
        said = [{"role": "user", "content": TEXT}]
        if self.door == "messages":
            with anthropic.DefaultHttpxClient(event_hooks=hooks) as http:
                claude = anthropic.Anthropic(
                    base_url=url, api_key="client-key", max_retries=0, http_client=http, timeout=30
                )
                request = {"model": self.model, "max_tokens": 2048, "messages": said}
                return claude.messages.with_raw_response.create(**(request | fields)).headers
        with openai.DefaultHttpxClient(event_hooks=hooks) as http:
            client = openai.OpenAI(
                base_url=url + "/v1",
                api_key="client-key",
                max_retries=0,
                http_client=http,
                timeout=30,
            )
            if self.door == "responses":
                request = {"model": self.model, "input": TEXT}
                return client.responses.with_raw_response.create(**(request | fields)).headers
            request = {"model": self.model, "messages": said}
            return client.chat.completions.with_raw_response.create(**(request | fields)).headers


ROUTES = [
    Route("chat-lean", "chat", MODEL),
    Route("chat-litellm", "chat", MODEL, lean=False),
    Route("messages-anthropic", "messages", CLAUDE),
    Route("messages-chat", "messages", MODEL),
    Route("responses-native", "responses", NATIVE),
    Route("responses-chat", "responses", MODEL),
]
PARAMETERS = {"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES}
SDK_TYPES = {
    "chat": CompletionCreateParamsBase,
    "responses": ResponseCreateParamsBase,
    "messages": MessageCreateParamsBase,
}


def config(upstream: FakeUpstream, lean: bool) -> dict[str, Any]:
    """MODEL on the upstream's chat API, CLAUDE on its Messages API, NATIVE on its
    Responses API."""
    routed = proxy_config(upstream, server={"lean_upstream": lean})
    claude = {"model": "anthropic/claude-opus-4-6", "api_base": upstream.base_url[:-3]}
    native = {"model": "openai/gpt-5-mini", "api_base": upstream.base_url}
    routed["model_list"] += [
        {"model_name": CLAUDE, "litellm_params": claude | {"api_key": UPSTREAM_KEY}},
        {
            "model_name": NATIVE,
            "litellm_params": native | {"api_key": UPSTREAM_KEY},
            "model_info": {"native_api": True},
        },
    ]
    return routed


@pytest.mark.parametrize("door", sorted(SDK_TYPES))
def test_every_sdk_parameter_has_a_sample(door: str) -> None:
    """A parameter a new SDK release adds (or removes) needs a decision here first."""
    sdk, samples = keys(SDK_TYPES[door]), set(PARAMETERS[door])
    assert not sdk - samples, (
        f"new {door} SDK parameters need a decision (forward, or drop and name in"
        f" {DROPPED}) and a sample in this file: {sorted(sdk - samples)}"
    )
    assert not samples - sdk, f"no longer {door} SDK parameters: {sorted(samples - sdk)}"


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.name)
def test_every_sdk_parameter_is_forwarded_or_named(
    route: Route, upstream: FakeUpstream, start_proxy: Any
) -> None:
    url = start_proxy(config(upstream, route.lean))
    refused_by_model = _not_taken_by_litellm(route)
    failures: list[str] = []
    for key in sorted(keys(SDK_TYPES[route.door])):
        fields = PARAMETERS[route.door][key]
        if key in SERVED:
            fields = _continuing(route, url, upstream, key)
        sent = route.send(url, upstream, fields)
        failure = _judged(route, key, fields, sent, refused_by_model)
        if failure:
            failures.append(f"{key}: {failure}")
    assert not failures, f"{route.name}:\n" + "\n".join(failures)


def _judged(
    route: Route, key: str, fields: dict[str, Any], sent: Sent, refused_by_model: set[str]
) -> str | None:
    """What is wrong with how the proxy treated `key`, if anything."""
    if sent.status != 200:
        refused = sent.status == 400 and "does not support parameters" in sent.error
        if key in refused_by_model and refused and key in sent.error:
            return None  # LiteLLM's list: this model does not take it (drop_params unset)
        return f"status {sent.status}: {sent.error[:300]}"
    assert sent.body is not None
    names = (key, *RENAMED.get(key, ()))
    reached = (
        SPOKEN[key] in orjson.dumps(sent.body).decode()
        if key in SPOKEN
        else any(name in sent.body for name in names)
    )
    said = any(name in sent.dropped for name in names)
    if key in AS_HEADERS:  # not in the body at all: only the SDK's header says it
        header = AS_HEADERS[key]
        if sent.headers.get(header) != fields[key] or key in sent.body:
            return f"not sent as the `{header}` header"
        return None if header in sent.dropped else f"`{header}` not named in {DROPPED}"
    if key in SERVED:
        if key in sent.body:
            return "served by the proxy, yet sent on"
        return None if FIRST in orjson.dumps(sent.body).decode() else "did not continue"
    if reached and said:
        return f"both sent and named in {DROPPED}: {sent.dropped}"
    if not reached and not said:
        return f"silently lost: neither sent ({sorted(sent.body)}) nor named ({sent.dropped})"
    return None


def _not_taken_by_litellm(route: Route) -> set[str]:
    """On LiteLLM's own call, the chat parameters its list says the model does not take:
    refused (a 400 naming them) while `drop_params` is unset, as docs/configuration.md says."""
    if route.door != "chat" or route.lean:
        return set()
    return set(CHAT) - set(adapter.get_supported_openai_params(route.model, "openai") or ())


def _continuing(route: Route, url: str, upstream: FakeUpstream, key: str) -> dict[str, Any]:
    """A served parameter's fields, after the first turn they continue (whose text the
    provider must then receive)."""
    if key == "conversation":
        fields = RESPONSES["conversation"]
        assert route.send(url, upstream, fields | {"input": FIRST}).status == 200
        return fields
    client = openai.OpenAI(base_url=url + "/v1", api_key="client-key", max_retries=0)
    return {"previous_response_id": client.responses.create(model=route.model, input=FIRST).id}


def test_openais_hints_to_another_provider_are_dropped_and_named(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """`metadata`, `verbosity`, the prompt cache's and safety hints: to a model that does
    not take them (Claude, through LiteLLM's chat translation) they are left out and said,
    never refused."""
    url = start_proxy(config(upstream, lean=True))
    hints = {
        "metadata": {"run": "sdk-parameters"},
        "prompt_cache_key": "sdk-parameters",
        "prompt_cache_retention": "24h",
        "safety_identifier": "user-1234",
        "verbosity": "low",
    }
    sent = Route("chat-claude", "chat", CLAUDE).send(url, upstream, hints)
    assert sent.status == 200, sent.error
    assert sorted(sent.dropped) == sorted(hints)
    assert sent.body is not None and not set(hints) & set(sent.body)


def test_fast_mode_to_a_claude_without_it_is_dropped_and_named(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """`speed` reaches a Claude whose entry in LiteLLM's model map has fast mode, and is
    dropped and said for one without it (which LiteLLM would refuse)."""
    routed = config(upstream, lean=True)
    sonnet = routed["model_list"][1] | {"model_name": "claude-sonnet"}
    sonnet["litellm_params"] = sonnet["litellm_params"] | {"model": "anthropic/claude-sonnet-4-5"}
    url = start_proxy(routed | {"model_list": [*routed["model_list"], sonnet]})
    fast = {"speed": "fast"}
    sent = Route("messages-sonnet", "messages", "claude-sonnet").send(url, upstream, fast)
    assert sent.status == 200, sent.error
    assert sent.dropped == ["speed"] and sent.body is not None and "speed" not in sent.body
    sent = Route("messages-opus", "messages", CLAUDE).send(url, upstream, fast)
    assert sent.status == 200 and sent.dropped == [] and sent.body is not None
    assert sent.body["speed"] == "fast"


def test_a_typo_is_still_unknown_on_the_chat_door(url: str, upstream: FakeUpstream) -> None:
    """Only what is no parameter of the API is refused: a misspelt one, say."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="client-key", max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": TEXT}], extra_body={"temprature": 1}
        )
    assert raised.value.code == "unknown_parameter" and raised.value.param == "temprature"
    assert upstream.chat_requests() == []
