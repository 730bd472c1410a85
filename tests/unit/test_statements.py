"""What a sentence states, read by `proxy.facts.statements`: subjects kept qualified, values
kept whole, and nothing taken from what is not plainly asserted."""

from __future__ import annotations

import pytest

from proxy.facts.statements import statements


def read(text: str) -> list[tuple[str, str]]:
    return [(subject, value) for _, subject, value in statements(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Note for later: the invoice number for the Lisbon order is INV-88213.",
            [("invoice number for the Lisbon order", "INV-88213")],
        ),
        (
            "The release branch is release/2024.11-hotfix.",
            [("release branch", "release/2024.11-hotfix")],
        ),
        ("The job runs at 03:15 UTC.", [("job", "03:15 UTC")]),
        ("The project codename is BLUE HERON.", [("project codename", "BLUE HERON")]),
        (
            "The on-call rotation is Maria Chen, Jonas Okafor and Aiko Sato.",
            [("on-call rotation", "Maria Chen, Jonas Okafor and Aiko Sato")],
        ),
        (
            "To deploy the search service, run `make deploy-search TAG=v1.2.3`.",
            [("deploy the search service", "make deploy-search TAG=v1.2.3")],
        ),
        (
            "INV-12345 is the invoice number for the Riga order.",
            [("invoice number for the Riga order", "INV-12345")],
        ),
        ("Maria Chen is our new billing lead.", [("billing lead", "Maria Chen")]),
        (
            "We decided to open the second shop on Maple Street.",
            [("open the second shop", "Maple Street")],
        ),
        ("We settled on Cedar Labs as the billing vendor.", [("billing vendor", "Cedar Labs")]),
        ("Please set the request timeout to 45 seconds.", [("request timeout", "45 seconds")]),
        (
            "Correction: the vendor is Harbor Systems, not Juniper Systems.",
            [("vendor", "Harbor Systems")],
        ),
        (
            "The host has changed from stg-17.internal to stg-85.internal.",
            [("host", "stg-85.internal")],
        ),
        ("v9.1.2 replaces v8.24.3 as the API version.", [("API version", "v9.1.2")]),
        ("The SLA is 99.95% (Jonas confirmed this morning).", [("SLA", "99.95%")]),
        (
            "The codename for the support project? It's SILVER PLOVER.",
            [("codename for the support project", "SILVER PLOVER")],
        ),
        (
            "Can you keep in mind that the pricing budget is $39,760?",
            [("pricing budget", "$39,760")],
        ),
        (
            "So the SLA is 99.36% and the release branch for the app is release/2027.07-x.",
            [("SLA", "99.36%"), ("release branch for the app", "release/2027.07-x")],
        ),
        (
            "Handover notes:\n- Database port: 6130\n- Staging host: stg-4",
            [("Database port", "6130"), ("Staging host", "stg-4")],
        ),
        (
            "FYI: the Q3 marketing budget got bumped to $18,500.",
            [("Q3 marketing budget", "$18,500")],
        ),
        (
            "The new endpoint is https://api.example.com/v2/orders, the old one is deprecated.",
            [("endpoint", "https://api.example.com/v2/orders")],
        ),
        ("Deliveries leave at 05:45 every morning.", [("Deliveries", "05:45 every morning")]),
        ("The retro is at 4pm in Room 4B.", [("retro", "4pm in Room 4B")]),
        (
            "| item | value |\n|---|---|\n| catalog API version | v9.10.6 |",
            [("catalog API version", "v9.10.6")],
        ),
    ],
)
def test_a_statement_keeps_its_qualified_subject_and_its_whole_value(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert read(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Ack 26. Moving on.",
        "Noted (ack 26).",
        "Turn 186: still thinking about the identity plan, no decisions yet.",
        "Let's discuss the billing retro on Thursday, after the 2027-03-14 sync.",
        "Let's talk about the billing roadmap: open questions and next steps (item 94).",
        "Is the billing lead still Maria Chen? Just double-checking.",
        "The billing lead is not Maria Chen, whatever the old wiki says.",
        "If the billing budget were $5,000, we would need a new plan.",
        "Jonas thinks the delivery address should be 126 Ember Street, but nothing is decided.",
        "Someone suggested Cedar Labs for the billing vendor; we said no.",
        "We decided not to open the second shop on Maple Street.",
        "If we decided to open the second shop on Maple Street, who would run it?",
        "It is 8080.",
        "echo: [history-ab12 turn 5] The report lists revenue, costs and the hiring plan.",
        "The billing review went fine.",
        # Issue 40: a question, a hunch, a record about something else, a cut span.
        "why: docker eating 30 GB",
        "probably the TTL is 600s",
        "the TTL is probably 600s",
        "my guess: the limit is 50 req/s",
        "issuer=C = US, O = Let's Encrypt, CN = R3",
        'strategy: RollingUpdate"}',
        "the deploy command is `make deploy",
        'billing-worker-0 INFO request handled in 5 ms status=200\n{"order_id": "ORD-1"}: shipped',
    ],
)
def test_noise_questions_negations_and_hearsay_state_nothing(text: str) -> None:
    assert read(text) == []


def test_a_paste_on_one_line_is_not_read_as_statements() -> None:
    """A minified blob or a huge log line is skipped whole (and in linear time)."""
    blob = ", ".join(f"the key{i} is v{i}" for i in range(20_000))
    assert read(blob) == []
    assert read(blob + "\nThe billing lead is Maria Chen.") == [("billing lead", "Maria Chen")]


def test_a_plain_statement_before_another_form_is_kept() -> None:
    assert read("So the SLA is 99.36% and we moved the host to stg-85.internal.") == [
        ("SLA", "99.36%"),
        ("host", "stg-85.internal"),
    ]


def test_it_names_the_subject_before_it_only_for_a_value_of_the_same_kind() -> None:
    assert read("The cache TTL was 300s; now it's 600s.") == [
        ("cache TTL", "300s"),
        ("cache TTL", "600s"),
    ]
    assert read("The invoice is INV-1. It is due on May 3.") == [("invoice", "INV-1")]
    assert read("Maria's flight lands at 07:20 CET.") == []  # not "Maria is …"


def test_a_table_row_says_its_columns_of_what_its_first_cell_names() -> None:
    """Issue 40: "| geo lookup | 5604 |" under "| service | port |" is the geo lookup's
    port, not a "geo lookup" that is 5604."""
    table = (
        "| service | owner | port |\n|---|---|---|\n"
        "| geo lookup | Dmitri Volkov | 5604 |\n| mail relay | Ana Ruiz | 9453 |"
    )
    assert read(table) == [
        ("geo lookup owner", "Dmitri Volkov"),
        ("geo lookup port", "5604"),
        ("mail relay owner", "Ana Ruiz"),
        ("mail relay port", "9453"),
    ]


def test_code_and_config_blocks_state_nothing_of_their_own() -> None:
    """A key in a YAML or .env block belongs to what the block configures, which the key
    does not name (`memory: 1Gi` of which service?): the block stays in its message."""
    text = "Deploy file:\n```yaml\nlimits:\n  memory: 1Gi\nreplicas: 3\n```\nThe owner is Ana Ruiz."
    assert read(text) == [("owner", "Ana Ruiz")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "The push notifier memory limit is 512Mi... wait no, 3Gi. misread the dashboard",
            [("push notifier memory limit", "512Mi"), ("push notifier memory limit", "3Gi")],
        ),
        ("fyi the push notifier queue: Kafka", [("push notifier queue", "Kafka")]),
        (
            "the session broker cache expiry is 450s right",
            [("session broker cache expiry", "450s")],
        ),
        ("audit trail concurrency: 51 btw", [("audit trail concurrency", "51")]),
        # A subject is one noun phrase: not two clauses.
        (
            "Nadia is the new chat bridge owner, Ingrid moved teams",
            [("chat bridge owner", "Nadia")],
        ),
    ],
)
def test_what_is_said_around_a_statement_stays_out_of_it(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert read(text) == expected


def test_a_hunch_states_nothing_and_a_table_keeps_the_names_in_its_cells() -> None:
    assert list(statements("pretty sure the push notifier worker count is 37")) == []
    assert list(statements("the mail relay port is 2525 iirc")) == []
    table = "| flag | rollout |\n|---|---|\n| new checkout | 5% |"
    assert list(statements(table)) == [("quantity", "new checkout rollout", "5%")]
