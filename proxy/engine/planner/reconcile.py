"""Reconcile: what did the client send, relative to the stored transcript?

Pure. A full-resend client (the SDK default) is recognised by its fingerprint: the bytes
of what it sent last time are a prefix of what it sends now, checked with one digest over
the serialized body (C speed), so only the messages after that prefix are hashed in
Python. Without a usable fingerprint the messages are hashed one by one and compared with
the stored hash chain; telling an edit from a new turn may then need the stored hashes,
which `reconcile` asks for by returning `NEED_STORED_HASHES`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from proxy.conversation.identity import GENESIS, Message, chain, message_hash
from proxy.conversation.tokens import token_bound
from proxy.engine.planner.agent_compaction import restarts, resumes
from proxy.sessions.records import Fingerprint, Mode, SessionMeta

__all__ = ["NEED_STORED_HASHES", "Match", "Serialized", "frame_of", "reconcile"]

Kind = Literal["new", "full", "append", "fork", "side", "chapter"]
NEED_STORED_HASHES: Final = "need stored hashes"
_COMMA, _CLOSE = ord(","), ord("]")


class Serialized:
    """A request's messages serialized once by orjson: the array as sent upstream when
    nothing is cut (`whole`), and, within it, the conversation after the leading system
    messages, whose prefixes are digested without copying (hashing a prefix and then
    the rest reads each byte once). SHA-256: with the CPU's SHA extensions it hashes
    1.5 GB/s here, BLAKE2b 0.6."""

    __slots__ = ("_conversation", "_hasher", "_position", "whole")

    def __init__(self, messages: list[Any], system: int = 0) -> None:
        self.whole = orjson.dumps(messages)
        # The conversation's own array is "[" + the bytes after the system items.
        skip = len(orjson.dumps(messages[:system])) if system else 1
        self._conversation = memoryview(self.whole)[skip:]
        self._hasher = hashlib.sha256(b"[")
        self._position = 1

    def __len__(self) -> int:
        """Bytes of the conversation's own array."""
        return 1 + len(self._conversation)

    def digest(self, end: int) -> str:
        """Digest of the conversation array's first `end` bytes."""
        if end < self._position:
            self._hasher, self._position = hashlib.sha256(b"["), 1
        self._hasher.update(self._conversation[self._position - 1 : end - 1])
        self._position = end
        return self._hasher.copy().hexdigest()

    def token_bound(self) -> int:
        """A bound on the conversation's tokens by any counter (`token_bound`)."""
        return token_bound(self.whole, len(self.whole) - len(self._conversation))

    def fingerprint(self, count: int, head: str) -> Fingerprint:
        """The fingerprint of this whole conversation of `count` messages."""
        return Fingerprint(count, len(self), self.digest(len(self) - 1), head)

    def starts_with(self, fingerprint: Fingerprint) -> bool:
        """Whether the first `fingerprint.count` messages are byte-identical to those the
        fingerprint was taken of. JSON values are self-delimiting, so equal bytes up to a
        `,` or `]` mean equal messages."""
        end = fingerprint.length - 1
        if end < 1 or len(self) <= end or self._conversation[end - 1] not in (_COMMA, _CLOSE):
            return False
        return self.digest(end) == fingerprint.digest


# Claude Code's first system block carries a billing line whose version suffix follows the
# conversation's first message: it changes when the agent compacts, the frame must not.
_BILLING = re.compile(rb"x-anthropic-billing-header:[^\"\\]*")


def frame_of(system_json: bytes, tools_json: bytes) -> str:
    """A turn's frame: the digest of its system messages and tools (their orjson bytes),
    which an agent keeps for its conversation and changes for its side requests."""
    digest = hashlib.sha256(_BILLING.sub(b"", system_json))
    digest.update(tools_json)
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Match:
    """The transcript becomes stored[:kept] + conversation[start:]; when `whole`,
    conversation[i] is transcript[origin + i]."""

    kind: Kind
    kept: int  # stored messages the transcript keeps
    start: int
    hashes: list[str]  # of conversation[start:]
    head: str  # chain value after stored[:kept]

    @property
    def whole(self) -> bool:
        """The client sent its whole conversation (transcript[origin:] and what is new)."""
        return self.kind not in ("append", "side")

    @property
    def origin(self) -> int:
        """Where the client's conversation starts in the transcript (when `whole`)."""
        return self.kept - self.start


def reconcile(
    meta: SessionMeta | None,
    conversation: list[Message],
    mode: Mode,
    serialized: Serialized | None,
    stored_hashes: list[str] | None = None,
    frame: str = "",
) -> Match | str:
    """Merge the conversation (system messages already split off) into the session.

    auto:   the stored transcript T is a prefix of C: append the tail; C shares a
            non-empty prefix k with T then differs or ends: fork at k; no shared first
            message: C is only the new turn, append all of it.
    append: always append all of C.
    full:   C is the whole conversation: append the tail if T is a prefix of C, else
            fork at the common prefix (which may be empty).
    side:   (auto and full) C does not go on from T, comes with other system messages
            or tools than T's latest turn (`frame`), and T is known to be a full-resend
            conversation: an agent's side request (a title, a quota check)
            under the same session id. It is answered and never stored, unless the
            session holds only a one-shot (one exchange that asked for nothing more,
            `settled` false) and C is longer: the conversation that continues replaces it,
            whichever arrived first.
    chapter: (auto) C shares no first message with T, comes in T's frame, T's client
            resent its earlier messages last time (`resent`), and C opens with a summary
            (`agent_compaction.restarts`): the client compacted its own history (Claude
            Code's /compact) and goes on from its own summary. C is stored after T, which
            stays; from then on C is the conversation (`SessionMeta.origin`). Also C
            that keeps T's first messages but then opens with an agent's own summary
            (Codex: `agent_compaction.resumes`), which would otherwise fork T away, or
            be beside T (Codex reorders its context when it compacts: another frame).
    An empty C never changes the session. `stored_hashes` (T's hashes from its origin, up
    to len(C)) is needed only to tell an edit from a new turn; without it that case
    returns `NEED_STORED_HASHES`.
    """
    if meta is None or meta.length == 0:
        return Match("new", 0, 0, [message_hash(m) for m in conversation], GENESIS)
    if not conversation:  # nothing to add: the stored transcript stands as it is
        return Match("append", meta.length, 0, [], meta.head)
    if mode == "append":
        return Match("append", meta.length, 0, [message_hash(m) for m in conversation], meta.head)
    fingerprint = meta.fingerprint
    if (
        fingerprint is not None
        and serialized is not None
        and len(conversation) >= fingerprint.count
        and serialized.starts_with(fingerprint)
    ):
        match = _after_fingerprint(meta, fingerprint, conversation)
        if match.kind == "full" or len(conversation) > fingerprint.count:
            return match  # it goes on, or edits the reply and goes on: this conversation
        if not _other_frame(meta, mode, frame):
            return match
        return _beside(meta, conversation, [message_hash(m) for m in conversation])
    hashes = [message_hash(m) for m in conversation]
    origin = meta.origin
    running = chain(hashes, start=meta.origin_head)
    known = meta.length - origin  # the client's conversation, as stored
    if len(hashes) >= known and running[known - 1] == meta.head:
        return Match("full", meta.length, known, hashes[known:], meta.head)
    if _other_frame(meta, mode, frame):
        if mode == "auto" and meta.resent and resumes(conversation[1:]):
            # Codex compacted: its first messages kept, then its summary, and its
            # context in another order (another frame): a new chapter.
            return Match("chapter", meta.length, 0, hashes, meta.head)
        return _beside(meta, conversation, hashes)
    same_frame = bool(meta.frame) and frame == meta.frame
    if hashes[0] != meta.first and mode == "auto" and meta.resent and same_frame:
        if not restarts(conversation):
            return Match("append", meta.length, 0, hashes, meta.head)
        return Match("chapter", meta.length, 0, hashes, meta.head)
    if mode != "full" and hashes[0] != meta.first:
        return Match("append", meta.length, 0, hashes, meta.head)
    if stored_hashes is None:
        return NEED_STORED_HASHES
    k = _common_prefix(stored_hashes, hashes)
    if k == 0 and mode != "full":
        return Match("append", meta.length, 0, hashes, meta.head)
    if mode == "auto" and meta.resent and resumes(conversation[k:]):
        # Codex keeps its first messages when it compacts: not an edit, a new chapter.
        return Match("chapter", meta.length, 0, hashes, meta.head)
    return Match("fork", origin + k, k, hashes[k:], running[k - 1] if k else meta.origin_head)


def _other_frame(meta: SessionMeta, mode: Mode, frame: str) -> bool:
    """The request comes with other system messages or tools than the resent
    conversation's latest turn."""
    return _resends(meta, mode) and bool(meta.frame) and bool(frame) and frame != meta.frame


def _beside(meta: SessionMeta, conversation: list[Message], hashes: list[str]) -> Match:
    """A request in another frame that does not go on from the conversation: beside it,
    even when it opens with the same words (a title of the first message must not fork
    the session), unless the session holds only a one-shot and this conversation is
    longer: then the one-shot yields."""
    if not meta.settled and len(conversation) > meta.length - meta.origin:
        return Match("fork", meta.origin, 0, hashes, meta.origin_head)
    return Match("side", meta.length, len(conversation), [], meta.head)


def _resends(meta: SessionMeta, mode: Mode) -> bool:
    """The session's client sends its whole conversation every time."""
    return mode == "full" or meta.fingerprint is not None


def _after_fingerprint(
    meta: SessionMeta, fingerprint: Fingerprint, conversation: list[Message]
) -> Match:
    """conversation[:count] is known to equal the transcript's; compare the rest with the
    stored tail (the reply, usually) by hash."""
    count = fingerprint.count
    rest = [message_hash(m) for m in conversation[count:]]
    k = _common_prefix(list(meta.tail), rest)
    if k == len(meta.tail):
        return Match("full", meta.length, count + k, rest[k:], meta.head)
    head = chain(rest[:k], start=fingerprint.head)[-1] if k else fingerprint.head
    return Match("fork", meta.origin + count + k, count + k, rest[k:], head)


def _common_prefix(left: list[str], right: list[str]) -> int:
    k = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        k += 1
    return k
