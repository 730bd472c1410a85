"""The Responses API's streaming events, made from the upstream's chat chunks
(`response.created` … `response.completed`), or an OpenAI deployment's own events
relayed under this proxy's ids."""

from __future__ import annotations

import re
from typing import Any

import orjson

from proxy.doors.base import ErrorReply
from proxy.doors.responses.items import ItemNames
from proxy.doors.responses.response import call_item, message_item, response_object

__all__ = ["ResponsesFramer"]

_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d+)')


class ResponsesFramer:
    """One streamed response: the open output item, and everything `response.completed`
    repeats at the end."""

    def __init__(
        self, *, response_id: str, names: ItemNames, model: str, echo: dict[str, Any]
    ) -> None:
        self._id = response_id
        self._model = model
        self._echo = echo
        self._sequence = 0
        self._started = False
        self._output: list[dict[str, Any]] = []  # finished items
        self._open: dict[str, Any] | None = None  # the item being streamed
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # a chunk's tool call index -> item
        self._usage: dict[str, Any] | None = None
        self._names = names
        self._renamed: list[tuple[bytes, bytes]] = []  # a provider's item ids, and ours

    def chunks(self, chunks: list[dict[str, Any]], raw: bytes | None) -> bytes:
        out: list[bytes] = []
        if not self._started:
            self._started = True
            response = self._response("in_progress", [])
            out.append(self._event("response.created", {"response": response}))
            out.append(self._event("response.in_progress", {"response": response}))
        for chunk in chunks:
            if chunk.get("usage"):
                self._usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) == 0:
                    out.extend(self._delta(choice.get("delta") or {}))
        return b"".join(out)

    def relay(self, raw: bytes) -> bytes:
        """OpenAI's own event, its response under this proxy's id (which continues it)
        and the model name asked for, its output items under ids that name the stored
        reply (`ItemNames`)."""
        kind, _, data = raw.partition(b"\ndata: ")
        if kind == b"event: response.output_item.added":
            item = orjson.loads(data).get("item")
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                ours = self._names.mint(str(item.get("type", "message")), item["id"])
                self._renamed.append((orjson.dumps(item["id"]), orjson.dumps(ours)))
        for theirs, renamed in self._renamed:
            raw = raw.replace(theirs, renamed)
        number = _SEQUENCE.search(raw)
        if number is not None:  # this proxy's own events (an error) follow on
            self._sequence = int(number[1]) + 1
        if b'"response"' not in raw:
            return raw
        kind, _, data = raw.partition(b"\ndata: ")
        event = orjson.loads(data)
        if not isinstance(event.get("response"), dict):
            return raw
        event["response"] |= {"id": self._id, "model": self._model}
        return kind + b"\ndata: " + orjson.dumps(event) + b"\n\n"

    def end(self) -> list[bytes]:
        out = self._close()
        response = self._response("completed", self._output, self._usage)
        out.append(self._event("response.completed", {"response": response}))
        return out

    def error(self, error: ErrorReply) -> bytes:
        """`response.failed`, then `error`: a client that reads the response's own end
        (Codex) sees it fail, and the openai SDK raises at the `error` event (which says
        it in its fields and in an `error` object, the shape the SDK raises for)."""
        fields = {"code": error.code or "server_error", "message": error.message}
        failed = self._response("failed", self._output) | {"error": fields}
        said = fields | {"param": error.param}
        return self._event("response.failed", {"response": failed}) + self._event(
            "error", said | {"error": said | {"type": error.type}}
        )

    def _delta(self, delta: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if delta.get("content"):
            if self._open is None or self._open["type"] != "message":
                out.extend(self._close())
                item = message_item(self._names.mint("message"), None, "in_progress")
                out.append(self._add(item))
                part = {"type": "output_text", "text": "", "annotations": []}
                out.append(
                    self._event(
                        "response.content_part.added",
                        self._where() | {"content_index": 0, "part": part},
                    )
                )
            self._text.append(delta["content"])
            out.append(
                self._event(
                    "response.output_text.delta",
                    self._where() | {"content_index": 0, "delta": delta["content"], "logprobs": []},
                )
            )
        for call in delta.get("tool_calls") or ():
            number = call.get("index", 0)
            function = call.get("function") or {}
            if number not in self._calls:
                out.extend(self._close())
                item = call_item(
                    self._names.mint("function_call"),
                    call.get("id") or "",
                    function.get("name") or "",
                    "",
                    "in_progress",
                )
                self._calls[number] = item
                out.append(self._add(item))
            if function.get("arguments"):
                self._text.append(function["arguments"])
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        self._where() | {"delta": function["arguments"]},
                    )
                )
        return out

    def _add(self, item: dict[str, Any]) -> bytes:
        self._open = item
        self._text = []
        return self._event(
            "response.output_item.added", {"output_index": len(self._output), "item": item}
        )

    def _close(self) -> list[bytes]:
        """The open item's last events. Its text (or arguments) comes in four of them
        and the response's end: serialized once, each copies the JSON."""
        item = self._open
        if item is None:
            return []
        text = orjson.Fragment(orjson.dumps("".join(self._text)))
        where = self._where()
        out = []
        if item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": []}
            out.append(
                self._event(
                    "response.output_text.done",
                    where | {"content_index": 0, "text": text, "logprobs": []},
                )
            )
            out.append(
                self._event(
                    "response.content_part.done", where | {"content_index": 0, "part": part}
                )
            )
            item = item | {"content": [part]}
        else:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    where | {"arguments": text, "name": item["name"]},
                )
            )
            item = item | {"arguments": text}
        item = item | {"status": "completed"}
        out.append(
            self._event(
                "response.output_item.done", {"output_index": len(self._output), "item": item}
            )
        )
        self._output.append(item)
        self._open = None
        return out

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._output)}

    def _response(
        self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return response_object(self._id, self._model, self._echo, status, list(output), usage)

    def _event(self, kind: str, data: dict[str, Any]) -> bytes:
        payload = {"type": kind, **data, "sequence_number": self._sequence}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
