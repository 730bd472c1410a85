"""What a session costs with the provider's prompt cache counted: resending everything,
the proxy without and with issue 38's compaction and tool stubs, and with a lean window.

Two seeded sessions (`tests/benchmarks/workloads.py`) on one virtual clock, shared by
the client, the proxy (in this process, `create_app(settings, clock=...)`) and the test
upstream, so idle gaps longer than the cache's TTL take no real time:

- the agent, Claude-Code-shaped, through the Messages door to an
  `anthropic/claude-sonnet-4-5` deployment, with Claude Code's own breakpoints (the
  system's last block and the last message's), compacting itself at 92% of the window;
- the chat app, through the chat door to an `openai/gpt-4.1` deployment.

Every strategy is priced from the usage the upstream itself reported (input, cache
read, cache write, output; the proxy's summarizer calls and the client's own compaction
calls included), at LiteLLM's prices for the model; probe recall is scored on the exact
context the upstream received for each probe (`tests/benchmarks/scorecard.probed`).
Through a proxy, each request is settled before the next (`tests/benchmarks/settling.py`):
a summary made ahead lands before the next turn, so a run repeats to the cent.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import yaml

from proxy.config.settings import ContextSettings, load_settings
from proxy.http.app import create_app
from proxy.summary.fold import SYSTEM_PROMPT
from proxy.upstream import adapter
from tests.benchmarks import scorecard
from tests.benchmarks.settling import settled
from tests.benchmarks.statements import AREAS, Planted
from tests.benchmarks.workloads import Session, Turn, agent_session, call, chat_session
from tests.clock import Clock
from tests.servers import serve
from tests.upstream import FakeUpstream, Reply
from tests.upstream_messages import last_user_text
from tests.waiting import eventually

AGENT_MODEL, CHAT_MODEL = "claude-sonnet-4-5", "gpt-4.1"
AGENT_WINDOW, CHAT_WINDOW = 200_000, 16_384
COMPACT_AT = 0.92  # Claude Code compacts its conversation at ~92% of the window
# Claude Code's request for a summary of its conversation, and how it goes on after it.
COMPACT_REQUEST = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions."
)
CONTINUED = (
    "This session is being continued from a previous conversation that ran out of "
    "context. The conversation is summarized below:\n"
)
MARK = {"type": "ephemeral"}
# LiteLLM's prices as shipped, read before any Router writes deployments into its map.
_MAP = {name: dict(adapter.model_cost[name]) for name in (AGENT_MODEL, CHAT_MODEL)}


@dataclass(frozen=True)
class Rates:
    """USD per token, from LiteLLM's cost map (a missing cache price is the input's)."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    @classmethod
    def of(cls, model: str) -> Rates:
        info = _MAP[model]
        price = float(info["input_cost_per_token"])
        return cls(
            price,
            float(info["output_cost_per_token"]),
            float(info.get("cache_read_input_token_cost") or price),
            float(info.get("cache_creation_input_token_cost") or price),
        )


@dataclass
class Tokens:
    """A request's usage as its provider billed it: `prompt` is every input token."""

    prompt: int = 0
    read: int = 0
    written: int = 0
    output: int = 0

    @classmethod
    def of(cls, usage: dict[str, Any]) -> Tokens:
        if "cache_read_input_tokens" in usage:  # Anthropic: input_tokens is the uncached part
            read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
            return cls(
                usage["input_tokens"] + read + written, read, written, usage["output_tokens"]
            )
        details = usage.get("prompt_tokens_details") or {}
        return cls(
            usage["prompt_tokens"], details.get("cached_tokens") or 0, 0, usage["completion_tokens"]
        )

    def add(self, other: Tokens) -> None:
        self.prompt += other.prompt
        self.read += other.read
        self.written += other.written
        self.output += other.output

    def cost(self, rates: Rates) -> float:
        uncached = self.prompt - self.read - self.written
        return (
            uncached * rates.input
            + self.read * rates.cache_read
            + self.written * rates.cache_write
            + self.output * rates.output
        )


def is_summarizer(body: dict[str, Any]) -> bool:
    """The proxy's own summarizer call (chat or Messages shape)."""
    system = body.get("system")
    if isinstance(system, list):
        system = " ".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    if isinstance(system, str):
        return system.startswith(SYSTEM_PROMPT[:80])
    messages = body.get("messages") or [{}]
    return str(messages[0].get("content")).startswith(SYSTEM_PROMPT[:80])


def last_text(body: dict[str, Any]) -> str:
    if "system" in body or isinstance((body.get("messages") or [{}])[-1].get("content"), list):
        return last_user_text(body)
    return str(body["messages"][-1].get("content") or "")


def gist(text: str) -> str:
    """A summary that keeps only which areas came up, never a value (as the scorecard's)."""
    areas = sorted({a for a in AREAS if a in text})
    return f"The user and the assistant worked on the {', '.join(areas) or 'project'} code."


@dataclass
class Responder:
    """The upstream's answers: the proxy's summarizer gets a gist of its new messages,
    a client's own compaction a gist of its conversation, and anything else the reply
    the client's script says comes next (`pending`)."""

    pending: Reply = field(default_factory=lambda: Reply(content="OK."))

    def __call__(self, body: dict[str, Any]) -> str | Reply:
        if is_summarizer(body):
            prompt = last_text(body)
            return scorecard.respond(
                {"messages": [{"content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]}
            )
        if last_text(body).startswith(COMPACT_REQUEST[:60]):
            return gist(str(body.get("messages")))
        return self.pending


@dataclass
class Spend:
    """What a strategy's run cost, from the upstream's records."""

    client: Tokens = field(default_factory=Tokens)  # the client's requests
    compaction: Tokens = field(default_factory=Tokens)  # the client's own compaction calls
    summaries: Tokens = field(default_factory=Tokens)  # the proxy's summarizer calls
    calls: dict[str, int] = field(
        default_factory=lambda: {"client": 0, "compaction": 0, "summaries": 0}
    )

    def part(self, kind: str) -> Tokens:
        return {"client": self.client, "compaction": self.compaction, "summaries": self.summaries}[
            kind
        ]

    def total(self, rates: Rates) -> float:
        return sum(self.part(kind).cost(rates) for kind in self.calls)

    def prompt(self) -> tuple[int, int]:
        """All prompt tokens, and those the provider read from its cache."""
        parts = [self.part(kind) for kind in self.calls]
        return sum(p.prompt for p in parts), sum(p.read for p in parts)


@dataclass
class Ledger:
    """Reads the upstream's records as requests finish: each one's kind and turn, probes
    scored on the context they carried, bodies dropped (a run would hold gigabytes)."""

    upstream: FakeUpstream
    kinds: list[tuple[str, int]] = field(default_factory=list)  # per record: kind, turn
    turn: int = 0
    recalled: list[bool] = field(default_factory=list)

    def settle(self, probe: Planted | None = None) -> None:
        for record in self.upstream.requests[len(self.kinds) :]:
            body = record.body
            if is_summarizer(body):
                kind = "summaries"
            elif last_text(body).startswith(COMPACT_REQUEST[:60]):
                kind = "compaction"
            else:
                kind = "client"
                if probe is not None:
                    self.recalled.append(scorecard.probed(probe, pieces(body))[0])
                    probe = None
            self.kinds.append((kind, self.turn))
            record.body = {}

    def spend(self, rates: Rates) -> tuple[Spend, list[float]]:
        """The run's spend, and its cumulative cost at the end of each turn."""
        eventually(
            lambda: all(r.usage for r in self.upstream.requests),
            "the upstream's last answers",
            seconds=120,
        )
        self.settle()
        spend, by_turn = Spend(), [0.0] * (self.turn + 1)
        for record, (kind, turn) in zip(self.upstream.requests, self.kinds, strict=True):
            tokens = Tokens.of(record.usage)
            spend.part(kind).add(tokens)
            spend.calls[kind] += 1
            by_turn[turn] += tokens.cost(rates)
        running, cumulative = 0.0, []
        for cost in by_turn:
            running += cost
            cumulative.append(running)
        return spend, cumulative


def pieces(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every text a request carried, as messages of one string each (what
    `scorecard.probed` reads): system, message texts, tool results and calls."""
    texts: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for key in ("text", "content", "input", "arguments"):
                if key in value:
                    collect(value[key] if key != "input" else str(value[key]))

    collect(body.get("system"))
    collect(body.get("messages"))
    return [{"role": "user", "content": text} for text in texts]


class AgentClient:
    """Claude Code, as far as cost goes: resends its whole conversation with breakpoints
    on the system's last block and the last message's, and compacts it into one summary
    message at `COMPACT_AT` of the window (by the usage its last reply reported)."""

    def __init__(
        self,
        sdk: anthropic.Anthropic,
        session: Session,
        responder: Responder,
        compacts: bool,
        settles: bool,
    ) -> None:
        self.sdk, self.session, self.responder, self.compacts = sdk, session, responder, compacts
        self.settles = settles  # through a proxy: each request settled before the next
        half = len(session.system) // 8
        self.system = [
            {"type": "text", "text": session.system[:half]},
            {"type": "text", "text": session.system[half:], "cache_control": MARK},
        ]
        self.history: list[dict[str, Any]] = []
        self.used = 0  # the prompt tokens the last reply reported
        self.compactions = 0

    def send(self, messages: list[dict[str, Any]], reply: Reply) -> Any:
        self.responder.pending = reply
        last = messages[-1]
        blocks = [dict(b) for b in last["content"]]
        blocks[-1]["cache_control"] = MARK
        marked = [*messages[:-1], {"role": last["role"], "content": blocks}]
        with (
            settled() if self.settles else nullcontext(),
            self.sdk.messages.stream(
                model=AGENT_MODEL,
                max_tokens=4096,
                system=self.system,
                tools=self.session.tools,
                messages=marked,
            ) as stream,
        ):
            message = stream.get_final_message()
        used = message.usage
        self.used = used.input_tokens + (used.cache_read_input_tokens or 0)
        self.used += used.cache_creation_input_tokens or 0
        return message

    def say(self, text: str) -> None:
        """A user message (after a compaction, the summary message grows by it)."""
        block = {"type": "text", "text": text}
        if self.history and self.history[-1]["role"] == "user":
            self.history[-1]["content"].append(block)
        else:
            self.history.append({"role": "user", "content": [block]})

    def turn(self, number: int, turn: Turn) -> None:
        if self.compacts and self.used >= COMPACT_AT * AGENT_WINDOW:
            request = {"role": "user", "content": [{"type": "text", "text": COMPACT_REQUEST}]}
            summary = self.send([*self.history, request], Reply(content="(summary)"))
            text = "".join(b.text for b in summary.content if b.type == "text")
            self.history = [
                {"role": "user", "content": [{"type": "text", "text": CONTINUED + text}]}
            ]
            self.compactions += 1
        self.say(turn.user)
        for step, action in enumerate(turn.actions):
            reply = self.send(
                self.history,
                Reply(content="Let me check.", tool_calls=[call(action, number, step)]),
            )
            self.history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            use = next(b for b in reply.content if b.type == "tool_use")
            result = {"type": "tool_result", "tool_use_id": use.id, "content": action.result}
            if action.error:
                result["is_error"] = True
            self.history.append({"role": "user", "content": [result]})
        reply = self.send(self.history, Reply(content=turn.answer))
        self.history.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in reply.content],
            }
        )


class ChatClient:
    """A chat app: resends its conversation, compacting it at `COMPACT_AT` of the window."""

    def __init__(
        self,
        sdk: openai.OpenAI,
        session: Session,
        responder: Responder,
        compacts: bool,
        settles: bool,
    ) -> None:
        self.sdk, self.session, self.responder, self.compacts = sdk, session, responder, compacts
        self.settles = settles  # through a proxy: each request settled before the next
        self.history: list[dict[str, Any]] = []
        self.used = 0
        self.compactions = 0

    def send(self, messages: list[dict[str, Any]], reply: Reply) -> str:
        self.responder.pending = reply
        text = []
        with settled() if self.settles else nullcontext():
            stream = self.sdk.chat.completions.create(
                model=CHAT_MODEL,
                messages=[{"role": "system", "content": self.session.system}, *messages],
                stream=True,
                stream_options={"include_usage": True},
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    text.append(chunk.choices[0].delta.content)
                if chunk.usage:
                    self.used = chunk.usage.prompt_tokens
        return "".join(text)

    def turn(self, number: int, turn: Turn) -> None:
        if self.compacts and self.used >= COMPACT_AT * CHAT_WINDOW:
            request = {"role": "user", "content": COMPACT_REQUEST}
            summary = self.send([*self.history, request], Reply(content="(summary)"))
            self.history = [{"role": "user", "content": CONTINUED + summary}]
            self.compactions += 1
        if self.history and self.history[-1]["role"] == "user":
            self.history[-1]["content"] += "\n\n" + turn.user
        else:
            self.history.append({"role": "user", "content": turn.user})
        answer = self.send(self.history, Reply(content=turn.answer))
        self.history.append({"role": "assistant", "content": answer})


@dataclass(frozen=True)
class Strategy:
    name: str
    proxy: bool
    compacts: bool = True
    context: dict[str, Any] = field(default_factory=dict)


STRATEGIES = [
    Strategy("(a) resend, own compaction", proxy=False),
    Strategy("(b) proxy, cache_aware off", proxy=True, context={"cache_aware": False}),
    Strategy("(c) proxy, items 3+4", proxy=True),
    # The same proxy set to keep a small verbatim window: folds early, keeps 10% of the
    # room verbatim (what a user trades for cost; recall brings the rest back).
    Strategy(
        "(d) (c), lean window", proxy=True, context={"summarize_at": 0.35, "keep_recent_ratio": 0.1}
    ),
    Strategy("resend, never compacting", proxy=False, compacts=False),
]


@dataclass
class Outcome:
    strategy: Strategy
    spend: Spend
    cumulative: list[float]  # cost at the end of each turn
    recall: float
    compactions: int
    reported_net: float | None  # the proxy's own figure, where it exports one


def supports(name: str) -> bool:
    """Whether the proxy on this branch has the setting (`context.<name>`)."""
    return name in ContextSettings.model_fields


def takes_clock() -> bool:
    return "clock" in inspect.signature(create_app).parameters


@contextmanager
def endpoint(
    strategy: Strategy, upstream: FakeUpstream, clock: Clock, kind: str, directory: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    """Where the client sends: the upstream itself, or a proxy in front of it."""
    if not strategy.proxy:
        yield upstream.base_url, {}
        return
    provider = "anthropic/claude-sonnet-4-5" if kind == "agent" else "openai/gpt-4.1"
    base = upstream.base_url.removesuffix("/v1") if kind == "agent" else upstream.base_url
    window = AGENT_WINDOW if kind == "agent" else CHAT_WINDOW
    context = {k: v for k, v in strategy.context.items() if supports(k)}
    config = {
        "model_list": [
            {
                "model_name": AGENT_MODEL if kind == "agent" else CHAT_MODEL,
                "litellm_params": {"model": provider, "api_base": base, "api_key": "sk-cost"},
                "model_info": {"max_input_tokens": window},
            }
        ],
        "router_settings": {"num_retries": 0},
        "context": context,
        "server": {"max_body_bytes": 256 * 1024 * 1024},
        "session": {"path": tempfile.mkdtemp(dir=directory, prefix="cost-")},
    }
    path = directory / "cost.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = load_settings(path, environ={})
    app = create_app(settings, clock=clock) if takes_clock() else create_app(settings)
    with serve(app) as url:
        yield url + "/v1", {"X-Session-Id": f"cost-{kind}"}


def reported_net(base: str) -> float | None:
    """`context_proxy_net_saved_usd_total` summed over its series (None: not exported).
    The registry is the process's: every proxy this benchmark ran adds to it."""
    text = httpx.get(base.removesuffix("/v1") + "/metrics").text
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("context_proxy_net_saved_usd_total")
    ]
    return sum(values) if values else None


def run(strategy: Strategy, session: Session, kind: str, directory: Path) -> Outcome:
    clock = Clock()
    responder = Responder()
    upstream = FakeUpstream(clock=clock, default=Reply(respond=responder))
    with serve(upstream.app()) as upstream_url:
        upstream.base_url = upstream_url + "/v1"
        ledger = Ledger(upstream)
        with endpoint(strategy, upstream, clock, kind, directory) as (base, headers):
            client: AgentClient | ChatClient
            if kind == "agent":
                sdk = anthropic.Anthropic(
                    base_url=base.removesuffix("/v1"),
                    api_key="sk-cost",
                    max_retries=0,
                    default_headers=headers,
                    timeout=600,
                )
                client = AgentClient(sdk, session, responder, strategy.compacts, strategy.proxy)
            else:
                chat = openai.OpenAI(
                    base_url=base,
                    api_key="sk-cost",
                    max_retries=0,
                    default_headers=headers,
                    timeout=600,
                )
                client = ChatClient(chat, session, responder, strategy.compacts, strategy.proxy)
            before = reported_net(base) if strategy.proxy else None
            for number, turn in enumerate(session.turns):
                clock.advance(turn.idle)
                client.turn(number, turn)
                ledger.settle()
                ledger.turn += 1
            for fact, probe in zip(session.facts, session.probes, strict=True):
                clock.advance(probe.idle)
                client.turn(len(session.turns), probe)
                ledger.settle(fact)
            after = reported_net(base) if strategy.proxy else None
            net = None if after is None else after - (before or 0.0)
        spend, cumulative = ledger.spend(Rates.of(AGENT_MODEL if kind == "agent" else CHAT_MODEL))
    recall = sum(ledger.recalled) / max(len(session.facts), 1)
    return Outcome(strategy, spend, cumulative, recall, client.compactions, net)


def table(outcomes: list[Outcome], rates: Rates) -> list[str]:
    base = outcomes[0].spend.total(rates)
    resend = next(o for o in outcomes if not o.strategy.compacts).spend.total(rates)
    lines = [
        "| strategy | spent $ | of it summaries $ | vs (a) | cached share | probe recall"
        " | compactions (client) | summarizer calls | net vs never compacting $"
        " | proxy's own net $ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        total = o.spend.total(rates)
        prompt, read = o.spend.prompt()
        summaries = o.spend.summaries.cost(rates) + o.spend.compaction.cost(rates)
        own = (
            "n/a"
            if not o.strategy.proxy
            else ("not exported" if o.reported_net is None else f"{o.reported_net:.3f}")
        )
        lines.append(
            f"| {o.strategy.name} | {total:.3f} | {summaries:.3f} | {total / base:.2f}x |"
            f" {read / max(prompt, 1):.1%} | {o.recall:.0%} | {o.compactions} |"
            f" {o.spend.calls['summaries']} | {resend - total:.3f} | {own} |"
        )
    return lines


def verdict(outcomes: list[Outcome], rates: Rates) -> list[str]:
    """The issue's targets on the agent session for (c) and (d), printed (never asserted)."""
    a, b = outcomes[0], outcomes[1]

    def mark(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    lines = []
    for c in (o for o in outcomes[2:] if o.strategy.proxy):
        name = c.strategy.name.split()[0]
        ratio = c.spend.total(rates) / a.spend.total(rates)
        worst = max(range(len(a.cumulative)), key=lambda t: c.cumulative[t] - a.cumulative[t])
        above = c.cumulative[worst] - a.cumulative[worst]
        prompt, read = c.spend.prompt()
        share = read / max(prompt, 1)
        lines += [
            f"target: {name} costs <= 0.6x (a): {ratio:.2f}x  {mark(ratio <= 0.6)}",
            f"target: {name} never costs more than (a), turn by turn (cumulative): worst turn"
            f" {worst}, {name} - (a) = ${above:+.4f}  {mark(above <= 0)}",
            f"target: >= 95% of {name}'s prompt tokens read from the cache: {share:.1%}"
            f"  {mark(share >= 0.95)}",
            f"target: {name}'s probe recall unchanged vs (b): {c.recall:.0%} vs {b.recall:.0%}"
            f"  {mark(c.recall >= b.recall)}",
        ]
    return lines


def describe(kind: str, session: Session, rates: Rates) -> str:
    window = AGENT_WINDOW if kind == "agent" else CHAT_WINDOW
    model = AGENT_MODEL if kind == "agent" else CHAT_MODEL
    calls = sum(len(t.actions) for t in session.turns)
    long = sum(t.idle > 300 for t in session.turns)
    return (
        f"{kind}: {len(session.turns)} turns ({calls} tool calls), {len(session.facts)} facts"
        f" probed at the end, {long} idle gaps over 5 minutes; {model} at ${rates.input * 1e6:.2f}"
        f" input, ${rates.cache_read * 1e6:.2f} cache read, ${rates.cache_write * 1e6:.2f} cache"
        f" write, ${rates.output * 1e6:.2f} output per million tokens; a {window:,}-token window"
    )


def benchmark(directory: Path, quick: bool = False) -> str:
    notes = []
    if not takes_clock():
        notes.append(
            "note: create_app takes no clock on this branch: the proxy runs on the wall clock"
        )
    if not supports("cache_aware"):
        notes.append("note: no context.cache_aware on this branch: (b) and (c) are the same proxy")
    sessions = {
        "agent": agent_session(12, 4) if quick else agent_session(300, 40),
        "chat": chat_session(20, 4) if quick else chat_session(300, 40),
    }
    out = notes
    for kind, session in sessions.items():
        rates = Rates.of(AGENT_MODEL if kind == "agent" else CHAT_MODEL)
        outcomes = [run(s, session, kind, directory) for s in STRATEGIES]
        out += ["", describe(kind, session, rates), *table(outcomes, rates)]
        if kind == "agent":
            out += verdict(outcomes, rates)
    return "\n".join(out)
