"""Memories across sessions around a turn: what a session says learned once stored, the
memory's facts injected after the system prompt, its other sessions' units recalled."""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import orjson

from proxy.concurrency import off_loop
from proxy.config.settings import Settings
from proxy.conversation.identity import Message
from proxy.engine.archive import Archive, last_unit
from proxy.engine.planner.window import Plan
from proxy.engine.types import Request, SessionView
from proxy.facts.ledger import Fact, facts_in, message_text, recent_text, stated_text
from proxy.memory.facts import Remembered, memory_message, recalled_message, remember
from proxy.recall.index import Hit, best_first
from proxy.sessions.records import CAS_ATTEMPTS, Inserts, StoredMessage
from proxy.sessions.store import SessionStore
from proxy.sessions.stores import DAMAGED, store_fault

__all__ = ["Memories", "with_memory_and_recall"]

logger = logging.getLogger("context_proxy.memory")

_MEMORIES = 1024  # parsed memory records kept per process
_INJECTION_SHARE = 0.02  # of the budget, when `memory.max_injection_tokens` is unset
_SESSIONS_KEPT = 64  # a memory's sessions that said the most, whose messages recall searches
_SEARCHED = 32  # of them, searched for one message (those that said the most)
_PER_SESSION = 16  # units taken from each
_UNITS = 256  # units offered to the block, best first, while its room lasts
_QUERY_CHARS = 4000  # of the newest message
_CHARS_PER_TOKEN = 6  # more than any text has: units read past this many fill any room


@dataclass(frozen=True, slots=True)
class Memory:
    """A memory's record: its facts, and its sessions by how many messages each has said, so
    one that asked a single question does not push out one that said a lot."""

    facts: list[Remembered] = field(default_factory=list)
    sessions: dict[str, int] = field(default_factory=dict)

    def said(self, session: str, messages: int) -> dict[str, int]:
        """`sessions` after `session` said `messages` more."""
        counts = {**self.sessions, session: self.sessions.get(session, 0) + messages}
        ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
        return dict(ranked[:_SESSIONS_KEPT])

    def to_json(self) -> bytes:
        facts = [f.to_dict() for f in self.facts]
        return orjson.dumps({"facts": facts, "sessions": self.sessions})

    @classmethod
    def from_json(cls, data: bytes) -> Memory:
        parsed = orjson.loads(data)
        if isinstance(parsed, list):  # a record from before sessions were kept
            return cls([Remembered.from_dict(item) for item in parsed])
        return cls(
            [Remembered.from_dict(item) for item in parsed["facts"]], dict(parsed["sessions"])
        )


class Memories:
    def __init__(self, settings: Settings, store: SessionStore, archive: Archive) -> None:
        self._settings = settings.memory
        self._recall_ratio = settings.context.recall_ratio
        self._recall_max_tokens = settings.context.recall_max_tokens
        self._store = store
        self._archive = archive
        # (tenant, memory) -> its record's bytes as last read, parsed: a memory is read
        # on every request of its sessions and changes far less often (a cache of the
        # store's bytes: it changes no plan).
        self._parsed: OrderedDict[tuple[str, str], tuple[bytes, Memory]] = OrderedDict()

    async def memory(self, tenant: str, memory_id: str) -> Memory | None:
        found = await self._store.memory(tenant, memory_id)
        if found is None:
            return None
        key, data = (tenant, memory_id), found[1]
        known = self._parsed.get(key)
        if known is None or known[0] != data:
            try:
                known = (data, Memory.from_json(data))
            except DAMAGED as exc:  # a 503 that says so, never a 500; left as it is
                raise store_fault(exc) from exc
            self._parsed[key] = known
            while len(self._parsed) > _MEMORIES:
                self._parsed.popitem(last=False)
        self._parsed.move_to_end(key)
        return known[1]

    async def forget(self, tenant: str, memory_id: str) -> bool:
        return await self._store.delete_memory(tenant, memory_id)

    async def injected(
        self, request: Request, memory_id: str | None, plan: Plan, inserts: Inserts
    ) -> tuple[Plan, Inserts]:
        """`plan` with the memory's block after the system messages, chosen anew only when the
        facts and room it came from change, so the cached prefix breaks no more often."""
        if memory_id is None or request.key is None or not plan.messages:
            return plan, inserts
        tenant, session = request.key
        limit = self._settings.max_injection_tokens
        if limit is None:
            limit = int(_INJECTION_SHARE * request.budget)
        limit = min(limit, request.budget - plan.tokens)
        memory = await self.memory(tenant, memory_id)
        facts = [f for f in memory.facts if f.current] if memory else []
        offered = [f for f in facts if f.session != session]
        chosen = _digest([limit, memory_id, [(f.key, f.value) for f in offered]])
        if inserts.memory_from == chosen:
            block = inserts.memory
        else:
            block = memory_message(
                offered,
                recent_text(request.conversation),
                request.counter,
                limit,
                self._settings.similarity_weight,
                self._settings.confidence_weight,
            )
            inserts = replace(inserts, memory=block, memory_from=chosen)
        if block is None:
            return plan, inserts
        tokens = request.counter.count_message(block)
        return plan.with_message(len(request.system), block, tokens, "memory"), inserts

    async def recalled(self, request: Request, memory_id: str | None, plan: Plan) -> Plan:
        """`plan` with the units of the memory's other sessions that best match the
        newest message, when it is the user's, just before it."""
        newest = request.conversation[-1] if request.conversation else None
        if (
            memory_id is None
            or request.key is None
            or not self._settings.recall
            or not plan.messages
            or newest is None
            or newest.get("role") != "user"
        ):
            return plan
        room = min(
            int(self._recall_ratio * request.budget),
            self._recall_max_tokens,
            request.budget - plan.tokens,
        )
        query = message_text(newest)[-_QUERY_CHARS:]
        if room <= 0 or not query.strip():
            return plan
        tenant, session = request.key
        memory = await self.memory(tenant, memory_id)
        if memory is None:
            return plan
        found: list[tuple[Hit, str, float]] = []  # (unit, its session, when that began)
        for other in [s for s in memory.sessions if s != session][:_SEARCHED]:
            meta = await self._store.load(tenant, other)
            if meta is not None and meta.length:
                hits = await self._archive.hits((tenant, other), meta, query, _PER_SESSION)
                found += [(hit, other, meta.created) for hit in hits]
        place = {id(hit): at for at, (hit, _, _) in enumerate(found)}
        found = [found[place[id(hit)]] for hit in best_first([hit for hit, _, _ in found])]
        found = found[:_UNITS]
        units = []
        chars = 0  # read, best first, until they would surely fill the room
        for hit, other, _ in found:  # each with the message before it: what a reply answers
            first = max(hit.start - 1, 0)
            read = [s.message for s in await self._store.messages(tenant, other, first, hit.end)]
            before = read.pop(0) if hit.start > first and read else None
            units.append((hit.start, read, before))
            chars += sum(len(message_text(message)) for message in read)
            if chars > _CHARS_PER_TOKEN * room:
                break
        order = [(created, hit.start) for hit, _, created in found[: len(units)]]
        block = recalled_message(units, memory.facts, request.counter, room, order)
        if block is None:
            return plan
        tokens = request.counter.count_message(block)
        return plan.with_message(last_unit(plan.messages), block, tokens, "memory_recall")

    async def learn(
        self, tenant: str, memory_id: str, session: str, said: Sequence[StoredMessage]
    ) -> None:
        """Remember the facts of a stored turn's new messages and that the session shares
        the memory (compare-and-set, retried when another session's turn wrote it first)."""
        messages = [s.message for s in said]
        facts = await off_loop(messages, lambda: _said(messages))
        texts = [stated_text(m) for m in messages if m.get("role") == "user"]
        for _ in range(CAS_ATTEMPTS):
            found = await self._store.memory(tenant, memory_id)
            version, memory = (found[0], Memory.from_json(found[1])) if found else (0, Memory())
            remembered = remember(memory.facts, facts, session, texts)
            if not facts and session in memory.sessions and remembered == memory.facts:
                return  # nothing new to keep: the record is not rewritten every turn
            updated = Memory(remembered, memory.said(session, len(messages)))
            if await self._store.put_memory(tenant, memory_id, version, updated.to_json()):
                return
        logger.warning("memory not updated after %d attempts (conflicts)", CAS_ATTEMPTS)


def _digest(chosen_from: object) -> str:
    """Names what a memory block was chosen from (stable across processes)."""
    return hashlib.blake2b(orjson.dumps(chosen_from), digest_size=16).hexdigest()


def _said(messages: list[Message]) -> list[tuple[Fact, str]]:
    now = time.time()
    return [
        (fact, str(message.get("role")))
        for message in messages
        if message.get("role") in ("user", "assistant", "tool")
        for fact in facts_in(stated_text(message), 0, now)
    ]


async def with_memory_and_recall(
    memories: Memories, archive: Archive, request: Request, state: SessionView, plan: Plan
) -> tuple[Plan, Inserts]:
    """The plan with what the window alone lacks: remembered facts after the system prompt, then
    recalled history (the session's own, then the memory's other sessions') in what is left."""
    inserts = state.inserts or Inserts()
    plan, inserts = await memories.injected(request, request.memory_id, plan, inserts)
    plan, inserts = await archive.recalled(request, state, plan, inserts)
    return await memories.recalled(request, request.memory_id, plan), inserts
