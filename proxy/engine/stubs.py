"""Stubs of large tool results: what a file read, a command's output or a log said, in a
few lines, sent in its place once a summary is made (`Checkpoint.stubbed`).

Pure and deterministic from the result and the call it answers, with no tokenizer: every
replica, and every later request, sends the same bytes, so the prompt prefix a provider
caches stays the same until the next summary. The full output stays stored, and recall
brings it back when a later message asks about it (`proxy.engine.archive`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from proxy.conversation.identity import Message

__all__ = [
    "STUB_PREFIX",
    "Stubber",
    "Stubs",
    "call_for",
    "indexed_text",
    "stub",
    "stubbable",
    "with_stubs",
]

STUB_PREFIX = "[context-proxy stub of a tool result"
_HEAD = 6  # lines kept from the start
_TAIL = 6  # and from the end
_ERRORS = 10  # lines that report an error, kept from the lines between
_LINE_CHARS = 160  # a kept line longer than this is cut
_ARGUMENT_CHARS = 300  # of the call's arguments
_UNSEARCHED = -2

Stubber = Callable[[Message, "dict[str, Any] | None"], Message]
# A line that reports an error holds one of these words (any case, at a word's start:
# "Errors", "FAILED"), or starts with pytest's "E ".
_ERROR_WORDS = (
    "error",
    "fail",
    "exception",
    "traceback",
    "panic",
    "fatal",
    "critical",
    "denied",
    "refused",
    "abort",
    "segmentation fault",
    "timed out",
    "timeout",
)


def stubbable(result: Message) -> bool:
    """A tool result whose content is text (a string, or text parts only): an image or a
    file part cannot be described in a few lines, so it is never stubbed."""
    if result.get("role") != "tool":
        return False
    content = result.get("content")
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    )


def stub(result: Message, call: dict[str, Any] | None) -> Message:
    """`result` with its content replaced by a description of it: the tool's name and
    arguments (from `call`, the tool call it answers), its size in characters and lines,
    its first and last lines, and the lines between that report an error, each kept
    line numbered. Every other field of the message stays as it was. Work is a few
    C-speed passes over the output: no list of its lines is made."""
    text = _text(result.get("content"))
    count = text.count("\n") + 1
    head = _head(text, min(_HEAD, count))
    tail = _tail(text, min(_TAIL, count - len(head)))
    errors = _error_lines(text, len(head), count - len(tail))
    name, arguments = _called(call)
    described = f"{STUB_PREFIX}: {name}({arguments}) returned {len(text)} characters in"
    described += f" {count} lines. Shown: the first {len(head)} and last {len(tail)}"
    if errors:
        described += f", and {len(errors)} of the lines between that report errors"
    described += (
        ". The whole output is kept; ask about it and it is recalled (or run the tool again).]"
    )
    kept = [*enumerate(head), *errors, *zip(range(count - len(tail), count), tail, strict=True)]
    shown, last = [described], -1
    for number, line in kept:
        if number > last + 1:
            shown.append(f"[… {number - last - 1} lines …]")
        shown.append(_numbered(number, line))
        last = number
    return {**result, "content": "\n".join(shown)}


def call_for(messages: Sequence[Message], at: int) -> dict[str, Any] | None:
    """The tool call `messages[at]` (a tool result) answers: in the assistant message
    before the results that follow it, found by its id; None when it is not there."""
    wanted = messages[at].get("tool_call_id")
    before = at - 1
    while before >= 0 and messages[before].get("role") == "tool":
        before -= 1
    if before < 0:
        return None
    for call in messages[before].get("tool_calls") or ():
        if isinstance(call, dict) and call.get("id") == wanted:
            return call
    return None


def with_stubs(
    messages: list[Message], offset: int, stubbed: Iterable[int], make: Stubber = stub
) -> list[Message]:
    """`messages` (transcript[offset:]) with the results at the transcript positions
    `stubbed` sent as their stubs (by `make`): a new list when any is there, the same
    one else."""
    found = [at - offset for at in stubbed if 0 <= at - offset < len(messages)]
    if not found:
        return messages
    replaced = list(messages)
    for at in found:
        replaced[at] = make(messages[at], call_for(messages, at))
    return replaced


class Stubs:
    """`stub`, remembered by what it was made of: each request of a session sends its
    stubs again, and finding a long output's error lines takes about 10 ms a megabyte,
    where hashing it (the key) takes 0.3. A cache: a stub is a function of its result
    and call, so what it holds changes nothing sent."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._made: OrderedDict[tuple[Any, ...], Message] = OrderedDict()

    def __call__(self, result: Message, call: dict[str, Any] | None) -> Message:
        text = _text(result.get("content"))
        fields = tuple((k, repr(v)) for k, v in result.items() if k != "content")
        key = (fields, len(text), hash(text), _called(call, limit=None))
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = stub(result, call)
            if len(self._made) > self._size:
                self._made.popitem(last=False)
        else:
            self._made.move_to_end(key)
        return made


def indexed_text(result: Message, call: dict[str, Any] | None) -> str:
    """What recall finds a stubbed result by: the call's name and arguments (a file's
    path, a command) and the whole output."""
    name, arguments = _called(call, limit=None)
    return f"{name} {arguments}\n{_text(result.get('content'))}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content or ())


def _called(call: dict[str, Any] | None, limit: int | None = _ARGUMENT_CHARS) -> tuple[str, str]:
    function = (call or {}).get("function")
    function = function if isinstance(function, dict) else {}
    name = function.get("name") if isinstance(function.get("name"), str) else "a tool"
    arguments = function.get("arguments")
    arguments = arguments if isinstance(arguments, str) else ""
    if limit is not None and len(arguments) > limit:
        arguments = arguments[:limit] + "…"
    return name, arguments


def _head(text: str, count: int) -> list[str]:
    return text.split("\n", count)[:count] if count else []


def _tail(text: str, count: int) -> list[str]:
    return text.rsplit("\n", count)[-count:] if count else []


def _error_lines(text: str, start: int, end: int) -> list[tuple[int, str]]:
    """The first `_ERRORS` lines in [start, end) that report an error, numbered. Each
    word is looked for with `str.find` (C speed: a regular expression of many words is
    ten times slower), from line `start` on, and again only once the search has passed
    where it was found: each word's search passes over the text about once."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: positions differ
        lowered = "".join(c if len(c.lower()) > 1 else c.lower() for c in text)
    position = 0  # always where a line starts
    for _ in range(start):
        position = text.find("\n", position) + 1
    found: list[tuple[int, str]] = []
    line = start
    upcoming = dict.fromkeys(_ERROR_WORDS, _UNSEARCHED)
    pytest = _UNSEARCHED
    while len(found) < _ERRORS and position < len(text):
        for word, at in upcoming.items():
            while at == _UNSEARCHED or (at >= 0 and (at < position or _inside_word(lowered, at))):
                at = lowered.find(word, max(at + 1, position))
            upcoming[word] = at
        if pytest == _UNSEARCHED or 0 <= pytest < position:
            after = text.find("\nE ", position)
            pytest = position if text.startswith("E ", position) else after + (after >= 0)
            pytest = pytest if pytest >= 0 else -1
        hits = [at for at in (*upcoming.values(), pytest) if at >= 0]
        if not hits:
            break
        at = min(hits)
        line += text.count("\n", position, at)
        if line >= end:
            break
        begins = text.rfind("\n", 0, at) + 1
        ends = text.find("\n", at)
        found.append((line, text[begins : ends if ends >= 0 else len(text)]))
        if ends < 0:
            break
        position, line = ends + 1, line + 1
    return found


def _inside_word(lowered: str, at: int) -> bool:
    return at > 0 and lowered[at - 1].isalnum()


def _numbered(number: int, line: str) -> str:
    if len(line) > _LINE_CHARS:
        line = line[:_LINE_CHARS] + f"… ({len(line)} characters)"
    return f"{number + 1}: {line}"
