"""Real Python clients through the proxy's chat door, at full length: langchain-openai
(`ChatOpenAI` with `bind_tools`, its tool's `ToolMessage` sent back), pydantic-ai (an
`Agent` whose `tool_plain` the model calls) and aider (as released, from its own venv,
`.venv-aider`, set up by its block in docs/clients.md, typed 30 turns in one session with no
network but the proxy). Each sets X-Session-Id its own way and holds a 30-turn
conversation with one tool round trip (aider's: an edit it applies to a file of a git
repo, which the next turn's request carries), against the loopback test upstream, whose
long replies outgrow the budget: one session holds every turn once, in order; every
request is 2xx and within the 0.8 budget; compression reaches `summary` and never
truncates. Each block of docs/clients.md for these clients is run here too."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from proxy.doors.base import text_of
from tests.integration.test_agents import (
    KEY,
    NOTES,
    SUMMARY,
    long_reply,
    port,
    sessions,
    transcript,
    user_texts,
    within_budget,
)
from tests.integration.test_metrics import Samples, scrape
from tests.integration.test_sessions import is_summarizer
from tests.proxies import MODEL, proxy_config
from tests.readme import on_port, snippet
from tests.servers import guarded_env
from tests.upstream import FakeUpstream, Reply

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": f"Bearer {KEY}"}
AIDER = ROOT / ".venv-aider" / "bin"
TURNS = [f"turn {n}" for n in range(1, 31)]
TURNS[9] = "turn 10: read the notes"
WINDOW = 16_000  # the model's input window here: 30 long replies outgrow its budget
REPLY_TOKENS = 1_500
LANGCHAIN_SETUP = snippet("from langchain_openai import ChatOpenAI")
PYDANTIC_AI_SETUP = snippet("from pydantic_ai import Agent")
AIDER_SETUP = snippet("aider/extra_params")


def python_config(upstream: FakeUpstream) -> dict[str, Any]:
    """MODEL on the test upstream with a window of WINDOW tokens, behind a key."""
    config = proxy_config(upstream, auth={"keys": [{"key": KEY}]})
    config["model_list"][0]["model_info"] = {"max_input_tokens": WINDOW, "max_output_tokens": 1024}
    return config


def chat_upstream(upstream: FakeUpstream, notes: Path) -> None:
    """Summaries for the summarizer; for the client, a long answer to each turn, for
    "read the notes" a `read_notes` call, and for its result (the next request) an
    answer that quotes it."""

    def respond(body: dict[str, Any]) -> str | Reply:
        if is_summarizer(body):
            return SUMMARY
        last = body["messages"][-1]
        if last["role"] == "tool":
            return long_reply(f"read: {text_of(last['content'])}", 200)
        text = text_of(last["content"]).strip()
        if text.endswith("read the notes"):
            arguments = json.dumps({"path": str(notes)})
            call = {"id": "call_notes", "type": "function"}
            call["function"] = {"name": "read_notes", "arguments": arguments}
            return Reply(tool_calls=[call])
        return long_reply(text, REPLY_TOKENS)

    upstream.default = Reply(respond=respond)


def notes_file(tmp_path: Path) -> Path:
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES + "\n")
    return notes


def read_notes(path: str) -> str:
    """Read the notes file at `path`."""
    return Path(path).read_text()


def check_replies(replies: list[str]) -> None:
    """Each turn answered with its own reply; the tool's turn with the file's text, which
    came back to the model in the next request."""
    assert len(replies) == len(TURNS)
    for text, reply in zip(TURNS, replies, strict=True):
        if text.endswith("read the notes"):
            assert "read: " in reply and "HERON" in reply, reply[-300:]
        else:
            assert reply.endswith(f"echo: {text}"), reply[-300:]


def check_session(url: str, session_id: str, turns: list[str]) -> list[dict[str, Any]]:
    """One session, under the client's id, holding every turn once and in order."""
    [session] = sessions(url)
    assert session["id"] == session_id
    stored = transcript(url, session_id)
    asked = [t for t in user_texts(stored) if t.startswith("turn")]
    assert asked == turns, asked
    return stored


def check_tool_round_trip(stored: list[dict[str, Any]]) -> None:
    calls = [c for m in stored for c in m.get("tool_calls") or ()]
    assert [c["function"]["name"] for c in calls] == ["read_notes"]
    [result] = [m for m in stored if m["role"] == "tool"]
    assert "HERON" in text_of(result["content"])


def check_compression(
    upstream: FakeUpstream, before: Samples, after: Samples, cut: int = 0
) -> None:
    """Every request 2xx and within budget; a summary, and the upstream saw it; no
    truncation but the `cut` requests whose one message alone is over the budget."""
    methods = within_budget(before, after, MODEL, "chat")
    assert methods["summary"] > 0 and methods["truncated"] == cut, methods
    sent = [r.body["messages"] for r in upstream.chat_requests() if not is_summarizer(r.body)]
    assert any("Summary of the earlier" in json.dumps(m[:4]) for m in sent)


def run_python_block(block: str, url: str) -> str:
    """A Python block of docs/clients.md run as a script against the proxy at `url`."""
    done = subprocess.run(
        [sys.executable, "-c", on_port(block, port(url))],
        env={**os.environ, "PROXY_API_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def check_block(url: str, out: str) -> None:
    """A docs/clients.md block's two turns: the second answered, both stored under its session."""
    assert out == "echo: Who am I?\n", out
    stored = transcript(url, "support-ticket-4711")
    contents = [m["content"] for m in stored]
    assert contents == ["I am Ada.", "echo: I am Ada.", "Who am I?", "echo: Who am I?"], stored


# --- langchain-openai ------------------------------------------------------------------


def test_langchain_block(upstream: FakeUpstream, start_proxy: Any) -> None:
    url = start_proxy(python_config(upstream))
    out = run_python_block(LANGCHAIN_SETUP.text, url)
    check_block(url, out)


def test_langchain_openai_thirty_turns_with_a_tool_round_trip(
    upstream: FakeUpstream, start_proxy: Any, tmp_path: Path
) -> None:
    """`ChatOpenAI(default_headers=...)` with `bind_tools`; the client resends the whole
    conversation each turn, its tool's result as a `ToolMessage`."""
    url = start_proxy(python_config(upstream))
    notes = notes_file(tmp_path)
    chat_upstream(upstream, notes)
    notes_tool = tool(read_notes)
    llm = ChatOpenAI(
        model=MODEL,
        base_url=url + "/v1",
        api_key=KEY,
        max_retries=0,
        default_headers={"X-Session-Id": "langchain"},
    ).bind_tools([notes_tool])
    before = scrape(url)
    history: list[BaseMessage] = []
    replies = []
    for text in TURNS:
        history.append(HumanMessage(text))
        reply = llm.invoke(history)
        history.append(reply)
        while reply.tool_calls:
            history += [notes_tool.invoke(call) for call in reply.tool_calls]
            reply = llm.invoke(history)
            history.append(reply)
        replies.append(reply.text)
    after = scrape(url)
    check_replies(replies)
    check_tool_round_trip(check_session(url, "langchain", TURNS))
    check_compression(upstream, before, after)


# --- pydantic-ai -----------------------------------------------------------------------


def test_pydantic_ai_block(upstream: FakeUpstream, start_proxy: Any) -> None:
    url = start_proxy(python_config(upstream))
    out = run_python_block(PYDANTIC_AI_SETUP.text, url)
    check_block(url, out)


def test_pydantic_ai_thirty_turns_with_a_tool_round_trip(
    upstream: FakeUpstream, start_proxy: Any, tmp_path: Path
) -> None:
    """An `Agent` on `OpenAIChatModel` with the header in its `ModelSettings`; it runs its
    `tool_plain` itself when the model calls it, and resends `all_messages()`."""
    url = start_proxy(python_config(upstream))
    notes = notes_file(tmp_path)
    chat_upstream(upstream, notes)
    model = OpenAIChatModel(
        MODEL,
        provider=OpenAIProvider(base_url=url + "/v1", api_key=KEY),
        settings=ModelSettings(extra_headers={"X-Session-Id": "pydantic-ai"}),
    )
    agent = Agent(model, tools=[])
    agent.tool_plain(read_notes)
    before = scrape(url)
    history: list[ModelMessage] = []
    replies = []
    for text in TURNS:
        result = agent.run_sync(text, message_history=history)
        history = result.all_messages()
        replies.append(result.output)
    after = scrape(url)
    check_replies(replies)
    check_tool_round_trip(check_session(url, "pydantic-ai", TURNS))
    check_compression(upstream, before, after)


# --- aider -----------------------------------------------------------------------------

AIDER_TURNS = [*TURNS]
AIDER_TURNS[9] = "turn 10: make hello.py print HERON"
AIDER_TURNS[10] = "turn 11: what does hello.py print?"
EDIT = 'Done.\n\nhello.py\n```python\nprint("HERON")\n```\n'
COMMIT = "feat: print HERON"
AIDER_PROMPT = "Act as an expert software developer."  # aider's system prompt begins so
# aider's chat as a person runs it, its turns typed into its standard input: no colours
# or prompt editor (no terminal), every question answered yes, no release notes.
AIDER_BATCH = ["--yes-always", "--no-pretty", "--no-fancy-input", "--no-show-release-notes"]


def aider_upstream(upstream: FakeUpstream) -> None:
    """Summaries for the summarizer, a commit message for aider's commits; for the edit
    turn, hello.py whole (aider's edit format for this model), and for the turn after
    it the file as that turn's request carried it."""

    def respond(body: dict[str, Any]) -> str:
        messages = body["messages"]
        if is_summarizer(body):
            return SUMMARY
        if is_commit_message(body):
            return COMMIT
        text = [text_of(m["content"]) for m in messages if m["role"] == "user"][-1].strip()
        if text.endswith("print HERON"):
            return EDIT
        if text.endswith("what does hello.py print?"):
            files = [text_of(m["content"]) for m in messages if m["role"] == "user"]
            shown = re.findall(r"^hello\.py\n```\n(.*?)```$", "\n".join(files), re.M | re.S)
            return long_reply(f"hello.py reads: {shown[-1].strip()}", 200) + f" ({text})"
        return long_reply(text, REPLY_TOKENS)

    upstream.default = Reply(respond=respond)


def is_commit_message(body: dict[str, Any]) -> bool:
    """aider's request for a commit message (its own system prompt)."""
    return "one-line Git commit messages" in text_of(body["messages"][0]["content"])


def aider_env(url: str, home: Path, work: Path, netlog: Path) -> dict[str, str]:
    """The environment the aider block of docs/clients.md leaves in `work` (run by sh; its last
    line starts aider), in a process that refuses and logs any non-loopback connection."""
    *setup, command = AIDER_SETUP.text.strip().splitlines()
    assert command.startswith("aider ")
    base = guarded_env(netlog) | {"HOME": str(home), "PROXY_API_KEY": KEY}
    base.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)  # the block must set it itself
    script = on_port("\n".join(setup), port(url)) + "\nenv -0"
    done = subprocess.run(["sh", "-c", script], env=base, cwd=work, capture_output=True)
    assert done.returncode == 0, done.stderr
    env = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    assert env["OPENAI_API_BASE"] == url + "/v1"
    return env | {"PATH": f"{AIDER}{os.pathsep}{env['PATH']}"}


def git(work: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args]
    return subprocess.run(command, cwd=work, capture_output=True, text=True, check=True).stdout


def test_aider_thirty_turns_with_an_edit_round_trip(
    upstream: FakeUpstream, start_proxy: Any, tmp_path: Path
) -> None:
    """The aider block of docs/clients.md in a git repo, then its command with hello.py in the
    chat, typed 30 turns: the 10th has aider rewrite hello.py (applied and committed,
    with a commit message it asks the model for under the same session id), and the
    11th's request carries the edited file."""
    if not (AIDER / "aider").is_file():
        pytest.fail(".venv-aider is not installed (the README's test command installs it)")
    url = start_proxy(python_config(upstream))
    home, work, netlog = tmp_path / "home", tmp_path / "work", tmp_path / "network.log"
    home.mkdir()
    work.mkdir()
    (work / "hello.py").write_text("print('hello')\n")
    git(work, "init", "-q")
    git(work, "add", "hello.py")
    git(work, "commit", "-q", "-m", "hello")
    env = aider_env(url, home, work, netlog)
    aider_upstream(upstream)
    command = shlex.split(AIDER_SETUP.text.strip().splitlines()[-1])
    before = scrape(url)
    done = subprocess.run(
        [*command, *AIDER_BATCH, "hello.py"],
        input="".join(f"{text}\n" for text in AIDER_TURNS),
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = scrape(url)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert not netlog.exists(), netlog.read_text()  # nothing but the proxy was reached

    out = done.stdout
    answers = [t for t in AIDER_TURNS if t != AIDER_TURNS[9]]
    ends = [out.index(f"echo: {text}\n") for text in answers if "hello.py" not in text]
    assert ends == sorted(ends), "turns answered out of order"
    assert "Applied edit to hello.py" in out, out[-3000:]
    assert (work / "hello.py").read_text() == 'print("HERON")\n'
    assert COMMIT in git(work, "log", "--format=%s")
    assert f'hello.py reads: print("HERON") ({AIDER_TURNS[10]})' in out, out[-3000:]

    stored = check_session(url, "my-feature-branch", AIDER_TURNS)
    assert EDIT.strip() in [text_of(m["content"]).strip() for m in stored]
    plans = httpx.get(f"{url}/v1/sessions/my-feature-branch/plans", headers=AUTH).json()["data"]
    assert len(plans) == len(AIDER_TURNS)  # the commit message's request is no turn of it
    assert {p["compression"] for p in plans} == {"none", "summary"}, plans
    # aider's commit-message request carries its chat since its last edit as one message
    # (here turns 1 to 10, more than the budget): it is cut in its middle, and the diff at
    # its end reaches the model.
    [commit] = [r.body for r in upstream.chat_requests() if is_commit_message(r.body)]
    asked = text_of(commit["messages"][-1]["content"])
    assert "tokens omitted" in asked and asked.rstrip().endswith('+print("HERON")'), asked[-500:]
    check_compression(upstream, before, after, cut=1)
    summarized = [
        r.body["messages"]
        for r in upstream.chat_requests()
        if "Summary of the earlier" in json.dumps(r.body["messages"][:2])
    ]
    assert text_of(summarized[-1][0]["content"]).startswith(AIDER_PROMPT)  # aider's own kept
