"""Real Node clients through the proxy, at full length (tests/agents, pinned in its
package-lock.json): the Vercel AI SDK's OpenAI provider (its default, the Responses API,
whose item references name the proxy's own output items) to a chat deployment and to one
that speaks the Responses API, its Anthropic provider on the Messages door, openai-node's
Chat Completions with `metadata`, and opencode's CLI (`opencode run`, then `--continue`)
with no network but the proxy. Each holds a 30-turn conversation with one tool round trip
that the client runs itself, against the loopback test upstream, whose long replies
outgrow the budget: one session holds every turn once, in order; every request is 2xx
and within the 0.8 budget; compression reaches `summary` and never truncates."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proxy.doors.base import text_of
from tests import upstream_responses as responses_api
from tests.integration.test_agents import (
    CLAUDE,
    KEY,
    NOTES,
    SUMMARY,
    agents_config,
    long_reply,
    port,
    sessions,
    transcript,
    user_texts,
    within_budget,
)
from tests.integration.test_metrics import scrape
from tests.integration.test_sessions import is_summarizer
from tests.offline import offline
from tests.proxies import MODEL
from tests.readme import on_port, snippet
from tests.upstream import FakeUpstream, Reply
from tests.upstream_messages import last_user_text

AGENTS = Path(__file__).resolve().parents[1] / "agents"
TURNS = [f"turn {n}" for n in range(1, 31)]
TURNS[9] = "turn 10: read the notes"
WINDOW = 16_000  # the model's input window here: 30 long replies outgrow its budget
REPLY_TOKENS = 1_500


def node_config(upstream: FakeUpstream, window: int, native: bool = False) -> dict[str, Any]:
    """The README's model names on the test upstream, MODEL and Claude with a window of
    `window` tokens (MODEL by chat completions, or with `native` in the Responses API)."""
    config = agents_config(upstream, native_responses=native)
    for entry in config["model_list"]:
        if entry["model_name"] in (MODEL, CLAUDE):
            info = entry.setdefault("model_info", {})
            info |= {"max_input_tokens": window, "max_output_tokens": 1024}
    return config


def node_upstream(upstream: FakeUpstream, tool: str, arguments: dict[str, Any]) -> None:
    """Summaries for the summarizer; for the client, a long answer to each turn, for
    "read the notes" a call of `tool`, and for the tool's result (the next request) an
    answer that quotes it."""

    def respond(body: dict[str, Any]) -> str | Reply:
        system = json.dumps(body.get("system"))
        if "You maintain the summary" in system or ("messages" in body and is_summarizer(body)):
            return SUMMARY
        text, result = _last_turn(body)
        if result is not None:
            return long_reply(f"read: {result}", 200)
        if "read the notes" in text:
            call = {"id": "call_notes", "type": "function"}
            call["function"] = {"name": tool, "arguments": json.dumps(arguments)}
            return Reply(tool_calls=[call])
        return long_reply(text, REPLY_TOKENS)

    upstream.default = Reply(respond=respond)


def _last_turn(body: dict[str, Any]) -> tuple[str, str | None]:
    """The last user text of a request, and the tool result it ends with (if it does),
    in any of the three APIs."""
    if "input" in body:
        last = body["input"][-1]
        if last.get("type") == "function_call_output":
            return "", str(last["output"])
        return responses_api.last_user_text(body).strip(), None
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return "", text_of(last.get("content"))
    content = last.get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "tool_result":
            inner = block.get("content")
            return "", inner if isinstance(inner, str) else text_of(inner)
    text = last_user_text(body) if isinstance(content, list) else (content or "")
    return text.strip(), None


def node(script: str, *args: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """A client script of tests/agents run to its end: the lines it printed, one a turn."""
    path = AGENTS / script
    if not (AGENTS / "node_modules").is_dir():
        pytest.fail("tests/agents is not installed (the README's test command installs it)")
    done = subprocess.run(
        ["node", str(path), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{script}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def client_env(url: str, model: str, notes: Path, session: str | None) -> dict[str, str]:
    env = {
        "PROXY_URL": url + "/v1",
        "PROXY_API_KEY": KEY,
        "MODEL": model,
        "TURNS": json.dumps([_asked(text, notes) for text in TURNS]),
    }
    return env | ({"SESSION": session} if session else {})


def _asked(text: str, notes: Path) -> str:
    """The turn as the user asks it: the notes' path with the turn that reads them."""
    return f"{text} at {notes}" if text.endswith("read the notes") else text


def notes_file(tmp_path: Path) -> Path:
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES + "\n")
    return notes


def check_turns(printed: list[dict[str, Any]], notes: Path) -> None:
    """Each turn answered with its own reply; the tool's turn with the file's text, which
    came back to the model in the next request."""
    assert [line["turn"] for line in printed] == [_asked(t, notes) for t in TURNS]
    for line in printed:
        if "read the notes" in line["turn"]:
            assert any("HERON" in str(r) for r in line["tool_results"]), line
            assert "read: " in line["text"] and "HERON" in line["text"], line["text"][-300:]
        else:
            assert line["text"].endswith(f"echo: {line['turn']}"), line["text"][-300:]


def check_session(url: str, notes: Path, tool: str) -> list[dict[str, Any]]:
    """One session, every turn once and in order, the tool's call and its result."""
    [session] = sessions(url)
    stored = transcript(url, session["id"])
    asked = [t for t in user_texts(stored) if t.startswith("turn")]
    assert asked == [_asked(t, notes) for t in TURNS], asked
    calls = [c for m in stored for c in m.get("tool_calls") or ()]
    assert [c["function"]["name"] for c in calls] == [tool]
    [result] = [m for m in stored if m["role"] == "tool"]
    assert "HERON" in json.dumps(result["content"])
    return stored


def check_compression(before: Any, after: Any, model: str, api: str) -> None:
    methods = within_budget(before, after, model, api)
    assert methods["summary"] > 0 and methods["truncated"] == 0, methods


@pytest.mark.parametrize(
    ("route", "mode", "session"),
    [("chat", "generate", None), ("responses", "stream", "ai-sdk-native")],
    ids=["chat-deployment", "responses-deployment"],
)
def test_ai_sdk_openai_responses_thirty_turns(
    route: str,
    mode: str,
    session: str | None,
    upstream: FakeUpstream,
    start_proxy: Any,
    tmp_path: Path,
) -> None:
    """`createOpenAI()(model)`, the AI SDK's default: the Responses API, whose earlier
    output comes back from the second turn on as `item_reference`s to the proxy's own
    output items; to a chat deployment with no session header (the references name the
    session) and streamed to one that speaks the Responses API."""
    url = start_proxy(node_config(upstream, WINDOW, native=route == "responses"))
    notes = notes_file(tmp_path)
    node_upstream(upstream, "read_notes", {"path": str(notes)})
    before = scrape(url)
    printed = node("ai-sdk.mjs", "openai", mode, env=client_env(url, MODEL, notes, session))
    after = scrape(url)
    check_turns(printed, notes)
    assert all(line["references"] for line in printed[1:]), printed[1]  # the SDK's default
    check_session(url, notes, "read_notes")
    check_compression(before, after, MODEL, "responses")


def test_ai_sdk_anthropic_thirty_turns(
    upstream: FakeUpstream, start_proxy: Any, tmp_path: Path
) -> None:
    """`createAnthropic()(model)` on the Messages door, to an `anthropic/…` deployment."""
    url = start_proxy(node_config(upstream, WINDOW))
    notes = notes_file(tmp_path)
    node_upstream(upstream, "read_notes", {"path": str(notes)})
    before = scrape(url)
    printed = node(
        "ai-sdk.mjs", "anthropic", "generate", env=client_env(url, CLAUDE, notes, "ai-sdk-claude")
    )
    after = scrape(url)
    check_turns(printed, notes)
    check_session(url, notes, "read_notes")
    check_compression(before, after, CLAUDE, "messages")


def test_openai_node_chat_with_metadata_thirty_turns(
    upstream: FakeUpstream, start_proxy: Any, tmp_path: Path
) -> None:
    """openai-node's `chat.completions.create` with `metadata` on every request (a
    parameter of OpenAI's chat API that the proxy does not send on)."""
    url = start_proxy(node_config(upstream, WINDOW))
    notes = notes_file(tmp_path)
    node_upstream(upstream, "read_notes", {"path": str(notes)})
    before = scrape(url)
    printed = node("openai-node.mjs", env=client_env(url, MODEL, notes, "openai-node"))
    after = scrape(url)
    check_turns(printed, notes)
    check_session(url, notes, "read_notes")
    check_compression(before, after, MODEL, "chat")


AI_SDK_BLOCK = snippet("import { createOpenAI } from '@ai-sdk/openai';")


def test_the_readmes_ai_sdk_block(upstream: FakeUpstream, start_proxy: Any, tmp_path: Path) -> None:
    """The AI SDK block of docs/clients.md, as pasted (only the port changed): its second turn
    sends the first reply as an item reference, and the session holds both turns."""
    url = start_proxy(node_config(upstream, WINDOW))
    (tmp_path / "node_modules").symlink_to(AGENTS / "node_modules")
    script = tmp_path / "app.mjs"
    script.write_text(on_port(AI_SDK_BLOCK.text, port(url)))
    done = subprocess.run(
        ["node", str(script)],
        env={**os.environ, "PROXY_API_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "echo: Who am I?"
    stored = transcript(url, "support-ticket-4711")
    assert [text_of(m["content"]) for m in stored] == [
        "I am Ada.",
        "echo: I am Ada.",
        "Who am I?",
        "echo: Who am I?",
    ]


OPENCODE_SETUP = snippet("OPENCODE_DISABLE_MODELS_FETCH")
OPENCODE_CONFIG = snippet('"npm": "@ai-sdk/openai-compatible"')
OPENCODE_WINDOW = 48_000  # its system prompt and tools are ~8k tokens


def opencode_env(url: str, home: Path) -> dict[str, str]:
    """The environment the opencode block of docs/clients.md leaves: its exports, run by sh (its
    last line starts the interactive `opencode`; the test runs `opencode run`)."""
    *exports, command = OPENCODE_SETUP.text.strip().splitlines()
    assert command == "opencode"
    script = on_port("\n".join(exports), port(url)) + "\nenv -0"
    base = {**os.environ, "HOME": str(home), "PROXY_API_KEY": KEY}
    done = subprocess.run(["sh", "-c", script], env=base, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)


def test_opencode_thirty_turns_offline(
    upstream: FakeUpstream, start_proxy: Any, tmp_path: Path
) -> None:
    """`opencode run`, then 29 × `opencode run --continue`, with the opencode.json and
    exports of docs/clients.md (only the port changed), where nothing but the proxy can
    be reached: no model catalogue, update check or plugin download is needed. Its
    first request of a session asks another system prompt for a title; the
    conversation is still the session's, one turn a `read` of a file that opencode
    runs itself."""
    url = start_proxy(node_config(upstream, OPENCODE_WINDOW))
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "opencode.json").write_text(on_port(OPENCODE_CONFIG.text, port(url)))
    notes = notes_file(work)
    node_upstream(upstream, "read", {"filePath": str(notes)})
    env = opencode_env(url, home)
    opencode = str(AGENTS / "node_modules" / ".bin" / "opencode")
    before = scrape(url)
    for n, text in enumerate(TURNS):
        asked = _asked(text, notes).split()  # `opencode run` quotes an argument with spaces
        command = [opencode, "run", *asked] if n == 0 else [opencode, "run", "--continue", *asked]
        done = offline(command, port(url), env, work, timeout=180)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        if "read the notes" in text:
            assert "HERON" in done.stdout, done.stdout[-500:]  # the file, read by opencode
        else:
            assert f"echo: {text}" in done.stdout, done.stdout[-500:]
    after = scrape(url)
    check_session(url, notes, "read")
    check_compression(before, after, MODEL, "chat")
