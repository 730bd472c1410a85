"""The sessions API: list, read, preview and delete stored conversations.

A caller sees its own tenant's sessions only. An admin key may name another tenant
(`?tenant=`) on every route, and lists every tenant's sessions when it names none.

A route names its session by the path's segment (percent-encoded), or, with `-` as the
segment, by `?id=`: any id, also `.` and `..` (which HTTP clients and browsers remove
from a path) and one holding `/` (which splits a segment, even as `%2F`).
"""

from __future__ import annotations

import functools
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.concurrency import elsewhere, many
from proxy.config.settings import ServerSettings
from proxy.conversation.validation import invalid, session_id, validate_parameters
from proxy.doors.base import ORJSONResponse
from proxy.engine import Engine, RequestContext
from proxy.errors import InvalidRequest, NotFound, PermissionDenied, ProxyError
from proxy.http.auth import Principal
from proxy.http.bodies import parse_json, principal, read_body
from proxy.http.headers import memory_id
from proxy.sessions.records import Checkpoint, SessionMeta, StoredMessage
from proxy.sessions.store import SessionStore
from proxy.upstream.client import Upstream

__all__ = ["SessionApi", "session_view"]

DEFAULT_PAGE = 20
LARGEST_PAGE = 100
BY_QUERY = "-"  # the path's segment that leaves the id to `?id=`


class SessionApi:
    def __init__(
        self, *, engine: Engine, upstream: Upstream, store: SessionStore, server: ServerSettings
    ) -> None:
        self.engine = engine
        self.upstream = upstream
        self.store = store
        self._server = server

    async def list(self, request: Request) -> Response:
        """`GET /v1/sessions?limit=&after=`: a page of sessions, oldest key first."""
        caller = principal(request)
        named = request.query_params.get("tenant")
        tenant = _tenant(caller, named) if named is not None or not caller.admin else None
        limit = _limit(request.query_params.get("limit"))
        after = _cursor(request.query_params.get("after"))
        found = await self.store.sessions(tenant, after, limit + 1)
        page = found[:limit]
        return ORJSONResponse(
            {
                "object": "list",
                "data": [_summary(meta) for meta in page],
                "has_more": len(found) > limit,
                "next_after": _key(page[-1]) if len(found) > limit else None,
            }
        )

    async def get(self, request: Request) -> Response:
        tenant, name, meta = await self._session(request)
        messages = await self.store.messages(tenant, name, 0, meta.length)
        checkpoints = await self.store.checkpoints(tenant, name)
        return ORJSONResponse(session_view(meta, messages, checkpoints))

    async def delete(self, request: Request) -> Response:
        tenant = _tenant(principal(request), request.query_params.get("tenant"))
        name = _named(request, "session_id")
        if not await self.store.delete(tenant, name):
            raise _no_session(name)
        return ORJSONResponse({"id": name, "object": "session.deleted", "deleted": True})

    async def plans(self, request: Request) -> Response:
        """`GET /v1/sessions/{id}/plans`: what the session's newest turns sent, by
        reference and token counts (`proxy.engine.records`), oldest first."""
        tenant, name, _ = await self._session(request)
        records = await self.store.plans(tenant, name)
        body = b'{"object":"list","data":[' + b",".join(records) + b"]}"
        return Response(body, media_type="application/json")

    async def preview(self, request: Request) -> Response:
        """The exact context the next request would send, without calling any model."""
        tenant, name, _ = await self._session(request)
        body = parse_json(await read_body(request, self._server))
        body.setdefault("messages", [])
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise invalid("model", "`model` is required and must be a non-empty string.")
        if not isinstance(body["messages"], list):
            raise invalid("messages", "`messages` must be an array.")
        if body["messages"]:
            tools = many(body.get("tools"), body.get("functions"))
            await elsewhere(tools, functools.partial(validate_parameters, body))
        route = self.upstream.models.served_as(body["model"])
        if not principal(request).may_use(body["model"], route):
            raise model_not_allowed(body["model"])
        self.upstream.models.check(body["model"])
        memory = memory_id(request.headers, self.engine.settings.memory)
        context = RequestContext(tenant=tenant, session_id=name, memory_id=memory)
        return ORJSONResponse(await self.engine.preview(body, context))

    async def search(self, request: Request) -> Response:
        """`GET /v1/sessions/{id}/search?q=&limit=`: the units (a message and the tool
        results answering it) that best match `q`, best first, from the whole session:
        the summarized part through its recall index, the rest indexed as it is read."""
        tenant, name, meta = await self._session(request)
        query = request.query_params.get("q", "")
        if not query.strip():
            raise invalid("q", "`q` must be a non-empty search query.")
        limit = _limit(request.query_params.get("limit"))
        hits = await self.engine.archive.search((tenant, name), meta, query, limit)
        return ORJSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "object": "session.match",
                        "start": hit.start,
                        "end": hit.end,
                        "score": round(hit.score, 4),
                        "terms": list(hit.terms),
                        "messages": messages,
                    }
                    for hit, messages in hits
                ],
            }
        )

    async def memory(self, request: Request) -> Response:
        """`GET /v1/memories/{id}`: what the tenant's memory holds, superseded values marked."""
        tenant = _tenant(principal(request), request.query_params.get("tenant"))
        name = _named(request, "memory_id")
        memory = await self.engine.memories.memory(tenant, name)
        if memory is None:
            raise NotFound(f"No memory `{name}`.", code="memory_not_found")
        facts = [f.to_dict() for f in memory.facts]
        return ORJSONResponse(
            {"id": name, "object": "memory", "facts": facts, "sessions": memory.sessions}
        )

    async def forget(self, request: Request) -> Response:
        """`DELETE /v1/memories/{id}`: erase everything the memory holds."""
        tenant = _tenant(principal(request), request.query_params.get("tenant"))
        name = _named(request, "memory_id")
        if not await self.engine.memories.forget(tenant, name):
            raise NotFound(f"No memory `{name}`.", code="memory_not_found")
        return ORJSONResponse({"id": name, "object": "memory.deleted", "deleted": True})

    async def _session(self, request: Request) -> tuple[str, str, SessionMeta]:
        tenant = _tenant(principal(request), request.query_params.get("tenant"))
        name = _named(request, "session_id")
        meta = await self.store.load(tenant, name)
        if meta is None:
            raise _no_session(name)
        return tenant, name, meta


def session_view(
    meta: SessionMeta, messages: list[StoredMessage], checkpoints: list[Checkpoint]
) -> dict[str, Any]:
    """A session as the API shows it: the whole transcript, checkpoints (with what their
    summarizer calls used), token stats, and its receipt: spent (summaries included),
    spent on summaries, what resending the whole conversation would have cost, net
    (`proxy.costs.receipts`; null before a priced turn)."""
    tokens: dict[str, int] = {}
    for stored in messages:
        for name, count in stored.tokens.items():
            tokens[name] = tokens.get(name, 0) + count
    return {
        "id": meta.session_id,
        "object": "session",
        "created": meta.created,
        "updated": meta.updated,
        "version": meta.version,
        "messages": [stored.message for stored in messages],
        "checkpoints": [
            {
                "covers_until": c.covers_until,
                "text": c.text,
                "segments": c.segments,
                "pinned": c.pinned,
                "tokens": c.tokens,
                "model": c.model,
                "created": c.created,
                "stubbed": list(c.stubbed),  # tool results sent as stubs after it
                "usage": c.usage.to_dict() if c.usage is not None else None,
            }
            for c in checkpoints
        ],
        "stats": {"messages": len(messages), "tokens": tokens},
        "receipt": meta.receipt.shown(),
    }


def model_not_allowed(model: str) -> ProxyError:
    return PermissionDenied(
        f"This key may not use the model `{model}`.",
        code="model_not_allowed",
        param="model",
    )


def _tenant(caller: Principal, named: str | None) -> str:
    """The tenant a request addresses: the caller's own, or for an admin the one named."""
    if named is None or named == caller.tenant:
        return caller.tenant
    if not caller.admin:
        raise PermissionDenied(
            "Only an admin key may name a tenant.", code="permission_denied", param="tenant"
        )
    if not named or ":" in named:
        raise invalid("tenant", "`tenant` must be a tenant name, without `:`.")
    return named


def _named(request: Request, param: str) -> str:
    """The session (or memory) a route names: its path's segment, or with the segment
    `-` the `id` query parameter."""
    segment = request.path_params[param]
    named = request.query_params.get("id")
    if named is not None:
        if segment != BY_QUERY:
            raise invalid("id", f"`id` is read only when the path's segment is `{BY_QUERY}`.")
        return session_id(named, "id")
    if b"%2f" in (request.scope.get("raw_path") or b"").lower():
        # The server split the segment at the `/`: the route matched may not be the one meant.
        raise InvalidRequest(
            f"An id holding `/` is named by `?id=`, with `{BY_QUERY}` as the path's segment.",
            code="invalid_session_id",
            param=param,
        )
    return session_id(segment, param)


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_PAGE
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= LARGEST_PAGE:
        raise invalid("limit", f"`limit` must be an integer from 1 to {LARGEST_PAGE}.")
    return int(value)


def _cursor(value: str | None) -> tuple[str, str] | None:
    """`after`: the `next_after` of the previous page, `tenant:session`."""
    if value is None:
        return None
    tenant, colon, name = value.partition(":")
    if not colon or not tenant or not name:
        raise invalid("after", "`after` must be the `next_after` value of the previous page.")
    return tenant, name


def _key(meta: SessionMeta) -> str:
    return f"{meta.tenant}:{meta.session_id}"


def _summary(meta: SessionMeta) -> dict[str, Any]:
    return {
        "id": meta.session_id,
        "object": "session",
        "tenant": meta.tenant,
        "created": meta.created,
        "updated": meta.updated,
        "version": meta.version,
        "messages": meta.length,
    }


def _no_session(name: str) -> ProxyError:
    return NotFound(f"No session `{name}`.", code="session_not_found")
