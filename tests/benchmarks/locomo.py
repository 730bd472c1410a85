"""The LoCoMo benchmark: is what a question needs in what the proxy would send, on long
real conversations that no one on this project wrote?

LoCoMo's conversations (`tests/benchmarks/locomo_data.py`: two friends, 19-32 sessions
each, questions with annotated evidence turns) run through the real proxy (openai SDK ->
proxy -> a recording upstream on loopback), an 8,192-token model, two ways:

- in-session: each conversation is one session, resent whole by the client at every
  turn; then every question is asked of the sessions API's preview
  (`POST /v1/sessions/{id}/preview`) as the next user message;
- memory: each of its sessions is a session of its own under one `X-Memory-Id`, replayed
  in order; then every question is the first message of a new session under that memory
  id, sent as a request (a new session has nothing stored to preview), and scored on
  what the upstream received.

The upstream knows the script: it answers each user message with the conversation's
true next message, so the client resends exactly what it received. Its summarizer keeps
the gist and never a value ("Then they talked about their week."), so what the model
can read is what the proxy keeps verbatim, pins or recalls. A question counts as found
when every evidence turn's text is, verbatim, in some message of its context (window,
summary, pinned facts, recall or memory blocks; `tests/benchmarks/locomo_report.py`);
whether its answer string is there too is reported beside. The same questions are
scored, at the same point, on the contexts of a sliding window and of plain BM25
(`tests/benchmarks/locomo_baselines.py`), at the budget and in as many tokens as the
proxy used. Every request the upstream received and every preview is checked against
the budget (the proxy's own definition, `budget`).
"""

from __future__ import annotations

import itertools
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import yaml

from proxy.config.settings import ContextSettings, load_settings
from proxy.engine.planner.budget import budget
from proxy.http.app import create_app
from proxy.memory.facts import MEMORY_PREFIX, MEMORY_RECALL_PREFIX
from proxy.summary.fold import APPEND_TASK
from tests.benchmarks import settling
from tests.benchmarks.locomo_baselines import BM25, Context, message_tokens, newest, ranked
from tests.benchmarks.locomo_data import (
    CATEGORIES,
    Conversation,
    Question,
    chat,
    load,
    locate,
)
from tests.benchmarks.locomo_report import Run, placed, report, scored, text_of
from tests.servers import serve
from tests.summarizing import as_apart, asks_summary
from tests.upstream import FakeUpstream, Reply, count_prompt_tokens, running_upstream

MODEL = "locomo"
WINDOW = 8192
BUDGET = budget(MODEL, WINDOW, {}, ContextSettings().budget_ratio)  # as the proxy computes it
UNANSWERED = "(no reply)"  # the upstream's answer where the conversation has none
QUICK_SESSIONS, QUICK_QUESTIONS = 10, 16
SUMMARY_WAIT_SECONDS = 30.0
KEY = "locomo"  # a keyless proxy's tenant is named by the key a caller presents
AUTHORIZATION = {"Authorization": f"Bearer {KEY}"}
Message = dict[str, str]
Baseline = tuple[str, int, float | None]  # name, tokens, share for the newest (None: newest only)
# The strategies, as the tables name them.
PROXY = "the proxy"
WINDOWED = "sliding window (what trim_messages keeps)"
HALVES = "plain BM25: half the budget newest messages, half the earlier messages BM25 ranks first"
SAME = "the same BM25, in as many tokens as the proxy sent"
PROXY_MEMORY = "the proxy (each question a new session under the memory id)"
EARLIER_NEWEST = "the earlier sessions' newest messages, at the budget"
EARLIER_RANKED = "plain BM25 over the earlier sessions' messages, at the budget"


@dataclass
class Script:
    """The upstream's side: the conversation's next message for the user message the
    client sends, and a summarizer that keeps the gist and never a value."""

    expected: tuple[str, str] | None = None  # (the user message, its reply)
    received: dict[str, Any] | None = None  # the body of the request answered last
    strays: int = 0  # requests whose newest message was not the script's

    def respond(self, body: dict[str, Any]) -> str | Reply:
        if asks_summary(body):  # apart or continuing the session's prompt: answered alike
            return gist(as_apart(body)["messages"][-1]["content"])
        messages = body["messages"]
        if self.expected is None or messages[-1].get("content") != self.expected[0]:
            self.strays += 1
            return Reply(status=500, error_message="not the script's next user message")
        self.received = body
        return self.expected[1]


def gist(prompt: str) -> str:
    """The summarizer's answer: a line per fold; a rewrite restates the gist anew."""
    previous = re.search(r"<previous_summary>\n(.*?)\n</previous_summary>", prompt, re.S)
    if previous is None:
        return "The two friends caught up. Then they talked about their week."
    if APPEND_TASK in prompt:
        return "Then they talked about their week."
    earlier = previous.group(1)
    parts = earlier.count("Then they talked") + sum(
        int(n) for n in re.findall(r"In (\d+) parts so far", earlier)
    )
    return f"In {parts + 1} parts so far, the two friends talked about their lives."


def replay(
    client: openai.OpenAI, script: Script, system: Message, messages: list[Message]
) -> list[Message]:
    """`messages` as a full-resend client sends them, the upstream answering each user
    message with the next one; what the client holds at the end (system message first).
    A first message of the assistant's is held as said (the client shows it)."""
    held = [system]
    at = 0
    while at < len(messages):
        message = messages[at]
        held.append(message)
        at += 1
        if message["role"] == "assistant":
            continue
        reply = messages[at]["content"] if at < len(messages) else UNANSWERED
        at += 1
        script.expected = (message["content"], reply)
        content = send(client, held)
        assert content == reply, (content, reply)
        held.append({"role": "assistant", "content": content})
    return held


def send(client: openai.OpenAI, messages: list[Message]) -> str | None:
    """One request of `messages`, settled (a summary it set going made before the next);
    the reply's text."""
    with settling.settled():
        answer = client.chat.completions.create(model=MODEL, messages=cast(Any, messages))
    return answer.choices[0].message.content


@contextmanager
def proxy(directory: Path, memory: bool) -> Iterator[tuple[str, Script, FakeUpstream]]:
    """A proxy of its own (a fresh store) in front of a scripted upstream."""
    script = Script()
    with running_upstream() as upstream:
        upstream.default = Reply(respond=script.respond)
        config: dict[str, Any] = {
            "model_list": [
                {
                    "model_name": MODEL,
                    "litellm_params": {
                        "model": "openai/gpt-4o-mini",
                        "api_base": upstream.base_url,
                        "api_key": "sk-locomo",
                    },
                    "model_info": {"max_input_tokens": WINDOW},
                }
            ],
            "session": {"path": tempfile.mkdtemp(dir=directory, prefix="locomo-")},
        }
        if memory:
            config["memory"] = {"enabled": True}
        path = directory / "locomo.yaml"
        path.write_text(yaml.safe_dump(config))
        with serve(create_app(load_settings(path, environ={}))) as url:
            yield url, script, upstream


def client(url: str, session: str, memory: str | None = None) -> openai.OpenAI:
    headers = {"X-Session-Id": session} | ({"X-Memory-Id": memory} if memory else {})
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, default_headers=headers)


def checked(run: Run, script: Script, upstream: FakeUpstream) -> None:
    """The upstream's requests into `run`'s budget check."""
    for received in upstream.chat_requests():
        run.requests.append(count_prompt_tokens(received.body))
        run.summaries += asks_summary(received.body)
    run.strays += script.strays


def preview(url: str, session: str, messages: list[Message]) -> dict[str, Any]:
    body = {"model": MODEL, "messages": messages}
    answer = httpx.post(
        f"{url}/v1/sessions/{session}/preview", json=body, headers=AUTHORIZATION, timeout=60
    )
    answer.raise_for_status()
    return dict(answer.json())


def settled(url: str, session: str, messages: list[Message]) -> None:
    """Wait (a while) for a summary made ahead to be stored: a preview meanwhile shows
    the truncation fallback, which the next turn would not send."""
    deadline = time.monotonic() + SUMMARY_WAIT_SECONDS
    while preview(url, session, messages)["summary_due"] and time.monotonic() < deadline:
        time.sleep(0.1)


@dataclass
class Held:
    """The conversation as the client holds it at the questions (`history`, after the
    system message), and the baselines' contexts on it."""

    system: Message
    history: list[Message]

    def __post_init__(self) -> None:
        self.sizes = [message_tokens(m) for m in self.history]
        self.index = BM25([m["content"] for m in self.history])

    def baselines(
        self, run: Run, question: Question, ask: Message, whole: int, rows: list[Baseline]
    ) -> None:
        """Each baseline's context for `question` (sent as `ask`), scored into `run`."""
        for name, limit, share in rows:
            chosen = Context(self.system, self.history, ask, self.sizes)
            if share is None:
                newest(chosen, limit)
            else:
                ranked(chosen, limit, self.index, share)
            run.add(name, scored(question, chosen.messages(), whole))


def in_session(directory: Path, conversation: Conversation, run: Run) -> None:
    """The conversation as one full-resend session; each question asked of the preview."""
    system, name = conversation.system(), conversation.name
    with proxy(directory, memory=False) as (url, script, upstream):
        said = chat(conversation, conversation.sessions)
        held = replay(client(url, name), script, system, said)
        questions = conversation.questions
        if questions:
            settled(url, name, [*held, _user(questions[0].text)])
        baselines = Held(system, held[1:])
        found = 0
        for question in questions:
            ask = _user(question.text)
            whole = count_prompt_tokens({"messages": [*held, ask]})
            shown = preview(url, name, [*held, ask])
            run.due += shown["summary_due"] is not None
            run.budgets.add(int(shown["budget"]))
            proxied = scored(question, shown["messages"], whole)
            run.previews.append(max(proxied.tokens, int(shown["tokens_sent"])))
            run.add(PROXY, proxied)
            run.places.update(placed(question, shown["messages"]))
            found += proxied.found
            rows = [(WINDOWED, BUDGET, None), (HALVES, BUDGET, 0.5)]
            baselines.baselines(run, question, ask, whole, [*rows, (SAME, proxied.tokens, 0.5)])
        if questions:
            run.unlike += not previewed_as_sent(url, name, script, [*held, ask])
        run.by_conversation.append((name, found, len(questions)))
        checked(run, script, upstream)


def previewed_as_sent(url: str, session: str, script: Script, messages: list[Message]) -> bool:
    """Whether a request sends the messages its preview shows (asked once, of the last
    question: the request appends it to the session)."""
    shown = preview(url, session, messages)
    return asked(url, session, None, script, messages) == shown["messages"]


def across_sessions(directory: Path, conversation: Conversation, run: Run) -> None:
    """Each session a session of its own under one memory id; each question the first
    message of a new session under it, scored on what the upstream received."""
    system, memory = conversation.system(), conversation.name
    with proxy(directory, memory=True) as (url, script, upstream):
        history: list[Message] = []
        for session in conversation.sessions:
            said = chat(conversation, (session,))
            held = replay(client(url, f"{memory}-s{session.number}", memory), script, system, said)
            history += held[1:]
        baselines = Held(system, history)
        found = 0
        for number, question in enumerate(conversation.questions):
            ask, name = _user(question.text), f"{memory}-q{number}"
            whole = count_prompt_tokens({"messages": [system, *history, ask]})
            if number == 0:
                sent, note = probed(url, name, memory, script, [system, ask])
                run.notes.append(note)
            else:
                sent = asked(url, name, memory, script, [system, ask])
            proxied = scored(question, sent, whole)
            run.add(PROXY_MEMORY, proxied)
            run.places.update(placed(question, sent))
            found += proxied.found
            rows = [(EARLIER_NEWEST, BUDGET, None), (EARLIER_RANKED, BUDGET, 0.0)]
            baselines.baselines(run, question, ask, whole, [*rows, (SAME, proxied.tokens, 0.0)])
        run.by_conversation.append((memory, found, len(conversation.questions)))
        checked(run, script, upstream)


def asked(
    url: str, session: str, memory: str | None, script: Script, messages: list[Message]
) -> list[dict[str, Any]]:
    """`messages` sent as a request of `session`: the messages the upstream received."""
    script.expected, script.received = (messages[-1]["content"], UNANSWERED), None
    send(client(url, session, memory), messages)
    assert script.received is not None
    return list(script.received["messages"])


def probed(
    url: str, session: str, memory: str, script: Script, messages: list[Message]
) -> tuple[list[dict[str, Any]], str]:
    """`asked`, and whether the preview takes the memory id: of the new session before
    the request, and of the same session after it."""

    def previewed() -> httpx.Response:
        return httpx.post(
            f"{url}/v1/sessions/{session}/preview",
            json={"model": MODEL, "messages": messages},
            headers={"X-Memory-Id": memory, **AUTHORIZATION},
            timeout=60,
        )

    before = previewed()
    sent = asked(url, session, memory, script, messages)
    after = previewed()
    after.raise_for_status()
    return sent, (
        f"the preview and the memory id: a new session's preview answers {before.status_code};"
        f" once asked, its preview shows {_memory_blocks(after.json()['messages'])} memory"
        f" blocks where the request sent {_memory_blocks(sent)} (so questions are sent, and"
        " scored on what the upstream received)"
    )


def _memory_blocks(messages: list[dict[str, Any]]) -> int:
    prefixes = (MEMORY_PREFIX, MEMORY_RECALL_PREFIX)
    return sum(text_of(m.get("content")).startswith(prefixes) for m in messages)


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def quick_form(conversation: Conversation) -> Conversation:
    """Its first sessions, and a few of the questions whose evidence is in them."""
    sessions = conversation.sessions[:QUICK_SESSIONS]
    numbers = {s.number for s in sessions}
    questions = [q for q in conversation.questions if q.sessions <= numbers]
    by_category = [[q for q in questions if q.category == c] for c in CATEGORIES]
    spread = [q for row in itertools.zip_longest(*by_category) for q in row if q is not None]
    chosen = set(map(id, spread[:QUICK_QUESTIONS]))
    picked = tuple(q for q in questions if id(q) in chosen)  # in the order they were asked
    return replace(conversation, sessions=sessions, questions=picked)


def benchmark(directory: Path, quick: bool = False) -> str:
    """Both modes over the development half (quick: the first conversation's first
    sessions and a few questions)."""
    conversations = load(locate())
    if quick:
        conversations = [quick_form(conversations[0])]
    unscorable = sum(c.unscorable for c in conversations)
    turns = sum(len(s.turns) for c in conversations for s in c.sessions)
    lines = [
        f"{len(conversations)} conversations ({', '.join(c.name for c in conversations)}),"
        f" {sum(len(c.sessions) for c in conversations)} sessions, {turns:,} turns;"
        f" a {WINDOW:,}-token model; {unscorable} questions left out (their evidence names"
        " no turn of the conversation); the summarizer keeps the gist, never a value",
    ]
    began = time.monotonic()
    for title, mode in (("in-session", in_session), ("memory", across_sessions)):
        run, start = Run(BUDGET, WINDOW), time.monotonic()
        for conversation in conversations:
            mode(directory, conversation, run)
        lines += ["", *report(title, run, time.monotonic() - start)]
    lines += ["", f"elapsed: {time.monotonic() - began:.0f} s"]
    return "\n".join(lines)
