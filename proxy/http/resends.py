"""A resent conversation parsed from where it is new.

A client resends its whole conversation every turn: 5,000 messages are 1.4 MB of JSON,
and parsing them (and freeing what the parse made) was the largest part of a long
request's cost. So the proxy keeps, for the bodies it parsed lately, by caller and
conversation, where each one's conversation array opens and where its last message
ends, and those messages parsed. A body that begins with those bytes (compared at
memcmp's speed) is the same request up to there: it is parsed with the kept messages
stood in for by one `0`, and the kept messages are put back in its place, the same
objects as before. A body's messages are kept parsed once its caller has resent it (a
body seen once is kept as its bytes only): a client that resends is worth the memory, a
stream of one-off bodies (a hostile one's megabyte arrays) is not.

The bytes kept are checked to be orjson's own serialization of the messages kept (what
nearly every client writes: compact, UTF-8), so a kept prefix is exactly those messages,
and the result is exactly `orjson.loads(body)`. Its `Needles` are counted from where it
is new too: those of the kept bytes are kept with them. Anything else (another spacing, a
duplicate key, a message too deep to write) is parsed whole, as before. It is a cache of
a pure function of the body, keyed by its caller, so it changes no answer and shows one
tenant nothing of another's.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.conversation.needles import Needles, needles_in

__all__ = ["Parsed", "Resends"]

# Bodies a process keeps parsed, what they weigh in all (their bytes and their messages
# parsed: `weight`), and the fewest messages a body has for keeping it to be worth it (a
# short conversation costs little to parse whole).
KEPT_RESENT_WEIGHT = 32 << 20
KEPT_PER_KEY = 4
FEWEST_KEPT_MESSAGES = 16
# Bodies seen once, kept as their bytes until resent: the latest of each key, and these
# bytes in all (two 1.4 MB conversations opened together; a hostile client's stream of
# megabyte one-offs holds no more).
KEPT_SEEN_BYTES = 4 << 20
# The last messages a kept body may be matched up to: a client moves its cache mark from
# its last message to its new one each turn (Claude Code), so the message it marked last
# differs when resent.
_ENDS_KEPT = 3
# What a message weighs parsed, beyond its JSON's bytes: its dict and its values.
_MESSAGE_WEIGHT = 512
# Where each door's conversation is: `messages` (chat, Messages), `input` (Responses).
_OPENS = {
    name: re.compile(rb'"' + name.encode() + rb'"[ \t\r\n]*:[ \t\r\n]*\[')
    for name in ("messages", "input")
}


def _plus(total: Needles | None, more: Needles | None) -> Needles | None:
    return None if total is None or more is None else total + more


def _quoted(name: str) -> bytes:
    return b'"' + name.encode() + b'"'


@dataclass(frozen=True, slots=True)
class Parsed:
    """A body parsed; `messages_json`, where known, the bytes of its conversation array as
    orjson writes it (a view of the body: no copy)."""

    data: dict[str, Any]
    messages_json: memoryview | None = None
    needles: Needles | None = None  # the body's, where they were counted from where it is new


@dataclass(frozen=True, slots=True, eq=False)
class _Kept:
    body: bytes  # the body, of which [:end] is compared
    opens: int  # just after its conversation array's `[`
    ends: tuple[int, ...]  # just after each of its last `_ENDS_KEPT` messages
    count: int  # its messages
    # Parsed (a list of its own: the caller's may change), once the body was resent.
    messages: list[Any] | None
    needles: tuple[Needles | None, ...]  # those of its bytes up to each of `ends`

    @property
    def weight(self) -> int:
        """What it holds: the body, and its messages parsed (their text, and more)."""
        return len(self.body) + self.end + _MESSAGE_WEIGHT * self.count

    @property
    def end(self) -> int:
        return self.ends[-1]

    def matched(self, body: bytes) -> int | None:
        """Which of `ends` `body` begins with this body's bytes up to (the last it can),
        compared at memcmp's speed; None for none."""
        for at in range(len(self.ends) - 1, -1, -1):
            end = self.ends[at]
            if len(body) > end and body.startswith(memoryview(self.body)[:end]):
                return at
        return None

    def kept_at(self, at: int) -> int:
        """Its messages up to `ends[at]`."""
        return self.count - (len(self.ends) - 1 - at)


class Resends:
    """Bodies parsed lately, by key (caller, session, door): resent ones with their
    messages parsed, and the latest seen once as its bytes."""

    def __init__(self, kept_weight: int = KEPT_RESENT_WEIGHT, check: bool = False) -> None:
        self._kept_weight = kept_weight
        # The test suite's servers parse each resent body whole too, and compare: a kept
        # message changed in place by anything after the parse would show there.
        self._check = check
        self._weight = 0
        self._known: OrderedDict[Hashable, list[_Kept]] = OrderedDict()
        self._seen_bytes = 0
        self._seen: OrderedDict[Hashable, _Kept] = OrderedDict()
        self._lock = threading.Lock()  # held by the one parse that reads and keeps

    def parse(self, body: bytes, key: Hashable, name: str) -> Parsed:
        """`orjson.loads(body)`, its conversation (`name`) parsed only after what a body
        kept under `key` holds; raises orjson's error for a body that is not JSON. A long
        body is parsed in a worker thread: while another thread parses one, this one is
        parsed whole and nothing is kept of it (the event loop never waits for a lock)."""
        if not self._lock.acquire(blocking=False):
            return Parsed(orjson.loads(body))
        try:
            return self._parsed(body, key, name)
        finally:
            self._lock.release()

    def _parsed(self, body: bytes, key: Hashable, name: str) -> Parsed:
        for kept in self._known.get(key, ()):
            at = kept.matched(body)
            if at is not None:
                parsed = self._resent(body, kept, at, key, name)
                if parsed is not None:
                    if self._check:
                        self._checked(parsed, body)
                    return parsed
                break
        seen = self._seen.get(key)
        at = seen.matched(body) if seen is not None else None
        if seen is not None and at is not None:
            return self._confirmed(body, seen, at, key, name)
        return self._keep_new(body, orjson.loads(body), key, name)

    def _checked(self, parsed: Parsed, body: bytes) -> None:
        """The suite's check: what a resent body's parse and needles are, are the whole
        body's."""
        if parsed.data != orjson.loads(body):
            raise AssertionError("a kept message was changed after its parse")
        if parsed.needles is not None and parsed.needles != needles_in(body):
            raise AssertionError("a resent body's needles are not its own")

    def _resent(self, body: bytes, kept: _Kept, at: int, key: Hashable, name: str) -> Parsed | None:
        """`body`, which begins with `kept`'s messages up to `kept.ends[at]`, parsed from
        there; None where it cannot be (its key again after them, or not JSON)."""
        start, count = kept.ends[at], kept.kept_at(at)
        tail = body[start:]
        if _quoted(name) in tail:
            return None  # the conversation's key again: only a whole parse says which wins
        try:
            data = orjson.loads(body[: kept.opens] + b"0" + tail)
        except orjson.JSONDecodeError:
            return None  # the whole parse raises its error
        found = data.get(name)
        if not isinstance(found, list) or not found or type(found[0]) is not int:
            return None
        new = found[1:]
        assert kept.messages is not None
        messages = kept.messages[:count] + new
        data[name] = list(messages)
        ends = self._written(body, start, new, ",")
        self._drop(key, kept)
        if ends is None:
            return Parsed(data)
        counted, whole = self._counted(body, kept, at, ends)
        ends = (*kept.ends[: at + 1], *ends)[-_ENDS_KEPT:]
        self._keep(key, _Kept(body, kept.opens, ends, len(messages), messages, counted))
        return Parsed(data, self._array(body, kept.opens, ends[-1]), whole)

    def _confirmed(self, body: bytes, kept: _Kept, at: int, key: Hashable, name: str) -> Parsed:
        """`body`, which begins with the messages of one seen once up to `kept.ends[at]`:
        parsed whole, and kept with its messages parsed (checked as orjson writes them
        from there)."""
        data = orjson.loads(body)
        self._unseen(key)
        start, count = kept.ends[at], kept.kept_at(at)
        messages = data.get(name) if isinstance(data, dict) else None
        if (
            not isinstance(messages, list)
            or len(messages) < count
            or body.find(_quoted(name), start) != -1  # the key again: which one holds?
        ):
            return self._keep_new(body, data, key, name)
        ends = self._written(body, start, messages[count:], ",")
        if ends is None:
            return Parsed(data)
        counted, whole = self._counted(body, kept, at, ends)
        ends = (*kept.ends[: at + 1], *ends)[-_ENDS_KEPT:]
        self._keep(key, _Kept(body, kept.opens, ends, len(messages), list(messages), counted))
        return Parsed(data, self._array(body, kept.opens, ends[-1]), whole)

    def _keep_new(self, body: bytes, data: Any, key: Hashable, name: str) -> Parsed:
        """`data`, parsed whole from `body`, kept as its bytes where its conversation is long
        enough to be worth it and written as orjson writes it (then with the view of its
        conversation array, and its `Needles`)."""
        messages = data.get(name) if isinstance(data, dict) else None
        if not isinstance(messages, list) or len(messages) < FEWEST_KEPT_MESSAGES:
            return Parsed(data)
        found = _OPENS[name].search(body)
        if found is None:
            return Parsed(data)
        opens = found.end()
        ends = self._written(body, opens, messages, "")
        if not ends or not self._stands_for(body, opens, ends[-1], data, name):
            return Parsed(data)
        counted, whole = self._counted(body, None, 0, ends)
        self._unseen(key)  # one body of each key waits to be resent
        self._seen[key] = _Kept(body, opens, ends, len(messages), None, counted)
        self._seen_bytes += len(body)
        while self._seen_bytes > KEPT_SEEN_BYTES and len(self._seen) > 1:
            self._seen_bytes -= len(self._seen.popitem(last=False)[1].body)
        return Parsed(data, self._array(body, opens, ends[-1]), whole)

    @staticmethod
    def _counted(
        body: bytes, kept: _Kept | None, at: int, ends: tuple[int, ...]
    ) -> tuple[tuple[Needles | None, ...], Needles | None]:
        """The `Needles` of `body` up to each of `kept.ends[: at + 1]` and `ends` (its new
        ones), and of all of it: the kept body's up to where they are the same, the rest
        counted here."""
        total: Needles | None = Needles(0, 0, 0)
        since, counted = 0, []
        if kept is not None:
            since, total, counted = kept.ends[at], kept.needles[at], list(kept.needles[: at + 1])
        for end in ends:
            total, since = _plus(total, needles_in(body, since, end)), end
            counted.append(total)
        return tuple(counted[-_ENDS_KEPT:]), _plus(total, needles_in(body, since))

    @staticmethod
    def _written(
        body: bytes, start: int, messages: list[Any], before: str
    ) -> tuple[int, ...] | None:
        """Where the last `_ENDS_KEPT` of `messages` end in `body`, if they are written
        from `start` on (after `before`) as orjson writes them, joined by commas; else
        None."""
        if not messages:
            return ()
        try:
            # The list in one call, its brackets dropped, is its messages' pieces joined by
            # commas: 12 times faster than a call per message, which also held the event
            # loop from a worker thread (one C call: 58 ms for 20,000 messages).
            written = before.encode() + orjson.dumps(messages)[1:-1]
            last = [orjson.dumps(message) for message in messages[1 - _ENDS_KEPT :]]
        except orjson.JSONEncodeError:  # deeper than orjson writes: refused later
            return None
        if not body.startswith(written, start):
            return None
        ends = [start + len(written)]
        for piece in reversed(last):
            ends.append(ends[-1] - len(piece) - 1)
        return tuple(reversed(ends[: min(_ENDS_KEPT, len(messages))]))

    @staticmethod
    def _stands_for(body: bytes, opens: int, end: int, data: dict[str, Any], name: str) -> bool:
        """Whether body[opens:end] is the conversation's messages, the top level's: the body
        with them as one `0` is the same body with `[0]` for its conversation."""
        try:
            again = orjson.loads(body[:opens] + b"0" + body[end:])
        except orjson.JSONDecodeError:
            return False
        if again.get(name) != [0] or len(again) != len(data):
            return False
        return all(value == data.get(other) for other, value in again.items() if other != name)

    @staticmethod
    def _array(body: bytes, opens: int, end: int) -> memoryview | None:
        """The conversation array's bytes, where nothing but the messages lies between its
        brackets."""
        if end < len(body) and body[end] == ord("]"):
            return memoryview(body)[opens - 1 : end + 1]
        return None

    def _keep(self, key: Hashable, kept: _Kept) -> None:
        entries = self._known.setdefault(key, [])
        entries.insert(0, kept)
        self._weight += kept.weight
        while len(entries) > KEPT_PER_KEY:
            self._weight -= entries.pop().weight
        self._known.move_to_end(key)
        while self._weight > self._kept_weight and len(self._known) > 1:
            _, dropped = self._known.popitem(last=False)
            self._weight -= sum(entry.weight for entry in dropped)

    def _unseen(self, key: Hashable) -> None:
        seen = self._seen.pop(key, None)
        if seen is not None:
            self._seen_bytes -= len(seen.body)

    def _drop(self, key: Hashable, kept: _Kept) -> None:
        entries = self._known.get(key)
        if entries is not None and kept in entries:
            entries.remove(kept)
            self._weight -= kept.weight
