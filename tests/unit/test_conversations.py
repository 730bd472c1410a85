"""Conversations.prepare/record with a real disk store and a recording tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy import conversations
from proxy.config import Settings
from proxy.conversations import Conversations, RequestContext
from proxy.stores import DiskSessionStore
from proxy.tokens import TokenCounter, counter_for
from proxy.upstream import Upstream


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the proxy tokenizes, in order."""
    texts: list[str] = []
    real = counter_for("gpt-4o")

    def count_text(text: str) -> int:
        texts.append(text)
        return real.count_text(text)

    recording = TokenCounter(real.name, count_text)
    monkeypatch.setattr(conversations, "counter_for", lambda model, mode="auto": recording)
    return texts


def make(tmp_path: Path) -> Conversations:
    settings = Settings.model_validate(
        {
            "model_list": [
                {
                    "model_name": "m",
                    "litellm_params": {"model": "openai/gpt-4o", "api_base": "http://127.0.0.1:9/"},
                    "model_info": {"max_input_tokens": 100_000},
                }
            ],
            "session": {"path": str(tmp_path)},
        }
    )
    store = DiskSessionStore(str(tmp_path))
    return Conversations(settings, Upstream(settings), store, tenant_secret=b"test-secret")


async def test_a_request_tokenizes_only_new_messages(tmp_path: Path, counted: list[str]) -> None:
    convo = make(tmp_path)
    request = RequestContext(authorization="Bearer k", session_id="s1")
    history: list[dict[str, Any]] = [{"role": "system", "content": "SYSTEM-TEXT"}]
    for turn in range(5):
        history.append({"role": "user", "content": f"USER-{turn}"})
        counted.clear()
        prepared = await convo.prepare({"model": "m", "messages": list(history)}, request)
        user_texts = [t for t in counted if t.startswith("USER-")]
        # Only this turn's new message is tokenized; earlier ones come from the store.
        assert user_texts == [f"USER-{turn}"] * user_texts.count(f"USER-{turn}")
        assert user_texts, "the new message was counted"
        assert not [t for t in counted if t.startswith("REPLY-")]  # counted when stored
        reply = {"role": "assistant", "content": f"REPLY-{turn}"}
        await convo.record(prepared, reply)
        history.append(reply)
    session = await convo.store.get(convo.tenant("Bearer k"), "s1")
    assert session is not None
    assert all(m.tokens.get("o200k_base") for m in session.transcript)


async def test_counts_are_kept_per_tokenizer(tmp_path: Path) -> None:
    convo = make(tmp_path)
    request = RequestContext(session_id="s2")
    prepared = await convo.prepare(
        {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}, request
    )
    await convo.record(prepared, {"role": "assistant", "content": "hi"})
    session = await convo.store.get("anonymous", "s2")
    assert session is not None
    expected = counter_for("gpt-4o").count_message({"role": "user", "content": "hello there"})
    assert session.transcript[0].tokens == {"o200k_base": expected}
