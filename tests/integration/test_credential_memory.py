"""A credential never leaves its session (issue 51), end to end: session s1 of a memory
says the issue's credentials among ordinary facts and talks long enough to be
summarized; new sessions of the same memory ask about something else, then about each
credential, and the upstream receives no trace of one, under every memory setting,
while the ordinary facts still reach them. s1's own pins hold none either."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import orjson
import pytest

from proxy.memory.facts import MEMORY_PREFIX, MEMORY_RECALL_PREFIX
from proxy.summary.message import PINNED_LABEL
from tests.integration.test_recall_memory import client, model_calls, start
from tests.proxies import MODEL
from tests.upstream import FakeUpstream

KEY = "tenant-a-key-0123456789"
COMMIT = "9fceb02d0ae598e95dc970b74767f19372d61af8"
# (what s1 says, the secret in it, what a new session asks about it)
CREDENTIALS = [
    (
        "my github pat is ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "what is my github pat?",
    ),
    (
        "the staging jwt is eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
        ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
        ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "what was the staging jwt?",
    ),
    ("The alarm code is 4417.", "4417", "what's the alarm code?"),
    ("the safe combination is 12-34-56.", "12-34-56", "what's the safe combination?"),
    (
        "the wifi passphrase is purple monkey dishwasher",
        "purple monkey dishwasher",
        "what was the wifi passphrase?",
    ),
    (
        "curl needs -H 'Authorization: Basic YWRtaW46aHVudGVyMg=='",
        "YWRtaW46aHVudGVyMg==",
        "what header does curl need for the Authorization?",
    ),
    (
        "the vault phrase is tangerine orbit lullaby.",
        "tangerine orbit lullaby",
        "what's the vault phrase?",
    ),
    ("the password is the word zanzibarquokka.", "zanzibarquokka", "what was the password?"),
]
ORDINARY = [
    "The staging db port is 5432.",
    f"The release commit is {COMMIT}.",
    "Nobody wrote it down, but Jonas says the harbor codename is BLUE HERON.",
]
SETTINGS = {
    "defaults": ({"enabled": True}, {}),
    "per tenant, generous": (
        {"enabled": True, "per_tenant": True, "max_injection_tokens": 1500},
        {"recall_ratio": 0.5, "recall_max_tokens": 8192},
    ),
    "facts only": (
        {"enabled": True, "recall": False, "similarity_weight": 0, "confidence_weight": 1},
        {},
    ),
    "verbatim units only": ({"enabled": True, "max_injection_tokens": 0}, {"recall_ratio": 0.5}),
}


def traces(secret: str) -> list[str]:
    """What of `secret` gives it away: itself, its ends, two of its words in a row."""
    found = {secret}
    if len(secret) >= 16:
        found |= {secret[:12], secret[-12:]}
    words = secret.split()
    found |= {" ".join(pair) for pair in itertools.pairwise(words)}
    return sorted(found)


def leaked(body: Any) -> list[str]:
    text = orjson.dumps(body).decode()
    return [t for _, secret, _ in CREDENTIALS for t in traces(secret) if t in text]


def block(body: dict[str, Any], prefix: str) -> str:
    found = [str(m["content"]) for m in body["messages"] if str(m["content"]).startswith(prefix)]
    return found[0] if found else ""


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_a_credential_never_reaches_another_session_nor_a_pin(
    upstream: FakeUpstream, start_proxy, setting: str
) -> None:
    memory, context = SETTINGS[setting]
    auth = {"keys": [{"key": KEY}]}
    url = start(start_proxy, upstream, memory=memory, context=context, auth=auth)
    shared = {} if memory.get("per_tenant") else {"X-Memory-Id": "household"}
    memory_id = "tenant" if memory.get("per_tenant") else "household"  # a tenant's own
    said = [*ORDINARY[:2], *(statement for statement, _, _ in CREDENTIALS), ORDINARY[2]]
    # Long enough to be folded: the gist summarizer keeps no value, so the ledger pins.
    filler = "we walked through the rollout plan and agreed on the next steps " * 14
    said += [f"Notes on the rollout, part {n}: {filler}" for n in range(30)]
    first = client(url, "s1", **shared)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for text in said:
        history.append({"role": "user", "content": text})
        reply = first.chat.completions.create(model=MODEL, messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})

    summary = str(model_calls(upstream)[-1]["messages"][1]["content"])
    assert summary.startswith("Summary of the earlier conversation") and PINNED_LABEL in summary
    pins = summary.split(PINNED_LABEL, 1)[1]
    assert COMMIT in pins  # an ordinary value is pinned: a commit is no secret
    assert leaked(pins) == []

    asked = len(model_calls(upstream))
    for n, (_, _, question) in enumerate(CREDENTIALS):
        other = client(url, f"s2-{n}", **shared)
        talk: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
        for text in ["hello, what's new today?", question]:
            talk.append({"role": "user", "content": text})
            reply = other.chat.completions.create(model=MODEL, messages=talk)
            talk.append({"role": "assistant", "content": reply.choices[0].message.content})
    last = client(url, "s2-codename", **shared)
    last.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What was the harbor codename?"}]
    )
    bodies = model_calls(upstream)[asked:]
    assert len(bodies) == 2 * len(CREDENTIALS) + 1
    for body in bodies:
        assert leaked(body) == [], body["messages"]

    # What is not a secret still crosses: the facts, and a statement no fact was read from.
    if memory.get("max_injection_tokens", None) != 0:
        assert "staging db port: 5432" in block(bodies[0], MEMORY_PREFIX)
    if memory.get("recall", True):
        assert "BLUE HERON" in block(bodies[-1], MEMORY_RECALL_PREFIX)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        record = http.get(f"/v1/memories/{memory_id}").json()
    assert any(fact["value"] == COMMIT for fact in record["facts"])
    assert leaked(record) == []
