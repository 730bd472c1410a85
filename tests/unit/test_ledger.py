from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.facts.ledger import MAX_FACTS, Fact, facts_in, merge, names, pinned, ranked, stated_text


def said(*texts: str) -> list[Fact]:
    ledger: list[Fact] = []
    for source, text in enumerate(texts):
        ledger = merge(ledger, facts_in(text, source, float(source)))
    return ledger


def test_a_fact_gets_the_subject_its_clause_names() -> None:
    (fact,) = facts_in("Noted. The travel budget is $4,250 for now.", 7, 1.0)
    assert (fact.kind, fact.subject, fact.value, fact.source) == (
        "money",
        "travel budget",
        "$4,250",
        7,
    )


def test_a_later_value_supersedes_an_earlier_one_of_the_same_subject() -> None:
    ledger = said("The travel budget is $4,250.", "Update: the travel budget is now $3,796.")
    current = [f for f in ledger if f.current]
    assert [f.value for f in current] == ["$3,796"]
    (old,) = [f for f in ledger if not f.current]
    assert (old.value, old.superseded_by) == ("$4,250", "$3,796")


def test_other_subjects_and_kinds_do_not_supersede() -> None:
    ledger = said(
        "The staging server path is /srv/staging.",
        "The production server path is /srv/prod.",
        "The travel budget deadline is 2026-03-01.",
        "The travel budget is $10.",
    )
    assert all(fact.current for fact in ledger)
    assert len(ledger) == 4


def test_only_the_same_qualified_subject_supersedes() -> None:
    """Ten orders' invoice numbers are ten facts; the Lisbon one, said again another
    way, replaces only its own."""
    cities = ["Lisbon", "Riga", "Oslo", "Porto", "Vienna", "Dublin", "Krakow", "Ghent"]
    ledger = said(
        *(
            f"Note for later: the invoice number for the {city} order is INV-8821{i}."
            for i, city in enumerate(cities)
        ),
        "The Lisbon order's invoice number has changed from INV-88210 to INV-99999.",
    )
    current = {f.key: f.value for f in ledger if f.current}
    assert len(current) == len(cities)
    assert current["invoice lisbon number order"] == "INV-99999"
    assert current["invoice number order riga"] == "INV-88211"
    (old,) = [f for f in ledger if not f.current]
    assert (old.subject, old.value) == ("invoice number for the Lisbon order", "INV-88210")


def test_the_same_value_again_is_one_fact_mentioned_twice() -> None:
    ledger = said("The lead is Maria Chen.", "Again: the lead is Maria Chen.")
    assert [(f.value, f.mentions, f.source) for f in ledger] == [("Maria Chen", 2, 1)]


def test_pinned_keeps_updated_values_and_what_the_summary_lacks() -> None:
    ledger = said(
        "The travel budget is $4,250.",
        "The repo path is /srv/app.",
        "The travel budget is now $3,796.",
    )
    pin = pinned(ledger, "what about the travel budget", lambda t: len(t.split()), 100)
    # The summary has both values of the budget and the path: the budget is pinned
    # anyway (it changed), the path is not (the summary has it).
    assert pin("budget $4,250 then $3,796; repo at /srv/app") == ["travel budget: $3,796"]
    assert pin("nothing") == ["travel budget: $3,796", "repo path: /srv/app"]
    assert pin("x") != []
    assert pinned(ledger, "", lambda t: len(t.split()), 2)("nothing") == []


def test_ranking_puts_what_the_query_names_first() -> None:
    ledger = said("The repo path is /srv/app.", "The lead is Maria Chen.", "Budget: $5.")
    assert len(ledger) == 3
    assert ranked(ledger, "who is the lead?")[0].value == "Maria Chen"


@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=MAX_FACTS + 50))
def test_one_current_value_per_subject_and_the_ledger_stays_bounded(subjects: list[str]) -> None:
    facts = [Fact("money", s, f"${i}", i, float(i)) for i, s in enumerate(subjects)]
    ledger = merge([], facts)
    current = [f for f in ledger if f.current]
    assert len({f.key for f in current}) == len(current)
    assert {f.subject: f.value for f in current} == {s: f"${i}" for i, s in enumerate(subjects)}
    assert len(ledger) <= MAX_FACTS


def test_credentials_are_never_facts() -> None:
    said = (
        "The deploy token is ghp_live_4f9a8b7c6d. My key: sk-proj-abcdef123456."
        " The deploy password is ZEBRA-4471. The budget is $5."
    )
    assert [fact.value for fact in facts_in(said, 0, 0.0)] == ["$5"]


def test_a_full_ledger_drops_ids_without_a_subject_before_named_facts() -> None:
    named = said("The travel budget is $4,250.")
    ids = [Fact("ident", "", f"worker-{i}", i + 1, 1.0) for i in range(MAX_FACTS + 20)]
    ledger = merge(named, ids)
    assert len(ledger) == MAX_FACTS
    assert ledger[0].value == "$4,250"
    assert ledger[-1].value == f"worker-{MAX_FACTS + 19}"


def current(ledger: list[Fact]) -> dict[str, str]:
    return {fact.subject: fact.value for fact in ledger if fact.current}


@pytest.mark.parametrize(
    ("first", "update", "expected"),
    [
        (
            "worker concurrency: 8 per node",
            "raised worker concurrency to 12, queue was backing up",
            {"worker concurrency": "12"},
        ),
        (
            "The staging db is db-stg-01.internal.",
            "heads up, the staging db moved to `db-stg-03.internal`",
            {"staging db": "db-stg-03.internal"},
        ),
        ("The demo is on Tuesday.", "demo got pushed to Thursday", {"demo": "Thursday"}),
        ("The node pool is 6.", "bumped the node pool to 9", {"node pool": "9"}),
        ("On-call: Sam Ortiz", "Priya Nair took over on-call from Sam", {"on-call": "Priya Nair"}),
        ("The queue is RabbitMQ.", "we switched the queue to SQS", {"queue": "SQS"}),
        # An alias: the same subject named with fewer (or more) of its words.
        (
            "cluster: kube version 1.27",
            "kube version is now 1.29",
            {"cluster kube version": "1.29"},
        ),
        # A correction, later, by the value it corrects.
        (
            "The auth port is 8443.",
            "oops I said 8443 for auth earlier, it's 9443",
            {"auth port": "9443"},
        ),
        # Synonyms: a broker is the queue, an expiry the TTL, a min version the cutoff.
        (
            "queue for pdf renderer is RabbitMQ btw",
            "we switched the pdf renderer broker to Pub/Sub",
            {"pdf renderer broker": "Pub/Sub"},
        ),
        (
            "ok so the ledger sync cache expiry is 600s, noting it here",
            "cut the ledger sync cache TTL to 300s, stale prices were showing",
            {"ledger sync cache TTL": "300s"},
        ),
        (
            "the release cutoff for media transcoder is 5.8.5",
            "new media transcoder min version: 21.9.6",
            {"release cutoff for media transcoder": "21.9.6"},
        ),
        (
            "handed platform on-call over to Fatima, thanks Sam!",
            "handed platform on-call over to Nadia, thanks Fatima!",
            {"platform on-call": "Nadia"},
        ),
        (
            "the cygnus node pool is 22",
            "scaled the cygnus node pool down to 15, nobody was using it",
            {"cygnus node pool": "15"},
        ),
        (
            "fyi the media transcoder memory limit is 384Mi",
            "ignore what I said about the media transcoder memory limit, the right value is 256Mi",
            {"media transcoder memory limit": "256Mi"},
        ),
        (
            "push notifier repo = legacy/mono/push-notifier",
            "moved the push notifier source to `libs/internal/push` as part of the cleanup",
            {"push notifier source": "libs/internal/push"},
        ),
        (
            "",
            "setting the tile server region to us-east-1 — sorry, typo, eu-central-1",
            {"tile server region": "eu-central-1"},
        ),
        (
            "Search indexer port → 6961",
            "correction on the search indexer port: not 6961, it's 3286",
            {"Search indexer port": "3286"},
        ),
        (
            "rolled the mail relay image forward to reg/mail-relay:4.1.0",
            "pinned the mail relay image to reg/mail-relay:2.23.0 after the rollback",
            {"mail relay image": "reg/mail-relay:2.23.0"},
        ),
        # A correction in the same breath.
        ("", "the cutoff is 20.11.0, scratch that, it's 20.11.1", {"cutoff": "20.11.1"}),
        # ... of another kind of value than the one taken back.
        (
            "",
            "report exporter queue is RabbitMQ... wait no, Pub/Sub. misread the dashboard",
            {"report exporter queue": "Pub/Sub"},
        ),
        (
            "",
            "setting the quota keeper code to apps/quota-keeper — sorry, typo, services/core/qk",
            {"quota keeper code": "services/core/qk"},
        ),
        (
            "the qa db got migrated to db-qa-21.internal last night",
            "failed the qa db over to `db-qa-25.internal`, old primary is toast",
            {"qa db": "db-qa-25.internal"},
        ),
        # A subject with a "to" of its own.
        (
            "So the command to deploy the inventory service is make deploy-inventory TAG=v6.5.3",
            "Update: we moved the command to deploy the inventory service to make deploy TAG=v8",
            {"command to deploy the inventory service": "make deploy TAG=v8"},
        ),
        # A plural, a pool, a cluster's version, a verb of ramps.
        ("ok so the vega nodes is 8, noting it here", "bumped the vega node pool to 18", None),
        ("the hydra cluster version is 1.26.5", "upgraded the hydra k8s version to 1.28.4", None),
        ("the smart retries rollout is 20%", "ramped the smart retries rollout to 50%", None),
        # "session broker" names a service: its concurrency is not its queue.
        (
            "the session broker queue is Kafka. the worker concurrency on session broker is 64",
            "dropped the session broker concurrency to 61, it was hammering the db",
            {"session broker queue": "Kafka", "worker concurrency on session broker": "61"},
        ),
    ],
)
def test_an_update_said_the_way_people_say_it_supersedes_the_value(
    first: str, update: str, expected: dict[str, str] | None
) -> None:
    """Issue 40: one current value per subject, whichever verb or name the update uses;
    the earlier value kept only as history."""
    ledger = said(first, update)
    if expected is None:  # one subject: the update's value is its only current one
        [(subject, value)] = current(ledger).items()
        expected = {subject: value}
        assert value in update
    assert current(ledger) == expected
    assert all(fact.superseded_by in expected.values() for fact in ledger if not fact.current)


def test_an_owner_is_not_replaced_by_a_queue_of_the_same_service() -> None:
    ledger = said("the session broker owner is Dmitri", "the session broker queue is Kinesis")
    assert current(ledger) == {"session broker owner": "Dmitri", "session broker queue": "Kinesis"}


def test_a_correction_of_a_value_nobody_had_and_an_ambiguous_alias_change_nothing() -> None:
    assert current(said("The auth port is 8443.", "I said 7000 earlier, it's 9443")) == {
        "auth port": "8443"
    }
    ledger = said(
        "The staging host port is 8080.", "The prod host port is 9090.", "host port: 7070"
    )
    assert current(ledger) == {
        "staging host port": "8080",
        "prod host port": "9090",
        "host port": "7070",
    }


@pytest.mark.parametrize(
    "text",
    [
        "guest wifi login is acme-guest / Lumen2025!",
        "wifi: acme-guest / Lumen2025!",
        "the api creds: svc-deploy:Xk9#pq2!",
        "DATABASE_URL=postgres://app:S3cr3t!@db-1:5432/app",
        "The shared account for the vendor portal is ops@acme.io / Tr0ub4dor",
        "The alarm pin is 4471.",
    ],
)
def test_a_credential_is_known_by_its_shape_as_well_as_by_its_subject(text: str) -> None:
    """Issue 40: a password without the word "password" is never a fact (so never pinned,
    noted or shared through memory), and never cut to a wrong one ("Lumen2025")."""
    assert facts_in(text, 0, 0.0) == []


def test_ordinary_values_are_not_taken_for_credentials() -> None:
    ledger = said(
        "The release branch is release/2024.11-hotfix.",
        "To deploy, run `make deploy-search TAG=v2.4.1`.",
        "The invoice number is INV-88213.",
        "The model is SmolLM2-135M-Instruct.",
    )
    assert len(current(ledger)) == 4


def test_a_tool_output_states_no_fact_of_the_conversation() -> None:
    """`Image:` in one `kubectl describe` and another are two services' images, neither
    named: a tool's fields are found by recall in their message, never pinned or noted
    as replacing each other."""
    outputs = [
        {"role": "tool", "tool_call_id": "1", "content": "Name: report-exporter\nImage: reg/a:1.0"},
        {"role": "tool", "tool_call_id": "2", "content": "Name: status-poller\nImage: reg/b:2.0"},
    ]
    assert [facts_in(stated_text(message), 0, 0.0) for message in outputs] == [[], []]
    said = {"role": "user", "content": "The status poller image is reg/b:2.0."}
    assert [f.value for f in facts_in(stated_text(said), 0, 0.0)] == ["reg/b:2.0"]


def test_a_correction_that_says_what_it_is_not() -> None:
    ledger = said(
        "The billing code lives in libs/internal/billing.",
        "correction on the billing code: not libs/internal/billing, it's services/core/billing",
    )
    assert current(ledger) == {"billing code": "services/core/billing"}


def test_a_subject_is_named_by_any_of_its_synonyms() -> None:
    (fact,) = said("pinning this: push notifier repo = legacy/mono/push-notifier")
    assert names(fact, "moved the push notifier source to libs/internal/push-notifier")
    assert not names(fact, "moved the push notifier queue to sqs")


def test_an_alias_spares_a_word_only_of_a_longer_subject() -> None:
    """The window is searched for later values by subjects named with a word fewer; a
    one- or two-word subject is never named by a message that lacks one of its words (or
    every message would be read for facts on every recall)."""
    (short,) = said("The demo is on Tuesday.")
    assert not names(short, "lunch is at noon", spare=1)
    (long,) = said("The release cutoff for the media transcoder is 5.8.5.")
    assert names(long, "the media transcoder min version is now 21.9.6", spare=1)
    assert not names(long, "the media team is at lunch", spare=1)


def test_what_the_model_says_never_replaces_what_the_user_said() -> None:
    """Issue 52: a model's slip ("The deliveries count is 0") does not become the current
    value of what the user stated; the user's own update still does."""
    user = facts_in("The deliveries count is 12.", 0, 0)
    slip = facts_in("The deliveries count is 0.", 1, 1)
    assert user and slip
    ledger = merge([], [*user, *slip], slip)
    assert [f.value for f in ledger if f.current] == ["12"]
    update = facts_in("The deliveries count is 14 now.", 2, 2)
    ledger = merge(ledger, update)
    assert [f.value for f in ledger if f.current] == ["14"]
    assert [f.value for f in merge([], [*slip])] == ["0"]  # alone, it is what is known
