"""The part of a session its summary covers, kept searchable: its recall index and facts ledger,
read from the checkpoints (never the meta every request reads) and cached per session."""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from proxy.concurrency import off_loop
from proxy.config.settings import ContextSettings, Settings
from proxy.conversation.identity import GENESIS, Message
from proxy.conversation.tokens import TokenCounter
from proxy.engine.planner.stubs import briefed, last_user
from proxy.engine.planner.window import Plan
from proxy.engine.types import Request, SessionView
from proxy.engine.yielding import Asked, Window, yielded_plan
from proxy.facts.ledger import (
    Fact,
    facts_in,
    merge,
    names,
    recent_text,
    related,
    stated_text,
    where_said,
)
from proxy.recall.index import (
    ASKING,
    Hit,
    Recalled,
    RecallIndex,
    asked_terms,
    asking,
    least_tokens,
    recall_message,
    segment,
)
from proxy.sessions.records import Checkpoint, Inserts, SessionKey, SessionMeta
from proxy.sessions.store import MessageLog

__all__ = ["Archive", "Archived", "last_unit"]

_Kept = TypeVar("_Kept")

_SESSIONS = 256  # archives cached per process
# And what their indexes hold, at most, in each of the two caches: a session of 90,000
# units holds 60 MB (its meanings 45), and the fuzz's left 60 MB behind after 4,000 bodies.
_KEPT_BYTES = 32 << 20
_HITS = 12  # units found precisely, first in a recall block
_FILL = 256  # units ranked by BM25 and meaning after them, read while the room lasts
_STATED = 3  # units where a fact the newest message names was stated, first
_MANY_UNITS = 2000  # an index searched in a worker thread past this many units
_FLOOR = 0.5  # a unit less than half as relevant as the best hit costs more than it adds
_SMALLEST_BLOCK = 48  # tokens: less room than this is no room for recall
_STATED_CHARS = 2000  # a unit's text whose facts are kept (2,048 of them: 4 MB at most)
# A new block takes at most this share of the room where the request offers tools: the
# window grows a tool call at a time into the rest before the block must be chosen again
# (and the prompt cache rewritten from where it stood). Without tools the next request
# is the user's next message, which asks anew: the block takes the whole room.
_FILLED = 0.75


@dataclass(frozen=True, slots=True)
class Archived:
    """A session's archive as of its `count`-th checkpoint, whose chain value is `head`: a
    cache of the store's checkpoints, which changes no plan."""

    count: int = 0
    head: str = GENESIS
    index: RecallIndex = field(default_factory=RecallIndex)
    ledger: tuple[Fact, ...] = ()
    # The current facts' key words and where each was stated, most specific first.
    stated: tuple[tuple[frozenset[str], int], ...] = ()
    # The tool results the latest checkpoint stubbed (`Checkpoint.stubbed`), indexed:
    # a user's question about one brings it back whole.
    stubs: RecallIndex = field(default_factory=RecallIndex)

    def extended(self, checkpoints: Sequence[Checkpoint]) -> Archived:
        if not checkpoints:
            return self
        segments = [c.index for c in checkpoints if c.index is not None]
        ledgers = [c.ledger for c in checkpoints if c.ledger is not None]
        ledger = ledgers[-1] if ledgers else self.ledger
        # A subject's words of asking are not what names it ("go live date" is asked for
        # as "when do we go live?"), and a subject of only such words is named by none.
        keys = [(words - ASKING, source) for words, source in where_said(ledger)]
        keys = [(words, source) for words, source in keys if words]
        stubs = checkpoints[-1].stubs_index
        return Archived(
            self.count + len(checkpoints),
            checkpoints[-1].chain_hash,
            self.index.extended(segments),
            ledger,
            stated=tuple(sorted(keys, key=lambda pair: -len(pair[0]))),
            stubs=RecallIndex().extended([stubs]) if stubs is not None else RecallIndex(),
        )

    def found(
        self, asked: str, earlier: str, stubbed: set[int], context: ContextSettings
    ) -> tuple[list[Hit], set[int]]:
        """The units a recall block offers for the newest message `asked`, best first, and
        the stubbed outputs it asks about, which come back whole."""
        weights = (context.recall_relevance_weight, context.recall_recency_weight)
        asked_about: list[Hit] = []
        if context.cache_aware:
            # A stubbed output comes back when the user's newest message asks about it
            # (not when the turns before mention it: it was stubbed after them).
            searched = self.stubs.search(asked, _HITS, *weights, _FLOOR)
            asked_about = [hit for hit in searched if hit.start in stubbed]
        whole = {hit.start for hit in asked_about}
        if not asking(asked):
            # A message that asks nothing needs what it names of the facts stated before
            # and the outputs it asks about, not units that merely share its words: those
            # would be written to the provider's cache anew each turn, for no question.
            return self.named(asked, asked_about), whole
        hits = self.index.search(asked, _HITS, *weights, _FLOOR, earlier=earlier)
        hits = [*asked_about, *(hit for hit in hits if hit.start not in whole)][:_HITS]
        hits = self.named(asked, hits)
        if self.looks_up(asked):
            # It asks for one known fact and nothing else: where it was stated answers it.
            # Units that merely share its words would be paid for, uncached, at each such
            # question, for nothing.
            return hits, whole
        return self.index.filled(hits, asked, len(hits) + _FILL), whole

    def looks_up(self, query: str) -> bool:
        """Whether `query` asks for one fact the ledger knows where it was stated, in just
        its subject's words (two or more: "the search service port", not "the port"). A
        looser test, a fact's subject among the words asked, cost LoCoMo 30 points of its
        figure: its questions name people and things its ledger holds facts of."""
        asked = frozenset(asked_terms(query))
        return len(asked) > 1 and any(
            words == asked and self.index.unit_of(source) is not None
            for words, source in self.stated
        )

    def named(self, query: str, hits: list[Hit]) -> list[Hit]:
        """`hits` after the units where the facts `query` names were stated, which plain
        ranking can place below a question that named them too."""
        wanted = set(asked_terms(query))
        first: dict[int, Hit] = {}
        for words, source in self.stated:
            if len(first) == _STATED:
                break
            unit = self.index.unit_of(source) if words <= wanted else None
            if unit is not None and unit[0] not in first:
                first[unit[0]] = Hit(unit[0], unit[1], 1.0, tuple(sorted(words)))
        return [*first.values(), *(h for h in hits if h.start not in first)][:_HITS]


class Archive:
    def __init__(self, settings: Settings, store: MessageLog) -> None:
        self._settings = settings
        self._store = store
        self._cache: OrderedDict[SessionKey, Archived] = OrderedDict()
        # A whole session's index (summarized and not), by the session's head.
        self._whole: OrderedDict[SessionKey, tuple[str, RecallIndex]] = OrderedDict()

    async def as_of(self, key: SessionKey, count: int, latest: Checkpoint | None) -> Archived:
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

    async def ledger(
        self, key: SessionKey, count: int, latest: Checkpoint | None
    ) -> tuple[Fact, ...]:
        """The facts ledger as of the `count`-th checkpoint, which a fold merges its span's
        facts into."""
        return (await self.as_of(key, count, latest)).ledger

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
        _bounded(self._cache, lambda kept: kept.index.size + kept.stubs.size)
        return archived

    async def recalled(
        self, request: Request, state: SessionView, plan: Plan, inserts: Inserts
    ) -> tuple[Plan, Inserts]:
        """`plan` with a block of the summarized units that best match the user's latest
        message, just before it and kept there, byte for byte, while it serves."""
        context = self._settings.context
        checkpoint = state.checkpoint
        room = min(
            int(context.recall_ratio * request.budget),
            context.recall_max_tokens,
            request.budget - plan.tokens,
        )
        if request.key is None or checkpoint is None or room < _SMALLEST_BLOCK or not plan.messages:
            return plan, inserts
        archived = await self.as_of(request.key, state.checkpoints, checkpoint)
        asking = last_user(plan.messages)  # where the user's latest message is
        if plan.messages[asking].get("role") != "user":
            return plan, inserts
        offset = state.length - len(plan.messages)  # transcript index - position, verbatim
        first = state.length - checkpoint.covers_until - plan.dropped  # verbatim messages
        shown = _shown(inserts, archived)
        before = inserts.recall_before
        placed = shown is not None and len(plan.messages) - first <= before - offset <= asking
        looping = before - offset == asking < last_unit(plan.messages)
        if placed and shown is not None and looping and inserts.recall_tokens <= room:
            # The tool loop of the turn the block was chosen for: it stays as it was.
            return plan.with_message(
                asking, shown.message, inserts.recall_tokens, "recall", shown.shown
            ), inserts
        back = len(plan.messages) - asking  # the user's message, counted from the end
        conversation = request.conversation[: len(request.conversation) - back + 1]
        asked = recent_text(conversation, messages=1)
        # The words said before it, not a tool's output: numbers and names by the
        # hundred that would outrank what the message asks.
        earlier = recent_text([m for m in conversation[-3:-1] if m.get("role") != "tool"])
        stubbed = set(checkpoint.stubbed) if context.cache_aware else set()
        search = functools.partial(archived.found, asked, earlier, stubbed, context)
        # Work follows the postings of the message's terms: a session of tens of
        # thousands of units took 0.6-2 s, so a large one is searched in a worker thread.
        large = len(archived.index.units) + len(archived.stubs.units) > _MANY_UNITS
        hits, whole = await asyncio.to_thread(search) if large else search()
        if not hits:
            return plan, inserts
        if (
            placed
            and shown is not None
            and all(shown.covers(hit) for hit in hits[: len(shown.shown)])
            # and this message finds no more than it shows (a block chosen for a message
            # that asked nothing holds only the facts it named: a question gets its own)
            and len(hits) <= len(shown.shown)
            # and shows nothing this message does not ask about
            and shown.shown.keys() <= {hit.start for hit in hits}
            and inserts.recall_tokens <= room
        ):
            at = before - offset
            return plan.with_message(
                at, shown.message, inserts.recall_tokens, "recall", shown.shown
            ), inserts
        room = int(_FILLED * room) if request.tools_tokens else room
        found = await self._units(request.key, state, hits, room)
        block_of = functools.partial(self._block, archived, plan, whole, request.counter)
        block = await block_of(found, room)
        if block is None:
            return plan, inserts
        if placed and shown is not None and block.message == shown.message:
            at = before - offset
            return plan.with_message(
                at, shown.message, inserts.recall_tokens, "recall", shown.shown
            ), inserts
        # Only a request that offers no tools yields its window's older part: an agent's tool
        # loop keeps its window and block byte for byte.
        if not request.tools_tokens and not plan.dropped and plan.compression == "summary":
            read = dict((hit.start, unit) for hit, unit in found)
            key = request.key

            async def unit(hit: Hit) -> list[Message]:
                return read.get(hit.start) or await self._unit(key, state, hit)

            cap = min(int(context.recall_ratio * request.budget), context.recall_max_tokens)
            window = Window(
                plan,
                len(plan.messages) - first,
                offset,
                request.budget,
                len(request.system),
                request.system_tokens + request.tools_tokens,
                room,
                cap,
            )
            asked_for = Asked(asked, hits, block, archived.head)
            yielded = await yielded_plan(window, asked_for, request.counter, unit, block_of)
            if yielded is not None:  # a block chosen with the window it yielded: not kept
                return yielded, replace(inserts, recall=None, recall_tokens=0, recall_shown={})
        tokens = request.counter.count_message(block.message)
        chosen = replace(
            inserts,
            recall=block.message,
            recall_before=offset + asking,
            recall_tokens=tokens,
            recall_shown={
                start: tuple(sorted(terms)) if terms is not None else None
                for start, terms in block.shown.items()
            },
            recall_archive=(archived.count, archived.head),
        )
        # Just before the user's latest message: everything before it keeps the last request's
        # bytes.
        return plan.with_message(asking, block.message, tokens, "recall", block.shown), chosen

    async def _block(
        self,
        archived: Archived,
        plan: Plan,
        whole: set[int],
        counter: TokenCounter,
        found: list[tuple[Hit, list[Message]]],
        room: int,
    ) -> Recalled | None:
        """The block of `found` in `room` tokens, tool outputs as stubs (but those asked
        about, `whole`), and each value the ledger knows was replaced since noted."""
        context = self._settings.context
        if context.cache_aware and context.stub_tool_results_over:
            over = context.stub_tool_results_over
            found = [
                (hit, unit if hit.start in whole else briefed(unit, hit.terms, over))
                for hit, unit in found
            ]
        ledger = await off_loop(
            plan.messages, lambda: _with_later_values(archived.ledger, found, plan.messages)
        )
        return recall_message(found, ledger, counter, room)

    async def hits(self, key: SessionKey, meta: SessionMeta, query: str, limit: int) -> list[Hit]:
        """The units of the whole session that best match `query`, its unsummarized part
        indexed once and kept while the session is unchanged (memory recall asks often)."""
        checkpoint = meta.checkpoint
        archived = await self.as_of(key, meta.checkpoints, checkpoint)
        known = self._whole.get(key)
        if known is None or known[0] != meta.head:
            covers = checkpoint.covers_until if checkpoint else 0
            window = await self._store.messages(*key, covers, meta.length)
            messages = [s.message for s in window]
            unsummarized = await off_loop(
                messages, lambda: segment(covers, messages, archived.head)
            )
            known = (meta.head, archived.index.extended([unsummarized]))
            self._whole[key] = known
            self._whole.move_to_end(key)
            _bounded(self._whole, lambda kept: kept[1].size)
        self._whole.move_to_end(key)
        context = self._settings.context
        index = known[1]
        weights = (context.recall_relevance_weight, context.recall_recency_weight)

        def found() -> list[Hit]:
            hits = index.search(query, limit, *weights)
            return index.filled(archived.named(query, hits)[:limit], query, limit)

        return await asyncio.to_thread(found) if len(index.units) > _MANY_UNITS else found()

    async def search(
        self, key: SessionKey, meta: SessionMeta, query: str, limit: int
    ) -> list[tuple[Hit, list[Message]]]:
        """`hits`, each with its messages."""
        hits = await self.hits(key, meta, query, limit)
        units = {hit.start: await self._store.messages(*key, hit.start, hit.end) for hit in hits}
        return [(hit, [s.message for s in units[hit.start]]) for hit in hits]

    async def _units(
        self, key: SessionKey, state: SessionView, hits: list[Hit], room: int
    ) -> list[tuple[Hit, list[Message]]]:
        """`hits` with their messages, best first, read until they would surely fill
        `room` tokens (the block takes what fits of them)."""
        found: list[tuple[Hit, list[Message]]] = []
        least = 0.0  # the tokens they take at the least
        for hit in hits:
            unit = await self._unit(key, state, hit)
            found.append((hit, unit))
            least += least_tokens(unit)
            if least > room:
                break
        return found

    async def _unit(self, key: SessionKey, state: SessionView, hit: Hit) -> list[Message]:
        """transcript[hit.start:hit.end] as this request leaves it."""
        stored = []
        if hit.start < state.kept:
            stored = [
                s.message
                for s in await self._store.messages(*key, hit.start, min(hit.end, state.kept))
            ]
        fresh = state.new[max(0, hit.start - state.kept) : max(0, hit.end - state.kept)]
        return [*stored, *(s.message for s in fresh)]


def _shown(inserts: Inserts, archived: Archived) -> Recalled | None:
    """The recall block the session's latest turn sent, while the archive it was chosen
    from is the session's still (a fold since chooses again)."""
    if inserts.recall is None or inserts.recall_archive != (archived.count, archived.head):
        return None
    shown = {
        start: frozenset(terms) if terms is not None else None
        for start, terms in inserts.recall_shown.items()
    }
    return Recalled(inserts.recall, shown)


def _with_later_values(
    ledger: tuple[Fact, ...], found: list[tuple[Hit, list[Message]]], window: list[Message]
) -> list[Fact]:
    """The recalled subjects' facts from the ledger, with the values the window gives them
    later (only window messages that name such a subject are read for facts)."""
    recalled = {
        fact.key: fact
        for _, messages in found
        for message in messages
        for fact in _stated(stated_text(message))
    }
    if not recalled:
        return []
    texts = [stated_text(m) for m in window if m.get("role") != "system"]
    later = [
        fact
        for index, text in enumerate(texts)
        # A later value may name the subject by an alias: one word fewer or more.
        if any(names(subject, text.casefold(), spare=1) for subject in recalled.values())
        for fact in facts_in(text, index, 1.0)
        if any(related(fact.key, key) for key in recalled)
    ]
    # Only the recalled subjects' facts: a few, so merging never meets the ledger's cap
    # (which would drop the value just replaced, and with it the note).
    named = [fact for fact in ledger if fact.key in recalled]
    return merge(named, later) if later else named


def _stated(text: str) -> tuple[Fact, ...]:
    """`facts_in` a recalled unit's text, a short text's kept: the same units come back turn
    after turn, and reading one for facts costs more than the rest of its recall."""
    if len(text) > _STATED_CHARS:
        return tuple(facts_in(text, 0, 0.0))
    return _stated_short(text)


@functools.lru_cache(maxsize=2048)
def _stated_short(text: str) -> tuple[Fact, ...]:
    return tuple(facts_in(text, 0, 0.0))


def last_unit(messages: list[Message]) -> int:
    """Where the last unit (a message and the tool results after it) begins."""
    at = len(messages) - 1
    while at > 0 and messages[at].get("role") == "tool":
        at -= 1
    return at


def _bounded(cache: OrderedDict[SessionKey, _Kept], size: Callable[[_Kept], int]) -> None:
    """`cache` within `_SESSIONS` entries and `_KEPT_BYTES`, the least recently used
    dropped first; the newest is kept whatever it holds."""
    held = sum(map(size, cache.values()))
    while (len(cache) > _SESSIONS or held > _KEPT_BYTES) and len(cache) > 1:
        held -= size(cache.popitem(last=False)[1])
