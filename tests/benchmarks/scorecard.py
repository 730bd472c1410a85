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
rewritten by every fold.
"""

from __future__ import annotations

import itertools
import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import orjson
import yaml

from proxy.app import create_app
from proxy.config import load_settings
from proxy.context import SUMMARY_PREFIX
from proxy.local import LOCAL_MODEL, local_model_server
from proxy.summarize import APPEND_TASK, SYSTEM_PROMPT
from tests.servers import serve
from tests.upstream import Reply, count_prompt_tokens, running_upstream, text_tokens

TURNS = 300
WINDOW = 8192
SYSTEM = {"role": "system", "content": "You are the project assistant. Answer briefly."}
AREAS = [
    "billing",
    "search",
    "mobile",
    "analytics",
    "payments",
    "onboarding",
    "checkout",
    "inventory",
    "reporting",
    "shipping",
    "identity",
    "messaging",
]
FIRST = [
    "Maria",
    "Jonas",
    "Aiko",
    "Tomasz",
    "Lena",
    "Ravi",
    "Sofia",
    "Diego",
    "Hana",
    "Omar",
    "Ines",
    "Kofi",
]
LAST = [
    "Chen",
    "Okafor",
    "Lindqvist",
    "Novak",
    "Brennan",
    "Sato",
    "Haddad",
    "Moreau",
    "Kowalski",
    "Adeyemi",
]
WORDS = [
    "alpha",
    "bravo",
    "cedar",
    "delta",
    "ember",
    "falcon",
    "granite",
    "harbor",
    "indigo",
    "juniper",
]
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


@dataclass(frozen=True)
class Planted:
    subject: str
    values: tuple[str, ...]  # the last one is current

    @property
    def answer(self) -> str:
        return self.values[-1]


@dataclass
class Script:
    """A whole conversation: user turns (None marks a probe's place), facts, probes."""

    turns: list[str]
    facts: list[Planted]
    probes: list[str] = field(default_factory=list)


def _value(kind: str, rng: random.Random) -> str:
    if kind == "lead":
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if kind == "budget":
        return f"${rng.randint(1, 99)},{rng.randint(100, 999)}"
    if kind == "launch date":
        return f"2027-{rng.randint(1, 12):02d}-{rng.randint(10, 28)}"
    if kind == "config path":
        return f"/srv/{rng.choice(WORDS)}/{rng.choice(WORDS)}-{rng.randint(2, 99)}.yaml"
    if kind == "deploy script":
        return f"scripts/deploy_{rng.choice(WORDS)}_{rng.randint(10, 99)}.sh"
    if kind == "tracking ticket":
        return f"{rng.choice(['OPS', 'ENG', 'SEC'])}-{rng.randint(1000, 9999)}"
    return f"{rng.choice(WORDS).capitalize()} {rng.choice(LAST)}"  # a decision: a vendor


KINDS = (
    "lead",
    "budget",
    "launch date",
    "config path",
    "deploy script",
    "tracking ticket",
    "vendor",
)


def generate(turns: int = TURNS, seed: int = 14, facts: int = 36, updates: int = 10) -> Script:
    """The conversation: facts planted through the first 60% of it, a third of them
    updated later, chatter, pastes and tool calls between, then one probe per fact."""
    rng = random.Random(seed)
    subjects = [f"{area} {kind}" for kind in KINDS for area in AREAS]
    rng.shuffle(subjects)
    planted: list[Planted] = []
    script: list[str] = [""] * turns
    plant_turns = sorted(rng.sample(range(2, int(turns * 0.6)), facts))
    for at, subject in zip(plant_turns, subjects, strict=False):
        value = _value(subject.split(" ", 1)[1], rng)
        planted.append(Planted(subject, (value,)))
        script[at] = f"For the record, the {subject} is {value}. Please keep that in mind."
    free = [t for t in range(int(turns * 0.6), turns) if not script[t]]
    for index, at in zip(
        rng.sample(range(len(planted)), updates), sorted(rng.sample(free, updates)), strict=True
    ):
        fact = planted[index]
        value = _value(fact.subject.split(" ", 1)[1], rng)
        planted[index] = Planted(fact.subject, (*fact.values, value))
        script[at] = f"Change of plan: the {fact.subject} is now {value}. The old one is out."
    for turn in range(turns):
        if script[turn]:
            continue
        area = rng.choice(AREAS)
        if turn % 10 == 5:
            order = f"ORD-{rng.randint(10000, 99999)}"
            script[turn] = f"Can you check an order for the {area} team? [look up {order}]"
        elif turn % 20 == 11:
            lines = [
                f"{area}-worker-{i} INFO request handled in {rng.randint(5, 900)} ms status=200"
                for i in range(60)
            ]
            script[turn] = f"Here is the {area} log from this morning:\n" + "\n".join(lines)
        else:
            script[turn] = (
                f"Let's talk about the {area} roadmap: open questions, review notes and the"
                f" next steps for the team (item {turn})."
            )
    probes = [f"Remind me: what is the {fact.subject}?" for fact in planted]
    return Script(script, planted, probes)


def respond(body: dict[str, Any]) -> str | Reply:
    """The upstream: a gist-only summarizer, a tool call where the user asks for one,
    else a short acknowledgement.

    The summarizer keeps which areas were discussed, never a value. Asked for the
    summary's next segment, it writes a line about the new messages; asked to rewrite
    the summary, it restates the gist from its first words on ("In 4 parts so far, …"),
    as a model rewriting a summary would, so a rewrite is new bytes to a prompt cache."""
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
    return "Noted."


def failing_summarizer(body: dict[str, Any]) -> str | Reply:
    if body["messages"][0].get("content") == SYSTEM_PROMPT:
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
    recall: float
    stale: float
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
    found = stale = updated = 0
    for fact, at in zip(script.facts, probes, strict=True):
        text = orjson.dumps(bodies[at]["messages"]).decode()
        found += fact.answer in text
        if len(fact.values) > 1:
            updated += 1
            last = max(fact.values, key=lambda value: text.rfind(value))
            stale += text.rfind(last) >= 0 and last != fact.answer
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
        sum(sizes[at] for at in probes) / len(probes),
        cached / max(sum(sizes[1:]), 1),
        len(bodies),
        len({summary for body in bodies if (summary := _summary(body))}),
    )


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
            config["model_list"].append(
                {
                    "model_name": LOCAL_MODEL,
                    "litellm_params": {
                        "model": f"openai/{LOCAL_MODEL}",
                        "api_base": local_url,
                        "api_key": "local",
                    },
                    "model_info": {"max_input_tokens": LOCAL_WINDOW},
                }
            )
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
    bodies = [b for b in requests if b["messages"][0].get("content") != SYSTEM_PROMPT]
    prompts = [
        b["messages"][-1]["content"]
        for b in requests
        if b["messages"][0].get("content") == SYSTEM_PROMPT
    ]
    result = score(strategy.name, script, bodies, probes)
    result.calls = len(prompts)
    result.rewrites = sum("<previous_summary>" in p and APPEND_TASK not in p for p in prompts)
    return result


def cross_session(directory: Path, script: Script) -> tuple[float, float]:
    """Facts planted in one session, probed from new sessions with the same memory id
    (`memory.enabled`): the share of probes whose current value reaches the model, and
    the share that got a superseded value as current."""
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
            "memory": {"enabled": True},
            "session": {"path": str(directory / "memory")},
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
        text = orjson.dumps(body["messages"]).decode()
        found += fact.answer in text
        stale += any(value in text for value in fact.values[:-1])
    return found / len(script.facts), stale / len(script.facts)


def table(scores: list[Score], full: float | None) -> str:
    """The scores as a markdown table; `full`, the full history's tokens per probe, adds
    each strategy's share of it."""
    share = " of full history |" if full else ""
    lines = [
        f"| strategy | probe recall | stale facts | tokens per probe |{share} prefix-cache share |",
        "|---|---|---|---|---|" + ("---|" if full else ""),
    ]
    for s in scores:
        of_full = f" {s.probe_tokens / full:.0%} |" if full else ""
        lines.append(
            f"| {s.name} | {s.recall:.0%} | {s.stale:.0%} | {s.probe_tokens:,.0f} |{of_full}"
            f" {s.cache_share:.0%} |"
        )
    return "\n".join(lines)


def segments_table(scores: list[Score], rewritten: list[Score]) -> str:
    """Append-only summary segments (the default) against one summary that every fold
    rewrites, strategy by strategy, in the same run."""
    lines = [
        "summary segments against one summary rewritten by every fold:",
        "| strategy | summary | probe recall | tokens per probe | prefix-cache share"
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


def local_run(directory: Path) -> str:
    """A short conversation with the test's gist-only summarizer and with SmolLM2 (the
    local model, on llama.cpp): what a real small model keeps. Reported, not gated."""
    script = generate(SHORT_TURNS, seed=16, facts=10, updates=3)
    with local_model_server(LOCAL_WINDOW) as url:
        scores = [run_strategy(directory, strategy, script, url) for strategy in SHORT]
    for score_, strategy in zip(scores, SHORT, strict=True):
        summarizer = "SmolLM2" if strategy.local_summarizer else "test"
        score_.name = f"{score_.name}, {summarizer} summarizer ({score_.summaries} summaries)"
    updated = sum(len(fact.values) > 1 for fact in script.facts)
    return "\n".join(
        [
            f"{len(script.turns)} turns, {len(script.facts)} probes ({updated} of updated"
            f" facts), a {SHORT_WINDOW:,}-token model; SmolLM2-135M summarizes with a"
            f" {LOCAL_WINDOW:,}-token window",
            table(scores, None),
        ]
    )


def benchmark(directory: Path, quick: bool = False) -> str:
    """The table, for the seeded 300-turn conversation (quick: 100 turns, 12 facts), and
    (not quick) the short run with SmolLM2 as the summarizer."""
    script = generate(100, facts=12, updates=4) if quick else generate(TURNS)
    scores = [run_strategy(directory, strategy, script) for strategy in STRATEGIES]
    updated = sum(len(fact.values) > 1 for fact in script.facts)
    head = (
        f"{len(script.turns)} turns, {len(script.facts)} probes ({updated} of updated facts),"
        f" a {WINDOW:,}-token model (budget {int(0.8 * WINDOW):,})"
    )
    memory = generate(40, seed=15, facts=12, updates=3)
    recall, stale = cross_session(directory, memory)
    return "\n".join(
        [
            head,
            table(scores, scores[0].probe_tokens),
            f"memory across sessions: {len(memory.facts)} facts planted in one session "
            f"({sum(len(f.values) > 1 for f in memory.facts)} updated), each probed from a new"
            f" session with the same memory id: recall {recall:.0%}, stale {stale:.0%}",
            "",
            segments_table(scores, [run_strategy(directory, s, script) for s in REWRITTEN]),
            *([] if quick else ["", local_run(directory)]),
        ]
    )
