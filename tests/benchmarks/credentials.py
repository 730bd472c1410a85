"""Credentials said in ways the project had not written before, and ordinary facts said
the same ways: a seeded generator, and what the proxy does with each.

`python -m tests.benchmarks.credentials [--cases N] [--seed S]` prints the figures;
`tests/unit/test_credentials.py` gates them.

A credential case is one message: a phrasing (a statement, the value first, a command, a
table row, a config line, an env line, a hand-written sentence of another shape) × a
credential's name fit for its value (a PAT, an alarm code, a vault phrase, …) × a
secret of a shape (platform keys, JWTs, random strings, passwords, PINs, combinations,
phrases of common words, made-up words) × how it is written (quotes, backticks,
markdown, a trailing mark) × where it sits (a lead-in, a tail). Shapes a reader knows
without a name (keys, JWTs, random strings, mixed-case passwords) are also said with no
name at all. Each case goes through the functions the engine runs for a stored turn:
`facts_in` (what the ledger pins and memory learns), `pinned`, `remember` and
`memory_message` (the block another session gets), and `recalled_message` (another
session's verbatim recall). A leak is the secret (or a part of it that gives it away)
in any of their outputs.

The control set says ordinary values (ports, versions, hosts, dates, commit hashes,
ticket ids, paths, addresses, images, ids) with the same phrasings: each should be
remembered, and none withheld from another session's recall; the false-positive rate
is the share withheld.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from proxy.conversation.tokens import TokenCounter
from proxy.facts.ledger import facts_in, merge, pinned
from proxy.memory.facts import memory_message, recalled_message, remember

COUNTER = TokenCounter("chars", lambda text: len(text) // 4 + 1)
ROOM = 100_000  # tokens: nothing is left out for want of room

_WORDS = [
    *("amber", "orbit", "lantern", "velvet", "quarry", "tangerine", "harbor", "pepper"),
    *("walnut", "cobalt", "meadow", "falcon", "saddle", "ribbon", "glacier", "piano"),
    *("thistle", "canyon", "marble", "juniper", "lullaby", "ember"),
]


def _alnum(rng: random.Random, size: int, alphabet: str) -> str:
    return "".join(rng.choice(alphabet) for _ in range(size))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": rng.choice(["HS256", "RS256"]), "typ": "JWT"}).encode())
    claims = {"sub": str(rng.randint(10**5, 10**9)), "iat": rng.randint(16 * 10**8, 18 * 10**8)}
    payload = _b64url(json.dumps(claims).encode())
    return f"{header}.{payload}.{_b64url(rng.randbytes(32))}"


B62 = string.ascii_letters + string.digits
B36 = string.ascii_lowercase + string.digits

# Secret shapes: (family, make). A family says which names fit the value.
SHAPES: list[tuple[str, Callable[[random.Random], str]]] = [
    ("token", lambda r: "ghp_" + _alnum(r, 36, B62)),
    ("token", lambda r: "gho_" + _alnum(r, 36, B62)),
    ("token", lambda r: "github_pat_" + _alnum(r, 22, B62) + "_" + _alnum(r, 59, B62)),
    ("token", lambda r: f"xoxb-{r.randint(10**10, 10**11)}-{_alnum(r, 24, B62)}"),
    ("token", lambda r: "AKIA" + _alnum(r, 16, string.ascii_uppercase + string.digits)),
    ("token", lambda r: "AIza" + _alnum(r, 35, B62 + "_-")),
    ("token", lambda r: "sk_live_" + _alnum(r, 24, B62)),
    ("token", lambda r: "rk_live_" + _alnum(r, 24, B62)),
    ("token", lambda r: "sk-proj-" + _alnum(r, 40, B62 + "_-")),
    ("token", lambda r: "sk-ant-api03-" + _alnum(r, 48, B62 + "_-")),
    ("token", _jwt),
    ("token", lambda r: _alnum(r, r.randint(20, 44), B62)),
    ("token", lambda r: _alnum(r, r.randint(24, 40), B36)),
    ("token", lambda r: _alnum(r, r.choice([32, 48]), "0123456789abcdef")),
    ("token", lambda r: base64.b64encode(r.randbytes(r.choice([24, 30, 33]))).decode()),
    ("password", lambda r: f"{r.choice(_WORDS).title()}{r.randint(10, 9999)}{r.choice('!#$%&*')}"),
    ("password", lambda r: f"{_alnum(r, 3, B62)}{r.choice('#$%^&*')}{_alnum(r, 6, B62)}"),
    ("password", lambda r: f"{r.choice(_WORDS)}{r.choice(_WORDS).title()}{r.randint(1, 99)}"),
    ("password", lambda r: f"{r.choice(_WORDS)}-{r.randint(10, 99)}-{r.choice(_WORDS)}"),
    ("password", lambda r: r.choice(_WORDS) + r.choice(_WORDS)),
    ("code", lambda r: str(r.randint(1000, 99999999))),
    ("code", lambda r: "-".join(str(r.randint(1, 59)).zfill(2) for _ in range(3))),
    ("code", lambda r: f"{r.randint(1000, 9999)}#"),
    ("phrase", lambda r: " ".join(r.sample(_WORDS, r.randint(3, 6)))),
    ("phrase", lambda r: "-".join(r.sample(_WORDS, r.randint(3, 5)))),
    ("word", lambda r: r.choice(["zanzi", "quork", "flib", "marsu", "tiber"]) + r.choice(_WORDS)),
]
# Shapes a reader knows with no name said: keys, JWTs, random strings, mixed-case passwords.
NAMELESS = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 15, 16, 17}

NAMES = {
    "token": [
        "github pat",
        "GitHub PAT",
        "personal access token",
        "api key",
        "API key",
        "deploy key",
        "access token",
        "bearer token",
        "client secret",
        "webhook signing secret",
        "service account key",
        "JWT",
        "session token",
        "npm token",
        "slack bot token",
        "stripe secret key",
        "refresh token",
        "ssh key",
    ],
    "password": [
        "password",
        "admin password",
        "root password",
        "db passwd",
        "wifi password",
        "login",
        "creds",
        "sudo password",
        "passcode",
        "Password",
    ],
    "code": [
        "alarm code",
        "door code",
        "gate code",
        "garage code",
        "safe combination",
        "lock combination",
        "PIN",
        "bank pin",
        "2fa backup code",
        "one-time code",
        "keypad code",
        "lockbox code",
        "wifi code",
        "entry code",
    ],
    "phrase": [
        "wifi passphrase",
        "vault phrase",
        "seed phrase",
        "recovery phrase",
        "passphrase",
        "unlock phrase",
        "master passphrase",
        "wallet recovery phrase",
    ],
    "word": ["password", "code word", "safe word", "magic word", "passphrase"],
}
THINGS = [
    "",
    " for staging",
    " for the office",
    " for the Lisbon warehouse",
    " on the build box",
    " of the shared vault",
    " for prod",
    " at the cabin",
]
# Phrasings with a name: {n} the name (with its thing), {s} the secret as written.
NAMED = [
    "my {n} is {s}",
    "the {n} is {s}",
    "{n}: {s}",
    "{s} is the {n}",
    "use {s} as the {n}",
    "set the {n} to {s}",
    "I changed the {n} to {s}",
    "here's the {n} — {s}",
    "fyi {n} = {s}",
    "the {n} is now {s} (old one revoked)",
    "if anyone asks, the {n} is {s}",
    "note to self, {n} {s}",
    "| {n} | {s} |",
    "ok so the {n}? it's {s}",
    "the new {n} got rotated to {s}",
    "remember this {n} for later: {s}",
    "{n} -> {s}",
    "new {n}, effective today: {s}",
    "we went with {s} for the {n}",
    "The {n} reads {s}",
    "The {n}, in case you need it, is {s}",
]
# Hand-written, of other shapes: the name said apart from the value, or in another clause.
HANDWRITTEN = [
    "Door's {s}, don't share it",
    "Heads up: I put the {n} in the runbook — it's {s} until Friday",
    "When the panel beeps, punch in {s}; that's the {n}",
    "Alarm panel by the back door wants {s} before 9pm",
    "For the alarm. The code is {s}",
    "we're using {s} to unlock the vault now",
    "The word you need at the gate is {s}",
    "Tell the contractor the {n} ({s}) but not the master one",
    "Logged in as admin with {s}, worked first try",
    "Rotated it. Fresh {n} below\n{s}",
]
# Phrasings with no name: what a shape alone gives away.
UNNAMED = [
    "curl -H 'Authorization: Bearer {s}' https://api.example.com/v1/me",
    "git remote set-url origin https://ci-bot:{s}@git.example.com/acme/app.git",
    "export UPSTREAM_CREDENTIAL={s}",
    "paste {s} into the box and hit save",
    "here you go: {s}",
    "{s}",
    "try {s} and tell me if it works",
]
WRAPS = ["{}", "'{}'", '"{}"', "`{}`", "**{}**", "({})", "“{}”"]
ENDS = ["", ".", "!", "...", ";", " :)", ".\n"]
LEADS = ["", "btw ", "ok, ", "FYI — ", "quick one: ", "Hi! "]
TAILS = ["", " thanks", " (don't share)", ", rotate it monthly", " — keep it safe"]

# The control set: ordinary values, said the same ways.
CONTROL = [
    ("staging db port", lambda r: str(r.choice([5432, 6379, 8443, 9092, 27017, 3306]))),
    ("gateway version", lambda r: f"v{r.randint(1, 4)}.{r.randint(0, 30)}.{r.randint(0, 9)}"),
    ("postgres version", lambda r: f"{r.randint(12, 17)}.{r.randint(0, 9)}"),
    ("billing host", lambda r: f"billing-{r.randint(1, 9)}.eu-west-1.internal"),
    ("launch date", lambda r: f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"),
    ("demo day", lambda r: r.choice(["Thursday", "March 3rd", "next Tuesday at 14:00"])),
    ("hotfix commit", lambda r: _alnum(r, 40, "0123456789abcdef")),
    ("release commit", lambda r: _alnum(r, 7, "0123456789abcdef")),
    ("tracking ticket", lambda r: f"{r.choice(['PROJ', 'OPS', 'BILL'])}-{r.randint(10, 9999)}"),
    ("incident", lambda r: f"INC{r.randint(10**6, 10**7)}"),
    ("config path", lambda r: f"/etc/{r.choice(['nginx', 'app', 'pgbouncer'])}/main.conf"),
    ("dashboard", lambda r: f"https://grafana.example.com/d/{_alnum(r, 9, B36)}/latency"),
    ("on-call alias", lambda r: f"{r.choice(['ops', 'sre', 'payments'])}-oncall@example.com"),
    ("budget", lambda r: f"${r.randint(1, 90)},{r.randint(100, 999)}"),
    ("image", lambda r: f"registry.example.com/team/api:{r.randint(1, 3)}.{r.randint(0, 20)}.1"),
    ("digest", lambda r: "sha256:" + _alnum(r, 64, "0123456789abcdef")),
    ("tenant id", lambda r: "-".join(_alnum(r, n, "0123456789abcdef") for n in (8, 4, 4, 4, 12))),
    ("node pool size", lambda r: str(r.randint(3, 40))),
    ("timeout", lambda r: f"{r.randint(2, 90)}s"),
    ("vpn gateway ip", lambda r: f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"),
    ("model", lambda r: r.choice(["SmolLM2-135M-Instruct", "claude-3-5-sonnet-20241022"])),
    ("backup window", lambda r: f"{r.randint(0, 5):02d}:{r.choice(['00', '15', '30'])} UTC"),
    ("pod", lambda r: f"checkout-api-{_alnum(r, 10, 'bcdf2456789')}-{_alnum(r, 5, B36)}"),
    ("cron schedule", lambda r: f"{r.randint(0, 59)} {r.randint(0, 23)} * * 1-5"),
    ("release branch", lambda r: f"release/2025.{r.randint(1, 12)}-{r.choice(_WORDS)}"),
    ("build number", lambda r: str(r.randint(1000, 99999))),
    ("feature flag", lambda r: f"checkout_v{r.randint(2, 5)}_enabled"),
    ("trace id", lambda r: _alnum(r, 16, "0123456789abcdef")),
]
# The phrasings a control value is said with: the statements among the credential ones.
CONTROL_PHRASINGS = [p for p in NAMED if "{s} is the" not in p and "note to self" not in p]

# Written after the check was tuned on the cases above, and run once: how it does on
# sentences it was not fitted to. (message, its secret or ordinary value)
HELD_OUT = [
    ("Thx! fwiw the kiosk admin PIN got reset to 8831", "8831"),
    ("New hire checklist: laptop, badge, and the building entry code 5520#", "5520#"),
    ("psst — router admin is admin / Gecko!Stomp88", "Gecko!Stomp88"),
    ("the thing you type at the bank machine is 4021", "4021"),
    ("her Netflix login's mara.k@example.com with pw Sunflower1990", "Sunflower1990"),
    ("To get into the shed use 7-7-3-1 on the keypad", "7-7-3-1"),
    ("backup codes: 4821-9930, 1177-2045, 6612-8830", "4821-9930"),
    ("The gpg passphrase: 'I like turtles in autumn'", "I like turtles in autumn"),
    (
        "AWS creds for the sandbox → AKIAIOSFODNN7EXAMPLE /"
        " wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
    ),
    (
        "alerts go to https://hooks.slack.com/services/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",
        "Tq3ZbX9vLkR2mWn8YpD4sHc7",
    ),
    ("Grandma's tablet unlocks with 0412", "0412"),
    ("the mifare card's sector key is A0A1A2A3A4A5", "A0A1A2A3A4A5"),
    (
        "Jenkins → Manage → Credentials has ci-bot's: 11a5f3e0c9b74d2e8f61a3b7c9d0e2f4aa",
        "11a5f3e0c9b74d2e8f61a3b7c9d0e2f4aa",
    ),
    ("cat ~/.pgpass says db01:5432:*:app:Wint3r-is-c0ming", "Wint3r-is-c0ming"),
    ("the SIM unlock code (PUK) is 12345678", "12345678"),
    ("We share one Spotify account, pw is tacocat-forever", "tacocat-forever"),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB",
    ),
    ("Cookie: sessionid=8f2b1c9e7d6a5f4e3b2a1c0d9e8f7a6b", "8f2b1c9e7d6a5f4e3b2a1c0d9e8f7a6b"),
    ("if the bike lock asks, 4-1-9", "4-1-9"),
    (
        "my Apple ID is jo@example.com and the password is our first dog plus 77: Biscuit77",
        "Biscuit77",
    ),
    ("the TOTP seed is JBSWY3DPEHPK3PXP", "JBSWY3DPEHPK3PXP"),
    ("Remember: Open Sesame 42 gets you past the gate", "Open Sesame 42"),
    (
        "Vault root token hvs.CAESIJ1kZ2xVb1hRTm9qZk5oVnR5c0FqUkZ6QzNBRHcKLgoR",
        "hvs.CAESIJ1kZ2xVb1hR",
    ),
    ("the combo to Dad's gun safe is 31-7-22", "31-7-22"),
    ("hey it's me again, the answer to the security question is 'Peregrine'", "Peregrine"),
]
HELD_OUT_CONTROL = [
    ("The k8s API server is at https://10.0.0.1:6443", "https://10.0.0.1:6443"),
    ("Our SLO is 99.95% over 28 days.", "99.95%"),
    ("The Postgres primary moved to pg-2.prod.internal.", "pg-2.prod.internal"),
    ("Sprint 42 ends on Friday, May 9th.", "May 9th"),
    (
        "The flaky test is test_checkout_retries_3x in tests/test_cart.py.",
        "test_checkout_retries_3x",
    ),
    ("Rollback target: v3.14.2 (commit 5f2e9a1).", "v3.14.2"),
    ("The S3 bucket is acme-prod-assets-eu.", "acme-prod-assets-eu"),
    ("Max upload size is 25 MB.", "25 MB"),
    ("The CDN cache TTL is 3600s.", "3600s"),
    ("Incident INC-20931 was caused by a bad config push.", "INC-20931"),
    ("The Helm chart version is 4.2.0-rc.3.", "4.2.0-rc.3"),
    ("Node pool orion-np-2 has 9 nodes.", "9 nodes"),
    ("Use Python 3.11.7 for the build image.", "3.11.7"),
    ("The merge freeze starts 2025-12-19 at 17:00 CET.", "2025-12-19"),
    ("Our AWS account id is 123456789012.", "123456789012"),
    ("The release manager this cycle is Priya Raman.", "Priya Raman"),
    (
        "The Terraform state lives in s3://acme-tf-state/prod/terraform.tfstate.",
        "s3://acme-tf-state/prod/terraform.tfstate",
    ),
    ("The GPU nodes are g5.2xlarge in us-east-1.", "g5.2xlarge"),
    (
        "The base image digest is"
        " sha256:9b2a7c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9.",
        "sha256:9b2a7c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
    ),
    ("The OpenAPI spec is at docs/api/openapi.yaml.", "docs/api/openapi.yaml"),
    ("Kafka retention is 7 days on the events topic.", "7 days"),
    ("The on-call handoff is Mondays at 10:00.", "10:00"),
    ("The build number for the hotfix is 20241105.3.", "20241105.3"),
    ("Budget for Q3 is $48,000.", "$48,000"),
    ("The staging URL is https://staging.acme.dev.", "https://staging.acme.dev"),
    ("Redis maxmemory is 2gb with allkeys-lru.", "2gb"),
    ("The request id in the logs was req_8c1f2e7a9b.", "req_8c1f2e7a9b"),
    ("Feature flag new_checkout_flow is at 25%.", "25%"),
    ("The vendor contact is sam.ortiz@vendor.example.", "sam.ortiz@vendor.example"),
    (
        "The CI runner image is ghcr.io/acme/ci-runner:2024.11.2.",
        "ghcr.io/acme/ci-runner:2024.11.2",
    ),
    ("The cron for the nightly export is 0 3 * * *.", "0 3 * * *"),
    ("The login service owns /auth/login and /auth/logout.", "/auth/login"),
    ("The token bucket allows 500 requests per second.", "500 requests"),
    ("The primary key of the orders table is order_id.", "order_id"),
    ("The front door camera's IP is 192.168.1.44.", "192.168.1.44"),
]


@dataclass(frozen=True, slots=True)
class Case:
    text: str
    value: str  # the secret, or the control's value
    family: str
    phrasing: str


def credential_cases(count: int, seed: int = 51) -> list[Case]:
    """`count` credential messages, seeded."""
    rng = random.Random(seed)
    cases = []
    for n in range(count):
        index = rng.randrange(len(SHAPES))
        family, make = SHAPES[index]
        secret = make(rng)
        name = rng.choice(NAMES[family]) + rng.choice(THINGS)
        pick = n % 4
        if pick == 3 and index in NAMELESS:
            phrasing = rng.choice(UNNAMED)
        elif pick == 2:
            phrasing = rng.choice(HANDWRITTEN)
        else:
            phrasing = rng.choice(NAMED)
        if family == "word" and "{n}" in phrasing:
            secret_as = f"the word {rng.choice(WRAPS).format(secret)}"
        else:
            secret_as = rng.choice(WRAPS).format(secret) if " " not in secret else secret
        body = phrasing.format(n=name, s=secret_as)
        text = rng.choice(LEADS) + body + rng.choice(TAILS) + rng.choice(ENDS)
        cases.append(Case(text, secret, family, phrasing))
    return cases


def control_cases(count: int, seed: int = 51) -> list[Case]:
    """`count` ordinary statements, seeded, with the credentials' phrasings."""
    rng = random.Random(seed + 1)
    cases = []
    for _ in range(count):
        subject, make = rng.choice(CONTROL)
        value = make(rng)
        phrasing = rng.choice(CONTROL_PHRASINGS)
        body = phrasing.format(n=subject + rng.choice(["", " for staging", " for prod"]), s=value)
        text = rng.choice(LEADS) + body + rng.choice(["", ".", "!"])
        cases.append(Case(text, value, "control", phrasing))
    return cases


def giveaways(secret: str) -> list[str]:
    """What of `secret` gives it away: itself, without a password's trailing symbol, and
    for a phrase any two of its words in a row."""
    found = {secret, secret.rstrip("!#$%&*")}
    words = secret.replace("-", " ").split()
    found |= {" ".join(pair) for pair in itertools.pairwise(words)}
    return [part for part in found if len(part) >= 4]


@dataclass
class Outcome:
    pinned: list[Case]
    remembered: list[Case]
    recalled: list[Case]

    @property
    def leaks(self) -> list[Case]:
        return [*self.pinned, *self.remembered, *self.recalled]


def judge_credentials(cases: list[Case]) -> Outcome:
    """Where each case's secret went: pinned, in the memory block, in another session's
    recall block."""
    outcome = Outcome([], [], [])
    for case in cases:
        parts = giveaways(case.value)
        message = {"role": "user", "content": case.text}
        facts = facts_in(case.text, 1, 1.0)
        pins = pinned(merge([], facts), case.text, COUNTER.count_text, ROOM)("")
        if any(part in pin for pin in pins for part in parts):
            outcome.pinned.append(case)
        memory = remember([], [(fact, "user") for fact in facts], "s1")
        block = memory_message(memory, case.text, COUNTER, ROOM)
        if block is not None and any(part in str(block["content"]) for part in parts):
            outcome.remembered.append(case)
        recalled = recalled_message([(1, [message], None)], memory, COUNTER, ROOM)
        if recalled is not None and any(part in str(recalled["content"]) for part in parts):
            outcome.recalled.append(case)
    return outcome


def judge_control(cases: list[Case]) -> tuple[list[Case], list[Case]]:
    """The control cases withheld from another session's recall, and those whose value
    no remembered fact holds."""
    withheld, forgotten = [], []
    for case in cases:
        message = {"role": "user", "content": case.text}
        if recalled_message([(1, [message], None)], [], COUNTER, ROOM) is None:
            withheld.append(case)
        facts = facts_in(case.text, 1, 1.0)
        block = memory_message(remember([], [(f, "user") for f in facts], "s1"), "", COUNTER, ROOM)
        if block is None or case.value not in str(block["content"]):
            forgotten.append(case)
    return withheld, forgotten


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.credentials")
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=51)
    args = parser.parse_args(argv)
    cases = credential_cases(args.cases, args.seed)
    outcome = judge_credentials(cases)
    print(
        f"{len(cases)} credential messages ({len(NAMED)} + {len(HANDWRITTEN)} hand-written"
        f" + {len(UNNAMED)} nameless phrasings, {len(SHAPES)} secret shapes): leaked"
        f" {len(outcome.leaks)} (pinned {len(outcome.pinned)}, remembered"
        f" {len(outcome.remembered)}, recalled into another session {len(outcome.recalled)})"
    )
    for case in outcome.leaks[:10]:
        print(f"  leak: {case.text!r}")
    control = control_cases(args.cases, args.seed)
    withheld, forgotten = judge_control(control)
    print(
        f"{len(control)} ordinary statements: withheld from other sessions"
        f" {len(withheld)} ({len(withheld) / len(control):.1%}, the false-positive rate);"
        f" not remembered as a fact {len(forgotten)} ({len(forgotten) / len(control):.1%})"
    )
    for case in withheld[:10]:
        print(f"  withheld: {case.text!r}")
    held = [Case(text, value, "held out", "held out") for text, value in HELD_OUT]
    leaked = judge_credentials(held).leaks
    print(f"{len(held)} held-out credential messages: leaked {len({c.text for c in leaked})}")
    for text in sorted({case.text for case in leaked}):
        print(f"  leak: {text!r}")
    ordinary = [Case(text, value, "held out", "held out") for text, value in HELD_OUT_CONTROL]
    withheld, forgotten = judge_control(ordinary)
    print(
        f"{len(ordinary)} held-out ordinary statements: withheld {len(withheld)},"
        f" not remembered as a fact {len(forgotten)}"
    )
    for case in withheld:
        print(f"  withheld: {case.text!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
