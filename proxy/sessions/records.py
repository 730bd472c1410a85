"""Sessions: the stored conversation as an append-only log plus a small meta record.

A store keeps, per session, its messages one entry each (never rewritten), its summary
checkpoints, and a `SessionMeta`: what every request reads. The meta is enough to
answer the common questions without touching the messages: how long the transcript
is, its hash-chain head, its token totals, the latest summary, and the fingerprint of
what a full-resend client sent last time, so its next request is recognised by one
C-speed pass over the body rather than a Python walk over the history.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import orjson

from proxy.concurrency import MANY_MESSAGES
from proxy.conversation.identity import GENESIS, Message
from proxy.costs.receipts import Receipt
from proxy.costs.usage import Usage
from proxy.facts.ledger import Fact
from proxy.summary.message import summary_text

__all__ = [
    "CAS_ATTEMPTS",
    "COMMIT_GRACE_SECONDS",
    "COMMIT_SECONDS",
    "PLANS_KEPT",
    "Checkpoint",
    "Commit",
    "Fingerprint",
    "Inserts",
    "LateCommit",
    "LockName",
    "Mode",
    "SessionMeta",
    "StoredMessage",
    "parsed",
    "serialized",
    "tenant_id",
]

# A session's locks: one background summary at a time, one turn at a time.
LockName = Literal["summary", "turn"]
Mode = Literal["auto", "append", "full"]
SessionKey = tuple[str, str]  # (tenant, session id)
# Plan records (`proxy.engine.records`) a store keeps per session: the newest ones.
PLANS_KEPT = 200
# Compare-and-set attempts before a writer gives up on a session others keep changing.
CAS_ATTEMPTS = 8
# A commit applies within this many seconds of being made, or never: a store that gets to
# it later (Redis frozen, SQLite's lock held by another process) refuses it (fencing).
# The writer waits COMMIT_GRACE_SECONDS more for the answer, so it never gives up on a
# commit that could still apply.
COMMIT_SECONDS = 4.0
COMMIT_GRACE_SECONDS = 1.0
_PARSE_BYTES = 1 << 20  # entries read back beyond this are parsed in a worker thread
R = TypeVar("R")

logger = logging.getLogger("context_proxy.stores")


class LateCommit(TimeoutError):
    """A commit the store got to after its deadline: refused, never applied."""


@dataclass(slots=True)
class StoredMessage:
    """A message exactly as the client sent it, its content hash, the chain value after
    it, and its token count per tokenizer."""

    message: Message
    hash: str
    chain: str
    tokens: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "hash": self.hash,
            "chain": self.chain,
            "tokens": self.tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoredMessage:
        return cls(data["message"], data["hash"], data.get("chain", ""), dict(data["tokens"]))


@dataclass(slots=True, frozen=True)
class Checkpoint:
    """Summary of transcript[:covers_until]; chain_hash pins the exact prefix it covers,
    `before` holds that prefix's token count per tokenizer. The summary is append-only
    `segments` (a fold adds one and leaves the earlier ones byte-identical, so a prompt
    cache keeps them) and the facts `pinned` after them (`text`). Its archive, the recall index
    of the span it folded and the facts ledger as of its end, is stored in the
    checkpoint's own entry, not in the meta record every request reads
    (`proxy.engine.archive`)."""

    covers_until: int
    chain_hash: str
    segments: tuple[str, ...]
    tokens: int
    model: str
    created: float
    before: dict[str, int] = field(default_factory=dict)
    index: dict[str, Any] | None = None  # `proxy.recall.index.segment` of the folded span
    ledger: tuple[Fact, ...] | None = None
    pinned: tuple[str, ...] = ()
    # The agent's context that rode in the folded first user message (Claude Code's
    # `<system-reminder>`, Codex's AGENTS.md and environment blocks): sent with the
    # summary, like the system prompt.
    kept: tuple[str, ...] = ()
    # What the summarizer's calls that made it used, as the provider reported it.
    usage: Usage | None = None
    # The tool results after `covers_until` sent as stubs while this summary is the
    # latest (transcript positions, ascending; `proxy.engine.planner.stubs`), the tokens their
    # stubs save per tokenizer, and their recall index (part of the archive).
    stubbed: tuple[int, ...] = ()
    stubs_saved: dict[str, int] = field(default_factory=dict)
    stubs_index: dict[str, Any] | None = None
    # The summary as the model reads it (segments, then pinned facts): joined once, as
    # every request of the session sends it.
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", summary_text(self.segments, self.pinned))

    def to_dict(self, archive: bool = True) -> dict[str, Any]:
        data = {
            "covers_until": self.covers_until,
            "chain_hash": self.chain_hash,
            "segments": self.segments,
            "tokens": self.tokens,
            "model": self.model,
            "created": self.created,
        }
        if self.pinned:
            data["pinned"] = self.pinned
        if self.before:
            data["before"] = self.before
        if self.kept:
            data["kept"] = self.kept
        if self.usage is not None:
            data["usage"] = self.usage.to_dict()
        if self.stubbed:
            data["stubbed"] = self.stubbed
            data["stubs_saved"] = self.stubs_saved
        if archive and self.stubs_index is not None:
            data["stubs_index"] = self.stubs_index
        if archive and self.index is not None:
            data["index"] = self.index
        if archive and self.ledger is not None:
            data["ledger"] = [fact.to_list() for fact in self.ledger]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        data = dict(data)
        ledger = data.pop("ledger", None)
        # Stored before segments: one text, pinned facts inside it.
        text = data.pop("text", None)
        segments = data.pop("segments", None)
        if segments is None:
            segments = [text] if text is not None else []
        pinned = data.pop("pinned", ())
        kept = data.pop("kept", ())
        usage = data.pop("usage", None)
        stubbed = data.pop("stubbed", ())
        return cls(
            **{"before": {}, **data},
            segments=tuple(segments),
            pinned=tuple(pinned),
            kept=tuple(kept),
            usage=Usage(**usage) if usage else None,
            stubbed=tuple(stubbed),
            ledger=tuple(Fact.from_list(f) for f in ledger) if ledger is not None else None,
        )

    def without_archive(self) -> Checkpoint:
        return replace(self, index=None, ledger=None, stubs_index=None)


@dataclass(slots=True, frozen=True)
class Fingerprint:
    """What a full-resend client sent last time: its first `count` conversation messages
    (= transcript[:count]) serialized by orjson are `length` bytes, whose digest without
    the closing bracket is `digest`; `head` is the chain value after them."""

    count: int
    length: int
    digest: str
    head: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "length": self.length,
            "digest": self.digest,
            "head": self.head,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        return cls(**data)


@dataclass(slots=True, frozen=True)
class Inserts:
    """The blocks a session's latest turn sent beside its verbatim window, kept with the
    session so that its next turn, whichever process serves it, sends them byte for
    byte while they still apply (a provider's prompt cache keeps the prefix up to
    them): the memory block after the system prompt with `memory_from`, the digest of
    the facts and room it was chosen from; the recall block with the transcript index
    it went before, its tokens, the units it shows (each with the terms its excerpt is
    around, or None: whole) and the archive it was chosen from (`recall_archive`: the
    checkpoint count and its chain value)."""

    memory: Message | None = None
    memory_from: str = ""
    recall: Message | None = None
    recall_before: int = 0
    recall_tokens: int = 0
    recall_shown: dict[int, tuple[str, ...] | None] = field(default_factory=dict)
    recall_archive: tuple[int, str] = (0, GENESIS)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "memory": self.memory,
                "memory_from": self.memory_from,
                "recall": self.recall,
                "recall_before": self.recall_before,
                "recall_tokens": self.recall_tokens,
                "recall_shown": [[start, terms] for start, terms in self.recall_shown.items()],
                "recall_archive": list(self.recall_archive),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Inserts:
        parsed = orjson.loads(data)
        shown = {
            int(start): tuple(terms) if terms is not None else None
            for start, terms in parsed["recall_shown"]
        }
        count, head = parsed["recall_archive"]
        return cls(
            memory=parsed["memory"],
            memory_from=parsed["memory_from"],
            recall=parsed["recall"],
            recall_before=parsed["recall_before"],
            recall_tokens=parsed["recall_tokens"],
            recall_shown=shown,
            recall_archive=(int(count), str(head)),
        )

    def digest(self) -> str:
        """What `SessionMeta.inserts` holds: names these blocks, and no others."""
        return hashlib.blake2b(self.to_json(), digest_size=16).hexdigest()


@dataclass(slots=True, frozen=True)
class SessionMeta:
    """Everything about a session but its messages and older checkpoints."""

    tenant: str
    session_id: str
    version: int = 0
    length: int = 0
    head: str = GENESIS
    first: str = ""  # hash of transcript[0]: tells a new turn from an edited history
    totals: dict[str, int] = field(default_factory=dict)  # tokens of the transcript
    checkpoint: Checkpoint | None = None  # the latest summary
    checkpoints: int = 0  # how many summaries are stored, the latest included
    fingerprint: Fingerprint | None = None
    tail: tuple[str, ...] = ()  # hashes of transcript[fingerprint.count:length]
    frame: str = ""  # digest of the latest turn's system messages and tools (`frame`)
    # False while the transcript is one exchange that asked for nothing more (a title, a
    # quota check): such a one-shot yields the session to a conversation that continues.
    settled: bool = True
    # The client's last turn resent earlier messages: it sends its whole conversation.
    resent: bool = False
    # Where the client's conversation starts in the transcript: after a client compacts
    # its own history (Claude Code's /compact), it resends a new, shorter conversation,
    # stored after the old one (which stays: recalled, shown) as a chapter of its own.
    origin: int = 0
    origin_head: str = GENESIS  # the chain value before transcript[origin]
    origin_totals: dict[str, int] = field(default_factory=dict)  # tokens before it
    # How far the provider's count of what a turn sent is from ours, per model (the
    # provider's prompt tokens / our estimate, smoothed over the session's turns): the
    # budget of the session's next turn is divided by it where we undercount.
    calibration: dict[str, float] = field(default_factory=dict)
    # The digest of the blocks the latest turn sent beside its window (`Inserts`, stored
    # beside the meta); "" for none.
    inserts: str = ""
    created: float = 0.0
    updated: float = 0.0
    # The session's money so far and what its next turn's counterfactual needs
    # (`proxy.costs.receipts`): written with each turn's commit.
    receipt: Receipt = field(default_factory=Receipt)

    def evolve(self, **changes: Any) -> SessionMeta:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """As stored, rewritten by every turn: the fields every release reads, then only
        those that differ from what `from_dict` reads when absent (as it has since each
        was added), down to the receipt's."""
        data = {
            "tenant": self.tenant,
            "session_id": self.session_id,
            "version": self.version,
            "length": self.length,
            "head": self.head,
            "first": self.first,
            "totals": self.totals,
            "checkpoints": self.checkpoints,
            "tail": list(self.tail),
            "created": self.created,
            "updated": self.updated,
        }
        optional = {
            "checkpoint": self.checkpoint.to_dict(archive=False) if self.checkpoint else None,
            "fingerprint": self.fingerprint.to_dict() if self.fingerprint else None,
            "frame": self.frame,
            "settled": self.settled,
            "resent": self.resent,
            "origin": self.origin,
            "origin_head": self.origin_head,
            "origin_totals": self.origin_totals,
            "calibration": self.calibration,
            "inserts": self.inserts,
            "receipt": _unlike(self.receipt.to_dict(), _RECEIPT),
        }
        data.update(_unlike(optional, _ABSENT))
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionMeta:
        checkpoint, fingerprint = data.get("checkpoint"), data.get("fingerprint")
        return cls(
            tenant=data["tenant"],
            session_id=data["session_id"],
            version=data["version"],
            length=data["length"],
            head=data["head"],
            first=data["first"],
            totals=dict(data["totals"]),
            checkpoint=Checkpoint.from_dict(checkpoint) if checkpoint else None,
            checkpoints=data["checkpoints"],
            fingerprint=Fingerprint.from_dict(fingerprint) if fingerprint else None,
            tail=tuple(data["tail"]),
            frame=data.get("frame", ""),
            settled=data.get("settled", True),
            resent=data.get("resent", False),
            origin=data.get("origin", 0),
            origin_head=data.get("origin_head", GENESIS),
            origin_totals=dict(data.get("origin_totals", {})),
            calibration=dict(data.get("calibration", {})),
            inserts=data.get("inserts", ""),
            created=data["created"],
            updated=data["updated"],
            receipt=Receipt.from_dict(data.get("receipt")),
        )


# What `SessionMeta.from_dict` reads for an optional field that is absent, and the
# receipt's own defaults.
_ABSENT: dict[str, Any] = {
    "checkpoint": None,
    "fingerprint": None,
    "frame": "",
    "settled": True,
    "resent": False,
    "origin": 0,
    "origin_head": GENESIS,
    "origin_totals": {},
    "calibration": {},
    "inserts": "",
    "receipt": {},
}
_RECEIPT = Receipt().to_dict()


def _unlike(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`data` without the fields whose value is their default."""
    return {key: value for key, value in data.items() if value != defaults[key]}


@dataclass(slots=True, frozen=True)
class Commit:
    """One turn's write, compare-and-set on the version (0 = absent): the transcript
    becomes its first `keep` messages plus `appended` (so `meta.length == keep +
    len(appended)`), the checkpoints their first `meta.checkpoints - len(checkpoints)`
    plus `checkpoints`, the meta `meta`; the turn's plan record (`plan`) joins the
    session's newest `PLANS_KEPT`; the session's `Inserts` become `inserts`, where given
    (`meta.inserts` its digest); once stored, the turn lock held by the token `release`
    (if given) is given back with it."""

    meta: SessionMeta
    expected_version: int
    keep: int
    appended: Sequence[StoredMessage]
    checkpoints: Sequence[Checkpoint] = ()
    release: str | None = None
    plan: bytes | None = None
    inserts: bytes | None = None


class ParsedMetas:
    """Meta records parsed from their stored bytes, remembered by those bytes: a session's
    next request usually reads back exactly what its last one wrote, and parsing it again
    (JSON, then the dataclasses) is the larger part of a load. The records are immutable
    in use (`evolve` copies), so one parse can serve every request that reads the same
    bytes."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._metas: OrderedDict[bytes, SessionMeta] = OrderedDict()

    def __call__(self, data: bytes) -> SessionMeta:
        meta = self._metas.get(data)
        if meta is None:
            return self.remember(data, SessionMeta.from_dict(orjson.loads(data)))
        self._metas.move_to_end(data)
        return meta

    def listed(self, records: Iterable[bytes]) -> list[SessionMeta]:
        """The sessions a listing shows: a damaged record (not JSON, a field missing) is
        left out and logged, so one record awaiting repair does not hide every other
        session; its own routes answer 503 for it."""
        metas = []
        for data in records:
            try:
                metas.append(self(data))
            except (ValueError, LookupError, TypeError) as exc:
                logger.warning("a session list left out a damaged record: %s", type(exc).__name__)
        return metas

    def remember(self, data: bytes, meta: SessionMeta) -> SessionMeta:
        """`meta` is what `data` says (a store just wrote it), kept as `data` says it:
        without its summary's archive (the fold's recall index and facts ledger, which
        the record leaves to the checkpoint's own entry). A summary made here carries it,
        and each remembered record would keep a fold's index alive."""
        found = meta.checkpoint
        archive = (found.index, found.ledger, found.stubs_index) if found else (None, None, None)
        if found is not None and archive != (None, None, None):
            meta = meta.evolve(checkpoint=found.without_archive())
        self._metas[data] = meta
        if len(self._metas) > self._size:
            self._metas.popitem(last=False)
        return meta


async def serialized(items: Sequence[StoredMessage | Checkpoint]) -> list[bytes]:
    """Messages or checkpoints as JSON, in a worker thread when there are many (the
    first request of a long conversation stores all of it)."""
    if len(items) > MANY_MESSAGES:
        return await asyncio.to_thread(lambda: [orjson.dumps(i.to_dict()) for i in items])
    return [orjson.dumps(item.to_dict()) for item in items]


async def parsed(values: Sequence[bytes], reader: Callable[[dict[str, Any]], R]) -> list[R]:
    """Stored entries read back (`reader`: a record's `from_dict`), in a worker thread when
    they are many or large (a window of thousands of messages, a summary's archive): on
    the event loop, the 87,381 messages of one turn took ~0.5 s to parse."""

    def parse() -> list[R]:
        return [reader(orjson.loads(value)) for value in values]

    if len(values) > MANY_MESSAGES or sum(map(len, values)) > _PARSE_BYTES:
        return await asyncio.to_thread(parse)
    return parse()


def tenant_id(bearer_token: str | None, secret: bytes) -> str:
    """Stable tenant key derived from the bearer token; the token itself is never stored.

    The result never contains ":", so "tenant:session" store keys cannot collide.
    """
    if not bearer_token:
        return "anonymous"
    return hmac.new(secret, bearer_token.encode(), hashlib.sha256).hexdigest()[:32]
