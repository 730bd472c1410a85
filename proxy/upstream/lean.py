"""The lean path: calling an OpenAI-compatible deployment once LiteLLM's Router chose it.

`litellm.acompletion` on an `openai/…` deployment hands the messages to the openai SDK,
whose request transform walks every message in Python (about 0.2 ms each), so a long
conversation costs the proxy more the longer it gets. A deployment that already speaks
the OpenAI API needs no translation: this module posts the body serialized once by
orjson on a shared keep-alive client and relays the reply's bytes (SSE events included)
without re-encoding them. Deployment choice, retries, fallbacks and timeouts stay the
Router's (see `proxy.upstream.client`); failures are raised as LiteLLM's own exception types
and reported to the Router's cooldown bookkeeping, as LiteLLM's logging would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from proxy.errors import ProxyError
from proxy.upstream import adapter, connections, reading
from proxy.upstream.failures import provider_words
from proxy.upstream.pieces import Pieces

__all__ = [
    "Completion",
    "DirectClient",
    "Events",
    "chained",
    "is_openai_compatible",
    "parsed_reply",
    "unfinished",
]

OPENAI_BASE = "https://api.openai.com/v1"
# Deployment settings the lean path honours; a deployment with any other setting (default
# request parameters, credentials by name, Azure's api_version, …) takes LiteLLM's call.
LEAN_PARAMS = frozenset(
    {
        "model",
        "api_base",
        "api_key",
        "organization",
        "extra_headers",
        "timeout",
        "stream_timeout",
        "max_retries",
        "rpm",
        "tpm",
        "weight",
        "order",
        "tags",
    }
)


def is_openai_compatible(litellm_params: Mapping[str, Any]) -> bool:
    """Whether a deployment can be posted to directly: the `openai` provider, a model
    LiteLLM does not rewrite requests for, and no settings beyond `LEAN_PARAMS`."""
    if not set(litellm_params) <= LEAN_PARAMS:
        return False
    try:
        model, provider, _, _ = adapter.get_llm_provider(
            model=str(litellm_params["model"]), api_base=litellm_params.get("api_base")
        )
    except Exception:
        return False
    return provider == "openai" and adapter.leaves_openai_requests_alone(model)


@dataclass(frozen=True, slots=True)
class Completion:
    """A non-streamed reply: parsed, and the exact bytes to relay."""

    data: dict[str, Any]
    raw: bytes | None = None
    native: dict[str, Any] | None = (
        None  # the reply in the door's own API (`proxy.upstream.native`)
    )


@dataclass(frozen=True, slots=True)
class Events:
    """Streamed chunks that arrived together: parsed, and the exact SSE bytes to relay
    (None: the chunks were made here and must be serialized)."""

    chunks: list[dict[str, Any]]
    raw: bytes | None = None
    native: bool = False  # `raw` is in the door's own API (`proxy.upstream.native`), not chat's


class DirectClient:
    """Posts to OpenAI-compatible deployments on one keep-alive connection pool
    (`proxy.upstream.connections`); reads a reply, or an event of a stream, of at most
    `limit` bytes (`proxy.upstream.reading`)."""

    def __init__(self, router: adapter.Router | None, limit: int) -> None:
        self._router = router
        self.limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._http_client: Any = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The keep-alive pool (`proxy.upstream.connections`), made on first use, in the
        event loop that uses it."""
        if self._session is None:
            self._session = connections.session(self.limit)
        return self._session

    @property
    def http_client(self) -> Any:
        """The pool as LiteLLM's HTTP client, for its routes that take no `shared_session`."""
        if self._http_client is None:
            self._http_client = adapter.http_client(self.session)
        return self._http_client

    async def close(self) -> None:
        if self._http_client is not None:
            await self._http_client.close()
        if self._session is not None:
            await self._session.close()

    async def complete(self, **params: Any) -> Completion:
        """Called by the Router with the chosen deployment's settings merged into `params`."""
        started = time.time()
        try:
            async with self._post(params, stream=False) as response:
                raw = await reading.whole(response, self.limit)
            data = _chat_shaped(parsed_reply(raw, params), params, "message")
        except Exception as exc:
            failed = self._failed(params, exc, started)
            raise failed from chained(failed, exc)
        self._succeeded(params, data.get("usage"), started)
        return Completion(data, raw)

    async def stream(self, **params: Any) -> AsyncIterator[Events]:
        """Open the stream (errors before the first byte raise here, where the Router can
        retry or fall back); the events follow when iterated."""
        started = time.time()
        context = self._post(params, stream=True)
        response = await self._opened(context, params, started)
        return self._events(context, response, params, started)

    async def _opened(
        self, context: Any, params: dict[str, Any], started: float
    ) -> aiohttp.ClientResponse:
        """A stream's response, once its status said it succeeded; else the failure,
        told to the Router."""
        try:
            return await context.__aenter__()
        except Exception as exc:
            failed = self._failed(params, exc, started)
            raise failed from chained(failed, exc)

    async def _events(
        self,
        context: Any,
        response: aiohttp.ClientResponse,
        params: dict[str, Any],
        started: float,
    ) -> AsyncIterator[Events]:
        usage: dict[str, Any] | None = None
        finished = False  # the provider's own finish: a finish_reason, or [DONE]
        try:
            async for events in reading.events_of(response.content.iter_any(), self.limit):
                chunks, relayed, done = [], [], False
                for raw in events:
                    data = raw[len(b"data: ") :].strip() if raw.startswith(b"data: ") else b""
                    if not data:
                        continue  # comments and keep-alives
                    if data == b"[DONE]":
                        done = True
                        break
                    chunk = parsed_reply(data, params)
                    if "error" in chunk and "choices" not in chunk:
                        raise _mapped(params, _error_from_event(chunk, data))
                    _chat_shaped(chunk, params, "delta")
                    usage = chunk.get("usage") or usage
                    finished = finished or any(
                        isinstance(c, dict) and c.get("finish_reason")
                        for c in chunk.get("choices") or ()
                    )
                    chunks.append(chunk)
                    relayed.append(raw)
                if chunks:
                    yield Events(chunks, b"".join(relayed))
                if done:
                    finished = True
                    break
            if not finished:  # closed cleanly, but before the reply was done
                raise unfinished()
        except Exception as exc:
            failed = self._failed(params, exc, started)
            raise failed from chained(failed, exc)
        finally:
            with contextlib.suppress(Exception):
                await context.__aexit__(None, None, None)
        self._succeeded(params, usage, started)

    def _post(self, params: dict[str, Any], *, stream: bool) -> Any:
        model = adapter.get_llm_provider(model=params["model"], api_base=params.get("api_base"))[0]
        body = _body(params["openai_payload"], model, params.get("openai_messages"))
        return self._send(params, _url(params), body, _headers(params), stream=stream)

    def _send(
        self,
        params: dict[str, Any],
        url: str,
        body: bytes | Pieces,
        headers: dict[str, str],
        *,
        stream: bool,
    ) -> Any:
        """POST `body`, within the deadline the Router passes (`params["timeout"]`)."""
        # The Router passes the request's deadline (`server.request_timeout_seconds`).
        timeout = params["timeout"] if isinstance(params.get("timeout"), int | float) else None
        limits = (  # a stream: each read within the deadline; else the whole call
            aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
            if stream
            else aiohttp.ClientTimeout(total=timeout)
        )
        request = self.session.post(url, data=body, headers=headers, timeout=limits)
        return _checked(request, params, self.limit)

    def _failed(self, params: dict[str, Any], exc: Exception, started: float) -> Exception:
        """The LiteLLM exception for `exc`, after telling the Router's cooldown logic."""
        mapped = _mapped(params, exc)
        if self._router is not None:
            with contextlib.suppress(Exception):
                routed = _router_params(params)
                adapter.report_failure(self._router, mapped, routed, started, time.time())
        return mapped

    def _succeeded(self, params: dict[str, Any], usage: Any, started: float) -> None:
        """Count the success as LiteLLM's logging would: the Router's async callback
        where the deployment has rate limits (it tracks their usage too), else the
        cheap one that only counts it."""
        if self._router is None:
            return
        tokens = _total_tokens(usage)
        routed = _router_params(params)
        limited = any(params.get(k) or (params.get("model_info") or {}).get(k) for k in _LIMITS)
        if not limited:
            with contextlib.suppress(Exception):
                adapter.count_success(self._router, routed, tokens, started, time.time())
            return
        task = asyncio.get_running_loop().create_task(
            adapter.track_success(self._router, routed, tokens, started, time.time())
        )
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)


def chained(failed: BaseException, exc: BaseException) -> BaseException | None:
    """What `failed`, the failure of `exc`, is raised from: `exc`, unless it is `exc`
    itself (LiteLLM's own exception, as it came), whose cause it keeps (the provider's
    answer, where `proxy.upstream.failures` reads the provider's words)."""
    return failed.__cause__ if failed is exc else exc


def _total_tokens(usage: Any) -> int:
    """A reply's tokens, in and out, in any API's usage (Anthropic's has no total)."""
    if not isinstance(usage, dict):
        return 0
    if isinstance(usage.get("total_tokens"), int):
        return int(usage["total_tokens"])
    parts = ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens")
    return sum(v for k in parts if isinstance(v := usage.get(k), int))


_LIMITS = ("rpm", "tpm")
_BACKGROUND: set[asyncio.Task[Any]] = set()


@contextlib.asynccontextmanager
async def _checked(
    request: Any, params: dict[str, Any], limit: int
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The response, once its status says it succeeded; else the provider's error (its
    body kept on it, where `proxy.upstream.failures` finds the provider's own words)."""
    async with request as response:
        if response.status >= 400:
            body = await reading.whole(response, limit)
            said = provider_words(body) or ""
            error = adapter.openai_error(response.status, said, response.headers, body)
            raise _mapped(params, error)
        yield response


def _body(payload: dict[str, Any], model: str, messages: bytes | None) -> bytes | Pieces:
    """The request body for the deployment's model; `messages`, when given, is the
    messages array already serialized (sent as it is rather than serialized again)."""
    if messages is None:
        return orjson.dumps({**payload, "model": model})
    rest = {key: value for key, value in payload.items() if key != "messages"}
    head = orjson.dumps({**rest, "model": model})[:-1]
    return Pieces((head + b',"messages":', messages, b"}"))  # the messages not copied


def parsed_reply(raw: bytes, params: dict[str, Any]) -> dict[str, Any]:
    """A reply's JSON object, or the error LiteLLM raises for one that is not."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise adapter.APIError(
            status_code=502,
            message="The provider's reply is not valid JSON.",
            llm_provider=str(params.get("lean_provider") or "openai"),
            model=str(params.get("model")),
        )
    return data


def _chat_shaped(data: dict[str, Any], params: dict[str, Any], part: str) -> dict[str, Any]:
    """A chat completion (`part` "message") or a stream's chunk ("delta") whose choices
    the proxy can read: a list of objects, each with its `part` an object whose content
    is text, parts or null; a reply of one choice at least, a chunk with its choices
    (none only beside its usage). Else the provider failed, as LiteLLM says of a reply
    it cannot read (never an internal error of ours)."""
    usage_only = part == "delta" and isinstance(data.get("usage"), dict)
    choices = data.get("choices", [] if usage_only else None)
    if (
        isinstance(choices, list)
        and (choices or part == "delta")
        and all(
            isinstance(choice, dict)
            and isinstance(choice.get(part, {}), dict)
            and isinstance(choice.get(part, {}).get("content"), str | list | None)
            and isinstance(choice.get(part, {}).get("tool_calls"), list | None)
            for choice in choices
        )
    ):
        return data
    raise adapter.APIError(
        status_code=502,
        message="The provider's reply is not a chat completion.",
        llm_provider=str(params.get("lean_provider") or "openai"),
        model=str(params.get("model")),
    )


def _error_from_event(chunk: dict[str, Any], raw: bytes) -> Exception:
    """A stream's error event (`raw`, its data), as the error of a reply saying it."""
    error = chunk.get("error")
    status = error.get("code") if isinstance(error, dict) else None
    status = status if isinstance(status, int) and 400 <= status <= 599 else 500
    return adapter.openai_error(status, provider_words(raw) or "", body=raw)


def _mapped(params: dict[str, Any], exc: Exception) -> Exception:
    """LiteLLM's exception for a failure, as its own handler for the provider would
    raise it; the proxy's own (a reply too large, a stream event the door could not
    read) as it is, already in the proxy's words."""
    if isinstance(exc, (*adapter.EXCEPTION_TYPES, ProxyError)):
        return exc
    model = str(params.get("model"))
    provider = str(params.get("lean_provider") or "openai")
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return adapter.Timeout(
            message="The provider did not answer in time.", model=model, llm_provider=provider
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        message = "Could not reach the provider."
    elif isinstance(exc, aiohttp.ClientError | OSError):  # reached, then cut off
        message = "The connection to the provider broke off before its reply was finished."
    else:
        return adapter.map_openai_error(model, exc, provider)
    return adapter.APIConnectionError(message=message, llm_provider=provider, model=model)


def _url(params: dict[str, Any]) -> str:
    base = (
        params.get("api_base")
        or adapter.default_api_base()
        or os.environ.get("OPENAI_BASE_URL")
        or os.environ.get("OPENAI_API_BASE")
        or OPENAI_BASE
    )
    return str(base).rstrip("/") + "/chat/completions"


def _headers(params: dict[str, Any]) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    key = params.get("api_key") or adapter.default_api_key() or os.environ.get("OPENAI_API_KEY")
    if key:
        headers["authorization"] = f"Bearer {key}"
    organization = params.get("organization") or os.environ.get("OPENAI_ORGANIZATION")
    if organization:
        headers["openai-organization"] = str(organization)
    extra = params.get("extra_headers")
    if isinstance(extra, dict):
        headers |= {str(k): str(v) for k, v in extra.items()}
    return headers


def _router_params(params: dict[str, Any]) -> dict[str, Any]:
    """What LiteLLM's logging hands the Router's deployment callbacks."""
    return {
        "metadata": params.get("litellm_metadata") or {},
        "model_info": params.get("model_info") or {},
    }


def unfinished() -> Exception:
    """The error of a stream the provider ended before its reply was finished (closed
    cleanly, or after what is not its API's events), on every route."""
    return adapter.APIError(
        status_code=502,
        message="The provider's stream ended before the reply was finished.",
        llm_provider="openai",
        model="",
    )
