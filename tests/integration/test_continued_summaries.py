"""A fold asked of the session's last prompt as its next turn (issue 54): on Claude through
the Messages door, as Claude Code talks to it, and on GPT-4.1 through the chat door, the
summarizer's request is the prompt the session last sent, byte for byte, with the task
appended, so the provider reads it from its cache; the summary it writes is the
session's from then on. Through the real SDKs to the loopback upstream, whose prompt
caches report what they read. Turns are long enough (about 400 tokens) that the fold
made ahead comes while the prompt and the task still fit the budget, which every
request the proxy sends does (a prompt nearer the budget is folded apart)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

from proxy.summary.fold import CONTINUATION_TASK
from tests.integration.test_messages import CLAUDE, claude_config
from tests.integration.test_prompt_cache import EPHEMERAL, KEY, said
from tests.proxies import UPSTREAM_KEY, proxy_config
from tests.summarizing import apart, asks_summary, continued
from tests.upstream import FakeUpstream, Received, Reply

GIST = "The user sent numbered notes, one a turn."
WINDOW = 8192


def answer(body: dict[str, Any]) -> str:
    return GIST if asks_summary(body) else "Noted."


def folded(requests: list[Received]) -> tuple[Received, Received, list[Received]]:
    """The first continued summary call, the turn whose prompt it continued (one sent
    before it whose turns are all of its own but the last: a summary made ahead may go
    after the next turn was sent), and the turns after it."""
    at = next(i for i, r in enumerate(requests) if continued(r.body))
    turns = _turns(requests[at].body)[:-1]
    before = [r for r in requests[:at] if not asks_summary(r.body) and _turns(r.body) == turns]
    after = [r for r in requests[at + 1 :] if not asks_summary(r.body)]
    assert before, "the continued prompt is none a turn sent"
    return requests[at], before[-1], after


def summary_sent(requests: list[Received]) -> bool:
    """Whether a turn after the first continued summary call sent its text (a summary
    made ahead, in the background, may land a turn or two late)."""
    at = next((i for i, r in enumerate(requests) if continued(r.body)), None)
    later = [] if at is None else requests[at + 1 :]
    return any(GIST in json.dumps(r.body) for r in later if not asks_summary(r.body))


def _turns(body: dict[str, Any]) -> list[Any]:
    return list(body.get("messages") or body.get("input") or [])


def test_claude_code_s_session_folds_by_continuing_its_cached_prompt(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """Claude Code marks its system prompt and its last message: the continuation carries
    the same system, tools and messages with one more user turn, and Anthropic's cache
    reads nearly all of it (a tenth of the input price); the next turns send its text."""
    upstream.default = Reply(respond=answer)
    url = start_proxy(claude_config(upstream, window=WINDOW))
    sdk = anthropic.Anthropic(
        base_url=url, api_key=KEY, max_retries=0, default_headers={"X-Session-Id": "cc-fold"}
    )
    system = [{"type": "text", "text": "Rules. " * 300, "cache_control": EPHEMERAL}]
    tools = [
        {"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}
    ]
    history: list[dict[str, Any]] = []
    for turn in range(80):
        text = {"type": "text", "text": said(turn, 120)}
        last = {"role": "user", "content": [text | {"cache_control": EPHEMERAL}]}
        reply = sdk.messages.create(
            model=CLAUDE, max_tokens=50, system=system, tools=tools, messages=[*history, last]
        )
        history += [
            {"role": "user", "content": [text]},
            {"role": "assistant", "content": [{"type": "text", "text": reply.content[0].text}]},
        ]
        if summary_sent(upstream.messages_requests()):
            break
    requests = upstream.messages_requests()
    summary, previous, after = folded(requests)
    assert after, "no turn after the fold"
    body, sent = summary.body, previous.body
    assert (body["system"], body["tools"]) == (sent["system"], sent["tools"])
    assert body["messages"][:-1] == sent["messages"]  # the prompt as it was sent
    task = body["messages"][-1]
    assert task["role"] == "user" and CONTINUATION_TASK in json.dumps(task)
    usage = summary.usage
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    prompt += usage["cache_creation_input_tokens"]
    assert usage["cache_read_input_tokens"] >= 0.9 * prompt, usage
    assert summary_sent(requests)  # the session's summary from then on
    first = next(r for r in requests if asks_summary(r.body))
    assert continued(first.body) and not apart(first.body)  # the first fold, on a warm cache


def test_a_chat_session_on_gpt_4_1_folds_by_continuing_its_cached_prompt(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """OpenAI's cache keeps every prefix of 1,024 tokens or more: the continuation reads
    all of the previous prompt that it kept, in 128-token steps."""
    upstream.default = Reply(respond=answer)
    entry = {
        "model_name": "gpt-4.1",
        "litellm_params": {
            "model": "openai/gpt-4.1",
            "api_base": upstream.base_url,
            "api_key": UPSTREAM_KEY,
        },
        "model_info": {"max_input_tokens": WINDOW, "max_output_tokens": 512},
    }
    url = start_proxy(proxy_config(upstream, model_list=[entry]))
    sdk = openai.OpenAI(
        base_url=f"{url}/v1", api_key=KEY, max_retries=0, default_headers={"X-Session-Id": "gpt"}
    )
    history: list[dict[str, Any]] = [{"role": "system", "content": "Rules. " * 300}]
    for turn in range(80):
        history.append({"role": "user", "content": said(turn, 120)})
        reply = sdk.chat.completions.create(model="gpt-4.1", messages=history, max_tokens=50)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
        if summary_sent(upstream.chat_requests()):
            break
    summary, previous, after = folded(upstream.chat_requests())
    assert after, "no turn after the fold"
    assert summary.body["messages"][:-1] == previous.body["messages"]
    assert summary.body.get("prompt_cache_key") == previous.body["prompt_cache_key"]
    kept = previous.usage["prompt_tokens"]
    kept = 1024 + (kept - 1024) // 128 * 128
    assert summary.usage["prompt_tokens_details"]["cached_tokens"] >= kept
    assert summary_sent(upstream.chat_requests())


def test_a_responses_session_folds_by_continuing_its_cached_prompt(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """Codex's shape: the Responses door to OpenAI's own Responses API, the whole input
    resent each turn under the thread's `prompt_cache_key`: the continuation is the same
    instructions and input with one more user item, read from the cache."""
    upstream.default = Reply(respond=answer)
    entry = {
        "model_name": "gpt-5-mini",
        "litellm_params": {
            "model": "openai/gpt-5-mini",
            "api_base": upstream.base_url,
            "api_key": UPSTREAM_KEY,
        },
        "model_info": {"native_api": True, "max_input_tokens": WINDOW, "max_output_tokens": 512},
    }
    url = start_proxy(proxy_config(upstream, model_list=[entry]))
    client = openai.OpenAI(
        base_url=f"{url}/v1", api_key=KEY, max_retries=0, default_headers={"X-Session-Id": "cx"}
    )
    items: list[dict[str, Any]] = []
    for turn in range(80):
        items.append({"role": "user", "content": said(turn, 120)})
        reply = client.responses.create(
            model="gpt-5-mini",
            instructions="Rules. " * 300,
            input=items,  # type: ignore[arg-type]
            prompt_cache_key="codex-thread",
            store=False,
        )
        items.append({"role": "assistant", "content": reply.output_text})
        if summary_sent(upstream.responses_requests()):
            break
    summary, previous, after = folded(upstream.responses_requests())
    assert after, "no turn after the fold"
    assert summary.body["instructions"] == previous.body["instructions"]
    assert summary.body["input"][:-1] == previous.body["input"]
    assert summary.body["prompt_cache_key"] == previous.body["prompt_cache_key"]
    kept = previous.usage["input_tokens"]
    kept = 1024 + (kept - 1024) // 128 * 128
    assert summary.usage["input_tokens_details"]["cached_tokens"] >= kept
    assert summary_sent(upstream.responses_requests())
