from __future__ import annotations

import re
from collections import Counter
from typing import Any

from proxy.config.settings import ContextSettings
from proxy.conversation.tokens import counter_by_name
from proxy.engine.archive import Archived
from proxy.facts.ledger import facts_in, merge, message_text
from proxy.recall.index import (
    RECALL_PREFIX,
    Hit,
    Recalled,
    RecallIndex,
    asking,
    best_first,
    inflections,
    later_values,
    recall_message,
    segment,
)

COUNTER = counter_by_name("char")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_units_keep_tool_results_with_their_call_and_the_request_it_answers() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    later = {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [
        user("find order"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "order O-77 shipped"},
        {"role": "assistant", "content": None, "tool_calls": [later]},
        {"role": "tool", "tool_call_id": "c2", "content": "order O-78 lost"},
        user("thanks"),
    ]
    index = RecallIndex().extended([segment(10, messages, "")])
    (hit,) = index.search("where is O-77", 5)
    assert (hit.start, hit.end) == (10, 13)  # what was asked, the call and its output
    (hit,) = index.search("where is O-78", 5)
    assert (hit.start, hit.end) == (13, 15)  # a later call of the loop: its own unit


def test_a_question_asked_before_comes_after_what_answers_it() -> None:
    chatter = [user(f"standup notes {n}: nothing new") for n in range(40)]
    asked = user("how many replicas does the audit trail run?")
    answered = user("helm values: audit-trail replicas 15, timeout 109s, memory 1Gi")
    index = RecallIndex().extended([segment(0, [*chatter, answered, asked], "")])
    hits = index.search("Quick one: how many replicas does the audit trail run?", 5)
    assert [hit.start for hit in hits] == [40, 41]


def test_a_term_is_found_as_its_plural_and_synonyms() -> None:
    chatter = [user(f"standup notes {n}: nothing new") for n in range(40)]
    said = [
        user("helm: audit-trail limits memory 1Gi"),
        user("cache config for fraud-scorer: min_version 10.7.5"),
        user("two things: the quota keeper queue is Kinesis"),
    ]
    index = RecallIndex().extended([segment(0, [*chatter, *said], "")])
    (hit,) = index.search("what's the audit trail memory limit?", 5)
    assert hit.start == 40 and "limits" in hit.terms
    assert [h.start for h in index.search("what is the fraud scorer cutoff?", 5)] == [41]
    assert [h.start for h in index.search("the quota keeper broker?", 5)] == [42]


def test_a_unit_with_every_asked_term_outranks_one_with_some() -> None:
    chatter = [user(f"standup notes {n}: nothing new") for n in range(40)]
    dockerfile = "Dockerfile for ledger-sync:\nFROM python:3.12-slim\nWORKDIR /app\nCOPY . .\n"
    dockerfile += "ENV WORKER_CONCURRENCY=27\nENV PORT=9018\nEXPOSE 9018\nCMD python -m app"
    said = [user(dockerfile), user("the ledger sync code moved to apps/ledger-sync")]
    index = RecallIndex().extended([segment(0, [*chatter, *said], "")])
    hits = index.search("what's the ledger sync port?", 5, floor=0.5)
    assert [hit.start for hit in hits] == [40, 41]  # long as it is, it has all three


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


def test_two_subjects_that_had_one_value_each_get_their_note() -> None:
    """A line shows 15 for two subjects, both raised since: each gets its own note (one
    note per value left the second showing its old value as current)."""
    said = [
        "the auth gateway concurrency is 15",
        "the report exporter concurrency is 15",
        "the auth gateway concurrency is 22",
        "the report exporter concurrency is 41",
    ]
    ledger = merge([], [f for n, text in enumerate(said) for f in facts_in(text, n, n)])
    current = {fact.key: fact.value for fact in ledger if fact.current}
    shown = "auth gateway concurrency 15, report exporter concurrency 15"
    notes = later_values(shown, ledger, current, set())
    assert sorted(notes) == [
        "auth gateway concurrency: 15 was replaced by 22",
        "report exporter concurrency: 15 was replaced by 41",
    ]


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


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _indexed(messages: list[dict[str, Any]]) -> RecallIndex:
    """One segment of `messages`, with the statements they make (as a fold indexes)."""
    stated = [
        (at, fact.subject)
        for at, message in enumerate(messages)
        for fact in facts_in(message_text(message), at, 0)
    ]
    return RecallIndex().extended([segment(0, messages, "", stated)])


def _block(index: RecallIndex, messages: list[dict[str, Any]], probe: str) -> Recalled | None:
    """The recall block a probe gets, as the engine asks for it (12 hits, floor 0.5)."""
    hits = index.search(probe, 12, 0.8, 0.2, 0.5)
    return recall_message([(h, messages[h.start : h.end]) for h in hits], [], COUNTER, 4000)


_SUBJECTS = [
    ("webhook handler", "src/payments/webhook.py"),
    ("staging database host", "db-stg-2.internal"),
    ("retry limit", "7 attempts"),
    ("deploy window", "Tuesdays at 14:00 UTC"),
    ("search service port", "9200"),
    ("billing export bucket", "s3://acme-billing-exports"),
    ("auth token lifetime", "45 minutes"),
    ("mobile release version", "v4.12.0"),
    ("metrics dashboard", "https://grafana.acme.dev/d/ops"),
    ("payments lead", "Lena Moreau"),
    ("cache eviction policy", "LRU with a 10 GB cap"),
    ("nightly backup time", "02:30 UTC"),
]


def _conversation() -> list[dict[str, Any]]:
    """A long chat: a question-like line full of asking words, then each subject named,
    stated once and acknowledged with the same "Noted.", among chatter."""
    messages = [
        user("Quick check before we start: can you remind me where things live again?"),
        assistant("Sure, I will tell you what I know and recall where it was said."),
    ]
    for n, (subject, value) in enumerate(_SUBJECTS):
        messages += [
            user(f"Moving on to item {n}, the {subject}."),
            assistant(f"Sure, tell me about the {subject}."),
            user(f"The {subject} is {value}."),
            assistant("Noted."),
            user(f"Chatter {n}: lunch was fine, the weather is grey, nothing else today."),
        ]
    return messages


def test_identical_units_are_one_in_a_block_the_latest() -> None:
    said = "The sync job retries five times, with backoff."
    messages = [user("Lunch?"), assistant(said), user("ok"), assistant(said), user("x")]
    messages += [assistant(said), user("The sync job owner is Ada.")]
    index = _indexed(messages)
    hits = [(h, messages[h.start : h.end]) for h in index.search("sync job retries", 12)]
    assert {h.start for h, _ in hits} >= {1, 3, 5}
    recalled = recall_message(hits, [], COUNTER, 4000)
    assert recalled is not None
    content = recalled.message["content"]
    assert content.count(said) == 1 and "[message 5]" in content  # the latest copy
    assert 1 not in recalled.shown and 3 not in recalled.shown and 5 in recalled.shown


def test_a_probe_that_shares_only_asking_words_gets_nothing() -> None:
    messages = _conversation()
    index = _indexed(messages)
    for probe in [
        "Remind me again, what did we say? I keep forgetting.",
        "Can you tell me again, quick?",
        "Quick check: where does it live again?",
    ]:
        assert index.search(probe, 12) == [], probe
    # Terms only the turns before the newest have find nothing alone.
    assert index.search("Remind me again?", 12, earlier="the retry limit") == []
    asking = messages[0]["content"]
    hits = index.search("Quick check: where does the webhook handler live again?", 12)
    assert hits and all(messages[h.start]["content"] != asking for h in hits)
    assert all(set(h.terms) <= {"webhook", "handler"} for h in hits)


def test_the_answer_that_states_the_path_outranks_the_question_and_the_copies() -> None:
    before = "Next up is the webhook handler."
    answer = "The webhook handler lives in src/payments/webhook.py."
    question = "Where does the webhook handler live, and who owns the billing code by it?"
    messages = [user(question), assistant("Let me look.")]
    for n in range(10):
        messages += [user(before), assistant(f"Sure ({n}).")]
    messages += [user(before), assistant(answer), user(before)]  # said before and after
    messages += [user(f"chatter {n} about lunch and the weather") for n in range(60)]
    copies = [at for at, m in enumerate(messages) if m["content"] == before]
    stated = next(at for at, m in enumerate(messages) if m["content"] == answer)
    assert len(copies) == 12
    index = _indexed(messages)
    probe = "Where does the webhook handler live again?"
    ranked = [h.start for h in index.search(probe, 12)]
    assert ranked[0] == stated  # above the question asked before it and every copy
    assert ranked[1:3] == [copies[-1], copies[-2]]
    assert ranked[3] == 0  # copies past the latest two wait for the distinct units
    recalled = _block(index, messages, probe)
    assert recalled is not None
    content = recalled.message["content"]
    assert answer in content and content.count(before) == 1
    assert f"[message {copies[-1]}] user: {before}" in content  # the latest copy


def test_no_unit_comes_back_for_every_probe() -> None:
    messages = _conversation()
    index = _indexed(messages)
    probes = [
        form.format(subject)
        for subject, _ in _SUBJECTS
        for form in [
            "Quick check: where does the {} live again?",
            "Remind me, what's the {} again?",
            "What did we say the {} was? I keep forgetting.",
        ]
    ]
    seen: Counter[int] = Counter()
    for probe in probes:
        recalled = _block(index, messages, probe)
        assert recalled is not None, probe
        content = recalled.message["content"]
        texts = re.findall(r"\[message \d+\] (.*)", content)
        assert len(texts) == len(set(texts)), probe  # distinct units
        seen.update(list(recalled.shown))
        value = next(v for s, v in _SUBJECTS if s in probe)
        assert value in content, probe  # the unit that states it
    assert max(seen.values()) < len(probes) // 3


def test_a_unit_that_shares_only_the_sessions_common_words_is_no_hit() -> None:
    jargon = [user(f"Atlas project team sync {n}: notes filed.") for n in range(30)]
    chatter = [user(f"lunch {n}") for n in range(60)]
    said = [user("The Atlas budget is $40k."), user("Atlas project team: all hands on Friday.")]
    index = RecallIndex().extended([segment(0, [*jargon, *chatter, *said], "")])
    hits = index.search("what is the Atlas project team budget?", 12)
    assert [hit.start for hit in hits] == [90]


def test_a_statement_of_another_attribute_does_not_outrank_the_output_that_has_it() -> None:
    """Asked for the media transcoder's region, a tool's JSON that has the service and
    its region beats a statement of the transcoder's memory limit: only a unit with all
    that is asked states a value of it."""
    output = '{ "service": "media-transcoder", "region": "us-east-2", "tier": 2 }'
    statement = "fyi the media transcoder memory limit is 384Mi"
    messages = [user(output), assistant("Thanks.")]
    for n in range(12):
        messages.append(user(f"the service {n} region is eu-west-1"))  # "region" is common
    messages += [user(f"chatter {n} about lunch and the weather") for n in range(40)]
    messages += [user(statement), assistant("Noted.")]  # later: recency favours it
    messages += [user(f"more chatter {n} about the weekend") for n in range(40)]
    index = _indexed(messages)
    ranked = [h.start for h in index.search("which region is the media transcoder in?", 12)]
    assert ranked[0] == messages.index(user(output))


def test_a_number_of_one_digit_is_a_term_of_the_question() -> None:
    turns = [m for n in range(1, 61) for m in (user(f"turn {n}"), user(f"Done: turn {n}"))]
    index = RecallIndex().extended([segment(0, turns, "")])
    assert [hit.start for hit in index.search("turn 7", 5)] == [12, 13]


def test_ranking_fills_with_what_a_question_says_in_another_tense() -> None:
    """The precise search finds nothing for "what did she research?" (one common word);
    plain BM25 over inflected forms finds the message that said "Researching", first."""
    said = [
        user("Maya: I went hiking with my dog last weekend"),
        user("Maya: Researching adoption agencies lately, it has been a dream of mine"),
        user("Maya: the pottery class was fun, I made a bowl"),
        user("Maya: my sister visited and we baked bread"),
    ]
    index = RecallIndex().extended([segment(0, said, "")])
    hits = index.ranked("What did Maya research?", 10)
    assert hits[0].start == 1 and "research" in hits[0].terms
    assert not hits[0].precise
    assert index.ranked("What did Maya research?", 1) == hits[:1]


def test_ranking_finds_a_paraphrase_by_its_meaning() -> None:
    """ "What pet does Caroline have?" shares no word with "I adopted a rescue dog named
    Max": BM25 cannot find it, its meaning does; a unit near in no sense is not ranked."""
    said = [
        user("Caroline: we went hiking in the mountains on Sunday"),
        user("Caroline: I adopted a rescue dog named Max last spring, he loves walks"),
        user("Caroline: my sister's wedding is next month, I need a dress"),
        user("Caroline: the quarterly tax filing deadline is on the 15th"),
    ]
    index = RecallIndex().extended([segment(0, said, "")])
    query = "What animal does she keep as a pet?"
    hits = index.ranked(query, 4)
    assert hits and hits[0].start == 1 and hits[0].terms == ()
    assert 3 not in {hit.start for hit in hits}


def test_a_reply_is_ranked_as_the_answer_to_the_turn_before_it() -> None:
    """ "Yes! The second week of July" shares no word with "when was Ben at the lake
    house?" and is near it in no sense alone: read as the answer to the turn before it,
    it comes before the units that share only the speaker's name with the question."""
    said = [
        user("Ana: I painted the fence with my brother on Saturday"),
        assistant("Ben: Nice, I cooked pasta for my parents last night"),
        user("Ana: did you ever make it to the lake house this summer?"),
        assistant("Yes! The second week of July, it was lovely."),
        user("Ana: my cat knocked a glass over this morning"),
        assistant("Ben: Ha, mine does that too, every single day"),
        user("Ana: work has been busy, a big deadline on Friday"),
        assistant("Ben: Good luck, I bought new running shoes this week"),
    ]
    index = RecallIndex().extended([segment(0, said, "")])
    hits = index.ranked("When was Ben at the lake house?", 3)
    assert hits[0].start == 2 and 3 in {hit.start for hit in hits}
    reply = next(hit for hit in hits if hit.start == 3)
    assert reply.terms == () and reply.words > 0 and reply.near > 0


def test_an_index_stored_before_meanings_still_ranks_by_words() -> None:
    said = [user("Maya: Researching adoption agencies lately"), user("Maya: pottery class")]
    stored = segment(0, said, "")
    del stored["meanings"]  # as a checkpoint written before they were
    index = RecallIndex().extended([stored, segment(2, [user("Maya: baked bread")], "")])
    assert index.meanings.shape[0] == len(index.units) == 3
    assert index.ranked("What did Maya research?", 1)[0].start == 0


def test_inflections_reach_the_root_and_back() -> None:
    assert {"researching", "researched"} <= set(inflections("research"))
    assert {"study", "studies", "studying"} <= set(inflections("studied"))
    assert {"move", "moving", "moves"} <= set(inflections("moved"))
    assert {"plan", "planning"} <= set(inflections("planned"))
    assert inflections("O-77") == ("O-77",) and inflections("cat") == ("cat",)


def test_units_of_several_sessions_are_fused_anew_not_by_each_ones_ranks() -> None:
    """A memory searches each session alone: each one's first unit has the same fused
    score however weak it is, so units of several are ranked again over all of them, by
    their BM25 and their nearness; precise units first."""
    strong = Hit(10, 11, 0.2, ("dog",), False, words=9.0, near=0.7)
    weak = Hit(20, 21, 0.2, ("day",), False, words=0.5, near=0.31)  # another session's first
    meaning_only = Hit(30, 31, 0.1, (), False, words=0.0, near=0.6)
    precise = Hit(40, 41, 0.9, ("max",))
    assert best_first([weak, meaning_only, strong, precise]) == [
        precise,
        strong,
        weak,  # found by both, ranked second by each
        meaning_only,
    ]


def test_only_a_message_that_asks_gets_the_units_that_share_its_words() -> None:
    """A recall block is written to the provider's cache anew at each user turn: a
    message that asks nothing gets where the facts it names were stated (and the outputs
    it asks about), not every unit that shares its words; one that asks gets those
    units, best first, and the room filled."""
    messages = _conversation()
    stated = next(i for i, m in enumerate(messages) if m["content"].startswith("The retry limit"))
    index = _indexed(messages)
    archived = Archived(index=index, stated=((frozenset({"retry", "limit"}), stated),))
    context = ContextSettings()
    told, _ = archived.found("Set the retry limit in the new worker as before.", "", set(), context)
    assert [hit.start for hit in told] == [stated]
    moving, _ = archived.found("Moving on to the search service port.", "", set(), context)
    assert moving == []
    asked, _ = archived.found("What was the search service port again?", "", set(), context)
    port = next(i for i, m in enumerate(messages) if m["content"].endswith("port is 9200."))
    assert port in [hit.start for hit in asked[:3]] and len(asked) > 1
    # A question anywhere in the message asks, in any script's question mark.
    for text in ["Which port? I need it for the config.", "端口是多少？", "Port (which one?)"]:
        assert asking(text), text
    for text in ["Fetch https://example.test/?port=1 now.", "Moving on.", "x?y"]:
        assert not asking(text), text


def test_a_question_for_one_known_fact_gets_where_it_was_stated_not_the_fill() -> None:
    """A question is paid for, uncached, with every unit its block holds. One that asks
    for a fact the ledger knows, in just its subject's words, gets where it was stated
    and the precise hits; the room is not filled. One that asks more than the fact, or
    names only part of its subject, gets the room filled by words and meaning."""
    messages = _conversation()
    said = {
        subject: next(i for i, m in enumerate(messages) if m["content"] == f"The {subject} is {v}.")
        for subject, v in _SUBJECTS
    }
    known = Archived(
        index=_indexed(messages),
        stated=tuple((frozenset(subject.split()), at) for subject, at in said.items()),
    )
    context = ContextSettings()
    port, _ = known.found("What is the search service port?", "", set(), context)
    assert port[0].start == said["search service port"]
    assert all(hit.precise for hit in port)
    for question in [
        "Which service did we talk about?",  # part of a subject
        "What is the search service port, and who chose it?",  # the fact and more
    ]:
        hits, _ = known.found(question, "", set(), context)
        assert any(not hit.precise for hit in hits), question
