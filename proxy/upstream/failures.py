"""A failed call to a provider, in the proxy's own words: LiteLLM's and the provider's
exceptions become `UpstreamFailure` (the provider's own status where it answered one)
or `UpstreamTimeout`, their messages stripped of LiteLLM's decorations and of every
credential (`redact`)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Literal

import httpx
import openai
import orjson

from proxy.errors import ProxyError, UpstreamFailure, UpstreamTimeout
from proxy.upstream import adapter

__all__ = ["failure"]

# Failures with no upstream HTTP status: the provider was never heard from. LiteLLM
# sometimes reports these as a 500, so the exception chain is searched for them.
Gateway = Literal["timeout", "no_reply", "no_key"]
_TIMEOUTS = (adapter.Timeout, openai.APITimeoutError, httpx.TimeoutException, TimeoutError)
_UNREACHABLE = (openai.APIConnectionError, httpx.TransportError, ConnectionError)
_NO_REPLY = (*_UNREACHABLE, json.JSONDecodeError, orjson.JSONDecodeError)  # none to relay
# The openai SDK's (and so LiteLLM's) words for a deployment with no key to send.
_NO_KEY = re.compile(r"(?i)missing credentials|api_key client option must be set")

# LiteLLM's decorations around a provider's own message: its class names, its advice to
# its own users, its retry and model-group notes.
_NOISE = [
    re.compile(r"^litellm\.\w+:\s*(\w+:\s*)?"),
    re.compile(r"^\w+Exception - "),
    re.compile(r"\.?\s*Handle with `litellm\.\w+`\.?"),
    re.compile(r"\.?\s*Received Model Group=.*$", re.DOTALL),
    re.compile(r"\s*LiteLLM Retried: .*$", re.DOTALL),
    re.compile(r"\.?\s*No fallback model group found for .*$", re.DOTALL),
]
# The Router's words when every deployment of a model is cooling down after failures.
_COOLING = re.compile(r"No deployments available for selected model.*?(?:in (\d+) seconds)?")


def failure(exc: Exception, redact: Callable[[str], str]) -> ProxyError:
    """Any LiteLLM or provider exception as an `UpstreamFailure`, minus secrets: the
    provider's own status where it answered one."""
    if isinstance(exc, ProxyError):
        return exc
    gateway = _gateway_failure(exc)
    message = _gateway_words(exc, gateway) or _provider_words(exc)
    message = redact(message)
    raw_code = getattr(exc, "code", None)
    code = str(raw_code) if raw_code is not None else None
    if gateway == "timeout":
        return UpstreamTimeout(message or "The provider timed out.", code=code)
    status = getattr(exc, "status_code", None) if gateway is None else None
    if gateway == "no_key":  # the deployment has no key: what its provider would answer
        status = 401
    if not isinstance(status, int) or not 400 <= status <= 599:
        status = None
    return UpstreamFailure(
        message or "upstream error",
        provider_status=status,
        code=code,
        retry_after=_retry_after(exc) if status in (429, 503) else None,
    )


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what caused it, outermost first."""
    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and all(cause is not other for other in seen):
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return seen


def _gateway_words(exc: BaseException, gateway: Gateway | None) -> str | None:
    """What to say of a failure no provider put in words: it could not be reached, did
    not answer in time, or answered what is not JSON (a client has no use for the
    connection library's own text, which names its classes and sockets)."""
    if gateway not in ("timeout", "no_reply"):
        return None
    causes = _causes(exc)
    if gateway == "timeout":
        ours = [str(c) for c in causes if type(c) is TimeoutError and str(c)]
        return f"The provider gave no answer: {ours[0]}." if ours else "The provider timed out."
    if any(isinstance(c, json.JSONDecodeError | orjson.JSONDecodeError) for c in causes):
        return "The provider's answer was not JSON."
    if not any(isinstance(c, httpx.TransportError | OSError) for c in causes):
        return None  # the provider's own words, in an error event say
    refused = any(
        isinstance(c, ConnectionRefusedError) or "Connect call failed" in str(c) for c in causes
    )
    return "Could not reach the provider" + (": connection refused." if refused else ".")


def _provider_words(exc: BaseException) -> str:
    """The provider's own message, out of LiteLLM's decorations and, where it quotes the
    provider's JSON error body, out of that body."""
    message = str(getattr(exc, "message", None) or exc)
    cooling = _COOLING.search(message)
    if cooling:
        wait = f" Try again in {cooling.group(1)} s." if cooling.group(1) else ""
        return "Every deployment of this model failed just now and is resting." + wait
    for pattern in _NOISE:
        message = pattern.sub("", message)
    message = message.strip()
    if message.startswith("{"):
        with contextlib.suppress(orjson.JSONDecodeError):
            data = orjson.loads(message)
            error = data.get("error") if isinstance(data, dict) else None
            inner = error.get("message") if isinstance(error, dict) else None
            if isinstance(inner, str) and inner:
                message = inner
    return message or "The provider failed."


def _gateway_failure(exc: BaseException) -> Gateway | None:
    """A failure the provider's status does not tell: it timed out, was unreachable or
    sent what is not JSON, or no key was there to send (LiteLLM reports these as 500s)."""
    for cause in _causes(exc):
        if isinstance(cause, _TIMEOUTS):
            return "timeout"
        if isinstance(cause, _NO_REPLY):
            return "no_reply"
        if isinstance(cause, openai.OpenAIError) and _NO_KEY.search(str(cause)):
            return "no_key"
    return None


def _retry_after(exc: BaseException) -> str | None:
    """The provider's `Retry-After`, from the response its error carries."""
    for cause in _causes(exc):
        for headers in (
            getattr(cause, "litellm_response_headers", None),
            getattr(getattr(cause, "response", None), "headers", None),
            getattr(cause, "headers", None),
        ):
            if headers is None or not hasattr(headers, "get"):
                continue
            value = headers.get("retry-after")
            if value:
                return str(value)
    return None
