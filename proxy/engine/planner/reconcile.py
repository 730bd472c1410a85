"""What the client sent relative to the stored transcript, pure: a full-resend client is
recognised by one digest of its body, and only its new messages are hashed."""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from proxy.conversation.identity import GENESIS, Message, chain, message_hash
from proxy.conversation.tokens import token_bound
from proxy.engine.planner.agent_compaction import restarts, resumes
from proxy.sessions.records import Fingerprint, Mode, SessionMeta

__all__ = [
    "NEED_STORED_HASHES",
    "Digests",
    "Match",
    "Serialized",
    "bytes_of",
    "frame_of",
    "reconcile",
]

Kind = Literal["new", "full", "append", "fork", "side", "chapter"]
NEED_STORED_HASHES: Final = "need stored hashes"
_COMMA, _CLOSE = ord(","), ord("]")
# Conversations' bytes a process keeps, in all, with their digests: a resent conversation
# is then compared with them at memcmp's speed and only its new bytes are hashed.
KEPT_DIGESTED_BYTES = 8 << 20


def bytes_of(view: memoryview) -> bytes:
    """`bytes(view)`, not copied where the view is all of a bytes object (a door's JSON of
    its messages): a copy of 1.4 MB at 5,000 messages."""
    whole = view.obj
    if isinstance(whole, bytes) and view.c_contiguous and view.nbytes == len(whole):
        return whole
    return bytes(view)


class Digests:
    """Fingerprints this process took lately, each with the bytes it digests and the hash's
    state after them, the latest `kept_bytes` of them (a cache of a pure function, checked
    byte for byte on every use)."""

    def __init__(self, kept_bytes: int = KEPT_DIGESTED_BYTES) -> None:
        self._kept_bytes = kept_bytes
        self._bytes = 0
        self._known: OrderedDict[str, tuple[memoryview, Any, int]] = OrderedDict()

    def taken(self, digest: str, data: bytes, start: int, length: int) -> Any | None:
        """A copy of the hash's state after data[start:start + length], if those are the
        bytes `digest` was taken of here lately (compared at memcmp's speed)."""
        known = self._known.get(digest)
        if known is None or len(known[0]) != length or not data.startswith(known[0], start):
            return None
        self._known.move_to_end(digest)
        return known[1].copy()

    def keep(self, digest: str, data: memoryview, hasher: Any) -> None:
        if digest in self._known:
            self._known.move_to_end(digest)
            return
        held = memoryview(data.obj).nbytes  # the whole buffer `data` views stays alive
        self._known[digest] = data, hasher.copy(), held
        self._bytes += held
        while self._bytes > self._kept_bytes and len(self._known) > 1:
            _, (_, _, dropped) = self._known.popitem(last=False)
            self._bytes -= dropped


class Serialized:
    """A request's messages serialized once by orjson, the conversation's prefixes digested
    without copying, so each byte is hashed once (and a prefix `digests` knows, not even
    once)."""

    __slots__ = ("_conversation", "_digests", "_hasher", "_position", "whole")

    def __init__(
        self,
        messages: list[Any],
        system: int = 0,
        digests: Digests | None = None,
        written: memoryview | None = None,
    ) -> None:
        self._digests = digests
        # `written`: the messages as the client sent them, where that is orjson's JSON.
        self.whole = bytes_of(written) if written is not None else orjson.dumps(messages)
        # The conversation's own array is "[" + the bytes after the system items.
        skip = len(orjson.dumps(messages[:system])) if system else 1
        self._conversation = memoryview(self.whole)[skip:]
        # SHA-256: with the CPU's SHA extensions it hashes 1.5 GB/s here, BLAKE2b 0.6.
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
        end = len(self) - 1
        digest = self.digest(end)
        if self._digests is not None:
            self._digests.keep(digest, self._conversation[: end - 1], self._hasher)
        return Fingerprint(count, len(self), digest, head)

    def starts_with(self, fingerprint: Fingerprint) -> bool:
        """Whether the first `fingerprint.count` messages are the bytes it was taken of (JSON
        values delimit themselves: equal bytes up to a `,` or `]` are equal messages)."""
        end = fingerprint.length - 1
        if end < 1 or len(self) <= end or self._conversation[end - 1] not in (_COMMA, _CLOSE):
            return False
        if self._digests is not None and self._position == 1:
            skip = len(self.whole) - len(self._conversation)
            known = self._digests.taken(fingerprint.digest, self.whole, skip, end - 1)
            if known is not None:
                self._hasher, self._position = known, end
                return True
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
    """Merge the conversation (its system messages split off) into the session as `mode` says;
    `NEED_STORED_HASHES` where only `stored_hashes` can tell an edit from a new turn."""
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
    # The stored conversation is a prefix of this one: append the tail.
    if len(hashes) >= known and running[known - 1] == meta.head:
        return Match("full", meta.length, known, hashes[known:], meta.head)
    # It does not go on, and comes in another frame from a client that resends: an agent's
    # side request (a title, a quota check), answered and never stored.
    if _other_frame(meta, mode, frame):
        if mode == "auto" and meta.resent and resumes(conversation[1:]):
            # Codex compacted: its first messages kept, then its summary, and its
            # context in another order (another frame): a new chapter.
            return Match("chapter", meta.length, 0, hashes, meta.head)
        return _beside(meta, conversation, hashes)
    same_frame = bool(meta.frame) and frame == meta.frame
    # No shared first message, in the same frame, from a client that resent its history:
    # its new turn, or, opening with a summary (Claude Code's /compact), a new chapter.
    if hashes[0] != meta.first and mode == "auto" and meta.resent and same_frame:
        if not restarts(conversation):
            return Match("append", meta.length, 0, hashes, meta.head)
        return Match("chapter", meta.length, 0, hashes, meta.head)
    # No shared first message: only the new turn was sent (but in full mode, everything).
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
    # An edit of history: fork at the common prefix (in full mode, even an empty one).
    return Match("fork", origin + k, k, hashes[k:], running[k - 1] if k else meta.origin_head)


def _other_frame(meta: SessionMeta, mode: Mode, frame: str) -> bool:
    """The request comes with other system messages or tools than the resent
    conversation's latest turn."""
    return _resends(meta, mode) and bool(meta.frame) and bool(frame) and frame != meta.frame


def _beside(meta: SessionMeta, conversation: list[Message], hashes: list[str]) -> Match:
    """A request in another frame that does not go on from the conversation goes beside it, even
    if it opens with the same words, unless the session holds only a shorter one-shot."""
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
