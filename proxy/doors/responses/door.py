"""`POST /v1/responses`: OpenAI's Responses API, on the one conversation model. The door
delegates: its request is translated by `request` (its `item_reference` items resolved
and its ids read by `items`), its reply written by `response`, its stream framed by
`stream`, and an OpenAI deployment is spoken to in its own API by `native`.

`previous_response_id` is served by the proxy itself, for any backend: a response id
names its session and the transcript length it left, signed for the tenant that made
it, so it continues exactly that conversation for that caller and nobody else.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from starlette.responses import Response

from proxy.concurrency import many
from proxy.doors.base import Api, Inbound, ORJSONResponse, body_session_id
from proxy.doors.responses.items import ItemNames, References, ResponseIds
from proxy.doors.responses.native import ResponsesNative
from proxy.doors.responses.request import OPTIONAL, conversation_of, native_dropped, to_chat
from proxy.doors.responses.response import ECHOED, output_items, response_object
from proxy.doors.responses.stream import ResponsesFramer
from proxy.doors.translations import Renderings, Translations, Written
from proxy.engine import Turn
from proxy.sessions.store import SessionStore
from proxy.upstream.lean import Completion

__all__ = ["ResponsesDoor"]


class ResponsesDoor:
    """The Responses API's door: its requests in, its replies and streams out, under ids
    that name what the session stores."""

    api: Api = "responses"
    unsent_headers: tuple[str, ...] = ()

    def __init__(self, ids: ResponseIds, id_fields: list[str], store: SessionStore) -> None:
        self._ids = ids
        self._id_fields = id_fields
        self._references = References(ids, store)
        # What this door made of the conversations it served lately (`proxy.doors.translations`).
        self._translations = Translations("responses")
        self._renderings = Renderings()

    async def inbound(
        self, body: dict[str, Any], tenant: str, written: Written | None = None
    ) -> Inbound:
        referenced = await self._references.resolve(body, tenant, written)
        if many(body.get("tools")):  # thousands (an adversary's): in a worker thread, not kept
            chat, dropped = await asyncio.to_thread(to_chat, body)
        else:
            chat, dropped = to_chat(body, self._translations, tenant, written)
        echo = {name: body.get(name) for name in ECHOED}
        previous = body.get("previous_response_id")
        session_id: str | None
        if previous is not None:
            session_id, length = self._ids.read(tenant, previous)
        else:  # else the session the body names, or that its item references name
            session_id, length = body_session_id(body, self._id_fields) or referenced, None
            if session_id is None and body.get("store") is not False:
                session_id = "resp-" + uuid.uuid4().hex  # a new conversation, continuable
        own = native_dropped(body)
        conversation = conversation_of(tenant, body)
        json = self._translations.written(conversation, chat["messages"])
        return Inbound(
            chat,
            session_id,
            length,
            {"echo": echo},
            dropped,
            OPTIONAL,
            native=ResponsesNative(body, self._renderings, conversation, self._translations),
            native_dropped=own,
            messages_json=memoryview(json) if json is not None else None,
        )

    def response_id(self, turn: Turn) -> str:
        if turn.key is None or turn.transcript_length is None:
            return "resp_" + uuid.uuid4().hex  # nothing stored: nothing to continue
        tenant, session_id = turn.key
        return self._ids.mint(tenant, session_id, turn.transcript_length + 1)

    def item_names(self, turn: Turn) -> ItemNames:
        """The ids of the reply's output items, which name the stored reply."""
        length, head = turn.transcript_length, turn.transcript_head
        if turn.key is None or length is None or head is None:
            return ItemNames(uuid.uuid4().hex)  # nothing stored: nothing to refer to
        return ItemNames(self._ids.reply(*turn.key, length + 1, head))

    def reply(
        self, completion: Completion, inbound: Inbound, turn: Turn, headers: dict[str, str]
    ) -> Response:
        rid, names = self.response_id(turn), self.item_names(turn)
        if completion.native is not None:  # the provider's own response, as it came
            own = completion.native | {"id": rid, "model": inbound.body["model"]}
            if isinstance(own.get("output"), list):  # under ids that name the stored reply
                own["output"] = names.renamed(own["output"])
            return ORJSONResponse(own, headers=headers)
        data = completion.data
        message = ((data.get("choices") or [{}])[0]).get("message") or {}
        body = response_object(
            rid,
            inbound.body["model"],
            inbound.extra["echo"],
            "completed",
            output_items(message, names),
            data.get("usage"),
        )
        return ORJSONResponse(body, headers=headers)

    def framer(self, inbound: Inbound, turn: Turn) -> ResponsesFramer:
        return ResponsesFramer(
            response_id=self.response_id(turn),
            names=self.item_names(turn),
            model=inbound.body["model"],
            echo=inbound.extra["echo"],
        )
