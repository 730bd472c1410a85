"""OpenAI's `POST /v1/responses/compact`, which Codex calls to compact its history when
its provider offers it: the conversation, to be replaced by a shorter one that goes on
from a summary.

The proxy runs it as a compaction turn of its session (`proxy.engine.planner.agent_compaction`): the
conversation with a request for a summary after it, answered from the session's own
summary where that is fresh, else by the model; never stored. The answer is the
compacted conversation OpenAI's API returns (the user messages, then what stands for
the rest), with the summary as a user message the conversation goes on from: the next
turn is a chapter of the same session.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

from starlette.responses import Response

from proxy.doors.base import Api, Framer, Inbound, ORJSONResponse, text_of
from proxy.doors.responses.door import ResponsesDoor
from proxy.doors.responses.response import response_usage
from proxy.doors.translations import Written
from proxy.engine import COMPACTION_REQUEST, COMPACTION_RESUMED, Turn
from proxy.errors import InvalidRequest
from proxy.upstream.lean import Completion

__all__ = ["CompactDoor"]

# The compaction endpoint's own fields; any other is the Responses API's, or unknown.
_FIELDS = ("model", "input", "instructions", "previous_response_id")


class CompactDoor:
    api: Api = "responses"
    unsent_headers: tuple[str, ...] = ()

    def __init__(self, responses: ResponsesDoor) -> None:
        self._responses = responses

    async def inbound(
        self, body: dict[str, Any], tenant: str, written: Written | None = None
    ) -> Inbound:
        own = {name: body[name] for name in _FIELDS if name in body}
        inbound = await self._responses.inbound(own, tenant)
        chat = inbound.body
        chat["messages"] = [
            *chat["messages"],
            {"role": "user", "content": COMPACTION_REQUEST},
        ]
        kept = [item for item in _items(body.get("input")) if _user_message(item)]
        dropped = (*inbound.dropped, *(name for name in body if name not in _FIELDS))
        return replace(  # its messages changed: their JSON is not the door's
            inbound,
            dropped=dropped,
            native=None,
            native_dropped=(),
            extra={"kept": kept},
            messages_json=None,
        )

    def reply(
        self, completion: Completion, inbound: Inbound, turn: Turn, headers: dict[str, str]
    ) -> Response:
        choices = completion.data.get("choices") or [{}]
        summary = text_of((choices[0].get("message") or {}).get("content"))
        resumed = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": COMPACTION_RESUMED + summary}],
        }
        usage = completion.data.get("usage")
        body = {
            "id": "cmp_" + uuid.uuid4().hex,
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*inbound.extra["kept"], resumed],
            "usage": response_usage(usage) if usage else None,
        }
        return ORJSONResponse(body, headers=headers)

    def framer(self, inbound: Inbound, turn: Turn) -> Framer:
        raise InvalidRequest("responses/compact does not stream.", param="stream")


def _items(source: Any) -> list[Any]:
    if isinstance(source, str):
        return [{"type": "message", "role": "user", "content": source}]
    return list(source) if isinstance(source, list) else []


def _user_message(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") == "user"
    )
