"""What a door keeps of a conversation between its requests (`proxy.doors.translations`):
a conversation translated or rendered from what was kept is exactly what translating and
rendering it afresh makes, whatever the client resends (a longer conversation, an edited
one, another tenant's with the same start); what was kept is reused, not remade; and it
is bounded."""

from __future__ import annotations

import copy
import random
from collections.abc import Hashable, Iterator
from typing import Any

import orjson

from proxy.doors.anthropic import request as messages
from proxy.doors.anthropic.native import MessagesNative
from proxy.doors.responses import request as responses
from proxy.doors.responses.native import ResponsesNative
from proxy.doors.translations import (
    Renderings,
    Translations,
    Written,
    conversation_key,
)
from proxy.upstream.native import lean_covers
from tests.unit.test_native import MESSAGES_BODIES, REASONING, RESPONSES_INPUT, sent_of


def messages_turns(seed: int, turns: int) -> list[list[dict[str, Any]]]:
    """A Messages conversation as its client resends it, turn after turn: text, tool
    calls with results (with and without text after them), a system message
    mid-conversation, each request a fresh parse of the last plus a new turn."""
    rng = random.Random(seed)
    conversation: list[dict[str, Any]] = list(MESSAGES_BODIES[1]["messages"][:3])
    requests = []
    for turn in range(turns):
        kind = rng.choice(["text", "tool", "system"])
        if kind == "tool":
            use = {"type": "tool_use", "id": f"u{turn}", "name": "Read", "input": {"n": turn}}
            result = {"type": "tool_result", "tool_use_id": f"u{turn}", "content": f"r{turn}"}
            after = [{"type": "text", "text": f"then {turn}"}] if rng.random() < 0.5 else []
            conversation += [
                {"role": "assistant", "content": [{"type": "text", "text": "On it."}, use]},
                {"role": "user", "content": [result, *after]},
            ]
        elif kind == "system":
            conversation += [
                {"role": "assistant", "content": f"answer {turn}"},
                {"role": "system", "content": f"Reminder {turn}."},
                {"role": "user", "content": f"question {turn}"},
            ]
        else:
            conversation += [
                {"role": "assistant", "content": [{"type": "text", "text": f"answer {turn}"}]},
                {"role": "user", "content": [{"type": "text", "text": f"question {turn}"}]},
            ]
        requests.append(orjson.loads(orjson.dumps(conversation)))  # a fresh parse
    return requests


def body_of(conversation: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 10, "system": "Rules.", "messages": conversation}


def test_a_messages_conversation_translated_from_what_was_kept_is_translated_afresh() -> None:
    translations = Translations("anthropic_messages")
    kept: list[dict[str, Any]] = []
    for conversation in messages_turns(seed=7, turns=30):
        chat, _ = messages.to_chat(body_of(conversation), translations, "t")
        assert chat == messages.to_chat(body_of(conversation))[0]
        # The kept part is not translated again: the same chat objects as last time.
        assert all(a is b for a, b in zip(chat["messages"][1:], kept, strict=False))
        kept = chat["messages"][1:]


def test_an_edited_conversation_or_another_tenants_is_translated_afresh() -> None:
    translations = Translations("anthropic_messages")
    *_, last = messages_turns(seed=3, turns=12)
    first = messages.to_chat(body_of(last), translations, "t")[0]["messages"]
    edited = copy.deepcopy(last)
    edited[4] = {"role": "user", "content": "an edit"}
    chat, _ = messages.to_chat(body_of(edited), translations, "t")
    assert chat == messages.to_chat(body_of(edited))[0]
    assert chat["messages"][-1] is not first[-1]
    other = messages.to_chat(body_of(last), translations, "another tenant")[0]["messages"]
    assert other == first and not any(a is b for a, b in zip(other[1:], first[1:], strict=True))


def test_a_responses_conversation_translated_from_what_was_kept_is_translated_afresh() -> None:
    translations = Translations("responses")
    given: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Start."}]
    for turn in range(12):
        given += copy.deepcopy(RESPONSES_INPUT[1:]) if turn % 2 else copy.deepcopy(RESPONSES_INPUT)
        given[-1] = given[-1] | {"content": [{"type": "output_text", "text": f"{turn}"}]}
        body = {
            "model": "gpt",
            "instructions": "Be brief.",
            "input": orjson.loads(orjson.dumps(given)),
        }
        chat, _ = responses.to_chat(body, translations, "t")
        assert chat == responses.to_chat(body)[0]


def claude_window(chat: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
    """The window as the engine may leave it: the last message a marked copy, and (every
    other turn) a recall block as a system message before it."""
    *rest, last = chat
    marked = last | {"cache_control": {"type": "ephemeral"}}
    recall = [{"role": "system", "content": f"Recalled {turn}."}] if turn % 2 else []
    return [*rest, *recall, marked]


def native_turns(renderings: Renderings, key: Hashable, fresh: list[Any]) -> list[Any]:
    """The turns of a conversation's latest rendering (put back as they were), whose
    JSON is `fresh`'s turn by turn (where each ends is kept right)."""
    rendered = renderings.taken(key)
    assert rendered is not None
    renderings.kept(key, rendered)
    by_turn = [bytes(rendered.turn_json(at)) for at in range(len(rendered.turns))]
    assert b"[" + b",".join(by_turn) + b"]" == rendered.json
    assert orjson.loads(rendered.json) == fresh
    return list(rendered.turns)


def test_a_messages_window_rendered_from_what_was_kept_is_rendered_afresh() -> None:
    translations, renderings = Translations("anthropic_messages"), Renderings()
    for mid_system in (False, True):
        previous: list[Any] = []
        for turn, conversation in enumerate(messages_turns(seed=11, turns=20)):
            body = body_of(conversation)
            chat, _ = messages.to_chat(body, translations, "t")
            window = {**chat, "messages": claude_window(chat["messages"], turn)}
            native = MessagesNative(body, renderings, b"conversation")
            sent = sent_of(native.request(window, summarized=False, mid_system=mid_system))
            fresh = sent_of(
                MessagesNative(body).request(window, summarized=False, mid_system=mid_system)
            )
            assert sent == fresh
            assert native.serialized is not None
            assert orjson.loads(native.serialized[0]) == fresh["messages"]
            # What the window kept is not rendered again: the same turns as last time.
            turns = native_turns(renderings, (b"conversation", mid_system), fresh["messages"])
            assert (
                sum(a is b for a, b in zip(turns, previous, strict=False))
                >= min(len(previous), len(turns)) - 4
            )
            previous = turns


def test_a_responses_window_rendered_from_what_was_kept_is_rendered_afresh() -> None:
    renderings = Renderings()
    body = {"model": "gpt", "instructions": "You are Codex.", "input": RESPONSES_INPUT}
    chat, _ = responses.to_chat(body)
    for turn in range(4):
        window = {**chat, "messages": claude_window(chat["messages"], turn)}
        native = ResponsesNative(body, renderings, b"conversation")
        sent = sent_of(native.request(window, summarized=False, mid_system=False))
        assert sent == sent_of(
            ResponsesNative(body).request(window, summarized=False, mid_system=False)
        )
        assert native.serialized is not None
        assert orjson.loads(native.serialized[0]) == sent["input"]
        assert native_turns(renderings, b"conversation", sent["input"])


def test_what_a_door_keeps_is_bounded() -> None:
    translations = Translations("anthropic_messages", kept=100)
    conversations = [messages_turns(seed=n, turns=20)[-1] for n in range(10)]
    for number, conversation in enumerate(conversations):
        messages.to_chat(body_of(conversation), translations, f"t{number}")
    assert translations._held <= 100 + len(conversations[-1])
    assert len(translations._known) < len(conversations)


def _json_bytes(messages: list[Any]) -> int:
    return sum(len(orjson.dumps(message)) for message in messages)


def test_what_a_door_keeps_of_large_messages_is_bounded_by_their_bytes() -> None:
    """Conversations of 1 MB messages, each resent longer: the translations kept hold
    at most `kept_bytes` of them (as JSON) beside the latest, counted exactly as what
    is kept, and a longer conversation still resumes from its kept translation."""
    translations = Translations("anthropic_messages", kept_bytes=8 << 20)
    for number in range(8):
        big = {"role": "user", "content": f"{number} " + "x" * (1 << 20)}
        conversation: list[dict[str, Any]] = [big, {"role": "assistant", "content": "ok"}]
        first = messages.to_chat(body_of(conversation), translations, "t")[0]["messages"]
        conversation += [{"role": "user", "content": [{"type": "text", "text": "more"}]}]
        again = messages.to_chat(
            body_of(orjson.loads(orjson.dumps(conversation))), translations, "t"
        )
        assert again[0]["messages"][1] is first[1]  # resumed, not translated afresh
        known = translations._known.values()
        assert translations._bytes == sum(len(t.json) + len(t.chat_json) for t in known)
        assert translations._bytes <= (8 << 20) + 2 * _json_bytes(conversation) + 100
    assert 2 <= len(translations._known) < 8


def test_a_message_too_deep_to_measure_is_translated_and_not_kept() -> None:
    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    conversation: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello", "x": deep}]},
    ]
    translations = Translations("anthropic_messages")
    chat, _ = messages.to_chat(body_of(conversation), translations, "t")
    assert chat == messages.to_chat(body_of(conversation))[0]
    assert not translations._known
    assert translations._bytes == 0


def test_what_a_door_renders_of_large_messages_is_bounded_by_their_bytes() -> None:
    renderings = Renderings(kept_bytes=4 << 20)
    for number in range(8):
        big = {
            "role": "user",
            "content": [{"type": "text", "text": f"{number} " + "x" * (1 << 20)}],
        }
        body = body_of([big])
        chat, _ = messages.to_chat(body)
        native = MessagesNative(body, renderings, f"conversation {number}".encode())
        native.request(chat, summarized=False, mid_system=False)
        assert native.serialized is not None
        assert renderings._bytes == sum(len(r.json) for r in renderings._known.values())
        assert renderings._bytes <= (4 << 20) + len(native.serialized[0])
    assert 2 <= len(renderings._known) < 8


def test_a_conversation_written_as_orjson_writes_it_is_not_written_again() -> None:
    """The client's own JSON of its messages (`Written`, from `proxy.http.resends`) is
    what the kept translation is compared with; JSON said of another list is not."""
    requests = messages_turns(seed=7, turns=12)
    with_bytes, without = Translations("anthropic_messages"), Translations("anthropic_messages")
    for conversation in requests:
        body = body_of(conversation)
        written = Written(conversation, memoryview(orjson.dumps(conversation)))
        assert messages.to_chat(body, with_bytes, "t", written) == messages.to_chat(
            body_of(copy.deepcopy(conversation)), without, "t"
        )
    kept = next(iter(with_bytes._known.values()))
    assert kept.json == orjson.dumps(requests[-1])
    # Bytes said of another list than the one translated are not taken for its JSON.
    other = Translations("anthropic_messages")
    wrong = Written(list(requests[-1]), memoryview(b"[]"))
    messages.to_chat(body_of(requests[-1]), other, "t", wrong)
    assert next(iter(other._known.values())).json == orjson.dumps(requests[-1])


def test_a_window_of_all_the_clients_messages_goes_out_as_the_client_wrote_it() -> None:
    """Where the engine's window is every message the client sent, the very objects its
    translation made, a native route sends the client's own JSON of them (byte for byte,
    so the provider's cache reads what a direct call would write): nothing is rendered
    or kept for it. A window the engine changed (a marked copy, a recall block) is
    rendered, and a system message mid-conversation is sent as the client wrote it only
    to a model that takes one there."""
    translations, renderings = Translations("anthropic_messages"), Renderings()
    for turn, conversation in enumerate(messages_turns(seed=5, turns=16)):
        body = body_of(conversation)
        key = conversation_key("t", conversation[0])
        chat, _ = messages.to_chat(body, translations, "t")
        has_system = any(m["role"] == "system" for m in conversation)
        for mid_system in (False, True):
            before = list(renderings._known.items())
            native = MessagesNative(body, renderings, key, translations)
            sent = native.request(chat, summarized=False, mid_system=mid_system)
            assert native.serialized is not None
            own = native.serialized[0] == orjson.dumps(conversation)
            assert own == (mid_system or not has_system), turn
            if own:
                assert sent_of(sent)["messages"] == conversation
                assert list(renderings._known.items()) == before
            changed = {**chat, "messages": claude_window(chat["messages"], turn)}
            native = MessagesNative(body, renderings, key, translations)
            sent = native.request(changed, summarized=False, mid_system=mid_system)
            fresh = MessagesNative(body).request(changed, summarized=False, mid_system=mid_system)
            assert sent_of(sent) == sent_of(fresh)


def test_a_rendered_window_sends_each_assistant_message_as_the_client_wrote_it() -> None:
    """A window the engine changed (its last message marked) is rendered, and each of the
    model's turns in it goes out in the client's form: a string a string, blocks blocks
    (a text's string as one block was 4% more bytes for the provider to read)."""
    translations = Translations("anthropic_messages")
    forms: set[type] = set()
    for turn, conversation in enumerate(messages_turns(seed=7, turns=12)):
        body = body_of(conversation)
        chat, _ = messages.to_chat(body, translations, "t")
        changed = {**chat, "messages": claude_window(chat["messages"], 0)}
        sent = sent_of(MessagesNative(body).request(changed, summarized=False, mid_system=True))
        ours = [m for m in sent["messages"] if m["role"] == "assistant"]
        theirs = [m for m in conversation if m["role"] == "assistant"]
        assert ours == theirs, turn
        forms |= {type(m["content"]) for m in ours}
    assert forms == {str, list}


def test_a_responses_window_of_all_the_clients_items_goes_out_as_the_client_wrote_them() -> None:
    """Items without ids go as the client wrote them, and a rendering writes a client's
    plain messages as it does (an easy assistant message stays one); items the client
    echoes under the proxy's ids are rendered, so the provider gets its own ids back."""
    translations = Translations("responses")
    given: list[dict[str, Any]] = [
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "Who am I?"},
    ]
    body = {"model": "gpt", "instructions": "You are Codex.", "input": given}
    chat, _ = responses.to_chat(body, translations, "t")
    key = conversation_key("t", given[0])
    native = ResponsesNative(body, Renderings(), key, translations)
    sent = native.request(chat, summarized=False, mid_system=False)
    assert native.serialized is not None and native.serialized[0] == orjson.dumps(given)
    assert sent_of(sent)["input"] == given and sent["instructions"] == "You are Codex."
    # Another conversation's key, or none, renders the window (and keeps its rendering).
    for other in (conversation_key("t", given[1]), None):
        renderings = Renderings()
        native = ResponsesNative(body, renderings, other, translations)
        rendered = sent_of(native.request(chat, summarized=False, mid_system=False))["input"]
        assert rendered == given  # rendered as this client writes its messages
        assert list(renderings._known) == [other]
    # A client that types its items and writes text as parts (Codex) gets its model's
    # text as an `output_text` part.
    typed = [{"type": "message", **item} for item in given]
    body = {"model": "gpt", "input": typed}
    chat, _ = responses.to_chat(body, translations, "t")
    native = ResponsesNative(body, Renderings(), None, translations)
    rendered = sent_of(native.request(chat, summarized=False, mid_system=False))["input"]
    assert rendered[1]["content"] == [
        {"type": "output_text", "text": "Hello Ada.", "annotations": []}
    ]
    echoed = [given[0], {**REASONING, "id": f"rs_proxys.1~{REASONING['id']}"}, *given[1:]]
    body = {"model": "gpt", "input": orjson.loads(orjson.dumps(echoed))}
    chat, _ = responses.to_chat(body, translations, "t")
    native = ResponsesNative(body, Renderings(), key, translations)
    sent = sent_of(native.request(chat, summarized=False, mid_system=False))
    assert sent["input"][1]["id"] == REASONING["id"]


def test_a_plain_clients_window_keeps_its_tool_calls_and_results_as_items() -> None:
    """Written as a client of plain messages writes them, a rendered window still sends
    a tool call and its result as the API's items (only text messages go plain)."""
    given: list[dict[str, Any]] = [
        {"role": "user", "content": "Read the notes."},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "HERON"},
        {"role": "assistant", "content": "It says HERON."},
        {"role": "user", "content": "Thanks."},
    ]
    body = {"model": "gpt", "input": given}
    chat, _ = responses.to_chat(body, Translations("responses"), "t")
    native = ResponsesNative(body, Renderings(), None)
    assert sent_of(native.request(chat, summarized=False, mid_system=False))["input"] == given


def test_what_litellms_route_would_change_is_found_in_the_kept_and_the_new_messages() -> None:
    """`Translation.covered` says what `lean_covers` says of the whole JSON, however the
    conversation grew: a message LiteLLM's route would change (an empty text block) in
    the part kept, in the new part, or edited away."""
    translations = Translations("anthropic_messages")
    for turn, conversation in enumerate(growing_with_blanks(seed=2)):
        sent = orjson.loads(orjson.dumps(conversation))
        messages.to_chat(body_of(sent), translations, "t")
        kept = translations._known[conversation_key("t", sent[0])]
        assert kept.covered == lean_covers("anthropic_messages", kept.json), turn
        assert kept.covered == (BLANK not in conversation)


BLANK = {"role": "assistant", "content": [{"type": "text", "text": ""}]}  # LiteLLM changes it


def growing_with_blanks(seed: int) -> Iterator[list[dict[str, Any]]]:
    """A conversation as its client resends it for 40 turns: a turn that LiteLLM's route
    would change (`BLANK`) now and then, and now and then edited back to an earlier turn."""
    rng = random.Random(seed)
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for turn in range(40):
        step = rng.random()
        if step < 0.15:
            conversation.append(BLANK)
        elif step < 0.3 and len(conversation) > 2:
            conversation = conversation[: rng.randrange(1, len(conversation))]
        else:
            conversation.append({"role": "assistant", "content": f"a{turn}"})
        conversation.append({"role": "user", "content": f"q{turn}"})
        yield conversation


def test_what_litellms_route_would_change_is_found_in_a_rendering_kept_and_new() -> None:
    """A rendered window's `covered` (found among its new turns only, `Redrawn.rendered`)
    says what `lean_covers` says of the whole window, however the conversation grew: a
    turn LiteLLM's route would change in the part kept, in the new part, or edited away."""
    translations, renderings = Translations("anthropic_messages"), Renderings()
    for turn, conversation in enumerate(growing_with_blanks(seed=3)):
        body = body_of(orjson.loads(orjson.dumps(conversation)))
        chat, _ = messages.to_chat(body, translations, "t")
        *before, last = chat["messages"]
        window = {**chat, "messages": [*before, dict(last)]}  # a copy: rendered, not said
        native = MessagesNative(body, renderings, b"conversation")
        native.request(window, summarized=False, mid_system=False)
        assert native.serialized is not None
        data, covered = native.serialized
        assert covered == lean_covers("anthropic_messages", bytes(data)), turn
        assert covered == (BLANK not in conversation), turn


def test_a_door_hands_the_engine_its_messages_json_from_the_kept_translation() -> None:
    """The chat messages' JSON a door holds (`Translations.written`) is exactly what
    orjson writes of them, however the conversation grew or was edited, on both doors;
    messages that are not the kept translation's (a fresh translation, another
    conversation's) get none."""
    translations = Translations("anthropic_messages")
    for conversation in messages_turns(seed=9, turns=25):
        key = conversation_key("t", conversation[0])
        chat = messages.to_chat(body_of(conversation), translations, "t")[0]["messages"]
        assert translations.written(key, chat) == orjson.dumps(chat)
        assert translations.written(key, chat[1:]) == orjson.dumps(chat[1:])  # no head
        assert translations.written(key, chat[:-1]) is None  # not all of the translation's
        fresh = messages.to_chat(body_of(conversation))[0]["messages"]
        assert translations.written(key, fresh) is None
        assert translations.written(conversation_key("u", conversation[0]), chat) is None
    translations = Translations("responses")
    given: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Start."}]
    for turn in range(8):
        given += copy.deepcopy(RESPONSES_INPUT[1:])
        body = {"model": "gpt", "input": orjson.loads(orjson.dumps(given))}
        for instructions in (None, "Be brief."):
            body = body | ({"instructions": instructions} if instructions else {})
            chat = responses.to_chat(body, translations, "t")[0]["messages"]
            key = conversation_key("t", given[0])
            assert translations.written(key, chat) == orjson.dumps(chat), turn
