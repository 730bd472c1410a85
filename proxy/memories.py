"""Memories across sessions, read and written around a turn (the pure part is
`proxy.memory`): what a session says is learned once its turn is stored, and the
memory's most relevant facts are injected right after the system prompt.

The injected block is chosen again only when the facts it could offer change (another
session said something new, or a value was replaced), not every turn, so it breaks the
prompt-cache prefix no more often than the memory changes."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

import orjson

from proxy.config import Settings
from proxy.context import Plan
from proxy.history import off_loop
from proxy.ledger import Fact, facts_in, message_text, recent_text
from proxy.memory import Remembered, memory_message, remember
from proxy.messages import Message
from proxy.sessions import CAS_ATTEMPTS, SessionStore, StoredMessage
from proxy.turns import Request

__all__ = ["Memories"]

logger = logging.getLogger("context_proxy.memory")

_BLOCKS = 1024  # chosen blocks remembered per process
_INJECTION_SHARE = 0.02  # of the budget, when `memory.max_injection_tokens` is unset


class Memories:
    def __init__(self, settings: Settings, store: SessionStore) -> None:
        self._settings = settings.memory
        self._store = store
        # (tenant, memory, session) -> (what the block was chosen from, the block)
        self._blocks: OrderedDict[tuple[str, str, str], tuple[int, Message | None]] = OrderedDict()
        # (tenant, memory) -> its record's bytes as last read, parsed: a memory is read
        # on every request of its sessions and changes far less often.
        self._parsed: OrderedDict[tuple[str, str], tuple[bytes, list[Remembered]]] = OrderedDict()

    async def read(self, tenant: str, memory_id: str) -> list[Remembered]:
        found = await self._store.memory(tenant, memory_id)
        if found is None:
            return []
        key, data = (tenant, memory_id), found[1]
        known = self._parsed.get(key)
        if known is None or known[0] != data:
            known = (data, _parsed(data))
            self._parsed[key] = known
            while len(self._parsed) > _BLOCKS:
                self._parsed.popitem(last=False)
        self._parsed.move_to_end(key)
        return known[1]

    async def forget(self, tenant: str, memory_id: str) -> bool:
        return await self._store.delete_memory(tenant, memory_id)

    async def injected(self, request: Request, memory_id: str | None, plan: Plan) -> Plan:
        """`plan` with the memory's block after the client's system messages."""
        if memory_id is None or request.key is None or not plan.messages:
            return plan
        tenant, session = request.key
        limit = self._settings.max_injection_tokens
        if limit is None:
            limit = int(_INJECTION_SHARE * request.budget)
        limit = min(limit, request.budget - plan.tokens)
        facts = [f for f in await self.read(tenant, memory_id) if f.current]
        offered = [f for f in facts if f.session != session]
        chosen = hash((limit, tuple((f.key, f.value) for f in offered)))
        key = (tenant, memory_id, session)
        cached = self._blocks.get(key)
        if cached is not None and cached[0] == chosen:
            block = cached[1]
        else:
            block = memory_message(
                offered,
                recent_text(request.conversation),
                request.counter,
                limit,
                self._settings.similarity_weight,
                self._settings.confidence_weight,
            )
            self._blocks[key] = (chosen, block)
            while len(self._blocks) > _BLOCKS:
                self._blocks.popitem(last=False)
        self._blocks.move_to_end(key)
        if block is None:
            return plan
        at = len(request.system)
        messages = [*plan.messages[:at], block, *plan.messages[at:]]
        return replace(
            plan, messages=messages, tokens=plan.tokens + request.counter.count_message(block)
        )

    async def learn(
        self, tenant: str, memory_id: str, session: str, said: Sequence[StoredMessage]
    ) -> None:
        """Remember the facts of a stored turn's new messages (compare-and-set, retried
        when another session's turn wrote the memory first)."""
        messages = [s.message for s in said]
        facts = await off_loop(messages, lambda: _said(messages))
        if not facts:
            return
        for _ in range(CAS_ATTEMPTS):
            found = await self._store.memory(tenant, memory_id)
            version, memory = (found[0], _parsed(found[1])) if found else (0, [])
            data = orjson.dumps([f.to_dict() for f in remember(memory, facts, session)])
            if await self._store.put_memory(tenant, memory_id, version, data):
                return
        logger.warning("memory not updated after %d attempts (conflicts)", CAS_ATTEMPTS)


def _said(messages: list[Message]) -> list[tuple[Fact, str]]:
    now = time.time()
    return [
        (fact, str(message.get("role")))
        for message in messages
        if message.get("role") in {"user", "assistant", "tool"}
        for fact in facts_in(message_text(message), 0, now)
    ]


def _parsed(data: bytes) -> list[Remembered]:
    return [Remembered.from_dict(item) for item in orjson.loads(data)]
