"""`context-proxy demo`: a scripted conversation through the proxy and a real local model.

The local model (SmolLM2-135M via llama.cpp) is both the chat model and the
summarizer. The script plants names, numbers, dates, paths and decisions early,
then talks long enough for them to be summarized away, and reports which of
them the summary kept, with and without the pinned-facts pass.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

from proxy.cli.local import LOCAL_MODEL, local_model_server, serve_in_background
from proxy.config.settings import Settings
from proxy.facts.literals import missing_facts
from proxy.http.app import create_app

__all__ = [
    "PLANTED",
    "SESSION",
    "SYSTEM",
    "DemoResult",
    "Turn",
    "filler",
    "main",
    "run_demo",
    "script",
]

SESSION = "demo"
SYSTEM = "You are a helpful assistant for a small bakery. Answer in one or two sentences."

# (message, the facts in it that a summary should keep)
PLANTED: list[tuple[str, list[str]]] = [
    ("My name is Dana Whitfield and I run the Harbor Lane bakery.", ["Dana Whitfield"]),
    ("Our supplier invoice INV-2291 is due on 2026-03-14.", ["INV-2291", "2026-03-14"]),
    ("The monthly flour budget is $4,250.", ["$4,250"]),
    ("We decided to open the second shop on Maple Street.", ["Maple Street"]),
    ("Our recipe database lives at /srv/bakery/recipes.db.", ["/srv/bakery/recipes.db"]),
    ("My business partner is Tomas Okafor; he handles payroll.", ["Tomas Okafor"]),
    ("Deliveries leave at 05:45 every morning.", ["05:45"]),
    ("Orders go through https://harborlane.example/order now.", ["https://harborlane.example/order"]),
]  # fmt: skip

_FILLER = (
    "the morning shift starts with the levain and then the rye dough rests while we shape "
    "baguettes and the glaze for the buns cools on the rack near the window so the counter "
    "stays clear for the pastry team who fold the butter into the croissant dough twice"
)
_FILLER_WORDS = _FILLER.split(" ")


def filler(turn: int, words: int = 70) -> str:
    """A long, fact-free message: makes the conversation outgrow the window."""
    start = (turn * 7) % len(_FILLER_WORDS)
    text = " ".join(_FILLER_WORDS[(start + i) % len(_FILLER_WORDS)] for i in range(words))
    return f"here are my notes on today, what would you change? {text}"


def script(turns: int) -> list[tuple[str, list[str]]]:
    """Facts first (one every other turn), then filler until `turns`."""
    lines: list[tuple[str, list[str]]] = []
    facts = iter(PLANTED)
    for turn in range(turns):
        planted = next(facts, None) if turn % 2 == 0 else None
        lines.append(planted if planted else (filler(turn), []))
    return lines


@dataclass
class Turn:
    number: int
    tokens_client: int
    tokens_sent: int
    compression: str


@dataclass
class DemoResult:
    turns: list[Turn] = field(default_factory=list)
    summary: str = ""
    summary_raw: str = ""
    pinned: str = ""
    facts_covered: list[str] = field(default_factory=list)
    kept_by_model: list[str] = field(default_factory=list)
    kept_with_pins: list[str] = field(default_factory=list)
    calibration: float | None = None
    budget: int = 0
    input_limit: int = 0
    messages_stored: int = 0


def run_demo(
    model_url: str,
    *,
    turns: int = 40,
    n_ctx: int = 2048,
    reply_tokens: int = 48,
    out: Callable[[str], None] = print,
) -> DemoResult:
    """Drive the conversation through a proxy wired to the model at `model_url`."""
    result = DemoResult(input_limit=n_ctx)
    with tempfile.TemporaryDirectory() as store:
        settings = Settings.model_validate(
            {
                "model_list": [
                    {
                        "model_name": LOCAL_MODEL,
                        "litellm_params": {
                            "model": f"openai/{LOCAL_MODEL}",
                            "api_base": model_url,
                            "api_key": "local",
                        },
                        "model_info": {"max_input_tokens": n_ctx},
                    }
                ],
                "router_settings": {"num_retries": 0},
                "session": {"path": store},
                "context": {"summary_timeout_seconds": 300},
            }
        )
        with serve_in_background(create_app(settings)) as proxy_url:
            _converse(proxy_url, turns, reply_tokens, result, out)
            _inspect(proxy_url, turns, reply_tokens, result)
    _report(result, out)
    return result


def _converse(
    proxy_url: str, turns: int, reply_tokens: int, result: DemoResult, out: Callable[[str], None]
) -> None:
    client = openai.OpenAI(
        base_url=proxy_url + "/v1",
        api_key="demo-key",
        max_retries=0,
        timeout=600,
        default_headers={"X-Session-Id": SESSION},
    )
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": SYSTEM}]
    out(f"{'turn':>4}  {'client':>7}  {'sent':>6}  compression")
    for number, (text, _) in enumerate(script(turns), start=1):
        messages.append({"role": "user", "content": text})
        raw = client.chat.completions.with_raw_response.create(
            model=LOCAL_MODEL, messages=messages, max_tokens=reply_tokens, temperature=0, seed=7
        )
        reply = raw.parse().choices[0].message.content or ""
        messages.append({"role": "assistant", "content": reply})
        turn = Turn(
            number,
            int(raw.headers["X-Context-Tokens-Original"]),
            int(raw.headers["X-Context-Tokens-Sent"]),
            raw.headers["X-Context-Compression"],
        )
        result.turns.append(turn)
        out(f"{turn.number:>4}  {turn.tokens_client:>7}  {turn.tokens_sent:>6}  {turn.compression}")


def _inspect(proxy_url: str, turns: int, reply_tokens: int, result: DemoResult) -> None:
    auth = {"authorization": "Bearer demo-key"}
    session = httpx.get(f"{proxy_url}/v1/sessions/{SESSION}", headers=auth).json()
    result.messages_stored = session["stats"]["messages"]
    if session["checkpoints"]:
        latest = max(session["checkpoints"], key=lambda c: c["covers_until"])
        result.summary = latest["text"]
        raw = "\n\n".join(latest["segments"])
        result.summary_raw, result.pinned = raw, "; ".join(latest["pinned"])
        covered_user_turns = (latest["covers_until"] + 1) // 2  # user, assistant, user, …
        for _, facts in script(turns)[:covered_user_turns]:
            result.facts_covered += facts
        result.kept_by_model = [f for f in result.facts_covered if _mentions(raw, f)]
        result.kept_with_pins = [f for f in result.facts_covered if _mentions(latest["text"], f)]
    metrics = httpx.get(f"{proxy_url}/metrics").text
    match = re.search(
        rf'context_proxy_token_estimate_ratio\{{model="{LOCAL_MODEL}"\}} ([0-9.e+-]+)', metrics
    )
    result.calibration = float(match.group(1)) if match else None
    preview = httpx.post(
        f"{proxy_url}/v1/sessions/{SESSION}/preview",
        json={"model": LOCAL_MODEL, "max_tokens": reply_tokens},
        headers=auth,
    ).json()
    result.budget = preview["budget"]


def _mentions(text: str, fact: str) -> bool:
    return not missing_facts([fact], text)


def _report(result: DemoResult, out: Callable[[str], None]) -> None:
    out("")
    out(f"stored messages: {result.messages_stored} (nothing deleted by compression)")
    out("summary in use:")
    out("  " + (result.summary or "(none: the conversation never outgrew the window)"))
    if result.facts_covered:
        total = len(result.facts_covered)
        out(f"planted facts in the summarized part: {total}")
        out(f"  kept by the model's summary:       {len(result.kept_by_model)}/{total}")
        out(f"  kept with the pinned-facts pass:   {len(result.kept_with_pins)}/{total}")
        for fact in result.facts_covered:
            where = (
                "model"
                if fact in result.kept_by_model
                else "pinned"
                if fact in result.kept_with_pins
                else "lost"
            )
            out(f"    {fact:<36} {where}")
    ratio = f"{result.calibration:.2f}" if result.calibration is not None else "n/a"
    out(
        f"calibration (provider prompt tokens / proxy estimate): {ratio}; "
        f"budget applied: {result.budget} of {result.input_limit} tokens"
    )


def main(turns: int, n_ctx: int) -> int:
    with local_model_server(n_ctx) as model_url:
        run_demo(model_url, turns=turns, n_ctx=n_ctx)
    return 0
