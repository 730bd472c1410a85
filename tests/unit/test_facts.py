from __future__ import annotations

import pytest

from proxy.facts.literals import extract_facts, missing_facts, retention


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # numbers, amounts, quantities
        ("The total was $4,200 and 3.5 GB, answer 42.", ["$4,200", "3.5 GB", "42"]),
        (
            "Raise €3.5M, or USD 100, at 12.5kg and 99.9% over 10 minutes.",
            ["€3.5M", "USD 100", "12.5kg", "99.9%", "10 minutes"],
        ),
        # dates and times
        ("Due 2024-03-15 at 10:30, or 15/03/2024.", ["2024-03-15", "10:30", "15/03/2024"]),
        (
            "Met on March 15, 2024 and on 3 June 2023, at 3pm.",
            ["March 15, 2024", "3 June 2023", "3pm"],
        ),
        # paths, URLs, emails
        (
            r"Edit /etc/nginx/nginx.conf, src/app.py and C:\Users\bob\x.txt.",
            ["/etc/nginx/nginx.conf", "src/app.py", r"C:\Users\bob\x.txt"],
        ),
        (
            "See https://example.com/docs?a=1. Write to bob@acme.io or ~/notes.md.",
            ["https://example.com/docs?a=1", "bob@acme.io", "~/notes.md"],
        ),
        # identifiers
        (
            "Set user_id, MAX_RETRIES, getUserName and TokenCounter.",
            ["user_id", "MAX_RETRIES", "getUserName", "TokenCounter"],
        ),
        (
            "Pay INV-2024-001 with v1.2.3 at commit 3f2a9c1 on gpt-4o via os.path.join.",
            ["INV-2024-001", "v1.2.3", "3f2a9c1", "gpt-4o", "os.path.join"],
        ),
        # proper names
        (
            "Yesterday Maria Gonzalez met Dr. Smith at Bank of America in New York with AWS.",
            ["Maria Gonzalez", "Smith", "Bank of America", "New York", "AWS"],
        ),
        (
            "The Acme Corp contract was signed by O'Brien in Zürich.",
            ["Acme Corp", "O'Brien", "Zürich"],
        ),
    ],
)
def test_extract_facts_by_category(text: str, expected: list[str]) -> None:
    assert extract_facts(text) == expected


def test_plain_english_paragraph_has_no_facts() -> None:
    text = (
        "The meeting went well. We discussed the roadmap and agreed to revisit it next week. "
        "Everyone seemed happy with the progress, and there were no major concerns. However, "
        "it is not clear whether the team can finish on time, e.g. by the end of the month.\n"
        "1. Check the notes.\n2. Send them around and/or archive them.\n"
        "Thanks! I'll follow up. OK?"
    )
    assert extract_facts(text) == []


def test_single_digits_skipped_unless_they_carry_a_unit() -> None:
    assert extract_facts("Step 1: buy 3 GB for $5, then step 2.") == ["3 GB", "$5"]


def test_sentence_initial_word_is_not_a_name_but_later_mentions_are() -> None:
    assert extract_facts("Deploy it. Ask Maria, then Maria decides.") == ["Maria"]


def test_deduplicated_in_order_of_first_appearance() -> None:
    text = "Paid 4,200 to Paris; later 4200 again to paris and PARIS."
    assert extract_facts(text) == ["4,200", "Paris"]


def test_overlapping_matches_keep_the_longest() -> None:
    assert extract_facts("Read /srv/app/config.yaml now.") == ["/srv/app/config.yaml"]


def test_missing_facts_normalises_case_and_thousands() -> None:
    facts = ["$4,200", "Maria Gonzalez", "INV-2024-001", "10,000 users"]
    summary = "maria gonzalez paid $4200 for 10000   users."
    assert missing_facts(facts, summary) == ["INV-2024-001"]


@pytest.mark.parametrize(
    ("fact", "summary"),
    [("42", "costs 4200"), ("42", "version 1.42"), ("v1.2", "v1.2.3"), ("app.py", "myapp.py")],
)
def test_missing_facts_does_not_match_inside_other_tokens(fact: str, summary: str) -> None:
    assert missing_facts([fact], summary) == [fact]


def test_retention() -> None:
    assert retention([], "anything") == 1.0
    assert retention(["Paris", "42"], "Paris only") == 0.5
    assert retention(["Paris", "42"], "Paris, 42.") == 1.0


def test_overlong_matches_are_not_facts() -> None:
    assert extract_facts("token " + "a1" * 200 + " for Maria.") == ["Maria"]
