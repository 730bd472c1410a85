"""What the proxy sends as a conversation outgrows the window: the scripted 300-turn
conversation (`tests/marathon.py`) through a 4,096-token model.

It prints the prompt tokens sent upstream against the full history the client holds,
the summarizer's calls and tokens, and prefix stability: the share of requests whose
leading messages (the client's system message and the summary) are byte-identical to
the previous request's, which is what lets a provider's prompt cache keep hitting.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import openai
import orjson
import yaml

from proxy.config.settings import load_settings
from proxy.http.app import create_app
from tests.marathon import BUDGET, TOOLS, TURNS, WINDOW, is_summarizer, respond, run
from tests.servers import serve
from tests.upstream import Reply, count_prompt_tokens, count_text_tokens, running_upstream

MODEL = "small-window"
SESSION = "context-benchmark"


def leading(messages: list[dict[str, Any]]) -> bytes:
    """The request's leading system messages (client's and summary), serialized."""
    count = 0
    while count < len(messages) and messages[count].get("role") == "system":
        count += 1
    return orjson.dumps(messages[:count])


def report(
    history_tokens: list[int],
    sent_tokens: list[int],
    summarizer: list[tuple[int, int]],
    stable: int,
    requests: int,
) -> str:
    inputs = sum(i for i, _ in summarizer)
    outputs = sum(o for _, o in summarizer)
    return "\n".join(
        [
            f"{TURNS} turns, {requests} model requests, through a {WINDOW:,}-token model "
            f"(budget {BUDGET:,})",
            f"prompt tokens sent upstream: {sum(sent_tokens):,} in all, largest request "
            f"{max(sent_tokens):,}, last {sent_tokens[-1]:,}",
            f"the full history instead:    {sum(history_tokens):,} in all, last "
            f"{history_tokens[-1]:,} ({sum(sent_tokens) / sum(history_tokens):.1%} of it sent)",
            f"summarizer: {len(summarizer)} calls, {inputs:,} input tokens "
            f"({inputs / history_tokens[-1]:.2f}x the final history), {outputs:,} output tokens",
            f"prefix stability: {stable / (requests - 1):.1%} of requests begin with the same "
            f"system + summary bytes as the request before",
        ]
    )


def benchmark(directory: Path, turns: int = TURNS) -> str:
    with running_upstream() as upstream:
        upstream.default = Reply(respond=respond)
        config = {
            "model_list": [
                {
                    "model_name": MODEL,
                    "litellm_params": {
                        "model": "openai/gpt-4o-mini",
                        "api_base": upstream.base_url,
                        "api_key": "sk-bench",
                    },
                    "model_info": {"max_input_tokens": WINDOW},
                }
            ],
            "session": {"path": str(directory / "context-sessions")},
        }
        path = directory / "context.yaml"
        path.write_text(yaml.safe_dump(config))
        with serve(create_app(load_settings(path, environ={}))) as url:
            client = openai.OpenAI(
                base_url=url + "/v1",
                api_key="bench",
                max_retries=0,
                default_headers={"X-Session-Id": SESSION},
            )
            sent: list[list[dict[str, Any]]] = []
            run(client, MODEL, turns, sent)
        received = [r.body for r in upstream.chat_requests()]
    calls = [body for body in received if not is_summarizer(body)]
    summaries = [body for body in received if is_summarizer(body)]
    history = [count_prompt_tokens({"messages": m, "tools": TOOLS}) for m in sent]
    upstream_tokens = [count_prompt_tokens(body) for body in calls]
    summarizer = [
        (count_prompt_tokens(body), count_text_tokens(str(respond(body)))) for body in summaries
    ]
    prefixes = [leading(body["messages"]) for body in calls]
    stable = sum(1 for a, b in itertools.pairwise(prefixes) if a == b)
    return report(history, upstream_tokens, summarizer, stable, len(calls))
