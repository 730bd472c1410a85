"""Sessions: the stored conversation, its summary checkpoints, and reconcile.

`reconcile` works out what a client sent relative to the stored transcript
(full resend, only the new turn, or an edit/regenerate) and returns a new
Session.  It is pure; persistence goes through a `SessionStore`.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from proxy.messages import GENESIS, chain, message_hash, split_system

__all__ = [
    "Checkpoint",
    "ConflictError",
    "Kind",
    "Mode",
    "Reconciled",
    "Session",
    "SessionStore",
    "StoredMessage",
    "reconcile",
    "tenant_id",
]

Mode = Literal["auto", "append", "full"]
Kind = Literal["new", "full", "append", "fork"]


class ConflictError(Exception):
    """Another request updated the session first (compare-and-set failed)."""


@dataclass(slots=True)
class StoredMessage:
    """A message exactly as the client sent it, plus cached token counts per tokenizer."""

    message: dict[str, Any]
    hash: str
    tokens: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "hash": self.hash, "tokens": self.tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoredMessage:
        return cls(data["message"], data["hash"], dict(data.get("tokens") or {}))


@dataclass(slots=True, frozen=True)
class Checkpoint:
    """Summary of transcript[:covers_until]; chain_hash pins the exact prefix it covers."""

    covers_until: int
    chain_hash: str
    text: str
    tokens: int
    model: str
    created: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "covers_until": self.covers_until,
            "chain_hash": self.chain_hash,
            "text": self.text,
            "tokens": self.tokens,
            "model": self.model,
            "created": self.created,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        return cls(**data)


@dataclass(slots=True)
class Session:
    tenant: str
    session_id: str
    transcript: list[StoredMessage]
    head: str
    checkpoints: list[Checkpoint]
    version: int
    created: float
    updated: float

    @classmethod
    def new(cls, tenant: str, session_id: str, now: float) -> Session:
        return cls(tenant, session_id, [], GENESIS, [], 0, now, now)

    def latest_checkpoint(self) -> Checkpoint | None:
        """The checkpoint covering the most history, if any."""
        return max(self.checkpoints, key=lambda c: c.covers_until, default=None)

    def hashes(self) -> list[str]:
        return [stored.hash for stored in self.transcript]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "session_id": self.session_id,
            "transcript": [stored.to_dict() for stored in self.transcript],
            "head": self.head,
            "checkpoints": [checkpoint.to_dict() for checkpoint in self.checkpoints],
            "version": self.version,
            "created": self.created,
            "updated": self.updated,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Session:
        return cls(
            tenant=data["tenant"],
            session_id=data["session_id"],
            transcript=[StoredMessage.from_dict(item) for item in data["transcript"]],
            head=data["head"],
            checkpoints=[Checkpoint.from_dict(item) for item in data["checkpoints"]],
            version=data["version"],
            created=data["created"],
            updated=data["updated"],
        )


@dataclass(slots=True)
class Reconciled:
    """Result of reconcile: the new session and what happened to it."""

    session: Session
    system: list[dict[str, Any]]
    kind: Kind
    fork_at: int | None
    added: int

    @property
    def changed(self) -> bool:
        return self.kind in ("new", "fork") or self.added > 0


class SessionStore(Protocol):
    async def get(self, tenant: str, session_id: str) -> Session | None: ...

    async def put(self, session: Session, expected_version: int) -> bool:
        """Compare-and-set: store only if the stored version is expected_version (0 = absent)."""
        ...

    async def delete(self, tenant: str, session_id: str) -> bool: ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


def tenant_id(bearer_token: str | None, secret: bytes) -> str:
    """Stable tenant key derived from the bearer token; the token itself is never stored.

    The result never contains ":", so "tenant:session" store keys cannot collide.
    """
    if not bearer_token:
        return "anonymous"
    return hmac.new(secret, bearer_token.encode(), hashlib.sha256).hexdigest()[:32]


def reconcile(
    session: Session | None,
    incoming: list[dict[str, Any]],
    mode: Mode = "auto",
    *,
    tenant: str,
    session_id: str,
    now: float,
) -> Reconciled:
    """Merge an incoming request's messages into a session (see DESIGN.md section 4).

    auto:   stored transcript T is a prefix of C -> append the tail; C shares a
            non-empty prefix k with T then differs or ends -> fork at k; no shared
            first message -> C is only the new turn, append all of it.
    append: always append all of C.
    full:   C is the whole conversation: append the tail if T is a prefix,
            otherwise fork at k (k may be 0, replacing the transcript with C).
    An empty C never changes the session, in any mode.
    """
    system, conversation = split_system(incoming)
    hashes = [message_hash(message) for message in conversation]
    base = session if session is not None else Session.new(tenant, session_id, now)
    size = len(base.transcript)
    checkpoints = list(base.checkpoints)
    kind: Kind = "append"
    keep, start, prefix_head, fork_at = size, 0, base.head, None

    if conversation and mode != "append":
        running = chain(hashes)
        if size <= len(hashes) and _head_at(running, size) == base.head:
            kind, start = "full", size  # case 1: client resent the full history
        else:
            k = _common_prefix(base.hashes(), hashes)
            if k > 0 or mode == "full":  # case 2: edit / regenerate
                kind, keep, start, fork_at = "fork", k, k, k
                prefix_head = _head_at(running, k)
                checkpoints = [c for c in checkpoints if c.covers_until <= k]
            # else case 3: no shared first message, client sent only the new turn

    tail, tail_hashes = conversation[start:], hashes[start:]
    kept = [StoredMessage(m.message, m.hash, dict(m.tokens)) for m in base.transcript[:keep]]
    result = Session(
        tenant=base.tenant,
        session_id=base.session_id,
        transcript=kept + [StoredMessage(m, h) for m, h in zip(tail, tail_hashes, strict=True)],
        head=chain(tail_hashes, start=prefix_head)[-1] if tail else prefix_head,
        checkpoints=checkpoints,
        version=base.version,
        created=base.created,
        updated=base.updated,
    )
    reconciled = Reconciled(result, system, "new" if session is None else kind, fork_at, len(tail))
    if reconciled.changed:
        result.version += 1
        result.updated = now
    return reconciled


def _head_at(running: list[str], size: int) -> str:
    return running[size - 1] if size else GENESIS


def _common_prefix(left: list[str], right: list[str]) -> int:
    k = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        k += 1
    return k
