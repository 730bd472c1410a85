"""A fold asked of the prompt the session last sent, as its next turn.

The span a fold summarizes is, most of the time, the oldest part of the verbatim window
the session's latest turn sent, right after its summary. Where the summarizer is the
session's own model, asking for the summary as that prompt's next turn (byte for byte,
one instruction appended, as Claude Code asks for its own compaction) makes what the
summarizer reads a cache read: a tenth of the input price on Claude and GPT-5, a quarter
on GPT-4.1, where folding apart pays the span, and the summary before it, in full. It is
done where it costs less by the model's prices (`pays`); elsewhere (another summary
model, a cold or no cache, a window that is not the span's, a prompt this process did not
send) the fold is made apart as before.

The prompts are kept in this process only, the latest of each session, within
`KEPT_SENT_BYTES`: a native window is the rendered JSON the door keeps anyway, a chat
window the planned messages.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.costs.prices import AUTOMATIC_MIN_TOKENS, AUTOMATIC_STEP, Prices
from proxy.costs.usage import Usage
from proxy.engine.types import Sent, Turn
from proxy.sessions.records import Checkpoint, SessionKey, StoredMessage
from proxy.upstream.client import Upstream
from proxy.upstream.native import ITEMS, native_text

__all__ = ["KEPT_SENT_BYTES", "TASK_TOKENS", "Continuation", "Continuing", "Prompt", "held", "pays"]

KEPT_SENT_BYTES = 16 << 20
"""The sessions' last prompts this process keeps, by their windows' JSON (or an estimate,
four bytes a token, of a chat window's)."""
_APART_FRAME = 300  # tokens of the summarizer's own prompt around the span it folds apart
TASK_TOKENS = 400
"""The instruction a continuation appends, about: room the prompt must leave for it."""
# A parameter the continued prompt leaves out: it belongs to the client's call, not to
# what the cache holds (the reply's length, streaming, sampling many).
_PER_CALL = frozenset(
    {"stream", "stream_options", "n", "max_tokens", "max_completion_tokens", "max_output_tokens"}
)
_REASONING_ROOM = 4096  # output tokens a reasoning model may think in before its summary
# A parameter whose value makes the model answer in a shape a summary cannot take.
_FORCED_TOOL = ("required", "any", "tool", "function")


@dataclass(frozen=True, slots=True)
class Prompt:
    """A session's last prompt as this process sent it, and where it stands in the
    transcript: its verbatim window is transcript[covers:length], after the summary
    checkpoint `summary` (its chain value; None: no summary was sent)."""

    sent: Sent
    model: str
    covers: int
    length: int
    head: str  # the chain value of transcript[length - 1]
    summary: str | None
    at: float  # when it was sent (the engine's clock)
    usage: Usage
    tokens: int  # the prompt as this process counted it (the budget's units)
    api_key: str | None
    weight: int


def held(usage: Usage, prices: Prices) -> int:
    """Tokens of a prompt the provider's cache holds after it was sent: up to its last
    breakpoint (read or written), or for an automatic cache, its prefix in steps."""
    if prices.cache == "breakpoints":
        return usage.cache_read + usage.cache_write
    if prices.cache == "automatic" and usage.prompt >= AUTOMATIC_MIN_TOKENS:
        beyond = usage.prompt - AUTOMATIC_MIN_TOKENS
        return AUTOMATIC_MIN_TOKENS + beyond // AUTOMATIC_STEP * AUTOMATIC_STEP
    return 0


def pays(prompt: Prompt, prices: Prices, apart: int, now: float) -> bool:
    """Whether continuing `prompt` costs less than folding apart, which reads `apart`
    tokens (the span, the summary before it) at the input price; the outputs are alike."""
    if now - prompt.at > prices.ttl_seconds or prices.cache == "none":
        return False
    cached = min(held(prompt.usage, prices), prompt.usage.prompt)
    rest = prompt.usage.prompt - cached + TASK_TOKENS
    continued = cached * prices.cache_read + rest * max(prices.input, prices.cache_write)
    return continued < (apart + _APART_FRAME) * prices.input


@dataclass(frozen=True, slots=True)
class Continuation:
    """A session's last prompt, ready to be asked for a summary as its next turn."""

    prompt: Prompt
    upstream: Upstream

    async def __call__(self, task: str, max_tokens: int) -> tuple[str, dict[str, Any] | None]:
        """The model's text and usage for the prompt with `task` appended as a user turn."""
        sent, key = self.prompt.sent, self.prompt.api_key
        params = {name: v for name, v in sent.request.items() if name not in _PER_CALL}
        if sent.api == "chat":
            messages = [*sent.request["messages"], {"role": "user", "content": task}]
            call = params | {"messages": messages, "max_tokens": max_tokens}
            completion = await self.upstream.complete(call, None, key, sent.models)
            choices = completion.data.get("choices") or [{}]
            text = (choices[0].get("message") or {}).get("content")
            return str(text or ""), completion.data.get("usage")
        assert sent.serialized is not None
        items, covered = sent.serialized
        turn: dict[str, Any] = {"role": "user", "content": task}
        added = appended(items, orjson.dumps(turn))
        call = params | {ITEMS[sent.api]: orjson.Fragment(added)}
        if sent.api == "anthropic_messages":
            thinking = sent.request.get("thinking") or {}
            room = thinking.get("budget_tokens", 0) if thinking.get("type") == "enabled" else 0
            call["max_tokens"] = max_tokens + room
        else:  # a reasoning model's reasoning counts against the cap too
            room = _REASONING_ROOM if "reasoning" in params else 0
            call["max_output_tokens"] = max_tokens + room
        reply = await self.upstream.native_complete(
            sent.api, call, key, sent.models, (added, covered)
        )
        return native_text(sent.api, reply), reply.get("usage")


def appended(items: bytes | memoryview, item: bytes) -> bytes:
    """A JSON array's bytes with one more item's at its end."""
    body = bytes(items).strip()
    return b"[" + item + b"]" if body == b"[]" else body[:-1] + b"," + item + b"]"


class Continuing:
    """The sessions' last prompts in this process, and the continuation a fold may ask."""

    def __init__(self, upstream: Upstream, kept_bytes: int = KEPT_SENT_BYTES) -> None:
        self._upstream = upstream
        self._kept_bytes = kept_bytes
        self._bytes = 0
        self._prompts: OrderedDict[SessionKey, Prompt] = OrderedDict()

    def kept(self, turn: Turn, usage: Usage | None, at: float) -> None:
        """Keep the prompt a stored turn sent, where its window is the transcript's
        messages from the summary (or the conversation's start) to its end, unforced."""
        key, state, sent = turn.key, turn.state, turn.sent
        if key is None or state is None or sent is None or usage is None:
            return
        self._drop(key)
        window = _window(turn)
        if window is None or _forced(sent.request) or not state.length:
            return
        covers, summary = window
        weight = len(sent.serialized[0]) if sent.serialized else 4 * usage.prompt
        request = turn.request
        prompt = Prompt(
            sent=sent,
            model=turn.model,
            covers=covers,
            length=state.length,
            head=state.head,
            summary=summary,
            at=at,
            usage=usage,
            tokens=turn.tokens_sent or usage.prompt,
            api_key=request.provider_key if request is not None else None,
            weight=weight,
        )
        self._prompts[key] = prompt
        self._bytes += weight
        while self._bytes > self._kept_bytes and self._prompts:
            _, dropped = self._prompts.popitem(last=False)
            self._bytes -= dropped.weight

    def continuation(
        self,
        key: SessionKey,
        span: Sequence[StoredMessage],
        after: Sequence[StoredMessage],
        *,
        end: int,
        previous: Checkpoint | None,
        model: str,
        prices: Prices | None,
        apart: int,
        now: float,
        budget: int,
    ) -> Continuation | None:
        """The continuation of the session's last prompt for folding `span`, where the
        prompt holds it, continued it stays within the `budget` (every request the proxy
        sends does), and continuing costs less than folding apart (`apart` tokens)."""
        prompt = self._prompts.get(key)
        if prompt is None or prices is None or prompt.model != model:
            return None
        # In the budget's own units (calibrated to the provider's count, as every request
        # is planned): the provider's count against it would refuse a prompt it undercounts.
        if prompt.tokens + TASK_TOKENS > budget:
            return None
        start = end - len(span)
        summary = previous.chain_hash if previous is not None and previous.text else None
        if previous is not None and summary is None:
            return None  # a chapter's checkpoint: nothing of it was sent
        if (start, summary) != (prompt.covers, prompt.summary) or not end <= prompt.length:
            return None
        # The transcript still holds the prompt's messages: its chain value at the
        # prompt's last message names all of them.
        chain = span[-1].chain if end == prompt.length else None
        if chain is None:
            index = prompt.length - 1 - end
            chain = after[index].chain if 0 <= index < len(after) else None
        if chain != prompt.head or not pays(prompt, prices, apart, now):
            return None
        return Continuation(prompt, self._upstream)

    def _drop(self, key: SessionKey) -> None:
        dropped = self._prompts.pop(key, None)
        if dropped is not None:
            self._bytes -= dropped.weight


def _window(turn: Turn) -> tuple[int, str | None] | None:
    """Where a turn's verbatim window starts and the summary before it (its chain value),
    where it sent every message from there to the transcript's end."""
    record, state = turn.record, turn.state
    if record is None or state is None:
        return None
    parts = {part["kind"]: part for part in record.get("parts") or ()}
    window = parts.get("window")
    if window is None or window.get("dropped"):
        return None
    start, end = window["range"]
    if end != state.length:
        return None
    checkpoint = state.checkpoint
    if "summary" in parts and checkpoint is not None:
        return (start, checkpoint.chain_hash) if start == checkpoint.covers_until else None
    return (start, None) if start == state.origin == 0 else None


def _forced(request: dict[str, Any]) -> bool:
    """Whether the request makes the model call a tool, or answer in a set format."""
    choice = request.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else choice
    if kind in _FORCED_TOOL:
        return True
    shape = request.get("response_format") or (request.get("text") or {}).get("format")
    return isinstance(shape, dict) and shape.get("type") not in (None, "text")
