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

from proxy.facts.literals import COMMON_WORDS, fact_spans
from proxy.facts.secrets import shaped

__all__ = ["asserts", "corrections", "negates", "retracts", "statements", "subject_words"]

MAX_SUBJECT_WORDS = 8
MAX_VALUE_WORDS = 12
MAX_VALUE_CHARS = 160
MAX_SENTENCE_CHARS = 600  # a longer "sentence" is a paste (a log, minified code), not a statement

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+|;\s+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")
_ROW = re.compile(r"^\s*\|(?:[^|\n]*\|){2,}\s*$")
_RULE = re.compile(r"^[\s|:-]+$")
# A table's column that says nothing of what its cells are ("| item | value |").
_PLAIN_COLUMNS = frozenset({"", "value", "values", "setting", "details", "info", "current", "what"})
_FENCE = re.compile(r"^\s*(?:```|~~~)")
# A sentence that takes back the value just said ("… is 512Mi... wait no, 3Gi").
_BACK = "\0"  # the subject of a value said in place of one taken back: the one just said
_TAKEN_BACK = re.compile(
    r"[\s,;:—–-]*(?:wait,?\s+no|no,?\s+wait|sorry|i\s+mean|scratch\s+that|make\s+that|rather"
    r"|my\s+bad)(?:,?\s+typo)?[,:]?\s+(?:it['’]s\s+|it\s+is\s+)?(?P<v>.+)$",
    re.I,
)
# Where a clause's subject can start: after a lead-in ("Note for later:", "For the
# record,", "… and", "Remember that").
_BOUNDARY = re.compile(r"(?::|,|\s[—–-]|\band|\bthat|\bso|\bbut|\bthen)\s+", re.I)
_LINK = re.compile(
    r"\s(?:now\s+)?(?:runs?|starts?|lives?|sits?|happens?|leaves?|go(?:es)?|ships?|opens?"
    r"|closes?|arrives?|departs?|meets?|expires?|renews?|ends?)"
    r"\s+(?:at|in|on|under|through|via|from|by)\s"
    r"|\s(?:(?:has|have)\s+(?:been\s+)?|got\s+|was\s+|were\s+)?(?:changed|moved|updated"
    r"|switched|bumped|raised|lowered|increased|decreased|pushed|upgraded|downgraded|migrated"
    r"|shifted|slipped|rescheduled|went\s+up|went\s+down|dropped|grew|rose|fell)\s+to\s"
    r"|\s(?:(?:has|have)\s+(?:been\s+)?|got\s+|was\s+|were\s+)set\s+to\s"
    r"|\s(?:is|are|was|will\s+be|becomes|remains|stays)"
    r"(?:\s+(?:now|still|currently|officially|actually|going\s+to\s+be))?"
    r"(?:\s+(?:set|changed|moved|switched)\s+to)?\s"
    r"|(?<=\bit)['’]s\s|(?<=\bthat)['’]s\s"
    r"|:\s|\s[—–]\s|\s=\s|\s(?:→|->|=>)\s",
    re.I,
)
# Forms whose subject is not first: (pattern, whether the value comes first).
_FORMS = [
    re.compile(
        r"(?:please\s+|let's\s+|we\s+|we've\s+|we\s+have\s+|i\s+|i've\s+)?"
        r"(?:set|setting|change|changed|move|moved|switch|switched|update|updated|bump|bumped|raise"
        r"|raised|lower|lowered|increase|increased|decrease|decreased|reduce|reduced|drop"
        r"|dropped|cut|push|pushed|extend|extended|upgrade|upgraded|downgrade|downgraded"
        r"|scale|scaled|migrate|migrated|repoint|repointed|point|pointed|pin|pinned|hand"
        r"|handed|pass|passed|roll|rolled|ramp|ramped|trim|trimmed|tighten|tightened|relax"
        r"|relaxed|shrink|shrank|grow|grew|double|doubled|halve|halved|fail|failed)"
        r"\s+(?:(?:over|up|down)\s+)?"
        r"(?P<s>.+?)\s+(?:(?:over|down|up|back|forward)\s+)?to\s+(?P<v>.+)$",
        re.I,
    ),
    re.compile(
        r"(?P<s>.+?)\s+(?:has\s+|have\s+)?(?:changed|moved|gone|went|switched)\s+"
        r"from\s+.+?\s+to\s+(?P<v>.+)$",
        re.I,
    ),
    re.compile(r"(?P<v>.+?)\s+replaces\s+.+?\s+as\s+(?P<s>.+)$", re.I),
    re.compile(  # "Priya took over on-call from Sam."
        r"(?P<v>.+?)\s+(?:took|takes|has\s+taken|is\s+taking)\s+over\s+(?:as\s+)?"
        r"(?P<s>.+?)(?:\s+from\s+.+)?$",
        re.I,
    ),
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
    re.compile(  # "ignore what I said about the queue, the right value is SQS"
        r"(?:please\s+)?(?:ignore|forget|disregard)\s+what\s+i\s+(?:said|wrote)\s+(?:about|for)\s+"
        r"(?P<s>.+?),\s+(?:the\s+)?(?:right|correct|actual|real)\s+(?:value|one|number|answer)"
        r"\s+is\s+(?P<v>.+)$",
        re.I,
    ),
    re.compile(r"(?:use|run)\s+(?P<v>.+?)\s+(?P<s>to\s+\w.+)$", re.I),
]
# Where a value ends before its clause does.
_VALUE_END = re.compile(
    r",?\s+(?:not|which|who|because|since|although|though|unless|whatever|please|just|"
    r"as\s+of|and\s+(?:the|our|we|i|you|they)|so\s+that|for\s+now|sharp)\b"
    r"|,\s+(?:the|our|my|its|their)\s|,\s+(?:so|but|and|as|if)\s|\s\(|\s+but\s"
    r"|(?:,?\s+|\s*[—–]\s*)(?:scratch\s+that|sorry|i\s+mean|correction|no\s+wait|wait|oops"
    r"|my\s+bad)\b|\s+(?:after|before|until|once|while)\s"
    r"|,\s+(?:noting|noted|logging|writing|putting|pinning|recording|adding|thanks|thank\s+you"
    r"|cheers)\b|\s+as\s+part\s+of\b",
    re.I,
)
_DETERMINERS = re.compile(
    r"^(?:(?:the|our|my|your|their|this|that|a|an|new|so|and|also|then|now|fyi|btw|ok|okay"
    r"|ps|well|oh|anyway|plus|but)[,:]?\s+)+",
    re.I,
)
_TRAILING = re.compile(r"(?:\s+(?:now|still|currently|officially|actually))+$", re.I)
# Words after a value that are not of it ("450s right", "51 btw").
_AFTER_VALUE = re.compile(
    r"(?:,?\s+(?:right|btw|fyi|ok|okay|though|then|as\s+well|too|now|again|please|last\s+night"
    r"|yesterday|today|tonight|this\s+(?:morning|afternoon|week)|last\s+week))+$",
    re.I,
)
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
        "why",
        "how",
        "whether",
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
# What makes a clause a guess, not an assertion, before its subject or as its value's
# first word ("probably the TTL is 600s", "the TTL is probably 600s", "my guess: …").
_HEDGE = re.compile(
    r"\b(?:probably|likely|possibly|maybe|perhaps|guess\w*|suspect\w*|seems?|apparently|"
    r"assum\w*|bet|hunch|suppos\w*|imagin\w*|hope|hoping|presumably|think|thinks|thought|"
    r"believe\w*|wonder\w*|if|unless|whether|would|could|might|hypothetically|"
    r"(?:pretty|fairly|not)\s+sure|iirc|afaik|quote\s+me)\b",
    re.I,
)
_INFINITIVE = re.compile(r"(?P<words>[a-z][\w\s-]*?)\s+to\s+")
# A hedge after the value: "2525 iirc", "37, but don't quote me".
_HEDGED = re.compile(r"\b(?:iirc|afaik|i\s+think|i\s+guess|quote\s+me|not\s+sure)\b", re.I)
# "cluster: kube version 1.27": a label, then what of it the value is.
_NAMED_VALUE = re.compile(
    r"(?P<words>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2})\s+(?P<value>v?\d[\d.]*)"
)
_QUOTES = {"`": "`", '"': '"', "'": "'", "“": "”"}
_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"))
# "oops, I said 8443 for auth earlier, it's 9443": a value said before, corrected.
_CORRECTION = re.compile(
    r"(?:^|[,.;:!]\s*|\b(?:oops|sorry|correction|wait)\W+)i\s+(?:said|wrote|gave|put|meant)\s+"
    r"[`\"']?(?P<old>[^\s,`\"']+)[`\"']?(?:\s+(?:for|as)\s+(?:the\s+)?(?P<s>[^,]+?))?"
    r"(?:\s+(?:earlier|before|above|yesterday))?\s*[,;:—–-]+\s*(?:but\s+)?(?:it['’]s|it\s+is|"
    r"it\s+should\s+be|should\s+be|the\s+right\s+(?:one|value)\s+is|actually|really)\s+"
    r"(?P<v>.+)$",
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
        # A value said in place of one taken back ("RabbitMQ... wait no, Pub/Sub") is of
        # the subject just said, whatever its kind.
        if subject == _BACK or (not subject and kind == last[0]):
            subject = last[1]
        if subject:
            last = (kind, subject)
            yield kind, subject, value


def _statements(text: str) -> Iterator[tuple[str, str, str]]:
    pending = None  # "The codename? It's BLUE HERON.": a subject asked, then answered
    lines = text.splitlines()
    header: list[str] | None = None  # the columns of the table being read
    fenced = False
    for number, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced  # code and configs: their keys name no subject of their own
            continue
        if fenced:
            continue
        if _ROW.match(line):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            following = lines[number + 1] if number + 1 < len(lines) else ""
            if _RULE.match(line):
                continue
            if header is None and _ROW.match(following) and _RULE.match(following):
                header = [cell.casefold() for cell in cells]
                continue
            yield from _row(cells, header)
            continue
        header = None
        for sentence in _SENTENCES.split(_BULLET.sub("", line)):
            sentence = sentence.strip()
            if len(sentence) > MAX_SENTENCE_CHARS:
                pending = None
                continue
            taken = _TAKEN_BACK.match(sentence.rstrip(".!"))
            if taken and not _LINK.search(f" {taken['v']} "):
                found = _statement("it", taken["v"])  # of the subject just said
                if found:
                    yield found[0], _BACK, found[2]
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


def _row(cells: list[str], header: list[str] | None) -> Iterator[tuple[str, str, str]]:
    """A table row's statements: its first cell is what it is about, each other cell the
    value of its column's name ("| geo lookup | 5604 |" under "| service | port |" says
    `geo lookup port: 5604`); a column that names nothing adds nothing to the subject."""
    for column, cell in enumerate(cells[1:], 1):
        name = header[column] if header and column < len(header) else ""
        subject = cells[0] if name in _PLAIN_COLUMNS else f"{cells[0]} {name}"
        found = _statement(subject, cell, named=True)
        if found:
            yield found


def corrections(text: str) -> Iterator[tuple[str, str, str]]:
    """Every (subject or "", old value, new value) of a correction of something said
    before ("I said 8443 for auth earlier, it's 9443", "correction on the code: not X,
    it's Y"): the ledger finds the fact whose value was the old one."""
    for line in text.splitlines():
        for sentence in _SENTENCES.split(line):
            sentence = sentence.strip().rstrip(".!")
            found = _CORRECTION.search(sentence) or _NOT_BUT.search(sentence)
            if found is None:
                continue
            value = _statement("correction", _end_value(found["v"])[0])
            if value is not None:
                yield (_subject(found["s"] or "") or "").strip(), found["old"], value[2]


_NOT_BUT = re.compile(
    r"(?:correction\s+(?:on|for|to|about)\s+(?:the\s+)?(?P<s>[^:]+):\s*)?\bnot\s+"
    r"[`\"']?(?P<old>[^\s,`\"']+)[`\"']?\s*[,;]\s*(?:it['’]s|it\s+is|but)\s+(?P<v>.+)$",
    re.I,
)


def asserts(sentence: str) -> bool:
    """Whether a sentence asserts, as this reader judges a statement: not a question, a
    guess, hearsay, a condition or a suggestion ("If the TTL were 900s …", "Jonas thinks
    …", "probably …")."""
    sentence = sentence.strip()
    return not (
        sentence.endswith("?")
        or _HEDGE.search(sentence)
        or _HEARSAY.search(sentence)
        or _HEDGED.search(sentence)
    )


_RETRACTION = re.compile(
    r"\b(?:scratch\s+that|wait,?\s+no|no,?\s+wait|make\s+that|my\s+bad)\b", re.I
)


def retracts(sentence: str) -> bool:
    """Whether a sentence takes back what was said ("scratch that", "wait, no")."""
    return _RETRACTION.search(sentence) is not None


_NEGATION = re.compile(r"\b(?:not|never|no\s+longer|nope|no)\b|n['’]t\b", re.I)


def negates(sentence: str) -> bool:
    """Whether a sentence denies something ("… is not OPS-5924", "was never 6553")."""
    return _NEGATION.search(sentence) is not None


def subject_words(subject: str) -> list[str]:
    """The words a subject is known by, in order (case and possessives dropped)."""
    return [w.removesuffix("'s").removesuffix("’s") for w in _WORD.findall(subject.casefold())]


def _clause(clause: str) -> Iterator[tuple[str, str, str]]:
    """The statements of one sentence, left to right."""
    start = 0
    while start < len(clause):
        taken = _TAKEN_BACK.match(clause, start) if start else None
        if taken and not _LINK.search(f" {taken['v']} "):
            found_back = _statement("it", taken["v"])  # "to us-east-1 — sorry, typo, eu-central-1"
            if found_back:
                yield found_back[0], _BACK, found_back[2]
            return
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
            subject, at = match["s"], match.start("v")
            # "moved the command to deploy X to make deploy-x": a "to" whose words up to
            # the next "to" hold no literal is the subject's own ("the command to deploy X").
            again = _INFINITIVE.match(clause, at)
            if again is not None and not _LITERAL.search(again["words"]):
                subject, at = clause[match.start("s") : again.end("words")], again.end()
            value, cut = _end_value(clause[at:])
            found = _statement(subject, value)
            end = at + cut
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
        mark = link.group().strip()
        if mark in {":", "—", "–", "=", "→", "->", "=>"} and _CLAUSE_START.match(value):
            continue  # "Note: the build is green" is a lead-in, then a clause
        if mark == "=" and clause.count("=") > 1:
            continue  # "issuer=C = US, CN = R3": the fields of a record about something else
        if (
            _HEDGE.search(clause[: start + cut])
            or _HEDGE.match(value.lstrip())
            or _HEDGED.search(value)
        ):
            continue  # "my guess: the limit is 50", "the TTL is probably 600s", "... iirc"
        name = subject.strip()  # "Nadia is the new owner": a name, then what it is
        a_name = _is_literal(name) or bool(re.fullmatch(r"[A-Z][a-z]+", name) and not _common(name))
        if link.group().strip() not in {":", "—", "–", "="} and a_name:
            inverse = re.match(r"(?:the|our|my)\s+(.+)$", value, re.I)  # "X is the Y"
            if inverse:  # a subject is one noun phrase: what follows a comma is not of it
                found = _statement(_end_value(inverse[1])[0].split(", ")[0], subject)
                if found:
                    return found, len(clause)
                continue
        value, end = _end_value(value)
        if end < len(clause) - link.end() and link.group().strip() in {":", "—", "–", "="}:
            continue  # "echo: [log] The report lists …, and the …": a label, then prose
        if mark == ":" and (named := _NAMED_VALUE.fullmatch(value.strip().rstrip(".!"))):
            subject, value = f"{subject} {named['words']}", named["value"]
        found = _statement(subject, value)
        if found:
            return found, link.end() + end
    return None


def _end_value(value: str) -> tuple[str, int]:
    quoted = _QUOTED.match(value)  # "`libs/x` as part of the cleanup": the quoted span
    if quoted:
        return quoted[1], quoted.end()
    end = _VALUE_END.search(value)
    value, cut = (value[: end.start()], end.start()) if end else (value, len(value))
    comma = value.find(", ")
    while comma != -1:  # "12, queue was backing up": a clause of its own after the value
        rest = value[comma + 2 :]
        if _LINK.search(f" {rest} ") or _CLAUSE_VERB.search(rest):
            return value[:comma], comma
        comma = value.find(", ", comma + 2)
    return value, cut


_QUOTED = re.compile(r"\s*(`[^`\n]+`)(?=\s+[a-z])")
# A word that makes what follows a comma a clause, not more of a value.
_CLAUSE_VERB = re.compile(
    r"\b(?:is|are|was|were|has|have|had|been|it|we|they|i|nobody|someone|\w{3,}(?:ed|ing))\b",
    re.I,
)


def _statement(subject: str, value: str, named: bool = False) -> tuple[str, str, str] | None:
    """(kind, subject, value) when both are what a statement has; `named`: the subject
    is a name as written (a table's first cell: "new checkout" is a flag's name)."""
    subject_ = _subject(subject, named)
    if subject_ is None or shaped(value):
        return None
    value = re.sub(r"^(?:at|on|in|under)\s+", "", value.strip().rstrip(".,;:!").strip())
    value = _unquoted(_AFTER_VALUE.sub("", value))
    if not value or re.match(r"(?:not|n't|never|no)\b", value, re.I):
        return None
    if len(value) > MAX_VALUE_CHARS or len(value.split()) > MAX_VALUE_WORDS:
        return None
    if _LINK.search(f" {value} "):
        return None  # a clause of its own, read on its own
    if not _LITERAL.search(value):
        return None
    spans = fact_spans(value)
    return (spans[0][0] if spans else "text", subject_, value)


def _unquoted(value: str) -> str:
    """`value` without the quotes around it, or "" when it is not a whole span: a quote,
    backtick or bracket left open or closed twice (`RollingUpdate"}`, "`make deploy")."""
    value = value.strip()
    close = _QUOTES.get(value[:1])
    if close and len(value) > 1 and value.endswith(close) and close not in value[1:-1]:
        value = value[1:-1].strip()
    if value.count("`") % 2 or value.count('"') % 2 or value[:1] in "'“" or value[-1:] == "”":
        return ""
    if any(value.count(left) != value.count(right) for left, right in _PAIRS):
        return ""
    return value


def _subject(text: str, named: bool = False) -> str | None:
    """The noun phrase `text` ends with, without determiners (unless `named`); None when
    it is not one."""
    text = text.strip().strip("`\"'“”*")
    text = text if named else _TRAILING.sub("", _DETERMINERS.sub("", text))
    words = subject_words(text)
    if len(words) == 1 and words[0] in _ANAPHORA:
        return ""  # "it": the subject of the statement before it
    if not words or len(words) > MAX_SUBJECT_WORDS or words[0] in _PRONOUNS:
        return None
    if _HEARSAY.search(text) or _HEDGE.search(text) or re.search(r"[{}\[\]\"=<>,]", text):
        return None
    if not any(c.isalpha() for c in text):
        return None
    return text


def _common(word: str) -> bool:
    """Whether a capitalized word is one for grammar ("Here", "Today"), not a name."""
    return word.casefold() in _PRONOUNS or word.casefold() in COMMON_WORDS


def _is_literal(text: str) -> bool:
    """Whether `text` is one literal and nothing else ("INV-88213", "Maria Chen")."""
    text = text.strip().strip("`\"'“”")
    spans = fact_spans(text)
    return len(spans) == 1 and spans[0][1] == 0 and spans[0][2] == len(text)
