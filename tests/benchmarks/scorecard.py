"""The context-quality scorecard: does what was said early survive, at what cost?

A seeded generator writes a long conversation with planted facts (names, amounts, dates,
paths, commands, identifiers, decisions), later updates that supersede some of them, tool
calls, long pastes and chatter, then probes every fact at the end. The conversation runs
through the real proxy (openai SDK -> proxy -> a recording upstream on loopback) once per
strategy, and each probe is scored on the exact context the proxy sent upstream for it:

- probe recall: the fact's current value is in that context;
- stale rate: of the updated facts, those whose last value in the context is a
  superseded one (an old value offered as current);
- tokens: the probes' prompt tokens against the full history's at the same point;
- prefix-cache share: of all prompt tokens sent, those that are a prefix of the
  previous request's, token by token (the leading messages that are byte-identical, and
  the tokens the first changed message starts with): what a provider's prompt cache
  would bill as cached.

The upstream's summarizer is deterministic and keeps only the gist (which turns it folded
and the areas they were about), never a value: what survives is what the proxy keeps.
The summary strategies run twice more with `context.summary_segments: false`, so the run
shows what append-only summary segments do to the prefix-cache share against one summary
rewritten by every fold. Each request is settled before the next
(`tests/benchmarks/settling.py`): a summary made ahead lands before the next turn, so a
run's figures repeat.
"""

from __future__ import annotations

import itertools
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import orjson
import yaml

from proxy.cli.local import LOCAL_MODEL, local_model_server
from proxy.config.settings import load_settings
from proxy.http.app import create_app
from proxy.memory.facts import MEMORY_PREFIX
from proxy.recall.index import RECALL_PREFIX
from proxy.summary.fold import APPEND_TASK, SYSTEM_PROMPT
from proxy.summary.message import PINNED_LABEL, SUMMARY_PREFIX
from tests.benchmarks import statements
from tests.benchmarks.settling import settled
from tests.benchmarks.statements import AREAS, Planted, Script
from tests.servers import serve
from tests.summarizing import as_apart, asks_summary
from tests.upstream import Reply, count_prompt_tokens, running_upstream, text_tokens

TURNS = 300
WINDOW = 8192
SYSTEM = {"role": "system", "content": "You are the project assistant. Answer briefly."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
]
_TOOL_TURN = re.compile(r"\[look up (ORD-\d+)\]")
_PINNED = re.compile(re.escape(PINNED_LABEL) + r"(.*)\Z", re.S)
_NOTES = re.compile(r"\(Since then: (.*?)\.\)")
_REPLACED = re.compile(r"^(.*?): (.*) was replaced by (.*)$")


def generate(turns: int = TURNS, seed: int = 14, facts: int = 320, updates: int = 40) -> Script:
    """A seeded conversation of `turns` turns stating `facts` facts, `updates` of them
    updated later, with a tenth as many distractors (`tests.benchmarks.statements`)."""
    return statements.generate(turns, seed, facts, updates, distractors=max(2, facts // 10))


def respond(body: dict[str, Any]) -> str | Reply:
    """The upstream: a gist-only summarizer, a tool call where the user asks for one,
    else a short acknowledgement.

    The summarizer keeps which areas were discussed, never a value. Asked for the
    summary's next segment, it writes a line about the new messages; asked to rewrite
    the summary, it restates the gist from its first words on ("In 4 parts so far, …"),
    as a model rewriting a summary would, so a rewrite is new bytes to a prompt cache."""
    if asks_summary(body):  # apart or continuing the session's prompt: answered alike
        body = as_apart(body)
    messages = body["messages"]
    if messages[0].get("content") == SYSTEM_PROMPT:
        prompt = messages[-1]["content"]
        new = prompt.split("</previous_summary>")[-1]
        areas = sorted({a for a in AREAS if a in new})
        line = f"Then the user discussed the {', '.join(areas) or 'project'} work."
        previous = re.search(r"<previous_summary>\n(.*?)\n</previous_summary>", prompt, re.S)
        if previous is None:
            return f"The user discussed the project. {line}"
        if APPEND_TASK in prompt:  # the summary's next segment: the new messages only
            return line
        earlier = previous.group(1)
        parts = earlier.count("Then the user discussed") + sum(
            int(n) for n in re.findall(r"In (\d+) parts so far", earlier)
        )
        seen = sorted({a for a in AREAS if a in earlier or a in new})
        return f"In {parts + 1} parts so far, the user discussed the {', '.join(seen)} work."
    last = messages[-1]
    found = _TOOL_TURN.search(str(last.get("content") or "")) if last["role"] == "user" else None
    if found:
        arguments = orjson.dumps({"order_id": found.group(1)}).decode()
        call = {
            "id": f"call_{found.group(1)}",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": arguments},
        }
        return Reply(tool_calls=[call])
    return f"Noted (ack {len(messages)})."


def failing_summarizer(body: dict[str, Any]) -> str | Reply:
    if asks_summary(body):
        return Reply(status=500, error_message="summarizer offline")
    return respond(body)


@dataclass
class Strategy:
    name: str
    context: dict[str, Any]
    window: int = WINDOW
    summarizer_fails: bool = False
    local_summarizer: bool = False  # SmolLM2 on llama.cpp writes the summaries


STRATEGIES = [
    Strategy("full history", {"mode": "off"}, window=1_000_000),
    Strategy("truncation only", {"recall_ratio": 0, "pin_facts": False}, summarizer_fails=True),
    Strategy("summary", {"recall_ratio": 0, "pin_facts": False}),
    Strategy("summary + facts", {"recall_ratio": 0}),
    Strategy("summary + facts + recall", {}),
]
# The same summary strategies with every fold rewriting one summary, as before segments.
REWRITTEN = [
    Strategy(s.name, {**s.context, "summary_segments": False})
    for s in STRATEGIES
    if s.name in ("summary", "summary + facts + recall")
]
# The short run: SmolLM2 as the summarizer (its window is LOCAL_WINDOW), beside the test's.
SHORT_TURNS, LOCAL_WINDOW, SHORT_WINDOW = 48, 2048, 2048
SHORT = [
    Strategy(name, context, SHORT_WINDOW, local_summarizer=local)
    for local in (False, True)
    for name, context in [
        ("summary", {"recall_ratio": 0, "pin_facts": False}),
        ("summary + facts + recall", {}),
    ]
]


@dataclass
class Score:
    name: str
    recall: float  # probes whose current value reached the model whole, with its subject
    stale: float
    false: int  # distinct pinned or injected statements the conversation never made
    statements: int  # distinct pinned or injected statements
    probe_tokens: float  # mean prompt tokens of a probe request
    cache_share: float
    requests: int
    summaries: int  # folds that reached the model (distinct summaries sent)
    rewrites: int = 0  # summarizer calls that rewrote the summary so far (not a first one)
    calls: int = 0  # summarizer calls


def drive(client: openai.OpenAI, model: str, script: Script) -> list[int]:
    """Play the script as a full-resend client; the request index of every probe."""
    history: list[dict[str, Any]] = []
    probes: list[int] = []
    requests = 0

    def ask() -> None:
        nonlocal requests
        with settled():
            reply = client.chat.completions.create(
                model=model, messages=[SYSTEM, *history], tools=TOOLS
            )
        requests += 1
        message = reply.choices[0].message
        if message.tool_calls:
            call = message.tool_calls[0]
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [call.model_dump(include={"id", "type", "function"})],
                }
            )
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": f"{call.function.arguments}: shipped, 2 parcels",
                }
            )
            ask()
        else:
            history.append({"role": "assistant", "content": message.content})

    for text in script.turns:
        history.append({"role": "user", "content": text})
        ask()
    for probe in script.probes:
        history.append({"role": "user", "content": probe})
        probes.append(requests)
        ask()
    return probes


def score(name: str, script: Script, bodies: list[dict[str, Any]], probes: list[int]) -> Score:
    found = stale = 0
    for fact, at in zip(script.facts, probes, strict=True):
        recalled, offered_old = probed(fact, bodies[at]["messages"])
        found += recalled
        stale += offered_old
    said = {said for body in bodies for said in shown(body["messages"])}
    false = sum(not script.said(statement) for statement in said)
    updated = sum(len(fact.values) > 1 for fact in script.facts)
    sizes = [count_prompt_tokens(body) for body in bodies]
    cached = 0
    for before, after in itertools.pairwise(bodies):
        same = 0
        for a, b in zip(before["messages"], after["messages"], strict=False):
            if a != b:
                break
            same += 1
        messages = after["messages"]
        cached += count_prompt_tokens({"messages": messages[:same]}) if same else 0
        if same < min(len(before["messages"]), len(messages)):
            cached += _common_tokens(before["messages"][same], messages[same])
    return Score(
        name,
        found / len(script.facts),
        stale / max(updated, 1),
        false,
        len(said),
        sum(sizes[at] for at in probes) / len(probes),
        cached / max(sum(sizes[1:]), 1),
        len(bodies),
        len({summary for body in bodies if (summary := _summary(body))}),
    )


def probed(fact: Planted, messages: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Whether a request for `fact` had its current value whole in a piece that names
    its subject, and whether the last piece with any of its values shows a replaced one
    without the current one (an old value offered as current)."""
    parts = pieces(messages)
    found = any(fact.answer in part and fact.key <= statements.words(part) for part in parts)
    last = next((p for p in reversed(parts) if any(v in p for v in fact.values)), None)
    return found, last is not None and fact.answer not in last


def pieces(messages: list[dict[str, Any]]) -> list[str]:
    """A request's text in the pieces that each say something on their own, in order: a
    message, a recalled unit, a pinned fact, a remembered one."""
    found: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            found += [p for block in content.split("\n\n") for p in block.split("; ")]
    return found


def shown(messages: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    """The statements the proxy made in a request: pinned facts ("subject: value"),
    remembered facts, and recall's notes of replaced values (subject, old, new)."""
    said: set[tuple[str, ...]] = set()
    for message in messages:
        content = message.get("content")
        if message["role"] != "system" or not isinstance(content, str):
            continue
        if content.startswith(SUMMARY_PREFIX) and (pinned := _PINNED.search(content)):
            said |= {tuple(f.split(": ", 1)) for f in pinned[1].split("; ") if ": " in f}
        elif content.startswith(MEMORY_PREFIX):
            lines = content[len(MEMORY_PREFIX) :].splitlines()
            said |= {tuple(line[2:].split(": ", 1)) for line in lines if ": " in line}
        elif content.startswith(RECALL_PREFIX):
            for notes in _NOTES.findall(content):
                said |= {m.groups() for n in notes.split("; ") if (m := _REPLACED.match(n))}
    return said


def _summary(body: dict[str, Any]) -> str | None:
    """The summary a request carries (none before the first fold)."""
    return next(
        (
            str(m["content"])
            for m in body["messages"]
            if m["role"] == "system" and str(m["content"]).startswith(SUMMARY_PREFIX)
        ),
        None,
    )


def _common_tokens(before: dict[str, Any], after: dict[str, Any]) -> int:
    """The tokens a changed message starts with that it had before: a provider's cache
    keeps a prompt's prefix token by token, into the first message that changed."""
    old, new = before.get("content"), after.get("content")
    if before["role"] != after["role"] or not isinstance(old, str) or not isinstance(new, str):
        return 0
    same = 0
    for a, b in zip(text_tokens(old), text_tokens(new), strict=False):
        if a != b:
            break
        same += 1
    return same


def local_deployment(url: str) -> dict[str, Any]:
    """The local model's llama.cpp server at `url`, as a deployment of the model list."""
    return {
        "model_name": LOCAL_MODEL,
        "litellm_params": {"model": f"openai/{LOCAL_MODEL}", "api_base": url, "api_key": "local"},
        "model_info": {"max_input_tokens": LOCAL_WINDOW},
    }


def run_strategy(
    directory: Path, strategy: Strategy, script: Script, local_url: str | None = None
) -> Score:
    """`script` through the proxy with `strategy`; `local_url`, the local model's server,
    for a strategy whose summaries it writes."""
    with running_upstream() as upstream:
        upstream.default = Reply(
            respond=failing_summarizer if strategy.summarizer_fails else respond
        )
        upstream.exact_usage = False
        config = {
            "model_list": [
                {
                    "model_name": "scorecard",
                    "litellm_params": {
                        "model": "openai/gpt-4o-mini",
                        "api_base": upstream.base_url,
                        "api_key": "sk-score",
                    },
                    "model_info": {"max_input_tokens": strategy.window},
                }
            ],
            "context": strategy.context,
            # A store of its own: a run never continues another's session.
            "session": {"path": tempfile.mkdtemp(dir=directory, prefix="sessions-")},
        }
        if strategy.local_summarizer:
            assert local_url is not None
            config["model_list"].append(local_deployment(local_url))
            config["context"] = {
                **strategy.context,
                "summary_model": LOCAL_MODEL,
                "summary_timeout_seconds": 600,  # two shared cores: a fold takes a while
            }
        path = directory / "scorecard.yaml"
        path.write_text(yaml.safe_dump(config))
        with serve(create_app(load_settings(path, environ={}))) as url:
            client = openai.OpenAI(
                base_url=url + "/v1",
                api_key="score",
                max_retries=0,
                default_headers={"X-Session-Id": "scorecard"},
            )
            probes = drive(client, "scorecard", script)
        requests = [r.body for r in upstream.chat_requests()]
    bodies = [b for b in requests if not asks_summary(b)]
    prompts = [as_apart(b)["messages"][-1]["content"] for b in requests if asks_summary(b)]
    result = score(strategy.name, script, bodies, probes)
    result.calls = len(prompts)
    result.rewrites = sum("<previous_summary>" in p and APPEND_TASK not in p for p in prompts)
    return result


# Memory across sessions: the default, then each of its two parts alone.
MEMORY_RUNS = [
    ("facts + verbatim units", {}),
    ("facts only (`recall: false`)", {"recall": False}),
    ("verbatim units only (`max_injection_tokens: 0`)", {"max_injection_tokens": 0}),
]


def cross_session(
    directory: Path, script: Script, memory: dict[str, Any]
) -> tuple[float, float, int]:
    """Facts planted in one session, probed from new sessions with the same memory id
    (`memory.enabled`, and `memory`): the share of probes whose current value reaches
    the model whole with its subject, the share that got a superseded value as current,
    and the false statements injected."""
    with running_upstream() as upstream:
        upstream.default = Reply(respond=respond)
        upstream.exact_usage = False
        config = {
            "model_list": [
                {
                    "model_name": "scorecard",
                    "litellm_params": {
                        "model": "openai/gpt-4o-mini",
                        "api_base": upstream.base_url,
                        "api_key": "sk-score",
                    },
                    "model_info": {"max_input_tokens": WINDOW},
                }
            ],
            "memory": {"enabled": True, **memory},
            "session": {"path": tempfile.mkdtemp(dir=directory, prefix="memory-")},
        }
        path = directory / "memory.yaml"
        path.write_text(yaml.safe_dump(config))
        with serve(create_app(load_settings(path, environ={}))) as url:

            def client(session: str) -> openai.OpenAI:
                headers = {"X-Session-Id": session, "X-Memory-Id": "scorecard"}
                return openai.OpenAI(
                    base_url=url + "/v1", api_key="score", max_retries=0, default_headers=headers
                )

            drive(client("planting"), "scorecard", Script(script.turns, script.facts, []))
            for number, probe in enumerate(script.probes):
                client(f"probe-{number}").chat.completions.create(
                    model="scorecard", messages=[SYSTEM, {"role": "user", "content": probe}]
                )
        bodies = [r.body for r in upstream.chat_requests()][-len(script.probes) :]
    found = stale = 0
    for fact, body in zip(script.facts, bodies, strict=True):
        recalled, offered_old = probed(fact, body["messages"])
        found += recalled
        stale += offered_old
    said = {said for body in bodies for said in shown(body["messages"])}
    false = sum(not script.said(statement) for statement in said)
    return found / len(script.facts), stale / len(script.facts), false


def table(scores: list[Score], full: float | None) -> str:
    """The scores as a markdown table; `full`, the full history's tokens per probe, adds
    each strategy's share of it."""
    share = " of full history |" if full else ""
    lines = [
        "| strategy | exact recall | stale facts | false facts | tokens per probe |"
        f"{share} prefix-cache share |",
        "|---|---|---|---|---|---|" + ("---|" if full else ""),
    ]
    for s in scores:
        of_full = f" {s.probe_tokens / full:.0%} |" if full else ""
        lines.append(
            f"| {s.name} | {s.recall:.0%} | {s.stale:.0%} | {s.false} of {s.statements} |"
            f" {s.probe_tokens:,.0f} |{of_full} {s.cache_share:.0%} |"
        )
    return "\n".join(lines)


def segments_table(scores: list[Score], rewritten: list[Score]) -> str:
    """Append-only summary segments (the default) against one summary that every fold
    rewrites, strategy by strategy, in the same run."""
    lines = [
        "summary segments against one summary rewritten by every fold:",
        "| strategy | summary | exact recall | tokens per probe | prefix-cache share"
        " | summarizer calls (rewrites) |",
        "|---|---|---|---|---|---|",
    ]
    for before in rewritten:
        after = next(s for s in scores if s.name == before.name)
        for kind, s in (("one rewritten", before), ("append-only segments", after)):
            lines.append(
                f"| {s.name} | {kind} | {s.recall:.0%} | {s.probe_tokens:,.0f} |"
                f" {s.cache_share:.1%} | {s.calls} ({s.rewrites}) |"
            )
    return "\n".join(lines)


def describe(script: Script) -> str:
    updated = sum(len(fact.values) > 1 for fact in script.facts)
    return (
        f"{len(script.turns)} turns, {len(script.facts)} facts in {statements.PATTERNS}"
        f" phrasings ({updated} updated, {len(script.distractions)} distractors), one probe each"
    )


def local_run(directory: Path) -> str:
    """A short conversation with the test's gist-only summarizer and with SmolLM2 (the
    local model, on llama.cpp): what a real small model keeps. Reported, not gated."""
    script = generate(48, seed=16, facts=24, updates=4)
    with local_model_server(LOCAL_WINDOW) as url:
        scores = [run_strategy(directory, strategy, script, url) for strategy in SHORT]
    for score_, strategy in zip(scores, SHORT, strict=True):
        summarizer = "SmolLM2" if strategy.local_summarizer else "test"
        score_.name = f"{score_.name}, {summarizer} summarizer ({score_.summaries} summaries)"
    return "\n".join(
        [
            f"{describe(script)}; a {SHORT_WINDOW:,}-token model; SmolLM2-135M summarizes"
            f" with a {LOCAL_WINDOW:,}-token window",
            table(scores, None),
        ]
    )


def benchmark(directory: Path, quick: bool = False) -> str:
    """The table, for the seeded 300-turn conversation (quick: 100 turns, 100 facts),
    and (not quick) the short run with SmolLM2 as the summarizer."""
    script = generate(100, facts=100, updates=12) if quick else generate()
    scores = [run_strategy(directory, strategy, script) for strategy in STRATEGIES]
    head = f"{describe(script)}; a {WINDOW:,}-token model (budget {int(0.8 * WINDOW):,})"
    memory = generate(60, seed=15, facts=40, updates=6)
    across = [
        f"| {name} | {recall:.0%} | {stale:.0%} | {false} |"
        for name, settings in MEMORY_RUNS
        for recall, stale, false in [cross_session(directory, memory, settings)]
    ]
    return "\n".join(
        [
            head,
            table(scores, scores[0].probe_tokens),
            "",
            f"memory across sessions: {len(memory.facts)} facts planted in one session"
            f" ({sum(len(f.values) > 1 for f in memory.facts)} updated), each probed from a"
            " new session with the same memory id:",
            "| memory | exact recall | stale facts | false facts |",
            "|---|---|---|---|",
            *across,
            "",
            segments_table(scores, [run_strategy(directory, s, script) for s in REWRITTEN]),
            *([] if quick else ["", local_run(directory)]),
        ]
    )
