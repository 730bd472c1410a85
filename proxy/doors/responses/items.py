"""Responses ids: a response's, and its output items', which name what the session stores.

A response id names its session and the transcript length it left, signed for the tenant
that made it: `previous_response_id` continues exactly that conversation, for that caller
alone. An output item's id names the stored reply it is part of and its place there:
`msg_<mac>.<length>.<session>.<n>`, the `n`-th item of its kind, the mac also signing the
chain value before the reply (so a reply that took the same place after an edit of history
has other ids). An `item_reference`, which the AI SDK sends from its second turn on (its
earlier output, as references to it), is so resolved from the one stored reply it names,
read by position: no index to keep, no walk of the history. A provider's own output items
(`proxy.upstream.native`) take such ids on their way to the client, with the provider's own after
a `~`: the stored reply keeps the provider's items as they came, and an item a client
echoes whole goes back to the provider under its own id (`as_given`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.conversation.identity import GENESIS, RESPONSES_OUTPUT, Message
from proxy.conversation.validation import invalid
from proxy.doors.base import text_of
from proxy.doors.translations import Written
from proxy.errors import InvalidRequest, previous_response_not_found
from proxy.sessions.store import SessionStore

__all__ = ["ItemNames", "References", "ResponseIds", "as_given"]

_PREFIXES = {"message": "msg", "function_call": "fc", "reasoning": "rs"}
_KINDS = {prefix: kind for kind, prefix in _PREFIXES.items()}
_MISSING: Any = object()  # a reference to nothing the stored reply holds


class ResponseIds:
    """Response ids, `resp_<mac>.<length>.<sealed session id>`, and what names a stored
    reply in its items' ids, signed per tenant. The session id is sealed (`_sealed`): an
    id a client holds, logs or shows says nothing of the session's name."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._stream_key = hashlib.blake2b(b"response id names\0" + secret).digest()

    def mint(self, tenant: str, session_id: str, length: int) -> str:
        mac = self._mac(tenant, session_id, length)
        return f"resp_{mac}.{length}.{self._sealed(mac, session_id.encode())}"

    def read(self, tenant: str, response_id: Any) -> tuple[str, int]:
        """The session and length `response_id` names for `tenant`, else a 404."""
        for parsed in self.parsed(str(response_id).removeprefix("resp_")):
            if self.signed(tenant, *parsed):
                return parsed[1], parsed[2]
        raise previous_response_not_found()

    def reply(self, tenant: str, session_id: str, length: int, head: str) -> str:
        """What names the reply that leaves `length` messages after the chain value
        `head`, in its output items' ids."""
        mac = self._mac(tenant, session_id, length, head)
        return f"{mac}.{length}.{self._sealed(mac, session_id.encode())}"

    def signed(
        self, tenant: str, mac: str, session_id: str, length: int, head: str | None = None
    ) -> bool:
        """Whether `mac` signs a response id (or, with `head`, a reply) for `tenant`."""
        return hmac.compare_digest(mac, self._mac(tenant, session_id, length, head))

    def parsed(self, core: str) -> list[tuple[str, str, int]]:
        """What `<mac>.<length>.<name>` may say, (mac, session id, length), unchecked:
        the name unsealed, and read as the plain base64 that ids minted before names
        were sealed held (their mac tells which, if either, is so)."""
        try:
            mac, length, name = core.split(".")
            raw = base64.urlsafe_b64decode(name + "=" * (-len(name) % 4))
            number = int(length)
        except ValueError:
            return []
        found = []
        for session_id in (self._sealed(mac, raw, decode=True), raw):
            with contextlib.suppress(UnicodeDecodeError):
                found.append((mac, bytes(session_id).decode(), number))
        return found

    def _sealed(self, mac: str, data: bytes, decode: bool = False) -> Any:
        """`data` XORed with a stream only the secret makes, from the id's own mac (a
        synthetic IV: the mac already names tenant, session and length): base64url when
        sealing, the bytes when unsealing (`decode`)."""
        stream = b"".join(
            hashlib.blake2b(f"{mac}\0{block}".encode(), key=self._stream_key).digest()
            for block in range((len(data) + 63) // 64)
        )
        mixed = bytes(a ^ b for a, b in zip(data, stream, strict=False))
        return mixed if decode else base64.urlsafe_b64encode(mixed).decode().rstrip("=")

    def _mac(self, tenant: str, session_id: str, length: int, head: str | None = None) -> str:
        message = f"{tenant}\0{session_id}\0{length}"
        if head is not None:
            message += f"\0reply\0{head}"
        return hmac.new(self._secret, message.encode(), hashlib.blake2b).hexdigest()[:32]


class ItemNames:
    """One reply's output item ids, numbered by kind in the order the items come."""

    def __init__(self, reply: str) -> None:
        self._reply = reply
        self._counts: Counter[str] = Counter()

    def mint(self, kind: str, given: str | None = None) -> str:
        """The next item's id; the id its provider `given` it, if any, after a `~`."""
        number = self._counts[kind]
        self._counts[kind] += 1
        ours = f"{_PREFIXES.get(kind, kind)}_{self._reply}.{number}"
        return f"{ours}~{given}" if given else ours

    def renamed(self, output: list[Any]) -> list[Any]:
        """A provider's output items under this reply's ids."""
        return [
            item | {"id": self.mint(str(item.get("type", "message")), _given(item))}
            if isinstance(item, dict)
            else item
            for item in output
        ]


def as_given(item: dict[str, Any]) -> dict[str, Any]:
    """An output item under the id its provider gave it (a client echoes the proxy's)."""
    item_id = item.get("id")
    if isinstance(item_id, str) and "~" in item_id:
        return item | {"id": item_id.split("~", 1)[1]}
    return item


def _given(item: dict[str, Any]) -> str | None:
    given = item.get("id")
    return given if isinstance(given, str) and given and "~" not in given else None


@dataclass(frozen=True, slots=True)
class _Named:
    item_id: str
    mac: str
    session_id: str
    length: int  # the transcript's, with the reply: which is at `length - 1`
    kind: str
    number: int  # among the reply's items of its kind


def _may_refer(source: list[Any], written: Written | None) -> bool:
    """Whether `source` may hold an item reference: looked for at C speed in its JSON (the
    client's body, where it holds it as orjson writes it, counted from where it is new
    where it was resent; a match elsewhere in the body only costs the caller a loop)."""
    if written is not None and written.conversation is source:
        if written.needles is not None:
            return written.needles.references > 0
        body = written.json.obj
        if isinstance(body, bytes):
            return b'"item_reference"' in body
    return b'"item_reference"' in orjson.dumps(source)


class References:
    """`item_reference` items replaced by the items they name, from the stored replies."""

    def __init__(self, ids: ResponseIds, store: SessionStore) -> None:
        self._ids = ids
        self._store = store

    async def resolve(
        self, body: dict[str, Any], tenant: str, written: Written | None = None
    ) -> str | None:
        """`body["input"]` with each reference replaced by the item it names, and the
        session the first one names; a 400 naming any id that names nothing stored."""
        source = body.get("input")
        if not isinstance(source, list):
            return None
        if not _may_refer(source, written):
            return None
        wanted: dict[int, list[_Named]] = {}
        for index, item in enumerate(source):
            if not isinstance(item, dict) or item.get("type") != "item_reference":
                continue
            item_id = item.get("id")
            if not isinstance(item_id, str):
                raise invalid(f"input[{index}].id", f"`input[{index}].id` must be a string.")
            wanted[index] = _named(item_id, self._ids)
        if not wanted:
            return None
        replies = await self._replies(tenant, [n for names in wanted.values() for n in names])
        items: list[Any] = []
        for index, item in enumerate(source):
            names = wanted.get(index)
            if names is None:
                items.append(item)
                continue
            named, reply = replies.get(names[0].item_id, (names[0], None))
            found = _item(reply, named.kind, named.number)
            if found is _MISSING:
                raise _unknown(named.item_id)
            if found is not None:
                items.append(found)
        body["input"] = items
        first = next(iter(wanted.values()))[0].item_id
        return replies[first][0].session_id

    async def _replies(
        self, tenant: str, wanted: list[_Named]
    ) -> dict[str, tuple[_Named, Message]]:
        """The stored replies the references name, by item id, with the reading of the id
        its signature confirmed: one read per session, of the span they lie in (with the
        message before each, whose chain value the id signs)."""
        sessions: dict[str, list[_Named]] = {}
        for named in wanted:
            sessions.setdefault(named.session_id, []).append(named)
        replies: dict[str, tuple[_Named, Message]] = {}
        for session_id, names in sessions.items():
            meta = await self._store.load(tenant, session_id)
            names = [n for n in names if meta is not None and 0 < n.length <= meta.length]
            if not names:
                continue
            start = max(0, min(n.length for n in names) - 2)
            end = max(n.length for n in names)
            try:
                stored = await self._store.messages(tenant, session_id, start, end)
            except LookupError:  # shortened since its meta was read: none of them stand
                continue
            for n in names:
                place = n.length - 1 - start
                head = stored[place - 1].chain if place else GENESIS
                if self._ids.signed(tenant, n.mac, session_id, n.length, head):
                    replies[n.item_id] = n, stored[place].message
        return replies


def _named(item_id: str, ids: ResponseIds) -> list[_Named]:
    """What an item id of this proxy's may say (`ResponseIds.parsed`: its signature
    unchecked), else a 400."""
    head, _, number = item_id.split("~", 1)[0].rpartition(".")
    first, _, rest = head.partition(".")  # `<prefix>_<mac>`, `<length>.<name>`
    prefix, _, mac = first.rpartition("_")
    parsed = ids.parsed(f"{mac}.{rest}")
    if not parsed or not (number.isascii() and number.isdigit()):
        raise _unknown(item_id)
    kind = _KINDS.get(prefix, prefix)
    return [_Named(item_id, *reading, kind, int(number)) for reading in parsed]


def _item(reply: Message | None, kind: str, number: int) -> Any:
    """The `number`-th output item of `kind` of a stored reply as an input item: the
    provider's own, where the reply keeps them, else from its chat form (whose text is
    its first message item's: the chat form joins a reply's text, so a later message
    item adds nothing), or `_MISSING`."""
    if reply is None or reply.get("role") != "assistant":
        return _MISSING
    kept = reply.get(RESPONSES_OUTPUT)
    if kept:
        same = [item for item in kept if item.get("type", "message") == kind]
        return same[number] if number < len(same) else _MISSING
    if kind == "message":
        text = text_of(reply.get("content"))
        if not text:
            return _MISSING
        part = {"type": "output_text", "text": text, "annotations": []}
        return None if number else {"type": "message", "role": "assistant", "content": [part]}
    calls = reply.get("tool_calls") or []
    if kind != "function_call" or number >= len(calls):
        return _MISSING
    function = calls[number].get("function") or {}
    return {
        "type": "function_call",
        "call_id": calls[number].get("id"),
        "name": function.get("name"),
        "arguments": function.get("arguments") or "",
    }


def _unknown(item_id: str) -> InvalidRequest:
    shown = item_id if len(item_id) <= 200 else item_id[:200] + "…"
    return invalid(
        "input",
        f"No stored output item has the id `{shown}`: an `item_reference` names an output"
        " item of an earlier response of this proxy's, in a session it still stores.",
    )
