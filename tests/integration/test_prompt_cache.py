"""Compaction that pays, seen from the provider: between folds the prompt's head is
byte-stable; a session's turns mark Anthropic's cache where the client's marks leave
room and share one OpenAI `prompt_cache_key`; a fold waits while the cache is warm and
the budget does not force it, and comes early once the cache went cold. Through the real
SDKs to the loopback upstream, whose prompt caches report what they kept."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson

from proxy.summary.message import SUMMARY_PREFIX
from tests.clock import Clock
from tests.integration.test_messages import CLAUDE, claude_config
from tests.integration.test_native_responses import NATIVE, native_config
from tests.integration.test_responses import sdk
from tests.proxies import UPSTREAM_KEY, proxy_config, serving
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, running_upstream

EPHEMERAL = {"type": "ephemeral"}
KEY = "client-key"


def marks(body: dict[str, Any]) -> list[str]:
    """Where a Messages request sets cache marks: "tools", "system", or the index of the
    message whose last block is marked."""
    found = ["tools" for tool in body.get("tools") or () if "cache_control" in tool]
    found += ["system" for block in body.get("system") or () if "cache_control" in block]
    for index, message in enumerate(body["messages"]):
        content = message["content"]
        for block in content if isinstance(content, list) else ():
            found += [str(index)] if "cache_control" in block else []
            for inner in block.get("content") if isinstance(block.get("content"), list) else ():
                found += [str(index)] if "cache_control" in inner else []
    return found


def is_summarizer(body: dict[str, Any]) -> bool:
    return asks_summary(body)


def turns(upstream: FakeUpstream) -> list[dict[str, Any]]:
    """The Messages requests that were turns (the summarizer's calls left out)."""
    return [r.body for r in upstream.messages_requests() if not is_summarizer(r.body)]


def summaries(upstream: FakeUpstream) -> int:
    return sum(is_summarizer(r.body) for r in upstream.messages_requests())


def chat(url: str, session: str | None) -> openai.OpenAI:
    headers = {"X-Session-Id": session} if session else {}
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key=KEY, max_retries=0, default_headers=headers, timeout=30
    )


def said(turn: int, words: int = 120) -> str:
    return f"Turn {turn}: " + " ".join(f"note{turn}x{i}" for i in range(words))


def talk(
    sdk: openai.OpenAI, model: str, count: int, history: list[dict[str, Any]], words: int = 120
) -> None:
    """`count` more turns of a full-resend chat client (its whole history every time)."""
    for _ in range(count):
        history.append({"role": "user", "content": said(len(history) // 2, words)})
        reply = sdk.chat.completions.create(model=model, messages=history, max_tokens=50)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})


def test_a_chat_session_marks_claudes_cache_and_reads_it_back(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """A chat client that sets no marks: each turn to Claude marks the end of the system
    messages and its last message; the next turn reads all of the one before from the
    cache, and the proxy's own usage record says so."""
    url = start_proxy(claude_config(upstream))
    sdk = chat(url, "claude-marks")
    history: list[dict[str, Any]] = [{"role": "system", "content": "Rules. " * 400}]
    talk(sdk, CLAUDE, 3, history)
    sent = turns(upstream)
    for body in sent:
        assert marks(body) == ["system", str(len(body["messages"]) - 1)]
    usage = [r.usage for r in upstream.messages_requests()]
    assert usage[0]["cache_read_input_tokens"] == 0 and usage[0]["cache_creation_input_tokens"] > 0
    for before, after in itertools.pairwise(usage):
        written = before["cache_read_input_tokens"] + before["cache_creation_input_tokens"]
        assert after["cache_read_input_tokens"] == written  # all of the turn before


def test_a_client_that_marks_its_own_keeps_its_caching(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """Claude Code marks its system prompt and its last message itself: the request goes
    as it came, with no mark of the proxy's; one that marks nothing gets the proxy's."""
    url = start_proxy(claude_config(upstream))
    sdk = anthropic.Anthropic(
        base_url=url, api_key=KEY, max_retries=0, default_headers={"X-Session-Id": "cc"}
    )
    system = [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]
    last = {"type": "text", "text": "What now?", "cache_control": EPHEMERAL}
    messages: list[Any] = [{"role": "user", "content": [last]}]
    sdk.messages.create(model=CLAUDE, max_tokens=50, system=system, messages=messages)
    body = turns(upstream)[-1]
    assert body["system"] == system and body["messages"] == messages

    sdk = anthropic.Anthropic(
        base_url=url, api_key=KEY, max_retries=0, default_headers={"X-Session-Id": "plain"}
    )
    messages = [{"role": "user", "content": "What now?"}]
    sdk.messages.create(model=CLAUDE, max_tokens=50, system="Rules.", messages=messages)
    body = turns(upstream)[-1]
    assert body["system"] == [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]
    assert body["messages"] == [{"role": "user", "content": [last]}]


def test_never_more_than_four_marks_reach_claude(upstream: FakeUpstream, start_proxy: Any) -> None:
    """Marks are counted as the JSON parser reads the body: a key spelled with escapes
    (`"cache\\u005fcontrol"`) is a mark, so the proxy adds none past Anthropic's four; a
    client's own fifth mark is a 400 before the provider is paid."""
    url = start_proxy(claude_config(upstream))
    headers = {"content-type": "application/json", "x-api-key": KEY, "x-session-id": "escaped"}
    block = {"type": "text", "text": "Rule.", "cache_control": EPHEMERAL}
    system = orjson.dumps([block] * 4).replace(b"cache_control", b"cache\\u005fcontrol")
    messages = b'[{"role":"user","content":"What now?"}]'
    body = b'{"model":"%s","max_tokens":50,"system":%s,"messages":%s}' % (
        CLAUDE.encode(),
        system,
        messages,
    )
    answer = httpx.post(f"{url}/v1/messages", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert len(marks(turns(upstream)[-1])) == 4
    sent = len(upstream.messages_requests())
    five = orjson.loads(body)
    five["messages"][0]["content"] = [
        {"type": "text", "text": "What now?", "cache_control": EPHEMERAL}
    ]
    for session in ("escaped", None):
        extra = {"x-session-id": session} if session else {}
        refused = httpx.post(
            f"{url}/v1/messages", content=orjson.dumps(five), headers=headers | extra
        )
        assert refused.status_code == 400, refused.text
        assert "cache_control" in refused.json()["error"]["message"]
    assert len(upstream.messages_requests()) == sent


def test_a_sessions_turns_share_one_prompt_cache_key(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """OpenAI routes a request to its cache by `prompt_cache_key`: a session's turns get
    one of their own (naming neither session nor tenant); a client's own key is made its
    tenant's (the same for the same key); a request of no session gets none."""
    url = start_proxy(proxy_config(upstream, model_list=[_gpt(upstream)]))
    talk(chat(url, "keyed"), "gpt-4.1", 2, [])
    keys = [r.body.get("prompt_cache_key") for r in upstream.chat_requests()]
    assert keys[0] == keys[1] and keys[0] is not None and "keyed" not in keys[0]
    own = []
    for session in ("other", "another", None):
        chat(url, session).chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], prompt_cache_key="mine"
        )
        own.append(upstream.chat_requests()[-1].body["prompt_cache_key"])
    assert own[0] == own[1] == own[2] and "mine" not in own[0] and own[0] != keys[0]
    chat(url, None).chat.completions.create(
        model="gpt-4.1", messages=[{"role": "user", "content": "hi"}]
    )
    assert "prompt_cache_key" not in upstream.chat_requests()[-1].body


def test_no_caller_reaches_another_tenants_cache_key(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """A provider's cache reports the tokens it read, so a key that reached another
    tenant's entries would let a caller probe their prompts: tenant B sending tenant A's
    session key (whatever A's turns carried), or the same key A chose, gets keys of its
    own; every key is made with the deployment's secret, so knowing the session and the
    tenant is not enough to make one."""
    keys = [
        {"key": "sk-tenant-a-0123456789abcdef", "tenant": "team-a"},
        {"key": "sk-tenant-b-0123456789abcdef", "tenant": "team-b"},
    ]
    url = start_proxy(proxy_config(upstream, model_list=[_gpt(upstream)], auth={"keys": keys}))

    def send(key: str, session: str | None, **extra: Any) -> str:
        client = openai.OpenAI(
            base_url=f"{url}/v1",
            api_key=key,
            max_retries=0,
            default_headers={"X-Session-Id": session} if session else {},
        )
        messages = [{"role": "user", "content": "hi"}]
        client.chat.completions.create(model="gpt-4.1", messages=messages, **extra)
        return str(upstream.chat_requests()[-1].body["prompt_cache_key"])

    a_session = send("sk-tenant-a-0123456789abcdef", "ticket-1")
    a_own = send("sk-tenant-a-0123456789abcdef", None, prompt_cache_key="shared-name")
    unkeyed = "ctx-" + hashlib.sha256(b"team-a\0ticket-1").hexdigest()[:32]  # issue 51's
    assert a_session != unkeyed
    for probe in (a_session, a_own, "shared-name", unkeyed):
        sent = send("sk-tenant-b-0123456789abcdef", "ticket-1", prompt_cache_key=probe)
        assert sent not in (a_session, a_own, probe)
    assert send("sk-tenant-b-0123456789abcdef", "ticket-1") != a_session


def test_a_responses_session_gets_its_key_on_the_providers_own_api(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """The Responses door to OpenAI's own Responses API: the session's turns carry its
    key; Codex, which sets `prompt_cache_key` itself, keeps one key for its thread (made
    its tenant's)."""
    url = start_proxy(native_config(upstream))
    client = sdk(url, **{"X-Session-Id": "responses-keyed"})
    first = client.responses.create(model=NATIVE, input="Hello.")
    client.responses.create(model=NATIVE, input="And again.", previous_response_id=first.id)
    keys = [r.body.get("prompt_cache_key") for r in upstream.responses_requests()]
    assert len(keys) == 2 and keys[0] == keys[1] and str(keys[0]).startswith("ctx-")
    for _ in range(2):
        sdk(url).responses.create(model=NATIVE, input="Hi.", prompt_cache_key="codex-thread-1")
    own = [r.body["prompt_cache_key"] for r in upstream.responses_requests()[-2:]]
    assert own[0] == own[1] and own[0].startswith("ctx-") and own[0] != keys[0]


def test_a_warm_claude_prefix_is_folded_only_when_the_budget_forces_it(tmp_path: Path) -> None:
    """Cache reads at a tenth of the input price never pay for rewriting a warm prefix:
    past `summarize_at` the turns keep appending to the same cached head until the
    budget is two turns away, where `cache_aware: false` folds at `summarize_at`."""
    window = 8192
    first_fold = {}
    for aware in (True, False):
        with running_upstream() as fake:
            config = claude_config(fake, window=window, context={"cache_aware": aware})
            directory = tmp_path / str(aware)
            directory.mkdir()
            with serving(config, directory) as url:
                history: list[dict[str, Any]] = []
                for count in range(1, 80):  # short turns: ~190 tokens each
                    talk(chat(url, "fold"), CLAUDE, 1, history, words=20)
                    if summaries(fake):
                        first_fold[aware] = count
                        break
                heads = [_head(body) for body in turns(fake)]
                # Until the fold, every turn's head (system and summary) is the same bytes.
                assert len(set(heads[:-1])) <= 1
    # summarize_at (0.7) is ~10 turns before the budget's last two: the warm prefix was
    # kept for most of them (a background fold may land a turn late: +-1).
    assert first_fold[True] >= first_fold[False] + 6, first_fold


def test_a_cold_cache_folds_before_the_turn(tmp_path: Path) -> None:
    """Idle longer than the cache lives, the next request would write its whole prompt
    anyway: past `summarize_at` the proxy folds first, so it writes a short one."""
    clock = Clock(1_800_000_000.0)
    with running_upstream() as fake:
        fake.clock = clock
        with serving(claude_config(fake, window=8192), tmp_path, clock=clock) as url:
            sdk = chat(url, "cold")
            history: list[dict[str, Any]] = []
            sent = 0
            while sent < 0.76 * 0.8 * 8192:  # past summarize_at, two turns short of the budget
                history.append({"role": "user", "content": said(len(history) // 2, 20)})
                raw = sdk.chat.completions.with_raw_response.create(
                    model=CLAUDE, messages=history, max_tokens=50
                )
                sent = int(raw.headers["x-context-tokens-sent"])
                history.append(
                    {"role": "assistant", "content": raw.parse().choices[0].message.content}
                )
                clock.advance(30)
            assert summaries(fake) == 0  # warm: nothing folded yet
            before = turns(fake)[-1]
            clock.advance(301)
            talk(sdk, CLAUDE, 1, history, words=20)
            assert summaries(fake) == 1
            after = turns(fake)[-1]
            assert any(
                block["text"].startswith(SUMMARY_PREFIX) for block in after.get("system") or ()
            )
            assert len(after["messages"]) < len(before["messages"])
            usage = fake.messages_requests()[-1].usage
            assert usage["cache_read_input_tokens"] == 0  # cold: written anew, but shorter


def _gpt(upstream: FakeUpstream) -> dict[str, Any]:
    return {
        "model_name": "gpt-4.1",
        "litellm_params": {
            "model": "openai/gpt-4.1",
            "api_base": upstream.base_url,
            "api_key": UPSTREAM_KEY,
        },
    }


def _head(body: dict[str, Any]) -> str:
    return str(body.get("system"))


def test_a_client_that_appends_marked_turns_never_sends_anthropic_more_than_four_marks(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """A client in append mode marks each new message, as it would the last one of a
    full conversation. The session stores each message as it came, marks included; the
    marks of earlier turns are not the client's any more: the proxy sends only the new
    turn's, within Anthropic's four, turn after turn."""
    url = start_proxy(claude_config(upstream))
    sdk = anthropic.Anthropic(
        base_url=url,
        api_key="client-key",
        max_retries=0,
        default_headers={"X-Session-Id": "append-marks", "X-Session-Mode": "append"},
    )
    system = [{"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}]
    for turn in range(6):
        new = {"type": "text", "text": said(turn), "cache_control": EPHEMERAL}
        sdk.messages.create(
            model=CLAUDE,
            max_tokens=50,
            system=system,
            messages=[{"role": "user", "content": [new]}],
        )
    body = upstream.messages_requests()[-1].body
    assert 2 <= orjson.dumps(body).count(b'"cache_control"') <= 4
    assert body["messages"][-1]["content"][-1].get("cache_control") == EPHEMERAL
    assert len(body["messages"]) == 11  # the whole session, appended
