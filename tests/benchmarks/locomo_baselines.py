"""What simple strategies put in a model's context, for the LoCoMo benchmark to hold the
proxy against: computed in-process on the same messages at the same point.

- `newest`: the newest messages that fit (what LiteLLM's `trim_messages` keeps: the
  system message, then messages from the newest back while they fit);
- `ranked`: plain BM25 (lowercase word tokens, k1=1.2, b=0.75, no stopword list): a share
  of the tokens for the newest messages, the rest for the earlier messages BM25 ranks
  first for the question, in the order they were said.

Tokens are counted by the test upstream's recipe (`tests.upstream.count_prompt_tokens`:
o200k, 3 tokens a message and 3 to prime the reply), as every figure of the benchmark is.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from tests.upstream import count_prompt_tokens

__all__ = ["BM25", "Context", "message_tokens", "newest", "ranked"]

Message = dict[str, str]
_WORD = re.compile(r"[a-z0-9]+")
_PRIMING = count_prompt_tokens({"messages": []})  # the reply's, once a request


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def message_tokens(message: Message) -> int:
    """A message's tokens in a request (its 3, its role and content): a request's tokens
    are its messages' plus the reply's priming."""
    return count_prompt_tokens({"messages": [message]}) - _PRIMING


class BM25:
    """Okapi BM25 over `documents`, with Lucene's idf (never negative)."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.terms = [Counter(words(d)) for d in documents]
        self.lengths = [sum(t.values()) for t in self.terms]
        self.average = sum(self.lengths) / max(len(self.lengths), 1)
        frequency: Counter[str] = Counter()
        for terms in self.terms:
            frequency.update(terms.keys())
        total = len(self.terms)
        self.idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}

    def scores(self, query: str) -> list[float]:
        asked = set(words(query))
        found: list[float] = []
        for terms, length in zip(self.terms, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / max(self.average, 1e-9))
            found.append(
                sum(
                    self.idf[t] * terms[t] * (self.k1 + 1) / (terms[t] + norm)
                    for t in asked
                    if t in terms
                )
            )
        return found


class Context:
    """Messages chosen from `history` (by index) beside a fixed system message and
    question, within a number of tokens; `messages()` in the order they were said."""

    def __init__(
        self, system: Message, history: Sequence[Message], question: Message, sizes: list[int]
    ) -> None:
        self.system, self.history, self.question = system, history, question
        self.sizes = sizes  # message_tokens of each of `history`
        self.chosen: set[int] = set()
        self.tokens = _PRIMING + message_tokens(system) + message_tokens(question)

    def add(self, index: int, limit: int) -> bool:
        """Take `history[index]` if it fits in `limit` tokens."""
        if self.tokens + self.sizes[index] > limit:
            return False
        self.chosen.add(index)
        self.tokens += self.sizes[index]
        return True

    def messages(self) -> list[Message]:
        kept = [self.history[i] for i in sorted(self.chosen)]
        return [self.system, *kept, self.question]


def newest(context: Context, limit: int) -> Context:
    """The newest messages while they fit in `limit` tokens: no gap, as trim_messages."""
    for index in reversed(range(len(context.history))):
        if not context.add(index, limit):
            break
    return context


def ranked(context: Context, limit: int, index: BM25, newest_share: float) -> Context:
    """`newest_share` of `limit` for the newest messages, then the earlier messages BM25
    ranks first for the question while they fit in `limit` (one that does not fit is
    passed over for the next)."""
    newest(context, math.floor(newest_share * limit))
    earlier = min(context.chosen, default=len(context.history))
    scores = index.scores(context.question["content"])[:earlier]
    for position in sorted(range(earlier), key=lambda i: (-scores[i], -i)):
        if scores[position] <= 0:
            break
        context.add(position, limit)
    return context
