"""The proxy's own time on every door: chat, Messages and Responses, native and translated.

For each route (a door and the API the proxy speaks to the upstream behind it), each
length (10 to 5,000 messages) and each mode:

- `none`: the whole conversation, no session header (a Responses request also says
  `"store": false`: without a session and without it, each new chain is a session of
  its own);
- `session`: the whole conversation with `X-Session-Id`, resent every turn;
- `append`: only the new user message (with the system prompt and tools), with
  `X-Session-Id` and `X-Session-Mode: append`, after the session exists.

Each turn, the targets take turns: the direct call, the proxy in each mode, and
LiteLLM's proxy on the same door with the full body. After the proxy's and LiteLLM's
replies the benchmark waits until that process's CPU time stands still (`quiet`): what
it does after a reply (LiteLLM's logging and cost of a 5,000-message call) would
otherwise be timed in the next target's latency. The proxy's CPU time counts it. The
direct call is the whole conversation sent to the upstream in the API the route speaks
to it: the client's own body on a native route (and the chat door), the same
conversation as a chat completion on a translated one (the test upstream's three APIs
cost it different times, and a translated route's upstream call is a chat completion).
"Own time" is a target's p50 minus the direct p50, so for `append` it is the extra time
against a client that sends the whole conversation itself. Beside it, one orjson parse
+ dump of the full body (a "body pass", the floor for any proxy that reads and forwards
JSON). Each length runs as conversations of `TURNS` turns, each one fresh, so a
conversation stays near the length it started at. Then one Claude-Code-shaped
conversation (a 35k-token system prompt, 25 tools, 300 messages of tool calls and
results) through the Messages door to the Anthropic deployment.

LiteLLM's proxy gets the same model list, told to translate where the proxy does: by
itself LiteLLM speaks the Responses API to every `openai/` deployment, on its Messages
door too. So its translated Responses deployment says `use_chat_completions_api: true`,
and `litellm_settings` `use_chat_completions_url_for_anthropic_messages: true` sends its
Messages door to chat completions for a non-Anthropic model.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.benchmarks import processes, workloads
from tests.benchmarks.conversations import SESSION_HEADER, SYSTEM, history, user_text
from tests.benchmarks.history import body_pass
from tests.benchmarks.load import Call, client, post, quantile

LENGTHS = (10, 1000, 5000)
QUICK_LENGTHS = (10, 100)
ROUNDS = 60
QUICK_ROUNDS = 2
TURNS = 5  # a conversation's timed turns; more rounds are more conversations
MODES = ("none", "session", "append")
QUIET = 0.01  # seconds a process's CPU time must stay still for it to be done
QUIET_WAIT = 3.0  # at most, after a reply
AGENT_MESSAGES = 300
APPEND = {"X-Session-Mode": "append"}
PATHS = {"chat": "/chat/completions", "messages": "/messages", "responses": "/responses"}


@dataclass(frozen=True)
class Route:
    name: str
    title: str
    door: str  # chat, messages or responses
    model: str  # the model name the client asks for
    provider: str  # the deployment behind it, at the test upstream
    native_api: bool

    @property
    def upstream(self) -> str:
        """The API the proxy speaks to the upstream on this route."""
        return self.door if self.native_api else "chat"


ROUTES = (
    Route(
        "chat",
        "the chat door to openai/gpt-4o-mini (chat completions)",
        "chat",
        "bench-chat",
        "openai/gpt-4o-mini",
        False,
    ),
    Route(
        "messages native",
        "the Messages door to anthropic/claude-sonnet-4-5 (Anthropic's Messages API)",
        "messages",
        "bench-claude",
        "anthropic/claude-sonnet-4-5",
        True,
    ),
    Route(
        "messages translated",
        "the Messages door to openai/gpt-4o-mini (chat completions)",
        "messages",
        "bench-chat",
        "openai/gpt-4o-mini",
        False,
    ),
    Route(
        "responses native",
        "the Responses door to openai/gpt-4.1, native_api: true (the Responses API)",
        "responses",
        "bench-responses",
        "openai/gpt-4.1",
        True,
    ),
    Route(
        "responses translated",
        "the Responses door to openai/gpt-4.1, native_api: false (chat completions)",
        "responses",
        "bench-responses-chat",
        "openai/gpt-4.1",
        False,
    ),
)
AGENT = ROUTES[1]


def model_list(upstream_url: str, litellm: bool = False) -> list[dict[str, Any]]:
    """One deployment per model name, every one with a window nothing outgrows."""
    deployments = []
    seen = set()
    for route in ROUTES:
        if route.model in seen:
            continue
        seen.add(route.model)
        model = route.provider
        # Anthropic's base is the host: LiteLLM adds `/v1/messages` itself.
        base = upstream_url.removesuffix("/v1") if model.startswith("anthropic/") else upstream_url
        params: dict[str, Any] = {"model": model, "api_base": base}
        params["api_key"] = processes.UPSTREAM_KEY
        info: dict[str, Any] = {"max_input_tokens": processes.HUGE_WINDOW}
        if not litellm:
            info["native_api"] = route.native_api
        elif route.door == "responses" and not route.native_api:
            params["use_chat_completions_api"] = True
        deployments.append(
            {"model_name": route.model, "litellm_params": params, "model_info": info}
        )
    return deployments


# A conversation, in the door's own shape


@dataclass
class Script:
    """A conversation as its client resends it: a system prompt, tools, the history so
    far (ending with a user message). The upstream answers "echo: <last user text>"."""

    system: Any
    tools: list[dict[str, Any]] | None
    messages: list[dict[str, Any]]
    user: Callable[[int], dict[str, Any]]  # the new user message of turn n
    reply: Callable[[str], dict[str, Any]]  # the assistant's message for a reply text
    last_text: Callable[[list[dict[str, Any]]], str] = field(default=lambda m: m[-1]["content"])


def plain(name: str, messages: int) -> Script:
    """`conversations.history`: string contents, the same in every door."""
    return Script(
        SYSTEM["content"],
        None,
        history(name, messages),
        lambda n: {"role": "user", "content": user_text(name, 10_000 + n)},
        lambda text: {"role": "assistant", "content": text},
    )


def agent(name: str, messages: int = AGENT_MESSAGES) -> Script:
    """Claude Code's shape in the Messages API: `workloads.agent_session` (a ~35k-token
    system prompt in two blocks, the second marked for the cache, and 25 tools), its
    turns as text, `tool_use` and `tool_result` blocks, cut after the user message
    nearest `messages`; the last message's last block marked, as Claude Code does."""
    session = _agent_session(messages)
    half = len(session.system) // 8
    system = [
        {"type": "text", "text": session.system[:half]},
        {"type": "text", "text": session.system[half:], "cache_control": {"type": "ephemeral"}},
    ]
    out: list[dict[str, Any]] = []
    ends: list[int] = []  # lengths that end with a user's text
    for number, turn in enumerate(session.turns):
        out.append({"role": "user", "content": [{"type": "text", "text": turn.user}]})
        ends.append(len(out))
        for step, action in enumerate(turn.actions):
            use: dict[str, Any] = {
                "type": "tool_use",
                "id": workloads.tool_use_id(number, step),
                "name": action.name,
                "input": action.arguments,
            }
            out.append({"role": "assistant", "content": [{"type": "text", "text": "On it."}, use]})
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use["id"]}
            result["content"] = action.result
            if action.error:
                result["is_error"] = True
            out.append({"role": "user", "content": [result]})
        out.append({"role": "assistant", "content": [{"type": "text", "text": turn.answer}]})
        if len(out) > messages:
            break
    cut = min(ends, key=lambda end: abs(end - messages))

    def last_text(conversation: list[dict[str, Any]]) -> str:
        for message in reversed(conversation):
            texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
            if message["role"] == "user" and texts:
                return " ".join(texts)
        return ""

    return Script(
        system,
        session.tools,
        out[:cut],
        lambda n: {"role": "user", "content": [{"type": "text", "text": user_text(name, n)}]},
        lambda text: {"role": "assistant", "content": [{"type": "text", "text": text}]},
        last_text,
    )


@functools.cache
def _agent_session(messages: int) -> workloads.Session:
    return workloads.agent_session(turns=messages // 2, facts=8)


def body(
    route: Route,
    script: Script,
    messages: list[dict[str, Any]],
    stateless: bool,
    mark: bool,
    door: str | None = None,
) -> bytes:
    """The request in the shape of `door` (the route's own by default; with `mark`, the
    last message's last block marked for the cache where the conversation uses blocks)."""
    door = door or route.door
    last = messages[-1]
    if mark and isinstance(last["content"], list):
        blocks = [
            *last["content"][:-1],
            last["content"][-1] | {"cache_control": {"type": "ephemeral"}},
        ]
        messages = [*messages[:-1], {"role": last["role"], "content": blocks}]
    if door == "chat":
        request: dict[str, Any] = {
            "model": route.model,
            "messages": [{"role": "system", "content": script.system}, *messages],
        }
    elif door == "messages":
        request = {"model": route.model, "max_tokens": 1024, "system": script.system}
        request |= {"messages": messages} | ({"tools": script.tools} if script.tools else {})
    else:
        request = {"model": route.model, "instructions": script.system, "input": messages}
        request |= {"store": False} if stateless else {}
    return orjson.dumps(request)


@dataclass(frozen=True)
class Turn:
    full: bytes  # the whole conversation
    stateless: bytes  # the same without a session (Responses: `"store": false`)
    new: bytes  # only the new user message
    direct: bytes  # the whole conversation in the API the route speaks upstream


def conversation(route: Route, script: Script, count: int) -> Iterator[Turn]:
    """`count` consecutive turns: each adds the echoed reply and a new user message."""
    messages = list(script.messages)
    for turn in range(count):
        if turn:
            messages += [script.reply("echo: " + script.last_text(messages)), script.user(turn)]
        full = body(route, script, messages, False, True)
        yield Turn(
            full,
            body(route, script, messages, True, True),
            # Marked, as a client marks the message it sends last: the proxy sends the
            # marks of the new turn only, never those stored with earlier ones.
            body(route, script, messages[-1:], False, True),
            full
            if route.upstream == route.door
            else body(route, script, messages, False, True, route.upstream),
        )


# Measuring


@dataclass(frozen=True)
class Row:
    messages: int
    mode: str
    body_bytes: float  # what the client sent in this mode (the median turn's)
    direct: float  # p50 of the whole conversation sent to the upstream directly
    proxy: float  # p50 through context-proxy in this mode
    litellm: float | None  # p50 through LiteLLM's proxy, the full body, no session
    body_pass: float  # one orjson parse + dump of the full body
    cpu: float = 0.0  # the proxy process's CPU time per request in this mode (p50)
    opening: float = 0.0  # p50 of a session's first request, the whole conversation
    quiet: tuple[float, float | None] = (0.0, None)  # p50 waits after a reply (`quiet`)

    @property
    def own(self) -> float:
        return self.proxy - self.direct

    @property
    def litellm_own(self) -> float | None:
        return None if self.litellm is None else self.litellm - self.direct


@dataclass(frozen=True)
class Urls:
    upstream: str  # its `/v1` base
    proxy: str
    litellm: str | None
    proxy_cpu: Callable[[], float] = lambda: 0.0  # the proxy process's CPU seconds so far
    litellm_cpu: Callable[[], float] = lambda: 0.0  # LiteLLM's proxy's


async def quiet(cpu: Callable[[], float], waits: list[float]) -> None:
    """Wait until a process has done what it does after a reply (its CPU time still for
    `QUIET` seconds), at most `QUIET_WAIT`; how long it took added to `waits`. The next
    target is timed on cores it does not share with that work."""
    start = last = time.monotonic()
    used = cpu()
    while last - start < QUIET_WAIT:
        await asyncio.sleep(QUIET)
        now, more = time.monotonic(), cpu()
        if more - used < QUIET / 10:
            break
        last, used = now, more
    waits.append(last - start)


async def timed(session: aiohttp.ClientSession, url: str, call: Call, what: str) -> float:
    timing = await post(session, url, call, stream=False)
    if timing is None:
        headers = {"content-type": "application/json", **call.headers}
        async with session.post(url, data=call.body, headers=headers) as response:
            text = (await response.text())[:500]
        raise RuntimeError(f"{what}: {response.status} {text}")
    return timing[0]


async def measure(
    session: aiohttp.ClientSession,
    urls: Urls,
    route: Route,
    script: Callable[[str], Script],
    rounds: int,
) -> list[Row]:
    """`rounds` turns of conversations of one length, `TURNS` turns each (so the length
    stays near where it started), each conversation a fresh one of `script`."""
    timings: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    passes: list[float] = []
    sent: list[Turn] = []
    messages = 0
    for start in range(0, rounds, TURNS):
        conversation_script = script(f"doors-{uuid.uuid4().hex[:8]}")
        messages = len(conversation_script.messages)
        sent += await _conversation(
            session,
            urls,
            route,
            conversation_script,
            min(TURNS, rounds - start),
            (timings, cpu, passes),
        )
    sizes = {
        "none": statistics.median(len(turn.stateless) for turn in sent),
        "session": statistics.median(len(turn.full) for turn in sent),
        "append": statistics.median(len(turn.new) for turn in sent),
    }
    litellm = quantile(timings["litellm"], 0.5) if "litellm" in timings else None
    return [
        Row(
            messages=messages,
            mode=mode,
            body_bytes=sizes[mode],
            direct=quantile(timings["direct"], 0.5),
            proxy=quantile(timings[mode], 0.5),
            litellm=litellm,
            body_pass=statistics.median(passes),
            cpu=quantile(cpu[mode], 0.5),
            opening=quantile(timings["opening"], 0.5),
            quiet=(
                quantile(timings["quiet proxy"], 0.5),
                quantile(timings["quiet litellm"], 0.5) if "quiet litellm" in timings else None,
            ),
        )
        for mode in MODES
    ]


async def _conversation(
    session: aiohttp.ClientSession,
    urls: Urls,
    route: Route,
    script: Script,
    turns: int,
    measured: tuple[dict[str, list[float]], dict[str, list[float]], list[float]],
) -> list[Turn]:
    """One conversation: two sessions made with its first turn (untimed, with the direct,
    stateless and LiteLLM calls as a warm-up), then `turns` turns, the targets one after
    another in each; their times added to `timings`, the proxy's CPU time for each of
    its calls to `cpu`, each full body's pass to `passes`. Returns the timed turns."""
    timings, cpu, passes = measured
    nonce = uuid.uuid4().hex[:8]
    ids = {"session": f"doors-{nonce}-full", "append": f"doors-{nonce}-append"}
    door = "/v1" + PATHS[route.door]
    calls = list(conversation(route, script, turns + 1))
    targets: list[tuple[str, str, Callable[[Turn], Call]]] = [
        ("direct", urls.upstream + PATHS[route.upstream], lambda t: Call(t.direct, {})),
        ("none", urls.proxy + door, lambda t: Call(t.stateless, {})),
        ("session", urls.proxy + door, lambda t: Call(t.full, {SESSION_HEADER: ids["session"]})),
        (
            "append",
            urls.proxy + door,
            lambda t: Call(t.new, {SESSION_HEADER: ids["append"], **APPEND}),
        ),
    ]
    if urls.litellm is not None:
        targets.append(("litellm", urls.litellm + door, lambda t: Call(t.stateless, {})))
    first = calls[0]
    for mode in ("session", "append"):  # the sessions, with the whole conversation
        call = Call(first.full, {SESSION_HEADER: ids[mode]})
        timings.setdefault("opening", []).append(
            await timed(session, urls.proxy + door, call, mode)
        )
    for target, url, make in targets:
        if target not in ("session", "append"):
            await timed(session, url, make(first), f"{route.name}: {target} (warm-up)")
    for number, turn in enumerate(calls[1:]):
        # In the same stretch, and before the targets: timed after LiteLLM's proxy has
        # spent a second of CPU on the same cores, a pass took twice as long.
        passes.append(body_pass(turn.full))
        # The targets in turn, each turn starting one further on: the one after LiteLLM's
        # second of CPU finds the caches cold, and no target is always that one.
        shift = number % len(targets)
        for target, url, make in targets[shift:] + targets[:shift]:
            what = f"{route.name}, {len(script.messages)} messages: {target}"
            used = urls.proxy_cpu()
            timings.setdefault(target, []).append(await timed(session, url, make(turn), what))
            if target in MODES:  # its CPU time with what it does after the reply
                await quiet(urls.proxy_cpu, timings.setdefault("quiet proxy", []))
                cpu.setdefault(target, []).append(urls.proxy_cpu() - used)
            elif target == "litellm":
                await quiet(urls.litellm_cpu, timings.setdefault("quiet litellm", []))
    await _check_sessions(session, urls.proxy, ids)
    return calls[1:]


async def _check_sessions(session: aiohttp.ClientSession, proxy: str, ids: dict[str, str]) -> None:
    """Both sessions hold the same conversation: the appended turns were turns of it."""
    counts = {}
    for mode, name in ids.items():
        async with session.get(proxy + "/v1/sessions/-", params={"id": name}) as response:
            counts[mode] = (await response.json())["stats"]["messages"]
    if counts["session"] != counts["append"]:
        raise RuntimeError(f"the sessions differ: {counts}")


# Reporting


def _ms(value: float | None, width: int) -> str:
    return f"{value * 1e3:{width}.2f}" if value is not None else f"{'-':>{width}}"


def table(title: str, rows: list[Row]) -> list[str]:
    lines = [
        f"{title}",
        f"{'messages':>8} {'mode':8} {'body KB':>8} {'direct p50':>10} {'own proxy':>10} "
        f"{'own LiteLLM':>11} {'ratio':>6} {'body pass':>9} {'own/pass':>8} "
        f"{'proxy CPU':>9}   (ms)",
    ]
    for row in rows:
        other = row.litellm_own
        ratio = f"{row.own / other:6.2f}" if other and other > 0 else f"{'-':>6}"
        lines.append(
            f"{row.messages:>8} {row.mode:8} {row.body_bytes / 1024:8.1f} "
            f"{_ms(row.direct, 10)} {_ms(row.own, 10)} {_ms(other, 11)} {ratio} "
            f"{_ms(row.body_pass, 9)} {row.own / row.body_pass:8.1f} {_ms(row.cpu, 9)}"
        )
    waits = {row.messages: row.quiet for row in rows}
    lines.append(
        "quiet after a reply (p50 ms, the proxy / LiteLLM's): "
        + ", ".join(f"{n}: {_ms(a, 0)} / {_ms(b, 0)}" for n, (a, b) in waits.items())
    )
    return lines


def targets(results: dict[str, list[Row]]) -> list[str]:
    """The issue's targets, each with its verdict (printed, never asserted)."""
    lines = []
    chat = {row.mode: row for row in results["chat"] if row.messages == min(_lengths(results))}
    for name, rows in results.items():
        for mode in MODES:
            mine = [row for row in rows if row.mode == mode]
            first, last = mine[0], mine[-1]
            growth = last.own - first.own
            passes = growth / last.body_pass
            cpu = last.cpu - first.cpu
            lines.append(
                f"target: {name}, {mode}: own time from {first.messages} to {last.messages} "
                f"messages grows by at most 3 body passes: {growth * 1e3:+.2f} ms = "
                f"{passes:.1f} passes (the proxy's CPU time: {cpu * 1e3:+.2f} ms = "
                f"{cpu / last.body_pass:.1f})  {'PASS' if passes <= 3 else 'MISS'}"
            )
            if name != "chat":
                times = first.own / chat[mode].own if chat[mode].own > 0 else float("inf")
                lines.append(
                    f"target: {name}, {mode}: at {first.messages} messages within 1.5x the chat "
                    f"door's: {first.own * 1e3:.2f} ms against {chat[mode].own * 1e3:.2f} ms = "
                    f"{times:.2f}x  {'PASS' if times <= 1.5 else 'MISS'}"
                )
    for name, rows in results.items():
        later = [row for row in rows if row.mode == "session"][-1]
        times = later.opening / later.proxy
        lines.append(
            f"target: {name}: the first request of a {later.messages}-message session under"
            f" 3x a later one: {later.opening * 1e3:.1f} ms against {later.proxy * 1e3:.1f} ms"
            f" = {times:.2f}x  {'PASS' if times < 3 else 'MISS'}"
        )
    for name, rows in results.items():
        by = {(row.messages, row.mode): row for row in rows}
        worse = [
            f"{n} (+{(by[n, 'append'].proxy - by[n, 'session'].proxy) * 1e3:.2f} ms)"
            for n in sorted({row.messages for row in rows})
            if by[n, "append"].proxy > by[n, "session"].proxy
        ]
        lines.append(
            f"target: {name}: append never costs more than a full resend: "
            + (f"more at {', '.join(worse)}  MISS" if worse else "never more  PASS")
        )
    return lines


def _lengths(results: dict[str, list[Row]]) -> list[int]:
    return sorted({row.messages for rows in results.values() for row in rows})


def report(
    results: dict[str, list[Row]],
    agent_rows: list[Row],
    rounds: int,
    memory: tuple[float, float],
) -> str:
    lines = [
        f"rounds: {rounds} timed turns a length and route, in conversations of {TURNS} turns "
        "(each after one untimed); own time = p50 minus the direct p50 of the whole "
        "conversation in the API the route speaks upstream; LiteLLM: the full body, no "
        "session; body KB: the median turn's",
    ]
    titles = {route.name: route.title for route in ROUTES}
    for name, rows in results.items():
        lines += ["", *table(f"{name}: {titles[name]}", rows)]
    agent_title = f"claude-code shape: {AGENT.title}; 35k-token system, 25 tools"
    lines += ["", *table(agent_title, agent_rows)]
    lines += ["", *targets(results)]
    by = {row.mode: row for row in agent_rows}
    more = by["append"].proxy - by["session"].proxy
    lines.append(
        "target: claude-code shape: append never costs more than a full resend: "
        + (f"more by {more * 1e3:+.2f} ms  MISS" if more > 0 else "never more  PASS")
    )
    before, after = memory
    lines.append(
        f"target: the proxy's RSS after the long-history runs within 1.2x of before: "
        f"{before:.0f} MB after the {min(_lengths(results))}-message runs, at most "
        f"{after:.0f} MB after the longer ones = {after / before:.2f}x  "
        + ("PASS" if after <= 1.2 * before else "MISS")
    )
    return "\n".join(lines)


async def benchmark(
    directory: Path,
    rounds: int = ROUNDS,
    lengths: tuple[int, ...] = LENGTHS,
    with_litellm: bool = True,
) -> str:
    with processes.upstream() as upstream_url:
        config: dict[str, Any] = {
            "model_list": model_list(upstream_url),
            "router_settings": {"num_retries": 0},
            "server": {"max_body_bytes": 64 * 1024 * 1024},
        }
        with processes.context_proxy_process(config, directory) as (proxy_url, process):
            rss = functools.partial(_rss, process.pid)
            cpu = functools.partial(_cpu, process.pid)
            if not with_litellm:
                urls = Urls(upstream_url, proxy_url, None, cpu)
                return await _run(urls, rounds, lengths, rss)
            litellm_config = {
                "model_list": model_list(upstream_url, litellm=True),
                "router_settings": {"num_retries": 0},
                "litellm_settings": {"use_chat_completions_url_for_anthropic_messages": True},
            }
            with processes.litellm_proxy_process(litellm_config, directory) as litellm:
                litellm_url, litellm_process = litellm
                litellm_cpu = functools.partial(_cpu, litellm_process.pid)
                urls = Urls(upstream_url, proxy_url, litellm_url, cpu, litellm_cpu)
                return await _run(urls, rounds, lengths, rss)


async def _run(urls: Urls, rounds: int, lengths: tuple[int, ...], rss: Callable[[], float]) -> str:
    """Every route at each length, shortest first: the proxy's resident memory is read
    after the shortest (warm, nothing long yet) and after everything."""
    results: dict[str, list[Row]] = {route.name: [] for route in ROUTES}
    memory = []
    async with client() as session:
        for n in lengths:
            for route in ROUTES:
                script = functools.partial(plain, messages=n)
                results[route.name] += await measure(session, urls, route, script, rounds)
            memory.append(rss())
        agent_rows = await measure(session, urls, AGENT, agent, rounds)
    memory.append(rss())
    return report(results, agent_rows, rounds, (memory[0], max(memory[1:])))


def _cpu(pid: int) -> float:
    """A process's CPU time so far, every thread's, in seconds (the scheduler's own
    nanoseconds: a request's is less noisy than its latency on a shared machine)."""
    tasks = Path(f"/proc/{pid}/task")
    total = 0
    for task in tasks.iterdir():
        with contextlib.suppress(OSError):  # a worker thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def _rss(pid: int) -> float:
    """A process's resident memory, MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line[:6] == "VmRSS:") / 1024
