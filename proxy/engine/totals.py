"""A session's token totals as a request leaves it: carried from the meta, recounted after
an edit or for a new tokenizer, or only bounded (`BOUND`) far from its budget."""

from __future__ import annotations

from dataclasses import replace

from proxy.concurrency import off_loop
from proxy.conversation.identity import Message, chain
from proxy.conversation.tokens import BOUND, CountCache, TokenCounter, counter_by_name
from proxy.engine.planner.reconcile import Match, Serialized
from proxy.engine.planner.stubs import Stubber, last_user, savings, stub
from proxy.engine.types import Request
from proxy.sessions.records import Checkpoint, SessionMeta, StoredMessage
from proxy.sessions.store import MessageLog

__all__ = ["Totals"]

# A conversation longer than this (bytes) that opens a session far from its budget is
# not tokenized (`Totals._bounded`); a shorter one is counted at once (under a ms).
_COUNT_NOW_BYTES = 32 * 1024

Counted = tuple[dict[str, int], tuple[StoredMessage, ...], Checkpoint | None, int]


class Totals:
    def __init__(self, store: MessageLog, counts: CountCache, make: Stubber = stub) -> None:
        self._store = store
        self._counts = counts
        self._make = make  # a stub as the session's requests send it (`proxy.engine.planner.stubs`)

    async def totals_of(
        self,
        request: Request,
        meta: SessionMeta | None,
        match: Match,
        serialized: Serialized | None,
        stored: list[StoredMessage] | None,
    ) -> Counted:
        """The totals with the new messages, the new messages as stored, the summary in
        effect and how many there are; `stored` is what the reconcile read already."""
        bounded = await self._bounded(request, meta, match, serialized)
        if bounded is not None:
            totals, new = bounded
            return totals, new, None, meta.checkpoints if meta and match.kept else 0
        counter = request.counter
        names = {counter.name, *(meta.totals if meta else ())} - {BOUND.name}
        carried, checkpoint, checkpoints = self._carried(meta, match, counter.name)
        if carried is None:  # an edit of history, a tokenizer new to it, a bound outgrown
            assert meta is not None
            carried, checkpoint, checkpoints = await self._recounted(
                request, meta, match, names, stored
            )
        messages = request.conversation[match.start :]
        counters = [counter_by_name(name, counter) for name in names]
        new = await off_loop(messages, lambda: _entries(messages, match, counters), request.size)
        for stored_message in new:
            for name in carried:
                carried[name] += stored_message.tokens[name]
        return carried, new, checkpoint, checkpoints

    async def _bounded(
        self,
        request: Request,
        meta: SessionMeta | None,
        match: Match,
        serialized: Serialized | None,
    ) -> tuple[dict[str, int], tuple[StoredMessage, ...]] | None:
        """The totals by `BOUND` alone and the new messages, uncounted, while a session that
        opened long stays far from its budget and unsummarized; None where counting is due."""
        assert request.key is not None
        new_messages = request.conversation[match.start :]
        if match.kind not in ("new", "full", "append", "fork"):
            return None
        if meta is None or match.kept == 0:
            if serialized is None or len(serialized) <= _COUNT_NOW_BYTES:
                return None
            # A first request's bound is its serialized conversation's; each new message's
            # adds to it later.
            bound = serialized.token_bound()
            if bound > request.sendable_uncounted:
                return None
            new = await off_loop(
                new_messages, lambda: _entries(new_messages, match, []), request.size
            )
            return {BOUND.name: bound}, new
        carried = meta.totals.get(BOUND.name)
        if carried is None or meta.checkpoint is not None:
            return None
        if match.kept < meta.length:  # what a retry or an edit cuts leaves the bound
            cut = await self._store.messages(*request.key, match.kept, meta.length)
            cut = await self.counted(cut, {BOUND.name}, BOUND)
            carried -= sum(entry.tokens[BOUND.name] for entry in cut)
        if carried > request.sendable_uncounted:
            return None
        new = await off_loop(
            new_messages, lambda: _entries(new_messages, match, [BOUND]), request.size
        )
        bound = carried + sum(entry.tokens[BOUND.name] for entry in new)
        return ({BOUND.name: bound}, new) if bound <= request.sendable_uncounted else None

    def _carried(
        self, meta: SessionMeta | None, match: Match, name: str
    ) -> tuple[dict[str, int] | None, Checkpoint | None, int]:
        """Totals and the summary in effect, from the meta alone; None for the totals when
        the stored messages must be counted (`_recounted`)."""
        if meta is None or match.kept == 0:
            return {name: 0}, None, 0
        checkpoint = meta.checkpoint
        if match.kept < meta.length or name not in meta.totals:
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
        """Totals and the summary in effect after an edit of history or for a tokenizer new
        to the session: the slow path, which reads the kept messages once."""
        assert request.key is not None
        keep = match.kept
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
            counters = {n: counter_by_name(n, request.counter) for n in names}
            saved = savings(kept, stubbed, counters, self._make)
            checkpoint = replace(checkpoint, stubbed=stubbed, stubs_saved=saved)
        return {n: sum(s.tokens[n] for s in kept) for n in names}, checkpoint, count

    async def counted(
        self, entries: list[StoredMessage], names: set[str], counter: TokenCounter
    ) -> list[StoredMessage]:
        """`entries`, each counted by every tokenizer in `names`: one stored before a
        tokenizer was used on it is counted now, as a copy."""
        missing = [i for i, s in enumerate(entries) if not names <= s.tokens.keys()]
        if not missing:
            return entries

        def count() -> list[StoredMessage]:
            found = list(entries)
            for i in missing:
                stored = entries[i]
                tokens = dict(stored.tokens)
                for name in names - tokens.keys():
                    named = counter_by_name(name, counter)
                    tokens[name] = self._counts.message(named, stored.message, stored.hash)
                found[i] = replace(stored, tokens=tokens)
            return found

        result: list[StoredMessage] = await off_loop([entries[i].message for i in missing], count)
        return result


def _tail_cut(meta: SessionMeta, keep: int, names: set[str]) -> bool:
    """Whether cutting the transcript to `keep` leaves every count known but the cut part's,
    so the totals are the meta's less the cut messages' and the summary stays."""
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


def _entries(
    messages: list[Message], match: Match, counters: list[TokenCounter]
) -> tuple[StoredMessage, ...]:
    """The new messages as stored: hash, chain value, a count per tokenizer."""
    heads = chain(match.hashes, start=match.head)
    return tuple(
        StoredMessage(message, digest, head, {c.name: c.count_message(message) for c in counters})
        for message, digest, head in zip(messages, match.hashes, heads, strict=True)
    )
