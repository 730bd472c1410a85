"""Stubs of large tool results (`proxy.engine.planner.stubs`): what a stub keeps, and a session
whose summary froze some, through the engine in this process (`tests/unit/engines.py`):
what it sends, that it sends the same bytes until the next summary, within budget, and
that the stored session keeps every output whole."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson

from proxy.conversation.tokens import counter_for_model
from proxy.engine.planner.stubs import STUB_PREFIX, stub, stubbable
from proxy.recall.index import RECALL_PREFIX, Hit, recall_message
from proxy.sessions.records import Checkpoint
from tests.unit.engines import MODEL, Parts

Message = dict[str, Any]
COUNTER = counter_for_model(MODEL)
CALL = {
    "id": "call_7",
    "type": "function",
    "function": {"name": "run_tests", "arguments": '{"path": "tests/test_api.py"}'},
}


def output(lines: int, errors: dict[int, str] | None = None) -> str:
    text = [f"tests/test_api.py::test_case_{i} PASSED [{i * 100 // lines}%]" for i in range(lines)]
    for number, line in (errors or {}).items():
        text[number] = line
    return "\n".join(text)


def result(content: Any, **fields: Any) -> Message:
    return {"role": "tool", "tool_call_id": "call_7", "content": content, **fields}


# -- the stub -----------------------------------------------------------------------------


def test_a_stub_says_what_the_output_was_and_keeps_its_ends_and_its_errors() -> None:
    errors = {
        500: "E   AssertionError: expected 200, got 503",
        900: "FAILED tests/test_api.py::test_case_900 - TimeoutError",
        950: "a nonfatal terror of a line",  # error words inside other words: not errors
    }
    text = output(2000, errors)
    made = stub(result(text, is_error=True, cache_control={"type": "ephemeral"}), CALL)
    content = made["content"]
    first = content.split("\n")[0]
    assert first.startswith(STUB_PREFIX)
    assert 'run_tests({"path": "tests/test_api.py"})' in first  # the tool and its arguments
    assert f"{len(text)} characters in 2000 lines" in first
    lines = content.split("\n")[1:]
    head = [f"{i + 1}: {text.split(chr(10))[i]}" for i in range(6)]
    tail = [f"{i + 1}: {text.split(chr(10))[i]}" for i in range(1994, 2000)]
    assert lines[:6] == head and lines[-6:] == tail
    assert "501: E   AssertionError: expected 200, got 503" in lines
    assert "901: FAILED tests/test_api.py::test_case_900 - TimeoutError" in lines
    assert not any("terror" in line for line in lines)
    assert "[… 494 lines …]" in lines  # where lines were left out, and how many
    # Every other field is the result's own (it still answers its call, as an error) but
    # a cache breakpoint, which the client moves and a stored copy keeps where it was.
    assert {k: v for k, v in made.items() if k != "content"} == {
        "role": "tool",
        "tool_call_id": "call_7",
        "is_error": True,
    }


def test_a_recalled_stub_keeps_the_lines_the_question_names_and_promises_only_what_is_so() -> None:
    """In a recall block a stub keeps the lines that hold the question's words; with
    recall off it says where the output is kept, not that a question brings it back."""
    text = output(300, {150: "db_host = pg-replica-7.internal"})
    asked = stub(result(text), CALL, matched=("db_host",))["content"]
    assert "151: db_host = pg-replica-7.internal" in asked.split("\n")
    assert "1 lines between that match the question" in asked
    assert "a question about it brings it back" in asked
    quiet = stub(result(text), CALL, recalled=False)["content"]
    assert "a question about it" not in quiet and "kept in the session's history" in quiet


def test_a_stub_is_small_whatever_the_output() -> None:
    errors = {i: f"ERROR {'x' * 5000}" for i in range(10, 1990, 7)}
    long = stub(result(output(2000, errors)), CALL)
    assert len(long["content"]) < 4000
    assert long["content"].count("ERROR") == 10  # the first ten error lines
    assert COUNTER.count_message(long) < 1200


def test_a_stub_is_the_same_bytes_from_the_same_result_and_call() -> None:
    text = output(300, {40: "Traceback (most recent call last):"})
    first = stub(result(text), CALL)
    again = stub(result("".join(list(text))), json.loads(json.dumps(CALL)))
    assert orjson.dumps(first) == orjson.dumps(again)
    # Text parts read as their text; with no call the stub still says what it was.
    parts = stub(result([{"type": "text", "text": text}]), CALL)
    assert parts["content"] == first["content"]
    assert "a tool()" in stub(result(text), None)["content"]


def test_only_text_results_can_be_stubbed() -> None:
    assert stubbable(result("text"))
    assert stubbable(result([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert not stubbable(result([{"type": "text", "text": "a"}, image]))
    assert not stubbable({"role": "user", "content": "text"})


def test_a_recalled_output_too_long_for_the_room_comes_as_the_lines_that_match() -> None:
    text = output(3000, {2100: "E   KeyError: 'retry_budget' not in settings"})
    hit = Hit(40, 41, 1.0, ("retry_budget",))
    block = recall_message([(hit, [result(text)])], [], COUNTER, 300)
    assert block is not None and block.shown == {40: frozenset({"retry_budget"})}
    content = block.message["content"]
    assert "2101: E   KeyError: 'retry_budget' not in settings" in content
    assert "2100: tests/test_api.py::test_case_2099 PASSED" in content  # a line around it
    assert COUNTER.count_message(block.message) <= 300


def test_a_checkpoint_stored_before_stubs_loads_with_none() -> None:
    stored: dict[str, Any] = {
        "covers_until": 4,
        "chain_hash": "abc",
        "segments": ["The user read files."],
        "tokens": 5,
        "model": MODEL,
        "created": 1.0,
        "before": {COUNTER.name: 900},
    }
    checkpoint = Checkpoint.from_dict(stored)
    assert (checkpoint.stubbed, checkpoint.stubs_saved, checkpoint.stubs_index) == ((), {}, None)
    frozen = Checkpoint(**{**stored, "segments": ("s",)}, stubbed=(5, 9), stubs_saved={"x": 7})
    assert Checkpoint.from_dict(frozen.to_dict()) == frozen


# -- a session with stubs ----------------------------------------------------------------


def said(text: str) -> Message:
    return {"role": "user", "content": text}


def reading(number: int, lines: int = 120) -> list[Message]:
    """The user asks for a file, the model calls read_file, the file comes back."""
    path = f"src/module_{number}.py"
    call = {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
    }
    text = "\n".join(f"def function_{number}_{i}(): return {i * 7 + number}" for i in range(lines))
    return [
        said(f"Please read {path}"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{number}", "content": text},
        {"role": "assistant", "content": f"{path} defines {lines} functions."},
    ]


def stubs_in(messages: list[Message]) -> list[Message]:
    return [m for m in messages if str(m.get("content")).startswith(STUB_PREFIX)]


def pairs_whole(messages: list[Message]) -> bool:
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return sorted(calls) == sorted(results)


# A fold that keeps half the room verbatim: the large outputs it leaves there are stubbed.
STUBBING = {"stub_tool_results_over": 300, "keep_recent_ratio": 0.5}


async def test_a_summary_stubs_the_large_outputs_it_leaves_in_the_window(make_parts: Any) -> None:
    parts: Parts = make_parts(window=8000, context=STUBBING)  # a budget of 6,400 tokens
    history = [message for number in range(8) for message in reading(number)]
    history.append(said("Which module is longest?"))
    turn = await parts.turn(history)
    sent = parts.upstream.sent[-1]["messages"]
    assert turn.compression == "summary"
    stubs = stubs_in(sent)
    assert stubs  # the outputs the window kept, before the last user message
    for message in stubs:
        assert 'read_file({"path": "src/module_' in message["content"]
    assert pairs_whole(sent)
    assert sent[-1] == said("Which module is longest?")
    # The budget is exact: what was sent is what the plan counted.
    assert turn.tokens_sent == COUNTER.count_messages(sent)
    # The stored session still holds every output whole.
    assert await parts.stored() == [*history, {"role": "assistant", "content": turn_reply(sent)}]
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None
    assert len(meta.checkpoint.stubbed) == len(stubs)


def turn_reply(sent: list[Message]) -> str:
    return f"echo: {sent[-1]['content']}"


async def test_later_turns_send_the_same_stubs_byte_for_byte(make_parts: Any) -> None:
    parts: Parts = make_parts(window=8000, context=STUBBING)
    history = [message for number in range(8) for message in reading(number)]
    history.append(said("Which module is longest?"))
    bodies = []
    for question in ("And the shortest?", "Any duplicates?", "Thanks."):
        turn = await parts.turn(history)
        bodies.append(parts.upstream.sent[-1]["messages"])
        assert turn.tokens_sent == COUNTER.count_messages(bodies[-1])
        history += [{"role": "assistant", "content": turn_reply(bodies[-1])}, said(question)]
    assert all(stubs_in(body) for body in bodies)
    for before, after in itertools.pairwise(bodies):
        # Everything before the newest turn (and the recall block before it) is the
        # request before's bytes, stubs included.
        kept = next(
            (i for i, m in enumerate(before) if str(m["content"]).startswith(RECALL_PREFIX)),
            len(before) - 1,
        )
        assert orjson.dumps(after[:kept]) == orjson.dumps(before[:kept])


async def test_the_last_user_turn_is_never_stubbed(make_parts: Any) -> None:
    parts: Parts = make_parts(window=8000, context=STUBBING)
    history = [message for number in range(8) for message in reading(number)]
    agent = reading(8, lines=60)[:3]  # the model is reading a file for the user now
    turn = await parts.turn([*history, *agent])
    sent = parts.upstream.sent[-1]["messages"]
    assert turn.compression == "summary"
    assert sent[-3:] == agent  # the output it answers, whole
    assert stubs_in(sent) and pairs_whole(sent)


async def test_a_question_about_a_stubbed_output_brings_it_back(make_parts: Any) -> None:
    parts: Parts = make_parts(window=8000, context={**STUBBING, "recall_ratio": 0.3})
    history = [message for number in range(8) for message in reading(number)]
    history.append(said("Thanks, that is all for now."))
    await parts.turn(history)
    sent = parts.upstream.sent[-1]["messages"]
    stubbed = stubs_in(sent)[-1]
    number = int(stubbed["tool_call_id"].removeprefix("call_"))
    whole = reading(number)[2]["content"]
    assert whole not in str(sent)  # stubbed, and nothing asked about it yet
    history += [{"role": "assistant", "content": turn_reply(sent)}]
    history.append(said(f"What does function_{number}_57 return?"))
    await parts.turn(history)
    sent = parts.upstream.sent[-1]["messages"]
    [block] = [m for m in sent if str(m["content"]).startswith(RECALL_PREFIX)]
    assert f"def function_{number}_57(): return {57 * 7 + number}" in whole
    assert whole in block["content"]  # the whole output, as the tool gave it
    assert stubbed in sent  # and the stub stays as it was: the prefix is unchanged
    assert sent[-2] == block and sent[-1] == history[-1]  # just before the question


async def test_a_preview_shows_the_stubs_and_writes_nothing(make_parts: Any) -> None:
    parts: Parts = make_parts(window=8000, context=STUBBING)
    history = [message for number in range(8) for message in reading(number)]
    await parts.turn([*history, said("Which module is longest?")])
    sent = parts.upstream.sent[-1]["messages"]
    before = await parts.store.load("t1", "s")
    history += [{"role": "assistant", "content": turn_reply(sent)}, said("Any duplicates?")]
    preview = await parts.preview(history)
    assert stubs_in(preview["messages"]) == stubs_in(sent)
    assert preview["tokens_sent"] == COUNTER.count_messages(preview["messages"])
    assert await parts.store.load("t1", "s") == before


async def test_stubs_stay_off_when_the_proxy_is_not_cache_aware(make_parts: Any) -> None:
    parts: Parts = make_parts(window=8000, context={**STUBBING, "cache_aware": False})
    history = [message for number in range(8) for message in reading(number)]
    turn = await parts.turn([*history, said("Which module is longest?")])
    sent = parts.upstream.sent[-1]["messages"]
    assert turn.compression == "summary" and not stubs_in(sent)
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None and not meta.checkpoint.stubbed


async def test_once_stubbed_a_result_stays_stubbed_across_summaries(make_parts: Any) -> None:
    """Background summaries fold the window as the session grows: a result stubbed by
    one stays stubbed, the same bytes, while later ones keep it in the window."""
    parts: Parts = make_parts(window=8000, context=STUBBING)
    history: list[Message] = []
    seen: dict[str, bytes] = {}
    summaries = set()
    for number in range(14):
        history += reading(number)[:3]
        history += [said(f"Summarize module {number} in a word.")]
        turn = await parts.turn(history)
        sent = parts.upstream.sent[-1]["messages"]
        history.append({"role": "assistant", "content": turn_reply(sent)})
        assert pairs_whole(sent) and turn.tokens_sent == COUNTER.count_messages(sent)
        summaries.add(str(sent[0]["content"]))
        for message in sent:
            if message["role"] != "tool":
                continue
            call = message["tool_call_id"]
            if call in seen:
                assert orjson.dumps(message) == seen[call], call  # frozen
            elif str(message["content"]).startswith(STUB_PREFIX):
                seen[call] = orjson.dumps(message)
    assert len(seen) >= 3 and len(summaries) >= 3  # several summaries, several stubs


async def test_an_edit_of_history_keeps_the_stubs_before_it(make_parts: Any) -> None:
    parts: Parts = make_parts(window=8000, context=STUBBING)
    history = [message for number in range(8) for message in reading(number)]
    await parts.turn([*history, said("Which module is longest?")])
    first = parts.upstream.sent[-1]["messages"]
    turn = await parts.turn([*history, said("Which module is shortest?")])  # edited
    sent = parts.upstream.sent[-1]["messages"]
    assert stubs_in(sent) == stubs_in(first)
    assert turn.tokens_sent == COUNTER.count_messages(sent)
    assert sent[-1] == said("Which module is shortest?")
