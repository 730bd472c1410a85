from __future__ import annotations

import copy

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.messages import GENESIS, chain, message_hash
from proxy.sessions import Checkpoint, Session, StoredMessage, reconcile, tenant_id

SYSTEM = {"role": "system", "content": "be brief"}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def bot(text: str) -> dict:
    return {"role": "assistant", "content": text}


def start(messages: list[dict], now: float = 1.0) -> Session:
    return reconcile(None, [SYSTEM, *messages], tenant="t", session_id="s", now=now).session


def step(session: Session | None, messages: list[dict], mode: str = "auto", now: float = 2.0):
    return reconcile(session, messages, mode, tenant="t", session_id="s", now=now)  # type: ignore[arg-type]


def contents(session: Session) -> list[str]:
    return [stored.message["content"] for stored in session.transcript]


def checkpoint(session: Session, covers_until: int) -> Checkpoint:
    head = chain(session.hashes()[:covers_until])[-1]
    return Checkpoint(covers_until, head, f"summary {covers_until}", 10, "m", 1.0)


T4 = [user("u1"), bot("a1"), user("u2"), bot("a2")]


def test_tenant_id_hides_token_and_is_stable() -> None:
    secret = b"k"
    assert tenant_id(None, secret) == tenant_id("", secret) == "anonymous"
    tenant = tenant_id("sk-secret-token", secret)
    assert tenant == tenant_id("sk-secret-token", secret)
    assert len(tenant) == 32 and ":" not in tenant and "secret" not in tenant
    assert tenant != tenant_id("sk-other", secret)
    assert tenant != tenant_id("sk-secret-token", b"other secret")


def test_new_session_stores_conversation_without_system() -> None:
    result = reconcile(None, [SYSTEM, *T4], tenant="t", session_id="s", now=5.0)
    session = result.session
    assert (result.kind, result.added, result.fork_at) == ("new", 4, None)
    assert result.system == [SYSTEM]
    assert contents(session) == ["u1", "a1", "u2", "a2"]
    assert session.head == chain(message_hash(m) for m in T4)[-1]
    assert (session.version, session.created, session.updated) == (1, 5.0, 5.0)


def test_full_resend_appends_only_the_new_tail() -> None:
    session = start(T4)
    session.transcript[0].tokens["tiktoken"] = 7
    result = step(session, [SYSTEM, *T4, user("u3")])
    assert (result.kind, result.added, result.fork_at) == ("full", 1, None)
    assert contents(result.session) == ["u1", "a1", "u2", "a2", "u3"]
    assert result.session.transcript[0].tokens == {"tiktoken": 7}  # not re-tokenized
    assert result.session.head == chain(result.session.hashes())[-1]
    assert (result.session.version, result.session.updated) == (2, 2.0)


def test_identical_resend_changes_nothing() -> None:
    session = start(T4)
    result = step(session, [SYSTEM, *T4])
    assert (result.kind, result.added, result.changed) == ("full", 0, False)
    assert result.session.version == session.version
    assert result.session.updated == session.updated


def test_client_sending_only_the_new_turn_appends_it() -> None:
    session = start(T4)
    result = step(session, [SYSTEM, user("u3")])
    assert (result.kind, result.added, result.fork_at) == ("append", 1, None)
    assert contents(result.session) == ["u1", "a1", "u2", "a2", "u3"]
    assert result.session.head == chain(result.session.hashes())[-1]


def test_editing_an_earlier_message_forks_and_drops_later_checkpoints() -> None:
    session = start([*T4, user("u3"), bot("a3")])
    session.checkpoints = [checkpoint(session, 2), checkpoint(session, 4)]
    result = step(session, [SYSTEM, user("u1"), bot("a1"), user("u2 edited")])
    assert (result.kind, result.fork_at, result.added) == ("fork", 2, 1)
    assert contents(result.session) == ["u1", "a1", "u2 edited"]
    assert [c.covers_until for c in result.session.checkpoints] == [2]
    assert result.session.checkpoints[0].chain_hash == chain(result.session.hashes()[:2])[-1]
    assert result.session.head == chain(result.session.hashes())[-1]


def test_regenerate_forks_before_the_last_answer() -> None:
    session = start(T4)
    session.checkpoints = [checkpoint(session, 3), checkpoint(session, 4)]
    result = step(session, [SYSTEM, user("u1"), bot("a1"), user("u2")])
    assert (result.kind, result.fork_at, result.added, result.changed) == ("fork", 3, 0, True)
    assert contents(result.session) == ["u1", "a1", "u2"]
    assert [c.covers_until for c in result.session.checkpoints] == [3]
    assert result.session.version == session.version + 1


def test_regenerate_with_a_different_last_message_forks() -> None:
    session = start(T4)
    result = step(session, [SYSTEM, user("u1"), bot("a1"), user("u2 again")])
    assert (result.kind, result.fork_at) == ("fork", 2)
    assert contents(result.session) == ["u1", "a1", "u2 again"]


def test_echoed_assistant_in_another_shape_does_not_fork() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
    tool_turn = {"role": "assistant", "content": None, "tool_calls": [call]}
    history = [
        user("u1"),
        bot("a1"),
        tool_turn,
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    session = start(history)
    echoed_call = {"id": "c1", "function": {"name": "f", "arguments": '{"x": 1}'}, "index": 0}
    echoed = [
        user("u1"),
        {"role": "assistant", "content": [{"type": "text", "text": "a1"}], "refusal": None},
        {"role": "assistant", "tool_calls": [echoed_call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r"}]},
        user("u2"),
    ]
    result = step(session, echoed)
    assert (result.kind, result.added) == ("full", 1)
    assert result.session.transcript[1].message == bot("a1")  # stored original kept


def test_system_messages_are_not_stored_and_do_not_fork() -> None:
    session = start(T4)
    result = step(session, [{"role": "developer", "content": "new rules"}, *T4, user("u3")])
    assert result.system == [{"role": "developer", "content": "new rules"}]
    assert (result.kind, result.added) == ("full", 1)
    assert all(s.message["role"] not in ("system", "developer") for s in result.session.transcript)


def test_only_system_messages_change_nothing() -> None:
    session = start(T4)
    for mode in ("auto", "append", "full"):
        result = step(session, [SYSTEM], mode)
        assert (result.added, result.changed) == (0, False)
        assert contents(result.session) == contents(session)


def test_append_mode_appends_even_a_full_resend() -> None:
    session = start(T4[:2])
    result = step(session, [*T4[:2], user("u2")], mode="append")
    assert (result.kind, result.added) == ("append", 3)
    assert contents(result.session) == ["u1", "a1", "u1", "a1", "u2"]


def test_full_mode_replaces_unrelated_history() -> None:
    session = start(T4)
    session.checkpoints = [checkpoint(session, 2)]
    auto = step(session, [user("x")])
    assert contents(auto.session) == ["u1", "a1", "u2", "a2", "x"]
    full = step(session, [user("x")], mode="full")
    assert (full.kind, full.fork_at) == ("fork", 0)
    assert contents(full.session) == ["x"]
    assert full.session.checkpoints == []


def test_full_mode_with_matching_prefix_appends_tail() -> None:
    session = start(T4)
    result = step(session, [*T4, user("u3")], mode="full")
    assert (result.kind, result.added) == ("full", 1)


def test_reconcile_does_not_mutate_input_session() -> None:
    session = start(T4)
    session.checkpoints = [checkpoint(session, 4)]
    before = copy.deepcopy(session.to_dict())
    for incoming in ([user("u3")], [*T4, user("u3")], [user("u1"), bot("other")]):
        result = step(session, incoming)
        result.session.transcript[0].tokens["tok"] = 1
        assert session.to_dict() == before


def test_session_json_roundtrip() -> None:
    session = start(T4)
    session.transcript[0].tokens["tiktoken"] = 3
    session.checkpoints = [checkpoint(session, 2), checkpoint(session, 4)]
    assert Session.from_dict(orjson.loads(orjson.dumps(session.to_dict()))) == session
    assert session.latest_checkpoint() == session.checkpoints[1]
    assert Session.new("t", "s", 0.0).latest_checkpoint() is None
    assert Session.new("t", "s", 0.0).head == GENESIS
    assert StoredMessage.from_dict({"message": user("x"), "hash": "h"}).tokens == {}


ALPHABET = [user("a"), user("b"), bot("a"), bot("b")]
conversations = st.lists(st.sampled_from(ALPHABET), max_size=6)


@given(stored=conversations, incoming=conversations)
def test_auto_mode_never_guesses_a_fork_or_loses_history(stored: list, incoming: list) -> None:
    session = step(None, stored).session
    result = step(session, incoming)
    hashes, old = result.session.hashes(), session.hashes()
    new = [message_hash(m) for m in incoming]
    assert result.session.head == (chain(hashes)[-1] if hashes else GENESIS)
    if result.kind == "append":  # only when nothing is shared, so nothing is duplicated
        assert hashes == old + new
        assert not old or not new or old[0] != new[0]
    elif result.kind == "full":
        assert hashes == new and new[: len(old)] == old
    else:
        k = result.fork_at
        assert result.kind == "fork" and k is not None
        assert hashes == new and 0 < k < len(old) and old[:k] == new[:k]
        assert new[: len(old)] != old
