"""A failed call to a provider, in the proxy's own words: LiteLLM's and the provider's
exceptions become `UpstreamFailure` (the provider's own status where it answered one)
or `UpstreamTimeout`, their messages stripped of every credential (`redact`).

The message is the provider's own where the provider sent one: read out of its answer
(`provider_words`), which LiteLLM's exceptions and the lean path's carry on the
exceptions they chain; only where there is none is it LiteLLM's text, out of its
decorations. Whatever the source, a message that shows the proxy's insides (a
traceback, a module's file, LiteLLM's name, an exception class) is replaced by a
sentence saying only that the provider failed, and with which status (`_plain`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable
from typing import Any, Literal

import aiohttp
import httpx
import openai
import orjson

from proxy.errors import InvalidRequest, ProxyError, UpstreamFailure, UpstreamTimeout
from proxy.upstream import adapter

__all__ = ["UNREADABLE", "failure", "provider_words", "said_in", "untranslatable"]

logger = logging.getLogger("context_proxy.upstream")

# Failures with no upstream HTTP status: the provider was never heard from. LiteLLM
# sometimes reports these as a 500, so the exception chain is searched for them.
Gateway = Literal["timeout", "no_reply", "no_key"]
_TIMEOUTS = (adapter.Timeout, openai.APITimeoutError, httpx.TimeoutException, TimeoutError)
_UNREACHABLE = (openai.APIConnectionError, httpx.TransportError, ConnectionError)
_UNDECODED = (json.JSONDecodeError, orjson.JSONDecodeError)
# The openai SDK's (and so LiteLLM's) words for a deployment with no key to send.
_NO_KEY = re.compile(r"(?i)missing credentials|api_key client option must be set")

# LiteLLM's decorations around a provider's own message, where no answer of the
# provider's is at hand to read it from: its class names, its advice to its own users,
# its retry and model-group notes.
_NOISE = [
    re.compile(r"^litellm\.\w+:\s*(\w+:\s*)?"),
    re.compile(r"^(?:\w+(?:Error|Exception)\s*)+- "),
    re.compile(r"\.?\s*Handle with `litellm\.\w+`\.?"),
    re.compile(r"\.?\s*Received Model Group=.*$", re.DOTALL),
    re.compile(r"\s*Received Messages=.*$", re.DOTALL),  # the whole window, as Python
    re.compile(r"\s*LiteLLM Retried: .*$", re.DOTALL),
    re.compile(r"\.?\s*No fallback model group found for .*$", re.DOTALL),
]
# The Router's words when every deployment of a model is cooling down after failures.
_COOLING = re.compile(r"No deployments available for selected model.*?(?:in (\d+) seconds)?")
# What no client may read of the proxy: a traceback, a Python module's file, LiteLLM's
# name, an exception class's name (its own or a library's).
_INSIDES = re.compile(
    r"Traceback \(most recent call last\)|\bFile \"|\b[\w.-]+\.py\b|(?i:litellm)"
    r"|\b[A-Z]\w*(?:Error|Exception)\b"
)
_LONGEST_TEXT = 500  # an answer that is not JSON is the provider's words up to this long
# A reply the provider sent that LiteLLM could not read: a 200 of the wrong shape, which
# its translation failed on with a fault in code (a KeyError, a TypeError), or which its
# own check refused (`adapter.refused_reply`). Python's words for such a fault are told
# too, where LiteLLM quotes one without chaining the exception (a stream's).
UNREADABLE = "The provider's reply could not be read: it is not of its API's shape."
_FAULTS = (KeyError, TypeError, AttributeError, IndexError, ValueError)
_FAULT_WORDS = re.compile(
    r"'\w+' object (?:has no attribute|is not (?:subscriptable|iterable|callable))"
    r"|object of type '\w+' has no len\(\)|indices must be integers"
    r"|argument of type '\w+' is not iterable|unsupported operand type"
)
# What of an exception's text is read at all: LiteLLM quotes a reply it could not parse
# whole (tens of MB), and every pattern here would scan it on the event loop.
_LONGEST_MESSAGE = 4096


def failure(exc: Exception, redact: Callable[[str], str]) -> ProxyError:
    """Any LiteLLM or provider exception as an `UpstreamFailure`, minus secrets: the
    provider's own status where it answered one. Python's own exceptions (a TypeError,
    a KeyError: a fault in code, LiteLLM's or ours) say nothing a client could use:
    logged, and said as a failed call."""
    # The proxy's own words (a door's, a bound's), raised where LiteLLM's call read what
    # the pool bounds, under LiteLLM's exceptions, too.
    own = next((c for c in _causes(exc) if isinstance(c, ProxyError)), None)
    if own is not None:
        return own.redacted(lambda text: redact(_plain(_denoised(text), None, redact)))
    gateway = _gateway_failure(exc)
    if gateway is None and type(exc).__module__ == "builtins":  # a fault in code, not a call's
        logger.warning("an upstream call failed: %s: %s", type(exc).__name__, redact(str(exc)))
        return UpstreamFailure("The call to the provider failed.")
    status = getattr(exc, "status_code", None) if gateway is None else None
    if gateway == "no_key":  # the deployment has no key: what its provider would answer
        status = 401
    if not isinstance(status, int) or not 400 <= status <= 599:
        status = None
    unread = _unreadable(exc, status) if gateway in (None, "no_reply") else None
    if unread is not None:  # one line, not LiteLLM's traceback of it
        logger.debug("the provider's reply could not be read: %s", redact(unread))
        return UpstreamFailure(UNREADABLE, code="upstream_reply_unreadable")
    message = _gateway_words(exc, gateway) or _provider_words(exc, status)
    message = redact(_plain(message, status, redact))
    raw_code = getattr(exc, "code", None)
    code = str(raw_code) if raw_code is not None else None
    if gateway == "timeout":
        return UpstreamTimeout(message or "The provider timed out.", code=code)
    return UpstreamFailure(
        message or "upstream error",
        provider_status=status,
        code=code,
        retry_after=_retry_after(exc) if status in (429, 503) else None,
    )


def untranslatable(exc: Exception) -> ProxyError | None:
    """The request's own failure, where LiteLLM failed before it sent anything and for a
    reason in code, not the network (a ValueError, a KeyError: it could not put this
    request in the provider's API, as for `tools[0].type: "x"` to Claude): a 400, for
    the provider was never asked. None for anything else."""
    if isinstance(exc, ProxyError):
        return None
    root = _causes(exc)[-1]  # LiteLLM says what it raised as an APIConnectionError
    if type(root).__module__ != "builtins" or isinstance(root, OSError | TimeoutError):
        return None
    said = f"`{root.args[0]}` is missing" if isinstance(root, KeyError) and root.args else str(root)
    shown = f": {said}" if said and len(said) <= 300 and not _INSIDES.search(said) else ""
    return InvalidRequest(
        f"This request cannot be put in the API of the model's provider{shown}.",
        code="invalid_value",
    )


def provider_words(body: bytes) -> str | None:
    """A provider's message in its answer's bytes (`said_in` its JSON), or a short line
    of plain text (a gateway's). None for anything else (an HTML page)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode(errors="replace").strip()
        plain = text and len(text) <= _LONGEST_TEXT and "\n" not in text
        return text if plain and not text.startswith("<") else None
    return said_in(data)


def said_in(data: Any) -> str | None:
    """A provider's message in an error answer or event, parsed: an error object's
    `message` (OpenAI's, Anthropic's, Google's shapes), an `error`, `message` or
    `detail` string. None where it holds none."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    for said in (
        error.get("message") if isinstance(error, dict) else error,
        data.get("message"),
        data.get("detail"),
    ):
        if isinstance(said, str) and said.strip():
            return said.strip()
    return None


def _plain(message: str, status: int | None, redact: Callable[[str], str]) -> str:
    """`message`, unless it shows the proxy's insides (`_INSIDES`): then its sentences
    before the first that does ("anthropic does not support parameters: ['logit_bias'].",
    not LiteLLM's advice on its settings after it), or only that the provider failed,
    with its status (the message withheld is logged, for operators)."""
    inside = _INSIDES.search(message)
    if inside is None:
        return message
    logger.warning(
        "a provider failure's message withheld from the client: %s", redact(message)[:2000]
    )
    head = message[: inside.start()]
    end = max(head.rfind(". "), head.rfind(".\n"))
    if end > 0:
        return head[: end + 1].strip()
    return f"The provider failed (HTTP {status})." if status else "The provider failed."


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what caused it, outermost first (an exception re-raised `from` itself,
    as the lean path's already-mapped ones are, names its context next)."""
    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and all(cause is not other for other in seen):
        seen.append(cause)
        after = [c for c in (cause.__cause__, cause.__context__) if c is not None]
        cause = next((c for c in after if c is not cause), None)
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
    if refused:
        return "Could not reach the provider: connection refused."
    if any(isinstance(c, httpx.ConnectError) for c in causes):
        return "Could not reach the provider."
    if any(isinstance(c, httpx.TransportError) for c in causes):  # reached, then cut off
        return "The connection to the provider broke off before its reply was finished."
    return "Could not reach the provider."


def _provider_words(exc: BaseException, status: int | None) -> str:
    """The provider's own message: read out of its answer, where an exception of the
    chain carries it (`_answered`); else out of LiteLLM's decorations and, where it
    quotes the provider's JSON error body, out of that body."""
    message = str(getattr(exc, "message", None) or exc)[:_LONGEST_MESSAGE]
    cooling = _COOLING.search(message)
    if cooling:
        wait = f" Try again in {cooling.group(1)} s." if cooling.group(1) else ""
        return "Every deployment of this model failed just now and is resting." + wait
    answer = _answered(exc)
    if answer:
        said = provider_words(answer)
        if said:
            return said
        return f"The provider answered {status} with no message." if status else ""
    message = _denoised(message)
    if message.startswith("{"):
        with contextlib.suppress(orjson.JSONDecodeError):
            inner = provider_words(message.encode())
            if inner:
                message = inner
    return message or "The provider failed."


def _denoised(message: str) -> str:
    """`message` without LiteLLM's decorations (`_NOISE`: the Router appends its model
    group notes even to the proxy's own errors raised inside its call)."""
    for pattern in _NOISE:
        message = pattern.sub("", message)
    return message.strip()


def _answered(exc: BaseException) -> bytes | None:
    """The provider's answer to the failed call, where an exception of the chain holds
    it (LiteLLM's route and the openai SDK keep the HTTP response they failed on)."""
    for cause in _causes(exc):
        response = getattr(cause, "response", None)
        if not isinstance(response, httpx.Response):
            continue
        try:
            content = response.content
        except httpx.ResponseNotRead:  # a stream's: its body was never read
            continue
        if content:
            return content
    return None


def _unreadable(exc: BaseException, status: int | None) -> str | None:
    """What failed reading the provider's reply, where it answered a 200 that LiteLLM
    could not read: a fault in code in the chain, or LiteLLM's or Python's words for one
    in its message. None for anything else: the provider's own error answer (its 4xx,
    or an answer of its in the chain), a connection that broke."""
    if (status is not None and status < 500) or _answered(exc) is not None:
        return None
    causes = _causes(exc)
    if any(isinstance(c, httpx.TransportError | aiohttp.ClientError | OSError) for c in causes):
        return None
    for cause in causes:
        if type(cause).__module__ == "builtins" and isinstance(cause, _FAULTS):
            return f"{type(cause).__name__}: {str(cause)[:200]}"
    message = str(getattr(exc, "message", None) or exc)[:_LONGEST_MESSAGE]
    if adapter.refused_reply(message) or _FAULT_WORDS.search(message):
        return _denoised(message).split("\n", 1)[0][:300]
    return None


def _gateway_failure(exc: BaseException) -> Gateway | None:
    """A failure the provider's status does not tell: it timed out, was unreachable or
    sent what is not JSON, or no key was there to send (LiteLLM reports these as 500s).
    JSON that failed to parse under a 4xx was the request's own: LiteLLM could not read
    a tool call's `arguments` to put them in the provider's API, and says so as a 400."""
    status = getattr(exc, "status_code", None)
    refused = isinstance(status, int) and 400 <= status < 500
    for cause in _causes(exc):
        if isinstance(cause, _TIMEOUTS):
            return "timeout"
        if isinstance(cause, _UNREACHABLE) or (isinstance(cause, _UNDECODED) and not refused):
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
