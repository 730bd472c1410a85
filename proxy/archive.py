"""The part of a session its summary covers, kept searchable: the merged recall index and
the facts ledger, read from the checkpoints' own entries (never from the meta record
every request reads), cached per session in this process and extended fold by fold (a
new fold reads only the checkpoints after the cached ones)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from proxy.config import Settings
from proxy.context import Plan
from proxy.ledger import Fact, facts_in, merge, message_text, recent_text
from proxy.messages import GENESIS, Message
from proxy.recall import Hit, Recalled, RecallIndex, recall_message, segment
from proxy.sessions import Checkpoint, SessionMeta, SessionStore
from proxy.turns import Request, SessionKey, State

__all__ = ["Archive", "Archived", "Shown"]

_SESSIONS = 256  # archives cached per process
_HITS = 12  # ranked units considered for one recall block
_FLOOR = 0.5  # a unit less than half as relevant as the best hit costs more than it adds
_SMALLEST_BLOCK = 48  # tokens: less room than this is no room for recall


@dataclass(frozen=True, slots=True)
class Shown:
    """The recall block the session's last request carried, and before which transcript
    message it went."""

    before: int
    block: Recalled
    tokens: int


@dataclass(frozen=True, slots=True)
class Archived:
    """A session's archive as of its `count`-th checkpoint, whose chain value is `head`,
    and the recall block shown under it."""

    count: int = 0
    head: str = GENESIS
    index: RecallIndex = field(default_factory=RecallIndex)
    ledger: tuple[Fact, ...] = ()
    shown: Shown | None = None

    def extended(self, checkpoints: Sequence[Checkpoint]) -> Archived:
        if not checkpoints:
            return self
        segments = [c.index for c in checkpoints if c.index is not None]
        ledgers = [c.ledger for c in checkpoints if c.ledger is not None]
        return Archived(
            self.count + len(checkpoints),
            checkpoints[-1].chain_hash,
            self.index.extended(segments),
            ledgers[-1] if ledgers else self.ledger,
        )


class Archive:
    def __init__(self, settings: Settings, store: SessionStore) -> None:
        self._settings = settings
        self._store = store
        self._cache: OrderedDict[SessionKey, Archived] = OrderedDict()

    async def of(self, key: SessionKey, count: int, latest: Checkpoint | None) -> Archived:
        """The archive up to the `count`-th checkpoint, `latest` (which may be one this
        process just made and has not stored yet)."""
        if latest is None or count == 0:
            return Archived()
        cached = self._cache.get(key)
        if cached is not None and (cached.count, cached.head) == (count, latest.chain_hash):
            self._cache.move_to_end(key)
            return cached
        if latest.index is not None:  # made here: everything before it is stored
            archived = (await self._stored(key, count - 1, latest.index["follows"])).extended(
                [latest]
            )
        else:
            archived = await self._stored(key, count, latest.chain_hash)
        return self._remember(key, archived)

    async def _stored(self, key: SessionKey, count: int, head: str) -> Archived:
        """The archive of the first `count` stored checkpoints, read from where the
        cached one ends when it is a prefix of them, else from the start."""
        cached = self._cache.get(key)
        if count == 0:
            return Archived()
        if cached is not None and (cached.count, cached.head) == (count, head):
            return cached
        base = cached if cached is not None and cached.count < count else Archived()
        rows = (await self._store.checkpoints(*key, base.count))[: count - base.count]
        if base.count and (not rows or (rows[0].index or {}).get("follows") != base.head):
            base, rows = Archived(), (await self._store.checkpoints(*key))[:count]
        return base.extended(rows)

    def _remember(self, key: SessionKey, archived: Archived) -> Archived:
        self._cache[key] = archived
        self._cache.move_to_end(key)
        while len(self._cache) > _SESSIONS:
            self._cache.popitem(last=False)
        return archived

    async def recalled(self, request: Request, state: State, plan: Plan) -> Plan:
        """`plan` with a recall block: the summarized units most relevant to the latest
        turns, within `context.recall_ratio` of the budget and what the plan leaves of it.
        A new block goes before the newest unit, so everything before it (system,
        summary, the verbatim turns but the newest) keeps the last request's bytes; the
        last block stays where it was, bytes and all, while it shows the best hits."""
        context = self._settings.context
        checkpoint = state.checkpoint
        room = min(int(context.recall_ratio * request.budget), request.budget - plan.tokens)
        if request.key is None or checkpoint is None or room < _SMALLEST_BLOCK or not plan.messages:
            return plan
        archived = await self.of(request.key, state.checkpoints, checkpoint)
        query = recent_text(request.conversation)
        hits = archived.index.search(
            query,
            _HITS,
            context.recall_relevance_weight,
            context.recall_recency_weight,
            _FLOOR,
        )
        if not hits:
            return plan
        newest = _last_unit(plan.messages)
        offset = state.length - len(plan.messages)  # transcript index - position, verbatim
        first = state.length - checkpoint.covers_until - plan.dropped  # verbatim messages
        shown = archived.shown
        if (
            shown is not None
            and all(shown.block.covers(hit) for hit in hits[: len(shown.block.shown)])
            and shown.tokens <= room
            and len(plan.messages) - first <= shown.before - offset <= newest
        ):
            return _with_block(plan, shown.before - offset, shown.block.message, shown.tokens)
        found = [(hit, await self._unit(request.key, state, hit)) for hit in hits]
        ledger = _with_later_values(archived.ledger, found, plan.messages)
        block = recall_message(found, ledger, request.counter, room)
        if block is None:
            return plan
        tokens = request.counter.count_message(block.message)
        self._remember(request.key, replace(archived, shown=Shown(offset + newest, block, tokens)))
        return _with_block(plan, newest, block.message, tokens)

    async def search(
        self, key: SessionKey, meta: SessionMeta, query: str, limit: int
    ) -> list[tuple[Hit, list[Message]]]:
        """The units of the whole session that best match `query`: the summarized part
        through its index, the part after the summary (at most a window) indexed now."""
        checkpoint = meta.checkpoint
        archived = await self.of(key, meta.checkpoints, checkpoint)
        covers = checkpoint.covers_until if checkpoint else 0
        window = await self._store.messages(*key, covers, meta.length)
        unsummarized = segment(covers, [s.message for s in window], archived.head)
        context = self._settings.context
        hits = archived.index.extended([unsummarized]).search(
            query, limit, context.recall_relevance_weight, context.recall_recency_weight
        )
        units = {hit.start: await self._store.messages(*key, hit.start, hit.end) for hit in hits}
        return [(hit, [s.message for s in units[hit.start]]) for hit in hits]

    async def _unit(self, key: SessionKey, state: State, hit: Hit) -> list[Message]:
        """transcript[hit.start:hit.end] as this request leaves it."""
        stored = []
        if hit.start < state.keep:
            stored = [
                s.message
                for s in await self._store.messages(*key, hit.start, min(hit.end, state.keep))
            ]
        fresh = state.new[max(0, hit.start - state.keep) : max(0, hit.end - state.keep)]
        return [*stored, *(s.message for s in fresh)]


def _with_later_values(
    ledger: tuple[Fact, ...], found: list[tuple[Hit, list[Message]]], window: list[Message]
) -> list[Fact]:
    """The ledger (which holds the recalled units' facts: it covers all that is
    summarized) with the values the window gives later to their subjects: only window
    messages that name such a subject (a C-speed substring test) are read for facts."""
    recalled = [
        fact
        for _, messages in found
        for message in messages
        for fact in facts_in(message_text(message), 0, 0.0)
        if fact.subject
    ]
    subjects = {fact.subject for fact in recalled}
    if not subjects:
        return []
    texts = [message_text(m) for m in window if m.get("role") != "system"]
    later = [
        fact
        for index, text in enumerate(texts)
        if any(subject in text.casefold() for subject in subjects)
        for fact in facts_in(text, index, 1.0)
        if fact.subject in subjects
    ]
    # Only the recalled subjects' facts: a few, so merging never meets the ledger's cap
    # (which would drop the value just replaced, and with it the note).
    named = [fact for fact in ledger if fact.subject in subjects]
    return merge(named, later) if later else named


def _with_block(plan: Plan, at: int, block: Message, tokens: int) -> Plan:
    messages = [*plan.messages[:at], block, *plan.messages[at:]]
    return replace(plan, messages=messages, tokens=plan.tokens + tokens)


def _last_unit(messages: list[Message]) -> int:
    """Where the last unit (a message and the tool results after it) begins."""
    at = len(messages) - 1
    while at > 0 and messages[at].get("role") == "tool":
        at -= 1
    return at
