"""Sessions through the proxy: reconcile, headers, the sessions API, fallbacks."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import openai
import pytest

from proxy.config.settings import ContextSettings
from tests.proxies import MODEL, proxy_config
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, Reply, count_prompt_tokens
from tests.waiting import eventually

SESSION = "X-Session-Id"
SMALL_WINDOW = {"max_input_tokens": 1000}
SUMMARIZE_AT = ContextSettings().summarize_at  # the default


def small_model(upstream: FakeUpstream, **sections: Any) -> dict[str, Any]:
    """MODEL with a 1,000-token input limit, so a few long turns need compression."""
    config = proxy_config(upstream, **sections)
    config["model_list"][0]["model_info"] = SMALL_WINDOW
    return config


def sdk(url: str, session: str | None = None, key: str = "client-key", **headers: str) -> Any:
    default_headers = dict(headers)
    if session is not None:
        default_headers[SESSION] = session
    return openai.OpenAI(
        base_url=url + "/v1", api_key=key, max_retries=0, default_headers=default_headers
    )


def chat(client: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, **kwargs
    )


def stored(url: str, session: str, key: str = "client-key") -> httpx.Response:
    return httpx.get(f"{url}/v1/sessions/{session}", headers={"authorization": f"Bearer {key}"})


def plans(url: str, session: str, key: str = "client-key") -> list[dict[str, Any]]:
    headers = {"authorization": f"Bearer {key}"}
    response = httpx.get(f"{url}/v1/sessions/{session}/plans", headers=headers)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def is_summarizer(body: dict[str, Any]) -> bool:
    return asks_summary(body)


def model_requests(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [r.body for r in upstream.chat_requests() if not is_summarizer(r.body)]


def test_full_resend_client_stores_each_message_once(url: str, upstream: FakeUpstream) -> None:
    client = sdk(url, "resend")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for text in ("one", "two", "three"):
        messages.append({"role": "user", "content": text})
        reply = chat(client, messages).parse()
        # The SDK's own echo of the reply, extra fields and all.
        messages.append(reply.choices[0].message.model_dump())
    session = stored(url, "resend").json()
    assert [m["content"] for m in session["messages"]] == [
        "one",
        "echo: one",
        "two",
        "echo: two",
        "three",
        "echo: three",
    ]
    assert session["stats"]["messages"] == 6
    # The client's system message is sent every time but never stored as history.
    assert all(m["role"] != "system" for m in session["messages"])


def test_a_side_request_is_answered_beside_the_session(url: str, upstream: FakeUpstream) -> None:
    """A full-resend client's own title request, under the same session id: answered
    (with the header that says so), never stored; the conversation then goes on."""
    client = sdk(url, "with-side")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for text in ("one", "two"):
        messages.append({"role": "user", "content": text})
        messages.append(chat(client, messages).parse().choices[0].message.model_dump())
    before = stored(url, "with-side").content
    title = chat(
        client,
        [
            {"role": "system", "content": "Write a title for this chat."},
            {"role": "user", "content": "one, two"},
        ],
    )
    assert title.headers["x-context-session-turn"] == "side"
    assert title.parse().choices[0].message.content == "echo: one, two"
    assert stored(url, "with-side").content == before
    messages.append({"role": "user", "content": "three"})
    turn = chat(client, messages)
    assert "x-context-session-turn" not in turn.headers
    contents = [m["content"] for m in stored(url, "with-side").json()["messages"]]
    assert contents == ["one", "echo: one", "two", "echo: two", "three", "echo: three"]


def test_a_title_that_came_first_does_not_claim_the_session(
    url: str, upstream: FakeUpstream
) -> None:
    """opencode's first request under its session id generates a title. The conversation
    that follows, in its own frame, is the session's transcript from its second turn on
    (its first was answered beside the title), and later titles are side requests."""
    client = sdk(url, "title-first")
    title = [
        {"role": "system", "content": "Generate a title for this conversation."},
        {"role": "user", "content": "fix the build"},
    ]
    assert "x-context-session-turn" not in chat(client, title).headers  # it came first
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are opencode."}]
    turns = []
    for text in ("fix the build", "make fails", "now it builds"):
        messages.append({"role": "user", "content": text})
        turns.append(chat(client, messages, tools=tools))
        messages.append(turns[-1].parse().choices[0].message.model_dump(exclude_none=True))
    assert turns[0].headers["x-context-session-turn"] == "side"  # the title still held it
    assert ["x-context-session-turn" in turn.headers for turn in turns[1:]] == [False, False]
    assert chat(client, title).headers["x-context-session-turn"] == "side"
    contents = [m["content"] for m in stored(url, "title-first").json()["messages"]]
    assert contents == [
        "fix the build",
        "echo: fix the build",
        "make fails",
        "echo: make fails",
        "now it builds",
        "echo: now it builds",
    ]


def test_append_only_client_gets_history_restored(url: str, upstream: FakeUpstream) -> None:
    client = sdk(url, "append-only")
    chat(client, [{"role": "user", "content": "My name is Ada."}])
    chat(client, [{"role": "user", "content": "What is my name?"}])
    sent = upstream.chat_requests()[-1].body["messages"]
    assert [m["content"] for m in sent] == [
        "My name is Ada.",
        "echo: My name is Ada.",
        "What is my name?",
    ]
    assert stored(url, "append-only").json()["stats"]["messages"] == 4


def test_session_mode_header_overrides_the_guess(url: str, upstream: FakeUpstream) -> None:
    client = sdk(url, "modes")
    chat(client, [{"role": "user", "content": "hi"}])
    # Same text again: auto would read it as a resend of history; append says it is new.
    appender = sdk(url, "modes", **{"X-Session-Mode": "append"})
    chat(appender, [{"role": "user", "content": "hi"}])
    contents = [m["content"] for m in stored(url, "modes").json()["messages"]]
    assert contents == ["hi", "echo: hi", "hi", "echo: hi"]
    bad = sdk(url, "modes", **{"X-Session-Mode": "sideways"})
    with pytest.raises(openai.BadRequestError):
        chat(bad, [{"role": "user", "content": "x"}])


def test_edit_forks_the_session(url: str, upstream: FakeUpstream) -> None:
    client = sdk(url, "fork")
    history = [{"role": "user", "content": "Plan a trip to Rome."}]
    history.append(
        {"role": "assistant", "content": chat(client, history).parse().choices[0].message.content}
    )
    history.append({"role": "user", "content": "Make it 3 days."})
    chat(client, history)
    # The user edits their second message: history after the edit is replaced.
    edited = [*history[:2], {"role": "user", "content": "Make it 5 days."}]
    chat(client, edited)
    contents = [m["content"] for m in stored(url, "fork").json()["messages"]]
    assert contents == [
        "Plan a trip to Rome.",
        "echo: Plan a trip to Rome.",
        "Make it 5 days.",
        "echo: Make it 5 days.",
    ]


def test_equivalent_echo_does_not_fork(url: str, upstream: FakeUpstream) -> None:
    client = sdk(url, "echo-shapes")
    chat(client, [{"role": "user", "content": "ping"}])
    echoed = {
        "role": "assistant",
        "content": [{"type": "text", "text": "echo: ping"}],
        "refusal": None,
        "audio": None,
    }
    chat(
        client, [{"role": "user", "content": "ping"}, echoed, {"role": "user", "content": "again"}]
    )
    session = stored(url, "echo-shapes").json()
    assert session["stats"]["messages"] == 4
    assert session["messages"][1] == {"role": "assistant", "content": "echo: ping"}


def test_sessions_are_private_to_their_key(url: str, upstream: FakeUpstream) -> None:
    chat(sdk(url, "shared-name", key="alice"), [{"role": "user", "content": "alice's secret"}])
    chat(sdk(url, "shared-name", key="bob"), [{"role": "user", "content": "bob here"}])
    alice = stored(url, "shared-name", "alice").json()
    bob = stored(url, "shared-name", "bob").json()
    assert alice["messages"][0]["content"] == "alice's secret"
    assert bob["messages"][0]["content"] == "bob here"
    # Bob's requests never saw Alice's history.
    assert "alice's secret" not in str(upstream.chat_requests()[-1].body)
    assert stored(url, "shared-name", "mallory").status_code == 404


def test_response_headers_report_tokens(url: str, upstream: FakeUpstream) -> None:
    response = chat(sdk(url, "headers"), [{"role": "user", "content": "hello"}])
    assert response.headers["X-Context-Compression"] == "none"
    sent = int(response.headers["X-Context-Tokens-Sent"])
    assert sent == int(response.headers["X-Context-Tokens-Original"])
    assert sent == count_prompt_tokens(upstream.chat_requests()[-1].body)


def test_delete_session(url: str, upstream: FakeUpstream) -> None:
    chat(sdk(url, "doomed"), [{"role": "user", "content": "remember me"}])
    auth = {"authorization": "Bearer client-key"}
    assert httpx.delete(f"{url}/v1/sessions/doomed", headers=auth).json()["deleted"] is True
    assert stored(url, "doomed").status_code == 404
    assert httpx.delete(f"{url}/v1/sessions/doomed", headers=auth).status_code == 404


def test_compression_with_summary_and_preview(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(small_model(upstream))
    upstream.default = Reply(
        respond=lambda body: "The user shared notes." if is_summarizer(body) else "noted"
    )
    client = sdk(url, "long")
    messages: list[dict[str, Any]] = []
    responses = []
    for turn in range(8):
        messages.append({"role": "user", "content": words(90, f"t{turn}w")})
        response = chat(client, messages)
        responses.append(response)
        messages.append(
            {"role": "assistant", "content": response.parse().choices[0].message.content}
        )
    budget = int(0.8 * 1000)
    users = [m for m in messages if m["role"] == "user"]
    for body, user in zip(model_requests(upstream), users, strict=True):
        assert count_prompt_tokens(body) <= budget
        assert body["messages"][-1] == user  # the newest turn, verbatim
    assert responses[-1].headers["X-Context-Compression"] == "summary"
    assert "X-Context-Summary-Age" in responses[-1].headers
    assert int(responses[-1].headers["X-Context-Tokens-Original"]) > budget
    summary_sent = model_requests(upstream)[-1]["messages"][0]["content"]
    assert summary_sent.startswith("Summary of the earlier conversation:\nThe user shared notes.")

    session = stored(url, "long").json()
    assert session["stats"]["messages"] == 16  # nothing was deleted by compression
    assert session["checkpoints"] and session["checkpoints"][-1]["text"].startswith(
        "The user shared notes."
    )
    calls = len(upstream.chat_requests())
    preview = httpx.post(
        f"{url}/v1/sessions/long/preview",
        json={"model": MODEL},
        headers={"authorization": "Bearer client-key"},
    ).json()
    assert preview["budget"] == budget
    assert preview["tokens_sent"] <= budget
    assert preview["messages"][0]["content"].startswith("Summary of the earlier conversation:")
    assert preview["messages"][-1] == messages[-1]
    assert len(upstream.chat_requests()) == calls  # preview called no model
    missing = httpx.post(f"{url}/v1/sessions/nope/preview", json={"model": MODEL})
    assert missing.status_code == 404


def test_summarizer_failure_truncates_and_stores_no_error(
    upstream: FakeUpstream, start_proxy
) -> None:
    url = start_proxy(small_model(upstream))

    def respond(body: dict[str, Any]) -> str | Reply:
        if is_summarizer(body):
            return Reply(status=500, error_message="summarizer down")
        return "noted"

    upstream.default = Reply(respond=respond)
    client = sdk(url, "failing-summary")
    messages: list[dict[str, Any]] = []
    for turn in range(8):
        messages.append({"role": "user", "content": words(90, f"t{turn}w")})
        response = chat(client, messages)
        messages.append({"role": "assistant", "content": "noted"})
    assert response.headers["X-Context-Compression"] == "truncated"
    last = model_requests(upstream)[-1]
    assert count_prompt_tokens(last) <= 800
    assert any("earlier messages omitted" in str(m["content"]) for m in last["messages"])
    assert last["messages"][-1] == messages[-2]
    session = stored(url, "failing-summary").json()
    assert session["checkpoints"] == []
    assert session["stats"]["messages"] == 16


def test_stateless_request_is_fitted_to_budget(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(small_model(upstream))
    messages = [
        {"role": "system", "content": "sys"},
        *[
            {"role": "user" if i % 2 == 0 else "assistant", "content": words(60, f"m{i}w")}
            for i in range(15)
        ],
    ]
    response = chat(sdk(url), messages)
    assert response.headers["X-Context-Compression"] == "truncated"
    [body] = model_requests(upstream)
    assert count_prompt_tokens(body) <= 800
    assert body["messages"][0] == messages[0]
    assert body["messages"][-1] == messages[-1]


def test_context_mode_off_passes_through_untouched(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(small_model(upstream, context={"mode": "off"}))
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": words(60, f"m{i}w")}
        for i in range(15)
    ]
    response = chat(sdk(url, "off"), messages)
    assert "X-Context-Compression" not in response.headers
    assert upstream.chat_requests()[0].body["messages"] == messages


def test_budget_ratio_header(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(small_model(upstream))
    messages = [{"role": "user", "content": words(120, "w")}] * 1 + [
        {"role": "assistant", "content": words(120, "a")},
        {"role": "user", "content": words(120, "u")},
    ]
    tight = sdk(url, **{"X-Context-Budget-Ratio": "0.3"})
    response = chat(tight, messages)
    assert response.headers["X-Context-Compression"] == "truncated"
    assert count_prompt_tokens(upstream.chat_requests()[-1].body) <= 300
    for bad in ("2", "0.01", "lots"):
        with pytest.raises(openai.BadRequestError):
            chat(sdk(url, **{"X-Context-Budget-Ratio": bad}), messages)


def test_a_budget_ratio_header_affects_only_its_own_request(
    upstream: FakeUpstream, start_proxy
) -> None:
    """A tighter budget for one request truncates that request; it makes no summary,
    which every later request, on the configured budget, would have had to use."""
    url = start_proxy(small_model(upstream))
    upstream.default = Reply(
        respond=lambda body: "The user listed words." if is_summarizer(body) else "noted"
    )
    history: list[dict[str, Any]] = []
    for turn in range(4):  # about 350 tokens: under summarize_at (560), over 0.3 × 1000
        history += [
            {"role": "user", "content": words(25, f"t{turn}w")},
            {"role": "assistant", "content": "noted"},
        ]
    history.append({"role": "user", "content": "and now?"})
    tight = chat(sdk(url, "tight", **{"X-Context-Budget-Ratio": "0.3"}), history)
    assert tight.headers["X-Context-Compression"] == "truncated"
    assert count_prompt_tokens(upstream.chat_requests()[-1].body) <= 300
    assert not any(is_summarizer(r.body) for r in upstream.chat_requests())
    assert stored(url, "tight").json()["checkpoints"] == []

    following = [
        *history,
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "ok"},
    ]
    after_tight = chat(sdk(url, "tight"), following)
    chat(sdk(url, "control"), history)
    chat(sdk(url, "control"), following)
    assert after_tight.headers["X-Context-Compression"] == "none"
    sent = model_requests(upstream)
    assert sent[1]["messages"] == sent[3]["messages"] == following


def test_output_reservation_and_overflow(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(small_model(upstream))
    client = sdk(url)
    messages = [
        {"role": "user", "content": words(100, "a")},
        {"role": "assistant", "content": words(100, "b")},
        {"role": "user", "content": "short"},
    ]
    chat(client, messages, max_tokens=900)  # 1000 - 900 leaves 100 tokens for input
    assert count_prompt_tokens(upstream.chat_requests()[-1].body) <= 100
    with pytest.raises(openai.BadRequestError) as caught:
        chat(client, messages, max_tokens=1000)
    assert caught.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        chat(client, [{"role": "system", "content": words(900, "s")}, messages[-1]])


def test_streamed_reply_is_stored_only_when_complete(url: str, upstream: FakeUpstream) -> None:
    client = sdk(url, "streamed")
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "tell me"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: tell me"
    assert [m["content"] for m in stored(url, "streamed").json()["messages"]] == [
        "tell me",
        "echo: tell me",
    ]
    upstream.queue(Reply(content="a b c d e f", fail_after_chunks=3))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "again"}], "stream": True}
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json=body,
        headers={SESSION: "streamed", "authorization": "Bearer client-key"},
    ) as response:
        lines = list(response.iter_lines())
    assert "data: [DONE]" not in lines
    # The cut-off turn is not stored as if it had completed.
    assert stored(url, "streamed").json()["stats"]["messages"] == 2


def test_background_summary_is_ready_for_the_next_request(
    upstream: FakeUpstream, start_proxy
) -> None:
    url = start_proxy(small_model(upstream))
    upstream.default = Reply(
        respond=lambda body: "The user shared notes." if is_summarizer(body) else "noted"
    )
    client = sdk(url, "ahead")
    messages: list[dict[str, Any]] = []

    def summarizer_calls() -> int:
        return len(upstream.chat_requests()) - len(model_requests(upstream))

    def past_summarize_at() -> bool:
        """The stored session (its reply included) passes `summarize_at` of what the
        system prompt leaves of the budget, by the proxy's own count."""
        record = plans(url, "ahead")[-1]
        base = record["parts"][0]["tokens"]
        [total] = stored(url, "ahead").json()["stats"]["tokens"].values()
        return base + total > base + SUMMARIZE_AT * (record["budget"] - base)

    for turn in range(12):
        messages.append({"role": "user", "content": words(40, f"t{turn}w")})
        response = chat(client, messages)
        messages.append({"role": "assistant", "content": "noted"})
        if past_summarize_at():
            break
        assert not summarizer_calls()
    # A background summary starts after the turn that passed it; that turn itself
    # fitted, uncompressed.
    eventually(summarizer_calls, "a background summary to start")
    assert response.headers["X-Context-Compression"] == "none"
    assert int(response.headers["X-Context-Tokens-Sent"]) <= 800
    eventually(lambda: stored(url, "ahead").json()["checkpoints"], "the summary to be stored")
    made = summarizer_calls()
    messages.append({"role": "user", "content": words(40, "next")})
    response = chat(client, messages)
    assert summarizer_calls() == made  # nothing to wait for: the summary was ready
    assert response.headers["X-Context-Compression"] == "summary"


def test_summary_model_writes_the_summaries(upstream: FakeUpstream, start_proxy) -> None:
    config = small_model(upstream, context={"summary_model": "cheap"})
    config["model_list"].append(
        {
            "model_name": "cheap",
            "litellm_params": {
                "model": "openai/cheap-summarizer",
                "api_base": upstream.base_url,
                "api_key": "sk-cheap",
            },
            "model_info": {"max_input_tokens": 8000},
        }
    )
    url = start_proxy(config)
    upstream.default = Reply(respond=lambda body: "Short summary." if is_summarizer(body) else "ok")
    client = sdk(url, "cheap-summaries")
    messages: list[dict[str, Any]] = []
    for turn in range(8):
        messages.append({"role": "user", "content": words(90, f"t{turn}w")})
        chat(client, messages)
        messages.append({"role": "assistant", "content": "ok"})
    summarizer_models = {r.body["model"] for r in upstream.chat_requests() if is_summarizer(r.body)}
    chat_models = {body["model"] for body in model_requests(upstream)}
    assert summarizer_models == {"cheap-summarizer"}
    assert chat_models == {MODEL}


def test_replicas_sharing_redis_make_one_background_summary(
    upstream: FakeUpstream, start_proxy, redis_url: str
) -> None:
    """Two proxies on one Redis store: a session's background summary is made once."""
    shared = {
        "store": "redis",
        "redis_url": redis_url,
        "tenant_secret": "shared-secret",
    }
    first = start_proxy(small_model(upstream, session=shared))
    second = start_proxy(small_model(upstream, session=shared))

    def respond(body: dict[str, Any]) -> str | Reply:
        if is_summarizer(body):  # slow enough that both replicas want to summarize meanwhile
            return Reply(content="The user shared notes.", stall_seconds=1.5)
        return "noted"

    upstream.default = Reply(respond=respond)
    session = f"replicated-{uuid.uuid4().hex}"
    messages: list[dict[str, Any]] = []
    # Turns alternate between the replicas; the fourth crosses summarize_at (0.7 × 800)
    # on the second replica, whose summary is still being made when the first replica
    # gets a short fifth turn that also wants one (still within the budget: no sync
    # summary is needed).
    for turn in range(5):
        text = words(40, f"t{turn}w") if turn < 4 else "and one more thing?"
        messages.append({"role": "user", "content": text})
        url = first if turn % 2 == 0 else second
        assert chat(sdk(url, session), messages).headers["X-Context-Compression"] == "none"
        messages.append({"role": "assistant", "content": "noted"})
    # Both replicas' background tasks have finished or given way: the summary is stored
    # and the upstream is answering nothing.
    eventually(
        lambda: stored(first, session).json()["checkpoints"] and upstream.in_flight == 0,
        "the background summary",
    )
    summarized: list[str] = []
    for request in upstream.chat_requests():
        if is_summarizer(request.body):
            new_part = request.body["messages"][-1]["content"].split("</previous_summary>")[-1]
            summarized += re.findall(r"\bt(\d+)w0\b", new_part)
    assert summarized, "a background summary was made"
    # Without a shared lock the second replica folds the same turns again meanwhile.
    assert len(summarized) == len(set(summarized)), summarized
    httpx.delete(f"{first}/v1/sessions/{session}", headers={"authorization": "Bearer client-key"})
