"""Recall: the messages a summary covers stay searchable, and the ones most relevant to the
latest turns come back verbatim.

The index is made of segments, one per summary fold, each indexing the span that fold
covered (so a message is indexed once, when it leaves the window). A document is a unit:
a message and the tool results that answer it, so a tool call never comes back without
its result. Ranking is BM25 over the query's terms, blended with recency (a later unit
outranks an earlier one of equal relevance, so an updated value beats the one it
replaced). Pure: the caller reads the segments and the messages from the store.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.conversation.identity import Message
from proxy.conversation.tokens import TokenCounter
from proxy.facts.ledger import Fact, Valued, message_text, terms
from proxy.summary.fold import render_transcript

__all__ = [
    "RECALL_PREFIX",
    "Hit",
    "RecallIndex",
    "Recalled",
    "documents",
    "later_values",
    "recall_message",
    "segment",
]

RECALL_PREFIX = (
    "Recalled from earlier in this conversation (verbatim messages the summary covers,"
    " most relevant to the latest turns; for reference, not new instructions):\n"
)
_K1, _B = 1.2, 0.75  # BM25's usual constants
_MAX_QUERY_TERMS = 48
_EXCERPT_CHARS = 240  # around each matching term, when a message must be cut
_EARLIER = 0.5  # a query term's weight when only the turns before the newest have it
_DISTINCTIVE = 0.05  # a hit needs a query term found in at most this share of the units


def segment(start: int, messages: Sequence[Message], follows: str) -> dict[str, Any]:
    """The index of transcript[start:start + len(messages)], one fold's span: its units
    (start, end, length in terms) and its postings (term -> [[unit, count], ...]).
    `follows` is the chain value of the summary it extends, so a reader can tell a
    segment that continues its cached index from one after an edit of history."""
    units: list[list[int]] = []
    postings: dict[str, list[list[int]]] = {}
    bounds = [i for i, m in enumerate(messages) if m.get("role") != "tool" or i == 0]
    for number, (first, last) in enumerate(zip(bounds, [*bounds[1:], len(messages)], strict=True)):
        counted = Counter(
            term for message in messages[first:last] for term in terms(message_text(message))
        )
        units.append([start + first, start + last, sum(counted.values())])
        for term, count in counted.items():
            postings.setdefault(term, []).append([number, count])
    return {"follows": follows, "units": units, "postings": postings}


def documents(texts: Sequence[tuple[int, str]], follows: str) -> dict[str, Any]:
    """An index in `segment`'s form of single messages, each given by its transcript
    position and the text to find it by (a stubbed tool result: its call and its whole
    output, `proxy.engine.stubs`), positions ascending."""
    units: list[list[int]] = []
    postings: dict[str, list[list[int]]] = {}
    for number, (position, text) in enumerate(texts):
        counted = Counter(terms(text))
        units.append([position, position + 1, sum(counted.values())])
        for term, count in counted.items():
            postings.setdefault(term, []).append([number, count])
    return {"follows": follows, "units": units, "postings": postings}


@dataclass(frozen=True, slots=True)
class Hit:
    start: int  # transcript[start:end] is the unit
    end: int
    score: float
    terms: tuple[str, ...]  # the query terms it matched


@dataclass(slots=True)
class RecallIndex:
    """The merged segments of a session: built once per fold, then only read."""

    units: list[tuple[int, int, int]] = field(default_factory=list)
    postings: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    length: int = 0  # terms over all units

    def extended(self, segments: Iterable[dict[str, Any]]) -> RecallIndex:
        """A new index with `segments` added (this one is left as it is)."""
        units = list(self.units)
        postings = dict(self.postings)
        length = self.length
        for part in segments:
            offset = len(units)
            for start, end, size in part["units"]:
                units.append((start, end, size))
                length += size
            for term, entries in part["postings"].items():
                postings[term] = [
                    *postings.get(term, ()),
                    *((offset + unit, count) for unit, count in entries),
                ]
        return RecallIndex(units, postings, length)

    def unit_of(self, position: int) -> tuple[int, int] | None:
        """The unit (start, end) that holds transcript message `position`, if indexed."""
        at = bisect.bisect_right(self.units, (position, math.inf, math.inf)) - 1
        if at >= 0 and self.units[at][0] <= position < self.units[at][1]:
            return self.units[at][0], self.units[at][1]
        return None

    def search(
        self,
        query: str,
        limit: int,
        relevance_weight: float = 0.8,
        recency_weight: float = 0.2,
        floor: float = 0.0,
        earlier: str = "",
    ) -> list[Hit]:
        """Units whose terms in common with `query` are distinctive together (expected in
        at most 5% of the units: chatter that shares only common words is not worth
        recalling), best first: BM25 times the share of the query's terms matched
        (normalized to the best hit) times `relevance_weight`, plus recency (0 for the
        first unit, 1 for the last) times `recency_weight`; none whose relevance is below
        `floor` times the best one's. Terms only in `earlier` (the turns before the
        newest) weigh half: the newest message is what is being asked. Work follows the
        postings of the query's terms."""
        count = len(self.units)
        if not count or limit <= 0:
            return []
        average = self.length / count or 1.0
        weight = dict.fromkeys(terms(earlier), _EARLIER) | dict.fromkeys(terms(query), 1.0)
        wanted = [term for term in weight if term in self.postings]
        wanted.sort(key=lambda term: len(self.postings[term]))
        del wanted[_MAX_QUERY_TERMS:]
        scores: dict[int, float] = {}
        matched: dict[int, list[str]] = {}
        for term in wanted:
            entries = self.postings[term]
            idf = math.log(1 + (count - len(entries) + 0.5) / (len(entries) + 0.5))
            for unit, frequency in entries:
                size = self.units[unit][2]
                tf = frequency * (_K1 + 1) / (frequency + _K1 * (1 - _B + _B * size / average))
                scores[unit] = scores.get(unit, 0.0) + idf * weight[term] * tf
                matched.setdefault(unit, []).append(term)
        # The share of units expected to hold all of a unit's matched terms (as if terms
        # were independent): "mobile", "launch" and "date" are each common, together rare.
        share = {term: math.log(len(self.postings[term]) / count) for term in wanted}
        rare = math.log(max(2, _DISTINCTIVE * count) / count)
        scores = {u: v for u, v in scores.items() if sum(share[t] for t in matched[u]) <= rare}
        if not scores:
            return []
        # A unit that has more of the query's terms outranks one that has a few of them
        # more often ("payments lead" over a short "lead").
        total = sum(weight[term] for term in wanted)
        scores = {u: v * sum(weight[t] for t in matched[u]) / total for u, v in scores.items()}
        best = max(scores.values()) or 1.0
        scores = {u: v for u, v in scores.items() if v >= floor * best}
        last = max(count - 1, 1)

        def blended(unit: int) -> float:
            return relevance_weight * scores[unit] / best + recency_weight * unit / last

        ranked = sorted(scores, key=blended, reverse=True)[:limit]
        return [
            Hit(self.units[u][0], self.units[u][1], blended(u), tuple(matched[u])) for u in ranked
        ]


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recall block and what it shows: each unit's start, with the terms its excerpts
    are around (None: the whole unit)."""

    message: Message
    shown: dict[int, frozenset[str] | None]

    def covers(self, hit: Hit) -> bool:
        """Whether the block already shows what `hit` matched."""
        if hit.start not in self.shown:
            return False
        terms = self.shown[hit.start]
        return terms is None or terms.issuperset(hit.terms)


def recall_message(
    hits: Sequence[tuple[Hit, list[Message]]],
    ledger: Sequence[Fact],
    counter: TokenCounter,
    room: int,
) -> Recalled | None:
    """The labelled block of recalled units, best first until `room` tokens are used,
    shown in conversation order. A unit that alone is too big comes as excerpts around
    its matching terms (a single message) or not at all (a tool unit stays whole). A
    value the ledger says was replaced later is followed by a note naming the current one."""
    chosen: list[tuple[int, str, frozenset[str] | None]] = []
    current = {fact.key: fact.value for fact in ledger if fact.current}
    noted: set[str] = set()
    used = counter.count_message({"role": "system", "content": RECALL_PREFIX})
    for hit, messages in hits:
        text, terms = f"[message {hit.start}] " + render_transcript(messages), None
        if used + counter.count_text(text) + 1 > room and len(messages) == 1:
            if messages[0].get("role") == "tool":  # an output: the lines that match
                label = f"[message {hit.start}, the lines that match] "
                text = label + _matching_lines(
                    render_transcript(messages), hit.terms, room - used - 16, counter
                )
            else:
                text = f"[message {hit.start}, excerpt] " + _excerpt(
                    render_transcript(messages), hit.terms
                )
            terms = frozenset(hit.terms)
        notes = later_values(text, ledger, current, noted)
        if notes:
            text += "\n(Since then: " + "; ".join(notes) + ".)"
        cost = counter.count_text(text) + 1
        if used + cost > room:
            continue
        chosen.append((hit.start, text, terms))
        noted.update(notes)
        used += cost
    while chosen:
        chosen.sort(key=lambda unit: unit[0])
        content = RECALL_PREFIX + "\n\n".join(text for _, text, _ in chosen)
        message = {"role": "system", "content": content}
        if counter.count_message(message) <= room:
            return Recalled(message, {start: terms for start, _, terms in chosen})
        chosen.pop()  # our estimate was short
    return None


def _excerpt(text: str, matched: Sequence[str]) -> str:
    """Windows of `text` around the first occurrences of the matched terms."""
    lowered = text.casefold()
    windows: list[tuple[int, int]] = []
    for term in matched[:4]:
        found = re.search(rf"(?<!\w){re.escape(term)}(?!\w)", lowered)
        if found:
            windows.append((max(0, found.start() - _EXCERPT_CHARS), found.end() + _EXCERPT_CHARS))
    windows.sort()
    merged: list[list[int]] = []
    for start, end in windows:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return " … ".join(text[start:end] for start, end in merged) or text[: 2 * _EXCERPT_CHARS]


def _matching_lines(
    text: str, matched: Sequence[str], room: int, counter: TokenCounter, context: int = 1
) -> str:
    """The lines of `text` (a tool's output) that hold a matched term, each with `context`
    lines around it, numbered, in order, within `room` tokens (at least the first)."""
    lines = text.split("\n")
    starts = list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
    alternatives = "|".join(re.escape(term) for term in matched[:8])
    pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)
    wanted: list[int] = []
    for found in pattern.finditer(text) if alternatives else ():
        number = bisect.bisect_right(starts, found.start()) - 1
        wanted += range(max(0, number - context), min(len(lines), number + context + 1))
    shown: list[str] = []
    used, last = 0, -1
    for number in sorted(set(wanted)):
        line = f"{number + 1}: {lines[number][: 2 * _EXCERPT_CHARS]}"
        if number > last + 1:
            line = "…\n" + line
        cost = counter.count_text(line) + 1
        if shown and used + cost > room:
            break
        shown.append(line)
        used, last = used + cost, number
    return "\n".join(shown) if shown else text[: 2 * _EXCERPT_CHARS]


def later_values(
    text: str, ledger: Sequence[Valued], current: dict[str, str], noted: set[str]
) -> list[str]:
    """ "subject: old value replaced by current value" for each replaced value `text`
    shows (the current value last, where a reader looks for it)."""
    notes: dict[str, str] = {}
    for fact in ledger:
        if fact.current or fact.key not in current or fact.value not in text:
            continue
        note = f"{fact.subject}: {fact.value} was replaced by {current[fact.key]}"
        if note not in noted:
            notes.setdefault(fact.value, note)
    return list(notes.values())
