"""Credentials in what a conversation says: a value that is one is never pinned, noted or
remembered, and a message that holds one is never recalled into another session (within
its own session recall may bring it back: the user said it there).

A text holds a credential where part of it is shaped like one or is said to be one.

By shape (`shaped`), whatever the words around it:
- a known token format (`proxy.observability.redaction.TOKEN_FORMATS`: GitHub, Slack,
  AWS, Google, Stripe, OpenAI and Anthropic keys, JWTs, private keys, an auth header's
  value, a URL's `user:pass@`);
- a password's shape: a word of 8+ characters mixing upper and lower case with digits
  ("Lumen2025"), or of 7+ with letters, digits and a symbol passwords use ("Xk9#pq2!");
- a random string: a run of 16+ letters and digits (`+` and `/` of base64 in it) with an
  entropy of 3 bits a character or more that is not made of words (at most 70% of its
  letters in pieces of three or more with a vowel: `release2024hotfix` is words,
  `k3x9q0z2m8v7c1t5` is not). Hex alone is what digests are: a git commit or SHA-256
  (40 or 64 digits), or anything shorter than 32, is an identifier; other hex of 32+ is
  taken for a secret.
By context (`_CUES`): a credential's name (password, pw, passphrase, passcode, PIN,
PAT, JWT, token, key, secret, credentials, login, cookie, OTP/2FA/MFA, combination,
mnemonic, security answer); a code of what opens or proves (an alarm, door, gate, safe,
wifi, 2FA … code, said together or a sentence apart); what opens, as a noun ("the safe
is …", "the gate wants …"); logging in, signing in or unlocking with something; a phrase
of a vault, seed or recovery; "the word X"; a user's "pass". Some of these words are
cues only as a noun of their own ("the key is …", not "the key metric"; "the PIN", not
"pin numpy to 1.26"; "PAT", not "Pat").

A trailing mark makes no difference: a word is judged without the quotes, backticks,
brackets and punctuation around it. The trade-off is caution: a false alarm only keeps
a value out of pins and memory (it stays in its message, recalled within its session),
while a miss shares a secret, so an ambiguous word counts ("the key metric" and "the
combination of" are cues; camelCase with digits is a password's shape). A hex digest
named by no cue is remembered, so a legacy 40-digit token said without a word for it is
too.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator

from proxy.observability.redaction import TOKEN_FORMATS

__all__ = ["holds_secret", "said_as_secret", "shaped"]

# Where a cue word stands alone: not inside a word, a path, a host or a hyphenated name
# ("/auth/login", "token-bucket", "key.pem").
_START = r"(?<![A-Za-z0-9/.@])"
_END = r"(?![A-Za-z0-9]|[./-][A-Za-z0-9])"
# A word that names a credential only as a noun of its own: "the key is …", not "the key
# metric" or "the token bucket".
_HEAD = (
    r"(?=[ \t]*(?:$|\n|[:=,;.!?)\]\"'`*|/—–-])|\s+(?:is|are|was|were|for|of|to|on|in|at"
    r"|from|with|and|or|will|would|has|have|had|got|reads|says|here|there|stays|remains"
    r"|became|wants|takes|needs|asks|opens|accepts)\b|\s+\S*\d)"
)
# What a code opens or proves: "the alarm code", "the code for the front door".
_OPENS = (
    r"(?:alarm|door|gate|safe|lock\w*|padlock|wi-?fi|entry|access|security|verification"
    r"|confirmation|2fa|mfa|otp|one[\s-]?time|auth\w*|backup|recovery|unlock|keypad|garage"
    r"|building|lobby|intercom|login|sms|vault|pin)"
)
_OWNER = r"(?!(?:it|that|what|there|here|he|she|who|where|let)['’]s)\w+['’]s"  # "Dad's"
_OPENED = r"(?:alarm|doors?|gates?|safe|vault|lock|padlock|keypad|lockbox)\b"
# A code of what opens or proves, said together or apart ("the alarm code", "For the
# alarm. The code is …", "the code for the front door"): apart from the other cues, so
# that it reaches as far as it is said, whatever they find in it.
_CODES = re.compile(
    rf"(?i:\b{_OPENS}(?:\W+\w+){{0,3}}?\W+codes?\b"
    rf"|\bcodes?\W+(?:for|to|of|on)\W+(?:\w+\W+){{0,2}}?{_OPENS}\b)"
)
_CUES = re.compile(
    "|".join(
        [
            # A credential's name.
            rf"(?i:{_START}(?:pass(?:word|wd|phrase|code)s?|pwd|pw|cred(?:ential)?s?|jwts?"
            r"|t?otps?|2fa|mfa|mnemonic|(?:api|access|secret|private|ssh|deploy|signing"
            r"|license)[\s_-]?keys?|bearer|basic\s+auth|auth(?:orization)?\s+headers?"
            rf"|security\s+(?:questions?|answers?)){_END})",
            # A credential's name only as a noun of its own ("the key is …").
            rf"(?i:{_START}(?:keys?|token|secrets?|cookies?|log(?:in|on)s?|combinations?)"
            rf"{_END}{_HEAD})",
            # What opens, as a noun ("the safe is …", "the back door wants …", "Door's
            # …"), not an adjective or a verb ("it's safe to merge", "lock the table").
            rf"(?i:(?:\b(?:the|a|an|my|our|your|his|her|their|this|that|{_OWNER})\s+(?:\w+\s+)?"
            rf"{_OPENED}{_HEAD}|\b{_OPENED}['’]s\b))",
            # What one logs in, signs in or unlocks with ("logged in as admin with …").
            r"(?i:\b(?:log|sign)(?:s|ged|ed|ging|ing)?\s*(?:in|on)\s+(?:with|as|using)\b"
            r"|\blogged\s+(?:in|on)\b|\bunlock\w*|\bauthenticat\w*\s+(?:with|using|as)\b"
            r"|\bpunch(?:es|ed|ing)?\s+in\b)",
            # A phrase or a word that opens ("the vault phrase", "the word X").
            r"(?i:\b(?:vault|seed|recovery|secret|safe|backup|mnemonic|wallet|master|unlock"
            r"|security|key)[\s-]*phrases?\b"
            r"|\b(?:seed|recovery|backup|mnemonic|secret|safe|code|magic)[\s-]*words?\b"
            r"|\bthe\s+word\s+(?:is\s+)?[\"'`“‘*]?\w)",
            # A user's pass ("user etl, pass …", "pass: …").
            r"(?i:\buser(?:name)?\b[^\n.;]{0,60}?\bpass\b|\bpass\s*[:=])",
            # A PIN, not the verb ("pin numpy to 1.26").
            r"(?i:\bpins?\s*(?:codes?|numbers?|is|was|[:=#]|\d)"
            r"|\b(?:the|my|your|our|their|his|her|its|a|new|default|admin|card|sim|phone|atm"
            r"|bank|door|alarm|lock)\s+pins?\b)",
            # Told by case: apiKey, clientSecret; PIN; PAT or pat, not Pat (a name).
            r"(?<=[a-z])(?:Key|Token|Secret|Password|Passwd)s?(?![a-z])",
            r"\bPINs?\b|(?<![A-Za-z0-9/.@])(?:pat|PAT)s?\b",
        ]
    )
)

_AROUND = 300  # characters of a value's line either side of it, read for what it is
_PLACES = 8  # where a value is said, at most, read
_SENTENCE_END = re.compile(r"[.!?]+(?=\s)")

# A word, as said: wrapped in quotes, backticks, brackets or markdown, ended by a mark.
_WORD = re.compile(r"\S{7,}")
_WRAP = "\"'`“”‘’*_()[]{}<>,;:."
_MIXED = re.compile(r"(?=[^.]*[A-Z])(?=[^.]*[a-z])(?=[^.]*\d)[^.\s]{8,}")
# Three of upper case, lower case, digits and a symbol passwords use, the symbol in it.
_SYMBOLS = "!#$%^&*?~"
_SYMBOLED = re.compile(r"(?=.*[!#$%^&*?~])(?:(?=.*[a-z])(?=.*[A-Z])|(?=.*[A-Za-z])(?=.*\d)).{7,}")
_ENDS = ".,;:!?…"  # a word's trailing marks: "Lumen2025!" at a sentence's end is "Lumen2025"
_REFERENCE = re.compile(r"[\w/.-]*#\d+")  # an issue or a pull request: "PR#4521", "org/repo#12"
_RUN = re.compile(r"[A-Za-z0-9+/]{16,}")
_HEX = re.compile(r"[0-9a-f]+|[0-9A-F]+")
_DIGESTS = (40, 64)  # a git commit (SHA-1) and a SHA-256
_SHORTEST_HEX_SECRET = 32
_MIN_ENTROPY = 3.0  # bits a character
_MOST_WORDS = 0.7  # of a run's letters, in pieces that read as words
_PIECE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_VOWELS = frozenset("aeiouyAEIOUY")


def holds_secret(text: str) -> bool:
    """Whether `text` holds a credential, by its shape or said to be one."""
    return next(_spans(text), None) is not None


def shaped(text: str) -> bool:
    """Whether `text` holds something shaped like a credential, whatever is said of it."""
    return next(_shapes(text), None) is not None


def said_as_secret(value: str, text: str) -> bool:
    """Whether `value`, where `text` says it, is a credential or is said in a sentence
    that holds one or that a cue reaches into ("For the alarm. The code is 4417."; "punch
    in 'harborpiano'; that's the root password"), read on its line, as far as `_AROUND`
    characters either side. A value `text` does not hold as written is not placed, so it
    counts."""
    if holds_secret(value):
        return True
    at = text.find(value)
    if at < 0:
        return True
    for _ in range(_PLACES):
        start = max(text.rfind("\n", 0, at) + 1, at - _AROUND)
        end = text.find("\n", at + len(value))
        end = min(len(text) if end < 0 else end, at + len(value) + _AROUND)
        line = text[start:end]
        spans = list(_spans(line))
        if spans:
            said, ends = at - start, at - start + len(value)
            first = max((m.end() for m in _SENTENCE_END.finditer(line, 0, said)), default=0)
            after = _SENTENCE_END.search(line, ends)
            last = after.end() if after else len(line)
            if any(s < last and first < e for s, e in spans):
                return True
        at = text.find(value, at + 1)
        if at < 0:
            return False
    return False


def _spans(text: str) -> Iterator[tuple[int, int]]:
    """Where credentials are in `text`, lazily: cheapest checks first."""
    yield from _shapes(text)
    for cues in (_CODES, _CUES):
        for cue in cues.finditer(text):
            yield cue.span()


def _shapes(text: str) -> Iterator[tuple[int, int]]:
    for known in TOKEN_FORMATS.finditer(text):
        yield known.span()
    for word in _WORD.finditer(text):
        if any(c.isdigit() or c in _SYMBOLS for c in word.group()) and _secret_word(word.group()):
            yield word.span()


def _secret_word(word: str) -> bool:
    """Whether a word is a password or a random string; the marks around it aside."""
    for part in re.split(r"[=:@,]", word.lstrip(_WRAP).rstrip(_WRAP + _ENDS)):
        part = part.lstrip(_WRAP).rstrip(_WRAP + _ENDS)
        if _SYMBOLED.fullmatch(part) and not _REFERENCE.fullmatch(part):
            return True
        if any(map(_MIXED.fullmatch, re.split(r"[-_]", part))):
            return True
        # A path's or a URL's segments are judged apart; elsewhere `/` is base64's.
        path = "." in part or part[:1] in "/~"
        for segment in part.split("/") if path else [part]:
            if any(_random(run.group()) for run in _RUN.finditer(segment)):
                return True
    return False


def _random(run: str) -> bool:
    """Whether a run of letters and digits reads as random rather than as an identifier."""
    alphanumeric = run.replace("+", "").replace("/", "")
    if len(alphanumeric) < 16 or alphanumeric.isalpha() or alphanumeric.isdigit():
        return False
    if _HEX.fullmatch(alphanumeric):
        return len(alphanumeric) >= _SHORTEST_HEX_SECRET and len(alphanumeric) not in _DIGESTS
    if _entropy(alphanumeric) < _MIN_ENTROPY:
        return False
    letters = sum(c.isalpha() for c in alphanumeric)
    in_words = sum(
        len(piece)
        for piece in _PIECE.findall(run)
        if len(piece) >= 3 and sum(c in _VOWELS for c in piece) >= 0.2 * len(piece)
    )
    return in_words < _MOST_WORDS * letters


def _entropy(text: str) -> float:
    """Shannon entropy, in bits a character, of the characters of `text`."""
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in Counter(text).values())
