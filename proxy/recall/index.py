"""Recall: the messages a summary covers stay searchable, and the ones most relevant to the
latest turns come back verbatim.

The index is made of segments, one per summary fold, each indexing the span that fold
covered (so a message is indexed once, when it leaves the window). A document is a unit:
a message and the tool results that answer it, so a tool call never comes back without
its result (and a user's request with the tool call that answers it, so an output comes
back with what it was asked for). Ranking is BM25 over the query's terms, blended with
recency (a later unit outranks an earlier one of equal relevance, so an updated value
beats the one it replaced); a unit that states a value about what is asked outranks one
that only shares its words, and a question asked before comes after the units that may
answer it. The words every question shares ("remind me again where ... lives") are not
what is asked: they find nothing. After those precise units, `ranked` fills the room
they leave: plain BM25 fused with the nearness of each unit's meaning to the question's
(`proxy.recall.meaning`), so a paraphrase is found too. Pure: the caller reads the
segments and the messages from the store.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proxy.conversation.identity import Message
from proxy.conversation.tokens import TokenCounter
from proxy.facts.ledger import Fact, Valued, message_text, related, spellings, terms
from proxy.recall.meaning import DIMENSIONS, decoded, encoded, vectors
from proxy.summary.fold import render_transcript

__all__ = [
    "ASKING",
    "RECALL_PREFIX",
    "Hit",
    "RecallIndex",
    "Recalled",
    "asked_terms",
    "best_first",
    "documents",
    "inflections",
    "later_values",
    "least_tokens",
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
_COMMON = 0.25  # a term in more of the units than this (and than _FEW) is the session's jargon
_FEW = 8
_ALIKE = 2  # units the query cannot tell apart (same length, same counts) before the rest
_FUSED = 10  # reciprocal-rank fusion's constant: 1 / (_FUSED + rank) from each ranking
# Bytes an index holds, roughly (CPython 3.11, 64 bits): a unit's tuple of three ints, a
# posting's tuple of two and its slot, a term's key, list and slot in the dict (measured).
_UNIT_BYTES, _ENTRY_BYTES, _TERM_BYTES = 128, 88, 176
_NEAR = 0.3  # the least cosine of meanings for a unit to be ranked by its meaning
# More characters a token than any text has, and fewer tokens than any unit's label and
# role take (`least_tokens`).
_CHARS_PER_TOKEN = 6
_LABEL_TOKENS = 6
# A turn is read as the answer to the one before it ("Yes, last week!"): a unit's words
# score and its meaning's nearness gain this share of the unit's before it.
_ANSWERS = 0.3
_SCANT = 0.2  # a unit of less than this share of the best BM25 score is not ranked by it
_STATED = "="  # postings of the terms a unit states a value about: "=" + term (never a term)
_QUESTION = "?"  # postings of the units that are a user's question (never a term)
_ASKED = 0.5  # a question's relevance: it names what is asked, it does not answer it
_QUESTION_MARK = re.compile(r"[?\uff1f\u061f](?=[\s)\]\"'»”]|$)")
# The words of asking, not of what is asked: every probe has some ("quick check: where does
# X live again?"), so a unit that shares only these would come back for every question.
ASKING = frozenset(
    """
    remind reminder again quick quickly check checking tell told know knew known recall
    recalled recalling say said says saying still wondering wonder wondered where live lives
    living remember remembered mind forgot forget forgotten ask asked asking question
    mention mentioned confirm double sure exactly thanks thank sorry btw oh
    um whats wheres decide decided agree agreed settle settled think thought believe look
    find anyone someone somebody one many much if whether already anymore days right up
    ended
    """.split()  # noqa: SIM905
)


def asked_terms(text: str) -> list[str]:
    """`terms` of a question without the words of asking: what it asks about."""
    return [term for term in terms(text, parts=False) if term not in ASKING]


def segment(
    start: int,
    messages: Sequence[Message],
    follows: str,
    stated: Iterable[tuple[int, str]] = (),
) -> dict[str, Any]:
    """The index of transcript[start:start + len(messages)], one fold's span: its units
    (start, end, length in terms) and its postings (term -> [[unit, count], ...]).
    `follows` is the chain value of the summary it extends, so a reader can tell a
    segment that continues its cached index from one after an edit of history.
    `stated` holds (transcript position, subject) of the statements the span makes (the
    facts the fold found): each subject's terms are posted as "=" + term for its unit,
    so search tells a unit that states a value about a subject from one that names it."""
    units: list[list[int]] = []
    postings: dict[str, list[list[int]]] = {}
    said: list[str] = []  # each unit's text, for its meaning
    bounds = [i for i, m in enumerate(messages) if i == 0 or not _answers(messages[i - 1], m)]
    for number, (first, last) in enumerate(zip(bounds, [*bounds[1:], len(messages)], strict=True)):
        texts = [message_text(message) for message in messages[first:last]]
        said.append("\n".join(texts))
        counted = Counter(term for text in texts for term in terms(text))
        units.append([start + first, start + last, sum(counted.values())])
        for term, count in counted.items():
            postings.setdefault(term, []).append([number, count])
        if messages[first].get("role") == "user" and len(texts) == 1 and _asks(texts[0]):
            postings.setdefault(_QUESTION, []).append([number, 1])
    about: dict[str, set[int]] = {}
    for position, subject in stated:
        at = bisect.bisect_right(bounds, position - start) - 1
        if 0 <= position - start < len(messages) and at >= 0:
            for term in terms(subject):
                about.setdefault(_STATED + term, set()).add(at)
    for key, numbers in about.items():
        postings[key] = [[number, 1] for number in sorted(numbers)]
    meanings = encoded(vectors(said))
    return {"follows": follows, "units": units, "postings": postings, "meanings": meanings}


def _answers(before: Message, message: Message) -> bool:
    """Whether `message` belongs to the unit of the one `before` it: a tool result to its
    call, and the tool call that answers a user's request to that request ("check the
    cert on hooks.example.io" and the output that says when it expires are one unit)."""
    role = message.get("role")
    return role == "tool" or (
        role == "assistant" and bool(message.get("tool_calls")) and before.get("role") == "user"
    )


def _asks(text: str) -> bool:
    """Whether a message is a question and nothing more (its last sentence asks)."""
    return text.rstrip().endswith("?")


def asking(text: str) -> bool:
    """Whether a message asks anything: a sentence of it ends in a question mark (Latin,
    full-width or Arabic)."""
    return _QUESTION_MARK.search(text) is not None


def documents(texts: Sequence[tuple[int, str]], follows: str) -> dict[str, Any]:
    """An index in `segment`'s form of single messages, each given by its transcript
    position and the text to find it by (a stubbed tool result: its call and its whole
    output, `proxy.engine.planner.stubs`), positions ascending."""
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
    precise: bool = True  # found by `search`; False: by `ranked` (score: fused ranks)
    words: float = 0.0  # `ranked`'s: its BM25 score for the query
    near: float = 0.0  # `ranked`'s: the cosine of its meaning and the query's


@dataclass(slots=True)
class RecallIndex:
    """The merged segments of a session: built once per fold, then only read."""

    units: list[tuple[int, int, int]] = field(default_factory=list)
    postings: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    length: int = 0  # terms over all units
    # Each unit's meaning (`proxy.recall.meaning`), a row per unit; zeros where a
    # segment stored none (one written before meanings were).
    meanings: np.ndarray = field(default_factory=lambda: np.zeros((0, DIMENSIONS), np.float32))
    # What the index holds in memory, bytes, roughly: what a cache of indexes weighs it by.
    size: int = 0

    def extended(self, segments: Iterable[dict[str, Any]]) -> RecallIndex:
        """A new index with `segments` added (this one is left as it is)."""
        units = list(self.units)
        postings = dict(self.postings)
        length = self.length
        meanings = [self.meanings]
        entered = 0  # postings' entries added
        for part in segments:
            offset = len(units)
            for start, end, size in part["units"]:
                units.append((start, end, size))
                length += size
            rows = len(units) - offset
            stored = part.get("meanings")
            meanings.append(
                decoded(stored, rows) if stored else np.zeros((rows, DIMENSIONS), np.float16)
            )
            for term, entries in part["postings"].items():
                known = postings.get(term, ())
                postings[term] = [*known, *((offset + unit, count) for unit, count in entries)]
                entered += len(entries) + (0 if known else _TERM_BYTES // _ENTRY_BYTES)
        joined = np.concatenate(meanings, dtype=np.float32)
        added = (len(units) - len(self.units)) * _UNIT_BYTES + entered * _ENTRY_BYTES
        size = self.size - self.meanings.nbytes + joined.nbytes + added
        return RecallIndex(units, postings, length, joined, size)

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
        """Units that match what `query` asks (its terms, the words of asking aside, each
        as any of its `spellings`), best first: those with more of the newest message's
        terms first, then by BM25 times the share of the query's terms matched
        (normalized to the best hit), doubled at most for the share it states a value
        about, times `relevance_weight`, plus recency (0 for the first unit, 1 for the
        last) times `recency_weight`; none whose relevance is below `floor` times the
        best one's, unless none has more of the terms the newest message asks. Only the
        newest message's terms, as it says them, find a unit (it is what is being
        asked); terms only in `earlier` (the turns before it) weigh half and, like
        synonyms, only rank. Work follows the postings of the query's terms."""
        count = len(self.units)
        if not count or limit <= 0:
            return []
        average = self.length / count or 1.0
        weight = dict.fromkeys(asked_terms(query), 1.0)
        weight |= {term: _EARLIER for term in asked_terms(earlier) if term not in weight}
        forms: dict[str, list[str]] = {}
        said_as: dict[frozenset[str], str] = {}  # a term's spellings -> the term
        for term in list(weight):
            found = [form for form in spellings(term) if form in self.postings]
            same = said_as.setdefault(frozenset(found), term) if found else term
            if same != term:  # "worker" and "workers": one term, weighed as its most
                weight[same] = max(weight[same], weight.pop(term))
            elif found:
                forms[term] = found
        frequency = {
            term: min(count, sum(len(self.postings[f]) for f in forms[term])) for term in forms
        }
        wanted = sorted(forms, key=frequency.__getitem__)[:_MAX_QUERY_TERMS]
        scores: dict[int, float] = {}
        matched: dict[int, list[str]] = {}  # the query's terms a unit has
        said: dict[int, list[str]] = {}  # the spellings it has them in
        counts: dict[int, list[int]] = {}
        direct: set[int] = set()  # units with a term of the newest message as it was said
        for term in wanted:
            best: dict[int, tuple[float, str, int]] = {}
            for form in forms[term]:
                entries = self.postings[form]
                idf = math.log(1 + (count - len(entries) + 0.5) / (len(entries) + 0.5))
                for unit, times in entries:
                    size = self.units[unit][2]
                    tf = times * (_K1 + 1) / (times + _K1 * (1 - _B + _B * size / average))
                    if unit not in best or idf * tf > best[unit][0]:
                        best[unit] = (idf * tf, form, times)
            for unit, (value, form, times) in best.items():
                scores[unit] = scores.get(unit, 0.0) + value * weight[term]
                matched.setdefault(unit, []).append(term)
                said.setdefault(unit, []).append(form)
                counts.setdefault(unit, []).append(times)
                if weight[term] == 1.0 and form.removesuffix("s") == term.removesuffix("s"):
                    direct.add(unit)
        # A synonym helps a unit rank, it does not find one: "broker" for "queue" would
        # find every message about the session-broker.
        scores = {
            u: v
            for u, v in scores.items()
            if u in direct and self._asked(matched[u], weight, frequency)
        }
        if not scores:
            return []
        # A unit that has more of the query's terms outranks one that has a few of them
        # more often ("payments lead" over a short "lead"); one that states a value
        # about them outranks one that only names them (the question asked before).
        total = sum(weight[term] for term in wanted)
        # Only a unit that has all the newest message asks about states a value of it:
        # "media transcoder memory limit is 384Mi" says nothing of the transcoder's region.
        asked = {term for term in wanted if weight[term] == 1.0}
        stated = {
            u: share
            for u, share in self._stating(wanted, forms, weight, scores).items()
            if asked <= set(matched[u])
        }
        scores = {
            u: v * (sum(weight[t] for t in matched[u]) + stated.get(u, 0.0)) / total
            for u, v in scores.items()
        }
        # A question asked before names what is asked again without answering it: the
        # units that may answer come first.
        questions = {unit for unit, _ in self.postings.get(_QUESTION, ()) if unit in scores}
        covered = {u: sum(t in asked for t in matched[u]) for u in scores}
        for unit in questions:
            scores[unit] *= _ASKED
        best_score = max(scores.values()) or 1.0
        most = max(covered.values())
        scores = {u: v for u, v in scores.items() if v >= floor * best_score or covered[u] == most}
        last = max(count - 1, 1)

        def ranked(unit: int) -> tuple[float, float]:
            blended = relevance_weight * scores[unit] / best_score + recency_weight * unit / last
            return covered[unit] * (_ASKED if unit in questions else 1.0), blended

        # Units the query cannot tell apart (the same length and counts of its terms:
        # "Noted, the webhook handler." said eleven times) are likely copies: past the
        # latest few they wait until the distinct ones are taken.
        alike: Counter[tuple[Any, ...]] = Counter()
        first: list[int] = []
        rest: list[int] = []
        for unit in sorted(scores, key=ranked, reverse=True):
            signature = (self.units[unit][2], *said[unit], *counts[unit])
            alike[signature] += 1
            (first if alike[signature] <= _ALIKE else rest).append(unit)
        return [
            Hit(self.units[u][0], self.units[u][1], ranked(u)[1], tuple(said[u]))
            for u in [*first, *rest][:limit]
        ]

    def filled(self, hits: list[Hit], query: str, limit: int) -> list[Hit]:
        """`hits`, then the units `ranked` finds for `query` that they lack, `limit` in all."""
        found = {hit.start for hit in hits}
        ranked = (hit for hit in self.ranked(query, limit) if hit.start not in found)
        return [*hits, *ranked][: max(limit, len(hits))]

    def ranked(self, query: str, limit: int) -> list[Hit]:
        """Plain BM25 over the words of `query`, each in any of its `inflections`, fused
        with the units nearest to it in meaning (reciprocal ranks), best first. `search`
        finds what a question names precisely; this fills the room it leaves: on
        conversations nobody here wrote ("what did she research?" for "Researching
        adoption agencies", "what pet?" for "my dog"), a block filled this way holds
        more of what a question needs than a few precise units. Each unit is read as
        the answer to the one before it (`_ANSWERS` of that one's BM25 score and
        nearness is its own: "Yes! The second week of July" answers "did you make it
        to the lake house?"); a unit of a scant share of the best BM25 score is ranked
        only by its meaning. Work follows the postings of the query's rarest terms,
        and one product of the query's meaning with the units' (in numpy, no Python
        loop over them)."""
        count = len(self.units)
        if not count or limit <= 0:
            return []
        average = self.length / count or 1.0
        forms: dict[str, list[str]] = {}
        for term in dict.fromkeys(terms(query, parts=False)):
            found = [form for form in inflections(term) if form in self.postings]
            if found:
                forms[term] = found
        postings = {
            term: Counter(dict(itertools.chain.from_iterable(self.postings[f] for f in found)))
            for term, found in forms.items()
        }
        asked = sorted(postings, key=lambda term: len(postings[term]))[:_MAX_QUERY_TERMS]
        scores: dict[int, float] = {}
        matched: dict[int, list[str]] = {}
        for term in asked:
            entries = postings[term]
            idf = math.log(1 + (count - len(entries) + 0.5) / (len(entries) + 0.5))
            for unit, times in entries.items():
                size = self.units[unit][2]
                tf = times * (_K1 + 1) / (times + _K1 * (1 - _B + _B * size / average))
                scores[unit] = scores.get(unit, 0.0) + idf * tf
                matched.setdefault(unit, []).append(term)
        for unit, score in list(scores.items()):  # what a reply answers
            if unit + 1 < count:
                scores[unit + 1] = scores.get(unit + 1, 0.0) + _ANSWERS * score
        least = _SCANT * max(scores.values(), default=0.0)
        scores = {unit: score for unit, score in scores.items() if score >= least}
        near = self._near(query, 2 * limit)
        fused = _fused([heapq.nlargest(2 * limit, scores, key=scores.__getitem__), list(near)])
        best = heapq.nlargest(limit, fused, key=fused.__getitem__)
        return [
            Hit(
                *self.units[u][:2],
                fused[u],
                tuple(matched.get(u, ())),
                False,
                scores.get(u, 0.0),
                near.get(u, 0.0),
            )
            for u in best
        ]

    def _near(self, query: str, limit: int) -> dict[int, float]:
        """The `limit` units nearest to `query` in meaning, nearest first, with their
        cosines (each averaged with `_ANSWERS` of the unit's before it), none whose
        cosine and average are both below `_NEAR`."""
        if not len(self.meanings):
            return {}
        own = self.meanings @ vectors([query])[0].astype(np.float32)
        nearness = own.copy()  # each unit read with the one it answers
        nearness[1:] = (own[1:] + _ANSWERS * own[:-1]) / (1 + _ANSWERS)
        near = np.flatnonzero(np.maximum(nearness, own) >= _NEAR)
        if len(near) > limit:
            near = near[np.argpartition(-nearness[near], limit - 1)[:limit]]
        order = near[np.argsort(-nearness[near], kind="stable")]
        return {int(unit): float(nearness[unit]) for unit in order}

    def _asked(
        self, matched: list[str], weight: dict[str, float], frequency: dict[str, int]
    ) -> bool:
        """Whether a unit's matched terms are what the newest message asks, not chatter:
        the newest message's distinctive together (expected in at most 5% of the units:
        "mobile", "launch" and "date" are each common, together rare, as if terms were
        independent; the turns before only rank what it finds), with one that is not in
        a quarter of the units (the session's jargon, in every question, finds the same
        units for all of them)."""
        count = len(self.units)
        rare = math.log(max(2, _DISTINCTIVE * count) / count)
        newest = [term for term in matched if weight[term] == 1.0]
        if sum(math.log(frequency[term] / count) for term in newest) > rare:
            return False
        common = max(_COMMON * count, _FEW)
        return any(weight[t] == 1.0 and frequency[t] <= common for t in matched)

    def _stating(
        self,
        wanted: list[str],
        forms: dict[str, list[str]],
        weight: dict[str, float],
        scores: dict[int, float],
    ) -> dict[int, float]:
        """The weight of the query's terms each scored unit states a value about (the
        subject of a statement in it has them), from the "=" postings: work follows the
        query's terms."""
        stated: dict[int, float] = {}
        for term in wanted:
            units = {
                unit for form in forms[term] for unit, _ in self.postings.get(_STATED + form, ())
            }
            for unit in units & scores.keys():
                stated[unit] = stated.get(unit, 0.0) + weight[term]
        return stated


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


def least_tokens(messages: Sequence[Message]) -> float:
    """The fewest tokens a unit of `messages` can take in a recall block: units read best
    first until theirs pass the block's room surely fill it."""
    return sum(len(message_text(m)) for m in messages) / _CHARS_PER_TOKEN + _LABEL_TOKENS


def recall_message(
    hits: Sequence[tuple[Hit, list[Message]]],
    ledger: Sequence[Fact],
    counter: TokenCounter,
    room: int,
) -> Recalled | None:
    """The labelled block of recalled units, best first until `room` tokens are used,
    shown in conversation order. A unit that alone is too big comes as excerpts around
    its matching terms (a single message) or not at all (a tool unit stays whole). A
    value the ledger says was replaced later is followed by a note naming the current one.
    Units of the same text are shown once, as the latest (the one in effect)."""
    chosen: list[tuple[int, str, frozenset[str] | None]] = []
    current = {fact.key: fact.value for fact in ledger if fact.current}
    noted: set[str] = set()
    used = counter.count_message({"role": "system", "content": RECALL_PREFIX})
    for hit, messages, rendered in _distinct(hits):
        text, terms = f"[message {hit.start}] " + rendered, None
        if used + counter.count_text(text) + 1 > room and len(messages) == 1:
            if messages[0].get("role") == "tool":  # an output: the lines that match
                label = f"[message {hit.start}, the lines that match] "
                text = label + _matching_lines(rendered, hit.terms, room - used - 16, counter)
            else:
                text = f"[message {hit.start}, excerpt] " + _excerpt(rendered, hit.terms)
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


def best_first(hits: Sequence[Hit]) -> list[Hit]:
    """Hits of several indexes (a memory's sessions) best first: precise ones by their
    score, then the rest fused anew over all of them from their BM25 scores and
    cosines (each index's fused ranks say nothing of another's)."""
    precise = sorted((hit for hit in hits if hit.precise), key=lambda hit: -hit.score)
    rest = [hit for hit in hits if not hit.precise]
    by_words = sorted(range(len(rest)), key=lambda at: -rest[at].words)
    by_meaning = sorted(range(len(rest)), key=lambda at: -rest[at].near)
    fused = _fused(
        [[at for at in by_words if rest[at].words], [at for at in by_meaning if rest[at].near]]
    )
    return [*precise, *(rest[at] for at in sorted(fused, key=fused.__getitem__, reverse=True))]


def _fused(rankings: Sequence[Sequence[int]]) -> dict[int, float]:
    """Reciprocal-rank fusion: each item's sum of 1 / (`_FUSED` + its rank) in each
    ranking that has it."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            fused[item] = fused.get(item, 0.0) + 1 / (_FUSED + rank)
    return fused


def _distinct(
    hits: Sequence[tuple[Hit, list[Message]]],
) -> list[tuple[Hit, list[Message], str]]:
    """`hits` with their rendered text, a text met again dropped: each at the rank of
    its best copy, as its latest copy (the same reply or paste said several times is
    one unit, and the latest is the one in effect). Hashes of the bounded hits' texts."""
    latest: dict[str, tuple[Hit, list[Message]]] = {}
    order: list[str] = []
    for hit, messages in hits:
        rendered = render_transcript(messages)
        known = latest.get(rendered)
        if known is None:
            order.append(rendered)
        if known is None or known[0].start < hit.start:
            latest[rendered] = (hit, messages)
    return [(*latest[rendered], rendered) for rendered in order]


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
    shows (the current value last, where a reader looks for it): one per subject, so two
    subjects that both had the value a line shows each get theirs; a doubted value
    (`proxy.facts.ledger.DOUBTED`) with no current one since is said to have changed."""
    notes: dict[str, str] = {}
    for fact in ledger:
        if fact.current or fact.value not in text:
            continue
        now = current.get(fact.key)
        if now is None and fact.doubted:  # named again beside a value not read as its own
            note = f"{fact.subject}: {fact.value} may have changed, see the later messages"
            if note not in noted:
                notes.setdefault(fact.key, note)
            continue
        if now is None and any(  # replaced under an alias, by a value still current
            other.current and other.value == fact.superseded_by and related(fact.key, other.key)
            for other in ledger
        ):
            now = fact.superseded_by
        if now is None:
            continue
        note = f"{fact.subject}: {fact.value} was replaced by {now}"
        if note not in noted:
            notes.setdefault(fact.key, note)
    return list(notes.values())


def inflections(term: str) -> tuple[str, ...]:
    """`term` and the forms English inflection gives it ("research": "researching",
    "researched"; "studied": "study", "studies"), by the language's suffixes, not by a
    list of words: a question rarely asks in the tense a thing was said. Forms no one
    says ("researchhed") cost nothing: only those in an index are looked up."""
    if not term.isalpha() or len(term) < 4:
        return (term,)
    roots = {term}  # the word less its suffix, as it may be spelled
    for suffix, back in (
        ("ies", "y"),
        ("ied", "y"),
        ("ing", ""),
        ("ed", ""),
        ("es", ""),
        ("s", ""),
    ):
        stem = term[: -len(suffix)] + back
        if term.endswith(suffix) and len(stem) >= 3:
            roots = {stem} if back else {stem, stem + "e"}
            if stem[-1] == stem[-2]:  # "planned": "plan"
                roots.add(stem[:-1])
            break
    forms = [term]
    for root in sorted(roots):
        if root.endswith("e"):
            forms += [root, root + "s", root + "d", root[:-1] + "ing"]
        elif root.endswith("y"):
            forms += [root, root[:-1] + "ies", root[:-1] + "ied", root + "ing"]
        else:  # "plan": "planning" as well as "plans"
            forms += [root, root + "s", root + "es", root + "ed", root + "ing"]
            forms += [root + root[-1] + "ed", root + root[-1] + "ing"]
    return tuple(dict.fromkeys(forms))
