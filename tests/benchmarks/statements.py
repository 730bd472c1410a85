"""The scorecard's conversation: fact statements in many phrasings, updates said several
ways, distractors that must not become facts, and noise, generated from a seed; and the
truth that every statement the proxy pins or injects is checked against.

A fact is a qualified subject ("invoice number for the Lisbon order", "nightly billing
backup") and a value that is often more than one literal ("BLUE HERON", "03:15 UTC",
"Maria Chen, Jonas Okafor and Aiko Sato", "make deploy-search TAG=v2.4.1"). Many facts
share a head ("invoice number", "staging host") and differ only in their qualifier, so
a reader that drops the qualifier confuses them. Distractors name a real subject with a
value it does not have (a question, a negation, a hypothetical, a rejected suggestion).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

AREAS = [
    "billing",
    "search",
    "mobile",
    "analytics",
    "payments",
    "onboarding",
    "checkout",
    "inventory",
    "reporting",
    "shipping",
    "identity",
    "messaging",
    "pricing",
    "support",
    "catalog",
    "security",
]
CITIES = [
    "Lisbon",
    "Riga",
    "Oslo",
    "Porto",
    "Vienna",
    "Dublin",
    "Krakow",
    "Ghent",
    "Turin",
    "Bergen",
    "Tallinn",
    "Seville",
    "Lyon",
    "Malmo",
    "Zagreb",
    "Bern",
]
FIRST = ["Maria", "Jonas", "Aiko", "Tomasz", "Lena", "Ravi", "Sofia", "Diego", "Hana", "Omar"]
LAST = ["Chen", "Okafor", "Lindqvist", "Novak", "Brennan", "Sato", "Haddad", "Moreau", "Adeyemi"]
WORDS = ["alpha", "cedar", "delta", "ember", "falcon", "granite", "harbor", "indigo", "juniper"]
COLORS = ["BLUE", "RED", "GREEN", "SILVER", "AMBER", "IVORY", "SCARLET", "COBALT"]
BIRDS = ["HERON", "FALCON", "KESTREL", "OSPREY", "PLOVER", "WREN", "CONDOR", "PETREL"]
ZONES = ["UTC", "CET", "PST", "EST", "JST"]
MONTHS = ["January", "March", "April", "June", "August", "October", "November"]


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


# A family: its subject (from a qualifier), its value, and how it reads where the
# generic phrasings would be odd (a time "runs at", a command "run").
@dataclass(frozen=True)
class Family:
    subject: str  # "{q}" is the area or the city
    value: Callable[[random.Random, str], str]
    qualifier: str = "area"  # or "city"
    own: tuple[str, ...] = ()  # phrasings of its own
    key: str = ""  # what names it in all its phrasings, when not its subject


FAMILIES = [
    Family(
        "invoice number for the {q} order", lambda r, q: f"INV-{r.randint(10000, 99999)}", "city"
    ),
    Family(
        "tracking number for the {q} shipment",
        lambda r, q: f"1Z{r.randint(100, 999)}X{r.randint(1000, 9999)}",
        "city",
    ),
    Family(
        "delivery address for the {q} office",
        lambda r, q: f"{r.randint(2, 240)} {r.choice(WORDS).capitalize()} Street",
        "city",
    ),
    Family("codename for the {q} project", lambda r, q: f"{r.choice(COLORS)} {r.choice(BIRDS)}"),
    Family(
        "release branch for the {q} app",
        lambda r, q: f"release/{r.randint(2024, 2027)}.{r.randint(1, 12):02d}-{r.choice(WORDS)}",
    ),
    Family(
        "nightly {q} backup",
        lambda r, q: f"{r.randint(0, 23):02d}:{r.choice([0, 15, 30, 45]):02d} {r.choice(ZONES)}",
        own=(
            "The {S} runs at {V}.",
            "The {S} starts at {V} sharp.",
            "Heads up: the {S} now runs at {V}.",
        ),
    ),
    Family(
        "{q} config path",
        lambda r, q: f"/srv/{q}/{r.choice(WORDS)}-{r.randint(2, 99)}.yaml",
        own=("The {S} lives at {V}.",),
    ),
    Family(
        "command to deploy the {q} service",
        lambda r, q: f"make deploy-{q} TAG=v{r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 9)}",
        own=("To deploy the {q} service, run `{V}`.", "Use `{V}` to deploy the {q} service."),
        key="deploy {q} service",
    ),
    Family("{q} lead", lambda r, q: _name(r), own=("{V} is our new {S}.",)),
    Family("{q} budget", lambda r, q: f"${r.randint(2, 99)},{r.randint(100, 999)}"),
    Family(
        "{q} launch date",
        lambda r, q: r.choice(
            [
                f"{r.choice(MONTHS)} {r.randint(2, 28)}, 2027",
                f"2027-{r.randint(1, 12):02d}-{r.randint(10, 28)}",
            ]
        ),
    ),
    Family(
        "{q} on-call rotation",
        lambda r, q: ", ".join(_name(r) for _ in range(2)) + f" and {_name(r)}",
    ),
    Family("{q} staging host", lambda r, q: f"stg-{q}-{r.randint(10, 99)}.internal"),
    Family("{q} database port", lambda r, q: str(r.randint(5400, 6999))),
    Family(
        "{q} tracking ticket",
        lambda r, q: f"{r.choice(['OPS', 'ENG', 'SEC'])}-{r.randint(1000, 9999)}",
    ),
    Family(
        "{q} vendor",
        lambda r, q: f"{r.choice(WORDS).capitalize()} {r.choice(['Systems', 'Labs', 'Logistics'])}",
    ),
    Family(
        "{q} dashboard", lambda r, q: f"https://grafana.example.com/d/{q}-{r.randint(100, 999)}"
    ),
    Family(
        "{q} API version", lambda r, q: f"v{r.randint(1, 9)}.{r.randint(0, 30)}.{r.randint(0, 9)}"
    ),
    Family("{q} feature flag", lambda r, q: f"enable_{q}_{r.choice(WORDS)}_{r.randint(2, 9)}"),
    Family("{q} SLA", lambda r, q: f"99.{r.randint(10, 99)}%"),
    Family("{q} request timeout", lambda r, q: f"{r.randint(5, 120)} seconds"),
]

# One fact per sentence: {S} the subject, {V} the value.
SINGLE = [
    "For the record, the {S} is {V}.",
    "Note for later: the {S} is {V}.",
    "The {S} is {V}, just so you know.",
    "Heads up: the {S} will be {V}.",
    "Quick note, our {S} is {V}.",
    "I checked with the team and the {S} is {V}.",
    "{V} is the {S}.",
    "We settled on {V} as the {S}.",
    "Please set the {S} to {V}.",
    "It's official: the {S} is {V}.",
    "The {S} is set to {V} for now.",
    "Remember that the {S} is {V}, please.",
    "{Scap}: {V}",
    "The {S} is {V} (Jonas confirmed this morning).",
    "We're going with {V} for the {S}.",
    "Going forward, the {S} is {V}.",
    "The {S}? It's {V}.",
    "Can you keep in mind that the {S} is {V}?",
    "The {S} — {V}.",
]
# Two or three facts in one message.
DOUBLE = "So the {S} is {V} and the {S2} is {V2}."
LIST = "Handover notes:\n- {Scap}: {V}\n- {S2cap}: {V2}\n- {S3cap}: {V3}"
TABLE = (
    "Here is the table from the wiki:\n| item | value |\n|---|---|\n| {S} | {V} |\n| {S2} | {V2} |"
)
# A later value of a fact already said: {O} the old value.
UPDATES = [
    "Change of plan: the {S} is now {V}.",
    "Correction: the {S} is {V}, not {O}.",
    "Update: we moved the {S} to {V}.",
    "The {S} has changed from {O} to {V}.",
    "Scratch that, the {S} is {V}.",
    "{V} replaces {O} as the {S}.",
    "The new {S} is {V}.",
    "We've switched the {S} to {V}.",
]
# A real subject with a value it does not have: {X}.
DISTRACTORS = [
    "Is the {S} still {X}? Just double-checking.",
    "The {S} is not {X}, whatever the old wiki says.",
    "If the {S} were {X}, we would need a new plan.",
    "Jonas thinks the {S} should be {X}, but nothing is decided.",
    "Someone suggested {X} for the {S}; we said no.",
]
PROBES = [
    "Remind me: what is the {S}?",
    "What did we say the {S} was?",
    "Quick check, what's the {S} again?",
    "Do you still have the {S}? What is it?",
]
PATTERNS = len(SINGLE) + 3 + len(UPDATES) + sum(len(f.own) for f in FAMILIES)

_FILLER = frozenset("a an the of for to is are our we it its in on at by this that and or".split())  # noqa: SIM905


def words(text: str) -> set[str]:
    """Content words, lower case: what names a subject."""
    return {w for w in re.findall(r"[a-z0-9]+", text.casefold()) if w not in _FILLER}


@dataclass(frozen=True)
class Planted:
    subject: str  # as the conversation says it
    values: tuple[str, ...]  # the last one is current
    sentences: tuple[str, ...]  # where each value was said
    key: frozenset[str]  # the words a statement of this fact must name it by

    @property
    def answer(self) -> str:
        return self.values[-1]


@dataclass
class Script:
    """A whole conversation: user turns, facts, probes, and what was said falsely."""

    turns: list[str]
    facts: list[Planted]
    probes: list[str] = field(default_factory=list)
    distractions: dict[str, set[str]] = field(default_factory=dict)  # value -> subject words

    def truth(self, subject: str, value: str) -> bool:
        """Whether the conversation made the statement "`subject`: `value`": a fact's
        value, whole, said of that fact (its subject's words all named), or a statement
        about nothing planted that one sentence makes. Anything else is false: a value
        cut, given to another subject, or taken from a distractor."""
        said = words(subject)
        value = value.strip("`'\" ")
        low = value.casefold()
        for fact in self.facts:
            for v, sentence in zip(fact.values, fact.sentences, strict=True):
                if v.casefold() in low and low in sentence.casefold() and fact.key <= said:
                    return True
        planted = set().union(*(words(f.subject) | words(" ".join(f.values)) for f in self.facts))
        if words(value) & (planted | set().union(*map(words, self.distractions))) - set(AREAS):
            return False
        return any(low in turn.casefold() and said <= words(turn) for turn in self.turns)

    def said(self, statement: tuple[str, ...]) -> bool:
        """`truth` of a ("subject", "value") statement, `replaced` of a ("subject", "old",
        "new") note."""
        return self.truth(*statement) if len(statement) == 2 else self.replaced(*statement)

    def replaced(self, subject: str, old: str, new: str) -> bool:
        """Whether `new` did replace `old` as the value of `subject`."""
        said = words(subject)
        return any(
            fact.key <= said
            and old in fact.values
            and new in fact.values
            and fact.values.index(old) < fact.values.index(new)
            for fact in self.facts
        )


def generate(turns: int, seed: int, facts: int, updates: int, distractors: int) -> Script:
    """`facts` facts planted through the first 60% of the conversation (one, two or three
    to a message), `updates` of them given a later value, `distractors` false values
    said of planted subjects; chatter, log pastes and tool calls between; then one
    probe per fact."""
    rng = random.Random(seed)
    subjects = [
        (family, family.subject.format(q=q), q)
        for family in FAMILIES
        for q in (CITIES if family.qualifier == "city" else AREAS)
    ]
    rng.shuffle(subjects)
    if facts > len(subjects):
        raise ValueError(f"at most {len(subjects)} facts")
    used: set[str] = set()

    def value(family: Family, q: str) -> str:
        while (v := family.value(rng, q)) in used:
            pass
        used.add(v)
        return v

    chosen = subjects[:facts]
    values = {subject: value(family, q) for family, subject, q in chosen}
    sentences: dict[str, list[str]] = {subject: [] for _, subject, _ in chosen}
    script: list[str] = [""] * turns
    planting = list(range(2, int(turns * 0.6)))
    rng.shuffle(planting)
    queue = list(chosen)
    while queue:
        if not planting:
            raise ValueError("too many facts for the turns")
        at = planting.pop()
        many = min(len(queue), rng.choice([1, 1, 2, 2, 3]))
        group, queue = queue[:many], queue[many:]
        if many == 1:
            family, subject, q = group[0]
            own = [p.replace("{q}", q) for p in family.own]
            template = rng.choice(SINGLE + own)
            text = _fill(template, subject, values[subject])
            sentences[subject].append(text)
        else:
            template = rng.choice([DOUBLE, TABLE]) if many == 2 else LIST
            text = template
            for suffix, (_, subject, _) in zip(("", "2", "3"), group, strict=False):
                text = _fill(text, subject, values[subject], suffix)
            for _, subject, _ in group:
                sentences[subject].append(text)
        script[at] = text
    free = [t for t in range(int(turns * 0.6), turns) if not script[t]]
    rng.shuffle(free)
    history = {subject: [values[subject]] for _, subject, _ in chosen}
    for family, subject, q in rng.sample(chosen, updates):
        new = value(family, q)
        text = _fill(rng.choice(UPDATES), subject, new).replace("{O}", history[subject][-1])
        history[subject].append(new)
        sentences[subject].append(text)
        script[free.pop()] = text
    distractions: dict[str, set[str]] = {}
    for family, subject, q in rng.sample(chosen, distractors):
        false = value(family, q)
        distractions[false] = words(subject)
        script[free.pop()] = rng.choice(DISTRACTORS).replace("{S}", subject).replace("{X}", false)
    for turn in range(turns):
        if not script[turn]:
            script[turn] = _noise(turn, rng)
    planted = [
        Planted(
            subject,
            tuple(history[subject]),
            tuple(sentences[subject]),
            frozenset(words(family.key.format(q=q) if family.key else subject)),
        )
        for family, subject, q in chosen
    ]
    probes = [rng.choice(PROBES).replace("{S}", fact.subject) for fact in planted]
    return Script(script, planted, probes, distractions)


def _fill(template: str, subject: str, value: str, suffix: str = "") -> str:
    return (
        template.replace(f"{{S{suffix}cap}}", subject[:1].upper() + subject[1:])
        .replace(f"{{S{suffix}}}", subject)
        .replace(f"{{V{suffix}}}", value)
    )


def _noise(turn: int, rng: random.Random) -> str:
    """Chatter with literals that state nothing: counters, bare dates, ids, log lines."""
    area = rng.choice(AREAS)
    if turn % 10 == 5:
        return (
            f"Can you check an order for the {area} team? [look up ORD-{rng.randint(10000, 99999)}]"
        )
    if turn % 20 == 11:
        lines = [
            f"{area}-worker-{i} INFO request handled in {rng.randint(5, 900)} ms status=200"
            for i in range(40)
        ]
        return f"Here is the {area} log from this morning:\n" + "\n".join(lines)
    day = f"2027-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"
    return rng.choice(
        [
            f"Let's talk about the {area} roadmap: open questions and next steps (item {turn}).",
            f"Let's discuss the {area} retro on Thursday, after the {day} sync.",
            f"Ack {turn}. Moving on to {area}.",
            f"The {area} review went fine, nothing new to note.",
            f"Turn {turn}: still thinking about the {area} plan, no decisions yet.",
        ]
    )
