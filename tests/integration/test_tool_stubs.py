"""Tool outputs stop filling the window: once a summary is made, the large tool results
it leaves in the verbatim window go upstream as stubs, the same bytes on every later
turn until the next summary; a question about one brings the whole output back; the
stored session keeps every output whole. Through the real openai SDK (Chat Completions)
and the real anthropic SDK (Messages, to a native `anthropic/` deployment), on the
loopback upstream."""

from __future__ import annotations

import itertools
import json
from typing import Any

import anthropic
import httpx
import openai
import orjson

from proxy.engine.planner.stubs import STUB_PREFIX
from proxy.recall.index import RECALL_PREFIX
from tests.integration.test_messages import CLAUDE, blocks, claude_config, stored_session
from tests.proxies import MODEL, proxy_config
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, Reply

# A budget of 12,800 tokens; its background summary, due at 70% of it, keeps half of that
# verbatim: several of the files read last, the older of which it stubs.
WINDOW = 16000
FILES = 20
# Folds that keep half their room: the large outputs they leave in the window are stubbed.
CONTEXT = {"stub_tool_results_over": 300, "recall_ratio": 0.3, "keep_recent_ratio": 0.5}
SYSTEM = {"role": "system", "content": "You read files for the user."}
READ_FILE = {
    "name": "read_file",
    "description": "Read a file of the project",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
KEY = "tenant-a-key-0123456789"


def path(number: int) -> str:
    return f"src/module_{number}.py"


def contents(number: int) -> str:
    """A file of 60 short functions: about 700 tokens."""
    return "\n".join(f"def function_{number}_{i}(): return {i * 7 + number}" for i in range(60))


def asked_file(text: str) -> int | None:
    """The file a "Please read …" message asks for."""
    if not text.startswith("Please read src/module_"):
        return None
    return int(text.removeprefix("Please read src/module_").removesuffix(".py"))


def call(number: int) -> dict[str, Any]:
    function = {"name": "read_file", "arguments": json.dumps({"path": path(number)})}
    return {"id": f"call_{number}", "type": "function", "function": function}


def answering(last_user_text: str, summarizer: bool) -> str | Reply:
    """The model: calls read_file for the file a user asks for, else answers briefly;
    as the summarizer, a summary of its own."""
    if summarizer:
        return "The user had the project's modules read one by one."
    number = asked_file(last_user_text)
    return Reply(tool_calls=[call(number)]) if number is not None else "Done."


def chat_respond(body: dict[str, Any]) -> str | Reply:
    messages = body["messages"]
    last = messages[-1]
    text = str(last["content"]) if last["role"] == "user" else ""
    return answering(text, asks_summary(body))


def messages_respond(body: dict[str, Any]) -> str | Reply:
    content = body["messages"][-1]["content"]
    # A text content, or its one text block (as the proxy marks it for the cache).
    texts = [b["text"] for b in content if b["type"] == "text"] if isinstance(content, list) else []
    text = content if isinstance(content, str) else "".join(texts)
    return answering(text, asks_summary(body))


def stubs(messages: list[dict[str, Any]]) -> dict[str, bytes]:
    """The stubbed tool results of a chat request, by call id, as bytes."""
    return {
        m["tool_call_id"]: orjson.dumps(m)
        for m in messages
        if m["role"] == "tool" and str(m["content"]).startswith(STUB_PREFIX)
    }


def anthropic_stubs(messages: list[dict[str, Any]]) -> dict[str, bytes]:
    """The stubbed tool_result blocks of a Messages request, by tool use id, as bytes."""
    return {
        block["tool_use_id"]: orjson.dumps(block)
        for m in messages
        if isinstance(m["content"], list)
        for block in m["content"]
        if block["type"] == "tool_result" and str(block["content"]).startswith(STUB_PREFIX)
    }


def recall_text(messages: list[dict[str, Any]]) -> str:
    """The recall block of a chat request, if any (a system message mid-conversation)."""
    for message in messages:
        if message["role"] == "system" and str(message["content"]).startswith(RECALL_PREFIX):
            return str(message["content"])
    return ""


def frozen_until_the_next_summary(bodies: list[tuple[str, dict[str, bytes]]]) -> int:
    """Each request's stubs (with its summary) are the request before's, byte for byte,
    and more only where a new summary froze more; how many requests sent stubs."""
    for (summary, before), (later, after) in itertools.pairwise(bodies):
        if later == summary:
            assert after == before
        else:  # a new summary: what stays in the window stays stubbed, the same bytes
            assert all(after.get(call, sent) == sent for call, sent in before.items())
    return sum(bool(sent) for _, sent in bodies)


# -- Chat Completions, through the openai SDK -------------------------------------------


def test_large_tool_outputs_are_stubbed_frozen_and_recalled_on_the_chat_door(
    upstream: FakeUpstream, start_proxy: Any, store: dict[str, Any]
) -> None:
    config = proxy_config(upstream, context=CONTEXT, session=store)
    config["model_list"][0]["model_info"] = {"max_input_tokens": WINDOW}
    url = start_proxy(config)
    upstream.default = Reply(respond=chat_respond)
    session = f"stubs-{store.get('store', 'disk')}"
    sdk = openai.OpenAI(
        base_url=url + "/v1", api_key=KEY, max_retries=0, default_headers={"X-Session-Id": session}
    )
    tools = [{"type": "function", "function": READ_FILE}]
    history: list[dict[str, Any]] = []

    def send(message: dict[str, Any]) -> Any:
        history.append(message)
        reply = sdk.chat.completions.create(model=MODEL, messages=[SYSTEM, *history], tools=tools)
        answer = reply.choices[0].message
        said = {"role": "assistant", "content": answer.content}
        if answer.tool_calls:
            said["tool_calls"] = [c.model_dump() for c in answer.tool_calls]
        history.append(said)
        return answer

    for number in range(FILES):
        send({"role": "user", "content": f"Please read {path(number)}"})
        send({"role": "tool", "tool_call_id": f"call_{number}", "content": contents(number)})
    for text in ("Which module is longest?", "Any duplicates?", "Thanks."):
        send({"role": "user", "content": text})

    bodies = [r.body["messages"] for r in upstream.chat_requests() if not asks_summary(r.body)]
    summarized = [(str(body[1]["content"]), stubs(body)) for body in bodies]
    assert frozen_until_the_next_summary(summarized) >= 3
    for before, after in itertools.pairwise(bodies):
        if before[1] == after[1]:  # one summary: the request before is the prefix, stubs and all
            recalled = [i for i, m in enumerate(before) if recall_text([m])]
            kept = recalled[0] if recalled else len(before)
            assert orjson.dumps(after[:kept]) == orjson.dumps(before[:kept])
    last = bodies[-1]
    stubbed = stubs(last)
    assert stubbed
    # A stub says what the output was; its call stays beside it (the pair is whole).
    calls = {c["id"] for m in last for c in m.get("tool_calls") or ()}
    assert calls == {m["tool_call_id"] for m in last if m["role"] == "tool"}
    number = int(sorted(stubbed)[-1].removeprefix("call_"))
    described = orjson.loads(stubbed[f"call_{number}"])["content"]
    assert f'read_file({{"path": "{path(number)}"}})' in described
    assert contents(number) not in str(last)

    # Asked about, the whole output comes back, in the request the upstream receives.
    send({"role": "user", "content": f"What does function_{number}_57 return?"})
    asked = upstream.chat_requests()[-1].body["messages"]
    assert contents(number) in recall_text(asked)
    assert stubs(asked) == stubbed  # the stub stays where it was, as it was

    # Nothing is lost: the session keeps every output whole.
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        stored = http.get(f"/v1/sessions/{session}").json()["messages"]
    outputs = {m["tool_call_id"]: m["content"] for m in stored if m["role"] == "tool"}
    assert outputs == {f"call_{n}": contents(n) for n in range(FILES)}


# -- Messages, through the anthropic SDK, to Anthropic's own API ------------------------


def test_large_tool_outputs_are_stubbed_frozen_and_recalled_on_the_messages_door(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    url = start_proxy(claude_config(upstream, window=WINDOW, context=CONTEXT))
    upstream.default = Reply(respond=messages_respond)
    sdk = anthropic.Anthropic(
        base_url=url, api_key="client-key", max_retries=0, default_headers={"X-Session-Id": "m"}
    )
    tools = [{"name": "read_file", "input_schema": READ_FILE["parameters"]}]
    history: list[dict[str, Any]] = []

    def send(content: Any) -> Any:
        history.append({"role": "user", "content": content})
        reply = sdk.messages.create(model=CLAUDE, max_tokens=100, messages=history, tools=tools)
        history.append({"role": "assistant", "content": blocks(reply)})
        return reply

    for number in range(FILES):
        reply = send(f"Please read {path(number)}")
        [use] = [block for block in reply.content if block.type == "tool_use"]
        send([{"type": "tool_result", "tool_use_id": use.id, "content": contents(number)}])
    for text in ("Which module is longest?", "Any duplicates?", "Thanks."):
        send(text)

    bodies = [r.body for r in upstream.messages_requests() if not asks_summary(r.body)]
    summarized = [
        (json.dumps(body.get("system")), anthropic_stubs(body["messages"])) for body in bodies
    ]
    assert frozen_until_the_next_summary(summarized) >= 3
    stubbed = anthropic_stubs(bodies[-1]["messages"])
    assert stubbed
    number = int(sorted(stubbed)[-1].removeprefix("call_"))
    assert contents(number) not in json.dumps(bodies[-1])

    send(f"What does function_{number}_57 return?")
    asked = upstream.messages_requests()[-1].body
    sent = json.dumps(asked)
    assert json.dumps(RECALL_PREFIX)[1:-1] in sent and json.dumps(contents(number))[1:-1] in sent
    assert anthropic_stubs(asked["messages"]) == stubbed

    stored = stored_session(url, "/v1/sessions/m").json()["messages"]
    outputs = {m["tool_call_id"]: m["content"] for m in stored if m["role"] == "tool"}
    assert outputs == {f"call_{n}": contents(n) for n in range(FILES)}


# -- An agent's tool loop, through the openai SDK ---------------------------------------

LOOP = (21, 22, 23)  # the files one turn reads, one request after another
NAMED = "def rotate_signing_key(): return 'kms-eu-2'"  # in module 2, read early


def loop_contents(number: int) -> str:
    return contents(number) + ("\n" + NAMED if number == 2 else "")


def loop_respond(body: dict[str, Any]) -> str | Reply:
    """`chat_respond`, and for a question about a function: read the files of `LOOP`, one
    tool call a request, then answer."""
    last = body["messages"][-1]
    if last["role"] == "user" and str(last["content"]).startswith("Where is"):
        return Reply(tool_calls=[call(LOOP[0])])
    if last["role"] == "tool" and last["tool_call_id"] in [f"call_{n}" for n in LOOP[:-1]]:
        number = int(last["tool_call_id"].removeprefix("call_"))
        return Reply(tool_calls=[call(number + 1)])
    return chat_respond(body)


def test_an_agents_tool_loop_only_adds_to_the_prompt_its_recall_block_began(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """A turn's recall block is chosen for the user's message and placed just before it;
    the requests of the tool loop that answers it send it again, as it was, where it was,
    so each of them is the request before plus what the loop added (what a provider reads
    from its cache). A large output it recalls, which the question is not about, comes as
    its stub with the lines the question names."""
    config = proxy_config(upstream, context=CONTEXT)
    config["model_list"][0]["model_info"] = {"max_input_tokens": WINDOW}
    url = start_proxy(config)
    upstream.default = Reply(respond=loop_respond)
    sdk = openai.OpenAI(
        base_url=url + "/v1", api_key=KEY, max_retries=0, default_headers={"X-Session-Id": "loop"}
    )
    tools = [{"type": "function", "function": READ_FILE}]
    history: list[dict[str, Any]] = []

    def send(message: dict[str, Any]) -> Any:
        history.append(message)
        reply = sdk.chat.completions.create(model=MODEL, messages=[SYSTEM, *history], tools=tools)
        answer = reply.choices[0].message
        said = {"role": "assistant", "content": answer.content}
        if answer.tool_calls:
            said["tool_calls"] = [c.model_dump() for c in answer.tool_calls]
        history.append(said)
        return answer

    for number in range(FILES):
        send({"role": "user", "content": f"Please read {path(number)}"})
        send({"role": "tool", "tool_call_id": f"call_{number}", "content": loop_contents(number)})
    asked = len(upstream.chat_requests())
    question = "Where is rotate_signing_key defined now?"
    answer = send({"role": "user", "content": question})
    while answer.tool_calls:
        [called] = answer.tool_calls
        number = int(called.id.removeprefix("call_"))
        answer = send({"role": "tool", "tool_call_id": called.id, "content": contents(number)})

    turn = [
        r.body["messages"] for r in upstream.chat_requests()[asked:] if not asks_summary(r.body)
    ]
    assert len(turn) == len(LOOP) + 1
    blocks = {recall_text(body) for body in turn}
    assert len(blocks) == 1 and blocks != {""}  # one block, the same bytes every request
    for body in turn:
        at = next(i for i, m in enumerate(body) if recall_text([m]))
        assert body[at + 1] == {"role": "user", "content": question}
    for before, after in itertools.pairwise(turn):
        assert orjson.dumps(after[: len(before)]) == orjson.dumps(before)
    [block] = blocks
    assert STUB_PREFIX + ': read_file({"path": "src/module_2.py"})' in block
    assert NAMED in block and loop_contents(2) not in block
