from __future__ import annotations

from typing import Any

from proxy.conversation.tokens import counter_named
from proxy.facts.ledger import facts_in, merge
from proxy.recall.index import RECALL_PREFIX, RecallIndex, recall_message, segment

COUNTER = counter_named("char")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_units_keep_tool_results_with_their_call() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [
        user("find order"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "order O-77 shipped"},
        user("thanks"),
    ]
    index = RecallIndex().extended([segment(10, messages, "")])
    (hit,) = index.search("where is O-77", 5)
    assert (hit.start, hit.end) == (11, 13)


def test_relevance_then_recency() -> None:
    messages = [
        user("the database password rotation is on Fridays"),
        user("lunch plans"),
        user("the database host is db1"),
        user("the database host moved to db2"),
    ]
    index = RecallIndex().extended([segment(0, messages[:2], ""), segment(2, messages[2:], "x")])
    hits = index.search("which database host", 3)
    assert [hit.start for hit in hits][:2] == [3, 2]
    assert index.search("unrelated words entirely", 3) == []


def _many(subjects: list[str]) -> RecallIndex:
    """One unit per sentence (from 100), among chatter where each word of the subjects
    is common (in a tenth of the units or more) and only their pairs are not."""
    pairs = ["mobile launch", "launch date", "mobile date", "payments team", "lead time"]
    pairs += ["billing sync", "search sync", "vendor call", "billing call", "search call"]
    chatter = [user(f"the {pair} review is open ({n})") for pair in pairs for n in range(10)]
    return RecallIndex().extended([segment(0, [*chatter, *map(user, subjects)], "")])


def test_terms_common_alone_but_rare_together_find_their_unit() -> None:
    index = _many(
        [
            "Handover: the mobile launch date is 2027-06-20.",
            "The lead is out.",
            "The payments lead is Lena Moreau, as agreed last week with them.",
        ]
    )
    assert index.search("the mobile launch date?", 1)[0].start == 100
    assert index.search("who is the payments lead?", 1)[0].start == 102


def test_the_newest_message_weighs_more_than_the_turns_before_it() -> None:
    index = _many(["The billing vendor is Cedar Labs.", "The search lead is Omar Sato."])
    (hit,) = index.search("what is the search lead?", 1, earlier="what is the billing vendor?")
    assert hit.start == 101
    (hit,) = index.search("what is the billing vendor?", 1, earlier="what is the search lead?")
    assert hit.start == 100


def test_the_block_fits_its_room_and_notes_later_values() -> None:
    old = user("the travel budget is $4,250")
    ledger = merge(
        facts_in("the travel budget is $4,250", 0, 0), facts_in("the travel budget is $3,796", 5, 1)
    )
    index = RecallIndex().extended([segment(0, [old, user("x " * 400)], "")])
    hits = [
        (hit, [old if hit.start == 0 else user("x " * 400)])
        for hit in index.search("travel budget x", 5)
    ]
    recalled = recall_message(hits, ledger, COUNTER, 120)
    assert recalled is not None
    block = recalled.message
    assert recalled.shown == {0: None}  # the unit it holds, whole
    assert block["content"].startswith(RECALL_PREFIX)
    assert "$4,250" in block["content"]
    assert block["content"].endswith("travel budget: $4,250 was replaced by $3,796.)")
    assert COUNTER.count_message(block) <= 120
    assert recall_message(hits, ledger, COUNTER, 10) is None


def test_a_long_message_comes_back_as_excerpts_around_its_matches() -> None:
    paste = user("filler " * 300 + "the deploy key is K-991 " + "filler " * 300)
    index = RecallIndex().extended([segment(0, [paste], "")])
    hits = [(hit, [paste]) for hit in index.search("deploy key", 1)]
    recalled = recall_message(hits, [], COUNTER, 200)
    assert recalled is not None
    block = recalled.message
    assert "K-991" in block["content"] and "excerpt" in block["content"]
    assert recalled.shown == {0: frozenset({"deploy", "key"})}  # excerpts around what was asked
    assert recalled.covers(index.search("deploy key", 1)[0])
    assert not recalled.covers(index.search("filler deploy", 1)[0])
    assert COUNTER.count_message(block) <= 200
