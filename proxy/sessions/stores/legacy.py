"""Sessions written by release 0.1, converted to the append-only layout on first read.

Release 0.1 stored a session as one JSON value (disk) or as a list of entries plus a
hash of fields (Redis), with `{"message", "hash", "tokens"}` entries and checkpoints
without token sums. Conversion checks the stored hash chain, then computes what this
layout keeps: each message's hash (now serialized by orjson, which writes a few floats
differently), its chain value, token totals, and each checkpoint's tokens before it.
"""

from __future__ import annotations

from typing import Any

from proxy.conversation.identity import GENESIS, chain_hash, message_hash
from proxy.sessions.records import Checkpoint, SessionMeta, StoredMessage

__all__ = ["convert"]


def convert(data: dict[str, Any]) -> tuple[SessionMeta, list[StoredMessage], list[Checkpoint]]:
    """(meta, messages, checkpoints) of a 0.1 session dict (`Session.to_dict()`)."""
    old = GENESIS
    for entry in data["transcript"]:
        old = chain_hash(old, entry["hash"])
    if old != data["head"]:
        raise ValueError("stored session's hash chain does not match its head")
    messages: list[StoredMessage] = []
    head = GENESIS
    for entry in data["transcript"]:
        digest = message_hash(entry["message"])
        head = chain_hash(head, digest)
        messages.append(StoredMessage(entry["message"], digest, head, dict(entry["tokens"])))
    # A total is known for a tokenizer only if it counted every message.
    counters = set.intersection(*(set(m.tokens) for m in messages)) if messages else set()
    running = {name: [0] for name in counters}
    for message in messages:
        for name in counters:
            running[name].append(running[name][-1] + message.tokens[name])
    checkpoints = [
        Checkpoint(
            covers_until=item["covers_until"],
            chain_hash=messages[item["covers_until"] - 1].chain
            if item["covers_until"]
            else GENESIS,
            segments=(item["text"],),
            tokens=item["tokens"],
            model=item["model"],
            created=item["created"],
            before={name: sums[item["covers_until"]] for name, sums in running.items()},
        )
        for item in sorted(data["checkpoints"], key=lambda c: c["covers_until"])
        if 0 < item["covers_until"] <= len(messages)
    ]
    meta = SessionMeta(
        tenant=data["tenant"],
        session_id=data["session_id"],
        version=data["version"],
        length=len(messages),
        head=head,
        first=messages[0].hash if messages else "",
        totals={name: sums[-1] for name, sums in running.items()},
        checkpoint=checkpoints[-1] if checkpoints else None,
        checkpoints=len(checkpoints),
        created=data["created"],
        updated=data["updated"],
    )
    return meta, messages, checkpoints
