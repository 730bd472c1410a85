"""Facts that fail safe (issue 52), end to end: the openai SDK, the real proxy, a
recording upstream on loopback whose summarizer keeps the gist and never a value. A
subject the user names again beside a value the ledger cannot read as its update is not
pinned after the summary, and a question about it gets both turns back, in order."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.summary.message import PINNED_LABEL
from tests.benchmarks.scorecard import drive
from tests.benchmarks.statements import Script
from tests.integration.test_recall_memory import client, model_calls, recall_block, start
from tests.proxies import MODEL
from tests.upstream import FakeUpstream

STATED = "Quick one for the notes: the customer demo is on March 14."
UPDATE = "Re the customer demo: scratch that date, it got pushed. We're now looking at March 21."
ASKED = "When is the customer demo again?"
CREDENTIAL = "For the demo laptop, the login is demo-admin / Harbor7Lumen!"


def chatter(count: int) -> list[str]:
    """Turns that state nothing and name no subject of the test."""
    topics = ["onboarding flow", "billing emails", "search ranking", "mobile crashes"]
    return [
        f"Let's go over the {topics[n % len(topics)]} notes from the sync, part {n}, nothing"
        " decided yet, just thinking out loud about what we heard from the team."
        for n in range(count)
    ]


def pinned(body: dict[str, Any]) -> str:
    summary = str(body["messages"][1]["content"])
    return summary.split(PINNED_LABEL, 1)[1] if PINNED_LABEL in summary else ""


def test_a_value_named_again_but_not_read_is_unpinned_and_recall_shows_both_turns(
    upstream: FakeUpstream, start_proxy
) -> None:
    url = start(start_proxy, upstream)
    # Without the update the ledger reads the demo date and pins it after the summary.
    steady = Script(turns=[STATED, *chatter(150)], facts=[], probes=[ASKED])
    (at,) = drive(client(url, "steady"), MODEL, steady)
    assert "customer demo: March 14" in pinned(model_calls(upstream)[at])

    upstream.requests.clear()
    turns = [STATED, *chatter(20), UPDATE, CREDENTIAL, *chatter(150)]
    (at,) = drive(client(url, "changed"), MODEL, Script(turns=turns, facts=[], probes=[ASKED]))
    bodies = model_calls(upstream)
    body = bodies[at]
    assert body["messages"][1]["content"].startswith("Summary of the earlier conversation")
    # Both the statement and its update were folded into the summary, and no pin claims
    # the old date (nor the new one: no value was read from the update).
    window = [m["content"] for m in body["messages"] if m["role"] != "system"]
    assert STATED not in window and UPDATE not in window
    assert "March 14" not in pinned(body)
    for earlier in bodies[: at + 1]:  # never, on any request after the update
        if UPDATE not in str(earlier["messages"]) or "Summary" not in str(earlier["messages"][1]):
            continue
        assert "customer demo: March 14" not in pinned(earlier)
    # Recall brings both turns back, in the order they were said, for the model to read.
    block = recall_block(body)
    assert block is not None
    assert STATED in block and UPDATE in block
    assert block.index(STATED) < block.index(UPDATE)
    # The credential said beside it is never pinned.
    assert "Harbor7Lumen" not in pinned(body)


def test_memory_does_not_offer_a_value_a_later_session_named_again(
    upstream: FakeUpstream, start_proxy
) -> None:
    """Across sessions: one session states the date, another names it again beside a value
    not read as its update; a third session is not offered the old date as remembered,
    and the session viewer's memory shows it marked, not current."""
    url = start(start_proxy, upstream, memory={"enabled": True})
    headers = {"X-Memory-Id": "team"}
    first = client(url, "one", **headers)
    first.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": STATED}])
    second = client(url, "two", **headers)
    second.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": UPDATE}])
    with httpx.Client(
        base_url=url, headers={"Authorization": "Bearer tenant-a-key-0123456789"}
    ) as http:
        facts = http.get("/v1/memories/team").json()["facts"]
    (demo,) = [fact for fact in facts if fact["value"] == "March 14"]
    assert demo["superseded_by"] == ""
    upstream.requests.clear()
    third = client(url, "three", **headers)
    third.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ASKED}])
    (body,) = model_calls(upstream)
    remembered = [m for m in body["messages"] if str(m["content"]).startswith("Remembered")]
    assert not any("March 14" in str(m["content"]) for m in remembered)
    # What the sessions said still comes back verbatim, in order.
    said = str(body["messages"])
    assert STATED in said and UPDATE in said and said.index(STATED) < said.index(UPDATE)
