"""Credentials never leave their session (issue 51): known by shape and by what is said of
them, whatever the trailing mark; never a fact (so never pinned, noted or remembered),
never recalled into another session; ordinary values still are."""

from __future__ import annotations

import pytest

from proxy.facts.ledger import Fact, facts_in, pinned
from proxy.facts.secrets import holds_secret, said_as_secret, shaped
from proxy.facts.statements import corrections, statements
from proxy.memory.facts import Remembered, memory_message, recalled_message
from tests.benchmarks.credentials import (
    COUNTER,
    ROOM,
    control_cases,
    credential_cases,
    judge_control,
    judge_credentials,
)

# The issue's repros: each was pinned, remembered or recalled into another session.
REPROS = {
    "my github pat is ghp_abcdefghijklmnopqrstuvwxyz0123456789": "ghp_abcdefghijklmnopqrstuvwxyz",
    "the staging jwt is eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U": "dozjgNryP4J3jVmNHl0w5N",
    "The alarm code is 4417": "4417",
    "the safe combination is 12-34-56": "12-34-56",
    "the wifi passphrase is purple monkey dishwasher": "purple monkey dishwasher",
    "curl needs -H 'Authorization: Basic YWRtaW46aHVudGVyMg=='": "YWRtaW46aHVudGVyMg",
    "the vault phrase is tangerine orbit lullaby": "tangerine orbit lullaby",
    "the password is the word zanzibarquokka": "zanzibarquokka",
}


@pytest.mark.parametrize("said", sorted(REPROS))
@pytest.mark.parametrize("mark", ["", ".", "!", "...", "`", '"', "**"])
def test_a_credential_of_the_issue_is_never_a_fact_whatever_the_mark(said: str, mark: str) -> None:
    text = said + mark if mark in {"", ".", "!", "..."} else f"{mark}{said}{mark}."
    secret = REPROS[said]
    assert holds_secret(text)
    assert not any(secret in fact.text() for fact in facts_in(text, 1, 1.0))
    message = {"role": "user", "content": text}
    assert recalled_message([(1, [message], None)], [], COUNTER, ROOM) is None


def test_generated_credentials_never_leave_their_session() -> None:
    """3,000 messages of phrasings, names, secret shapes, wrappings and positions the
    project had not written before: none pinned, remembered or recalled elsewhere."""
    outcome = judge_credentials(credential_cases(3000))
    assert [case.text for case in outcome.leaks] == []


def test_ordinary_values_said_the_same_ways_are_still_shared() -> None:
    """The control set: no ordinary statement is withheld from another session, and the
    credential check takes none of the facts the ledger reads from it."""
    cases = control_cases(3000)
    withheld, _ = judge_control(cases)
    assert [case.text for case in withheld] == []
    for case in cases:
        read = len(list(statements(case.text))) + len(list(corrections(case.text)))
        assert len(facts_in(case.text, 1, 1.0)) == read, case.text


@pytest.mark.parametrize(
    "value",
    [
        "9fceb02d0ae598e95dc970b74767f19372d61af8",  # a git commit
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "3fa85f64-5717-4562-b3fc-2c963f66afa6",  # a UUID
        "4bf92f3577b34da6",  # a trace's span id
        "release2024hotfix-candidate",
        "SmolLM2-135M-Instruct",
        "claude-3-5-sonnet-20241022",
        "https://grafana.example.com/d/194a4rh6d/latency",
        "payments-api-7d9f8b6c4-xk2lp",
        "2.3.1+build.45",
        "PR#4521",
        "billing-6.eu-west-1.internal!",
        "8ffd31c!",
    ],
)
def test_identifiers_are_not_taken_for_secrets(value: str) -> None:
    assert not shaped(value)
    assert not holds_secret(f"The value is {value}")


@pytest.mark.parametrize(
    "value",
    [
        "4bf92f3577b34da6a3ce929d0e0e4736",  # 32 hex digits: not a digest's length
        "k3x9q0z2m8v7c1t5w4",  # random lower case and digits
        "Tq3ZbX9vLkR2mWn8YpD4sHc7",  # random mixed case
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",  # base64
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-123456789012-abcdefABCDEF123456",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "sk-ant-api03-abcdefghijklmnop",
        "-----BEGIN RSA PRIVATE KEY-----",
        "Bearer abc.def123",
        "https://deploy:hunter2@git.example.com/app.git",
        "Lumen2025!",
        "ebU*nOlIxE",
    ],
)
def test_a_secret_is_known_by_its_shape_alone(value: str) -> None:
    for said in (value, f"{value}.", f"`{value}`", f"'{value}'!", f"**{value}**,"):
        assert shaped(f"here you go: {said}"), said


@pytest.mark.parametrize(
    "text",
    [
        "pin numpy to 1.26.4",
        "Pat owns the billing service",
        "The login page is https://app.example.com/login",
        "Our token bucket refills at 500 rps",
        "The max output is 4096 tokens",
        "The key metric is p99 latency at 230ms",
        "The error code is E4012",
        "The front door camera's IP is 192.168.1.44",
        "It's safe to merge now.",
        "the safe deploy window is 14:00",
        "Vault is at https://vault.internal:8200",
        "we lock the table at 5pm",
    ],
)
def test_a_word_that_names_a_credential_elsewhere_is_no_cue_here(text: str) -> None:
    assert not holds_secret(text)


def test_a_value_said_beside_a_credential_is_not_kept_with_it() -> None:
    """A cue a sentence before reaches the value ("For the alarm. The code is …"); what
    another sentence of the message states is still a fact."""
    text = "For the alarm. The code is 4417. The travel budget is $5."
    assert said_as_secret("4417", text)
    assert [fact.value for fact in facts_in(text, 1, 1.0)] == ["$5"]
    text = "When the panel beeps, punch in 'harborpiano'; that's the root password"
    assert facts_in(text, 1, 1.0) == [] and said_as_secret("harborpiano", text)
    text = "Dad's gun safe is 31-7-22, and the back door wants 4417 before 9pm"
    assert said_as_secret("31-7-22", text) and said_as_secret("4417", text)


def test_a_reply_that_repeats_a_credential_is_not_recalled_elsewhere() -> None:
    said = {"role": "user", "content": "the wifi passphrase is purple monkey dishwasher"}
    echo = {"role": "assistant", "content": "Got it: purple monkey dishwasher."}
    assert recalled_message([(2, [echo], said)], [], COUNTER, ROOM) is None
    other = {"role": "user", "content": "The travel budget is $5."}
    block = recalled_message([(2, [echo], other)], [], COUNTER, ROOM)
    assert block is not None and "purple monkey dishwasher" in str(block["content"])


def test_a_credential_remembered_before_it_was_known_is_not_offered() -> None:
    """A memory written by an earlier release may hold one: it is never injected."""
    memory = [
        Remembered("ident", "github pat", "ghp_" + "a1" * 18, 0.6, "s1", 1.0),
        Remembered("text", "alarm code", "4417", 0.6, "s1", 1.0),
        Remembered("money", "travel budget", "$5", 0.6, "s1", 1.0),
    ]
    block = memory_message(memory, "what's new?", COUNTER, ROOM)
    assert block is not None
    assert "travel budget: $5" in str(block["content"])
    assert "ghp_" not in str(block["content"]) and "4417" not in str(block["content"])


def test_a_credential_in_a_ledger_stored_before_it_was_known_is_not_pinned() -> None:
    ledger = [
        Fact("ident", "github pat", "ghp_" + "a1" * 18, 3, 1.0),
        Fact("text", "safe combination", "12-34-56", 4, 1.0),
        Fact("money", "travel budget", "$5", 5, 1.0),
    ]
    assert pinned(ledger, "", COUNTER.count_text, ROOM)("") == ["travel budget: $5"]
