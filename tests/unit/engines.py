"""The engine in this process, for unit tests of its parts: the real `Engine` (History,
Planning, Archive, Memories, Summaries, TurnLocks) on a real `DiskSessionStore` in a
temp dir, in front of the real `Upstream` (its Router, model limits and tokenizers)
whose network call alone is replaced by a script: nothing is served, nothing listens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.config.settings import Settings
from proxy.costs.receipts import TurnCost
from proxy.engine.turn import Engine
from proxy.engine.types import RequestContext, Turn
from proxy.sessions.records import Mode
from proxy.sessions.stores import DiskSessionStore
from proxy.upstream.client import Upstream
from proxy.upstream.lean import Completion
from tests.clock import Clock
from tests.summarizing import asks_summary

MODEL = "gpt-4o-mini"
SUMMARY = "The user shared notes."

Message = dict[str, Any]


def settings(window: int | None = None, **sections: Any) -> Settings:
    """MODEL (OpenAI's, on an address nothing listens at), its input limited to `window`
    tokens when given; each keyword a config section."""
    entry: dict[str, Any] = {
        "model_name": MODEL,
        "litellm_params": {
            "model": f"openai/{MODEL}",
            "api_base": "http://127.0.0.1:9/v1",
            "api_key": "sk-unit",
        },
    }
    if window is not None:
        entry["model_info"] = {"max_input_tokens": window}
    return Settings.model_validate({"model_list": [entry], **sections})


def completion(text: str, usage: dict[str, Any] | None = None) -> Completion:
    message = {"role": "assistant", "content": text}
    data = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    return Completion(data | ({"usage": usage} if usage is not None else {}))


def is_summarizer(messages: list[Message]) -> bool:
    """The proxy's summarizer call, apart or continuing the session's last prompt."""
    return asks_summary({"messages": messages})


class ScriptedUpstream(Upstream):
    """The real Upstream with its call scripted: a turn is answered `reply(body)` (by
    default "echo: " and the last user message) and recorded in `sent`; the summarizer
    answers SUMMARY, or fails while `summarizer_down`, and is recorded in `summaries`.
    Each answer reports `usage(params)` as its usage (None by default: none)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.sent: list[dict[str, Any]] = []
        self.summaries: list[list[Message]] = []
        self.summarizer_down = False
        self.reply: Callable[[dict[str, Any]], str] = _echo
        self.usage: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda params: None

    async def complete(
        self,
        params: dict[str, Any],
        messages_json: bytes | None = None,
        api_key: str | None = None,
        models: frozenset[str] | None = None,
    ) -> Completion:
        if is_summarizer(params["messages"]):
            self.summaries.append(params["messages"])
            if self.summarizer_down:
                raise self.error(RuntimeError("the summarizer is down"))
            return completion(SUMMARY, self.usage(params))
        self.sent.append(params)
        return completion(self.reply(params), self.usage(params))


def _echo(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return f"echo: {users[-1]['content']}" if users else "echo"


class Observed:
    """A turn's observer (the HTTP layer's telemetry) that keeps nothing."""

    def planned(self, turn: Turn) -> None: ...

    def upstream_started(self) -> None: ...

    def upstream_finished(self) -> None: ...

    def first_token(self) -> None: ...

    def used(self, usage: dict[str, Any] | None) -> None: ...

    def priced(self, cost: TurnCost | None) -> None: ...


@dataclass
class Parts:
    """An engine and what it stands on, with the clocks it was given."""

    engine: Engine
    upstream: ScriptedUpstream
    store: DiskSessionStore
    clock: Clock = field(default_factory=Clock)
    wall_clock: Clock = field(default_factory=lambda: Clock(1_700_000_000.0))

    async def turn(
        self,
        messages: list[Message],
        session: str | None = "s",
        *,
        tenant: str = "t1",
        mode: Mode = "auto",
        memory_id: str | None = None,
        **body: Any,
    ) -> Turn:
        """One turn answered whole (Chat Completions' body, with `body`'s other fields),
        as a door would send it."""
        context = RequestContext(
            tenant=tenant,
            session_id=session,
            mode=mode,
            memory_id=memory_id,
        )
        turn, _ = await self.engine.complete(
            {"model": MODEL, "messages": messages, **body}, context, Observed()
        )
        if session is not None:  # a summary it started in the background is made
            await self.engine.summaries.wait((tenant, session))
        return turn

    async def preview(self, messages: list[Message], session: str = "s") -> dict[str, Any]:
        context = RequestContext(tenant="t1", session_id=session)
        return await self.engine.preview({"model": MODEL, "messages": messages}, context)

    async def stored(self, session: str = "s", tenant: str = "t1") -> list[Message]:
        """The session's transcript as stored."""
        meta = await self.store.load(tenant, session)
        if meta is None:
            return []
        return [s.message for s in await self.store.messages(tenant, session, 0, meta.length)]

    async def close(self) -> None:
        await self.engine.close()
        await self.upstream.close()
        await self.store.close()


def build(directory: str, config: Settings) -> Parts:
    upstream = ScriptedUpstream(config)
    store = DiskSessionStore(directory)
    clock, wall_clock = Clock(), Clock(1_700_000_000.0)
    engine = Engine(
        settings=config, upstream=upstream, store=store, clock=wall_clock, monotonic=clock
    )
    return Parts(engine, upstream, store, clock, wall_clock)


def conversation(turns: int, words: int = 60, tag: str = "t") -> list[Message]:
    """`turns` exchanges of long user messages ("{tag}{turn}w{i} …") and their echoes."""
    messages: list[Message] = []
    for number in range(turns):
        said = " ".join(f"{tag}{number}w{i}" for i in range(words))
        messages += [
            {"role": "user", "content": said},
            {"role": "assistant", "content": f"echo: {said}"},
        ]
    return messages
