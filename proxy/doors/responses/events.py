"""An OpenAI deployment's own Responses stream (`proxy.upstream.native`), read as chat
chunks for the engine while its events are relayed to the client."""

from __future__ import annotations

from typing import Any

from proxy.conversation.identity import RESPONSES_OUTPUT
from proxy.doors.base import UNTYPED_EVENT
from proxy.doors.responses.response import chat_completion, tool_call
from proxy.errors import UpstreamFailure
from proxy.upstream.failures import said_in

__all__ = ["ResponsesEvents"]


class ResponsesEvents:
    """OpenAI's Responses stream read as chat chunks: text deltas, function calls by their
    order; the finish, with the whole turn, only on the response's own completion."""

    def __init__(self) -> None:
        self._calls = 0

    def event(self, kind: str, data: dict[str, Any], raw: bytes) -> tuple[bytes, list[dict]]:
        delta: dict[str, Any] = {}
        if not kind:  # every event of the API names its type: this one is no part of it
            raise UpstreamFailure(UNTYPED_EVENT)
        if kind in ("error", "response.failed"):
            said = said_in(data.get("response")) or said_in(data)
            raise UpstreamFailure(said or "The provider's response failed.")
        if kind == "response.output_text.delta":
            delta = {"content": data.get("delta") or ""}
        elif kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call":
                call = tool_call(item | {"arguments": ""}) | {"index": self._calls}
                delta = {"tool_calls": [call]}
                self._calls += 1
        elif kind == "response.function_call_arguments.delta":
            arguments = {"arguments": data.get("delta") or ""}
            delta = {"tool_calls": [{"index": self._calls - 1, "function": arguments}]}
        elif kind in ("response.completed", "response.incomplete"):
            whole = chat_completion(data.get("response") or {})
            choice = whole["choices"][0]
            kept = choice["message"].get(RESPONSES_OUTPUT)
            end = {"message_fields": {RESPONSES_OUTPUT: kept}} if kept else {}
            finish = {"index": 0, "delta": end, "finish_reason": choice["finish_reason"]}
            return raw, [{"choices": [], "usage": whole["usage"]}, {"choices": [finish]}]
        if not delta:
            return raw, []
        return raw, [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]
