"""A conversation's translation, kept between its requests ("translations" in
docs/architecture.md).

A client resends its whole conversation every turn. The chat door hands it to the engine
as it came, which then recognises the stored prefix at C speed (the fingerprint); a door
that speaks another API would translate every message of it, in Python, each time, and
render the window back into that API, message by message, again. So each door keeps,
for the conversations it served lately, what it made of them:

- `Translations`: the client's messages (or input items) as orjson writes them, and
  their chat form. A request whose messages begin with the kept ones (their JSON
  compared at memcmp's speed) is translated from there on only; the chat messages of
  the kept part are the same objects as before.
- `Renderings`: the latest window rendered in the door's API, turn by turn, and the
  JSON of its turns in one buffer. The engine's window holds the same chat objects from
  turn to turn (those of a kept translation, or of the stored window
  `proxy.engine.history` keeps), so the turns made from the part of the window it holds
  again, by identity, are kept as they are (their JSON copied in one piece), and the
  rest are taken by identity where they were made before (`Redrawn`): an unchanged
  conversation is neither rendered nor serialized again, and each turn is checked once
  for what LiteLLM's route would repair (`proxy.upstream.native.lean_covers`).

Both are caches of pure functions of what they are keyed by (checked on every use), so
they change no plan and hold nothing another process needs; both are bounded by the
messages they hold and by their bytes (as JSON): a client's messages are a few hundred
bytes, a hostile one's megabytes (the issue 51 fuzz's 1 MB strings and 3 MB arrays).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from proxy.conversation.identity import same_messages, shared_messages
from proxy.conversation.needles import Needles
from proxy.upstream.native import NativeApi, lean_covers, rewritten_at

__all__ = [
    "Redrawn",
    "Rendered",
    "Rendering",
    "Renderings",
    "Translation",
    "Translations",
    "Written",
    "conversation_key",
]

# Messages a door keeps, in all, of the conversations it served lately: translated, and
# rendered (a window is rendered per session, and without one, per conversation); and
# their bytes as JSON (a translation's: the client's messages and their chat form; a
# rendering's: its turns), which bind only where messages are large: the overhead
# benchmark's 5,000 messages are 1.4 MB (2.8 MB translated). Two such windows served in
# turn are each kept rendered; three are not, and then each request evicts the one
# served next, which is rendered whole on its next turn (35 ms at 5,000 messages), as a
# second such conversation served in turn is translated whole. A window of all the
# client's messages is not rendered (it goes out as the client wrote it), so the
# rendered ones are those of sessions. Parsed, a chat form weighs four to five times its
# JSON (58 MB in the doors' caches after the fuzz's megabyte bodies), so these bounds
# are the fuzz's memory after its run: 1.47-1.49x fresh with 4 MiB of each (issue 51's
# target is 1.5x), 1.53-1.56x with 6 MiB rendered, 1.6x with 8 MiB of each, and with
# translations counting both their JSONs 1.63x at 8 MiB, 1.59x at 6, 1.48x at 4.
# The latest conversation is kept whatever its size.
KEPT_TRANSLATED = 10_000
KEPT_RENDERED = 16_000
KEPT_TRANSLATED_BYTES = 4 << 20
KEPT_RENDERED_BYTES = 4 << 20

# An input item's id: the proxy gives a reply's items ids of its own, which a client
# echoes, and the provider gets its own back (`proxy.doors.responses.items.as_given`).
_ITEM_ID = re.compile(rb'"id":"')


class Written(NamedTuple):
    """A conversation as the body was parsed, and its JSON as orjson writes it, where the
    client wrote it so (`proxy.http.resends`): a view of the body, not written again."""

    conversation: list[Any]
    json: memoryview
    needles: Needles | None = None  # the body's, where counted from where it is new


# Translate native[start:] onto the end of `chat`; where a longer conversation's
# translation may resume: a native index and the chat length there.
Convert = Callable[[list[Any], int, list[dict[str, Any]]], tuple[int, int]]


def conversation_key(tenant: str, first: Any) -> bytes:
    """A conversation's key: its tenant and its first message (a different conversation
    with the same start only costs the other its kept translation)."""
    digest = hashlib.sha256(tenant.encode() + b"\0" + orjson.dumps(first))
    return digest.digest()


@dataclass(frozen=True, slots=True)
class Translation:
    json: bytes  # the messages (items) as the client sent them, as orjson writes them
    ends: list[int]  # where each message's JSON ends in `json`
    chat: list[dict[str, Any]]  # their chat form
    resume: tuple[int, int]  # where a longer conversation's translation may go on
    repaired: int  # the first message LiteLLM's route would change, or how many there are
    named: int  # the first message that may hold an id the proxy gave, or how many there are
    system: int  # the first chat message of the system's role, or -1
    chat_json: bytes  # the chat form as orjson writes it
    chat_ends: list[int]  # where each chat message's JSON ends in it

    @property
    def weight(self) -> int:
        """The bytes it holds as JSON (what the bound counts)."""
        return len(self.json) + len(self.chat_json)

    def says(self, window: list[dict[str, Any]]) -> bool:
        """Whether `window` is this translation's chat messages, all of them
        (`same_messages`), and the client named none by an id of the proxy's:
        then `json` says it in the door's API, as the client did, with nothing rendered."""
        return self.named == len(self.ends) and same_messages(window, self.chat)

    @property
    def covered(self) -> bool:
        """Whether the lean path sends `json` as LiteLLM's route would (`lean_covers`)."""
        return self.repaired == len(self.ends)

    def begins(self, data: bytes, count: int) -> bool:
        """Whether the JSON array `data` begins with this one's first `count` messages
        (JSON values delimit themselves: equal bytes up to a `,` or `]` are equal values)."""
        if count == 0:
            return True
        end = self.ends[count - 1]
        return data[end : end + 1] in (b",", b"]") and data.startswith(memoryview(self.json)[:end])


class Translations:
    """Conversations' translations from the door's API (`api`, as a native route speaks
    it), the latest `KEPT_TRANSLATED` messages' worth, and `KEPT_TRANSLATED_BYTES` of them."""

    def __init__(
        self, api: NativeApi, kept: int = KEPT_TRANSLATED, kept_bytes: int = KEPT_TRANSLATED_BYTES
    ) -> None:
        self._api = api
        self._kept, self._kept_bytes = kept, kept_bytes
        self._held = 0  # messages
        self._bytes = 0  # their JSON's
        self._known: OrderedDict[bytes, Translation] = OrderedDict()

    def chat(
        self, key: bytes, native: list[Any], convert: Convert, written: Written | None = None
    ) -> list[dict[str, Any]]:
        """`native` in chat form: the kept translation's, where `native` begins with its
        messages (compared as orjson writes them, at memcmp's speed), and `convert`'s for
        the rest; `written`, the JSON of `native` where the client's body holds it."""
        known = self._known.pop(key, None)
        if known is not None:
            self._held -= len(known.ends)
            self._bytes -= known.weight
        try:
            data = (
                bytes(written.json)
                if written and written.conversation is native
                else orjson.dumps(native)
            )
        except orjson.JSONEncodeError:  # deeper than orjson writes: refused later, not kept
            chat: list[dict[str, Any]] = []
            convert(native, 0, chat)
            return chat
        start, made = 0, 0
        if known is not None:
            at, length = known.resume
            if at <= len(native) and known.begins(data, at):
                start, made = at, length
        chat = known.chat[:made] if known is not None else []
        resume = convert(native, start, chat)
        try:
            chat_json, chat_ends = _written_on(known, made, chat)
        except orjson.JSONEncodeError:  # a chat form deeper than orjson writes: not kept
            return chat
        ends = known.ends[:start] if known is not None else []
        end = ends[-1] if ends else 0
        for message in native[start:]:  # the new messages only, at C speed each
            end += 1 + len(orjson.dumps(message))  # a `[` or `,`, then the message
            ends.append(end)
        marks = self._marks(known, (start, made), data, ends, chat)
        translation = Translation(data, ends, chat, resume, *marks, chat_json, chat_ends)
        self._known[key] = translation
        self._held += len(native)
        self._bytes += translation.weight
        while (self._held > self._kept or self._bytes > self._kept_bytes) and len(self._known) > 1:
            _, dropped = self._known.popitem(last=False)
            self._held -= len(dropped.ends)
            self._bytes -= dropped.weight
        return chat

    def written(self, key: bytes | None, messages: list[dict[str, Any]]) -> bytes | None:
        """The JSON of `messages` as orjson writes it, where they end with the chat
        messages of the conversation's kept translation (`same_messages`), after a few of the
        door's own (its system message): those written here, the rest copied."""
        translation = self._known.get(key) if key is not None else None
        if translation is None:
            return None
        chat = translation.chat
        head = len(messages) - len(chat)
        if head < 0 or not same_messages(messages[head:], chat):
            return None
        if not head:
            return translation.chat_json
        try:
            own = orjson.dumps(messages[:head])
        except orjson.JSONEncodeError:  # deeper than orjson writes: the engine refuses it
            return None
        return own[:-1] + b"," + memoryview(translation.chat_json)[1:] if chat else own

    def saying(self, key: bytes | None, window: list[dict[str, Any]]) -> Translation | None:
        """The conversation's kept translation, where `window` is its chat messages, all of
        them (`Translation.says`)."""
        translation = self._known.get(key) if key is not None else None
        return translation if translation is not None and translation.says(window) else None

    def _marks(
        self,
        known: Translation | None,
        kept: tuple[int, int],
        data: bytes,
        ends: list[int],
        chat: list[dict[str, Any]],
    ) -> tuple[int, int, int]:
        """`Translation.repaired`, `.named` and `.system`: the kept translation's, where they
        fall in its part kept (`kept`: the messages and chat messages kept), else found in
        the new ones (their JSON searched at once)."""
        start, made = kept
        offset = ends[start - 1] if start else 0
        new = memoryview(data)[offset:]

        def first(old: int | None, at: int) -> int:
            if old is not None and old < start:
                return old
            return bisect.bisect_right(ends, offset + at) if at >= 0 else len(ends)

        repaired = first(known.repaired if known else None, rewritten_at(self._api, new))
        named = len(ends)
        if self._api == "responses":  # an item's id may be the proxy's (`responses.items`)
            found = _ITEM_ID.search(new)
            named = first(known.named if known else None, found.start() if found else -1)
        if known is not None and 0 <= known.system < made:
            return repaired, named, known.system
        system = next((i for i in range(made, len(chat)) if chat[i].get("role") == "system"), -1)
        return repaired, named, system


def _written_on(
    known: Translation | None, made: int, chat: list[dict[str, Any]]
) -> tuple[bytes, list[int]]:
    """`chat` as orjson writes it, and where each message ends: the kept translation's
    first `made` messages copied from its JSON, the rest written here."""
    ends = known.chat_ends[:made] if known is not None else []
    pieces = [orjson.dumps(message) for message in chat[made:]]
    end = ends[-1] if ends else 0
    for piece in pieces:
        end += 1 + len(piece)
        ends.append(end)
    if not made or known is None:
        return b"[" + b",".join(pieces) + b"]", ends
    kept = memoryview(known.chat_json)[: known.chat_ends[made - 1]]
    return b"".join((kept, b"," if pieces else b"", b",".join(pieces), b"]")), ends


@dataclass(frozen=True, slots=True)
class Rendering:
    """What a door's renderer made of some chat messages (held, so their identities stay
    theirs); its JSON lies in its window's (`Rendered.json`), so each is held once."""

    sources: tuple[dict[str, Any], ...]
    kind: str  # how they were rendered
    repaired: bool  # LiteLLM's route would change it

    def renders(self, sources: tuple[dict[str, Any], ...], kind: str) -> bool:
        """Whether this is the rendering of these very messages, made this way."""
        mine = self.sources
        return (
            kind == self.kind
            and len(sources) == len(mine)
            and all(a is b for a, b in zip(sources, mine, strict=True))
        )


@dataclass(frozen=True, slots=True)
class Rendered:
    """A window as a door's renderer made it: its chat messages, their turns in the
    door's API, the JSON array of those turns in one buffer (the next window copies the
    part it keeps at memcpy's speed, where joining each turn's own bytes would gather
    thousands of scattered objects), and for each turn how many of the messages had been
    read when it was made (it depends on those alone)."""

    window: list[dict[str, Any]]
    turns: list[Rendering]
    read: list[int]
    json: bytes  # the turns' JSON as one array
    ends: list[int]  # where each turn's JSON ends in `json`
    repaired: int  # the first turn LiteLLM's route would change (`len(turns)`: none)

    @property
    def covered(self) -> bool:
        """Whether the lean path sends these turns as LiteLLM's route would."""
        return self.repaired == len(self.turns)

    def turn_json(self, at: int) -> memoryview:
        """The JSON of turn `at`, a view of `json`."""
        start = self.ends[at - 1] + 1 if at else 1
        return memoryview(self.json)[start : self.ends[at]]

    def reused(self, window: list[dict[str, Any]]) -> tuple[int, int]:
        """How many of this rendering's turns `window` keeps as they are, and how many
        of its messages those turns read: the turns made from the messages it begins
        with (`shared_messages`)."""
        kept = bisect.bisect_right(self.read, shared_messages(window, self.window))
        return kept, self.read[kept - 1] if kept else 0


class Redrawn:
    """A window being rendered: the turns of the `previous` rendering that it keeps
    (`Rendered.reused`), then the rest, turn by turn, each taken from `previous` where
    the same chat messages made it (by identity), else made by the door's renderer."""

    def __init__(
        self, api: NativeApi, window: list[dict[str, Any]], previous: Rendered | None
    ) -> None:
        self._api = api
        self._window = window
        self._previous = previous
        self.kept, self.start = previous.reused(window) if previous is not None else (0, 0)
        self.turns = previous.turns[: self.kept] if previous is not None else []
        self.read = previous.read[: self.kept] if previous is not None else []
        self._pieces: list[bytes | memoryview] = []  # the JSON of the turns after the kept
        self._known: dict[int, int] = {}  # a later turn of `previous`, by its first message
        if previous is not None:
            later = enumerate(previous.turns[self.kept :], self.kept)
            self._known = {id(turn.sources[0]): at for at, turn in later}

    def taken(self, sources: tuple[dict[str, Any], ...], kind: str, read: int) -> bool:
        """Whether the previous rendering made these very messages this way: then its
        turn is the next, having read `read` messages."""
        at = self._known.get(id(sources[0]))
        previous = self._previous
        if at is None or previous is None or not previous.turns[at].renders(sources, kind):
            return False
        self._next(previous.turns[at], previous.turn_json(at), read)
        return True

    def made(self, sources: tuple[dict[str, Any], ...], kind: str, json: bytes, read: int) -> None:
        """A turn made by the renderer: its JSON (checked once for what LiteLLM's route
        would repair, by the door's API), having read `read` messages."""
        self._next(Rendering(sources, kind, not lean_covers(self._api, json)), json, read)

    def last(self) -> tuple[str, bytes] | None:
        """The last turn so far: its kind and its JSON."""
        if self._pieces:
            return self.turns[-1].kind, bytes(self._pieces[-1])
        if self.turns and self._previous is not None:
            return self.turns[-1].kind, bytes(self._previous.turn_json(len(self.turns) - 1))
        return None

    def rendered(self) -> Rendered:
        """The window rendered: the kept turns' JSON copied in one piece, the rest joined."""
        previous, kept, pieces = self._previous, self.kept, self._pieces
        ends = previous.ends[:kept] if previous is not None else []
        end = ends[-1] if ends else 0
        for piece in pieces:
            end += 1 + len(piece)
            ends.append(end)
        if previous is not None and kept:
            head = memoryview(previous.json)[: previous.ends[kept - 1]]
            json = b"".join((head, b"," if pieces else b"", b",".join(pieces), b"]"))
        else:
            json = b"[" + b",".join(pieces) + b"]"
        if previous is not None and previous.repaired < kept:
            repaired = previous.repaired
        else:
            turns = self.turns
            repaired = next(
                (at for at in range(kept, len(turns)) if turns[at].repaired), len(turns)
            )
        return Rendered(self._window, self.turns, self.read, json, ends, repaired)

    def _next(self, rendering: Rendering, json: bytes | memoryview, read: int) -> None:
        self.turns.append(rendering)
        self.read.append(read)
        self._pieces.append(json)


class Renderings:
    """Windows as a door's API says them, by conversation: the latest of each, within
    `KEPT_RENDERED` messages and `KEPT_RENDERED_BYTES` of their turns' JSON."""

    def __init__(self, kept: int = KEPT_RENDERED, kept_bytes: int = KEPT_RENDERED_BYTES) -> None:
        self._kept, self._kept_bytes = kept, kept_bytes
        self._held = 0  # messages
        self._bytes = 0  # their turns' JSON's
        self._known: OrderedDict[Hashable, Rendered] = OrderedDict()

    def taken(self, key: Hashable) -> Rendered | None:
        """The conversation's latest rendering, taken out until `kept` gives one back."""
        known = self._known.pop(key, None)
        if known is not None:
            self._held -= len(known.window)
            self._bytes -= len(known.json)
        return known

    def kept(self, key: Hashable, rendered: Rendered) -> None:
        """Keep `rendered`, the conversation's latest."""
        self._known[key] = rendered
        self._held += len(rendered.window)
        self._bytes += len(rendered.json)
        while (self._held > self._kept or self._bytes > self._kept_bytes) and len(self._known) > 1:
            _, dropped = self._known.popitem(last=False)
            self._held -= len(dropped.window)
            self._bytes -= len(dropped.json)
