"""The cost benchmark's clients, each spending as its real client does: what it resends,
where its cache breakpoints go, and when and how it compacts its own conversation.

- `AgentClient`, Claude Code (its `services/compact/autoCompact.ts`, `compact.ts` and
  `services/api/claude.ts`, as published analyses of its 2.1 sources quote them);
- `ChatClient`, a chat app of no particular brand, compacting near its window;
- `CodexClient`, Codex (openai/codex `codex-rs/core/src/compact.rs` and
  `codex-rs/protocol/src/openai_models.rs`), its local compaction.

Through a proxy the same client runs, and would compact where the usage the proxy shows
it reached its threshold; the proxy's budget (80% of the window) keeps it below.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import anthropic
import openai

from tests.benchmarks.settling import settled
from tests.benchmarks.workloads import Session, Turn, call, codex_call_id
from tests.upstream import Reply

AGENT_MODEL, CHAT_MODEL, CODEX_MODEL = "claude-sonnet-4-5", "gpt-4.1", "gpt-5-codex"
AGENT_WINDOW, CHAT_WINDOW, CODEX_WINDOW = 200_000, 16_384, 272_000  # LiteLLM's, the chat's own

# Claude Code compacts once its count reaches the window less what it keeps for the
# summary's output (`MAX_OUTPUT_TOKENS_FOR_SUMMARY`, min of it and the model's output
# limit) and a buffer (`AUTOCOMPACT_BUFFER_TOKENS`): 167,000 of 200,000.
SUMMARY_OUTPUT_RESERVE = 20_000
AUTOCOMPACT_BUFFER = 13_000
# Its request for a summary, how the summary message opens, and how it goes on (an
# automatic compaction folds the user's newest message into the summary too).
COMPACT_REQUEST = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions."
)
CONTINUED = (
    "This session is being continued from a previous conversation that ran out of "
    "context. The conversation is summarized below:\n"
)
RESUME = (
    "Please continue the conversation from where we left it off without asking the user any"
    " further questions. Continue with the last task that you were asked to work on."
)
MARK = {"type": "ephemeral"}  # a breakpoint with the default five-minute TTL

CHAT_COMPACT_AT = 0.92  # the chat app compacts at 92% of its window, as it did before

# Codex compacts at 90% of the window (`auto_compact_token_limit`, when the model's
# entry sets none: `context_window * 9 / 10`). Its prompt (templates/compact/prompt.md)
# and the summary message's prefix (summary_prefix.md) open with these words, as the
# proxy knows them (the rest is abridged); it keeps the newest user messages up to
# `COMPACT_USER_MESSAGE_MAX_TOKENS`, counted at four bytes a token.
CODEX_COMPACT_SHARE = 0.9
SUMMARIZATION_PROMPT = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another"
    " LLM that will resume the task: the goal, progress and decisions, constraints and"
    " preferences, next steps, and the data needed to continue. Be concise and structured."
)
SUMMARY_PREFIX = (
    "Another language model started to solve this problem and produced a summary of its"
    " thinking process. Build on its work and avoid duplicating it. Here is its summary:"
)
KEPT_USER_TOKENS = 20_000
CODEX_THREAD = "0199c0de-5a1e-7c0d-8e54-000000000054"  # its conversation id: the cache key


class Script(Protocol):
    """The test upstream's answers: `pending` is the reply the client's script expects next."""

    pending: Reply


class Client:
    """What the clients share: the upstream's script, whether and where they compact,
    and the count of their conversation they compact by (the last reply's usage, and
    a token for four characters of what was added since, as Claude Code and Codex
    estimate it)."""

    def __init__(
        self, session: Session, responder: Script, window: int, compacts: bool, settles: bool
    ) -> None:
        self.session, self.responder, self.window = session, responder, window
        self.compacts = compacts
        self.settles = settles  # through a proxy: each request settled before the next
        self.compactions = 0
        self.reported = 0  # the tokens the last reply's usage counted
        self.since = 0  # characters added to the conversation after that reply

    @staticmethod
    def threshold(window: int) -> int:
        """Where it compacts a conversation on a model of `window` tokens."""
        raise NotImplementedError

    def counted(self) -> int:
        return self.reported + self.since // 4

    def full(self) -> bool:
        """Whether it compacts before its next request."""
        return self.compacts and self.counted() >= self.threshold(self.window)

    def added(self, item: Any) -> None:
        self.since += len(json.dumps(item))

    def settling(self) -> AbstractContextManager[None]:
        return settled() if self.settles else nullcontext()

    def turn(self, number: int, turn: Turn) -> None:
        raise NotImplementedError


class AgentClient(Client):
    """Claude Code: resends its conversation with one breakpoint on the system's last block
    and one on the last message's last block (`addCacheBreakpoints`). Before each request,
    once its count reaches the window less 33,000 tokens, it compacts: the same request
    (system, tools, messages) with its instruction added to the last user message (as
    consecutive user messages merge), the message mark moved to the message before it
    (`skipCacheWrite`: the fork leaves no tail of its own in the cache), so all the last
    request wrote is read; then it goes on from one message holding the summary (the
    user's newest message folded into it)."""

    def __init__(
        self,
        sdk: anthropic.Anthropic,
        session: Session,
        responder: Script,
        window: int,
        compacts: bool,
        settles: bool,
    ) -> None:
        super().__init__(session, responder, window, compacts, settles)
        self.sdk = sdk
        half = len(session.system) // 8
        self.system = [
            {"type": "text", "text": session.system[:half]},
            {"type": "text", "text": session.system[half:], "cache_control": MARK},
        ]
        self.history: list[dict[str, Any]] = []

    @staticmethod
    def threshold(window: int) -> int:
        return window - SUMMARY_OUTPUT_RESERVE - AUTOCOMPACT_BUFFER

    def send(self, messages: list[dict[str, Any]], reply: Reply, mark: int) -> Any:
        """`messages` with the message mark on the one at `mark` (none where there is none)."""
        self.responder.pending = reply
        marked = list(messages)
        if 0 <= mark < len(marked):
            blocks = [dict(b) for b in marked[mark]["content"]]
            blocks[-1]["cache_control"] = MARK
            marked[mark] = {"role": marked[mark]["role"], "content": blocks}
        with (
            self.settling(),
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
        self.reported = used.input_tokens + used.output_tokens
        self.reported += (used.cache_read_input_tokens or 0) + (
            used.cache_creation_input_tokens or 0
        )
        self.since = 0
        return message

    def append(self, message: dict[str, Any]) -> None:
        self.history.append(message)
        self.added(message)

    def ask(self, reply: Reply) -> Any:
        """One request of the conversation, compacting first where Claude Code would."""
        if self.full():
            self.compact()
        message = self.send(self.history, reply, len(self.history) - 1)
        self.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in message.content],
            }
        )
        return message

    def compact(self) -> None:
        *head, last = self.history
        instruction = {"type": "text", "text": COMPACT_REQUEST}
        request = {"role": "user", "content": [*last["content"], instruction]}
        answer = self.send([*head, request], Reply(content="(summary)"), len(head) - 1)
        summary = "".join(b.text for b in answer.content if b.type == "text")
        self.history, self.reported, self.since = [], 0, 0
        text = f"{CONTINUED}{summary}\n{RESUME}"
        self.append({"role": "user", "content": [{"type": "text", "text": text}]})
        self.compactions += 1

    def say(self, text: str) -> None:
        """A user message (after a tool result or the summary, it joins that message)."""
        block = {"type": "text", "text": text}
        if self.history and self.history[-1]["role"] == "user":
            self.history[-1]["content"].append(block)
            self.added(block)
        else:
            self.append({"role": "user", "content": [block]})

    def turn(self, number: int, turn: Turn) -> None:
        self.say(turn.user)
        for step, action in enumerate(turn.actions):
            reply = self.ask(
                Reply(content="Let me check.", tool_calls=[call(action, number, step)])
            )
            use = next(b for b in reply.content if b.type == "tool_use")
            result = {"type": "tool_result", "tool_use_id": use.id, "content": action.result}
            if action.error:
                result["is_error"] = True
            self.append({"role": "user", "content": [result]})
        self.ask(Reply(content=turn.answer))


class ChatClient(Client):
    """A chat app: resends its conversation; at a user turn, once the prompt its last
    reply counted reaches `CHAT_COMPACT_AT` of the window, asks for a summary (the same
    request and one more user message, an automatic-cache read) and goes on from one
    message holding it, the new user message after it."""

    def __init__(
        self,
        sdk: openai.OpenAI,
        session: Session,
        responder: Script,
        window: int,
        compacts: bool,
        settles: bool,
    ) -> None:
        super().__init__(session, responder, window, compacts, settles)
        self.sdk = sdk
        self.history: list[dict[str, Any]] = []

    @staticmethod
    def threshold(window: int) -> int:
        return int(window * CHAT_COMPACT_AT)

    def send(self, messages: list[dict[str, Any]], reply: Reply) -> str:
        self.responder.pending = reply
        text = []
        with self.settling():
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
                    self.reported = chunk.usage.prompt_tokens
        return "".join(text)

    def turn(self, number: int, turn: Turn) -> None:
        if self.full():
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


def user_item(text: str) -> dict[str, Any]:
    """A user message as a Responses input item."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


def kept_messages(messages: list[str], budget: int = KEPT_USER_TOKENS) -> list[str]:
    """The newest user messages within `budget` tokens (four bytes a token), the oldest of
    them cut in its middle where it does not fit whole (`build_compacted_history`)."""
    kept: list[str] = []
    for message in reversed(messages):
        if budget <= 0:
            break
        tokens = (len(message.encode()) + 3) // 4
        if tokens <= budget:
            kept.append(message)
            budget -= tokens
            continue
        half = budget * 2
        cut = f"…{tokens - budget} tokens truncated…"
        kept.append(f"{message[:half]}{cut}{message[-half:]}")
        break
    return kept[::-1]


class CodexClient(Client):
    """Codex: each request is its instructions, its tools and every input item since its
    initial context, streamed, with `prompt_cache_key` its conversation id. Before a
    turn and before each request that follows a tool call, once its count reaches 90% of
    the window, it compacts as its local compaction does: a normal turn over the same
    input plus its prompt as a user message, with the same instructions and key but no
    tools (`Prompt { input, ..Default::default() }`: openai/codex#37305, so no cached
    prefix; `keeps_tools` models the fix); then it goes on from its initial context, its
    newest user messages (up to 20,000 tokens) and the summary under its prefix."""

    def __init__(
        self,
        sdk: openai.OpenAI,
        session: Session,
        responder: Script,
        window: int,
        compacts: bool,
        settles: bool,
        keeps_tools: bool = False,
    ) -> None:
        super().__init__(session, responder, window, compacts, settles)
        self.sdk, self.keeps_tools = sdk, keeps_tools
        self.history: list[dict[str, Any]] = []
        for item in session.context:
            self.append(item)

    @staticmethod
    def threshold(window: int) -> int:
        return int(window * CODEX_COMPACT_SHARE)

    def send(self, items: list[dict[str, Any]], reply: Reply, tools: bool = True) -> Any:
        self.responder.pending = reply
        response = None
        with self.settling():
            stream = self.sdk.responses.create(
                model=CODEX_MODEL,
                instructions=self.session.system,
                input=items,
                tools=self.session.tools if tools else [],
                tool_choice="auto",
                parallel_tool_calls=False,
                reasoning={"effort": "medium", "summary": "auto"},
                store=False,
                stream=True,
                include=["reasoning.encrypted_content"],
                prompt_cache_key=CODEX_THREAD,
            )
            for event in stream:
                if event.type == "response.completed":
                    response = event.response
        assert response is not None and response.usage is not None, "no response.completed"
        self.reported = response.usage.input_tokens + response.usage.output_tokens
        self.since = 0
        return response

    def append(self, item: dict[str, Any]) -> None:
        self.history.append(item)
        self.added(item)

    def ask(self, reply: Reply) -> Any:
        """One request over the conversation; its output items join it as Codex keeps them."""
        response = self.send(self.history, reply)
        for item in response.output:
            if item.type == "message":
                text = "".join(p.text for p in item.content if p.type == "output_text")
                part = {"type": "output_text", "text": text}
                self.append({"type": "message", "role": "assistant", "content": [part]})
            elif item.type == "function_call":
                fields = {"name": item.name, "arguments": item.arguments, "call_id": item.call_id}
                self.append({"type": "function_call", **fields})
        return response

    def room(self) -> None:
        if self.full():
            self.compact()

    def said(self) -> Iterator[str]:
        """The user's own messages (not the initial context, not an earlier summary)."""
        opening = {item_text(item) for item in self.session.context}
        for item in self.history:
            if item.get("type", "message") != "message" or item.get("role") != "user":
                continue
            text = item_text(item)
            if text not in opening and not text.startswith(SUMMARY_PREFIX + "\n"):
                yield text

    def compact(self) -> None:
        request = [*self.history, user_item(SUMMARIZATION_PROMPT)]
        response = self.send(request, Reply(content="(summary)"), tools=self.keeps_tools)
        messages = [item for item in response.output if item.type == "message"]
        summary = "".join(p.text for p in messages[-1].content if p.type == "output_text")
        kept = kept_messages(list(self.said()))
        self.history, self.reported, self.since = [], 0, 0
        for item in [*self.session.context, *map(user_item, kept)]:
            self.append(item)
        self.append(user_item(f"{SUMMARY_PREFIX}\n{summary}"))
        self.compactions += 1

    def turn(self, number: int, turn: Turn) -> None:
        self.room()
        self.append(user_item(turn.user))
        for step, action in enumerate(turn.actions):
            if step:
                self.room()
            response = self.ask(Reply(tool_calls=[call(action, number, step, codex_call_id)]))
            call_id = next(i.call_id for i in response.output if i.type == "function_call")
            self.append(
                {"type": "function_call_output", "call_id": call_id, "output": action.result}
            )
        if turn.actions:
            self.room()
        self.ask(Reply(content=turn.answer))


CLIENTS: dict[str, type[Client]] = {"agent": AgentClient, "chat": ChatClient, "codex": CodexClient}


def start(
    kind: str,
    base: str,
    headers: dict[str, str],
    session: Session,
    responder: Script,
    window: int,
    compacts: bool,
    settles: bool,
    keeps_tools: bool = False,
) -> Client:
    """The client of a session `kind`, sending to `base` (an upstream's or a proxy's `/v1`)."""
    options: dict[str, Any] = {
        "api_key": "sk-cost",
        "max_retries": 0,
        "default_headers": headers,
        "timeout": 600,
    }
    if kind == "agent":
        sdk = anthropic.Anthropic(base_url=base.removesuffix("/v1"), **options)
        return AgentClient(sdk, session, responder, window, compacts, settles)
    chat = openai.OpenAI(base_url=base, **options)
    if kind == "chat":
        return ChatClient(chat, session, responder, window, compacts, settles)
    return CodexClient(chat, session, responder, window, compacts, settles, keeps_tools)
