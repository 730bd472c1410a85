"""Stubs of large tool results, sent in their place once a summary is made: deterministic from
the result and its call, so every replica sends the same bytes until the next summary."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from proxy.config.settings import ContextSettings
from proxy.conversation.identity import Message
from proxy.conversation.tokens import CountCache, TokenCounter, counter_by_name
from proxy.recall.index import documents
from proxy.sessions.records import Checkpoint, StoredMessage

__all__ = [
    "STUB_PREFIX",
    "Stubber",
    "Stubs",
    "briefed",
    "call_for",
    "indexed_text",
    "last_user",
    "savings",
    "stub",
    "stubbable",
    "with_frozen_stubs",
    "with_stubs",
]

STUB_PREFIX = "[context-proxy stub of a tool result"
_HEAD = 6  # lines kept from the start
_TAIL = 6  # and from the end
_ERRORS = 10  # lines that report an error, kept from the lines between
_LINE_CHARS = 160  # a kept line longer than this is cut
_ARGUMENT_CHARS = 300  # of the call's arguments
_UNSEARCHED = -2
# What a stub does not keep of its result: the content it replaces, and a prompt-cache
# breakpoint (a client moves its own; the one a stored copy kept is not where it is now).
_REPLACED = ("content", "cache_control")

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
    """Whether a tool result's content is text only: an image or a file part cannot be
    described in a few lines."""
    if result.get("role") != "tool":
        return False
    content = result.get("content")
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    )


def stub(
    result: Message,
    call: dict[str, Any] | None,
    matched: Sequence[str] = (),
    recalled: bool = True,
) -> Message:
    """`result` with its content replaced by a description of it (its call, its size, its first,
    last and error lines, or those holding `matched`), in a few C-speed passes over it."""
    text = _text(result.get("content"))
    count = text.count("\n") + 1
    head = _head(text, min(_HEAD, count))
    tail = _tail(text, min(_TAIL, count - len(head)))
    errors = _error_lines(text, len(head), count - len(tail))
    matching = _matching(text, matched, len(head), count - len(tail), {n for n, _ in errors})
    name, arguments = _called(call)
    described = f"{STUB_PREFIX}: {name}({arguments}) returned {len(text)} characters in"
    described += f" {count} lines. Shown: its first {len(head)} and last {len(tail)} lines"
    if errors:
        described += f", and {len(errors)} lines between that report errors"
    if matching:
        described += f", and {len(matching)} lines between that match the question"
    described += (
        ". The whole output is kept: a question about it brings it back.]"
        if recalled
        else ". The whole output is kept in the session's history.]"
    )
    between = sorted([*errors, *matching])
    kept = [*enumerate(head), *between, *zip(range(count - len(tail), count), tail, strict=True)]
    shown, last = [described], -1
    for number, line in kept:
        if number > last + 1:
            shown.append(f"[… {number - last - 1} lines …]")
        shown.append(_numbered(number, line))
        last = number
    fields = {key: value for key, value in result.items() if key not in _REPLACED}
    return {**fields, "content": "\n".join(shown)}


def with_frozen_stubs(
    made: Checkpoint,
    previous: Checkpoint | None,
    after: Sequence[StoredMessage],
    name: str,
    over: int,
    counters: Mapping[str, TokenCounter],
    make: Stubber = stub,
) -> Checkpoint:
    """`made` with the stubs it freezes in the window after it: its predecessor's still there,
    and each large result before the last user message that a stub at least halves."""
    start = made.covers_until
    messages = [stored.message for stored in after]
    last = last_user(messages)
    carried = {at - start for at in (previous.stubbed if previous else ()) if at >= start}
    counter = counters[name]
    chosen: dict[int, Message] = {}
    for j in range(last):  # never the last user turn: what the model answers now
        message = messages[j]
        if j not in carried and (
            message.get("role") != "tool"
            or after[j].tokens.get(name, 0) <= over
            or not stubbable(message)
        ):
            continue
        described = make(message, call_for(messages, j))
        if j in carried or 2 * counter.count_message(described) <= after[j].tokens[name]:
            chosen[j] = described
    if not chosen:
        return made
    texts = [(start + j, indexed_text(messages[j], call_for(messages, j))) for j in sorted(chosen)]
    return replace(
        made,
        stubbed=tuple(start + j for j in sorted(chosen)),
        stubs_saved=_saved(after, chosen, counters),
        stubs_index=documents(texts, made.chain_hash),
    )


def savings(
    entries: Sequence[StoredMessage],
    stubbed: Iterable[int],
    counters: Mapping[str, TokenCounter],
    make: Stubber = stub,
) -> dict[str, int]:
    """What the stubs at the transcript positions `stubbed` save, per tokenizer, where
    `entries` is the transcript from its start."""
    messages = [stored.message for stored in entries]
    chosen = {at: make(messages[at], call_for(messages, at)) for at in stubbed}
    return _saved(entries, chosen, counters)


def _saved(
    entries: Sequence[StoredMessage],
    stubs: Mapping[int, Message],
    counters: Mapping[str, TokenCounter],
) -> dict[str, int]:
    """Per tokenizer that counted every stubbed result: its tokens less its stub's."""
    return {
        name: sum(entries[j].tokens[name] - counter.count_message(m) for j, m in stubs.items())
        for name, counter in counters.items()
        if all(name in entries[j].tokens for j in stubs)
    }


def last_user(messages: Sequence[Message]) -> int:
    """Where the last user message is (0 when there is none): the last user turn, what
    the model answers now, starts there."""
    at = len(messages) - 1
    while at > 0 and messages[at].get("role") != "user":
        at -= 1
    return max(at, 0)


def call_for(messages: Sequence[Message], at: int) -> dict[str, Any] | None:
    """The tool call `messages[at]` (a tool result) answers, found by its id in the
    assistant message before the results; None when it is not there."""
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
    """`messages` (transcript[offset:]) with the results at the positions `stubbed` as their
    stubs: a new list when any is there, the same one else."""
    found = [at - offset for at in stubbed if 0 <= at - offset < len(messages)]
    if not found:
        return messages
    replaced = list(messages)
    for at in found:
        replaced[at] = make(messages[at], call_for(messages, at))
    return replaced


def briefed(messages: list[Message], matched: Sequence[str], over: int) -> list[Message]:
    """A recalled unit with each large text tool result as its stub showing the lines that
    hold `matched`, sized by characters (four a token) so no tokenizer runs."""
    briefed = messages
    for at, message in enumerate(messages):
        if message.get("role") != "tool" or not stubbable(message):
            continue
        size = len(_text(message.get("content")))
        if size <= 4 * over:
            continue
        described = stub(message, call_for(messages, at), matched)
        if 2 * len(described["content"]) <= size:
            briefed = briefed if briefed is not messages else list(messages)
            briefed[at] = described
    return briefed


class Stubs:
    """A process's stubs as the settings make them, each kept by what it was made of:
    finding a long output's error lines takes about 10 ms a megabyte, hashing it 0.3."""

    def __init__(self, context: ContextSettings, counts: CountCache, size: int = 4096) -> None:
        self._context = context
        self._counts = counts
        self._size = size
        # A cache: a stub is a function of its result and call, so it changes nothing sent.
        self._made: OrderedDict[tuple[Any, ...], Message] = OrderedDict()

    def made(self, result: Message, call: dict[str, Any] | None) -> Message:
        """`stub(result, call)`."""
        text = _text(result.get("content"))
        fields = tuple((k, repr(v)) for k, v in result.items() if k not in _REPLACED)
        key = (fields, len(text), hash(text), _called(call, limit=None))
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = stub(result, call, recalled=self._context.recall_ratio > 0)
            if len(self._made) > self._size:
                self._made.popitem(last=False)
        else:
            self._made.move_to_end(key)
        return made

    def stubbed(self, checkpoint: Checkpoint | None) -> tuple[int, ...]:
        """The positions of the results sent as stubs: none when `cache_aware` is off."""
        if checkpoint is None or not self._context.cache_aware:
            return ()
        return checkpoint.stubbed

    def saved(self, checkpoint: Checkpoint | None, name: str) -> int:
        """Tokens (by tokenizer `name`) the stubs save: the window as sent is its
        messages' count less this."""
        if checkpoint is None or not self.stubbed(checkpoint):
            return 0
        return checkpoint.stubs_saved.get(name, 0)

    def sent(self, messages: list[Message], checkpoint: Checkpoint | None) -> list[Message]:
        """`messages`, the window after `checkpoint`, as sent."""
        if checkpoint is None:
            return messages
        return with_stubs(messages, checkpoint.covers_until, self.stubbed(checkpoint), self.made)

    def counted(
        self, entries: list[StoredMessage], checkpoint: Checkpoint | None, counter: TokenCounter
    ) -> list[StoredMessage]:
        """`entries`, the window after `checkpoint`, as sent: each stubbed result its stub,
        counted by `counter` once per process."""
        stubbed = self.stubbed(checkpoint)
        if checkpoint is None or not stubbed:
            return entries
        covers = checkpoint.covers_until
        sent = with_stubs([s.message for s in entries], covers, stubbed, self.made)
        found = list(entries)
        for at in stubbed:
            if 0 <= at - covers < len(entries):
                stored, message = entries[at - covers], sent[at - covers]
                tokens = self._counts.message(counter, message, f"stub:{stored.chain}")
                found[at - covers] = replace(stored, message=message, tokens={counter.name: tokens})
        return found

    def with_frozen(
        self,
        made: Checkpoint,
        previous: Checkpoint | None,
        after: Sequence[StoredMessage],
        counter: TokenCounter,
    ) -> Checkpoint:
        """`made` with the stubs it freezes (`with_frozen_stubs`), counted by every
        tokenizer that counted the summary's prefix; as it is when stubs are off."""
        over = self._context.stub_tool_results_over
        if not self._context.cache_aware or not over:
            return made
        names = {*made.before, counter.name}
        counters = {name: counter_by_name(name, counter) for name in names}
        return with_frozen_stubs(made, previous, after, counter.name, over, counters, self.made)


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
    name, arguments = function.get("name"), function.get("arguments")
    name = name if isinstance(name, str) else "a tool"
    arguments = arguments if isinstance(arguments, str) else ""
    if limit is not None and len(arguments) > limit:
        arguments = arguments[:limit] + "…"
    return name, arguments


def _head(text: str, count: int) -> list[str]:
    return text.split("\n", count)[:count] if count else []


def _tail(text: str, count: int) -> list[str]:
    return text.rsplit("\n", count)[-count:] if count else []


def _error_lines(text: str, start: int, end: int) -> list[tuple[int, str]]:
    """The first `_ERRORS` lines in [start, end) that report an error, numbered, found by one
    `str.find` pass per word (a regular expression of many words is ten times slower)."""
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


def _matching(
    text: str, words: Sequence[str], start: int, end: int, taken: set[int]
) -> list[tuple[int, str]]:
    """The first `_ERRORS` lines in [start, end) not in `taken` that hold one of `words`
    (whole words, any case), numbered: one regular-expression pass over the text."""
    if not words:
        return []
    alternatives = "|".join(re.escape(word) for word in words[:8])
    pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)
    found: list[tuple[int, str]] = []
    line, counted = 0, 0
    for match in pattern.finditer(text):
        at = match.start()
        line += text.count("\n", counted, at)
        counted = at
        if line >= end or len(found) >= _ERRORS:
            break
        if line >= start and line not in taken and (not found or found[-1][0] != line):
            begins = text.rfind("\n", 0, at) + 1
            ends = text.find("\n", at)
            found.append((line, text[begins : ends if ends >= 0 else len(text)]))
    return found


def _inside_word(lowered: str, at: int) -> bool:
    return at > 0 and lowered[at - 1].isalnum()


def _numbered(number: int, line: str) -> str:
    if len(line) > _LINE_CHARS:
        line = line[:_LINE_CHARS] + f"… ({len(line)} characters)"
    return f"{number + 1}: {line}"
