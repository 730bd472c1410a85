"""The adversarial scorecard (issue 40): a second conversation, written by a generator of
its own, that says things the way a software team's chat does and tries to make the
proxy pin what was never a fact.

Why a second one: the first scorecard (`tests/benchmarks/scorecard.py`) is what the
facts ledger was tuned on, so its phrasings say little about the next conversation. This
one shares none of its templates or word lists. Facts are ops facts (hosts, ports,
versions, people on call, demo dates) stated in chat, changed by a verb ("bumped the
orion node pool to 9", "Priya took over payments on-call from Sam"), corrected in the
same message or a later one, named by aliases ("staging db" / "db for staging"), and
stated in tool outputs (`kubectl`, `openssl`, `env`, JSON), markdown tables and code
blocks (YAML, JSON, .env, Dockerfile). Around them: credentials that never say
"password", and distractors that must never be pinned (questions, hypotheticals,
negations, rejected suggestions, hunches, and tool-output fields that describe something
else).

The generator knows the truth for every fact: its current value, the older ones, the
values taken back, the word sets that name it, and every decoy said of it; `Script.judge`
tells a pinned or injected statement true or false and why, so a failure can be pinned
on a class. The conversation runs through the real proxy with the scorecard's strategies
(`scorecard.STRATEGIES`), a turn may carry a scripted tool call and its result, and each
probe is scored on the exact context the proxy sent upstream; each request is settled
before the next (`tests/benchmarks/settling.py`), so a run repeats.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import orjson
import yaml

from proxy.cli.local import LOCAL_MODEL, local_model_server
from proxy.config.settings import load_settings
from proxy.http.app import create_app
from proxy.recall.index import RECALL_PREFIX
from tests.benchmarks import scorecard
from tests.benchmarks.scorecard import (
    LOCAL_WINDOW,
    SHORT,
    SHORT_WINDOW,
    STRATEGIES,
    Strategy,
    pieces,
    shown,
)
from tests.benchmarks.settling import settled
from tests.servers import serve
from tests.summarizing import asks_summary
from tests.upstream import Reply, count_prompt_tokens, running_upstream

TURNS, FACTS, SEED = 300, 210, 40
QUICK_TURNS, QUICK_FACTS = 100, 60
SHORT_TURNS, SHORT_FACTS = 48, 24  # the short run with SmolLM2 (scorecard.SHORT) summarizing
MODEL = "adversarial"
WINDOW = scorecard.WINDOW

# ---------------------------------------------------------------------------------------
# The world the team talks about.

SERVICES = [
    "webhook handler",
    "image resizer",
    "billing api",
    "search indexer",
    "auth gateway",
    "pdf renderer",
    "geo lookup",
    "ledger sync",
    "mail relay",
    "rate limiter",
    "audit trail",
    "invoice builder",
    "push notifier",
    "session broker",
    "price feed",
    "report exporter",
    "fraud scorer",
    "tile server",
    "chat bridge",
    "media transcoder",
    "status poller",
    "quota keeper",
]
ENVS = {"staging": "stg", "prod": "prd", "qa": "qa", "sandbox": "sbx", "perf": "prf"}
CLUSTERS = ["orion", "vega", "lyra", "draco", "hydra", "cygnus"]
TEAMS = ["payments", "platform", "growth", "data", "mobile", "infra", "identity", "support"]
CUSTOMERS = ["Initech", "Globex", "Hooli", "Umbrella", "Vandelay", "Contoso", "Soylent"]
FLAGS = ["new checkout", "dark mode", "smart retries", "bulk export", "passkeys", "saved carts"]
DOMAINS = ["api.northwind.io", "pay.northwind.io", "cdn.northwind.io", "hooks.northwind.io"]
PEOPLE = ["Priya", "Sam", "Kwame", "Ingrid", "Mateo", "Yuki", "Fatima", "Bjorn", "Chloe"]
PEOPLE += ["Dmitri", "Anaya", "Tobias", "Lucia", "Hiro", "Nadia", "Owen"]
QUEUES = ["SQS", "RabbitMQ", "Kafka", "NATS", "Redis Streams", "Pub/Sub", "Kinesis"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Mar 12", "Apr 3", "May 20"]
TOPS = ["platform/edge", "apps", "services/core", "libs/internal", "backend/jobs", "legacy/mono"]
REGIONS = ["eu-west-1", "eu-central-1", "us-east-1", "us-east-2", "us-west-2", "ap-south-1"]
MEMORY = ["256Mi", "384Mi", "512Mi", "768Mi", "1Gi", "1536Mi", "2Gi", "3Gi"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov"]
ISSUERS = ["R11", "E6", "Northwind Internal CA G2", "GTS CA 1P5", "Sectigo RSA DV"]
SECRET_WORDS = ["Lumen", "Orca", "Pixel", "Tundra", "Quill", "Basalt", "Marlin", "Cobalt"]
QUEUES_MAP = {q: q.lower().replace(" ", "-").replace("/", "") for q in QUEUES}


def slug(q: str) -> str:
    return q.replace(" ", "-").lower()


def envvar(q: str) -> str:
    return q.replace(" ", "_").upper()


# ---------------------------------------------------------------------------------------
# Families: what a fact is about, the names it goes by, how its values look, and the
# verbs and questions the team uses for it. "{q}" is the qualifier (a service, an
# environment, a cluster, a team, a customer, a flag, a domain).


@dataclass(frozen=True)
class Family:
    name: str
    over: str  # the qualifiers: a key of QUALIFIERS
    aliases: tuple[str, ...]  # every name of the fact; the first is its subject
    value: Callable[[random.Random, str], str]
    probes: tuple[str, ...]
    updates: tuple[str, ...] = ()  # a later value by a verb: {A} alias, {V} new, {O} old
    states: tuple[str, ...] = ()  # statements of its own beside the generic ones
    marks: tuple[str, ...] = ()  # how a tool output names it (extra word sets)


QUALIFIERS: dict[str, list[str]] = {
    "service": SERVICES,
    "env": list(ENVS),
    "cluster": CLUSTERS,
    "team": TEAMS,
    "customer": CUSTOMERS,
    "flag": FLAGS,
    "domain": DOMAINS,
}


def _int(low: int, high: int) -> Callable[[random.Random, str], str]:
    return lambda r, q: str(r.randint(low, high))


def _pick(options: list[str]) -> Callable[[random.Random, str], str]:
    return lambda r, q: r.choice(options)


def _cert_date(r: random.Random, q: str) -> str:
    clock = f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
    return f"{r.choice(MONTHS)} {r.randint(1, 28)} {clock} {r.randint(2025, 2027)} GMT"


F = Family
FAMILIES = {
    f.name: f
    for f in [
        F(
            "dbhost",
            "env",
            ("{q} db", "{q} database", "db for {q}", "{q} postgres"),
            lambda r, q: f"db-{ENVS[q]}-{r.randint(1, 40):02d}.internal",
            ("what's the {A} host now?", "which box is the {A} on these days?"),
            (
                "heads up, the {A} moved to `{V}`",
                "failed the {A} over to `{V}`, old primary is toast",
                "the {A} got migrated to {V} last night",
            ),
            ("the {A} is on `{V}`",),
        ),
        F(
            "concurrency",
            "service",
            ("{q} concurrency", "{q} worker count", "worker concurrency on {q}"),
            _int(4, 64),
            ("what's the {A} at right now?", "how many workers, what's the {A}?"),
            (
                "raised {A} to {V}, queue was backing up",
                "bumped the {A} to {V}",
                "dropped the {A} to {V}, it was hammering the db",
            ),
            ("{A} is {V} after the load test",),
        ),
        F(
            "nodepool",
            "cluster",
            ("{q} node pool", "node count on {q}", "{q} nodes"),
            _int(3, 40),
            ("how big is the {A} these days?", "what's the {A} now?"),
            ("bumped the {A} to {V}", "scaled the {A} down to {V}, nobody was using it"),
        ),
        F(
            "k8s",
            "cluster",
            ("{q} k8s version", "{q} kube version", "{q} cluster version"),
            lambda r, q: f"1.{r.randint(26, 31)}.{r.randint(0, 12)}",
            ("what's the {A}?", "which {A} are we running?"),
            ("{A} is now {V}", "upgraded the {A} to {V} over the weekend"),
            marks=("{q} server version",),
        ),
        F(
            "oncall",
            "team",
            ("{q} on-call", "on-call for {q}", "{q} pager"),
            _pick(PEOPLE),
            ("who's on {A} right now?", "who has the {A} today?"),
            (
                "{V} took over {A} from {O}",
                "{V} is covering {A} now, {O} is out sick",
                "handed {A} over to {V}, thanks {O}!",
            ),
            ("{V} has {A} this week",),
        ),
        F(
            "queue",
            "service",
            ("{q} queue", "queue for {q}", "{q} broker"),
            _pick(QUEUES),
            ("what are we using for the {A} these days?", "what's behind the {A}?"),
            ("we switched the {A} to {V}", "moved the {A} over to {V}, finally"),
            ("the {A} runs on {V}",),
        ),
        F(
            "port",
            "service",
            ("{q} port", "port for {q}"),
            _int(3000, 9899),
            ("what port is the {q} on again?", "what's the {A}?"),
            marks=("{q} expose",),
        ),
        F(
            "demo",
            "customer",
            ("{q} demo", "demo for {q}", "{q} walkthrough"),
            _pick(DAYS),
            ("when is the {A} now?", "remind me when the {A} is?"),
            ("{A} got pushed to {V}", "{A} moved up to {V}", "{q} asked to move the demo to {V}"),
            ("{A} is on {V}", "we're doing the {A} {V}"),
        ),
        F(
            "cutoff",
            "service",
            ("{q} cutoff", "release cutoff for {q}", "{q} min version"),
            lambda r, q: f"{r.randint(2, 24)}.{r.randint(0, 12)}.{r.randint(0, 9)}",
            ("what's the {A} again?",),
        ),
        F(
            "ttl",
            "service",
            ("{q} cache TTL", "TTL on the {q} cache", "{q} cache expiry"),
            _pick([f"{n}s" for n in (30, 60, 90, 120, 180, 300, 450, 600, 900, 1800, 3600)]),
            ("what's the {A} set to?",),
            ("cut the {A} to {V}, stale prices were showing",),
        ),
        F(
            "code",
            "service",
            ("{q} code", "{q} repo", "{q} source"),
            lambda r, q: f"{r.choice(TOPS)}/{slug(q)}",
            ("where does the {A} live again?", "where's the {A} these days?"),
            ("moved the {A} to `{V}` as part of the cleanup",),
            ("the {A} lives in `{V}`", "{A} is under {V} in the monorepo"),
        ),
        F(
            "image",
            "service",
            ("{q} image", "container image for {q}"),
            lambda r, q: f"registry.acme.dev/{slug(q)}:{r.randint(1, 4)}.{r.randint(0, 30)}.0",
            ("which {A} is deployed?",),
            ("rolled the {A} forward to {V}", "pinned the {A} to {V} after the rollback"),
        ),
        F(
            "region",
            "service",
            ("{q} region", "region for {q}"),
            _pick(REGIONS),
            ("what region is the {q} in?", "which {A} did we end up with?"),
        ),
        F(
            "owner",
            "service",
            ("{q} owner", "owner of {q}"),
            _pick(PEOPLE),
            ("who owns the {q} now?", "who's the {A}?"),
            ("{V} is the new {A}, {O} moved teams",),
        ),
        F(
            "replicas",
            "service",
            ("{q} replicas", "replica count for {q}"),
            _int(2, 30),
            ("how many replicas does the {q} run?",),
            ("scaled {A} to {V} for the sale",),
        ),
        F(
            "memlimit",
            "service",
            ("{q} memory limit", "mem limit on {q}"),
            _pick(MEMORY),
            ("what's the {A}?",),
            ("raised the {A} to {V}, it kept OOMing", "lowered the {A} to {V}"),
        ),
        F(
            "rollout",
            "flag",
            ("{q} rollout", "{q} flag", "rollout of {q}"),
            _pick([f"{n}%" for n in (1, 5, 10, 20, 25, 33, 40, 50, 60, 75, 90, 100)]),
            ("where's the {A} at?",),
            ("ramped the {A} to {V}", "rolled the {A} back to {V}, error rate spiked"),
        ),
        F(
            "timeout",
            "service",
            ("{q} timeout", "request timeout on {q}"),
            lambda r, q: f"{r.randint(3, 120)}s",
            ("what's the {A} again?",),
        ),
        F(
            "runbook",
            "service",
            ("{q} runbook", "runbook for {q}"),
            lambda r, q: f"https://wiki.acme.dev/runbooks/{slug(q)}-{r.randint(2, 99)}",
            ("link to the {A}?",),
        ),
        F(
            "cert",
            "domain",
            ("{q} cert expiry", "cert on {q}"),
            _cert_date,
            ("when does the cert on {q} expire?",),
            marks=("{q} notAfter",),
        ),
    ]
}
del F

# Generic phrasings (the families' own are beside them).
PLAIN = (
    "fyi the {A} is {V}",
    "{A} is {V} btw",
    "ok so the {A} is {V}, noting it here",
    "confirmed with ops: the {A} is {V}",
    "for anyone asking, the {A} is {V}",
    "just checked, the {A} is {V} right now",
    "{Acap} → {V}",
    "pinning this: {A} = {V}",
)
PAIRS = (
    "fyi the {A} is {V} and the {A2} is {V2}",
    "two things from standup: {A} is {V}, {A2} is {V2}",
)
GENERIC_UPDATES = ("the {A} is now {V}", "update: {A} changed to {V}", "new {A}: {V}")
SAME_MESSAGE = (
    "the {A} is {X}, scratch that, it's {V}",
    "{A} is {X}... wait no, {V}. misread the dashboard",
    "setting the {A} to {X} — sorry, typo, {V}",
    "{Acap}: {X} (edit: {V}, I had the old value)",
)
LATER = (
    "oops I said {X} for the {A} earlier, it's {V}",
    "correction on the {A}: not {X}, it's {V}",
    "my bad, the {A} is {V}, not {X}",
    "ignore what I said about the {A}, the right value is {V}",
)
DECOYS = {
    "question": (
        "why is the {A} {X}?",
        "is the {A} still {X}?",
        "anyone know if the {A} is {X}?",
        "wait, since when is the {A} {X}??",
    ),
    "hypothetical": (
        "if we moved the {A} to {X}, would the lag go away",
        "if we bumped the {A} to {X} we'd blow the budget",
        "assuming the {A} goes to {X} next quarter we need more disk",
        "in theory the {A} could be {X}, not doing it though",
    ),
    "negation": (
        "the {A} is not {X}",
        "the {A} isn't {X} anymore, don't use that",
        "nope, the {A} was never {X}",
    ),
    "rejected suggestion": (
        "someone proposed {X} for the {A}; we said no",
        "{P} wanted the {A} at {X} but we vetoed it",
        "{X} for the {A} was floated and shot down",
    ),
    "hunch": (
        "I think the {A} is {X}",
        "probably the {A} is {X}",
        "pretty sure the {A} is {X} but don't quote me",
    ),
}
# Distractors about nothing planted: a question turned into a fact would be false.
LOOSE_DECOYS = {
    "question": "why is docker eating {N} GB on the build box?",
    "rejected suggestion": "someone proposed Redis 7.{N} for the cache; we said no",
    "hunch": "I think the leak is in the {q}, it grew {N}% overnight",
    "hypothetical": "if we moved to {N} workers everywhere the bill doubles",
}
CREDENTIALS = (
    "guest wifi login is {u} / {s}",
    "the API creds: {u}:{s}",
    "curl it with -H 'Authorization: Bearer {s}'",
    "analytics db url is postgres://{u}:{s}@pg-analytics.internal:5432/events",
    "sftp for the partner drop: user {u}, pass {s}",
    "registry pull login: {u} + {s}",
)
FACT_CLASSES = (
    "plain",
    "update by verb",
    "correction, same message",
    "correction, later message",
    "alias",
    "tool output",
    "markdown table",
    "config block",
)
SHARES = dict(zip(FACT_CLASSES, (0.13, 0.17, 0.07, 0.07, 0.12, 0.15, 0.14, 0.15), strict=True))
DECOY_CLASSES = (*DECOYS, "tool field")
CHANGED = ("update by verb", "correction, same message", "correction, later message", "alias")

# ---------------------------------------------------------------------------------------
# Words and values.

_FILLER = frozenset(
    "a an the of for to is are on in at by it its this that and or our we was be i my so".split()  # noqa: SIM905
)


@functools.lru_cache(maxsize=200_000)
def words(text: str) -> frozenset[str]:
    """Content words, lower case, a plural's "s" dropped: what names a subject
    ("nodes" names the "node pool", "Limits" the "memory limit")."""
    found = set()
    for w in re.findall(r"[a-z0-9]+", text.casefold()):
        if w not in _FILLER:
            found.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return frozenset(found)


@functools.lru_cache(maxsize=20_000)
def _bounded(value: str, fold: bool) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", re.I if fold else 0)


def contains(text: str, value: str, fold: bool = False) -> bool:
    """`value` whole in `text`: "12" is not in "129" nor "v12", "60s" is not in "600s"."""
    return _bounded(value, fold).search(text) is not None


def balanced(text: str) -> bool:
    """No quote, backtick or bracket left open: a value cut out of a code block or JSON
    (`600s"}`) is a mangled value."""
    pairs = (("(", ")"), ("[", "]"), ("{", "}"))
    return (
        text.count("`") % 2 == 0
        and text.count('"') % 2 == 0
        and all(text.count(a) == text.count(b) for a, b in pairs)
    )


def _unwrap(value: str) -> str:
    """A value without the quotes or backticks it is wrapped in, when they match."""
    while len(value) > 1 and value[0] == value[-1] and value[0] in "`'\"":
        value = value[1:-1].strip()
    return value


# ---------------------------------------------------------------------------------------
# The script and its truth.


def _which(fact: Fact, text: str) -> int | None:
    """Which of `fact`'s values (in `history` order) `text` states, read as a pinned value
    is: whole, in the message that said it, nothing left open; the latest when several."""
    text = _unwrap(text.strip().rstrip(".,;:!").strip())
    if not balanced(text):
        return None
    low = text.casefold()
    sentences = (fact.sentences[0],) * len(fact.retracted) + fact.sentences
    found = None
    for index, (value, sentence) in enumerate(zip(fact.history, sentences, strict=True)):
        if contains(text, value, True) and low in sentence.casefold():
            found = index
    return found


@dataclass(frozen=True)
class Decoy:
    """A value said of something without being its value."""

    cls: str  # a DECOY_CLASSES entry
    value: str
    text: str  # the message that said it
    subject: str = ""  # the fact it was said of ("" for none)
    field: frozenset[str] = frozenset()  # the tool output's field it truly belongs to


@dataclass(frozen=True)
class Fact:
    cls: str
    subject: str
    aliases: tuple[str, ...]  # the names it goes by, the subject first
    values: tuple[str, ...]  # every value said as current, the last is current
    sentences: tuple[str, ...]  # the message that said each value
    retracted: tuple[str, ...] = ()  # values taken back in the message that said them
    marks: tuple[str, ...] = ()  # how tool outputs name it
    decoys: tuple[Decoy, ...] = ()

    @property
    def answer(self) -> str:
        return self.values[-1]

    @property
    def keys(self) -> tuple[frozenset[str], ...]:
        """The word sets that name it, one per alias."""
        return tuple(words(a) for a in (*self.aliases, *self.marks))

    @property
    def key(self) -> frozenset[str]:
        return self.keys[0]

    @property
    def keywords(self) -> frozenset[str]:
        return frozenset().union(*self.keys)

    @property
    def history(self) -> tuple[str, ...]:
        """Every value it was ever given, taken back or not."""
        return (*self.retracted, *self.values)

    def named(self, said: frozenset[str]) -> bool:
        return any(key <= said for key in self.keys)

    def states(self, value: str) -> bool:
        """Whether the conversation stated `value` of it: one of its values whole, in a
        piece of the message that said it, nothing left open, nothing taken back."""
        if not balanced(value) or any(contains(value, r, True) for r in self.retracted):
            return False
        low = value.casefold()
        return any(
            contains(value, v, True) and low in s.casefold()
            for v, s in zip(self.values, self.sentences, strict=True)
        )


@dataclass
class Turn:
    """A user message; with `call`, the model answers it with that tool call, whose
    result is `output`."""

    text: str
    call: dict[str, Any] | None = None
    output: str | None = None
    kind: str = "clean"  # a decoy class, or "credential", for what says nothing true


@dataclass(frozen=True)
class Verdict:
    true: bool
    reason: str = ""
    cls: str = ""  # the class it is counted against
    source: str = ""  # the message it came from, where one did


@dataclass
class Script:
    turns: list[Turn]
    facts: list[Fact]
    probes: list[str]
    decoys: list[Decoy]
    secrets: dict[str, str]  # a credential's secret part -> the message that said it
    phrasings: dict[str, set[str]] = field(default_factory=dict)  # class -> templates

    @property
    def distractions(self) -> dict[str, set[str]]:
        """The first scorecard's view: a decoy value -> the words of what it was said of."""
        return {d.value: set(words(d.subject)) for d in self.decoys}

    @functools.cached_property
    def texts(self) -> list[tuple[str, str]]:
        """Every text the conversation has, user message or tool output, with its kind."""
        found = [(t.text, t.kind) for t in self.turns]
        return found + [(t.output, "clean") for t in self.turns if t.output is not None]

    def said(self, statement: tuple[str, ...]) -> bool:
        return self.judge(statement).true

    def judge(self, statement: tuple[str, ...]) -> Verdict:
        """Whether the conversation made `statement`: ("subject", "value") of a pinned or
        remembered fact, ("subject", "old", "new") of recall's "was replaced by" note."""
        for secret, text in self.secrets.items():
            if any(secret in part for part in statement):
                return Verdict(False, "credential", "credential", text)
        if len(statement) == 3:
            return self._replaced(*statement)
        subject, value = statement
        said = words(subject)
        value = _unwrap(value.strip().rstrip(".,;:!").strip())
        named = [f for f in self.facts if f.named(said)]
        return self._of(named, said, value) if named else self._unnamed(said, value)

    def _of(self, named: list[Fact], said: frozenset[str], value: str) -> Verdict:
        for fact in named:
            if fact.states(value):
                return Verdict(True, cls=fact.cls)
            if any(
                d.field and d.field <= said and contains(value, d.value, True) for d in fact.decoys
            ):
                return Verdict(True, cls="tool field")
        for fact in named:
            for decoy in fact.decoys:
                if contains(value, decoy.value, True):
                    return Verdict(False, f"decoy ({decoy.cls})", decoy.cls, decoy.text)
        fact = named[0]
        if any(contains(value, r, True) for f in named for r in f.retracted):
            return Verdict(False, "value taken back", fact.cls, fact.sentences[0])
        stated = [(v, s) for f in named for v, s in zip(f.values, f.sentences, strict=True)]
        for v, sentence in stated:
            core = value.strip("`'\" ")
            if (v.startswith(core) or contains(value, v, True)) and core:
                return Verdict(False, "mangled value", fact.cls, sentence)
        return Verdict(False, "not a value of it", fact.cls, self.source(value))

    def _unnamed(self, said: frozenset[str], value: str) -> Verdict:
        """A statement whose subject names no planted fact fully."""
        fields = [d for d in self.decoys if d.field and contains(value, d.value, True)]
        if any(d.field <= said for d in fields):
            return Verdict(True, cls="tool field")  # what the output's field said
        for d in fields:
            owner = next(f for f in self.facts if f.subject == d.subject)
            if said & owner.keywords:
                return Verdict(False, "tool field of something else", "tool field", d.text)
        core = value.strip("`'\" ").casefold()
        for fact in self.facts:
            if said & fact.keywords and any(core == v.casefold() for v in fact.history):
                return Verdict(False, "qualifier dropped", fact.cls, fact.sentences[-1])
        if not balanced(value):
            return Verdict(False, "mangled value", "other", self.source(value))
        low = value.casefold()
        kinds = [k for text, k in self.texts if low in text.casefold() and said <= words(text)]
        if "clean" in kinds:
            return Verdict(True, cls="other")
        if kinds:
            return Verdict(False, f"decoy ({kinds[0]})", kinds[0], self.source(value))
        return Verdict(False, "never said", "other", self.source(value))

    def _replaced(self, subject: str, old: str, new: str) -> Verdict:
        """True when a fact named by `subject` had `old`, then `new` (each read as
        leniently as a pinned value is)."""
        said = words(subject)
        named = [f for f in self.facts if f.named(said)]
        for fact in named:
            was, now = _which(fact, old), _which(fact, new)
            if was is not None and now is not None and len(fact.retracted) <= now and was < now:
                return Verdict(True, cls=fact.cls)
        cls = named[0].cls if named else "other"
        return Verdict(False, "replacement never made", cls, self.source(new))

    def source(self, value: str) -> str:
        """The first message that has `value`, for a failure's example."""
        low = value.strip("`'\" ").casefold()
        return next((t for t, _ in self.texts if low and low in t.casefold()), "")

    def messages(self) -> list[dict[str, Any]]:
        """The conversation as a full-resend client sends it before the probes, with the
        upstream's acknowledgements: what full history gives the model."""
        found: list[dict[str, Any]] = []
        for turn in self.turns:
            found.append({"role": "user", "content": turn.text})
            if turn.call:
                found.append({"role": "assistant", "content": None, "tool_calls": [turn.call]})
                found.append(
                    {"role": "tool", "tool_call_id": turn.call["id"], "content": turn.output}
                )
            found.append({"role": "assistant", "content": "Noted."})
        return found

    def phrasing_count(self) -> int:
        """The distinct phrasings that state or change a fact."""
        return len(set().union(*(p for c, p in self.phrasings.items() if c in FACT_CLASSES)))


# ---------------------------------------------------------------------------------------
# The generator.


def fill(template: str, alias: str = "", value: str = "", **more: str) -> str:
    text = template.replace("{Acap}", alias[:1].upper() + alias[1:]).replace("{A}", alias)
    for name, part in {"V": value, **more}.items():
        text = text.replace("{" + name + "}", part)
    return text


@dataclass
class _Record:
    """A fact while the conversation is written."""

    family: Family
    q: str
    cls: str
    values: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    retracted: list[str] = field(default_factory=list)
    decoys: list[Decoy] = field(default_factory=list)
    said_as: int = 0  # the alias it was first stated under

    def alias(self, index: int) -> str:
        return self.family.aliases[index % len(self.family.aliases)].replace("{q}", self.q)

    def add(self, value: str, sentence: str) -> None:
        self.values.append(value)
        self.sentences.append(sentence)

    def freeze(self) -> Fact:
        marks = tuple(m.replace("{q}", self.q) for m in self.family.marks)
        aliases = tuple(self.alias(i) for i in range(len(self.family.aliases)))
        return Fact(
            self.cls,
            aliases[0],
            aliases,
            tuple(self.values),
            tuple(self.sentences),
            tuple(self.retracted),
            marks,
            tuple(self.decoys),
        )


class _Writer:
    """Writes the conversation: episodes (a message, then the later ones that change
    its facts), loose messages (decoys, credentials), the truth beside them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.free = {(f, q) for f in FAMILIES for q in QUALIFIERS[FAMILIES[f].over]}
        self.free.discard(("image", "image resizer"))  # "image resizer image" names both
        self.records: list[_Record] = []
        self.episodes: list[list[Turn]] = []
        self.loose: list[Turn] = []
        self.decoys: list[Decoy] = []
        self.secrets: dict[str, str] = {}
        self.phrasings: dict[str, set[str]] = {}
        self.calls = 0

    def used(self, cls: str, template: str) -> str:
        self.phrasings.setdefault(cls, set()).add(template)
        return template

    def take(self, names: Iterable[str], cls: str) -> list[_Record] | None:
        """Records for `names` on one qualifier none of them has used, or None."""
        names = list(names)
        over = FAMILIES[names[0]].over
        options = [q for q in QUALIFIERS[over] if all((n, q) in self.free for n in names)]
        if not options:
            return None
        q = self.rng.choice(sorted(options))
        self.free -= {(n, q) for n in names}
        records = [_Record(FAMILIES[n], q, cls) for n in names]
        self.records += records
        return records

    def take_any(self, cls: str, need: Callable[[Family], bool] = lambda f: True) -> _Record:
        options = sorted((f, q) for f, q in self.free if need(FAMILIES[f]))
        name, q = self.rng.choice(options)
        self.free.discard((name, q))
        record = _Record(FAMILIES[name], q, cls)
        self.records.append(record)
        return record

    def fresh(self, record: _Record, avoid: Iterable[str] = ()) -> str:
        """A value of its family that it never had (nor `avoid`)."""
        taken = {*record.values, *record.retracted, *(d.value for d in record.decoys), *avoid}
        for _ in range(200):
            value = record.family.value(self.rng, record.q)
            if value not in taken:
                return value
        raise ValueError(f"no fresh value for {record.alias(0)}")

    def call(self, name: str, arguments: dict[str, str]) -> dict[str, Any]:
        self.calls += 1
        return {
            "id": f"call_{self.calls}",
            "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
        }

    def secret(self) -> str:
        r = self.rng
        tail = f"{r.choice('!#$%')}{r.choice('qxzkv')}{r.randint(1, 9)}"
        return f"{r.choice(SECRET_WORDS)}{r.randint(10, 99)}{tail}"


def _state(w: _Writer, record: _Record, cls: str, alias: int = 0, value: str = "") -> str:
    """One message stating `record`'s first value under one of its names."""
    template = w.used(cls, w.rng.choice(PLAIN + record.family.states))
    value = value or w.fresh(record)
    text = fill(template, record.alias(alias), value)
    record.add(value, text)
    return text


def _change(w: _Writer, record: _Record, cls: str, alias: int = 0) -> str:
    """A later message giving `record` a new value by a verb ("bumped …", "… took over")."""
    verbs = record.family.updates
    options = verbs if verbs and w.rng.random() < 0.85 else GENERIC_UPDATES
    template = w.used(cls, w.rng.choice(options))
    old, new = record.values[-1], w.fresh(record)
    text = fill(template, record.alias(alias), new, O=old, q=record.q)
    record.add(new, text)
    return text


def _plain(w: _Writer, count: int) -> None:
    while count > 0:
        if count >= 2 and w.rng.random() < 0.35:
            a, b = w.take_any("plain"), w.take_any("plain")
            va, vb = w.fresh(a), w.fresh(b)
            template = w.used("plain", w.rng.choice(PAIRS))
            text = fill(template, a.alias(0), va, A2=b.alias(0), V2=vb)
            a.add(va, text)
            b.add(vb, text)
            count -= 2
        else:
            text = _state(w, w.take_any("plain"), "plain")
            count -= 1
        w.episodes.append([Turn(text)])


def _updates(w: _Writer, count: int) -> None:
    cls = "update by verb"
    for _ in range(count):
        record = w.take_any(cls, lambda f: bool(f.updates))
        episode = [Turn(_state(w, record, cls)), Turn(_change(w, record, cls))]
        if w.rng.random() < 0.2:
            episode.append(Turn(_change(w, record, cls)))
        w.episodes.append(episode)


def _same_message(w: _Writer, count: int) -> None:
    cls = "correction, same message"
    for _ in range(count):
        record = w.take_any(cls)
        wrong = w.fresh(record)
        right = w.fresh(record, [wrong])
        template = w.used(cls, w.rng.choice(SAME_MESSAGE))
        text = fill(template, record.alias(0), right, X=wrong)
        record.retracted.append(wrong)
        record.add(right, text)
        w.episodes.append([Turn(text)])


def _later(w: _Writer, count: int) -> None:
    cls = "correction, later message"
    for _ in range(count):
        record = w.take_any(cls)
        first = _state(w, record, cls)
        right = w.fresh(record)
        template = w.used(cls, w.rng.choice(LATER))
        text = fill(template, record.alias(0), right, X=record.values[-1])
        record.add(right, text)
        w.episodes.append([Turn(first), Turn(text)])


def _aliases(w: _Writer, count: int) -> None:
    """Stated under one name, changed under another, probed under a third."""
    cls = "alias"
    for _ in range(count):
        record = w.take_any(cls, lambda f: len(f.aliases) >= 3)
        record.said_as = w.rng.choice([1, 2])
        first = _state(w, record, cls, record.said_as)
        w.episodes.append([Turn(first), Turn(_change(w, record, cls, record.said_as + 1))])


# Tool outputs: each kind the families it states, in the order they are dropped.
TOOL_KINDS = [
    ("openssl", ("cert",)),
    ("api", ("region", "owner")),
    ("describe", ("replicas", "image", "memlimit")),
    ("env", ("concurrency", "queue", "timeout")),
    ("version", ("k8s",)),
]


def _tools(w: _Writer, count: int) -> None:
    kinds = itertools.cycle(TOOL_KINDS)
    while count > 0:
        kind, names = next(kinds)
        records = w.take(names[:count], "tool output")
        if records is None:
            continue
        turn = TOOL_RENDERERS[kind](w, {r.family.name: r for r in records})
        w.used("tool output", kind)
        w.episodes.append([turn])
        count -= len(records)


def _tool_value(w: _Writer, record: _Record, value: str = "") -> str:
    value = value or w.fresh(record)
    record.values.append(value)
    return value


def _done(records: dict[str, _Record], output: str) -> None:
    for record in records.values():
        record.sentences += [output] * (len(record.values) - len(record.sentences))


def _field(w: _Writer, record: _Record, value: str, name: str, output: str) -> None:
    decoy = Decoy("tool field", value, output, record.alias(0), words(name))
    record.decoys.append(decoy)
    w.decoys.append(decoy)
    w.used("tool field", name)


def _openssl(w: _Writer, records: dict[str, _Record]) -> Turn:
    cert = records["cert"]
    domain, issuer = cert.q, w.rng.choice(ISSUERS)
    command = (
        f"echo | openssl s_client -connect {domain}:443 2>/dev/null"
        " | openssl x509 -noout -subject -issuer -enddate"
    )
    value = _tool_value(w, cert)
    output = (
        f"subject=CN = {domain}\nissuer=C = US, O = Northwind Trust, CN = {issuer}\n"
        f"notAfter={value}"
    )
    _done(records, output)
    _field(w, cert, issuer, "issuer", output)
    ask = f"can you check the cert on {domain}? someone said it's close to expiring"
    return Turn(ask, w.call("run_shell", {"command": command}), output)


def _api(w: _Writer, records: dict[str, _Record]) -> Turn:
    region, owner = records["region"], records.get("owner")
    name = slug(region.q)
    body: dict[str, Any] = {"service": name, "region": _tool_value(w, region)}
    if owner:
        body["owner"] = _tool_value(w, owner)
    failover = w.fresh(region)
    body |= {"failover_region": failover, "tier": w.rng.randint(1, 3)}
    output = orjson.dumps(body, option=orjson.OPT_INDENT_2).decode()
    _done(records, output)
    _field(w, region, failover, "failover", output)
    ask = f"what does the service registry say about {name}?"
    url = f"https://registry.acme.dev/api/services/{name}"
    return Turn(ask, w.call("http_get", {"url": url}), output)


def _describe(w: _Writer, records: dict[str, _Record]) -> Turn:
    any_ = next(iter(records.values()))
    name = slug(any_.q)
    lines = [f"Name:                   {name}", "Namespace:              apps"]
    if "replicas" in records:
        n = _tool_value(w, records["replicas"])
        lines.append(f"Replicas:               {n} desired | {n} updated | {n} available")
    lines.append("Pod Template:\n  Containers:\n   app:")
    if "image" in records:
        lines.append(f"    Image:      {_tool_value(w, records['image'])}")
    if "memlimit" in records:
        lines.append(f"    Limits:\n      memory:  {_tool_value(w, records['memlimit'])}")
    output = "\n".join(lines)
    _done(records, output)
    command = f"kubectl describe deploy {name} -n apps"
    return Turn(
        f"what's actually running for {name}?", w.call("run_shell", {"command": command}), output
    )


def _env(w: _Writer, records: dict[str, _Record]) -> Turn:
    any_ = next(iter(records.values()))
    name, secret = slug(any_.q), w.secret()
    lines = [
        f"DATABASE_URL=postgres://{name.replace('-', '_')}:{secret}@pg-{name}.internal:5432/app",
        f"HOSTNAME={name}-7d9f8c6b5-x{w.rng.randint(100, 999)}",
        "LOG_LEVEL=info",
    ]
    if "queue" in records:
        value = QUEUES_MAP[w.fresh(records["queue"])]
        lines.append(f"QUEUE_BACKEND={_tool_value(w, records['queue'], value)}")
    if "timeout" in records:
        lines.append(f"REQUEST_TIMEOUT={_tool_value(w, records['timeout'])}")
    if "concurrency" in records:
        lines.append(f"WORKER_CONCURRENCY={_tool_value(w, records['concurrency'])}")
    output = "\n".join(lines)
    _done(records, output)
    w.secrets[secret] = output
    w.used("credential", "env output DATABASE_URL")
    command = f"kubectl exec deploy/{name} -- env | sort"
    return Turn(
        f"what env is {name} running with?", w.call("run_shell", {"command": command}), output
    )


def _version(w: _Writer, records: dict[str, _Record]) -> Turn:
    k8s = records["k8s"]
    server = _tool_value(w, k8s, "v" + w.fresh(k8s))
    client = "v" + w.fresh(k8s, [server[1:]])
    kustomize = f"v5.{w.rng.randint(0, 6)}.{w.rng.randint(0, 9)}"
    output = (
        f"{k8s.q}\nClient Version: {client}\nKustomize Version: {kustomize}\n"
        f"Server Version: {server}"
    )
    _done(records, output)
    _field(w, k8s, client, "client", output)
    _field(w, k8s, kustomize, "kustomize", output)
    command = (
        f"kubectl config use-context {k8s.q} >/dev/null"
        " && kubectl config current-context && kubectl version"
    )
    return Turn(
        f"which k8s is {k8s.q} on, can you check?",
        w.call("run_shell", {"command": command}),
        output,
    )


TOOL_RENDERERS: dict[str, Callable[[_Writer, dict[str, _Record]], Turn]] = {
    "openssl": _openssl,
    "api": _api,
    "describe": _describe,
    "env": _env,
    "version": _version,
}

# Markdown tables: an intro, the header, and per row the families of one qualifier.
TABLE_KINDS = [
    ("port map from the wiki, double-checked today:", ("service", "port"), ("port",), 3),
    ("ownership sheet as of this sprint:", ("service", "owner", "region"), ("owner", "region"), 2),
    ("flag rollout status:", ("flag", "rollout"), ("rollout",), 3),
    ("cluster inventory:", ("cluster", "nodes", "k8s version"), ("nodepool", "k8s"), 2),
]


def _tables(w: _Writer, count: int) -> None:
    kinds = itertools.cycle(TABLE_KINDS)
    while count > 0:
        intro, header, names, rows = next(kinds)
        taken: list[list[_Record]] = []
        for _ in range(rows):
            if count - sum(len(r) for r in taken) < len(names):
                break
            records = w.take(names, "markdown table")
            if records:
                taken.append(records)
        if not taken:
            continue
        body = [f"| {' | '.join(header)} |", "|" + "---|" * len(header)]
        for records in taken:
            cells = [_tool_value(w, r) for r in records]
            body.append(f"| {records[0].q} | {' | '.join(cells)} |")
        text = w.used("markdown table", intro) + "\n" + "\n".join(body)
        for records in taken:
            _done({r.family.name: r for r in records}, text)
        w.episodes.append([Turn(text)])
        count -= sum(len(r) for r in taken)


def _yaml(w: _Writer, records: dict[str, _Record]) -> str:
    name = slug(next(iter(records.values())).q)
    lines = [f"helm values for {name}:", "```yaml", f"{name}:"]
    if "replicas" in records:
        lines.append(f"  replicas: {_tool_value(w, records['replicas'])}")
    if "memlimit" in records:
        lines += [
            "  resources:",
            "    limits:",
            f"      memory: {_tool_value(w, records['memlimit'])}",
        ]
    if "timeout" in records:
        lines.append(f"  timeout: {_tool_value(w, records['timeout'])}")
    return "\n".join([*lines, "```"])


def _json(w: _Writer, records: dict[str, _Record]) -> str:
    name = slug(next(iter(records.values())).q)
    body: dict[str, Any] = {"service": name}
    if "ttl" in records:
        body["cache"] = {"ttl": _tool_value(w, records["ttl"]), "max_entries": 50000}
    if "cutoff" in records:
        body["min_version"] = _tool_value(w, records["cutoff"])
    block = orjson.dumps(body, option=orjson.OPT_INDENT_2).decode()
    return f"cache config we ship for {name}:\n```json\n{block}\n```"


def _dotenv(w: _Writer, records: dict[str, _Record]) -> str:
    q = next(iter(records.values())).q
    lines = [f"here's the .env for {slug(q)}:", "```", "LOG_FORMAT=json"]
    if "port" in records:
        lines.append(f"{envvar(q)}_PORT={_tool_value(w, records['port'])}")
    if "queue" in records:
        value = QUEUES_MAP[w.fresh(records["queue"])]
        lines.append(f"{envvar(q)}_QUEUE={_tool_value(w, records['queue'], value)}")
    return "\n".join([*lines, "```"])


def _dockerfile(w: _Writer, records: dict[str, _Record]) -> str:
    name = slug(next(iter(records.values())).q)
    lines = [f"Dockerfile for {name}, in case anyone needs it:", "```dockerfile"]
    lines += ["FROM python:3.12-slim", "WORKDIR /app", "COPY . ."]
    if "concurrency" in records:
        lines.append(f"ENV WORKER_CONCURRENCY={_tool_value(w, records['concurrency'])}")
    if "port" in records:
        port = _tool_value(w, records["port"])
        lines += [f"ENV PORT={port}", f"EXPOSE {port}"]
    return "\n".join([*lines, 'CMD ["python", "-m", "app"]', "```"])


CONFIG_KINDS: list[tuple[Callable[[_Writer, dict[str, _Record]], str], tuple[str, ...]]] = [
    (_yaml, ("replicas", "memlimit", "timeout")),
    (_json, ("ttl", "cutoff")),
    (_dotenv, ("port", "queue")),
    (_dockerfile, ("port", "concurrency")),
]


def _configs(w: _Writer, count: int) -> None:
    kinds = itertools.cycle(CONFIG_KINDS)
    while count > 0:
        render, names = next(kinds)
        records = w.take(names[:count], "config block")
        if records is None:
            continue
        by_name = {r.family.name: r for r in records}
        text = render(w, by_name)
        w.used("config block", render.__name__)
        _done(by_name, text)
        w.episodes.append([Turn(text)])
        count -= len(records)


def _decoys(w: _Writer, each: int) -> None:
    """`each` distractors of every class: said of a planted fact with a value it never
    had, and one about nothing planted."""
    for cls, templates in DECOYS.items():
        for n in range(each):
            if n == 0 and cls in LOOSE_DECOYS:
                number = str(w.rng.randint(11, 95))
                q = w.rng.choice(SERVICES)
                text = fill(w.used(cls, LOOSE_DECOYS[cls]), N=number, q=q)
                decoy = Decoy(cls, number, text)
            else:
                record = w.rng.choice([r for r in w.records if r.values])
                value = w.fresh(record)
                template = w.used(cls, templates[n % len(templates)])
                alias = record.alias(w.rng.randrange(len(record.family.aliases)))
                text = fill(template, alias, X=value, P=w.rng.choice(PEOPLE))
                decoy = Decoy(cls, value, text, record.alias(0))
                record.decoys.append(decoy)
            w.decoys.append(decoy)
            w.loose.append(Turn(text, kind=cls))


def _credentials(w: _Writer, count: int) -> None:
    for n in range(count):
        template = w.used("credential", CREDENTIALS[n % len(CREDENTIALS)])
        secret = w.secret()
        if "Bearer" in template:
            secret = "eyJ" + "".join(
                w.rng.choice("abcdefghijkmnpqrstuvwxyzABCDEFGH23456789") for _ in range(28)
            )
        user = w.rng.choice(["svc-deploy", "acme-guest", "ci-bot", "partner-ro", "etl"])
        text = fill(template, u=user, s=secret)
        w.secrets[secret] = text
        w.loose.append(Turn(text, kind="credential"))


def _noise(w: _Writer, at: int) -> Turn:
    """Chatter that states nothing about a planted subject."""
    r = w.rng
    name = slug(r.choice(SERVICES))
    if at % 17 == 9:
        rows = [
            f"{name}-{r.randint(1000, 9999):x}-{i} 1/1 Running {r.randint(0, 3)}"
            f" {r.randint(1, 30)}d"
            for i in range(r.randint(3, 6))
        ]
        output = "NAME READY STATUS RESTARTS AGE\n" + "\n".join(rows)
        command = f"kubectl get pods -n apps -l app={name}"
        ask = f"is anything crashlooping for {name}? (check {at})"
        return Turn(ask, w.call("run_shell", {"command": command}), output)
    if at % 13 == 6:
        lines = [
            f"2025-03-0{r.randint(1, 9)}T10:{r.randint(10, 59)}:{r.randint(10, 59)}Z INFO {name}"
            f" handled job in {r.randint(3, 900)}ms"
            for _ in range(12)
        ]
        return Turn(f"tail of the {name} logs:\n" + "\n".join(lines))
    return Turn(
        r.choice(
            [
                "morning all, standup in 5",
                f"{name} deploy went out, all green",
                f"anyone seen flaky tests in the {name} suite today?",
                "lunch? thinking tacos",
                f"PR #{r.randint(1000, 9999)} is up for review, small one",
                "retro notes are in the doc, take a look when you can",
                f"thanks for jumping on the {name} thing yesterday",
            ]
        )
    )


def _place(w: _Writer, turns: int) -> list[Turn]:
    """Each episode's first message early (the first 65%), its later ones after it, the
    loose messages anywhere, chatter between."""
    rng = w.rng
    placed: list[Turn | None] = [None] * turns
    early = list(range(1, int(turns * 0.65)))
    rng.shuffle(early)
    need = sum(len(e) for e in w.episodes) + len(w.loose)
    if len(w.episodes) > len(early) or need > turns - 1:
        raise ValueError(f"{need} messages do not fit in {turns} turns")
    firsts = []
    for episode in w.episodes:
        firsts.append(early.pop())
        placed[firsts[-1]] = episode[0]
    for at, episode in sorted(zip(firsts, w.episodes, strict=True), key=lambda p: -p[0]):
        for turn in episode[1:]:
            free = [i for i in range(at + 3, turns) if placed[i] is None]
            free = free or [i for i in range(at + 1, turns) if placed[i] is None]
            if not free:
                raise ValueError("no room for a later message")
            at = rng.choice(free)
            placed[at] = turn
    free = [i for i in range(1, turns) if placed[i] is None]
    for turn, at in zip(w.loose, rng.sample(free, len(w.loose)), strict=True):
        placed[at] = turn
    return [turn or _noise(w, at) for at, turn in enumerate(placed)]


PROBE_LEADS = ("", "quick one: ", "sorry if this was asked already, ", "remind me, ")


def _probe(w: _Writer, record: _Record) -> str:
    """One question per fact, the way people ask; an alias fact under a name it was
    neither stated nor changed under, others sometimes under an alias."""
    count = len(record.family.aliases)
    if record.cls == "alias":
        alias = next(
            i for i in range(count) if i not in (record.said_as, (record.said_as + 1) % count)
        )
    else:
        alias = w.rng.randrange(count) if w.rng.random() < 0.35 else 0
    template = w.used("probe", w.rng.choice(record.family.probes))
    question = fill(template, record.alias(alias), q=record.q)
    lead = w.rng.choice(PROBE_LEADS)
    text = lead + question
    return text[:1].upper() + text[1:]


def _counts(facts: int) -> dict[str, int]:
    counts = {cls: max(2, round(facts * share)) for cls, share in SHARES.items()}
    counts["plain"] += facts - sum(counts.values())
    return counts


def generate(turns: int = TURNS, facts: int = FACTS, seed: int = SEED) -> Script:
    """A seeded conversation of `turns` turns stating about `facts` facts in every class,
    with distractors and credentials, then one probe per fact."""
    w = _Writer(random.Random(seed))
    counts = _counts(facts)
    _updates(w, counts["update by verb"])
    _aliases(w, counts["alias"])
    _later(w, counts["correction, later message"])
    _same_message(w, counts["correction, same message"])
    _tools(w, counts["tool output"])
    _tables(w, counts["markdown table"])
    _configs(w, counts["config block"])
    _plain(w, counts["plain"])
    _decoys(w, max(2, facts // 40))
    _credentials(w, max(len(CREDENTIALS), facts // 16))
    w.rng.shuffle(w.episodes)
    placed = _place(w, turns)
    seen: set[str] = set()
    for turn in placed:
        while turn.call and turn.text in seen:
            turn.text += " (again)"
        seen.add(turn.text)
    records = list(w.records)
    w.rng.shuffle(records)
    probes = [_probe(w, r) for r in records]
    return Script(placed, [r.freeze() for r in records], probes, w.decoys, w.secrets, w.phrasings)


# ---------------------------------------------------------------------------------------
# Scoring one request.


def probed(fact: Fact, messages: list[dict[str, Any]]) -> tuple[bool, str | None]:
    """Whether a request for `fact` had its current value whole in a piece that names it
    (by any alias), and the piece that offers an old value as current, if one does: the
    last piece naming it with any value it ever had, when that is not the current one."""
    parts = [p for p in pieces(messages) if fact.named(words(p))]
    found = any(contains(p, fact.answer) for p in parts)
    last = next((p for p in reversed(parts) if any(contains(p, v) for v in fact.history)), None)
    return found, last if last is not None and not contains(last, fact.answer) else None


# ---------------------------------------------------------------------------------------
# Through the proxy.

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {argument: {"type": "string"}}},
        },
    }
    for name, description, argument in (
        ("run_shell", "Run a shell command in the ops box", "command"),
        ("http_get", "GET a URL on the internal network", "url"),
    )
]


def responder(script: Script, summarizer_fails: bool) -> Callable[[dict[str, Any]], str | Reply]:
    """The upstream: the scorecard's gist-only summarizer (or a failing one), the
    scripted tool call where a turn carries one, else a short acknowledgement."""
    calls = {turn.text: turn.call for turn in script.turns if turn.call}

    def respond(body: dict[str, Any]) -> str | Reply:
        messages = body["messages"]
        if asks_summary(body):
            return (
                scorecard.failing_summarizer(body) if summarizer_fails else scorecard.respond(body)
            )
        last = messages[-1]
        call = calls.get(str(last.get("content"))) if last["role"] == "user" else None
        return Reply(tool_calls=[call]) if call else f"Noted (ack {len(messages)})."

    return respond


def drive(client: openai.OpenAI, turns: list[Turn], probes: list[str]) -> list[int]:
    """Play the turns as a full-resend client, answering each tool call with its
    scripted result, then the probes; the request index of every probe."""
    outputs = {turn.call["id"]: turn.output for turn in turns if turn.call}
    history: list[dict[str, Any]] = []
    requests = 0

    def ask() -> None:
        nonlocal requests
        with settled():
            reply = client.chat.completions.create(
                model=MODEL,
                messages=[scorecard.SYSTEM, *history],  # type: ignore[list-item]
                tools=TOOLS,  # type: ignore[arg-type]
            )
        requests += 1
        message = reply.choices[0].message
        if not message.tool_calls:
            history.append({"role": "assistant", "content": message.content})
            return
        call = message.tool_calls[0]
        dumped = call.model_dump(include={"id", "type", "function"})
        history.append({"role": "assistant", "content": None, "tool_calls": [dumped]})
        history.append({"role": "tool", "tool_call_id": call.id, "content": outputs[call.id]})
        ask()

    for turn in turns:
        history.append({"role": "user", "content": turn.text})
        ask()
    at = []
    for probe in probes:
        history.append({"role": "user", "content": probe})
        at.append(requests)
        ask()
    return at


def _config(
    directory: Path, base_url: str, window: int, extra: dict[str, Any], local_url: str = ""
) -> Path:
    """A proxy config with one model on the recording upstream (and, with `local_url`,
    the local model's server, as the first scorecard adds it) and a store of its own."""
    config = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": "openai/gpt-4o-mini",
                    "api_base": base_url,
                    "api_key": "sk-adversarial",
                },
                "model_info": {"max_input_tokens": window},
            },
            *([scorecard.local_deployment(local_url)] if local_url else []),
        ],
        "session": {"path": tempfile.mkdtemp(dir=directory, prefix="adversarial-")},
        **extra,
    }
    path = Path(tempfile.mkdtemp(dir=directory)) / "adversarial.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _client(url: str, headers: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/v1", api_key="adversarial", max_retries=0, default_headers=headers
    )


@dataclass
class Result:
    """One strategy's (or one memory run's) score."""

    name: str
    recall: float = 0.0
    stale: float = 0.0
    false: int = 0
    statements: int = 0
    leaks: int = 0
    probe_tokens: float = 0.0
    cache_share: float = 0.0
    summaries: int = 0  # distinct summaries sent upstream (folds that reached the model)
    # class -> [facts recalled, facts, stale, false statements]
    classes: dict[str, list[int]] = field(default_factory=dict)
    wrong: list[tuple[tuple[str, ...], Verdict]] = field(default_factory=list)
    staled: list[tuple[Fact, str]] = field(default_factory=list)
    missed: list[Fact] = field(default_factory=list)
    blocks: Blocks | None = None  # the probes' recall blocks, for a strategy that recalls


@dataclass
class Blocks:
    """What the probes' recall blocks held (issue 40, item 4)."""

    probes: int
    blocks: int = 0  # probes whose request had a recall block
    units: int = 0  # units shown in them
    repeated: int = 0  # blocks that show one text twice
    unmatched: int = 0  # units sharing no content word with the question
    recurring: float = 0.0  # the share of probes whose block has the most frequent unit

    @property
    def fine(self) -> bool:
        """Item 4's target: no unit twice in a block, and none that comes back for most
        questions (the issue saw one in 113 of 114 blocks). Units that share no word
        with the question are counted, not judged: since issue 52, BM25 fills the room
        the precise units leave, and on real conversations that finds more of what a
        question needs (the `locomo` benchmark)."""
        return self.blocks > 0 and not self.repeated and self.recurring < 0.5

    def line(self) -> str:
        each = self.units / max(self.blocks, 1)
        return (
            f"{self.blocks} of {self.probes} probes had one, {each:.1f} units each; blocks"
            f" with a unit twice: {self.repeated}; units sharing no word with the question:"
            f" {self.unmatched}; the most frequent unit is in {self.recurring:.0%} of probes"
        )


_UNIT = re.compile(r"\n\n(?=\[message \d+)")
_LABEL = re.compile(r"^\[message \d+[^\]]*\] ")
# The words of asking, not of what is asked (the probes' leads and question words).
_ASKING = words(" ".join(PROBE_LEADS)) | words(
    "what whats which who whos where wheres when how many much does do did again is are"
    " using these days now right run live set behind end up with"
)


def recall_blocks(probes: list[str], asked: list[dict[str, Any]]) -> Blocks:
    """The recall block of each probe's request: its units, whether one is shown twice,
    whether each shares a content word with the question, and how often the most
    frequent unit comes back."""
    result = Blocks(len(probes))
    seen: Counter[str] = Counter()
    for probe, body in zip(probes, asked, strict=True):
        block = next(
            (
                str(m["content"])
                for m in body["messages"]
                if m["role"] == "system" and str(m["content"]).startswith(RECALL_PREFIX)
            ),
            None,
        )
        if block is None:
            continue
        units = [_LABEL.sub("", u) for u in _UNIT.split(block[len(RECALL_PREFIX) :])]
        wanted = words(probe) - _ASKING
        result.blocks += 1
        result.units += len(units)
        result.repeated += len(set(units)) < len(units)
        result.unmatched += sum(not (words(u) & wanted) for u in units)
        seen.update(set(units))
    result.recurring = max(seen.values(), default=0) / max(len(probes), 1)
    return result


def run_strategy(
    directory: Path, strategy: Strategy, script: Script, local_url: str = ""
) -> Result:
    """`script` through the proxy with `strategy`, scored on what went upstream;
    `local_url`, the local model's server, for a strategy whose summaries it writes."""
    with running_upstream() as upstream:
        upstream.default = Reply(respond=responder(script, strategy.summarizer_fails))
        upstream.exact_usage = False
        context = strategy.context
        if strategy.local_summarizer:
            assert local_url
            # Two shared cores: a fold takes a while.
            context = {**context, "summary_model": LOCAL_MODEL, "summary_timeout_seconds": 600}
        else:
            local_url = ""
        path = _config(
            directory, upstream.base_url, strategy.window, {"context": context}, local_url
        )
        with serve(create_app(load_settings(path, environ={}))) as url:
            client = _client(url, {"X-Session-Id": "adversarial"})
            probes = drive(client, script.turns, script.probes)
        requests = [r.body for r in upstream.chat_requests()]
    bodies = [b for b in requests if not asks_summary(b)]
    result = judge(strategy.name, script, [bodies[at] for at in probes], bodies)
    sizes = [count_prompt_tokens(body) for body in bodies]
    result.probe_tokens = sum(sizes[at] for at in probes) / len(probes)
    result.cache_share = cache_share(bodies, sizes)
    result.summaries = len({s for body in bodies if (s := scorecard._summary(body))})
    if strategy.context.get("recall_ratio", 1) and strategy.context.get("mode") != "off":
        result.blocks = recall_blocks(script.probes, [bodies[at] for at in probes])
    return result


def judge(
    name: str, script: Script, asked: list[dict[str, Any]], bodies: list[dict[str, Any]]
) -> Result:
    """Recall and staleness on each probe's request (`asked`, one per fact), and every
    statement the proxy made in any request (`bodies`) judged against the truth."""
    result = Result(name, classes={c: [0, 0, 0, 0] for c in (*FACT_CLASSES, *DECOY_CLASSES)})
    result.classes |= {"credential": [0, 0, 0, 0], "other": [0, 0, 0, 0]}
    for fact, body in zip(script.facts, asked, strict=True):
        found, stale = probed(fact, body["messages"])
        row = result.classes[fact.cls]
        row[0] += found
        row[1] += 1
        row[2] += stale is not None
        if stale is not None:
            result.staled.append((fact, stale))
        if not found:
            result.missed.append(fact)
    said = sorted({s for body in bodies for s in shown(body["messages"])})
    for statement in said:
        verdict = script.judge(statement)
        if not verdict.true:
            result.wrong.append((statement, verdict))
            result.classes[verdict.cls][3] += 1
    changed = sum(fact.cls in CHANGED for fact in script.facts)
    result.recall = sum(r[0] for r in result.classes.values()) / len(script.facts)
    result.stale = len(result.staled) / max(changed, 1)
    result.false, result.statements = len(result.wrong), len(said)
    result.leaks = sum(v.reason == "credential" for _, v in result.wrong)
    return result


def cache_share(bodies: list[dict[str, Any]], sizes: list[int]) -> float:
    """Of all prompt tokens sent, those a provider's prompt cache would bill as cached:
    the leading byte-identical messages, and the tokens the first changed one starts
    with (as the first scorecard counts it)."""
    cached = 0
    for before, after in itertools.pairwise(bodies):
        same = 0
        for a, b in zip(before["messages"], after["messages"], strict=False):
            if a != b:
                break
            same += 1
        messages = after["messages"]
        cached += count_prompt_tokens({"messages": messages[:same]}) if same else 0
        if same < min(len(before["messages"]), len(messages)):
            cached += scorecard._common_tokens(before["messages"][same], messages[same])
    return cached / max(sum(sizes[1:]), 1)


def cross_session(directory: Path, script: Script, memory: Any, name: str) -> Result:
    """The facts planted in one session, each probed from a new session with the same
    memory id: what memory carries across sessions."""
    with running_upstream() as upstream:
        upstream.default = Reply(respond=responder(script, False))
        upstream.exact_usage = False
        extra = {"memory": {"enabled": True, **memory}}
        path = _config(directory, upstream.base_url, WINDOW, extra)
        with serve(create_app(load_settings(path, environ={}))) as url:

            def client(session: str) -> openai.OpenAI:
                return _client(url, {"X-Session-Id": session, "X-Memory-Id": "adversarial"})

            drive(client("planting"), script.turns, [])
            for number, probe in enumerate(script.probes):
                client(f"probe-{number}").chat.completions.create(
                    model=MODEL,
                    messages=[scorecard.SYSTEM, {"role": "user", "content": probe}],  # type: ignore[list-item]
                )
        bodies = [r.body for r in upstream.chat_requests()][-len(script.probes) :]
    return judge(name, script, bodies, bodies)


# ---------------------------------------------------------------------------------------
# The report.

MEMORY_RUNS = scorecard.MEMORY_RUNS
TARGET_STRATEGY = "summary + facts + recall"


def describe(script: Script) -> str:
    changed = sum(fact.cls in CHANGED for fact in script.facts)
    decoys = Counter(d.cls for d in script.decoys)
    return (
        f"{len(script.turns)} turns, {len(script.facts)} facts in {script.phrasing_count()}"
        f" phrasings ({changed} changed later or in the same message), {len(script.decoys)}"
        f" distractors ({', '.join(f'{n} {c}' for c, n in decoys.items())}),"
        f" {len(script.secrets)} credentials, one probe per fact"
    )


def table(results: list[Result], full: float | None) -> str:
    """The strategies as a markdown table, like the first scorecard's, with the leaks;
    `full`, the full history's tokens per probe, adds each strategy's share of it."""
    share = " of full history |" if full else ""
    lines = [
        "| strategy | exact recall | stale facts | false statements | credential leaks"
        f" | tokens per probe |{share} prefix-cache share |",
        "|---|---|---|---|---|---|---|" + ("---|" if full else ""),
    ]
    for r in results:
        of_full = f" {r.probe_tokens / full:.0%} |" if full else ""
        lines.append(
            f"| {r.name} | {r.recall:.0%} | {r.stale:.0%} | {r.false} of {r.statements} |"
            f" {r.leaks} | {r.probe_tokens:,.0f} |{of_full} {r.cache_share:.0%} |"
        )
    return "\n".join(lines)


def memory_table(results: list[Result]) -> str:
    lines = [
        "| memory | exact recall | stale facts | false statements | credential leaks |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.recall:.0%} | {r.stale:.0%} | {r.false} of {r.statements} |"
            f" {r.leaks} |"
        )
    return "\n".join(lines)


def class_table(results: list[Result]) -> str:
    """Per class, each run's recall, stale facts and false statements: where a failure
    comes from (a distractor class has no facts, only statements it made false)."""
    head = " | ".join(r.name for r in results)
    lines = [
        "per class, recall / stale / false statements:",
        f"| class | facts | {head} |",
        "|---|---|" + "---|" * len(results),
    ]
    for cls in (*FACT_CLASSES, *DECOY_CLASSES, "credential", "other"):
        n = results[0].classes[cls][1]
        cells = []
        for r in results:
            found, total, stale, false = r.classes[cls]
            recall = f"{found / total:.0%}" if total else "—"
            cells.append(f"{recall} / {stale if total else '—'} / {false}")
        lines.append(f"| {cls} | {n or '—'} | {' | '.join(cells)} |")
    return "\n".join(lines)


def reasons(results: list[Result]) -> str:
    lines = ["false statements by reason:"]
    for r in results:
        counted = Counter(v.reason for _, v in r.wrong)
        listed = ", ".join(f"{reason} {n}" for reason, n in counted.most_common()) or "none"
        lines.append(f"- {r.name}: {listed}")
    return "\n".join(lines)


def _short(text: str, size: int = 140) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= size else flat[: size - 1] + "…"


def examples(result: Result, count: int = 10) -> str:
    """The first failures of one run, each with the message behind it."""
    lines = [f"examples ({result.name}):"]
    for statement, verdict in result.wrong[:count]:
        said = ": ".join(statement) if len(statement) == 2 else " -> ".join(statement)
        source = _short(verdict.source)
        lines.append(f"- false [{verdict.reason}, {verdict.cls}] `{_short(said)}` from: {source}")
    for fact, piece in result.staled[:count]:
        lines.append(
            f"- stale [{fact.cls}] {fact.subject}: offered `{_short(piece, 90)}`;"
            f" current {fact.answer!r} said in: {_short(fact.sentences[-1])}"
        )
    for fact in result.missed[: count // 2]:
        lines.append(
            f"- missed [{fact.cls}] {fact.subject} = {fact.answer!r}, said in:"
            f" {_short(fact.sentences[-1])}"
        )
    return "\n".join(lines)


def targets(results: list[Result], memory: Result) -> str:
    """The issue's targets for the full strategy, PASS or MISS."""
    best = next(r for r in results if r.name == TARGET_STRATEGY)
    share = best.probe_tokens / results[0].probe_tokens
    blocks = best.blocks or Blocks(0)

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    return "\n".join(
        [
            f"targets ({TARGET_STRATEGY}):",
            f"- exact recall >= 97%: {best.recall:.1%} {verdict(best.recall >= 0.97)}",
            f"- stale facts 0: {len(best.staled)} {verdict(not best.staled)}",
            f"- false statements 0: {best.false} ({best.leaks} credential leaks)"
            f" {verdict(best.false == 0)}",
            f"- memory across sessions >= 95%: {memory.recall:.1%}"
            f" {verdict(memory.recall >= 0.95)}",
            f"- recall blocks of distinct units, none in most probes: {blocks.repeated}"
            f" twice, the most frequent in {blocks.recurring:.0%} ({blocks.unmatched} units"
            f" share no word with the question: BM25 fills the room) {verdict(blocks.fine)}",
            f"- token share of full history: {share:.0%} (no higher than the first"
            " scorecard's: compare its `of full history` column)",
        ]
    )


def local_run(directory: Path) -> str:
    """A short adversarial conversation through `scorecard.SHORT` (two strategies, each
    with the test's gist-only summarizer and with SmolLM2 on llama.cpp): what a real small
    model keeps, and whether it writes credentials or false statements. Reported only."""
    script = generate(SHORT_TURNS, SHORT_FACTS, SEED + 2)
    with local_model_server(LOCAL_WINDOW) as url:
        results = [run_strategy(directory, strategy, script, url) for strategy in SHORT]
    for result, strategy in zip(results, SHORT, strict=True):
        summarizer = "SmolLM2" if strategy.local_summarizer else "test"
        result.name += f", {summarizer} summarizer ({result.summaries} summaries)"
    return "\n".join(
        [
            "short run, the test's summarizer against the local model (SmolLM2-135M on"
            f" llama.cpp, a {LOCAL_WINDOW:,}-token window): {describe(script)};"
            f" a {SHORT_WINDOW:,}-token model",
            table(results, None),
        ]
    )


def benchmark(directory: Path, quick: bool = False) -> str:
    """The adversarial scorecard: the seeded conversation (quick: 100 turns, 60 facts)
    through every strategy, memory across sessions, per-class rows, failure examples
    and the targets; and (not quick) the short run with SmolLM2 as the summarizer."""
    script = generate(QUICK_TURNS, QUICK_FACTS) if quick else generate()
    results = [run_strategy(directory, strategy, script) for strategy in STRATEGIES]
    planted = generate(60, 30, SEED + 1) if quick else generate(80, 40, SEED + 1)
    runs = MEMORY_RUNS[:1] if quick else MEMORY_RUNS
    memory = [cross_session(directory, planted, settings, name) for name, settings in runs]
    head = f"{describe(script)}; a {WINDOW:,}-token model (budget {int(0.8 * WINDOW):,})"
    return "\n".join(
        [
            head,
            table(results, results[0].probe_tokens),
            "",
            f"memory across sessions: {describe(planted)}; planted in one session, each"
            " probed from a new session with the same memory id:",
            memory_table(memory),
            "",
            class_table([*results, memory[0]]),
            "",
            *(f"recall blocks ({r.name}): {r.blocks.line()}" for r in results if r.blocks),
            "",
            reasons([*results, *memory]),
            "",
            examples(results[-1]),
            "",
            examples(results[-2], 6),
            "",
            examples(memory[0], 6),
            "",
            targets(results, memory[0]),
            *([] if quick else ["", local_run(directory)]),
        ]
    )
