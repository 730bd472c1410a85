"""A session's history as a request leaves it (loaded, reconciled, counted), the stored
transcript read only where something needs it, never in full per request."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

from proxy.concurrency import off_loop, pause
from proxy.conversation.identity import Message
from proxy.conversation.tokens import CountCache, TokenCounter
from proxy.conversation.validation import invalid, validate_messages
from proxy.engine.planner.caching import unmarked
from proxy.engine.planner.reconcile import (
    NEED_STORED_HASHES,
    Digests,
    Match,
    Serialized,
    reconcile,
)
from proxy.engine.planner.stubs import Stubber, stub
from proxy.engine.totals import Totals
from proxy.engine.types import Request, SessionView
from proxy.sessions.records import (
    Inserts,
    SessionKey,
    SessionMeta,
    StoredMessage,
)
from proxy.sessions.store import MessageLog

__all__ = ["History"]

_RESULTS_BACK = 64  # parallel tool calls a turn may answer across, at most
_INSERTS_KEPT = 1024  # sessions whose inserts a process keeps
_WINDOW_MESSAGES = 20_000  # stored messages of recent windows a process keeps, in all


class History:
    def __init__(self, store: MessageLog, counts: CountCache, make: Stubber = stub) -> None:
        self._store = store
        self._totals = Totals(store, counts, make)
        self._digests = Digests()  # conversations' bytes as last fingerprinted
        # Sessions' inserts as last read, by the digest their meta names them by: a cache
        # of what the store holds, which the digest says is current (it changes no plan).
        self._inserts: OrderedDict[SessionKey, tuple[str, Inserts]] = OrderedDict()
        # Sessions' stored windows as last read: where each begins, and its entries (a
        # cache of the store, checked against it on every read: it changes no plan).
        self._windows: OrderedDict[SessionKey, tuple[int, tuple[StoredMessage, ...]]] = (
            OrderedDict()
        )

    async def state(self, request: Request) -> SessionView:
        """The session as this request leaves it, recounted from the stored messages only
        after an edit of history or for a tokenizer new to it."""
        assert request.key is not None
        conversation = request.conversation
        meta = await self._store.load(*request.key)
        serialized = None
        if conversation and request.mode != "append" and meta is not None and meta.length:
            serialized = Serialized(
                request.messages, len(request.system), self._digests, request.messages_json
            )
            await pause(len(serialized))
        # A full-resend client's prefix is known by its fingerprint: only what follows it is
        # validated, hashed and counted.
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
            return SessionView(
                base=meta,
                match=match,
                new=(),
                totals={},
                checkpoint=None,
                checkpoints=0,
                expected_version=meta.version,
                serialized=serialized,
            )
        if match.kind != "append" and serialized is None and conversation:
            serialized = Serialized(
                request.messages, len(request.system), self._digests, request.messages_json
            )
            await pause(len(serialized))
        new_messages = conversation[match.start :]
        if match.start == 0 and new_messages and new_messages[0].get("role") == "tool":
            await self._check_results(request, match.kept, new_messages)
        totals, new, checkpoint, checkpoints = await self._totals.totals_of(
            request, meta, match, serialized, stored
        )
        inserts = await self._inserts_of(request.key, meta)
        return SessionView(
            base=meta,
            match=match,
            new=new,
            totals=totals,
            checkpoint=checkpoint,
            checkpoints=checkpoints,
            expected_version=meta.version if meta else 0,
            serialized=serialized,
            inserts=inserts,
        )

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
        """Refuse tool results that open an appended turn unless each answers, once, a call
        of the stored assistant message they follow."""
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

    async def counted(
        self, entries: list[StoredMessage], names: set[str], counter: TokenCounter
    ) -> list[StoredMessage]:
        """`Totals.counted`: each entry with a count by every tokenizer in `names`."""
        return await self._totals.counted(entries, names, counter)

    async def window(self, request: Request, state: SessionView, start: int) -> list[StoredMessage]:
        """transcript[start:] as this request leaves it, the stored part read on from the
        last window read here, so one new turn costs the reading of that turn."""
        assert request.key is not None
        stored: list[StoredMessage] = []
        if start < state.kept:
            stored = await self._stored_window(request.key, start, state.kept)
        return [*stored, *state.new[max(0, start - state.kept) :]]

    async def counted_window(
        self, request: Request, state: SessionView, start: int, names: set[str]
    ) -> list[StoredMessage]:
        """`window`, each message counted by every tokenizer in `names`: what a plan or a
        fold reads, in one call."""
        return await self.counted(await self.window(request, state, start), names, request.counter)

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


def _unmarked(entries: list[StoredMessage]) -> list[StoredMessage]:
    """Stored messages as a window sends them: without the cache marks of the requests
    that brought them (`proxy.engine.planner.caching.unmarked`)."""
    out = list(entries)
    for at, entry in enumerate(entries):
        message = unmarked(entry.message)
        if message is not entry.message:
            out[at] = replace(entry, message=message)
    return out
