"""LiteLLM, behind one module: the only place the proxy imports it.

Everything the proxy uses of LiteLLM is named here. Its public API is passed on as it is;
what is private to LiteLLM (a leading underscore, a module of its internals, the frame of
its stream wrapper) is wrapped in one function each, and `tests/unit/test_litellm_contract.py`
pins every one of them against the locked LiteLLM, so an upgrade that moves one fails
that test rather than a request.

LiteLLM fetches its model cost map over the network when it is imported, unless told not
to, and Anthropic's beta-header table on the first call that needs a beta header; the
proxy reaches no network but its providers', so this module says so before it imports
LiteLLM.
"""

from __future__ import annotations

import os
import re
import warnings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
# LiteLLM scans every exception's text with its secret patterns, on the event loop: a
# reply it could not parse is quoted whole in it, and 48 MB held the loop for a minute.
# The proxy redacts whatever it writes itself (`proxy.observability.redaction`).
os.environ.setdefault("LITELLM_DISABLE_REDACT_SECRETS", "true")

from collections.abc import Mapping
from typing import Any

import httpx
import litellm
from litellm.litellm_core_utils.exception_mapping_utils import exception_type
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler
from litellm.llms.openai.chat.gpt_transformation import (
    OpenAIGPTConfig,
    OpenAIUnknownModelConfig,
)
from litellm.llms.openai.common_utils import OpenAIError

from proxy.conversation.tokens import bounded_words

__all__ = [
    "EXCEPTION_TYPES",
    "APIConnectionError",
    "APIError",
    "Router",
    "Timeout",
    "acompletion",
    "anthropic_messages_call",
    "call_with_fallbacks",
    "count_success",
    "default_api_base",
    "default_api_key",
    "forget_streamed_text",
    "get_llm_provider",
    "get_supported_openai_params",
    "http_client",
    "is_provider",
    "leaves_openai_requests_alone",
    "map_openai_error",
    "model_cost",
    "openai_error",
    "pattern_route",
    "provider_finished",
    "refused_reply",
    "report_failure",
    "responses_call",
    "stream_wrapper",
    "supports_reasoning",
    "track_success",
    "warm_token_counter",
]

litellm.suppress_debug_info = True
litellm.telemetry = False
# LiteLLM dumps a provider's reply of the wrong shape through pydantic, which warns of it
# on stderr in three lines before LiteLLM fails on it; the proxy says that failure itself.
warnings.filterwarnings("ignore", message="Pydantic serializer warnings", category=UserWarning)

# -- public API, as it is ---------------------------------------------------------------

Router = litellm.Router
APIError = litellm.APIError
APIConnectionError = litellm.APIConnectionError
Timeout = litellm.Timeout
EXCEPTION_TYPES: tuple[type[Exception], ...] = tuple(litellm.LITELLM_EXCEPTION_TYPES)
acompletion = litellm.acompletion
get_llm_provider = litellm.get_llm_provider
get_supported_openai_params = litellm.get_supported_openai_params
supports_reasoning = litellm.supports_reasoning
# LiteLLM's model map. A Router writes each deployment's `model_info` into it, so read
# it as shipped before any Router is made (`proxy.upstream.limits` does, at import).
model_cost: dict[str, Any] = litellm.model_cost


def is_provider(name: str) -> bool:
    """Whether LiteLLM knows a provider of this name (`openai`, `anthropic`, …)."""
    return name in litellm.provider_list


def default_api_base() -> str | None:
    """The `api_base` set on the litellm module itself, if any."""
    return litellm.api_base


def default_api_key() -> str | None:
    """The `api_key` set on the litellm module itself, if any."""
    return litellm.api_key


def leaves_openai_requests_alone(model: str) -> bool:
    """Whether LiteLLM sends an `openai/…` chat request for `model` as it is: its plain
    configs do, while o-series, gpt-5 and audio models have configs of their own that
    rewrite parameters. (The config classes are LiteLLM's internals.)"""
    config = litellm.ProviderConfigManager.get_provider_chat_config(
        model=model, provider=litellm.LlmProviders.OPENAI
    )
    return type(config) in (OpenAIGPTConfig, OpenAIUnknownModelConfig)


# -- private API, each pinned by tests/unit/test_litellm_contract.py ---------------------


async def call_with_fallbacks(router: Any, **kwargs: Any) -> Any:
    """`kwargs["original_function"]` on the deployment the Router picks, with the
    Router's retries, fallbacks and cooldowns: what its own `acompletion` runs, for a
    call the proxy makes itself (the lean path). The Router method is private."""
    return await router._ageneric_api_call_with_fallbacks(**kwargs)


def http_client(session: Any) -> AsyncHTTPHandler:
    """LiteLLM's HTTP client on the proxy's aiohttp `session`: given as `client`, LiteLLM's
    Anthropic chat route sends on that session, not on a pool of its own (that route does
    not read `shared_session`; tests/integration/test_upstream_keepalive.py pins it)."""
    return AsyncHTTPHandler(shared_session=session)


def pattern_route(router: Any, model: str) -> dict[str, Any] | None:
    """The first deployment of the wildcard route the Router matches `model` to, its `*`
    filled in; None for none. (`Router.pattern_router` is not documented.)"""
    found = router.pattern_router.route(model)
    return found[0] if found else None


def report_failure(
    router: Any, exception: Exception, params: dict[str, Any], started: float, ended: float
) -> None:
    """Tell the Router's cooldown bookkeeping that a call it routed failed, as LiteLLM's
    logging does (its deployment callback, with the arguments its logging passes: the
    call was made, at `started`)."""
    kwargs = {"exception": exception, "litellm_params": params, "api_call_start_time": started}
    router.deployment_callback_on_failure(kwargs, None, started, ended)


def count_success(
    router: Any, params: dict[str, Any], total_tokens: int, started: float, ended: float
) -> None:
    """Count a routed call's success, as LiteLLM's logging does for a deployment with no
    rate limits (the Router's cheap callback)."""
    kwargs = {"litellm_params": params, "standard_logging_object": {"total_tokens": total_tokens}}
    router.sync_deployment_callback_on_success(kwargs, None, started, ended)


async def track_success(
    router: Any, params: dict[str, Any], total_tokens: int, started: float, ended: float
) -> None:
    """Count a routed call's success and its tokens, as LiteLLM's logging does for a
    deployment with rate limits (the Router's async callback tracks their usage)."""
    kwargs = {"litellm_params": params, "standard_logging_object": {"total_tokens": total_tokens}}
    await router.deployment_callback_on_success(kwargs, None, started, ended)


def stream_wrapper(response: Any) -> Any:
    """LiteLLM's own stream wrapper of a streamed call: the Router wraps that wrapper in
    another for fallbacks, keeping it in its generator's frame, where this looks for
    it (`response` itself where there is none)."""
    frame = getattr(getattr(response, "_async_generator", None), "ag_frame", None)
    return frame.f_locals.get("model_response", response) if frame is not None else response


def provider_finished(response: Any) -> bool:
    """Whether the provider, not LiteLLM's stream wrapper, ended a stream. The wrapper
    records the provider's own finish (`received_finish_reason`). Unknown: taken as the
    provider's."""
    inner = stream_wrapper(response)
    return not (hasattr(inner, "received_finish_reason") and inner.received_finish_reason is None)


def forget_streamed_text(wrapper: Any) -> None:
    """Keep LiteLLM's stream `wrapper` from copying the reply's whole text at each chunk:
    it appends every chunk's text to one string (`response_uptil_now`), a copy of all
    so far each time (24 MiB in 64 KiB chunks held the event loop half a minute), only
    to hand it to post-call rules (the proxy sets none) and, when the stream fails
    midway, to tell whether any text came (its last character tells that as well)."""
    text = getattr(wrapper, "response_uptil_now", None)
    if isinstance(text, str) and len(text) > 1:
        wrapper.response_uptil_now = text[-1]


# LiteLLM's own words for a provider's 200 its OpenAI route would not take as a reply
# (not an object, or `choices` missing or not a list): it raises them as a 500 of its own.
_REFUSED_REPLY = re.compile(
    r"Empty or invalid response from LLM endpoint"
    r"|provider returned (?:'choices' that is not a list|a response with no 'choices')"
)


def refused_reply(message: str) -> bool:
    """Whether LiteLLM's `message` says it could not take the provider's answer as a reply
    (a failure of the provider's, which answered 200, not a 500 of its own)."""
    return _REFUSED_REPLY.search(message) is not None


def warm_token_counter(model: str) -> None:
    """Load now the tokenizer LiteLLM's own counting picks for `model`, where it is
    Anthropic's (from LiteLLM's package): LiteLLM counts a failed stream's usage with
    it, and loading it on the first such failure held the event loop 0.3 s. The other
    tokenizers it picks are tiktoken's, or fetched from the network (never, here)."""
    name = get_llm_provider(model=model)[0]
    if litellm.utils.huggingface_tokenizer_kind(name) == "anthropic":
        litellm.token_counter(model=name, text="warm up")
        bounded_words(litellm.utils._select_tokenizer(name)["tokenizer"])  # what it counts with


def openai_error(
    status: int, message: str, headers: Mapping[str, str] | None = None, body: bytes = b""
) -> Exception:
    """The error LiteLLM's OpenAI handler raises for a provider's error answer: its
    `message`, and its `body` as the content of the error's response, as LiteLLM's own
    route leaves the provider's answer on its errors."""
    response = httpx.Response(status, content=body, request=httpx.Request("POST", OPENAI_URL))
    kept = httpx.Headers(dict(headers or {}))
    return OpenAIError(status, message, response=response, headers=kept)


OPENAI_URL = "https://api.openai.com/v1"


def map_openai_error(model: str, exc: Exception, provider: str = "openai") -> Exception:
    """LiteLLM's own exception for a failure of a call to `provider` (`openai/…` by
    default), as its handler maps it (status, rate limit, context window, content
    policy, …), caused by `exc`."""
    try:
        exception_type(model=model, original_exception=exc, custom_llm_provider=provider)
    except Exception as mapped:
        if mapped is not exc:
            mapped.__cause__ = exc
        return mapped
    return exc


# What LiteLLM's route for a door's own API does to a request's parameters (the messages
# or input items stay out: the lean native path sends them as bytes it already holds).


def anthropic_messages_call(
    model: str,
    params: dict[str, Any],
    api_key: str | None,
    api_base: str | None,
    drop_params: bool = False,
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL, headers and body (with no `messages`) LiteLLM would send a Messages
    request with to a first-party Anthropic deployment: the parameters it carries, its
    key and version headers, the beta headers its parameters need, and its parameter
    translations (thinking and effort for the model, `context_management`)."""
    from litellm.llms.anthropic.experimental_pass_through.messages.transformation import (
        AnthropicMessagesConfig,
    )
    from litellm.llms.anthropic.experimental_pass_through.messages.utils import (
        AnthropicMessagesRequestUtils,
    )
    from litellm.types.router import GenericLiteLLMParams

    config = AnthropicMessagesConfig()
    options = dict(
        AnthropicMessagesRequestUtils.get_requested_anthropic_messages_optional_param(
            params, model=model, drop_params=drop_params, custom_llm_provider="anthropic"
        )
    )
    headers, base = config.validate_anthropic_messages_environment(
        headers={},
        model=model,
        messages=[],
        optional_params=options,
        litellm_params={},
        api_key=api_key,
        api_base=api_base,
    )
    body = config.transform_anthropic_messages_request(
        model=model,
        messages=[],
        anthropic_messages_optional_request_params=options,
        litellm_params=GenericLiteLLMParams(),
        headers=headers,
    )
    body.pop("messages", None)
    url = config.get_complete_url(
        api_base=base, api_key=api_key, model=model, optional_params={}, litellm_params={}
    )
    return url, headers, body


def responses_call(
    model: str, params: dict[str, Any], api_key: str | None, api_base: str | None
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL, headers and body (with no `input`) LiteLLM would send a Responses
    request with to an OpenAI deployment: its key header and its tool-schema repairs."""
    from litellm.llms.openai.responses.transformation import OpenAIResponsesAPIConfig
    from litellm.types.router import GenericLiteLLMParams

    config = OpenAIResponsesAPIConfig()
    settings = GenericLiteLLMParams(api_key=api_key, api_base=api_base)
    headers = config.validate_environment(headers={}, model=model, litellm_params=settings)
    body = config.transform_responses_api_request(
        model=model,
        input=[],
        response_api_optional_request_params=dict(params),
        litellm_params=settings,
        headers=headers,
    )
    body.pop("input", None)
    return config.get_complete_url(api_base=api_base, litellm_params={}), headers, body


def encrypted_reasoning_prefix() -> bytes:
    """The signature prefix of reasoning another provider encrypted, which LiteLLM's
    Messages route drops before Anthropic sees it."""
    from litellm.litellm_core_utils.prompt_templates import common_utils

    return str(common_utils.ENCRYPTED_REASONING_SIGNATURE_PREFIX).encode()
