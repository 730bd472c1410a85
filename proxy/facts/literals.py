"""Literal facts (numbers, dates, paths, URLs, identifiers, names) found by regular expressions.

Summaries lose exact details. The ones a regex can see are checked against the summary, and the
missing ones get pinned next to it. Pure and dependency-free, cheap enough to run on every fold.

Decisions:
- Overlapping matches resolve leftmost-longest: "/etc/nginx/nginx.conf" is one fact, not three.
- A single digit on its own ("1", "3") is skipped: usually a list marker or a small count. With a
  unit or currency it is kept ("3 GB", "$5").
- A capitalized word that starts a sentence is not a name on its own (it usually is not one). In a
  Title Case run, common words at either end are dropped ("The Acme Corp" -> "Acme Corp").
- Relative paths need an extension or two slashes, so "and/or" is not a path.
- Matches longer than MAX_FACT_CHARS (blobs, tokens, minified code) are not facts worth pinning.
"""

from __future__ import annotations

import re

__all__ = [
    "COMMON_WORDS",
    "MAX_FACT_CHARS",
    "extract_facts",
    "fact_spans",
    "missing_facts",
    "retention",
]

MAX_FACT_CHARS = 200

_UP = "A-ZÀ-ÖØ-Þ"
_LO = "a-zß-öø-ÿ"
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_UNIT = (
    r"(?:%|°[CF]|[KMGTP]i?B|kB|bytes?|[mµn]s|s|sec(?:onds?)?|min(?:utes?)?|h|hrs?|hours?|days?"
    r"|weeks?|months?|years?|km|[cm]?m|kg|mg|g|lbs?|px|[kMG]?Hz|kWh|kW|W|x|k|K|M|bn|million"
    r"|billion|thousand|USD|EUR|GBP|JPY|dollars?|euros?|tokens?|users?|requests?|rps|qps)"
)
_WORD = rf"(?:[OD]['’])?[{_UP}][{_LO}]+(?:-[{_UP}]?[{_LO}]+)*\b"

# (kind, pattern); on equal spans the earlier kind wins. Token-like patterns start only where a
# token starts (lookbehind, not \b), so long chains like "a-b-c-…" or JWTs stay linear.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (kind, re.compile(pattern))
    for kind, pattern in [
        ("url", r"\b(?:https?|ftp)://[^\s<>\"'`]+|\bwww\.[^\s<>\"'`]+"),
        ("email", r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
        ("date", r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)?\b"),
        ("date", r"\b\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}\b"),
        ("date", rf"\b{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"),
        ("date", rf"\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH}(?: \d{{4}})?\b"),
        ("date", rf"\b{_MONTH} \d{{4}}\b"),
        ("time", r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\b\.?)?|\b\d{1,2}\s?[AaPp][Mm]\b"),
        ("money", rf"[$€£¥₹]\s?{_NUM}(?:\s?(?:k|K|M|bn|B|million|billion)\b)?"),
        ("money", rf"\b(?:USD|EUR|GBP)\s?{_NUM}"),
        ("quantity", rf"\b{_NUM}\s?{_UNIT}(?!\w)"),
        ("version", r"(?<![\w.-])(?:v\d+(?:\.\d+)*(?:-[\w.]+)?|\d+(?:\.\d+){2,})\b"),
        ("path", r"\b[A-Za-z]:\\[^\s\"'<>|*?]*"),
        ("path", r"(?<![\w/~.])(?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]*)*"),
        ("relpath", r"(?<![\w./-])[\w.-]+(?:/[\w.@+-]+)+/?"),
        ("dotted", r"(?<![\w.-])\w[\w-]*(?:\.\w[\w-]*)+"),
        ("ident", r"\b_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_*"),
        ("ident", r"\b[a-z]+[A-Z][A-Za-z0-9]*|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*"),
        ("ident", r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*\b"),
        ("acronym", r"\b[A-Z]{2,5}s?\b"),
        ("name", rf"\b{_WORD}(?: (?:(?:of|de|da|del|der|di|du|la|le|van|von) )?{_WORD})*"),
        ("number", rf"\b{_NUM}\b"),
    ]
]
_KIND_RANK = {kind: rank for rank, (kind, _) in enumerate(_PATTERNS)}

# Capitalized for grammar, not because they name something.
_COMMON_WORDS = """
    a about after again all also am an and another any are as at be because been before being
    both but by can could did do does doing done each either even every few for from had has
    have having he her here hers him his how however i if in into is it its just let lets may
    maybe me might more most much must my neither no nor not now of off on once one only or
    other our ours out over own perhaps please same she should since so some such than thanks
    thank that the their theirs them then there these they this those though through thus to
    too under unless until up upon us very was we were what whatever when where whether which
    while who whom whose why will with within without would yes yet you your yours
    hi hello hey dear ok okay sure great good fine well right oh ah alright sorry note
    mr mrs ms dr prof sir madam
    first second third next last finally besides meanwhile instead otherwise anyway
    today tomorrow yesterday tonight later soon still already always never sometimes often
    use install ask run add check create deploy make set try send call open update write read
    see tell show give get find look email contact book schedule remind move change fix remove
    delete build start stop keep remember consider compare explain summarize translate
"""
COMMON_WORDS = frozenset(_COMMON_WORDS.split())
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "mt", "e", "g"}
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def extract_facts(text: str) -> list[str]:
    """Salient literal facts in `text`, deduplicated, in order of first appearance."""
    facts: dict[str, str] = {}
    for _, _, _, fact in fact_spans(text):
        facts.setdefault(_normalize(fact), fact)
    return list(facts.values())


def fact_spans(text: str) -> list[tuple[str, int, int, str]]:
    """Every fact in `text` as (kind, start, end, fact), in order, none overlapping."""
    candidates: list[tuple[int, int, int, str, str]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            found = _accept(kind, match, text)
            if found is not None and len(found[1]) <= MAX_FACT_CHARS:
                start, fact = found
                candidates.append((start, -len(fact), _KIND_RANK[kind], kind, fact))
    spans: list[tuple[str, int, int, str]] = []
    covered = 0
    for start, negative_length, _, kind, fact in sorted(candidates):
        if start >= covered:
            covered = start - negative_length
            spans.append((kind, start, covered, fact))
    return spans


def missing_facts(facts: list[str], summary: str) -> list[str]:
    """Facts not found in `summary` (case-insensitive, thousands separators ignored)."""
    haystack = _normalize(summary)
    return [fact for fact in facts if not _contains(haystack, _normalize(fact))]


def retention(facts: list[str], summary: str) -> float:
    """Share of `facts` present in `summary`; 1.0 when there is nothing to retain."""
    if not facts:
        return 1.0
    return 1.0 - len(missing_facts(facts, summary)) / len(facts)


def _accept(kind: str, match: re.Match[str], text: str) -> tuple[int, str] | None:
    """Filter and trim one match; returns (start, fact) or None for junk."""
    fact, start = match.group(), match.start()
    if kind in {"url", "path", "relpath"}:
        fact = fact.rstrip(".,;:!?)]}'\"")
    has_letter = any(c.isalpha() for c in fact)
    if kind == "relpath":
        keep = has_letter and (fact.count("/") >= 2 or re.search(r"\.[A-Za-z]\w{0,7}$", fact))
    elif kind == "path":
        keep = has_letter
    elif kind == "dotted":
        keep = has_letter and any(len(part) > 1 for part in fact.split("."))
    elif kind == "ident":
        keep = re.fullmatch(r"\d+(?:st|nd|rd|th)", fact) is None
    elif kind == "acronym":
        keep = fact.casefold() not in COMMON_WORDS
    elif kind == "number":
        keep = len(fact) > 1
    elif kind == "name":
        return _accept_name(fact, start, text)
    else:
        keep = True
    return (start, fact) if keep else None


def _accept_name(fact: str, start: int, text: str) -> tuple[int, str] | None:
    """Drop common words at the ends; a lone word at a sentence start is not a name."""
    words = fact.split(" ")
    lead = 0
    while lead < len(words) and words[lead].casefold() in COMMON_WORDS:
        lead += 1
    end = len(words)
    while end > lead and words[end - 1].casefold() in COMMON_WORDS:
        end -= 1
    if end == lead or (lead == 0 and end == 1 and _at_sentence_start(text, start)):
        return None
    start += sum(len(word) + 1 for word in words[:lead])
    return start, " ".join(words[lead:end])


def _at_sentence_start(text: str, pos: int) -> bool:
    i = pos - 1
    while i >= 0 and text[i] in " \t\"'“”‘’([{*->#`":
        i -= 1
    if i < 0 or text[i] in "\n!?:;•":
        return True
    if text[i] != ".":
        return False
    before = re.search(r"(\w+)$", text[max(0, i - 12) : i])
    return before is None or before.group(1).casefold() not in _ABBREVIATIONS


def _normalize(text: str) -> str:
    return " ".join(_THOUSANDS.sub("", text).casefold().split())


def _contains(haystack: str, needle: str) -> bool:
    """Substring test that will not find "42" in "4200" or "v1.2" in "v1.2.3"."""
    before = r"(?<!\w)(?<!\d[.,])" if needle[:1].isalnum() else ""
    after = r"(?!\w)(?![.,]\d)" if needle[-1:].isalnum() else ""
    return re.search(before + re.escape(needle) + after, haystack) is not None
