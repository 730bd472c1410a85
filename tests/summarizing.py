"""The proxy's summarizer calls as an upstream receives them, in any API's shape: apart (its
own system prompt and the span as a transcript) or continued (the session's last prompt
with a summary request appended as its last turn, `proxy.engine.folds.continuing`)."""

from __future__ import annotations

import re
from typing import Any

from proxy.summary.fold import APPEND_TASK, CONTINUATION_TASK, SYSTEM_PROMPT, build_prompt

__all__ = ["apart", "as_apart", "asks_summary", "continued", "summarized"]

_QUOTED = re.compile(r"<last_message>\n(.*?)\n</last_message>", re.S)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part) for part in content)
    if isinstance(content, dict):
        for key in ("text", "content", "output", "arguments"):
            if key in content:
                return _text(content[key])
        if "input" in content:
            return str(content["input"])
    return ""


def _turns(body: dict[str, Any]) -> list[Any]:
    turns = body.get("messages")
    if turns is None:
        turns = body.get("input")
    return turns if isinstance(turns, list) else []


def apart(body: dict[str, Any]) -> bool:
    """A summary asked apart: the summarizer's own system prompt leads (a Responses
    body's `instructions`, where LiteLLM's route to a Responses-only model put it)."""
    system = _text(body.get("system") or body.get("instructions"))
    turns = _turns(body)
    first = _text(turns[0].get("content")) if turns and isinstance(turns[0], dict) else ""
    return first == SYSTEM_PROMPT or system.startswith(SYSTEM_PROMPT)


def continued(body: dict[str, Any]) -> bool:
    """A summary asked as the session's last prompt's next turn (its last user turn may
    hold the prompt's last user message too, where a translation merged the two)."""
    turns = _turns(body)
    last = turns[-1] if turns else None
    return isinstance(last, dict) and CONTINUATION_TASK in _text(last.get("content"))


def asks_summary(body: dict[str, Any]) -> bool:
    """Any of the proxy's summarizer calls."""
    return apart(body) or continued(body)


def summarized(body: dict[str, Any]) -> str:
    """The text a summarizer call asks to summarize: apart, its transcript (the last
    message); continued, the prompt's turns up to the quoted last message of the span."""
    turns = _turns(body)
    if not continued(body):
        return _text(turns[-1].get("content")) if turns else ""
    quoted = _QUOTED.search(_text(turns[-1].get("content")))
    text = "\n\n".join(_text(turn) for turn in turns[:-1] if isinstance(turn, dict))
    if quoted is not None:
        last = quoted.group(1).removesuffix(" …").split(": ", 1)[-1][:200]
        at = text.find(last) if last else -1
        if at >= 0:
            text = text[: at + len(last)]
    return text


def as_apart(body: dict[str, Any]) -> dict[str, Any]:
    """A summarizer call as the chat body of one asked apart, whatever its shape, so one
    scripted summarizer answers both: a continued call's span (`summarized`) becomes the
    transcript, after "the summary above" where it asks for the summary's next segment."""
    if not continued(body):
        task = {"role": "user", "content": _last(_turns(body))}
        return {"messages": [{"role": "system", "content": SYSTEM_PROMPT}, task]}
    append = APPEND_TASK in _text(_turns(body)[-1].get("content"))
    previous = "(the summary above)" if append else None
    return {"messages": build_prompt(previous, summarized(body), append=append)}


def _last(turns: list[Any]) -> str:
    return _text(turns[-1].get("content")) if turns and isinstance(turns[-1], dict) else ""
