"""A session's history as a request leaves it: loaded, reconciled, counted.

The stored transcript is read only where something needs it (an edit of history, a
tokenizer new to the session, a window), never in full per request: a full-resend
client's prefix is recognised by its fingerprint, and only the messages after it are
validated, hashed and counted. Large new portions (a long conversation's first request)
are worked on in a thread, so the event loop stays free for other requests.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from proxy.conversation.identity import Message, chain
from proxy.conversation.tokens import BOUND, CountCache, TokenCounter, counter_named
from proxy.conversation.validation import invalid, validate_messages
from proxy.engine.caching import unmarked
from proxy.engine.reconcile import NEED_STORED_HASHES, Match, Serialized, reconcile
from proxy.engine.stubs import Stubber, last_user, savings, stub
from proxy.engine.types import Request, State
from proxy.sessions.records import (
    MANY_MESSAGES,
    Checkpoint,
    Inserts,
    SessionKey,
    SessionMeta,
    StoredMessage,
)
from proxy.sessions.store import SessionStore

__all__ = ["History", "counter_for_name", "off_loop", "pause"]

# Python work on texts longer than this (characters) runs in a worker thread, as on
# more than MANY_MESSAGES messages.
_OFF_LOOP_CHARS = 50_000
_RESULTS_BACK = 64  # parallel tool calls a turn may answer across, at most
_PAUSE_BYTES = 256 * 1024  # bodies above this yield to other requests between passes
_INSERTS_KEPT = 1024  # sessions whose inserts a process keeps
_WINDOW_MESSAGES = 20_000  # stored messages of recent windows a process keeps, in all
# A conversation longer than this (bytes) that opens a session far from its budget is
# not tokenized (`History._bounded`); a shorter one is counted at once (under a ms).
_COUNT_NOW_BYTES = 32 * 1024


class History:
    def __init__(self, store: SessionStore, counts: CountCache, make: Stubber = stub) -> None:
        self._store = store
        self._counts = counts
        self._make = make  # a stub as the session's requests send it (`proxy.engine.stubs`)
        # Sessions' inserts as last read, by the digest their meta names them by: a cache
        # of what the store holds, which the digest says is current (it changes no plan).
        self._inserts: OrderedDict[SessionKey, tuple[str, Inserts]] = OrderedDict()
        # Sessions' stored windows as last read: where each begins, and its entries (a
        # cache of the store, checked against it on every read: it changes no plan).
        self._windows: OrderedDict[SessionKey, tuple[int, tuple[StoredMessage, ...]]] = (
            OrderedDict()
        )

    async def state(self, request: Request) -> State:
        """Load the meta, reconcile, validate and count the new messages; recount from the
        stored messages only after an edit of history or for a tokenizer new to it."""
        assert request.key is not None
        conversation, counter = request.conversation, request.counter
        meta = await self._store.load(*request.key)
        serialized = None
        if conversation and request.mode != "append" and meta is not None and meta.length:
            serialized = Serialized(request.messages, len(request.system))
            await pause(len(serialized))
        trusted = 0
        fingerprint = meta.fingerprint if meta is not None else None
        if (
            serialized is not None
            and fingerprint is not None
            and len(conversation) >= fingerprint.count
            and serialized.starts_with(fingerprint)
        ):
            trusted = fingerprint.count
        unseen = conversation[trusted:]
        offset = len(request.system)

        def reconciled(stored: list[str] | None = None) -> Match | str:
            validate_messages(conversation, trusted, offset=offset, continues=True)
            return reconcile(meta, conversation, request.mode, serialized, stored, request.frame)

        stored: list[StoredMessage] | None = None
        match = await off_loop(unseen, reconciled, request.size)
        if match == NEED_STORED_HASHES:
            assert meta is not None
            origin = meta.origin
            stored = await self._store.messages(
                *request.key, origin, min(origin + len(conversation), meta.length)
            )
            hashes = [s.hash for s in stored]
            match = await off_loop(unseen, lambda: reconciled(hashes), request.size)
        assert isinstance(match, Match)
        if match.kind == "side":  # answered beside the session: nothing to count or store
            assert meta is not None
            return State(meta, match, (), {}, None, 0, meta.version, serialized)
        if match.kind != "append" and serialized is None and conversation:
            serialized = Serialized(request.messages, len(request.system))
            await pause(len(serialized))
        new_messages = conversation[match.start :]
        if match.start == 0 and new_messages and new_messages[0].get("role") == "tool":
            await self._check_results(request, match.keep, new_messages)
        bounded = await self._bounded(request, meta, match, serialized)
        if bounded is not None:
            totals, new = bounded
            checkpoint, checkpoints = None, meta.checkpoints if meta else 0
        else:
            names = {counter.name, *(meta.totals if meta else ())} - {BOUND.name}
            carried, checkpoint, checkpoints = self._carried(meta, match, counter.name)
            if carried is None:  # an edit of history, a tokenizer new to it, a bound outgrown
                assert meta is not None
                carried, checkpoint, checkpoints = await self._recounted(
                    request, meta, match, names, stored
                )
            totals = carried
            counters = [counter_for_name(name, counter) for name in names]
            new = await off_loop(
                new_messages, lambda: _entries(new_messages, match, counters), request.size
            )
            for stored_message in new:
                for name in totals:
                    totals[name] += stored_message.tokens[name]
        inserts = await self._inserts_of(request.key, meta)
        return State(
            base=meta,
            match=match,
            new=new,
            totals=totals,
            checkpoint=checkpoint,
            checkpoints=checkpoints,
            expected=meta.version if meta else 0,
            serialized=serialized,
            inserts=inserts,
        )

    async def _bounded(
        self,
        request: Request,
        meta: SessionMeta | None,
        match: Match,
        serialized: Serialized | None,
    ) -> tuple[dict[str, int], tuple[StoredMessage, ...]] | None:
        """The totals (by `BOUND` alone) and the new messages, uncounted, where the turn
        may send its history whole without tokenizing it: a session that began with a
        long conversation far from its budget (`_COUNT_NOW_BYTES`) and has stayed there,
        unsummarized. Its bound is the serialized conversation's for a first request,
        then grows by each new message's (and a retry or an edit takes the cut messages'
        away); None where counting is due."""
        assert request.key is not None
        new_messages = request.conversation[match.start :]
        if match.kind not in ("new", "full", "append", "fork"):
            return None
        if meta is None or match.keep == 0:
            if serialized is None or len(serialized) <= _COUNT_NOW_BYTES:
                return None
            bound = serialized.token_bound()
            if bound > request.uncounted:
                return None
            new = await off_loop(
                new_messages, lambda: _entries(new_messages, match, []), request.size
            )
            return {BOUND.name: bound}, new
        carried = meta.totals.get(BOUND.name)
        if carried is None or meta.checkpoint is not None:
            return None
        if match.keep < meta.length:  # what a retry or an edit cuts leaves the bound
            cut = await self._store.messages(*request.key, match.keep, meta.length)
            cut = await self.counted(cut, {BOUND.name}, BOUND)
            carried -= sum(entry.tokens[BOUND.name] for entry in cut)
        if carried > request.uncounted:
            return None
        new = await off_loop(
            new_messages, lambda: _entries(new_messages, match, [BOUND]), request.size
        )
        bound = carried + sum(entry.tokens[BOUND.name] for entry in new)
        return ({BOUND.name: bound}, new) if bound <= request.uncounted else None

    async def _inserts_of(self, key: SessionKey, meta: SessionMeta | None) -> Inserts | None:
        """The blocks the session's latest turn sent beside its window (`Inserts`): read
        from the store only when this process does not hold the ones its meta names."""
        if meta is None or not meta.inserts:
            return None
        known = self._inserts.get(key)
        if known is None or known[0] != meta.inserts:
            data = await self._store.inserts(*key)
            found = Inserts.from_json(data) if data is not None else None
            if found is None or found.digest() != meta.inserts:
                return None  # a commit that did not apply wrote them: none stand
            known = (meta.inserts, found)
            self._inserts[key] = known
            while len(self._inserts) > _INSERTS_KEPT:
                self._inserts.popitem(last=False)
        self._inserts.move_to_end(key)
        return known[1]

    async def _check_results(self, request: Request, keep: int, new: list[Message]) -> None:
        """Tool results that open an appended turn answer calls of the stored assistant
        message they follow (read back at most `_RESULTS_BACK` messages), each once."""
        assert request.key is not None
        start = max(0, keep - _RESULTS_BACK)
        stored = [s.message for s in await self._store.messages(*request.key, start, keep)]
        answered: set[Any] = set()
        while stored and stored[-1].get("role") == "tool":
            answered.add(stored.pop().get("tool_call_id"))
        last = stored[-1] if stored else {}
        calls = last.get("tool_calls") if last.get("role") == "assistant" else None
        made = {call.get("id") for call in calls or () if isinstance(call, dict)}
        for index, message in enumerate(new):
            if message.get("role") != "tool":
                break
            call_id = message.get("tool_call_id")
            if call_id not in made or call_id in answered:
                where = f"messages[{len(request.system) + index}]"
                raise invalid(
                    f"{where}.tool_call_id",
                    f"`{where}` answers tool call `{call_id}`, which the session's last"
                    " assistant message did not make, or which is answered already.",
                )
            answered.add(call_id)

    def _carried(
        self, meta: SessionMeta | None, match: Match, name: str
    ) -> tuple[dict[str, int] | None, Checkpoint | None, int]:
        """Totals and the summary in effect, from the meta alone; None for the totals when
        the stored messages must be counted (`_recounted`)."""
        if meta is None or match.keep == 0:
            return {name: 0}, None, 0
        checkpoint = meta.checkpoint
        if match.keep < meta.length or name not in meta.totals:
            return None, checkpoint, meta.checkpoints
        if checkpoint is not None and name not in checkpoint.before:
            return None, checkpoint, meta.checkpoints
        if checkpoint is not None and checkpoint.stubbed and name not in checkpoint.stubs_saved:
            return None, checkpoint, meta.checkpoints
        return dict(meta.totals), checkpoint, meta.checkpoints

    async def _recounted(
        self,
        request: Request,
        meta: SessionMeta,
        match: Match,
        names: set[str],
        stored: list[StoredMessage] | None,
    ) -> tuple[dict[str, int], Checkpoint | None, int]:
        """Totals and the summary in effect after an edit of history (the transcript cut
        to `match.keep`) or for a tokenizer new to the session: the slow path, which reads
        the kept messages once."""
        assert request.key is not None
        keep = match.keep
        if _tail_cut(meta, keep, names):  # a retry, a regenerated reply: read what is cut
            cut = await self._store.messages(*request.key, keep, meta.length)
            cut = await self.counted(cut, names, request.counter)
            totals = {n: meta.totals[n] - sum(s.tokens[n] for s in cut) for n in names}
            return totals, meta.checkpoint, meta.checkpoints
        if stored is None or len(stored) < keep:
            stored = await self._store.messages(*request.key, 0, keep)
        kept = await self.counted(stored[:keep], names, request.counter)
        checkpoint, count = meta.checkpoint, meta.checkpoints
        if keep < meta.length:  # summaries of what was cut away no longer apply
            valid = [
                c for c in await self._store.checkpoints(*request.key) if c.covers_until <= keep
            ]
            checkpoint, count = (valid[-1] if valid else None), len(valid)
        if checkpoint is not None:
            before = {n: sum(s.tokens[n] for s in kept[: checkpoint.covers_until]) for n in names}
            checkpoint = replace(checkpoint, before=before)
        if checkpoint is not None and checkpoint.stubbed:
            # Stubs stay before the last user message: what the model answers now.
            new = request.conversation[match.start :]
            if any(message.get("role") == "user" for message in new):
                last = keep
            else:
                last = last_user([s.message for s in kept])
            stubbed = tuple(at for at in checkpoint.stubbed if at < last)
            counters = {n: counter_for_name(n, request.counter) for n in names}
            saved = savings(kept, stubbed, counters, self._make)
            checkpoint = replace(checkpoint, stubbed=stubbed, stubs_saved=saved)
        return {n: sum(s.tokens[n] for s in kept) for n in names}, checkpoint, count

    async def counted(
        self, entries: list[StoredMessage], names: set[str], counter: TokenCounter
    ) -> list[StoredMessage]:
        """`entries`, each with a count by every tokenizer in `names`: one stored before a
        tokenizer was used on it is counted now (as a copy: what was read stays as read)."""
        missing = [i for i, s in enumerate(entries) if not names <= s.tokens.keys()]
        if not missing:
            return entries

        def count() -> list[StoredMessage]:
            found = list(entries)
            for i in missing:
                stored = entries[i]
                tokens = dict(stored.tokens)
                for name in names - tokens.keys():
                    named = counter_for_name(name, counter)
                    tokens[name] = self._counts.message(named, stored.message, stored.hash)
                found[i] = replace(stored, tokens=tokens)
            return found

        result: list[StoredMessage] = await off_loop([entries[i].message for i in missing], count)
        return result

    async def window(self, request: Request, state: State, start: int) -> list[StoredMessage]:
        """transcript[start:] as this request leaves it: stored messages, then new ones.
        The stored part is read from where the session's last window read here ended,
        when the store still holds that window (the chain value at its end says so): a
        client that sends only its new turn costs the reading of that turn, not of the
        whole window."""
        assert request.key is not None
        stored: list[StoredMessage] = []
        if start < state.keep:
            stored = await self._stored_window(request.key, start, state.keep)
        return [*stored, *state.new[max(0, start - state.keep) :]]

    async def _stored_window(self, key: SessionKey, start: int, end: int) -> list[StoredMessage]:
        known = self._windows.get(key)
        stored = None
        if known is not None:
            first, entries = known
            last = first + len(entries)  # the window read before was [first, last)
            if entries and first <= start < last <= end:
                tail = await self._store.messages(*key, last - 1, end)
                if tail and tail[0].chain == entries[-1].chain:  # the same transcript
                    stored = [*entries[start - first :], *_unmarked(tail[1:])]
        if stored is None:
            stored = _unmarked(await self._store.messages(*key, start, end))
        self._windows[key] = (start, tuple(stored))
        self._windows.move_to_end(key)
        held = sum(len(entries) for _, entries in self._windows.values())
        while held > _WINDOW_MESSAGES and len(self._windows) > 1:
            held -= len(self._windows.popitem(last=False)[1][1])
        return stored


def _tail_cut(meta: SessionMeta, keep: int, names: set[str]) -> bool:
    """Whether cutting the transcript to `keep` leaves every count known but the cut
    part's: the session is counted by every tokenizer in `names`, and its summary (if
    any, with no stubs) covers no message that is cut. Then the totals are the meta's
    less the cut messages', and the summaries in effect stay."""
    checkpoint = meta.checkpoint
    return (
        keep < meta.length
        and names <= meta.totals.keys()
        and (
            checkpoint is None
            or (
                checkpoint.covers_until <= keep
                and names <= checkpoint.before.keys()
                and not checkpoint.stubbed
            )
        )
    )


def _unmarked(entries: list[StoredMessage]) -> list[StoredMessage]:
    """Stored messages as a window sends them: without the cache marks of the requests
    that brought them (`proxy.engine.caching.unmarked`)."""
    out = list(entries)
    for at, entry in enumerate(entries):
        message = unmarked(entry.message)
        if message is not entry.message:
            out[at] = replace(entry, message=message)
    return out


def counter_for_name(name: str, counter: TokenCounter) -> TokenCounter:
    """The counter a stored count was made with (by its name)."""
    return counter if counter.name == name else counter_named(name)


def _entries(
    messages: list[Message], match: Match, counters: list[TokenCounter]
) -> tuple[StoredMessage, ...]:
    """The new messages as stored: hash, chain value, a count per tokenizer."""
    heads = chain(match.hashes, start=match.head)
    return tuple(
        StoredMessage(message, digest, head, {c.name: c.count_message(message) for c in counters})
        for message, digest, head in zip(messages, match.hashes, heads, strict=True)
    )


async def pause(size: int) -> None:
    """Let other requests run between two passes over a large body (each pass is one C
    call that holds the event loop for its whole length)."""
    if size > _PAUSE_BYTES:
        await asyncio.sleep(0)


async def off_loop(messages: list[Any], work: Any, body: int | None = None) -> Any:
    """Run `work` (Python work on `messages`) here, or in a worker thread when they are
    many or large: there the interpreter switches to the event loop every few ms.
    `body`, the size of the request they came in, spares measuring them when small."""
    if len(messages) > MANY_MESSAGES:
        return await asyncio.to_thread(work)
    if body is not None and body <= _OFF_LOOP_CHARS:
        return work()
    size = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
    if size > _OFF_LOOP_CHARS:
        return await asyncio.to_thread(work)
    return work()
