"""The real coding agents through the proxy, at full length: Claude Code (`claude -p`,
then `--continue`, 32 turns with a tool round trip) on the Messages door and Codex
(`codex exec`, then `exec resume --last`, 30 turns with a tool round trip) on the
Responses door, and each compacting its own history on the way, as installed
by the test command (tests/agents), against the loopback test upstream. Each runs with
a home of its own and the setup docs/clients.md gives (its Claude Code exports and
its Codex config.toml, only the port changed), and no proxy workaround: what they send beyond
the published APIs is the doors' business. Their replies are long, so each
conversation outgrows its budget beside the agent's own large system prompt and tools:
compression must reach a summary and never truncate."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests import upstream_responses as responses_api
from tests.integration.test_messages import claude_config
from tests.integration.test_metrics import Samples, delta, scrape
from tests.integration.test_sessions import is_summarizer
from tests.readme import on_port, snippet
from tests.upstream import FakeUpstream, Reply
from tests.upstream_messages import last_user_text

AGENTS = Path(__file__).resolve().parents[1] / "agents" / "node_modules" / ".bin"
KEY = "agent-key-0123456789abcdef"
CLAUDE = "claude-sonnet-4-5"  # the README's model names, which the agents know
CODEX = "gpt-5.5"
CLAUDE_SETUP = snippet("export ANTHROPIC_BASE_URL=")
CODEX_SETUP = snippet('wire_api = "responses"')


def agents_config(upstream: FakeUpstream, native_responses: bool = False) -> dict[str, Any]:
    """The README's model names on the test upstream: Claude by the Messages API; the
    Codex model by chat completions, or (`native_responses`) by the Responses API, with
    the window of the test's own model (its long replies outgrow it in about 12 turns)."""
    config = claude_config(upstream, auth={"keys": [{"key": KEY}]})
    config["model_list"][-1]["model_name"] = CLAUDE
    codex = {
        "model_name": CODEX,
        "litellm_params": config["model_list"][0]["litellm_params"] | {"model": f"openai/{CODEX}"},
        "model_info": {"max_input_tokens": 128000, "max_output_tokens": 16384},
    }
    if native_responses:
        config["model_list"][0]["model_info"] = {"native_api": True}
        codex["model_info"]["native_api"] = True
    config["model_list"].append(codex)
    return config


@pytest.fixture
def url_config(upstream: FakeUpstream) -> dict[str, Any]:
    return agents_config(upstream)


def claude_env(url: str, home: Path) -> dict[str, str]:
    """The environment the Claude Code block of docs/clients.md leaves: its exports, run by sh
    (its last line starts the interactive `claude`; the test runs `claude -p`)."""
    *exports, command = CLAUDE_SETUP.text.strip().splitlines()
    assert command == "claude"
    script = on_port("\n".join(exports), port(url)) + "\nenv -0"
    base = {**os.environ, "HOME": str(home), "PROXY_API_KEY": KEY}
    done = subprocess.run(["sh", "-c", script], env=base, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    env = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    assert env["ANTHROPIC_BASE_URL"] == url and env["ANTHROPIC_MODEL"] == CLAUDE
    return env


def codex_home(url: str, home: Path) -> None:
    """The Codex config.toml of docs/clients.md, as `~/.codex/config.toml`."""
    (home / ".codex").mkdir(parents=True)
    config = on_port(CODEX_SETUP.text, port(url))
    assert f'model = "{CODEX}"' in config and f'base_url = "{url}/v1"' in config
    (home / ".codex" / "config.toml").write_text(config)


def port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def agent(name: str) -> str:
    path = AGENTS / name
    if not path.is_file():
        pytest.fail(f"{name} is not installed (the README's test command installs it)")
    return str(path)


def run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def sessions(url: str) -> list[dict[str, Any]]:
    listed = httpx.get(url + "/v1/sessions", headers={"Authorization": f"Bearer {KEY}"})
    assert listed.status_code == 200, listed.text
    return listed.json()["data"]


def transcript(url: str, session_id: str) -> list[dict[str, Any]]:
    path = f"{url}/v1/sessions/{session_id}"
    return httpx.get(path, headers={"Authorization": f"Bearer {KEY}"}).json()["messages"]


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    texts = []
    for message in messages:
        if message["role"] != "user":
            continue
        content = message["content"]
        parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
        texts.append(parts[-1].strip())
    return texts


SUMMARY = "The user sent numbered turns; the assistant answered each at length."
NOTES = "The release is on Thursday; the codename is HERON."


def long_reply(text: str, tokens: int) -> str:
    """About `tokens` tokens of distinct filler, then the echo the agent prints last."""
    filler = " ".join(f"w{i}" for i in range(tokens // 2))
    return f"{filler}\n\necho: {text}"


def agent_upstream(upstream: FakeUpstream, reply_tokens: int, notes: Path | None = None) -> None:
    """Summaries for the summarizer; for the agent, a long answer to each turn, and for
    "read the notes" a Read tool call whose result comes back in the next request."""

    def respond(body: dict[str, Any]) -> str | Reply:
        if "input" in body:  # the Responses API: Codex's turn, as it sent it
            return codex_reply(body)
        system = body.get("system")
        if CODEX_COMPACTS in last_user_text(body):  # on the chat route, its compaction
            return CODEX_HANDOFF
        if is_summarizer(body) or (
            isinstance(system, list) and "You maintain the summary" in json.dumps(system)
        ):
            return SUMMARY
        last = body["messages"][-1]
        results = (
            [
                b
                for b in last.get("content") or []
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
            if isinstance(last.get("content"), list)
            else []
        )
        if results:
            return long_reply(f"read: {json.dumps(results[0].get('content'))}", 200)
        text = last_user_text(body).rsplit("</system-reminder>", 1)[-1].strip()
        if notes is not None and text.endswith("read the notes"):
            arguments = json.dumps({"file_path": str(notes)})
            call = {
                "id": "toolu_notes",
                "type": "function",
                "function": {"name": "Read", "arguments": arguments},
            }
            return Reply(tool_calls=[call])
        return long_reply(text, reply_tokens)

    def codex_reply(body: dict[str, Any]) -> str | Reply:
        """Codex's turn: for "read the notes" its `exec_command` tool, whose output
        comes back as the next request's last item."""
        last = body["input"][-1] if isinstance(body["input"], list) else {}
        if last.get("type") == "function_call_output":
            return long_reply(f"read: {json.dumps(last.get('output'))}", 200)
        text = responses_api.last_user_text(body).strip()
        if text.startswith(CODEX_COMPACTS):
            return CODEX_HANDOFF
        if text.endswith("read the notes"):
            arguments = json.dumps({"cmd": "cat notes.txt"})
            function = {"name": "exec_command", "arguments": arguments}
            call = {"id": "call_notes", "type": "function", "function": function}
            return Reply(tool_calls=[call])
        return long_reply(text, reply_tokens)

    upstream.default = Reply(respond=respond)


def failures_logged(caplog: Any) -> str:
    """What the proxy logged about requests that did not succeed: its warnings, and the
    access log's lines of every non-2xx answer (with when and how long)."""
    lines = [
        f"{record.created:.3f} {record.getMessage()} {getattr(record, 'latency_ms', '')}"
        for record in caplog.records
        if record.levelno >= logging.WARNING or getattr(record, "status", 200) >= 300
    ]
    return "\n".join(lines)


def within_budget(
    before: Samples, after: Samples, model: str, api: str, log: str = ""
) -> dict[str, float]:
    """How the agent's requests were fitted; every one answered 2xx (whatever its model:
    an agent's side requests may name another) and within the 0.8 budget. A failure
    shows what the proxy logged (`log`: why it answered 5xx)."""
    answered = {
        labels: value - before.get((name, labels), 0.0)
        for (name, labels), value in after.items()
        if name == "context_proxy_requests_total"
    }
    failed = {labels: n for labels, n in answered.items() if n and dict(labels)["status"][0] != "2"}
    assert not failed and sum(answered.values()) > 0, (failed, log[-3000:])
    methods = {
        method: delta(
            before, after, "context_proxy_compressions_total", model=model, api=api, method=method
        )
        for method in ("none", "summary", "truncated")
    }
    sent = delta(before, after, "context_proxy_context_utilization_ratio_count", model=model)
    under = delta(
        before, after, "context_proxy_context_utilization_ratio_bucket", model=model, le="0.8"
    )
    assert sent > 0 and under == sent, (under, sent)
    return methods


def claude_code(
    url: str, upstream: FakeUpstream, tmp_path: Path
) -> tuple[dict[str, str], str, Path]:
    """Claude Code as docs/clients.md sets it up, with a home and a work folder of its own
    (whose notes.txt a turn reads), against long replies: its environment, its command
    and its work folder."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(NOTES + "\n")
    agent_upstream(upstream, reply_tokens=5000, notes=notes)
    return claude_env(url, home), agent("claude"), work


def test_claude_code_thirty_turns_with_a_tool_round_trip(
    url: str, upstream: FakeUpstream, tmp_path: Path
) -> None:
    env, claude, work = claude_code(url, upstream, tmp_path)
    before = scrape(url)
    turns = [f"turn {n}" for n in range(1, 33)]
    turns[9] = "turn 10: read the notes"
    for n, text in enumerate(turns):
        command = [claude, "-p", text] if n == 0 else [claude, "-p", "--continue", text]
        out = run(command, env, work).strip()
        if "read the notes" in text:
            assert "HERON" in out, out  # the file's text came back as the tool's result
        else:
            assert out.endswith(f"echo: {text}"), out[-300:]
    after = scrape(url)

    [session] = sessions(url)
    stored = transcript(url, session["id"])
    asked = [t for t in user_texts(stored) if t.startswith("turn")]
    assert asked == turns, asked  # one session, every turn once, in order
    uses = [b for m in stored if isinstance(m.get("tool_calls"), list) for b in m["tool_calls"]]
    assert [u["function"]["name"] for u in uses] == ["Read"]
    result = next(m for m in stored if m["role"] == "tool")
    assert "HERON" in json.dumps(result["content"])
    methods = within_budget(before, after, CLAUDE, "messages")
    assert methods["summary"] > 0 and methods["truncated"] == 0, methods
    summarized = [
        r.body
        for r in upstream.messages_requests()
        if "Summary of the earlier" in json.dumps(r.body.get("system"))
    ]
    assert summarized, "no request carried the summary"
    assert "<system-reminder>" in json.dumps(summarized[-1]["system"])  # the agent's context kept
    errors = delta(
        before,
        after,
        "context_proxy_summarizations_total",
        model=CLAUDE,
        outcome="error",
        mode="background",
    )
    assert errors == 0
    side_requests_leave_the_session_as_it_was(url, session["id"])


def side_requests_leave_the_session_as_it_was(url: str, session_id: str) -> None:
    """Claude Code's title and quota requests, under its conversation's session: answered,
    and the 32-turn session stays byte for byte what it was."""
    path = f"{url}/v1/sessions/{session_id}"
    auth = {"Authorization": f"Bearer {KEY}"}
    stored = httpx.get(path, headers=auth).content
    sdk = anthropic.Anthropic(
        base_url=url, api_key=KEY, max_retries=0, default_headers={"X-Session-Id": session_id}
    )
    title_format = {
        "type": "json_schema",
        "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
    }
    for n in range(10):
        title = sdk.messages.with_raw_response.create(
            model=CLAUDE,
            max_tokens=512,
            system="Generate a concise title for this coding session, as JSON.",
            messages=[{"role": "user", "content": f"turn {n}: what we did"}],
            extra_body={"output_config": {"format": title_format}},
        )
        quota = sdk.messages.with_raw_response.create(
            model=CLAUDE, max_tokens=1, messages=[{"role": "user", "content": "quota"}]
        )
        for reply in (title, quota):
            assert reply.parse().content and reply.headers["x-context-session-turn"] == "side"
    assert httpx.get(path, headers=auth).content == stored


CODEX_SUMMARY = "Another language model started to solve this problem"  # Codex's prefix
CODEX_COMPACTS = "You are performing a CONTEXT CHECKPOINT COMPACTION"
CODEX_HANDOFF = "Handoff: the user sends numbered turns, each answered at length."


def codex_session(
    url: str, upstream: FakeUpstream, tmp_path: Path, turns: list[str], compact_at: int = 0
) -> None:
    """Codex as docs/clients.md sets it up (compacting its history on its own once a reply's
    usage reaches `compact_at` tokens, if given): `codex exec`, then `codex exec resume
    --last` for each further turn; a turn that ends in "read the notes" runs Codex's
    `exec_command` tool on notes.txt."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES + "\n")
    codex_home(url, home)
    if compact_at:
        config = home / ".codex" / "config.toml"
        config.write_text(f"model_auto_compact_token_limit = {compact_at}\n{config.read_text()}")
    agent_upstream(upstream, reply_tokens=9000)
    env = {**os.environ, "HOME": str(home), "PROXY_API_KEY": KEY}
    codex = [agent("codex"), "exec", "--skip-git-repo-check"]
    for n, text in enumerate(turns):
        command = [*codex, text] if n == 0 else [*codex, "resume", "--last", text]
        out = run(command, env, work)
        if "read the notes" in text:
            assert "HERON" in out, out[-500:]  # the command's output came back
        else:
            assert f"echo: {text}" in out, out[-300:]


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_codex_thirty_turns_with_a_tool_round_trip(
    route: str, upstream: FakeUpstream, start_proxy: Any, tmp_path: Path, caplog: Any
) -> None:
    """Codex's turns to a chat deployment (translated), and to one that speaks the
    Responses API (in Codex's own items, reasoning and hosted tools as it sent them):
    thirty, one of which runs its `exec_command` tool."""
    caplog.set_level(logging.INFO, logger="context_proxy.access")
    url = start_proxy(agents_config(upstream, native_responses=route == "responses"))
    before = scrape(url)
    turns = [f"turn {n}" for n in range(1, 31)]
    turns[19] = "turn 20: read the notes"
    codex_session(url, upstream, tmp_path, turns)
    after = scrape(url)
    [session] = sessions(url)
    stored = transcript(url, session["id"])
    assert [t for t in user_texts(stored) if t.startswith("turn")] == turns
    outputs = [m for m in stored if m["role"] == "tool"]
    assert outputs and "HERON" in json.dumps(outputs), "the tool's output was not stored"
    methods = within_budget(before, after, CODEX, "responses", failures_logged(caplog))
    assert methods["summary"] > 0 and methods["truncated"] == 0, methods
    # LiteLLM sends gpt-5.5's chat completions by the Responses API (its bridge).
    agents = [
        r for r in upstream.responses_requests() if "You maintain the summary" not in str(r.body)
    ]
    assert agents and all(r.body["model"] == CODEX for r in agents)
    # The bridge sends system messages as `instructions`; the native route as items.
    sent = [[r.body.get("instructions") or "", *r.body["input"]] for r in agents]
    summarized = [m for m in sent if "Summary of the earlier" in json.dumps(m[:5])]
    assert summarized, "no request carried the summary"
    context = [m for m in summarized[-1] if not isinstance(m, dict) or m.get("role") != "user"]
    assert "<environment_context>" in json.dumps(context)  # Codex's context kept


def test_codex_compacts_on_its_own_and_keeps_its_session(
    upstream: FakeUpstream, start_proxy: Any, tmp_path: Path, caplog: Any
) -> None:
    """Codex compacts when a reply's usage passes its limit (40k tokens here), and that
    usage is what the proxy sent: with the proxy in front, Codex compacts only where its
    limit is below the proxy's budget, before the proxy has anything to summarize. Each time
    it asks for a handoff summary (answered, not stored) and goes on with its kept user
    turns, its context in another order and the summary: a chapter of the same session
    each time, the old ones kept."""
    caplog.set_level(logging.INFO, logger="context_proxy.access")
    url = start_proxy(agents_config(upstream, native_responses=True))
    before = scrape(url)
    turns = [f"turn {n}" for n in range(1, 13)]
    turns[7] = "turn 8: read the notes"
    codex_session(url, upstream, tmp_path, turns, compact_at=40_000)
    after = scrape(url)
    [session] = sessions(url)
    stored = transcript(url, session["id"])
    asked = user_texts(stored)
    # Every turn, in order (a chapter repeats the user turns Codex kept when it compacted)
    assert list(dict.fromkeys(t for t in asked if t.startswith("turn"))) == turns, asked
    resumed = [m for m in stored if CODEX_SUMMARY in json.dumps(m)]
    assert len(resumed) >= 2 and CODEX_HANDOFF in json.dumps(resumed), "no chapters"
    assert not any(CODEX_COMPACTS in json.dumps(m) for m in stored)  # the request, unstored
    outputs = [m for m in stored if m["role"] == "tool"]
    assert outputs and "HERON" in json.dumps(outputs), "the tool's output was not stored"
    methods = within_budget(before, after, CODEX, "responses", failures_logged(caplog))
    assert methods["truncated"] == 0, methods


@pytest.mark.parametrize("answered", [False, True], ids=["by-the-model", "from-the-summary"])
def test_claude_code_compacts_mid_way_and_keeps_its_session(
    answered: bool, upstream: FakeUpstream, start_proxy: Any, tmp_path: Path, caplog: Any
) -> None:
    """Thirty turns, Claude Code's own `/compact`, thirty more: one session throughout.
    The compaction request is answered and not stored: by the model, or (where the
    proxy's summary leaves at most `max_summary_tokens` after it, set high here) from
    that summary with no model call. The conversation Claude Code goes on with (its
    summary first) is stored after the old one, which stays in the session and is
    found by search; the new part is summarized in turn, and nothing is truncated."""
    caplog.set_level(logging.INFO, logger="context_proxy.access")
    config = agents_config(upstream)
    if answered:
        config["context"] = {"max_summary_tokens": 100_000}
    url = start_proxy(config)
    env, claude, work = claude_code(url, upstream, tmp_path)
    before = scrape(url)
    turns = [f"turn {n}" for n in range(1, 61)]
    turns[44] = "turn 45: read the notes"
    for n, text in enumerate(turns):
        if n == 30:
            compacted = run([claude, "-p", "--continue", "/compact"], env, work)
            assert "Compacted" in compacted or compacted.strip() == "", compacted[-300:]
        command = [claude, "-p", text] if n == 0 else [claude, "-p", "--continue", text]
        out = run(command, env, work).strip()
        if "read the notes" in text:
            assert "HERON" in out, out
        else:  # the first turn after /compact comes after the command's own record
            assert out.endswith(text), out[-300:]
    after = scrape(url)

    [session] = sessions(url)
    stored = transcript(url, session["id"])
    summary_at = [
        i
        for i, m in enumerate(stored)
        if m["role"] == "user" and "This session is being continued" in json.dumps(m["content"])
    ]
    assert len(summary_at) == 1, "Claude Code's own summary opens the new chapter, once"
    said = [m for i, m in enumerate(stored) if i != summary_at[0]]  # not the summary's quotes
    asked = [re.sub(r"(?s).*\n\s*(?=turn \d+)", "", t) for t in user_texts(said)]
    assert [t for t in asked if t.startswith("turn")] == turns, asked  # each turn once
    assert not any("Your task is to create a detailed summary" in json.dumps(m) for m in stored)
    asked_model = [
        r for r in upstream.messages_requests() if "create a detailed summary" in json.dumps(r.body)
    ]
    assert len(asked_model) == (0 if answered else 1), len(asked_model)
    if answered:  # Claude Code went on from the proxy's summary
        assert SUMMARY in json.dumps(stored[summary_at[0]]["content"])
    found = httpx.get(
        f"{url}/v1/sessions/-/search",
        params={"id": session["id"], "q": "turn 7"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert found.status_code == 200, found.text
    starts = [hit["start"] for hit in found.json()["data"]]
    assert any(start < summary_at[0] for start in starts), starts  # the old chapter
    methods = within_budget(before, after, CLAUDE, "messages", failures_logged(caplog))
    assert methods["summary"] > 0 and methods["truncated"] == 0, methods
    requests = upstream.messages_requests()
    resumed = next(
        i
        for i, r in enumerate(requests)
        if "This session is being continued" in json.dumps(r.body["messages"][:1])
    )
    later = [r.body for r in requests[resumed:] if "Summary of the earlier" in json.dumps(r.body)]
    assert later, "the new chapter was never summarized"
    assert "turn 31" not in json.dumps(later[-1]["system"])  # folded, not sent verbatim
