"""Offline token counting per model.

Everything here works without network access: tiktoken's BPE files and the
Anthropic tokenizer ship inside the litellm wheel, and unknown models fall
back to a deliberately pessimistic character estimate.  Functions are sync and
pure; callers move large texts off the event loop themselves.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from proxy.conversation.identity import ANTHROPIC_CONTENT, Message

__all__ = [
    "BOUND",
    "CountCache",
    "CountingMode",
    "TokenCounter",
    "counter_by_name",
    "counter_for_model",
    "estimate_tokens",
    "token_bound",
    "within_token_bound",
]

CountingMode = Literal["auto", "tiktoken", "char"]

# tiktoken caches a BPE file under sha1(url); these are the ones the litellm wheel ships.
_BUNDLED_BPE = {
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
    "o200k_harmony": "fb374d419588a4632f3f557e76b4b70aebbca790",
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
    "p50k_base": "ec7223a39ce59f226a68acc30dc1af2788490e15",
    "p50k_edit": "ec7223a39ce59f226a68acc30dc1af2788490e15",
}

# OpenAI-style chat accounting (see OpenAI's cookbook "How to count tokens").
MESSAGE_OVERHEAD = 3  # <|start|>{role}\n ... <|end|>
NAME_OVERHEAD = 1
REPLY_PRIMING = 3  # <|start|>assistant<|message|>
TOOL_CALL_OVERHEAD = 3
TOOLS_OVERHEAD = 12  # namespace wrapper around the tool schemas
# Images: "low" detail is a flat 85.  Other details depend on the (unknown)
# pixel size; 765 is a 1024x1024 "high" image (85 + 4 tiles x 170).  Larger
# images can cost up to ~1445 on gpt-4o; the budget's headroom and the
# usage-based calibration absorb the difference.
IMAGE_LOW_TOKENS = 85
IMAGE_TOKENS = 765
# An assistant turn's Anthropic blocks that its chat fields hold, and are counted there.
_COUNTED_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})


@dataclass(frozen=True, slots=True)
class TokenCounter:
    """Counts tokens for one tokenizer; `name` keys the per-message count cache.

    `count_piece` is the tokenizer itself; a text longer than `PIECE_CHARS` is counted
    piece by piece (`_pieces`, split before whitespace), so counting is linear in the
    text (a BPE tokenizer is quadratic on a long run without spaces) and no single call
    holds the interpreter for long (a tokenizer that keeps the GIL would freeze every
    thread, the event loop's too, for a whole 5 MB message)."""

    name: str
    count_piece: Callable[[str], int]
    _roles: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def count_text(self, text: str) -> int:
        if len(text) <= PIECE_CHARS:
            return self.count_piece(text)
        return sum(self.count_piece(text[start:end]) for start, end in _pieces(text))

    def count_message(self, message: Message) -> int:
        """Tokens one chat message occupies in the prompt (additive over its fields)."""
        role = str(message.get("role") or "")
        role_tokens = self._roles.get(role)
        if role_tokens is None:  # six roles exist: remembered, not re-encoded each time
            role_tokens = self.count_text(role)
            if len(self._roles) < 16:
                self._roles[role] = role_tokens
        total = MESSAGE_OVERHEAD + role_tokens
        total += self._count_content(message.get("content"))
        if message.get("name"):
            total += NAME_OVERHEAD + self.count_text(str(message["name"]))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += TOOL_CALL_OVERHEAD + self.count_text(str(call.get("id") or ""))
            total += self.count_text(str(function.get("name") or ""))
            total += self.count_text(str(function.get("arguments") or ""))
        if message.get("function_call"):  # legacy single-function form
            total += TOOL_CALL_OVERHEAD + self.count_text(_dumps(message["function_call"]))
        if message.get("tool_call_id"):
            total += self.count_text(str(message["tool_call_id"]))
        for block in message.get("thinking_blocks") or ():  # Anthropic's, sent back
            if isinstance(block, dict):
                total += self.count_text(str(block.get("thinking") or block.get("data") or ""))
        for block in message.get(ANTHROPIC_CONTENT) or ():  # what the fields above lack
            if isinstance(block, dict) and block.get("type") not in _COUNTED_BLOCKS:
                total += self.count_text(_dumps(block))
        return total

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Prompt tokens for a whole request's messages, including reply priming."""
        return sum(self.count_message(message) for message in messages) + REPLY_PRIMING

    def count_tools(self, tools: list[dict[str, Any]] | None) -> int:
        """Tool schemas as JSON; providers render them more compactly, so this overcounts."""
        if not tools:
            return 0
        return TOOLS_OVERHEAD + self.count_text(_dumps(tools))

    def truncate_middle(self, text: str, max_tokens: int, total: int | None = None) -> str:
        """Keep head and tail, replace the middle with a visible marker; fits max_tokens.

        Returns "" when even the marker alone does not fit. `total`, the text's count
        where the caller knows it, spares counting it: then only what is kept is counted,
        piece by piece from each end, so cutting a 5 MB paste to a budget costs what
        the budget holds, not what the paste does.
        """
        total = self.count_text(text) if total is None else total
        if total <= max_tokens:
            return text
        room = max_tokens - self.count_text(f"[… {total} tokens omitted …]")
        if room < 0:
            return ""
        keep = max(room - _JOIN_SLACK, 0)  # where head, marker and tail meet, pieces may merge
        head, head_tokens = self._prefix(text, (keep + 1) // 2)
        tail, tail_tokens = self._suffix(text, keep // 2, len(head))
        return f"{head}[… {max(total - head_tokens - tail_tokens, 1)} tokens omitted …]{tail}"

    def _prefix(self, text: str, tokens: int) -> tuple[str, int]:
        """The longest head of `text` within `tokens` (whole pieces, then part of one),
        and its count."""
        used = 0
        for start, stop in _pieces(text):
            piece = text[start:stop]
            count = self.count_piece(piece)
            if used + count > tokens:
                part, counted = self._longest(piece, tokens - used, from_end=False)
                return text[:start] + part, used + counted
            used += count
        return text, used

    def _suffix(self, text: str, tokens: int, floor: int) -> tuple[str, int]:
        """The longest tail of `text` after position `floor` within `tokens`, and its
        count."""
        used = 0
        for start, stop in _pieces(text, backwards=True):
            piece = text[max(start, floor) : stop]
            count = self.count_piece(piece)
            if used + count > tokens or start < floor:
                part, counted = self._longest(piece, tokens - used, from_end=True)
                return part + text[stop:], used + counted
            used += count
        return text[floor:], used

    def _longest(self, piece: str, tokens: int, from_end: bool) -> tuple[str, int]:
        """The longest head (or tail) of one piece within `tokens`, and its count: by
        bisection on its length, counting only that piece."""
        best, best_count, low, high = "", 0, 1, len(piece)
        while low <= high:
            middle = (low + high) // 2
            part = piece[len(piece) - middle :] if from_end else piece[:middle]
            count = self.count_piece(part)
            if count <= tokens:
                best, best_count, low = part, count, middle + 1
            else:
                high = middle - 1
        return best, best_count

    def _count_content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        total = 0
        for part in content:
            kind = part.get("type")
            if kind == "text":
                total += self.count_text(str(part.get("text") or ""))
            elif kind == "image_url":
                image = part.get("image_url")
                low = isinstance(image, dict) and image.get("detail") == "low"
                total += IMAGE_LOW_TOKENS if low else IMAGE_TOKENS
            else:  # audio, files, refusals...: their JSON, which overcounts
                total += self.count_text(_dumps(part))
        return total


PIECE_CHARS = 16_384  # a longer text is counted in pieces of about this many characters
_JOIN_SLACK = 2  # tokens a cut text may gain where its head, marker and tail meet


def _pieces(text: str, backwards: bool = False) -> Iterator[tuple[int, int]]:
    """`text` as (start, end) pieces of at most `PIECE_CHARS` characters, each ending
    before a whitespace where one is in its second half (tokenizers split there too, so
    the pieces' counts add up to the text's, or a token more at a forced split)."""
    if not backwards:
        start = 0
        while start < len(text):
            end = min(start + PIECE_CHARS, len(text))
            if end < len(text):
                split = max(
                    text.rfind(" ", end - PIECE_CHARS // 2, end),
                    text.rfind("\n", end - PIECE_CHARS // 2, end),
                )
                end = split if split > start else end
            yield start, end
            start = end
        return
    end = len(text)
    while end > 0:
        start = max(end - PIECE_CHARS, 0)
        if start > 0:
            split = max(
                text.find(" ", start, start + PIECE_CHARS // 2),
                text.find("\n", start, start + PIECE_CHARS // 2),
            )
            start = split if split > 0 else start
        yield start, end
        end = start


@functools.lru_cache(maxsize=256)
def counter_for_model(model: str, mode: CountingMode = "auto") -> TokenCounter:
    """The counter for a model name, e.g. "gpt-4o", "openai/gpt-4o-mini", "claude-3-5-sonnet".

    auto: tiktoken if tiktoken knows the model, the Anthropic tokenizer for Claude,
    else the character estimate.  tiktoken: tiktoken, o200k_base for unknown models.
    char: always the character estimate.
    """
    if mode == "char":
        return _CHAR
    encoding = _tiktoken_encoding_name(model)
    if encoding is None and mode == "tiktoken":
        encoding = "o200k_base"
    if encoding is not None:
        return _tiktoken_counter(encoding)
    if "claude" in model.lower():
        return _anthropic_counter()
    return _CHAR


def counter_by_name(name: str, known: TokenCounter | None = None) -> TokenCounter:
    """The counter whose `name` this is (names key the stored counts): `known` if it is
    that one."""
    if known is not None and known.name == name:
        return known
    if name in _BUNDLED_BPE:
        return _tiktoken_counter(name)
    if name == "anthropic":
        return _anthropic_counter()
    if name == BOUND.name:
        return BOUND
    return _CHAR


def _tiktoken_encoding_name(model: str) -> str | None:
    """tiktoken's own model map (litellm's selector answers cl100k for gpt-4o)."""
    from tiktoken.model import encoding_name_for_model

    try:
        name = encoding_name_for_model(model.rsplit("/", 1)[-1])
    except KeyError:
        return None
    return name if name in _BUNDLED_BPE else None  # e.g. r50k (davinci) is not bundled


@functools.cache
def _tiktoken_counter(encoding: str) -> TokenCounter:
    _use_bundled_bpe_files(encoding)
    import tiktoken

    encode = tiktoken.get_encoding(encoding).encode_ordinary
    return TokenCounter(encoding, lambda text: len(encode(text)) if text else 0)


# A HuggingFace tokenizer keeps the tokens of each word under 256 characters it sees, up
# to 10,000 words, and none after (nothing is evicted, and emptying it gives nothing
# back): 6 KB a word of 200 characters, so random or hostile text (the issue 51 fuzz)
# fills it with 60 MB, held for good. This many words fill it with at most 6 MB; the
# words of ordinary text it sees first are those it sees most.
WORDS_KEPT = 1_000


def bounded_words(tokenizer: Any) -> None:
    """Hold `tokenizer`'s (a `tokenizers.Tokenizer`) cache of words to `WORDS_KEPT`."""
    with contextlib.suppress(AttributeError):  # a tokenizers release without one
        tokenizer.model._resize_cache(WORDS_KEPT)


@functools.cache
def _anthropic_counter() -> TokenCounter:
    from tokenizers import Tokenizer

    directory = _bundled_dir()
    if directory is None or not (directory / "anthropic_tokenizer.json").is_file():
        return _CHAR
    tokenizer = Tokenizer.from_file(str(directory / "anthropic_tokenizer.json"))
    bounded_words(tokenizer)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids) if text else 0

    return TokenCounter("anthropic", count)


def _bundled_dir() -> Path | None:
    """litellm's tokenizer directory, found without importing litellm (slow)."""
    spec = importlib.util.find_spec("litellm")
    for location in (spec and spec.submodule_search_locations) or ():
        directory = Path(location) / "litellm_core_utils" / "tokenizers"
        if directory.is_dir():
            return directory
    return None


def _use_bundled_bpe_files(encoding: str) -> None:
    """Point tiktoken's cache at the wheel's files so it never downloads.

    A TIKTOKEN_CACHE_DIR the user set is kept if it already has the file.
    """
    key = _BUNDLED_BPE[encoding]
    current = os.environ.get("TIKTOKEN_CACHE_DIR")
    if current and (Path(current) / key).is_file():
        return
    directory = _bundled_dir()
    if directory is not None and (directory / key).is_file():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)


# Character estimate: every match of _PIECE is one token (two for astral-plane
# characters such as emoji).  Measured against o200k_base (estimate / o200k):
#   English prose 1.25, Markdown/package docs 1.28, Python 1.26-1.31,
#   JSON 1.21-1.25, Chinese 1.41, Japanese 1.34, Korean 1.83, Russian 1.40,
#   emoji 1.40, random digits 1.00, whitespace runs 2.3.
# It undercounts only random data: hex 0.96, base64 0.82 (inside the 20%
# headroom the budget ratio leaves).  Plain len/3 was 1.32 on English but
# 0.74 on JSON and 0.49 on base64, hence the pieces.
_CJK = (  # Hangul Jamo, kana, Hangul compatibility, CJK ideographs, syllables, full-width forms
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
)
_PIECE = re.compile(
    rf"[{_CJK}]"  # CJK ideographs, kana, hangul: one token each
    r"| ?[A-Z]?[a-z]{1,6}| ?[A-Z]{1,3}"  # ASCII words in short pieces, split at case changes
    rf"| ?[^\W\d_A-Za-z{_CJK}]{{1,3}}"  # letters of other scripts
    r"|\d{1,3}"
    r"|\s{1,16}"
    r"|[!-/:-@\[-`{-~]{1,2}"  # ASCII punctuation
    r"|[^\x00-\x7f]"  # any other symbol
)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def estimate_tokens(text: str) -> int:
    """Conservative token estimate for tokenizers we do not have."""
    return len(_PIECE.findall(text)) + len(_ASTRAL.findall(text))


_CHAR = TokenCounter("char", estimate_tokens)


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


# A bound on every counter here, message by message: each makes at most one token of a
# byte of text (a BPE token is at least one byte; the character estimate's pieces are
# too), on the same structure. What a session is planned by while it is far from its
# budget, so a long conversation is not tokenized before anything needs its count.
BOUND = TokenCounter("bound", _utf8_length)


def token_bound(data: bytes, start: int = 0) -> int:
    """At least as many tokens as any counter here makes of the messages (or the whole
    body) that `data[start:]`, their orjson bytes, holds: at most one token per byte of
    text; a message's JSON is longer than its overhead; a part counted as its JSON is
    counted with `json`'s separators (a space after each `,` and `:`); an image part,
    counted flat, names "image_url" twice (its type and its key)."""
    return (
        len(data)
        - start
        + data.count(b",", start)
        + data.count(b":", start)
        + IMAGE_TOKENS * data.count(b'"image_url"', start)
    )


def within_token_bound(data: bytes, limit: int, images: int | None = None) -> bool:
    """Whether `token_bound(data)` is at most `limit`, without counting separators where the
    length decides: each `,` and `:` is one of the bytes, so they at most double it.
    `images`, where known, is how often `data` names `"image_url"` (`needles_in`)."""
    images = IMAGE_TOKENS * (data.count(b'"image_url"') if images is None else images)
    if 2 * len(data) + images <= limit:
        return True
    return len(data) + data.count(b",") + data.count(b":") + images <= limit


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class CountCache:
    """Counts of what comes back on every request (system prompts, tool schemas, the
    summary in use, messages stored without this tokenizer's count), kept per tokenizer
    so each is tokenized once per process rather than once per request. What was
    counted is kept as its digest: a system prompt or a tool list may be megabytes."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        # (tokenizer, a digest of the JSON counted, or the content hash it was named by)
        self._counts: OrderedDict[tuple[str, bytes | str], int] = OrderedDict()

    def messages(
        self, counter: TokenCounter, messages: list[Message], serialized: bytes | None = None
    ) -> int:
        """`counter.count_messages(messages)`: reply priming included. `serialized` (their
        orjson bytes, where the caller has them) saves serializing them again."""
        key = (counter.name, orjson.dumps(messages) if serialized is None else serialized)
        return self._get(key, lambda: counter.count_messages(messages))

    def message(self, counter: TokenCounter, message: Message, key: str = "") -> int:
        """`counter.count_message(message)`; `key` (a content hash) saves serializing it."""
        cache_key = (counter.name, key or orjson.dumps(message))
        return self._get(cache_key, lambda: counter.count_message(message))

    def text(self, counter: TokenCounter, text: str, key: str) -> int:
        """`counter.count_text(text)`, cached under `key` (naming its content)."""
        return self._get((counter.name, key), lambda: counter.count_text(text))

    def tools(
        self,
        counter: TokenCounter,
        tools: list[dict[str, Any]] | None,
        serialized: bytes | None = None,
    ) -> int:
        if not tools:
            return 0
        key = (
            counter.name,
            b"tools:" + (orjson.dumps(tools) if serialized is None else serialized),
        )
        return self._get(key, lambda: counter.count_tools(tools))

    def _get(self, key: tuple[str, bytes | str], count: Callable[[], int]) -> int:
        name, data = key
        if isinstance(data, bytes):
            key = (name, hashlib.blake2b(data, digest_size=16).digest())
        value = self._counts.get(key)
        if value is None:
            value = self._counts[key] = count()
            if len(self._counts) > self._size:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(key)
        return value
