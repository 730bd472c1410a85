"""One request's data as it passes through the engine, all frozen, so each step builds the
next from the last."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from proxy.conversation.identity import Message
from proxy.conversation.needles import Needles
from proxy.conversation.tokens import BOUND, TokenCounter
from proxy.costs.prices import Prices
from proxy.costs.receipts import TurnCost
from proxy.engine.planner.caching import marked
from proxy.engine.planner.reconcile import Match, Serialized
from proxy.engine.planner.window import Compression, Plan
from proxy.sessions.records import (
    Checkpoint,
    Inserts,
    Mode,
    SessionKey,
    SessionMeta,
    StoredMessage,
)

if TYPE_CHECKING:
    from proxy.sessions.locks import Lease

__all__ = [
    "Compression",
    "Observer",
    "Request",
    "RequestContext",
    "Sent",
    "SessionView",
    "Turn",
    "planned_turn",
]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the HTTP layer tells the engine about a request, beyond its body."""

    tenant: str = "anonymous"  # whose sessions the request sees (`proxy.http.auth`)
    session_id: str | None = None
    mode: Mode = "auto"
    budget_ratio: float | None = None  # overrides context.budget_ratio, for this request only
    provider_key: str | None = None  # passthrough: the caller's own provider key
    models: frozenset[str] | None = None  # all the caller's key may use (None: every one)
    secrets: tuple[str, ...] = ()  # what the caller presented: never logged
    body: bytes = b""  # the raw request body: its size bounds its tokens
    # The transcript length the request continues from (a Responses API
    # `previous_response_id`): the session must be exactly that long.
    continues: int | None = None
    memory_id: str | None = None  # the memory shared across sessions (`memory.enabled`)
    # The body's messages as orjson writes them, where the client wrote them so (a view of
    # `body`): the engine need not write them again.
    messages_json: memoryview | None = None
    # The keys `body` names (cache marks, images, item references), where they were
    # counted from where a resent body is new.
    needles: Needles | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """A request's facts, worked out once."""

    model: str
    counter: TokenCounter
    budget: int
    input_limit: int
    messages: list[Message]  # as sent: system, then conversation
    system: list[Message]
    conversation: list[Message]
    system_tokens: int  # reply priming included
    tools_tokens: int
    mode: Mode
    key: SessionKey | None
    size: int | None  # bytes of the request body, when known
    # A budget of this request's own (`X-Context-Budget-Ratio`): it makes no summary,
    # which later requests, on the configured budget, would have to use.
    own_budget: bool = False
    provider_key: str | None = None
    secrets: tuple[str, ...] = ()
    continues: int | None = None  # see `RequestContext.continues`
    memory_id: str | None = None
    frame: str = ""  # `proxy.engine.planner.reconcile.frame_of` its system messages and tools
    messages_json: memoryview | None = None  # `RequestContext.messages_json`
    reply_limit: int = 1 << 20  # bytes of the reply the session keeps (`session.max_reply_bytes`)
    prices: Prices | None = None  # the model's (`proxy.upstream.limits.model_prices`)
    # For the provider's prompt cache (`proxy.engine.planner.caching`): the cache marks the client
    # set, where the turn sets Anthropic's (None: it sets none), and the session's
    # `prompt_cache_key`, where it sets one.
    cache_marks: int | None = None
    cache_key: str | None = None
    # Tokens of history (by `BOUND`) a session's turn may send whole without counting
    # it: what the fold trigger leaves beside the system messages' and tools' bound,
    # which is `system_and_tools_bound`.
    sendable_uncounted: int = 0
    system_and_tools_bound: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionView:
    """The session as this request leaves it, before the reply: the stored transcript's
    first `match.kept` messages plus `new`."""

    base: SessionMeta | None
    match: Match
    new: tuple[StoredMessage, ...]
    totals: dict[str, int]  # of the transcript with `new`
    checkpoint: Checkpoint | None  # the summary in effect
    checkpoints: int
    expected_version: int  # to compare-and-set against
    serialized: Serialized | None
    pending: Checkpoint | None = None  # made from `new`: stored with the turn
    inserts: Inserts | None = None  # what the session's latest turn sent beside its window

    @property
    def counted(self) -> bool:
        """False while the session is known only by its bound (`BOUND`): far from its
        budget, its history is sent whole and not tokenized."""
        return BOUND.name not in self.totals

    @property
    def kept(self) -> int:
        """Stored messages the transcript keeps (`Match.kept`)."""
        return self.match.kept

    @property
    def head(self) -> str:
        """The chain value of the transcript's last message, which names what follows it."""
        return self.new[-1].chain if self.new else self.match.head

    @property
    def length(self) -> int:
        return self.match.kept + len(self.new)

    @property
    def origin(self) -> int:
        """Where the client's conversation starts in the transcript (after its earlier
        chapters: `SessionMeta.origin`)."""
        if self.match.whole:
            return self.match.origin
        return self.base.origin if self.base is not None else 0

    def before_origin(self, name: str) -> int:
        """Tokens (by tokenizer `name`) of the chapters before the client's conversation:
        not the client's to send, so never counted as saved."""
        base, origin = self.base, self.origin
        if base is None or origin == 0:
            return 0
        if self.match.kind == "chapter":
            return base.totals.get(name, 0)
        return base.origin_totals.get(name, 0)


@dataclass(frozen=True, slots=True)
class Sent:
    """A turn's prompt as it went upstream, in the API it went in (`request`; a native
    one's window is `serialized`): what a fold may continue (`proxy.engine.folds.continuing`)."""

    api: Literal["chat", "anthropic_messages", "responses"]
    request: dict[str, Any]
    serialized: tuple[bytes, bool] | None = None
    models: frozenset[str] | None = None  # all the caller's key may use


@dataclass(frozen=True, slots=True)
class Turn:
    """One request, ready to go upstream, and what `commit` needs afterwards."""

    body: dict[str, Any]
    model: str
    managed: bool = False  # context management on
    key: SessionKey | None = None
    tokens_original: int | None = None
    tokens_sent: int | None = None
    compression: Compression = "none"
    summary_created: float | None = None
    input_limit: int = 0
    request: Request | None = None
    state: SessionView | None = None
    messages_json: bytes | None = None  # body["messages"], already serialized
    lease: Lease | None = None  # the session's turn lock, held until the turn is over
    side_request: bool = False  # named a session but is not a turn of it: answered, not stored
    prices: Prices | None = None  # the model's, to price the turn and its counterfactual
    summaries: float = 0.0  # USD of the summarizer's calls made for this turn, while it waited
    record: dict[str, Any] | None = (
        None  # the plan record stored with the turn (`proxy.engine.records`)
    )
    # The reply made here, with no model call: an agent's request for a summary answered
    # from the session's own (`proxy.engine.planner.agent_compaction.answer`).
    answer: dict[str, Any] | None = None
    # The session's inserts as this turn leaves them (`with_memory_and_recall`):
    # stored with it where they changed.
    inserts: Inserts | None = None
    # The stored transcript the reply will follow (None: the turn has no session view):
    # its length and the chain value of its last message, which name the reply to come.
    transcript_length: int | None = None
    transcript_head: str | None = None
    sent: Sent | None = None  # the prompt as it went upstream, once it went


def planned_turn(
    body: dict[str, Any],
    request: Request,
    state: SessionView,
    plan: Plan,
    lease: Lease | None = None,
) -> Turn:
    """The turn a plan makes of a request: pure, so a preview shows exactly what a turn
    sends, and an unchanged conversation goes in its serialized form."""
    checkpoint = state.checkpoint
    summarized = checkpoint is not None and plan.compression == "summary"
    history = state.totals[request.counter.name] - state.before_origin(request.counter.name)
    messages = plan.messages
    if request.cache_marks is not None:
        messages = marked(messages, request.cache_marks)
    unchanged = (
        request.cache_marks is None
        and plan.compression == "none"
        and state.match.whole
        and state.serialized is not None
        and len(plan.messages) == len(request.system) + len(request.conversation)
    )
    cached = {"prompt_cache_key": request.cache_key} if request.cache_key else {}
    counted = state.counted
    return Turn(
        body | {"messages": messages} | cached,
        request.model,
        managed=True,
        key=request.key,
        tokens_original=request.system_tokens + request.tools_tokens + history if counted else None,
        tokens_sent=plan.tokens if counted else None,
        compression=plan.compression,
        summary_created=checkpoint.created if summarized and checkpoint else None,
        input_limit=request.input_limit,
        request=request,
        state=state,
        messages_json=state.serialized.whole if unchanged and state.serialized else None,
        lease=lease,
        prices=request.prices,
        transcript_length=state.length,
        transcript_head=state.head,
    )


class Observer(Protocol):
    """Who watches a turn go by (the request's telemetry): the moments, the usage and
    the turn's money once it is stored."""

    def planned(self, turn: Turn) -> None: ...

    def upstream_started(self) -> None: ...

    def upstream_finished(self) -> None: ...

    def first_token(self) -> None: ...

    def used(self, usage: dict[str, Any] | None) -> None: ...

    def priced(self, cost: TurnCost | None) -> None: ...
