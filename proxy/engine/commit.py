"""Storing a turn under compare-and-set while it holds the session's lock: its new messages
and reply appended, its meta replaced, and what was stored returned."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.concurrency import off_loop
from proxy.conversation.identity import GENESIS, Message, chain, message_hash
from proxy.conversation.replies import stored_reply
from proxy.conversation.tokens import TokenCounter, counter_by_name
from proxy.costs.receipts import Receipt, TurnCost, turn_cost
from proxy.costs.usage import Usage
from proxy.engine.folds.summarizer import Summaries
from proxy.engine.history import History
from proxy.engine.planner import calibration
from proxy.engine.types import Request, SessionView, Turn
from proxy.errors import ProxyError, SessionConflict
from proxy.observability.metrics import REPLIES_CUT, ModelLabels
from proxy.sessions.records import (
    CAS_ATTEMPTS,
    Checkpoint,
    Commit,
    Inserts,
    SessionKey,
    SessionMeta,
    StoredMessage,
)
from proxy.sessions.store import MessageLog

__all__ = ["Commits", "Stored", "concurrent_turn_error", "drops_stored"]

logger = logging.getLogger("context_proxy.engine")

READ_BACK_SECONDS = 2.0  # to learn whether a commit whose answer was lost applied


@dataclass(frozen=True, slots=True)
class Stored:
    """What a turn's commit stored: the session's meta as it now is, the messages appended,
    the tokens they added (by the request's tokenizer) and the turn's money."""

    meta: SessionMeta
    messages: tuple[StoredMessage, ...]
    growth: int
    cost: TurnCost | None


class Commits:
    """Stores answered turns."""

    def __init__(
        self,
        *,
        store: MessageLog,
        history: History,
        summaries: Summaries,
        label: ModelLabels,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._history = history
        self.summaries = summaries
        self.label = label
        self.clock = clock  # epoch seconds: the meta's `updated`, the receipt's times

    async def stored(
        self,
        turn: Turn,
        reply: dict[str, Any] | None,
        usage: dict[str, Any] | None,
        used: Usage | None,
    ) -> Stored | None:
        """Store the turn's new messages and reply (None: not a stored turn), replayed onto
        a background summary's write but never over a transcript changed under it."""
        request, state = turn.request, turn.state
        if request is None or state is None or request.key is None or reply is None:
            return None
        if turn.side_request:  # planned as a turn of its session, answered, never stored
            if turn.summaries:  # the summary it made was paid for: the session owes it
                await self.summaries.store(request.key, None, turn.summaries)
            return None
        pending, base = state.pending, state.base
        for _ in range(CAS_ATTEMPTS):
            if _transcript(state.base) != _transcript(base) and drops_stored(state):
                raise concurrent_turn_error()
            entry = await reply_entry(
                reply,
                state.head,
                request.counter,
                state.totals,
                request.reply_limit,
            )
            learned = _calibration(state.base, self.label(request.model), turn.tokens_sent, usage)
            inserts, digest = _inserts(state.base, turn.inserts)
            sent_at = turn.record["at"] if turn.record else self.clock()
            cost, receipt = turn_cost(
                request.prices,
                used,
                turn.tokens_original or 0,
                turn.tokens_sent,
                turn.summaries,
                state.base.receipt if state.base is not None else Receipt(),
                sent_at,
            )
            meta, checkpoints = stored_meta(
                request, state, entry, learned, digest, self.clock(), receipt
            )
            entries = (*state.new, entry)
            record = None
            if turn.record:
                money = {
                    "version": meta.version,
                    "usage": used.to_dict() if used is not None else None,
                    "cost": cost.to_dict() if cost is not None else None,
                }
                record = orjson.dumps(turn.record | money)
            lease = turn.lease
            release = lease.token if lease is not None else None
            try:
                done = await self.store.commit(
                    Commit(
                        meta,
                        state.expected_version,
                        state.kept,
                        entries,
                        checkpoints,
                        release,
                        record,
                        inserts,
                    )
                )
                given_back = done
            except ProxyError:
                # No answer in time: the commit applied by its deadline, or never will.
                if not await self._applied(request.key, meta):
                    raise
                done, given_back = True, False
            if done:
                if lease is not None and given_back:  # given back with the commit
                    lease.stored = True
                if entry.message is not reply:
                    logger.warning("a reply over %d bytes is stored cut", request.reply_limit)
                    REPLIES_CUT.labels(self.label(request.model)).inc()
                if pending is not None and not checkpoints:  # replayed: store it if it applies
                    await self.summaries.store(request.key, pending)
                growth = _growth(state.base, meta, request.counter.name)
                return Stored(meta, entries, growth, cost)
            state = await self._history.state(request)
        logger.error("could not store session after %d attempts (conflicts)", CAS_ATTEMPTS)
        raise concurrent_turn_error()

    async def _applied(self, key: SessionKey, meta: SessionMeta) -> bool:
        """Whether a commit whose answer was lost applied after all, asked once and briefly:
        a store still away fails the turn."""
        try:
            found = await asyncio.wait_for(self.store.load(*key), READ_BACK_SECONDS)
        except (ProxyError, TimeoutError):
            return False
        # At its version with its head: the chain value that names the turn's content.
        return found is not None and (found.version, found.head) == (meta.version, meta.head)


def _calibration(
    base: SessionMeta | None, label: str, sent: int | None, usage: dict[str, Any] | None
) -> dict[str, float]:
    """The session's calibration once the provider counted what the turn sent."""
    learned = dict(base.calibration) if base is not None else {}
    ratio = calibration.smoothed(learned.get(label), sent, (usage or {}).get("prompt_tokens"))
    if ratio is not None:
        learned[label] = ratio
    return learned


def _inserts(base: SessionMeta | None, inserts: Inserts | None) -> tuple[bytes | None, str]:
    """What the commit writes of the session's inserts (None: nothing, as they are
    stored already, or none were chosen) and the meta's digest of them."""
    stored = base.inserts if base is not None else ""
    if inserts is None or inserts == Inserts():
        return None, stored if inserts is None else ""
    digest = inserts.digest()
    return (None if digest == stored else inserts.to_json()), digest


def _growth(base: SessionMeta | None, meta: SessionMeta, name: str) -> int:
    """Tokens the stored turn added to its session (its new messages and the reply)."""
    return meta.totals.get(name, 0) - (base.totals.get(name, 0) if base is not None else 0)


def drops_stored(state: SessionView) -> bool:
    """The turn cuts stored messages away (an edit of history, or a stale client)."""
    return state.base is not None and state.kept < state.base.length


def _transcript(meta: SessionMeta | None) -> tuple[int, str] | None:
    return (meta.length, meta.head) if meta is not None else None


def concurrent_turn_error() -> SessionConflict:
    return SessionConflict(
        "The session gained messages from a concurrent turn that this request's history"
        " does not have; resend it with the session's current history.",
        code="conflict",
    )


async def reply_entry(
    reply: Message,
    previous: str,
    counter: TokenCounter,
    totals: dict[str, int],
    limit: int,
) -> StoredMessage:
    """The reply as stored after `previous`, one over `limit` bytes cut but under the whole
    reply's hash and count, so a client that resends it whole is still recognised."""

    def count() -> tuple[str, Message, dict[str, int]]:
        counts = {name: counter_by_name(name, counter).count_message(reply) for name in totals}
        return message_hash(reply), stored_reply(reply, limit), counts

    digest, stored, counts = await off_loop([reply], count)
    return StoredMessage(stored, digest, chain([digest], start=previous)[0], counts)


def stored_meta(
    request: Request,
    state: SessionView,
    reply: StoredMessage,
    calibration: dict[str, float],
    inserts: str,
    now: float,
    receipt: Receipt | None = None,
) -> tuple[SessionMeta, tuple[Checkpoint, ...]]:
    """The meta once the turn is stored, and the checkpoint stored with it (if any)."""
    assert request.key is not None
    base, match = state.base, state.match
    fingerprint = None
    if match.whole and request.conversation and state.serialized is not None:
        head = state.head
        fingerprint = state.serialized.fingerprint(len(request.conversation), head)
    origin = state.origin
    if base is not None and match.kept > origin:
        first = base.first
    else:
        first = state.new[0].hash if state.new else reply.hash
    if base is None or origin == 0:
        origin_head, origin_totals = GENESIS, {}
    elif match.kind == "chapter":
        origin_head, origin_totals = match.head, dict(base.totals)
    else:
        origin_head, origin_totals = base.origin_head, base.origin_totals
    meta = SessionMeta(
        tenant=request.key[0],
        session_id=request.key[1],
        version=state.expected_version + 1,
        length=state.length + 1,
        head=reply.chain,
        first=first,
        totals={name: total + reply.tokens[name] for name, total in state.totals.items()},
        checkpoint=state.checkpoint,
        checkpoints=state.checkpoints,
        fingerprint=fingerprint,
        tail=(reply.hash,) if fingerprint is not None else (),
        frame=request.frame,
        settled=bool(match.kept)
        or bool(reply.message.get("tool_calls"))
        or any(entry.message.get("role") == "assistant" for entry in state.new),
        resent=match.whole
        and (match.start > 0 or any(e.message.get("role") == "assistant" for e in state.new)),
        origin=origin,
        origin_head=origin_head,
        origin_totals=origin_totals,
        calibration=calibration,
        inserts=inserts,
        created=base.created if base is not None and base.created else now,
        updated=now,
        receipt=receipt
        if receipt is not None
        else (base.receipt if base is not None else Receipt()),
    )
    return meta, (state.pending,) if state.pending is not None else ()
