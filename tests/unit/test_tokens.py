from __future__ import annotations

import ctypes
import inspect
import json
import os
import random
import string
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from proxy.conversation.tokens import (
    WORDS_KEPT,
    CountCache,
    TokenCounter,
    _bundled_dir,
    counter_for_model,
    estimate_tokens,
)

ENGLISH = (
    "The proxy keeps the whole conversation and sends the model a summary of the old part "
    "plus the recent messages verbatim, always within 80% of the model's input limit. "
    "Everything it does is visible in Prometheus and Grafana; nothing is deleted by compression."
) * 5
CODE = inspect.getsource(json.encoder)
CHINESE = (
    "上下文代理为每个会话保存完整的对话历史，并向模型发送旧部分的摘要以及最近的消息原文。" * 10
)
JAPANESE = (
    "コンテキストプロキシはセッションごとに会話の全履歴を保持し、古い部分の要約を送ります。" * 10
)
KOREAN = "컨텍스트 프록시는 세션마다 전체 대화 기록을 보관하고, 오래된 부분의 요약을 보냅니다." * 10
JSON_DATA = json.dumps([{"id": i, "name": f"item {i}", "price": i * 1.37} for i in range(100)])


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("azure/gpt-35-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-3-5-sonnet", "anthropic"),
        ("anthropic/claude-3-5-sonnet-20241022", "anthropic"),
        ("my-local-llama", "char"),
    ],
)
def test_encoding_choice_auto(model: str, name: str) -> None:
    assert counter_for_model(model).name == name


def test_encoding_choice_other_modes() -> None:
    assert counter_for_model("my-local-llama", "tiktoken").name == "o200k_base"
    assert counter_for_model("gpt-4", "tiktoken").name == "cl100k_base"
    assert counter_for_model("gpt-4o", "char").name == "char"


def test_counts_agree_with_tiktoken() -> None:
    for model, encoding in [("gpt-4o", "o200k_base"), ("gpt-4", "cl100k_base")]:
        expected = tiktoken.get_encoding(encoding)
        for text in (ENGLISH, CODE, CHINESE, "<|endoftext|> is just text"):
            assert counter_for_model(model).count_text(text) == len(expected.encode_ordinary(text))
    assert counter_for_model("gpt-4o").count_text("") == 0


def test_anthropic_tokenizer_counts() -> None:
    counter = counter_for_model("claude-3-5-sonnet")
    assert counter.count_text("Hello world") == 2
    assert counter.count_text("") == 0


def test_message_overhead() -> None:
    counter = counter_for_model("gpt-4o")
    text = counter.count_text
    plain = {"role": "user", "content": "hi there"}
    assert counter.count_message(plain) == 3 + text("user") + text("hi there")
    named = {"role": "user", "content": "hi", "name": "alice"}
    assert counter.count_message(named) == 3 + text("user") + text("hi") + 1 + text("alice")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert counter.count_messages(messages) == sum(map(counter.count_message, messages)) + 3
    assert counter.count_messages([]) == 3


def test_text_parts_and_images() -> None:
    counter = counter_for_model("gpt-4o")
    plain = counter.count_message({"role": "user", "content": "describe this"})

    def with_image(detail: str) -> dict[str, Any]:
        image = {"url": "data:image/png;base64,AAAA", "detail": detail}
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": "describe this"},
                {"type": "image_url", "image_url": image},
            ],
        }

    assert counter.count_message(with_image("low")) == plain + 85
    assert counter.count_message(with_image("high")) == plain + 765
    assert counter.count_message(with_image("auto")) == plain + 765


def test_tool_calls_and_results() -> None:
    counter = counter_for_model("gpt-4o")
    arguments = json.dumps({"city": "Paris", "unit": "celsius"})
    call: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}
        ],
    }
    empty = counter.count_message(call)
    call["tool_calls"][0]["function"]["arguments"] = arguments
    assert counter.count_message(call) == empty + counter.count_text(arguments)
    assert empty > counter.count_message({"role": "assistant", "content": None}) + 3
    result = {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"}
    assert counter.count_message(result) == 3 + sum(
        map(counter.count_text, ["tool", "call_1", "18 degrees"])
    )


def test_tools_counted() -> None:
    counter = counter_for_model("gpt-4o")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert counter.count_tools(None) == counter.count_tools([]) == 0
    assert counter.count_tools(tools) > counter.count_text(json.dumps(tools, separators=(",", ":")))


@pytest.mark.parametrize(
    "text", [ENGLISH, CODE, CHINESE, JAPANESE, KOREAN, JSON_DATA], ids=lambda t: t[:12]
)
def test_char_estimate_never_below_o200k(text: str) -> None:
    exact = counter_for_model("gpt-4o").count_text(text)
    assert exact <= estimate_tokens(text) <= 2 * exact
    assert counter_for_model("x", "char").count_text(text) == estimate_tokens(text)


@pytest.mark.parametrize("model", ["gpt-4o", "claude-3-5-sonnet", "my-local-llama"])
@pytest.mark.parametrize("max_tokens", [12, 50, 300])
def test_truncate_middle(model: str, max_tokens: int) -> None:
    counter = counter_for_model(model)
    text = "BEGIN " + CODE + CHINESE + " END"
    cut = counter.truncate_middle(text, max_tokens)
    assert counter.count_text(cut) <= max_tokens
    assert "tokens omitted …]" in cut
    if max_tokens >= 50:
        assert cut.startswith("BEGIN") and cut.endswith("END")


def test_truncate_middle_keeps_nearly_all_it_may_of_a_huge_paste() -> None:
    """A 2 MB paste cut to a budget keeps close to the budget (the search stops within
    1/64 of the characters kept, not at the first fit)."""
    counter = counter_for_model("gpt-4o")
    text = "BEGIN " + (CODE + ENGLISH) * (2_000_000 // len(CODE + ENGLISH)) + " END"
    for max_tokens in (2_000, 60_000):
        cut = counter.truncate_middle(text, max_tokens)
        assert 0.97 * max_tokens <= counter.count_text(cut) <= max_tokens
        assert cut.startswith("BEGIN") and cut.endswith("END")


def test_a_long_text_is_counted_in_pieces_that_add_up() -> None:
    """A text is counted piece by piece (linear, and no call holds the interpreter for
    long): the pieces' sum is the whole's, or a token more at a forced split."""
    for model in ("gpt-4o", "claude-3-5-sonnet", "my-local-llama"):
        counter = counter_for_model(model)
        for base in (ENGLISH, CODE, CHINESE, JSON_DATA):
            text = base * (200_000 // len(base))
            whole = counter.count_piece(text)
            assert whole <= counter.count_text(text) <= whole * 1.001 + 2, model


def test_cutting_a_huge_paste_costs_what_it_keeps_not_what_it_is() -> None:
    """Given the paste's count (a message's, known when it arrived), a cut tokenizes what
    it keeps and a bounded search around its edges: a 5 MB paste costs what a 500 kB one
    does, not ten times as much."""
    gpt = counter_for_model("gpt-4o")

    def cut_cost(size: int) -> int:
        counted: list[int] = []

        def count(text: str) -> int:
            counted.append(len(text))
            return gpt.count_piece(text)

        text = "BEGIN " + "lorem ipsum dolor sit amet " * (size // 27) + " END"
        cut = TokenCounter("recording", count).truncate_middle(text, 4_000, gpt.count_text(text))
        assert cut.startswith("BEGIN") and cut.endswith("END") and "tokens omitted …]" in cut
        assert 0.97 * 4_000 <= gpt.count_text(cut) <= 4_000
        return sum(counted)

    assert cut_cost(5_000_000) <= 1.05 * cut_cost(500_000)


def test_truncate_middle_leaves_short_text_alone() -> None:
    counter = counter_for_model("gpt-4o")
    assert counter.truncate_middle("short text", 100) == "short text"
    assert counter.truncate_middle(ENGLISH, 2) == ""  # not even the marker fits


_OFFLINE_PROBE = """
import os, socket, sys

def refuse(*args, **kwargs):
    raise AssertionError("network access attempted")

socket.socket.connect = refuse
socket.create_connection = refuse
from proxy.conversation.tokens import counter_for_model

assert counter_for_model("gpt-4o").count_text("hello world") == 2
assert counter_for_model("gpt-4").count_text("hello world") == 2
assert counter_for_model("claude-3-5-sonnet").count_text("hello world") == 2
assert "litellm" not in sys.modules and "requests" not in sys.modules
print(os.environ["TIKTOKEN_CACHE_DIR"])
"""


def _run_offline(cache_dir: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    if cache_dir is not None:
        env["TIKTOKEN_CACHE_DIR"] = cache_dir
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_OFFLINE_PROBE)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_loading_is_offline_and_uses_bundled_files() -> None:
    assert _run_offline(None) == str(_bundled_dir())


def test_user_cache_dir_kept_when_it_has_the_files(tmp_path: Path) -> None:
    bundled = _bundled_dir()
    assert bundled is not None
    for file in bundled.iterdir():
        (tmp_path / file.name).symlink_to(file)
    assert _run_offline(str(tmp_path)) == str(tmp_path)


def test_user_cache_dir_without_the_files_is_replaced(tmp_path: Path) -> None:
    assert _run_offline(str(tmp_path)) == str(_bundled_dir())


def test_the_count_cache_keeps_what_it_counted_as_digests() -> None:
    """Megabyte system prompts and tool lists are counted once each and kept as their
    digests, not as their JSON; different ones are counted apart."""
    counter = counter_for_model("gpt-4o", "char")
    cache = CountCache(size=64)
    counted = []
    for n in range(40):
        prompt = {"role": "system", "content": "rules " * (200_000 + n)}
        count = cache.messages(counter, [prompt])
        assert count == counter.count_messages([prompt])
        assert cache.message(counter, prompt) == counter.count_message(prompt)
        assert cache.tools(counter, [{"type": "function", "function": {"name": "x" * 10**6}}])
        counted.append(count)
    assert len(set(counted)) == 40
    assert len(cache._counts) == 64
    assert all(len(data) <= 64 for _, data in cache._counts)


_MALLINFO2 = ["arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks"]
_MALLINFO2 += ["uordblks", "fordblks", "keepcost"]


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def _in_use() -> int:
    """Bytes glibc's malloc has handed out (where Rust's tokenizers allocate)."""
    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = _Mallinfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def test_claudes_tokenizers_keep_a_bounded_cache_of_words() -> None:
    """A HuggingFace tokenizer keeps the tokens of the first 10,000 words under 256
    characters it sees, for good: 3,000 random words of 200 characters held 19 MB in
    each of Claude's two (the proxy's counter and LiteLLM's own). Both are held to
    `WORDS_KEPT` words, a few MB."""
    from proxy.upstream import adapter

    adapter.warm_token_counter("anthropic/claude-sonnet-4-5")
    litellms = adapter.litellm.utils._select_tokenizer("claude-sonnet-4-5")["tokenizer"]
    counter = counter_for_model("claude-sonnet-4-5")
    rng = random.Random(51)
    words = ["".join(rng.choices(string.ascii_letters, k=200)) for _ in range(3_000)]
    before = _in_use()
    for word in words:
        counter.count_text(word)
        litellms.encode(word, add_special_tokens=False)
    assert _in_use() - before < 2 * WORDS_KEPT * 8_000  # at most ~8 KB a word kept
