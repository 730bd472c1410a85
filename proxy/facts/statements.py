"""Statements in text: what a sentence says a thing is ("the invoice number for the Lisbon
order is INV-88213" -> subject `invoice number for the Lisbon order`, value `INV-88213`).

A statement is read clause by clause: a subject (a noun phrase, kept whole with its
qualifiers), a link ("is", "is now", ":", "runs at", "has changed from … to", "set …
to", "… replaces … as", "use … to", "we decided to … on", …) and a value (the rest of
the clause, whole: "BLUE HERON", "03:15 UTC", "Maria Chen, Jonas Okafor and Aiko
Sato"). What is not plainly asserted is not a statement: a question, a negation ("is
not"), a condition ("if …"), an opinion ("should be"), a pronoun subject ("it is"), a
value with no literal in it ("the review went fine"), or words around a counter ("ack
26"). Pure and dependency-free beyond `proxy.facts.literals`, which types a value by its literals.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from proxy.facts.literals import fact_spans

__all__ = ["statements", "subject_words"]

MAX_SUBJECT_WORDS = 8
MAX_VALUE_WORDS = 12
MAX_VALUE_CHARS = 160
MAX_SENTENCE_CHARS = 600  # a longer "sentence" is a paste (a log, minified code), not a statement

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+|;\s+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")
_ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*$")
_RULE = re.compile(r"^[\s|:-]+$")
# Where a clause's subject can start: after a lead-in ("Note for later:", "For the
# record,", "… and", "Remember that").
_BOUNDARY = re.compile(r"(?::|,|\s[—–-]|\band|\bthat|\bso|\bbut|\bthen)\s+", re.I)
_LINK = re.compile(
    r"\s(?:now\s+)?(?:runs?|starts?|lives?|sits?|happens?|leaves?|go(?:es)?|ships?|opens?"
    r"|closes?|arrives?|departs?|meets?|expires?|renews?|ends?)"
    r"\s+(?:at|in|on|under|through|via|from|by)\s"
    r"|\s(?:(?:has|have)\s+(?:been\s+)?|got\s+|was\s+|were\s+)"
    r"(?:changed|moved|updated|set|switched|bumped|raised|lowered|increased|decreased)\s+to\s"
    r"|\s(?:is|are|was|will\s+be|becomes|remains|stays)"
    r"(?:\s+(?:now|still|currently|officially|actually|going\s+to\s+be))?"
    r"(?:\s+(?:set|changed|moved|switched)\s+to)?\s"
    r"|(?<=\bit)['’]s\s|(?<=\bthat)['’]s\s"
    r"|:\s|\s[—–]\s|\s=\s",
    re.I,
)
# Forms whose subject is not first: (pattern, whether the value comes first).
_FORMS = [
    re.compile(
        r"(?:please\s+|let's\s+|we\s+|we've\s+|we\s+have\s+|i\s+|i've\s+)?"
        r"(?:set|change|changed|move|moved|switch|switched|update|updated|bump|bumped)\s+"
        r"(?P<s>.+?)\s+to\s+(?P<v>.+)$",
        re.I,
    ),
    re.compile(
        r"(?P<s>.+?)\s+(?:has\s+|have\s+)?(?:changed|moved|gone|went|switched)\s+"
        r"from\s+.+?\s+to\s+(?P<v>.+)$",
        re.I,
    ),
    re.compile(r"(?P<v>.+?)\s+replaces\s+.+?\s+as\s+(?P<s>.+)$", re.I),
    re.compile(
        r"(?:we|i|we're|we\s+are|i'm)?\s*(?:settled\s+on|going\s+with|went\s+with|"
        r"picked|chose|choose|go\s+with)\s+(?P<v>.+?)\s+(?:as|for)\s+(?P<s>.+)$",
        re.I,
    ),
    re.compile(  # "We decided to open the second shop on Maple Street."
        r"(?:we|i)\s+(?:have\s+|'ve\s+)?(?:decided|agreed)\s+to\s+"
        r"(?P<s>[a-z]+\s+.+?)\s+(?:on|at|in|for|with|to|via)\s+(?P<v>.+)$",
        re.I,
    ),
    re.compile(r"to\s+(?P<s>.+?),\s+(?:run|use|type|call)\s+(?P<v>.+)$", re.I),
    re.compile(r"(?:use|run)\s+(?P<v>.+?)\s+(?P<s>to\s+\w.+)$", re.I),
]
# Where a value ends before its clause does.
_VALUE_END = re.compile(
    r",?\s+(?:not|which|who|because|since|although|though|unless|whatever|please|just|"
    r"as\s+of|and\s+(?:the|our|we|i|you|they)|so\s+that|for\s+now|sharp)\b"
    r"|,\s+(?:the|our|my|its|their)\s|,\s+(?:so|but|and|as|if)\s|\s\(|\s+but\s",
    re.I,
)
_DETERMINERS = re.compile(
    r"^(?:(?:the|our|my|your|their|this|that|a|an|new|so|and|also|then|now)\s+)+", re.I
)
_TRAILING = re.compile(r"(?:\s+(?:now|still|currently|officially|actually))+$", re.I)
_PRONOUNS = frozenset(
    [
        "it",
        "this",
        "that",
        "these",
        "those",
        "he",
        "she",
        "they",
        "we",
        "i",
        "you",
        "there",
        "here",
        "what",
        "which",
        "who",
        "one",
        "nothing",
        "everything",
        "something",
        "someone",
        "anyone",
        "everyone",
        "all",
    ]
)
_HEARSAY = re.compile(
    r"\b(?:if|whether|unless|maybe|perhaps|think|thinks|thought|suggest\w*|wonder\w*|"
    r"should|would|could|might|may|asked|says|said|let's|let)\b",
    re.I,
)
_CLAUSE_START = re.compile(r"(?:the|our|my|a|an|we|i|you|they|it|this|that)\b", re.I)
_ANAPHORA = frozenset({"it", "that", "this"})
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_LITERAL = re.compile(r"[\dA-Z`/#@_$%€£]")


def statements(text: str) -> Iterator[tuple[str, str, str]]:
    """Every (kind, subject, value) `text` asserts, in order. `kind` is the type of the
    value's first literal ("text" when none has a type). "It" names the subject of the
    statement before it when their values are of one kind ("The cache TTL was 300s; now
    it's 600s."), and nothing else ("The invoice is INV-1. It is due on May 3.")."""
    last = ("", "")
    for kind, subject, value in _statements(text):
        if not subject and kind == last[0]:
            subject = last[1]
        if subject:
            last = (kind, subject)
            yield kind, subject, value


def _statements(text: str) -> Iterator[tuple[str, str, str]]:
    pending = None  # "The codename? It's BLUE HERON.": a subject asked, then answered
    for line in text.splitlines():
        row = _ROW.match(line)
        if row and not _RULE.match(line):
            found = _statement(row[1], row[2])
            if found:
                yield found
            continue
        for sentence in _SENTENCES.split(_BULLET.sub("", line)):
            sentence = sentence.strip()
            if len(sentence) > MAX_SENTENCE_CHARS:
                pending = None
                continue
            if sentence.endswith("?"):
                that = re.search(r"\bthat\s+(.+)\?$", sentence, re.I)
                if that is None:
                    pending = _subject(sentence[:-1])
                    continue
                sentence = that[1]
            elif pending and (answer := re.match(r"^(?:it|that)['’]s\s+(.+)$", sentence, re.I)):
                found = _statement(pending, answer[1])
                pending = None
                if found:
                    yield found
                continue
            pending = None
            yield from _clause(sentence.rstrip(".!"))


def subject_words(subject: str) -> list[str]:
    """The words a subject is known by, in order (case and possessives dropped)."""
    return [w.removesuffix("'s").removesuffix("’s") for w in _WORD.findall(subject.casefold())]


def _clause(clause: str) -> Iterator[tuple[str, str, str]]:
    """The statements of one sentence, left to right."""
    start = 0
    while start < len(clause):
        linked = _linked(clause, start)
        found = None
        for tail in _tails(clause, start):
            if linked is not None and linked[1] <= tail:
                break  # a plain statement ends before this form could start
            found = _formed(clause, tail)
            if found:
                break
        found = found or linked
        if found is None:
            return
        statement, start = found
        yield statement


def _formed(clause: str, start: int) -> tuple[tuple[str, str, str], int] | None:
    """A statement in one of the forms whose subject is not first, and where it ends."""
    for form in _FORMS:
        match = form.match(clause, start)
        if match is None:
            continue
        if match.start("v") < match.start("s"):
            found = _statement(_end_value(match["s"])[0], match["v"])
            end = len(clause)
        else:
            value, cut = _end_value(match["v"])
            found = _statement(match["s"], value)
            end = match.start("v") + cut
        if found:
            return found, end
    return None


def _tails(clause: str, start: int) -> Iterator[int]:
    yield start
    for boundary in _BOUNDARY.finditer(clause, start):
        yield boundary.end()


def _linked(clause: str, start: int) -> tuple[tuple[str, str, str], int] | None:
    """The first "subject link value" in `clause[start:]`, and where it ends."""
    for link in _LINK.finditer(clause, start):
        lead = clause[start : link.start()]
        cut = max((b.end() for b in _BOUNDARY.finditer(lead)), default=0)
        subject, value = lead[cut:], clause[link.end() :]
        if link.group().strip() in {":", "—", "–", "="} and _CLAUSE_START.match(value):
            continue  # "Note: the build is green" is a lead-in, then a clause
        if link.group().strip() not in {":", "—", "–", "="} and _is_literal(subject):
            inverse = re.match(r"(?:the|our|my)\s+(.+)$", value, re.I)  # "X is the Y"
            if inverse:
                found = _statement(_end_value(inverse[1])[0], subject)
                if found:
                    return found, len(clause)
        value, end = _end_value(value)
        if end < len(clause) - link.end() and link.group().strip() in {":", "—", "–", "="}:
            continue  # "echo: [log] The report lists …, and the …": a label, then prose
        found = _statement(subject, value)
        if found:
            return found, link.end() + end
    return None


def _end_value(value: str) -> tuple[str, int]:
    end = _VALUE_END.search(value)
    return (value[: end.start()], end.start()) if end else (value, len(value))


def _statement(subject: str, value: str) -> tuple[str, str, str] | None:
    """(kind, subject, value) when both are what a statement has."""
    subject_ = _subject(subject)
    value = re.sub(r"^(?:at|on|in|under)\s+", "", value.strip().rstrip(".,;:!").strip())
    value = re.sub(r"\s+(?:now|again|too|please)$", "", value).strip("`\"'“”").strip()
    if subject_ is None or not value or re.match(r"(?:not|n't|never|no)\b", value, re.I):
        return None
    if len(value) > MAX_VALUE_CHARS or len(value.split()) > MAX_VALUE_WORDS:
        return None
    if _LINK.search(f" {value} "):
        return None  # a clause of its own, read on its own
    if not _LITERAL.search(value):
        return None
    spans = fact_spans(value)
    return (spans[0][0] if spans else "text", subject_, value)


def _subject(text: str) -> str | None:
    """The noun phrase `text` ends with, without determiners; None when it is not one."""
    text = _TRAILING.sub("", _DETERMINERS.sub("", text.strip().strip("`\"'“”*")))
    words = subject_words(text)
    if len(words) == 1 and words[0] in _ANAPHORA:
        return ""  # "it": the subject of the statement before it
    if not words or len(words) > MAX_SUBJECT_WORDS or words[0] in _PRONOUNS:
        return None
    if _HEARSAY.search(text) or re.search(r"[{}\[\]\"=<>]", text):
        return None
    if not any(c.isalpha() for c in text):
        return None
    return text


def _is_literal(text: str) -> bool:
    """Whether `text` is one literal and nothing else ("INV-88213", "Maria Chen")."""
    text = text.strip().strip("`\"'“”")
    spans = fact_spans(text)
    return len(spans) == 1 and spans[0][1] == 0 and spans[0][2] == len(text)
