"""The facts ledger: what a conversation states (`proxy.facts.statements`), each statement with
where it came from and when, so a later value supersedes an earlier one instead of both
being kept.

A fact is a subject as it was said, qualifiers and all ("invoice number for the Lisbon
order"), and its whole value ("INV-88213"). Two facts whose subjects name the same
words (filler such as "the", "new", "now" aside, in any order) are two values of one
thing, and the later one is current; "invoice number for the Riga order" is another
thing. Pure and dependency-free: the summarizer pins from it, recall marks superseded
values with it, and memory learns from it.

A pinned value is a claim the proxy makes to the model, so a wrong one is worse than none.
When the user names a subject again beside a value the ledger could not read as one of
that subject's ("Re the customer demo: scratch that date, it got pushed. We're now
looking at March 21."), the ledger does not guess: the value it had is doubted, no
longer current (never pinned, nor offered as remembered), and where the subject was
named again is kept, so recall shows those turns in order and the model reads the
history itself (`merge`, `doubts`).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.conversation.identity import Message
from proxy.facts.literals import _contains, _normalize, fact_spans, missing_facts
from proxy.facts.secrets import holds_secret, said_as_secret
from proxy.facts.statements import (
    asserts,
    corrections,
    negates,
    retracts,
    statements,
    subject_words,
)

__all__ = [
    "DOUBTED",
    "MAX_FACTS",
    "Fact",
    "Valued",
    "doubts",
    "facts_in",
    "merge",
    "message_text",
    "names",
    "pinned",
    "ranked",
    "recent_text",
    "related",
    "spellings",
    "stated_text",
    "terms",
    "where_said",
]

MAX_FACTS = 400
"""A ledger keeps at most this many facts (see `_capped` for which go)."""

DOUBTED = ""
"""What a doubted value was superseded by (no value is empty): its subject was named
again beside a value the ledger could not read as its update. Not current, so never
pinned; a ledger read by a release before doubts sees it as replaced, as safe."""

_TERM = re.compile(r"\w+")
# A word list reads best as words.
_FILLER = frozenset(
    """
    a an the this that these those it its is are was were be been being am do does did
    has have had will would shall should can could may might must and or but nor so yet
    of to in on at by for with from into onto about as than then there here what which
    who whom whose when where why how i me my we us our you your he him his she her they
    them their not no yes ok okay please now new newly currently actually correction
    update updated updates changed change changes moved move set sets going let lets
    remember note noted also still just final finally instead rather becomes became
    become stays stay keep kept using use used via per each every called named say says
    said plan record user assistant tool result
    """.split()  # noqa: SIM905
)


class Valued:
    """A value of a subject (a session's `Fact`, a memory's `Remembered`): what it is a
    value of, whether it is still current, and how it reads."""

    __slots__ = ()
    kind: str
    subject: str
    value: str
    superseded_by: str | None

    @property
    def key(self) -> str:
        """What the fact is a value of: its subject's words, filler aside, in order of
        the alphabet ("Lisbon order's invoice number" is the "invoice number for the
        Lisbon order"); a fact without a subject (an older ledger's) stands for itself."""
        return subject_key(self.subject) if self.subject else "= " + _normalize(self.value)

    @property
    def current(self) -> bool:
        return self.superseded_by is None

    @property
    def doubted(self) -> bool:
        """Whether the subject was said again beside a value not read as its update."""
        return self.superseded_by == DOUBTED

    def text(self) -> str:
        return f"{self.subject}: {self.value}" if self.subject else self.value


@dataclass(frozen=True, slots=True)
class Fact(Valued):
    """One value, what it is the value of, and where and when it was said."""

    kind: str  # the type of the value's first literal (`proxy.facts.literals`), or "text"
    subject: str
    value: str
    source: int  # transcript index of the message that said it (last time)
    time: float
    mentions: int = 1
    superseded_by: str | None = None  # the value that replaced it, if one did
    # A correction's old value ("I said 8443 earlier, it's 9443"): until `merge` finds
    # the fact that had it, the subject is only what the correction named, if anything.
    corrects: str | None = None
    # A doubted value: the messages that named its subject again (transcript indexes).
    again: tuple[int, ...] = ()

    def to_list(self) -> list[Any]:
        data = [
            self.kind,
            self.subject,
            self.value,
            self.source,
            self.time,
            self.mentions,
            self.superseded_by,
        ]
        return [*data, list(self.again)] if self.again else data

    @classmethod
    def from_list(cls, data: list[Any]) -> Fact:
        kind, subject, value, source, time, mentions, superseded_by, *rest = data
        again = tuple(rest[0]) if rest else ()
        return cls(kind, subject, value, source, time, mentions, superseded_by, again=again)


def message_text(message: Message) -> str:
    """The words of a message: its text parts and its tool calls' arguments."""
    content = message.get("content")
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts += [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    return "\n".join(parts)


def stated_text(message: Message) -> str:
    """The words of a message that can state a fact: the user's and the assistant's own
    text; not a tool's output nor a call's arguments, whose fields describe what the tool
    was asked about ("Image:", "Client Version:"), not a subject of the conversation (they
    stay in their message, where recall finds them)."""
    if message.get("role") == "tool":
        return ""
    return message_text({"content": message.get("content")})


def recent_text(conversation: Sequence[Message], messages: int = 3, chars: int = 4000) -> str:
    """The latest turns' words: what recall and pinned facts are ranked against."""
    return "\n".join(message_text(m) for m in conversation[-messages:])[-chars:]


def pinned(
    ledger: Sequence[Fact], query: str, count: Callable[[str], int], max_tokens: int
) -> Callable[[str], list[str]]:
    """What to pin after a summary: the current facts it lacks, and the current value of
    every fact that was updated (summaries get those wrong), most relevant to `query`
    first, within `max_tokens`. Never a credential: a ledger stored before its shape or
    cue was known may hold one."""
    updated = {fact.key for fact in ledger if not fact.current}

    def pin(summary: str) -> list[str]:
        current = ranked(ledger, query)
        absent = set(missing_facts([fact.value for fact in current], summary))
        kept: list[str] = []
        used = 0
        for fact in current:
            if fact.key not in updated and fact.value not in absent:
                continue
            text = fact.text()
            cost = count(text) + 1
            if used + cost <= max_tokens and not holds_secret(text):
                kept.append(text)
                used += cost
        return kept

    return pin


def where_said(ledger: Iterable[Fact]) -> list[tuple[frozenset[str], int]]:
    """Each subject's key words and the messages where its value was said: a current
    value's, and a doubted one's (with no current value since) with each message that
    named it again, so recall brings back the turns in order for the model to read."""
    facts = [fact for fact in ledger if fact.subject]
    current = {fact.key for fact in facts if fact.current}
    said: list[tuple[frozenset[str], int]] = []
    for fact in facts:
        if fact.current or (fact.doubted and fact.key not in current):
            words = frozenset(fact.key.split())
            said += [(words, source) for source in (fact.source, *fact.again)]
    return said


def facts_in(text: str, source: int, time: float) -> list[Fact]:
    """The statements of one message as facts; none that is, or is said on a line that
    holds, a credential (`proxy.facts.secrets`): a password said in a conversation stays
    in its message, where recall finds it, and is never pinned, noted or shared with
    another session."""
    found = [Fact(kind, subject, value, source, time) for kind, subject, value in statements(text)]
    found += [
        Fact("text", subject, value, source, time, corrects=old)
        for subject, old, value in corrections(text)
    ]
    return [
        fact
        for fact in found
        if not holds_secret(fact.subject) and not said_as_secret(fact.value, text)
    ]


@functools.lru_cache(maxsize=8192)
def subject_key(subject: str) -> str:
    """A subject's words, filler aside, each as the one word of its synonyms ("broker" is
    a "queue", "expiry" a "ttl"), in order of the alphabet (asked for on every request
    that offers remembered facts, so kept once worked out)."""
    subject = _CLUSTER_VERSION.sub("kube version", _MIN_VERSION.sub("cutoff", subject))
    said = subject_words(subject)
    # The head noun: the last word, or the one before "of", "on", "for"...
    head = next((i - 1 for i, w in enumerate(said) if i and w in _OF), len(said) - 1)
    words = {_singular(_synonym(w, i == head)) for i, w in enumerate(said)}
    return " ".join(sorted(words - _FILLER))


_OF = frozenset({"of", "on", "for", "in", "at"})


def _synonym(word: str, head: bool) -> str:
    """The one word of `word`'s synonyms; a word that also names things ("the session
    broker") only as the head of a subject ("the quota keeper broker")."""
    return word if word in _NAMING and not head else _SYNONYMS.get(word, word)


def _singular(word: str) -> str:
    """A plural as its singular ("the vega nodes" are the "vega node pool"); "status" as is."""
    plural = len(word) > 3 and word.endswith("s") and not word.endswith(_NOT_PLURAL)
    return word[:-1] if plural else word


# Words that name one thing in the talk of a software team: each as the first of its line.
_SYNONYMS = {
    word: line.split()[0]
    for line in """
    db database
    k8s kube kubernetes
    ttl expiry expiration
    queue broker
    code repo repository codebase source
    demo walkthrough
    owner maintainer owns
    call oncall pager
    prod production
    staging stage stg
    config configuration settings
    env environment
    """.strip().splitlines()
    for word in line.split()
}
_NAMING = frozenset({"broker"})  # also a service's name: a queue only at a subject's end
_MIN_VERSION = re.compile(r"\bmin(?:imum)?\s+version\b", re.I)
_CLUSTER_VERSION = re.compile(r"\bcluster(?:'s)?\s+version\b", re.I)  # its kube version
# A key's word -> every way of saying it (`names`).
_SAID_AS = {
    one: tuple(word for word, its in _SYNONYMS.items() if its == one)
    for one in set(_SYNONYMS.values())
} | {"cutoff": ("cutoff", "min version", "minimum version")}


_NOT_PLURAL = ("ss", "us", "is")  # "status", "redis": no "s" to drop


@functools.lru_cache(maxsize=4096)
def spellings(term: str) -> tuple[str, ...]:
    """The terms (`terms`) that may say `term`: itself, its plural or singular, and its
    synonyms, a phrase spelled as an identifier ("cutoff" is said `min_version`)."""
    said = _SAID_AS.get(_SYNONYMS.get(term, term), (term,))
    words = [word.replace(" ", "_") for word in (term, *said)]
    other = [  # a word's other number ("7", "7s" and `min_version` have none)
        (w[:-1] if not w.endswith(_NOT_PLURAL) else w) if w.endswith("s") else w + "s"
        for w in words
        if w.isalpha() and len(w) > 1
    ]
    return tuple(dict.fromkeys([term, *words, *other]))


def names(fact: Valued, text: str, spare: int = 0) -> bool:
    """Whether `text` (case-folded) names `fact`'s subject: has all of its key words but
    `spare` (never fewer than two, so a one-word subject is never named by nothing), or a
    synonym of each ("the pdf renderer broker" names the "pdf renderer queue")."""
    words = fact.key.split()
    named = sum(any(said in text for said in _SAID_AS.get(word, (word,))) for word in words)
    return named >= min(len(words), max(len(words) - spare, 2))


def _same_kind(fact: Valued, other: Valued) -> bool:
    """Whether two values can be of one subject: of one kind, a bare number counted as a
    number ("8" is text, the literal finder types numbers from two digits on)."""

    def kind(valued: Valued) -> str:
        return "number" if valued.kind == "text" and valued.value.isdigit() else valued.kind

    return kind(fact) == kind(other)


def related(key: str, other: str) -> bool:
    """Whether two subjects' keys may name one thing: the same words, or one's words all
    among the other's with at least two of them (an alias, `merge`)."""
    if key == other:
        return True
    words, others = set(key.split()), set(other.split())
    return len(words & others) >= 2 and (words <= others or others <= words)


def merge(
    ledger: Iterable[Fact],
    new: Iterable[Fact],
    heard: Iterable[Fact] = (),
    said: Iterable[tuple[int, str]] = (),
) -> list[Fact]:
    """`ledger` with `new` facts (in the order said) added: a value said again is
    refreshed, a different value of the same subject supersedes the current one. Of the
    `heard` among them (what the model said, not the user), none supersedes: a model
    that restates a value wrongly ("Deliveries: 0" for "deliveries leave at 05:45") must
    not have the proxy pin its slip as the current value. `said`: the user's messages
    the new facts were read from, each as (its source, its stated text); a current value
    whose subject one of them names again beside a value the ledger read as none of that
    subject's is doubted (`doubts`), after that message's own facts are merged."""
    facts = list(ledger)
    where = {fact.key: i for i, fact in enumerate(facts) if fact.current}
    weak = {id(fact) for fact in heard}
    texts = sorted(said)
    waiting = 0  # the first message of `texts` not yet read for doubts
    at: int | None = None  # the source whose facts are being merged
    touched: set[str] = set()  # the subjects its facts were values of
    read: list[Fact] = []  # its facts

    def settle(before: int | None) -> None:
        """Doubt with the messages said before `before` (all, with None)."""
        nonlocal waiting
        while waiting < len(texts) and (before is None or texts[waiting][0] < before):
            source, text = texts[waiting]
            waiting += 1
            own = source == at
            _doubt(facts, where, source, text, touched if own else set(), read if own else [])

    for fact in new:
        if fact.source != at:
            settle(fact.source)
            at, touched, read = fact.source, set(), []
        read.append(fact)
        touched.add(fact.key)
        if fact.corrects is not None:
            corrected = _corrected(facts, where, fact)
            if corrected is None:
                continue  # a value nobody had: nothing to correct
            fact = corrected
            touched.add(fact.key)
        index = where.get(fact.key)
        if index is None:
            index = _alias(facts, where, fact)
        if index is None:
            where[fact.key] = len(facts)
            facts.append(fact)
            continue
        old = facts[index]
        touched.add(old.key)
        if _normalize(old.value) == _normalize(fact.value):
            facts[index] = replace(
                old, source=fact.source, time=fact.time, mentions=old.mentions + 1
            )
        elif id(fact) in weak:
            continue
        else:
            facts[index] = replace(old, superseded_by=fact.value)
            if len(old.key.split()) > len(fact.key.split()):  # an alias: the fuller name
                fact = replace(fact, subject=old.subject)
            where.pop(old.key, None)
            where[fact.key] = len(facts)
            facts.append(fact)
    settle(None)
    return _capped(facts)


def _doubt(
    facts: list[Fact],
    where: dict[str, int],
    source: int,
    text: str,
    touched: set[str],
    read: Sequence[Fact],
) -> None:
    """Doubt the current facts said before `source` whose subject `text` (said there)
    names again beside a value not read as theirs (`touched`: the subjects its facts
    were values of, `read`: those facts)."""
    earlier = [facts[i] for key, i in where.items() if key not in touched]
    earlier = [fact for fact in earlier if fact.source < source]
    for key in doubts(earlier, text, read):
        index = where.pop(key)
        facts[index] = replace(facts[index], superseded_by=DOUBTED, again=(source,))


def _restates(fact: Valued, other: Valued) -> bool:
    """Whether `fact`'s value says `other`'s subject and value ("hiring budget $120k")."""
    said = _normalize(fact.value)
    if fact.key == other.key or not _contains(said, _normalize(other.value)):
        return False
    found = set(terms(fact.value))
    return all(not found.isdisjoint(_spelled(word)) for word in other.key.split())


def _corrected(facts: list[Fact], where: dict[str, int], fact: Fact) -> Fact | None:
    """A correction as a fact of the subject whose current value it corrects (the latest
    such, among those whose subject has the words the correction named)."""
    old = _normalize(fact.corrects or "")
    named = set(subject_key(fact.subject).split())
    for index in sorted(where.values(), reverse=True):
        had = facts[index]
        if _normalize(had.value) == old and named <= set(had.key.split()):
            kind = had.kind if had.kind == "text" else fact.kind
            return replace(fact, kind=kind, subject=had.subject, corrects=None)
    return None


def _alias(facts: list[Fact], where: dict[str, int], fact: Fact) -> int | None:
    """The one current fact of a value of the same kind whose subject says more or less
    than `fact`'s in the same words ("kube version" and "cluster kube version"), at
    least two of them shared; none when several could be meant. One of another kind is
    another thing ("session broker queue: Kafka" beside "session broker concurrency")."""
    found = None
    for key, index in where.items():
        if not related(fact.key, key) or not _same_kind(facts[index], fact):
            continue
        if found is not None:
            return None
        found = index
    return found


def doubts(facts: Iterable[Valued], text: str, read: Sequence[Valued] = ()) -> set[str]:
    """The keys of `facts` (current values) that `text`, a message of the user's whose
    statements are `read`, puts in doubt: a sentence of it that asserts (`asserts`: not a
    question, a guess, hearsay or a condition) names the subject again, by all its words
    or their spellings, and says beside it (in that sentence or the two after) a value
    that is not the fact's, where the ledger read none of the subject's. Not a doubt: a
    value said again (with no other of its kind beside it), a denial of another value
    ("… was never 6553"), a subject named only by words of other subjects (read from the
    message, or already in the ledger: "the payments db port is 5433" does not doubt the
    payments db, nor "the security launch date" the mobile one), a value of the subject
    read from the message (`merge` took it). Mechanism, not vocabulary: what names a
    subject is its own words, what is a value is what the literal finder types."""
    facts = [fact for fact in facts if fact.subject and fact.current]
    if not facts or not text:
        return set()
    said = _Said(text, [*facts, *read])
    if not said.words:
        return set()
    same = {_normalize(other.value) for other in read}
    doubted = [f for f in facts if _normalize(f.value) not in same and said.doubts(f, read)]
    # And what restated a doubted value with its subject (the model's "Got it: hiring
    # budget $120k", read as a fact of its own): the same claim.
    values = [_normalize(other.value) for other in doubted]
    doubted += [
        f
        for f in facts
        if any(value in _normalize(f.value) for value in values)  # C-speed, first
        and any(_restates(f, other) for other in doubted)
    ]
    return {fact.key for fact in doubted}


_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+|;\s+")
_FENCED = re.compile(r"^\s*(?:```|~~~).*?^\s*(?:```|~~~)[^\n]*$", re.M | re.S)
_DIGITS = re.compile(r"\b\w*\d\w*\b")
_AFTER = 2  # sentences after the one that names a subject where its value may be said
_LONG = 600  # characters: a longer "sentence" is a paste, which names no subject again
_DIGIT_RUNS = re.compile(r"\d+")
_PASTED = 3  # lines of one shape: a log or a listing, not what the user says


class _Said:
    """A message read for doubts: its sentences (code blocks and pastes aside), each with
    its terms, once for all the facts it is checked against (`known`: the subjects that
    may be named, read from it or in the ledger)."""

    __slots__ = ("_covered", "asserted", "known", "lines", "sentences", "terms", "words")

    def __init__(self, text: str, known: Sequence[Valued]) -> None:
        text = _CLUSTER_VERSION.sub("kube version", _MIN_VERSION.sub("cutoff", text))
        text = _FENCED.sub("\n", text)
        # Each sentence with the line it is on; none of the lines a machine wrote (a log:
        # lines of one shape, numbers aside, said again and again).
        lines = text.splitlines()
        shapes = Counter(_DIGIT_RUNS.sub("0", line).strip() for line in lines)
        found = [
            (line, s.strip())
            for line, said in enumerate(lines)
            if shapes[_DIGIT_RUNS.sub("0", said).strip()] < _PASTED
            for s in _SENTENCE.split(said)
            if s.strip() and len(s) <= _LONG
        ]
        self.lines = [line for line, _ in found]
        self.sentences = [sentence for _, sentence in found]
        self.terms = [frozenset(terms(s)) for s in self.sentences]
        self.words: frozenset[str] = frozenset().union(*self.terms)
        self.asserted: dict[int, bool] = {}  # by sentence, as the reader judges it
        self.known = known
        self._covered: dict[int, list[Valued]] = {}

    def doubts(self, fact: Valued, read: Sequence[Valued]) -> bool:
        words = fact.key.split()
        spelled = [_spelled(word) for word in words]
        need = len(words) - 1 if len(words) > 2 else len(words)  # an alias spares a word
        if sum(not self.words.isdisjoint(s) for s in spelled) < need:
            return False  # the message does not name it
        own = _own(fact.subject, fact.key)  # the subject's words, not values
        for number, sentence in enumerate(self.sentences):
            found = self.terms[number]
            named = {w for w, s in zip(words, spelled, strict=True) if not found.isdisjoint(s)}
            # One word said names one of the subject's ("queue" is not also its "broker").
            said = found & frozenset().union(*(spelled[words.index(w)] for w in named))
            if min(len(named), len(said)) < need:
                continue
            if number not in self.asserted:
                self.asserted[number] = asserts(sentence)
            if not self.asserted[number]:
                continue
            if self._other_subjects(number, fact, named, read):
                continue
            if retracts(sentence) and len(named) == len(words):
                return True  # "Re the demo: scratch that date, it got pushed."
            # Named but for a word (an alias, or another thing: "status-poller handled job
            # in 331ms"), only a value of its kind on the same line is of it.
            alike = len(named) < len(words)
            after = range(number, min(number + 1 + _AFTER, len(self.sentences)))
            scope = " ".join(
                self.sentences[at]
                for at in after
                if not alike or self.lines[at] == self.lines[number]
            )
            if _another_value(fact, scope, own, negates(sentence), alike):
                return True
        return False

    def _other_subjects(
        self, number: int, fact: Valued, named: set[str], read: Sequence[Valued]
    ) -> bool:
        """Whether the words that name `fact` in sentence `number` (`named`) are all
        words of other subjects it names (read from the message, or known and named
        whole there): "the security launch date" names the mobile one but for a word."""
        covering = self._covered.get(number)
        if covering is None:
            found = self.terms[number]
            covering = [
                other
                for other in self.known
                if other.subject
                and all(not found.isdisjoint(_spelled(w)) for w in other.key.split())
            ]
            self._covered[number] = covering
        words = set(fact.key.split())
        others: set[str] = set()
        for other in (*covering, *read):
            keys = set(other.key.split())
            if other.key == fact.key or (words <= keys and _same_kind(fact, other)):
                continue  # itself, or a fuller name of it: an update `merge` could not place
            others |= keys
        return named <= others


@functools.lru_cache(maxsize=4096)
def _spelled(word: str) -> frozenset[str]:
    return frozenset(spellings(word))


@functools.lru_cache(maxsize=4096)
def _own(subject: str, key: str) -> frozenset[str]:
    """A subject's words as said and as its key's spellings: none is a value of it."""
    return frozenset(terms(subject)).union(*(_spelled(word) for word in key.split()))


@functools.lru_cache(maxsize=1024)
def _literals(scope: str) -> tuple[tuple[str, str], ...]:
    """The (kind, literal) of `scope`'s literals, and its words with a digit the finder
    leaves untyped ("9" alone): read once for every fact its sentence names."""
    spans = [(kind, literal) for kind, _, _, literal in fact_spans(scope)]
    covered = " ".join(literal for _, literal in spans)
    spans += [("number", digits) for digits in _DIGITS.findall(scope) if digits not in covered]
    return tuple(spans)


def _another_value(
    fact: Valued, scope: str, own: frozenset[str], negated: bool, alike: bool = False
) -> bool:
    """Whether `scope` says a value that is not `fact`'s: a literal (or a word with a
    digit) that is not of the subject's words; when the fact's value is said there too
    or `alike`, one of the value's kind (it may be the old value beside a new one). A
    sentence that denies (`negated`) doubts only a value it says: it denies that one."""
    value = _normalize(fact.value)
    restated = _contains(_normalize(scope), value)
    if negated:
        return restated
    spans = _literals(scope)
    # The value's kinds as typed here ("Fastly" is a name mid-sentence, text alone).
    kinds = {"number" if fact.kind == "text" and fact.value.isdigit() else fact.kind}
    kinds |= {found for found, literal in spans if _normalize(literal) in value}
    for found, literal in spans:
        if _normalize(literal) in value or not set(terms(literal)) - own:
            continue  # of the value, or of the subject ("Q3" in "the Q3 budget")
        if found in kinds or not (restated or alike):
            return True
    return False


def ranked(facts: Iterable[Fact], query: str) -> list[Fact]:
    """Current facts, those with a subject first (a value without one is often an id in a
    log line), each group most relevant to `query` first (TF-IDF overlap of subject and
    value with it), then the more recently said."""
    current = [fact for fact in facts if fact.current]
    wanted = Counter(terms(query))
    documents = [set(terms(fact.text())) for fact in current]
    frequency: Counter[str] = Counter(term for document in documents for term in document)
    size = len(documents) + 1

    def score(item: tuple[Fact, set[str]]) -> tuple[bool, float, float]:
        fact, document = item
        relevance = sum(
            math.log(size / (1 + frequency[term])) + 1 for term in document if term in wanted
        )
        return bool(fact.subject), relevance, fact.source

    pairs = sorted(zip(current, documents, strict=True), key=score, reverse=True)
    return [fact for fact, _ in pairs]


def terms(text: str, parts: bool = True) -> list[str]:
    """Lower-case words and numbers of `text`, filler dropped (shared by recall and memory).
    An identifier is a term and, with `parts` (what is searched, not what asks), so is
    each of its parts: `FRAUD_SCORER_PORT=9281` answers "the fraud scorer port", while a
    question naming `function_19_57` asks for that identifier, not for every function."""
    found: list[str] = []
    for term in _TERM.findall(_normalize(text)):
        split = term.split("_") if parts and "_" in term.strip("_") else ()
        for word in (term, *split):
            if word not in _FILLER and (len(word) > 1 or word.isdigit()):
                found.append(word)
    return found


def _capped(facts: list[Fact]) -> list[Fact]:
    """At most MAX_FACTS: superseded facts go first, then those without a subject (ids
    in pasted logs are many), oldest first, then the oldest of the rest."""
    excess = len(facts) - MAX_FACTS
    if excess <= 0:
        return facts
    order = sorted(range(len(facts)), key=lambda i: (facts[i].current, bool(facts[i].subject), i))
    drop = set(order[:excess])
    return [fact for i, fact in enumerate(facts) if i not in drop]
