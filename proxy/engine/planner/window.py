"""The context planner: which messages to send upstream within a token budget, pure (its
inputs are never mutated) and keeping each tool call with its results."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from proxy.conversation.identity import Message
from proxy.conversation.tokens import TokenCounter
from proxy.errors import ContextOverflow
from proxy.summary.message import summary_message

__all__ = [
    "Compression",
    "Inserted",
    "Plan",
    "omitted_message",
    "plan_context",
    "yielded_message",
]


Compression = Literal["none", "summary", "truncated"]


@dataclass(frozen=True, slots=True)
class Plan:
    messages: list[Message]
    """Exactly what to send upstream; empty when `summarize` must happen first."""
    tokens: int
    """count_messages(messages) + tools tokens; 0 when `messages` is empty."""
    compression: Compression
    summarize: tuple[int, int] | None
    """Transcript span [start, end) to fold into the summary before sending."""
    dropped: int
    """Transcript messages omitted without a summary."""
    inserted: tuple[Inserted, ...] = ()
    """The blocks added to the window, in the order they were added."""

    def with_message(
        self, at: int, message: Message, tokens: int, kind: str, units: Iterable[int] = ()
    ) -> Plan:
        """The plan with a block (`kind`: remembered facts or recalled history, showing the
        units that start at `units`) inserted before `messages[at]`."""
        messages = [*self.messages[:at], message, *self.messages[at:]]
        inserted = (*self.inserted, Inserted(kind, tokens, tuple(units)))
        return replace(self, messages=messages, tokens=self.tokens + tokens, inserted=inserted)


@dataclass(frozen=True, slots=True)
class Inserted:
    """A block a plan carries beside the window: `memory` (remembered facts), `recall`
    (the session's summarized history), `memory_recall` (the memory's other sessions)."""

    kind: str
    tokens: int
    units: tuple[int, ...] = ()


def omitted_message(count: int) -> Message:
    """Marks dropped history, so truncation is never silent."""
    return {"role": "system", "content": f"[… {count} earlier messages omitted …]"}


def yielded_message(count: int) -> Message:
    """Marks the older part of the window left out for a recall block
    (`proxy.engine.yielding`): not lost, and what of it bears on the question is there."""
    return {
        "role": "system",
        "content": f"[… {count} earlier messages not shown here; those that bear on the"
        " latest message are among the recalled ones …]",
    }


def plan_context(
    *,
    system: list[Message],
    transcript: list[Message],
    transcript_tokens: list[int],
    summary: str | None,
    summary_covers: int,
    budget: int,
    counter: TokenCounter,
    tools_tokens: int = 0,
    keep_recent_ratio: float = 0.5,
    allow_summary: bool = True,
    system_tokens: int | None = None,
    kept: Sequence[str] = (),
) -> Plan:
    """Plan system + summary + recent transcript within `budget`, preferring, in order:
    everything, a fold, dropping the oldest units, cutting the last turn's largest messages."""
    # Counted once, when each message arrived: only messages that must be cut are counted here.
    if len(transcript_tokens) != len(transcript):
        raise ValueError("transcript_tokens needs one count per transcript message")
    if system_tokens is None:  # callers planning repeatedly pass count_messages(system) once
        system_tokens = counter.count_messages(system)
    base = system_tokens + tools_tokens
    if base > budget:
        raise ContextOverflow(f"system messages and tools need {base} tokens of {budget}")
    covers = min(summary_covers, len(transcript)) if summary is not None else 0
    head = [summary_message(summary, kept)] if summary is not None else []
    head_tokens = [counter.count_message(message) for message in head]
    head_total = sum(head_tokens)

    # Units are atomic: every non-tool message starts one, so a tool call travels with its
    # results; an orphan result at the window's start is dropped like any omitted message.
    starts = [i for i in range(covers, len(transcript)) if transcript[i].get("role") != "tool"]
    users = [i for i in starts if transcript[i].get("role") == "user"]
    keep_from = (users or starts or [len(transcript)])[-1]  # the last user turn: always sent
    candidates = [i for i in starts if i <= keep_from] or [keep_from]
    suffix = [0] * (len(transcript) + 1)  # suffix[i]: tokens of transcript[i:]
    for i in range(len(transcript) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + transcript_tokens[i]

    def marker_tokens(start: int) -> int:
        return counter.count_message(omitted_message(start - covers)) if start > covers else 0

    def total(start: int) -> int:
        return base + head_total + marker_tokens(start) + suffix[start]

    # A fold leaves at most this verbatim: big steps keep the prefix stable for prompt caches.
    recent_limit = keep_recent_ratio * (budget - base)  # of what can be compressed
    if (
        total(candidates[0]) > budget
        and allow_summary
        and keep_from > covers
        and suffix[covers] > recent_limit
    ):
        split = next((s for s in candidates if s > covers and suffix[s] <= recent_limit), keep_from)
        return Plan([], 0, "summary", (covers, split), 0)

    for start in candidates:  # the first one sends everything after the summary
        if total(start) <= budget:
            return _plan(system, head, transcript[start:], start - covers, total(start))

    # Even the last turn alone is too big: cut its largest messages (and the summary).
    room = budget - base - marker_tokens(keep_from)
    fitted, used = _fit(
        [*head, *transcript[keep_from:]],
        [*head_tokens, *transcript_tokens[keep_from:]],
        room,
        counter,
    )
    tokens = base + marker_tokens(keep_from) + used
    return _plan(system, fitted[: len(head)], fitted[len(head) :], keep_from - covers, tokens, True)


def _plan(
    system: list[Message],
    head: list[Message],
    rest: list[Message],
    dropped: int,
    tokens: int,
    cut: bool = False,
) -> Plan:
    marker = [omitted_message(dropped)] if dropped else []
    messages = [*system, *head, *marker, *rest]  # shared, not copied: nobody mutates them
    compression: Compression = "truncated" if dropped or cut else ("summary" if head else "none")
    return Plan(messages, tokens, compression, None, dropped)


def _fit(
    messages: list[Message], sizes: list[int], room: int, counter: TokenCounter
) -> tuple[list[Message], int]:
    """Cut the largest messages to a common cap so all fit in `room`; returns (messages, tokens)."""
    floors = [counter.count_message(_cut(message, 0, counter)) for message in messages]
    if sum(floors) > room:
        raise ContextOverflow(f"the last turn needs at least {sum(floors)} tokens of {room}")
    slack = [max(size - floor, 0) for size, floor in zip(sizes, floors, strict=True)]
    cap = _water_level(slack, room - sum(floors))
    fitted, used = [], 0
    for message, size, extra in zip(messages, sizes, slack, strict=True):
        if extra <= cap:
            fitted.append(message)
            used += size
        else:
            fitted.append(_cut(message, cap, counter, extra))
            used += counter.count_message(fitted[-1])  # what is kept: within the budget
    return fitted, used


def _cut(message: Message, room: int, counter: TokenCounter, texts: int | None = None) -> Message:
    """Copy of `message` whose cuttable texts (content, tool arguments) total <= room
    tokens; `texts`, what they count, spares counting a message of one such text."""
    result = copy.deepcopy(message)
    fields = _text_fields(result)
    if room <= 0:
        for obj, key in fields:
            obj[key] = ""
        return result
    if len(fields) == 1 and texts is not None:
        obj, key = fields[0]
        obj[key] = counter.truncate_middle(obj[key], room, texts)
        return result
    sizes = [counter.count_text(obj[key]) for obj, key in fields]
    cap = _water_level(sizes, room)
    for (obj, key), size in zip(fields, sizes, strict=True):
        if size > cap:
            obj[key] = counter.truncate_middle(obj[key], cap, size)
    return result


def _text_fields(message: Message) -> list[tuple[dict[str, Any], str]]:
    """The (container, key) pairs of a message's free text, the only parts that can be cut."""
    fields: list[tuple[dict[str, Any], str]] = []
    content = message.get("content")
    if isinstance(content, str):
        fields.append((message, "content"))
    elif isinstance(content, list):
        fields += [
            (p, "text")
            for p in content
            if p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
    for call in message.get("tool_calls") or ():
        function = call.get("function")
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            fields.append((function, "arguments"))
    return fields


def _water_level(sizes: list[int], room: int) -> int:
    """Largest cap with sum(min(size, cap)) <= room: cut the biggest first, spare the small."""
    low, high = 0, max(sizes, default=0)
    while low < high:
        cap = (low + high + 1) // 2
        if sum(min(size, cap) for size in sizes) <= room:
            low = cap
        else:
            high = cap - 1
    return low
