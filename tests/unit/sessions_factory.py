"""Sessions for store tests: stored messages with real hashes and chain values."""

from __future__ import annotations

from proxy.conversation.identity import GENESIS, chain, message_hash
from proxy.sessions.records import Checkpoint, Fingerprint, SessionMeta, StoredMessage

COUNTER = "o200k_base"


def entries(*texts: str, start: int = 0, head: str = GENESIS) -> list[StoredMessage]:
    """Alternating user/assistant messages, counted as 10 tokens each."""
    messages = [
        {"role": "user" if (start + i) % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(texts)
    ]
    hashes = [message_hash(m) for m in messages]
    heads = chain(hashes, start=head)
    return [
        StoredMessage(m, h, c, {COUNTER: 10})
        for m, h, c in zip(messages, hashes, heads, strict=True)
    ]


def meta(
    transcript: list[StoredMessage],
    *,
    tenant: str = "t1",
    session_id: str = "s",
    version: int = 1,
    checkpoints: list[Checkpoint] | None = None,
) -> SessionMeta:
    """The meta of a stored transcript, as the engine would write it."""
    checkpoints = checkpoints or []
    return SessionMeta(
        tenant=tenant,
        session_id=session_id,
        version=version,
        length=len(transcript),
        head=transcript[-1].chain if transcript else GENESIS,
        first=transcript[0].hash if transcript else "",
        totals={COUNTER: 10 * len(transcript)},
        checkpoint=checkpoints[-1] if checkpoints else None,
        checkpoints=len(checkpoints),
        fingerprint=Fingerprint(len(transcript) - 1, 42, "d" * 32, "h") if transcript else None,
        tail=(transcript[-1].hash,) if transcript else (),
        created=1.0,
        updated=2.0,
    )


def checkpoint(transcript: list[StoredMessage], covers: int, text: str = "summary") -> Checkpoint:
    return Checkpoint(
        covers, transcript[covers - 1].chain, (text,), 3, "m", 1.0, {COUNTER: 10 * covers}
    )
