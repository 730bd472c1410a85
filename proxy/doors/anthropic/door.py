"""`POST /v1/messages` (and its `count_tokens`): Anthropic's Messages API, on the one
conversation model. The door delegates: its request is translated by `request`, its
reply written by `response`, its stream framed by `stream`, and an Anthropic
deployment is spoken to in its own API by `native`.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from starlette.responses import Response

from proxy.concurrency import elsewhere, many
from proxy.doors.anthropic.native import MessagesNative
from proxy.doors.anthropic.request import OPTIONAL, native_dropped, to_chat
from proxy.doors.anthropic.response import to_message
from proxy.doors.anthropic.stream import MessagesFramer
from proxy.doors.base import Api, Inbound, ORJSONResponse, body_session_id
from proxy.doors.translations import Renderings, Translations, Written, conversation_key
from proxy.engine import Turn
from proxy.upstream.lean import Completion

__all__ = ["MessagesDoor"]


class MessagesDoor:
    """The Messages API's door: its requests in, its replies and streams out."""

    api: Api = "messages"
    # The anthropic SDK's `workspace_id` and `user_profile_id`.
    unsent_headers: tuple[str, ...] = ("anthropic-workspace-id", "anthropic-user-profile-id")

    def __init__(self, id_fields: list[str]) -> None:
        self._id_fields = id_fields
        # What this door made of the conversations it served lately (`proxy.doors.translations`).
        self._translations = Translations("anthropic_messages")
        self._renderings = Renderings()

    async def inbound(
        self, body: dict[str, Any], tenant: str, written: Written | None = None
    ) -> Inbound:
        chat, dropped = await self._chat(body, tenant, written)
        named = body_session_id(body, self._id_fields)
        own = native_dropped(body)
        conversation = conversation_key(tenant, body["messages"][0])
        json = self._translations.written(conversation, chat["messages"])
        return Inbound(
            chat,
            session_id=named,
            dropped=dropped,
            optional=OPTIONAL,
            native=MessagesNative(body, self._renderings, conversation, self._translations),
            native_dropped=own,
            messages_json=memoryview(json) if json is not None else None,
        )

    async def counted(self, body: dict[str, Any]) -> Inbound:
        """A `count_tokens` request (no `max_tokens`) as the engine sees it."""
        large = many(body.get("system"), body.get("tools"))
        chat, _ = await elsewhere(large, functools.partial(to_chat, body | {"max_tokens": 1}))
        del chat["max_tokens"]
        return Inbound(chat, session_id=body_session_id(body, self._id_fields))

    async def _chat(
        self, body: dict[str, Any], tenant: str, written: Written | None
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`to_chat`, with the conversation's kept translation; one of thousands of system
        blocks or tools (an adversary's, or a mistake) in a worker thread, without it."""
        if many(body.get("system"), body.get("tools")):
            return await asyncio.to_thread(to_chat, body)
        return to_chat(body, self._translations, tenant, written)

    def reply(
        self, completion: Completion, inbound: Inbound, turn: Turn, headers: dict[str, str]
    ) -> Response:
        model = inbound.body["model"]
        if completion.native is not None:  # the provider's own message, as it came
            return ORJSONResponse(completion.native | {"model": model}, headers=headers)
        return ORJSONResponse(to_message(completion.data, model), headers=headers)

    def framer(self, inbound: Inbound, turn: Turn) -> MessagesFramer:
        return MessagesFramer(inbound.body["model"], turn.tokens_sent or 0)
