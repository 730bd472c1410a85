"""Reconcile (pure): what the client sent, relative to the stored transcript."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation.identity import GENESIS, chain, message_hash
from proxy.engine.planner.reconcile import (
    NEED_STORED_HASHES,
    Digests,
    Match,
    Serialized,
    bytes_of,
    frame_of,
    reconcile,
)
from proxy.sessions.records import Checkpoint, Fingerprint, SessionMeta, StoredMessage, tenant_id
from proxy.summary.message import SUMMARY_PREFIX, summary_message


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


T4 = [user("u1"), bot("a1"), user("u2"), bot("a2")]


def meta_for(transcript: list[dict[str, Any]], sent: int | None = None) -> SessionMeta:
    """The meta of a stored transcript; with `sent`, as left by a full-resend client
    whose last request held transcript[:sent] (the rest is the reply)."""
    hashes = [message_hash(m) for m in transcript]
    heads = chain(hashes)
    fingerprint = None
    if sent:
        fingerprint = Serialized(transcript[:sent]).fingerprint(sent, heads[sent - 1])
    return SessionMeta(
        tenant="t",
        session_id="s",
        version=1,
        length=len(transcript),
        head=heads[-1] if heads else GENESIS,
        first=hashes[0] if hashes else "",
        fingerprint=fingerprint,
        tail=tuple(hashes[sent:]) if sent else (),
    )


def run(
    transcript: list[dict[str, Any]],
    incoming: list[dict[str, Any]],
    mode: str = "auto",
    sent: int | None = None,
) -> tuple[Match, list[dict[str, Any]]]:
    """Reconcile (fetching stored hashes when asked) and apply: (match, new transcript)."""
    meta = meta_for(transcript, sent) if transcript else None
    serialized = Serialized(incoming) if incoming else None
    match = reconcile(meta, incoming, mode, serialized)  # type: ignore[arg-type]
    if match == NEED_STORED_HASHES:
        stored = [message_hash(m) for m in transcript[: len(incoming)]]
        match = reconcile(meta, incoming, mode, serialized, stored)  # type: ignore[arg-type]
    assert isinstance(match, Match)
    result = transcript[: match.kept] + incoming[match.start :]
    assert match.hashes == [message_hash(m) for m in incoming[match.start :]]
    assert match.head == (chain([message_hash(m) for m in result[: match.kept]]) or [GENESIS])[-1]
    return match, result


def test_new_session_takes_the_whole_conversation() -> None:
    match, result = run([], T4)
    assert (match.kind, match.kept, match.start) == ("new", 0, 0)
    assert result == T4


def test_full_resend_appends_only_the_new_tail() -> None:
    for sent in (None, 3):  # recognised by the hash chain, and by the fingerprint
        match, result = run(T4, [*T4, user("u3")], sent=sent)
        assert (match.kind, match.kept, match.start) == ("full", 4, 4)
        assert result == [*T4, user("u3")]


def test_fingerprint_means_only_new_messages_are_hashed(monkeypatch: Any) -> None:
    from proxy.conversation.identity import message_hash
    from proxy.engine.planner import reconcile as module

    hashed: list[Any] = []

    def counted(message: Any) -> str:
        hashed.append(message)
        return message_hash(message)

    monkeypatch.setattr(module, "message_hash", counted)
    history = [user(f"u{i}") if i % 2 == 0 else bot(f"a{i}") for i in range(201)]
    meta = meta_for([*history, bot("reply")], sent=201)
    incoming = [*history, bot("reply"), user("next")]
    match = reconcile(meta, incoming, "auto", Serialized(incoming))
    assert isinstance(match, Match) and match.kind == "full"
    assert hashed == [bot("reply"), user("next")]


def test_the_fingerprint_is_of_the_conversation_whatever_the_system_messages() -> None:
    system = {"role": "system", "content": "be brief"}
    other = {"role": "developer", "content": "new rules"}
    plain = Serialized(T4).fingerprint(4, "h")
    assert Serialized([system, *T4], 1).fingerprint(4, "h") == plain
    assert Serialized([other, system, *T4], 2).fingerprint(4, "h") == plain
    assert Serialized([other, *T4, user("u3")], 1).starts_with(plain)
    assert not Serialized([other, *T4[:3], bot("changed"), user("u3")], 1).starts_with(plain)
    assert Serialized([system, *T4], 1).whole == orjson.dumps([system, *T4])


def test_identical_resend_adds_nothing() -> None:
    for sent in (None, 4):
        match, result = run(T4, T4, sent=sent)
        assert (match.kind, match.hashes) == ("full", [])
        assert result == T4


def test_client_sending_only_the_new_turn_appends_it() -> None:
    for sent in (None, 3):
        match, result = run(T4, [user("u3")], sent=sent)
        assert (match.kind, match.kept, match.start) == ("append", 4, 0)
        assert result == [*T4, user("u3")]


def test_editing_an_earlier_message_forks() -> None:
    for sent in (None, 5):
        match, result = run([*T4, user("u3"), bot("a3")], [*T4[:2], user("u2 edited")], sent=sent)
        assert (match.kind, match.kept) == ("fork", 2)
        assert result == [*T4[:2], user("u2 edited")]


def test_regenerate_forks_before_the_last_answer() -> None:
    for sent in (None, 3):
        match, result = run(T4, T4[:3], sent=sent)
        assert (match.kind, match.kept, match.hashes) == ("fork", 3, [])
        assert result == T4[:3]


def test_an_edited_reply_forks_where_it_differs() -> None:
    match, result = run(T4, [*T4[:3], bot("a2 edited"), user("u3")], sent=3)
    assert (match.kind, match.kept) == ("fork", 3)
    assert result == [*T4[:3], bot("a2 edited"), user("u3")]


def test_echoed_assistant_in_another_shape_does_not_fork() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
    history = [
        user("u1"),
        bot("a1"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    echoed_call = {"id": "c1", "function": {"name": "f", "arguments": '{"x": 1}'}, "index": 0}
    echoed = [
        user("u1"),
        {"role": "assistant", "content": [{"type": "text", "text": "a1"}], "refusal": None},
        {"role": "assistant", "tool_calls": [echoed_call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r"}]},
        user("u2"),
    ]
    for sent in (None, 3):
        match, _ = run(history, echoed, sent=sent)
        assert (match.kind, match.kept, match.start) == ("full", 4, 4)


def test_a_reformatted_prefix_falls_back_to_the_hash_chain() -> None:
    reformatted = [{"content": m["content"], "role": m["role"]} for m in T4]  # keys reordered
    match, _ = run(T4, [*reformatted, user("u3")], sent=3)
    assert (match.kind, match.start) == ("full", 4)


def test_empty_conversation_changes_nothing() -> None:
    for mode in ("auto", "append", "full"):
        match, result = run(T4, [], mode=mode, sent=3)
        assert (match.kept, match.hashes, match.whole) == (4, [], False)
        assert result == T4


def test_append_mode_appends_even_a_full_resend() -> None:
    match, result = run(T4[:2], [*T4[:2], user("u2")], mode="append", sent=1)
    assert match.kind == "append"
    assert result == [*T4[:2], *T4[:2], user("u2")]


def test_full_mode_replaces_unrelated_history() -> None:
    _, auto = run(T4, [user("x")])
    assert auto == [*T4, user("x")]
    match, full = run(T4, [user("x")], mode="full")
    assert (match.kind, match.kept) == ("fork", 0)
    assert full == [user("x")]


AGENT = frame_of(b'[{"role":"system","content":"You are a coding agent."}]', b'[{"name":"Read"}]')
TITLE = frame_of(b'[{"role":"system","content":"Write a title for this chat."}]', b"[]")


def test_an_agents_side_request_is_beside_the_session_never_stored() -> None:
    """Claude Code asks for a title and checks its quota under the session id of the
    conversation it is in: other system messages and tools, another first message."""
    meta = meta_for(T4, sent=3).evolve(frame=AGENT)
    for mode in ("auto", "full"):
        match = reconcile(meta, [user("Title for: u1")], mode, Serialized([user("t")]), None, TITLE)
        assert isinstance(match, Match) and match.kind == "side" and not match.whole
        assert (match.kept, match.hashes, match.head) == (4, [], meta.head)  # T stands


def test_only_a_known_resend_conversation_in_another_frame_has_side_requests() -> None:
    """A client that sends only its new turns, or one whose frame is unchanged (it
    started its conversation over: Claude Code's own compaction), is not beside it."""
    new_turn = [user("u3")]
    appended = reconcile(meta_for(T4).evolve(frame=AGENT), new_turn, "auto", None, None, TITLE)
    assert isinstance(appended, Match) and appended.kind == "append"
    same_frame = reconcile(
        meta_for(T4, sent=3).evolve(frame=AGENT), new_turn, "auto", None, None, AGENT
    )
    assert isinstance(same_frame, Match) and same_frame.kind == "append"  # never resent
    resent = meta_for(T4, sent=3).evolve(frame=AGENT, resent=True)
    only_new = reconcile(resent, new_turn, "auto", None, None, AGENT)
    assert isinstance(only_new, Match) and only_new.kind == "append"  # switched to appending
    restarted = [user("Summary of the conversation so far: u1, u2."), user("u3")]
    compacted = reconcile(resent, restarted, "auto", None, None, AGENT)
    assert isinstance(compacted, Match) and compacted.kind == "chapter"  # it compacted
    unknown = reconcile(meta_for(T4, sent=3), new_turn, "auto", None, None, TITLE)
    assert isinstance(unknown, Match) and unknown.kind == "append"  # stored before frames
    turn = reconcile(
        meta_for(T4, sent=3).evolve(frame=AGENT),
        [*T4, user("u3")],
        "auto",
        Serialized([*T4, user("u3")]),
        None,
        TITLE,
    )
    assert isinstance(turn, Match) and turn.kind == "full"  # new tools, same conversation


def test_a_one_shot_that_came_first_yields_to_the_conversation_that_goes_on() -> None:
    """opencode's first request under its session id is a title generator: stored, it
    must not turn the real conversation into side requests. While the session holds one
    exchange that asked for nothing more, a longer conversation in another frame takes
    it over; once the conversation goes on, a one-shot is a side request again."""
    title = [user("Title for: fix the build"), bot("Fixing the build")]
    one_shot = meta_for(title, sent=1).evolve(frame=TITLE, settled=False)
    first_turn = [user("fix the build")]
    match = reconcile(one_shot, first_turn, "auto", Serialized(first_turn), None, AGENT)
    assert isinstance(match, Match) and match.kind == "side"  # not longer: nothing yet
    conversation = [user("fix the build"), bot("Which error?"), user("make fails")]
    match = reconcile(one_shot, conversation, "auto", Serialized(conversation), None, AGENT)
    assert isinstance(match, Match) and (match.kind, match.kept, match.start) == ("fork", 0, 0)
    assert match.head == GENESIS and len(match.hashes) == 3 and match.whole
    settled = meta_for(T4, sent=3).evolve(frame=AGENT)  # the conversation, gone on
    again = reconcile(settled, [user("Title")], "auto", Serialized([user("Title")]), None, TITLE)
    assert isinstance(again, Match) and again.kind == "side"
    longer = [user("a"), bot("b"), user("c"), bot("d"), user("e")]
    kept = reconcile(settled, longer, "auto", Serialized(longer), None, TITLE)
    assert isinstance(kept, Match) and kept.kind == "side"  # a settled session never yields


def test_a_client_that_compacts_its_history_starts_a_chapter_that_goes_on() -> None:
    """Claude Code's /compact: the next request is a new, short conversation (its own
    summary first) in the same frame. It is stored after the old transcript, which stays,
    and its next turns are recognised as the whole conversation from that origin on."""
    meta = meta_for(T4, sent=3).evolve(frame=AGENT, resent=True)
    restart = [user("This session is being continued. Summary: u1, u2."), user("u3")]
    match = reconcile(meta, restart, "auto", Serialized(restart), None, AGENT)
    assert isinstance(match, Match) and (match.kind, match.kept, match.start) == ("chapter", 4, 0)
    assert match.whole and match.origin == 4 and match.head == meta.head
    # The commit leaves: T4 + restart + a reply, the conversation starting at 4.
    hashes = [message_hash(m) for m in [*T4, *restart, bot("a3")]]
    heads = chain(hashes)
    chapter = SessionMeta(
        tenant="t",
        session_id="s",
        length=7,
        head=heads[-1],
        first=hashes[4],
        frame=AGENT,
        resent=True,
        origin=4,
        origin_head=heads[3],
        fingerprint=Serialized(restart).fingerprint(2, heads[5]),
        tail=(hashes[6],),
    )
    goes_on = [*restart, bot("a3"), user("u4")]
    fast = reconcile(chapter, goes_on, "auto", Serialized(goes_on), None, AGENT)
    assert isinstance(fast, Match) and (fast.kind, fast.kept, fast.start) == ("full", 7, 3)
    slow = reconcile(chapter.evolve(fingerprint=None), goes_on, "full", None, None, AGENT)
    assert isinstance(slow, Match) and (slow.kind, slow.kept, slow.start) == ("full", 7, 3)
    assert fast.origin == slow.origin == 4 and fast.hashes == slow.hashes
    edited = [restart[0], user("u3, edited")]
    asked = reconcile(chapter.evolve(fingerprint=None), edited, "full", None, None, AGENT)
    assert asked == NEED_STORED_HASHES
    fork = reconcile(chapter.evolve(fingerprint=None), edited, "full", None, hashes[4:6], AGENT)
    assert isinstance(fork, Match) and (fork.kind, fork.kept, fork.start) == ("fork", 5, 1)
    assert fork.head == heads[4]  # the old chapter stays: the edit forks inside the new one


def test_codex_keeps_its_first_messages_when_it_compacts_a_chapter_not_a_fork() -> None:
    """Codex's compacted history keeps its opening context, then its own summary: an
    edit of history by shape, which would fork the old transcript away; a chapter."""
    context = user("<environment_context>cwd: /src</environment_context>")
    transcript = [context, user("u1"), bot("a1"), user("u2"), bot("a2")]
    meta = meta_for(transcript, sent=4).evolve(frame=AGENT, resent=True)
    summary = user("Another language model started to solve this problem and produced a summary")
    compacted = [context, user("u2"), summary, user("u3")]
    stored = [message_hash(m) for m in transcript[: len(compacted)]]
    match = reconcile(meta, compacted, "auto", None, stored, AGENT)
    assert isinstance(match, Match) and (match.kind, match.kept, match.start) == ("chapter", 5, 0)
    edited = [context, user("u1, edited")]
    fork = reconcile(meta, edited, "auto", None, stored, AGENT)
    assert isinstance(fork, Match) and (fork.kind, fork.kept) == ("fork", 1)  # a real edit


def test_codex_reorders_its_context_when_it_compacts_a_chapter_not_a_side_request() -> None:
    """Codex 0.169 puts its kept messages before its developer context when it compacts:
    the compacted history comes in another frame, yet is the conversation going on."""
    context = user("<environment_context>cwd: /src</environment_context>")
    transcript = [context, user("u1"), bot("a1"), user("u2"), bot("a2")]
    meta = meta_for(transcript, sent=4).evolve(frame=AGENT, resent=True)
    summary = user("Another language model started to solve this problem and produced a summary")
    compacted = [user("u1"), user("u2"), context, summary, user("u3")]
    match = reconcile(meta, compacted, "auto", None, None, TITLE)
    assert isinstance(match, Match) and (match.kind, match.kept, match.start) == ("chapter", 5, 0)
    title = [user("Write a title for: u1")]  # another frame, no summary: beside it
    beside = reconcile(meta, title, "auto", None, None, TITLE)
    assert isinstance(beside, Match) and beside.kind == "side"
    quoted = [summary, user("title?")]  # an agent's summary first is Claude Code's chapter
    assert reconcile(meta, quoted, "auto", None, None, TITLE).kind == "side"  # type: ignore[union-attr]


def test_stored_hashes_are_asked_for_only_to_tell_an_edit_from_a_new_turn() -> None:
    meta = meta_for(T4)
    assert reconcile(meta, [user("u3")], "auto", None).kind == "append"  # type: ignore[union-attr]
    assert reconcile(meta, [user("u1"), bot("x")], "auto", None) == NEED_STORED_HASHES


def test_a_checkpoint_stored_before_segments_sends_the_same_bytes() -> None:
    """A summary stored as one text (pinned facts inside) loads as one segment, so the
    model gets the message it got before the upgrade, and the prompt cache keeps it."""
    text = "The user planned the launch.\n\nPinned facts: PRJ-7"
    stored = {"covers_until": 2, "chain_hash": "h", "text": text, "tokens": 9}
    checkpoint = Checkpoint.from_dict(stored | {"model": "m", "created": 1.0})
    assert checkpoint.segments == (text,) and checkpoint.pinned == ()
    assert checkpoint.text == text
    assert summary_message(checkpoint.text) == {"role": "system", "content": SUMMARY_PREFIX + text}


def test_meta_json_roundtrip_and_tenant_ids() -> None:
    meta = meta_for(T4, sent=3).evolve(
        totals={"o200k_base": 40},
        checkpoint=Checkpoint(
            2,
            "h",
            ("summary",),
            5,
            "m",
            1.0,
            {"o200k_base": 10},
            pinned=("PRJ-7",),
            kept=("<system-reminder>CLAUDE.md</system-reminder>",),
        ),
        checkpoints=1,
        frame=AGENT,
    )
    assert SessionMeta.from_dict(orjson.loads(orjson.dumps(meta.to_dict()))) == meta
    stored = StoredMessage(user("x"), "h", "c", {"o200k_base": 4})
    assert StoredMessage.from_dict(orjson.loads(orjson.dumps(stored.to_dict()))) == stored
    assert Fingerprint.from_dict(meta.fingerprint.to_dict()) == meta.fingerprint  # type: ignore[union-attr]
    assert tenant_id(None, b"k") == tenant_id("", b"k") == "anonymous"
    tenant = tenant_id("sk-secret-token", b"k")
    assert len(tenant) == 32 and ":" not in tenant and "secret" not in tenant
    assert tenant != tenant_id("sk-secret-token", b"other") != tenant_id("sk-other", b"k")


ALPHABET = [user("a"), user("b"), bot("a"), bot("b")]
conversations = st.lists(st.sampled_from(ALPHABET), max_size=6)


@given(
    stored=conversations.filter(bool),
    incoming=conversations,
    sent=st.integers(0, 6),
    mode=st.sampled_from(["auto", "full"]),
)
def test_the_fingerprint_never_changes_the_outcome(
    stored: list[Any], incoming: list[Any], sent: int, mode: str
) -> None:
    """Recognising a client by its bytes is only a shortcut: the result is the same as
    comparing hash chains message by message."""
    slow, _ = run(stored, incoming, mode)
    fast, _ = run(stored, incoming, mode, sent=min(sent, len(stored)) or None)
    assert (fast.kind, fast.kept, fast.start) == (slow.kind, slow.kept, slow.start)


@given(stored=conversations.filter(bool), incoming=conversations.filter(bool))
def test_auto_mode_never_guesses_a_fork_or_loses_history(stored: list, incoming: list) -> None:
    match, result = run(stored, incoming)
    if match.kind == "append":  # only when nothing is shared, so nothing is duplicated
        assert result == stored + incoming
        assert stored[0] != incoming[0]
    elif match.kind == "full":
        assert result == incoming and incoming[: len(stored)] == stored
    else:
        k = match.kept
        assert match.kind == "fork" and 0 < k < len(stored)
        assert result == incoming and stored[:k] == incoming[:k]
        assert incoming[: len(stored)] != stored


@given(st.lists(st.sampled_from(["u1", "a1", "u2", "é", '"q"']), min_size=1, max_size=8), st.data())
def test_a_fingerprint_known_to_the_process_recognises_exactly_what_hashing_would(
    texts: list[str], data: st.DataObject
) -> None:
    """Digests change no answer: a resent conversation is recognised by memcmp against the
    bytes its fingerprint was taken of, an edited one is not, and the next fingerprint is
    the one hashing every byte gives."""
    digests = Digests()
    sent = [user(text) for text in texts]
    fingerprint = Serialized(sent, 0, digests).fingerprint(len(sent), "h")
    edited = list(sent)
    at = data.draw(st.integers(min_value=0, max_value=len(sent) - 1))
    edited[at] = user(texts[at].swapcase())  # the same length, other bytes
    for later in ([*sent, bot("r"), user("n")], [*edited, bot("r"), user("n")]):
        known, plain = Serialized(later, 0, digests), Serialized(later)
        assert known.starts_with(fingerprint) == plain.starts_with(fingerprint)
        assert known.fingerprint(len(later), "h") == plain.fingerprint(len(later), "h")
    resent = Serialized([*sent, bot("r")], 0, digests)
    assert digests.taken(fingerprint.digest, resent.whole, 1, fingerprint.length - 2) is not None


def test_digests_keep_their_bytes_bound_and_the_latest_whatever_its_size() -> None:
    digests = Digests(kept_bytes=150)  # two of these
    prints = [Serialized([user(str(n) * 40)], 0, digests).fingerprint(1, "h") for n in range(5)]
    whole = [orjson.dumps([user(str(n) * 40)]) for n in range(5)]
    held = [
        digests.taken(p.digest, w, 1, p.length - 2) is not None
        for p, w in zip(prints, whole, strict=True)
    ]
    assert held == [False, False, False, True, True]
    huge = Serialized([user("x" * 500)], 0, digests).fingerprint(1, "h")
    assert digests.taken(huge.digest, orjson.dumps([user("x" * 500)]), 1, huge.length - 2)


def test_a_view_of_a_whole_bytes_object_is_taken_as_it_is_any_other_copied() -> None:
    """A door's JSON of its messages is 1.4 MB at 5,000 messages: not copied again."""
    data = b'[{"role":"user","content":"hi"}]'
    assert bytes_of(memoryview(data)) is data
    assert bytes_of(memoryview(data)[1:-1]) == data[1:-1]
    assert bytes_of(memoryview(data)[::-1]) == data[::-1]
    assert bytes_of(memoryview(bytearray(data))) == data
