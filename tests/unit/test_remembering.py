"""Memories across sessions, through the engine (`Memories`): what a stored turn says is
learned, a new session of the same memory is told the current values right after its
system prompt, a block that has not changed keeps its bytes, and another tenant's
session with the same memory id learns nothing of it."""

from __future__ import annotations

from typing import Any

from proxy.memory.facts import MEMORY_PREFIX, MEMORY_RECALL_PREFIX
from tests.unit.engines import Parts

SYSTEM = {"role": "system", "content": "You are a careful assistant."}


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def block(body: dict[str, Any], prefix: str = MEMORY_PREFIX) -> str | None:
    found = [str(m["content"]) for m in body["messages"] if str(m["content"]).startswith(prefix)]
    return found[0] if found else None


async def tell(parts: Parts, session: str, *texts: str, tenant: str = "t1") -> None:
    """A session of the memory "team" that says `texts`, turn by turn."""
    history: list[dict[str, Any]] = [SYSTEM]
    for text in texts:
        history.append(said(text))
        await parts.turn(list(history), session, tenant=tenant, memory_id="team")
        history.append({"role": "assistant", "content": f"echo: {text}"})


async def test_a_new_session_is_told_the_current_values(parts: Parts) -> None:
    await tell(
        parts,
        "monday",
        "For the record, the billing lead is Maria Chen.",
        "The travel budget is $4,250.",
        "Change of plan: the travel budget is now $3,796.",
    )
    await tell(parts, "tuesday", "What is the travel budget these days?")
    sent = parts.upstream.sent[-1]
    told = block(sent)
    assert told is not None and sent["messages"][1]["content"] == told  # after the system
    assert "travel budget: $3,796" in told and "$4,250" not in told
    assert "billing lead: Maria Chen" in told
    memory = await parts.engine.memories.memory("t1", "team")
    assert memory is not None
    assert set(memory.sessions) == {"monday", "tuesday"}
    old = next(f for f in memory.facts if f.value == "$4,250")
    assert not old.current


async def test_a_session_is_not_told_what_it_said_itself(parts: Parts) -> None:
    await tell(parts, "monday", "The travel budget is $4,250.", "What is the travel budget?")
    assert block(parts.upstream.sent[-1]) is None


async def test_the_block_keeps_its_bytes_while_the_memory_does_not_change(parts: Parts) -> None:
    await tell(parts, "a", "For the record, the billing lead is Maria Chen.")
    await tell(parts, "b", "Who leads billing?", "Anything about search?", "What about lunch?")
    blocks = [block(body) for body in parts.upstream.sent[-3:]]
    assert blocks[0] is not None and "Maria Chen" in blocks[0]
    assert blocks[0] == blocks[1] == blocks[2]  # a stable prefix for a provider's cache
    await tell(parts, "c", "The search lead is Jonas Novak.")
    await tell(parts, "b2", "Who leads search?")
    changed = block(parts.upstream.sent[-1])
    assert changed is not None and "Jonas Novak" in changed and "Maria Chen" in changed


async def test_another_tenant_with_the_same_memory_id_learns_nothing(parts: Parts) -> None:
    await tell(parts, "monday", "The travel budget is $4,250.")
    await tell(parts, "theirs", "What is the travel budget?", tenant="t2")
    assert block(parts.upstream.sent[-1]) is None
    assert await parts.engine.memories.memory("t2", "team") is not None  # their own
    assert await parts.engine.memories.forget("t1", "team")
    assert await parts.engine.memories.memory("t1", "team") is None


async def test_a_message_no_fact_was_read_from_is_recalled_from_another_session(
    parts: Parts,
) -> None:
    await tell(parts, "notes", "We parked the blue kayak under the old boathouse stairs.")
    await tell(parts, "later", "Where did we leave the kayak?")
    recalled = block(parts.upstream.sent[-1], MEMORY_RECALL_PREFIX)
    assert recalled is not None and "old boathouse stairs" in recalled
    assert parts.upstream.sent[-1]["messages"][-1] == said("Where did we leave the kayak?")


async def test_units_of_other_sessions_come_as_they_were_said(parts: Parts) -> None:
    """Issue 52: the recall block across sessions shows its units in the order they
    were said, whatever their rank, so a later word on a subject comes after the
    earlier one; and what one session said in other words is still found."""
    await tell(
        parts,
        "trip",
        "The kayak trip is booked for the lake house in June.",
        "Our neighbour lent us two paddles for the trip.",
        "Change of plans: the kayak trip is going to the river cabin instead.",
    )
    await tell(parts, "asking", "Where is the kayak trip going?")
    recalled = block(parts.upstream.sent[-1], MEMORY_RECALL_PREFIX)
    assert recalled is not None
    assert recalled.index("lake house") < recalled.index("river cabin")


async def test_a_credential_is_never_shared_with_another_session(parts: Parts) -> None:
    """Issue 40: a password said without the word "password" is neither remembered as a
    fact nor recalled verbatim from another session of the same memory."""
    await tell(
        parts,
        "onboarding",
        "The guest wifi login is acme-guest / Lumen2025!",
        "The wifi network for guests is ACME-GUEST-5G.",
    )
    await tell(parts, "visitor", "What is the guest wifi login?")
    sent = str(parts.upstream.sent[-1]["messages"])
    assert "Lumen2025" not in sent
    assert "ACME-GUEST-5G" in sent  # what is not a secret is still shared
    memory = await parts.engine.memories.memory("t1", "team")
    assert memory is not None and all("Lumen2025" not in f.value for f in memory.facts)
