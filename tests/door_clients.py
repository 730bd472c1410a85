"""Chat-shaped clients that go through the other doors: scripted conversations written
for `client.chat.completions.create` run unchanged through the anthropic SDK (the
Messages door, resending the whole history as Claude Code does) or through the
openai SDK's `client.responses` (a `previous_response_id` chain, sending only what is
new, as the Responses API intends)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import anthropic
import openai


def door_client(door: str, url: str, key: str, headers: dict[str, str]) -> Any:
    if door == "chat":
        return openai.OpenAI(
            base_url=url + "/v1", api_key=key, max_retries=0, default_headers=headers
        )
    if door == "messages":
        return MessagesClient(
            anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, default_headers=headers)
        )
    assert door == "responses"
    return ResponsesClient(
        openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, default_headers=headers)
    )


def _completion(text: str | None, calls: list[dict[str, Any]]) -> Any:
    tool_calls = [
        SimpleNamespace(
            id=c["id"],
            type="function",
            function=SimpleNamespace(name=c["name"], arguments=c["arguments"]),
        )
        for c in calls
    ]
    message = SimpleNamespace(role="assistant", content=text, tool_calls=tool_calls or None)
    return SimpleNamespace(choices=[SimpleNamespace(message=message)])


class MessagesClient:
    def __init__(self, client: anthropic.Anthropic) -> None:
        self._client = client
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(
        self, model: str, messages: list[dict[str, Any]], tools: Any = None, **_: Any
    ) -> Any:
        system = [m["content"] for m in messages if m["role"] == "system"]
        converted: list[dict[str, Any]] = []
        for message in (m for m in messages if m["role"] != "system"):
            converted_message = _anthropic(message)
            if converted and converted[-1]["role"] == converted_message["role"] == "user":
                converted[-1]["content"] += converted_message["content"]
            else:
                converted.append(converted_message)
        extra: dict[str, Any] = {"system": "\n".join(system)} if system else {}
        if tools:
            extra["tools"] = [
                {
                    "name": t["function"]["name"],
                    "description": t["function"].get("description", ""),
                    "input_schema": t["function"]["parameters"],
                }
                for t in tools
            ]
        reply = self._client.messages.create(
            model=model, max_tokens=256, messages=converted, **extra
        )
        text = "".join(b.text for b in reply.content if b.type == "text") or None
        calls = [
            {"id": b.id, "name": b.name, "arguments": json.dumps(b.input)}
            for b in reply.content
            if b.type == "tool_use"
        ]
        return _completion(text, calls)


def _anthropic(message: dict[str, Any]) -> dict[str, Any]:
    if message["role"] == "tool":
        result = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": message["content"],
        }
        return {"role": "user", "content": [result]}
    if message["role"] == "user":
        return {"role": "user", "content": [{"type": "text", "text": message["content"]}]}
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": json.loads(function["arguments"]),
            }
        )
    return {"role": "assistant", "content": blocks}


class ResponsesClient:
    def __init__(self, client: openai.OpenAI) -> None:
        self._client = client
        self._previous: str | None = None
        self._covered = 0  # messages the chain holds already (the replies included)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(
        self, model: str, messages: list[dict[str, Any]], tools: Any = None, **_: Any
    ) -> Any:
        system = [m["content"] for m in messages if m["role"] == "system"]
        conversation = [m for m in messages if m["role"] != "system"]
        new = conversation[self._covered :]
        extra: dict[str, Any] = {"instructions": "\n".join(system)} if system else {}
        if tools:
            extra["tools"] = [{"type": "function", **t["function"]} for t in tools]
        reply = self._client.responses.create(
            model=model,
            input=[item for message in new for item in _items(message)],
            previous_response_id=self._previous,
            **extra,
        )
        self._previous = reply.id
        self._covered = len(conversation) + 1  # the caller keeps the reply
        calls = [
            {"id": o.call_id, "name": o.name, "arguments": o.arguments}
            for o in reply.output
            if o.type == "function_call"
        ]
        return _completion(reply.output_text or None, calls)


def _items(message: dict[str, Any]) -> list[dict[str, Any]]:
    if message["role"] == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message["tool_call_id"],
                "output": message["content"],
            }
        ]
    items: list[dict[str, Any]] = []
    if message.get("content"):
        items.append({"role": message["role"], "content": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        items.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": function["name"],
                "arguments": function["arguments"],
            }
        )
    return items
