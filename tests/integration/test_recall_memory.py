"""Nothing said earlier is lost: recall of summarized history, the facts ledger, and memory
across sessions, end to end through the openai SDK, on both stores."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import openai

from proxy.memory.facts import MEMORY_PREFIX, MEMORY_RECALL_PREFIX
from proxy.recall.index import RECALL_PREFIX
from proxy.summary.message import PINNED_LABEL
from tests.benchmarks.scorecard import SYSTEM, TOOLS, drive, generate, probed, respond
from tests.proxies import MODEL, proxy_config
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, Reply, count_prompt_tokens, text_tokens

WINDOW = 4096


def start(start_proxy, upstream: FakeUpstream, **sections: dict[str, Any]) -> str:
    config = proxy_config(upstream, **sections)
    config["model_list"][0]["model_info"] = {"max_input_tokens": WINDOW}
    upstream.default = Reply(respond=respond)
    return start_proxy(config)


def client(
    url: str, session: str, key: str = "tenant-a-key-0123456789", **headers: str
) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/v1",
        api_key=key,
        max_retries=0,
        default_headers={"X-Session-Id": session, **headers},
    )


def model_calls(upstream: FakeUpstream) -> list[dict[str, Any]]:
    bodies = [r.body for r in upstream.chat_requests()]
    return [b for b in bodies if not asks_summary(b)]


def recall_block(body: dict[str, Any]) -> str | None:
    for message in body["messages"]:
        if message["role"] == "system" and str(message["content"]).startswith(RECALL_PREFIX):
            return str(message["content"])
    return None


def test_summarized_facts_come_back_when_the_conversation_turns_to_them(
    upstream: FakeUpstream, start_proxy, store: dict[str, Any]
) -> None:
    session = f"recall-{store.get('store', 'disk')}"
    url = start(start_proxy, upstream, session=store)
    script = generate(turns=120, facts=12, updates=4)
    probes = drive(client(url, session), MODEL, script)
    bodies = model_calls(upstream)

    for fact, at in zip(script.facts, probes, strict=True):
        body = bodies[at]
        text = str(body["messages"])
        assert fact.answer in text, fact  # the current value reaches the model
        assert count_prompt_tokens(body) <= int(0.8 * WINDOW)
        # The client's system prompt and the summary lead; recall never splits a unit.
        assert body["messages"][0] == SYSTEM
        assert body["messages"][1]["content"].startswith("Summary of the earlier conversation")
        calls = {c["id"] for m in body["messages"] for c in m.get("tool_calls") or []}
        assert calls == {m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"}
    # The planting sentence of a fact the summary folded comes back verbatim, in the
    # labelled block just before the newest turn.
    recalled = [recall_block(bodies[at]) for at in probes]
    assert sum(block is not None for block in recalled) >= len(probes) // 2
    first = next(block for block in recalled if block is not None)
    assert any(sentence in first for fact in script.facts for sentence in fact.sentences)
    body = bodies[probes[recalled.index(first)]]
    assert body["messages"][-2]["content"] == first
    # An updated value is pinned after the summary; where a replaced one shows, the
    # current one shows after it.
    updated = [fact for fact in script.facts if len(fact.values) > 1]
    summary = bodies[-1]["messages"][1]["content"]
    assert PINNED_LABEL in summary
    for fact in updated:
        assert not probed(fact, bodies[-1]["messages"])[1], fact

    # People and tools can search the whole session.
    fact = script.facts[0]
    with httpx.Client(
        base_url=url, headers={"Authorization": "Bearer tenant-a-key-0123456789"}
    ) as http:
        found = http.get(f"/v1/sessions/{session}/search", params={"q": fact.subject})
        assert found.status_code == 200
        top = [str(match["messages"]) for match in found.json()["data"][:3]]
        assert any(fact.values[0] in text for text in top), top  # where it was said
        assert http.get(f"/v1/sessions/{session}/search", params={"q": " "}).status_code == 400
    with httpx.Client(base_url=url, headers={"Authorization": "Bearer other"}) as http:
        assert http.get(f"/v1/sessions/{session}/search?q=x").status_code == 404


def test_a_large_message_beside_the_kept_window_stays_within_the_budget(
    upstream: FakeUpstream, start_proxy
) -> None:
    """Issue 52: in a 150-turn chat with tool calls to a 4,096-token model, a user message
    of about 2,000 tokens arrives beside a window of kept turns (and recall fills what
    they leave): every request the model receives is within the budget, by the
    provider's own count, not only by the proxy's."""
    url = start(start_proxy, upstream)
    script = generate(turns=150, facts=12, updates=4)
    pasted = "Here is the incident log, read it before answering. " + " ".join(
        f"line {n}: worker {n % 7} retried the ledger sync after timeout {n * 13 % 97}s;"
        for n in range(110)
    )
    assert 1800 <= len(text_tokens(pasted)) <= 2600
    script.turns.insert(100, pasted)
    drive(client(url, "pasted"), MODEL, script)
    sizes = [count_prompt_tokens(body) for body in model_calls(upstream)]
    assert any(pasted in str(body["messages"]) for body in model_calls(upstream))
    assert max(sizes) <= int(0.8 * WINDOW), sorted(sizes)[-5:]


def test_a_recall_block_that_still_shows_the_best_hits_keeps_its_place_and_bytes(
    upstream: FakeUpstream, start_proxy
) -> None:
    """A new block goes just before the newest turn; while the best hits stay the ones it
    shows, the next request carries the same block at the same place, so the whole
    prompt up to and including it is what a provider's cache has already seen."""
    url = start(start_proxy, upstream)
    drive(client(url, "steady"), MODEL, generate(turns=120, facts=12, updates=4))
    bodies = model_calls(upstream)
    kept = made = 0
    for before, after in itertools.pairwise(bodies):
        block = recall_block(after)
        if block is None:
            continue
        at = next(i for i, m in enumerate(after["messages"]) if m["content"] == block)
        if block == recall_block(before) and before["messages"][1] == after["messages"][1]:
            kept += 1
            assert before["messages"][: at + 1] == after["messages"][: at + 1]
        else:
            made += 1
            newest = after["messages"][at + 1 :]
            assert newest[0]["role"] in {"user", "assistant"}
            assert all(m["role"] == "tool" for m in newest[1:])
    assert kept and made, (kept, made)


def test_a_recall_ratio_of_zero_turns_recall_off(upstream: FakeUpstream, start_proxy) -> None:
    url = start(start_proxy, upstream, context={"recall_ratio": 0})
    drive(client(url, "no-recall"), MODEL, generate(turns=80, facts=6, updates=2))
    bodies = model_calls(upstream)
    assert any(b["messages"][1]["content"].startswith("Summary") for b in bodies)
    assert all(recall_block(body) is None for body in bodies)


def ask(chat: openai.OpenAI, text: str) -> None:
    chat.chat.completions.create(
        model=MODEL, messages=[SYSTEM, {"role": "user", "content": text}], tools=TOOLS
    )


def memory_block(body: dict[str, Any]) -> str | None:
    second = body["messages"][1]
    if second["role"] == "system" and str(second["content"]).startswith(MEMORY_PREFIX):
        return str(second["content"])
    return None


def test_memory_carries_current_facts_to_a_new_session(
    upstream: FakeUpstream, start_proxy, store: dict[str, Any]
) -> None:
    url = start(
        start_proxy,
        upstream,
        session=store,
        memory={"enabled": True},
        auth={"keys": [{"key": "tenant-a-key-0123456789"}, {"key": "tenant-b-key-0123456789"}]},
    )
    memory = {"X-Memory-Id": "team-memory"}
    first = client(url, "monday", **memory)
    history: list[dict[str, Any]] = [SYSTEM]
    for text in [
        "For the record, the billing lead is Maria Chen.",
        "The travel budget is $4,250.",
        "Change of plan: the travel budget is now $3,796.",
    ]:
        history.append({"role": "user", "content": text})
        reply = first.chat.completions.create(model=MODEL, messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})

    ask(client(url, "tuesday", **memory), "What is the travel budget these days?")
    block = memory_block(model_calls(upstream)[-1])
    assert block is not None
    assert "travel budget: $3,796" in block and "$4,250" not in block
    assert "billing lead: Maria Chen" in block

    with httpx.Client(
        base_url=url, headers={"Authorization": "Bearer tenant-a-key-0123456789"}
    ) as http:
        # A preview plans with the memory the turn would (issue 52): the same block.
        said = http.get("/v1/sessions/tuesday").json()["messages"]
        question = {"role": "user", "content": "And the billing lead?"}
        previewed = http.post(
            "/v1/sessions/tuesday/preview",
            json={"model": MODEL, "messages": [SYSTEM, *said, question]},
            headers=memory,
        ).json()["messages"]
        assert memory_block({"messages": previewed}) == block
        facts = http.get("/v1/memories/team-memory").json()["facts"]
        old = next(f for f in facts if f["value"] == "$4,250")
        assert old["superseded_by"] == "$3,796"
        assert {f["session"] for f in facts} == {"monday"}
    with httpx.Client(
        base_url=url, headers={"Authorization": "Bearer tenant-b-key-0123456789"}
    ) as http:
        assert http.get("/v1/memories/team-memory").status_code == 404  # another tenant
        assert http.delete("/v1/memories/team-memory").status_code == 404
    # Another tenant's session with the same memory id gets nothing of it.
    ask(
        client(url, "wednesday", key="tenant-b-key-0123456789", **memory),
        "What is the travel budget?",
    )
    assert memory_block(model_calls(upstream)[-1]) is None

    with httpx.Client(
        base_url=url, headers={"Authorization": "Bearer tenant-a-key-0123456789"}
    ) as http:
        assert http.delete("/v1/memories/team-memory").json()["deleted"] is True
        assert http.get("/v1/memories/team-memory").status_code == 404
    ask(client(url, "thursday", **memory), "What is the travel budget these days?")
    assert memory_block(model_calls(upstream)[-1]) is None


def test_memory_is_off_by_default(upstream: FakeUpstream, start_proxy) -> None:
    url = start(start_proxy, upstream)
    ask(client(url, "one", **{"X-Memory-Id": "m"}), "The travel budget is $4,250.")
    ask(client(url, "two", **{"X-Memory-Id": "m"}), "What is the travel budget?")
    assert memory_block(model_calls(upstream)[-1]) is None
    with httpx.Client(base_url=url) as http:
        assert http.get("/v1/memories/m").status_code == 404


def test_the_memory_block_stays_put_while_the_memory_does_not_change(
    upstream: FakeUpstream, start_proxy
) -> None:
    url = start(start_proxy, upstream, memory={"enabled": True, "per_tenant": True})
    ask(client(url, "a"), "For the record, the billing lead is Maria Chen.")
    ask(client(url, "a2"), "And the search lead is Jonas Novak.")
    chat = client(url, "b")
    history: list[dict[str, Any]] = [SYSTEM]
    for text in ["Who leads search?", "Anything about billing?", "What about lunch?"]:
        history.append({"role": "user", "content": text})
        reply = chat.chat.completions.create(model=MODEL, messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    blocks = [memory_block(body) for body in model_calls(upstream)[-3:]]
    assert blocks[0] is not None and "Maria Chen" in blocks[0] and "Jonas Novak" in blocks[0]
    assert blocks[0] == blocks[1] == blocks[2]  # a stable prefix for the provider's cache


def memory_recall_block(body: dict[str, Any]) -> str | None:
    blocks = [
        str(m["content"])
        for m in body["messages"]
        if m["role"] == "system" and str(m["content"]).startswith(MEMORY_RECALL_PREFIX)
    ]
    return blocks[0] if blocks else None


def test_memory_recalls_verbatim_what_no_fact_was_read_from(
    upstream: FakeUpstream, start_proxy, store: dict[str, Any]
) -> None:
    """A statement the ledger cannot read (hearsay, here) is still found in the memory's
    other session, verbatim, just before the newest message; another tenant's session
    with the same memory id gets nothing of it."""
    url = start(
        start_proxy,
        upstream,
        session=store,
        memory={"enabled": True},
        auth={"keys": [{"key": "tenant-a-key-0123456789"}, {"key": "tenant-b-key-0123456789"}]},
    )
    memory = {"X-Memory-Id": "team"}
    said = "Nobody wrote it down, but Jonas says the harbor codename is BLUE HERON."
    chat = client(url, "monday", **memory)
    history: list[dict[str, Any]] = [SYSTEM]
    for text in [said, "Let's talk about lunch.", "The billing lead is Maria Chen."]:
        history.append({"role": "user", "content": text})
        reply = chat.chat.completions.create(model=MODEL, messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    with httpx.Client(
        base_url=url, headers={"Authorization": "Bearer tenant-a-key-0123456789"}
    ) as http:
        record = http.get("/v1/memories/team").json()
    assert all("HERON" not in fact["value"] for fact in record["facts"])  # not a fact
    # What the session said counts its first turn and the turns that stated facts.
    assert record["sessions"] == {"monday": 4}

    ask(client(url, "tuesday", **memory), "What was the harbor codename again?")
    body = model_calls(upstream)[-1]
    block = memory_recall_block(body)
    assert block is not None and said in block, body["messages"]
    assert body["messages"][-2]["content"] == block  # just before the newest message
    assert "Let's talk about lunch" not in block

    ask(
        client(url, "wednesday", key="tenant-b-key-0123456789", **memory),
        "What was the harbor codename?",
    )
    assert memory_recall_block(model_calls(upstream)[-1]) is None
