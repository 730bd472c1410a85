"""The one fold routine (`proxy.engine.folds.spans.Folding`), used alike by the turn that
needs a summary now and by the summary made ahead, on the real engine's summarizer,
stubs and archive over a disk store: a fold's summary covers exactly its span (the
summarizer reads that span and nothing after it), follows the previous summary as a new
segment, keeps the facts said before it, and freezes stubs of the large tool results it
leaves in the window, never in the last user turn."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from proxy.conversation.tokens import CountCache
from proxy.engine.folds.spans import Folding
from proxy.engine.folds.summarizer import Bill
from proxy.engine.planner.stubs import Stubs
from proxy.engine.types import Request, RequestContext
from proxy.sessions.records import Checkpoint, StoredMessage
from tests.unit.engines import MODEL, SUMMARY, Parts

Message = dict[str, Any]
KEY = ("t1", "s")
PLANTED = "My API port is 8443."
STUBBING = {"stub_tool_results_over": 300}  # tokens: each file read below is over it


def said(text: str) -> Message:
    return {"role": "user", "content": text}


def reading(number: int) -> list[Message]:
    """The user asks for a file, the model calls read_file, the file comes back (about
    1,500 tokens), the model answers."""
    path = f"src/module_{number}.py"
    call = {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
    }
    text = "\n".join(f"def function_{number}_{i}(): return {i * 7 + number}" for i in range(120))
    return [
        said(f"Please read {path}"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{number}", "content": text},
        {"role": "assistant", "content": f"{path} defines 120 functions."},
    ]


# A fact said, five files read (results at 4, 8, 12, 16, 20), then the user asks for a
# sixth: its result (24) is in the last user turn, which the model answers now.
HISTORY = [
    said(PLANTED),
    {"role": "assistant", "content": "Noted."},
    *[m for number in range(5) for m in reading(number)],
    *reading(5)[:3],
]
RESULTS = [at for at, message in enumerate(HISTORY) if message["role"] == "tool"]


async def stored_session(parts: Parts) -> tuple[Request, list[StoredMessage]]:
    """HISTORY sent at once and answered; the request for it, and the transcript."""
    await parts.turn(HISTORY)
    context = RequestContext(tenant="t1", session_id="s")
    body = {"model": MODEL, "messages": HISTORY}
    request = await parts.engine.parts.intake.request(body, context)
    meta = await parts.store.load(*KEY)
    assert meta is not None
    return request, await parts.store.messages(*KEY, 0, meta.length)


def folding(parts: Parts) -> Folding:
    engine = parts.engine
    return engine.parts.folding


async def fold(
    parts: Parts,
    request: Request,
    transcript: list[StoredMessage],
    start: int,
    end: int,
    previous: Checkpoint | None = None,
    bill: Bill | None = None,
) -> Checkpoint:
    return await folding(parts).fold(
        request,
        transcript[start:end],
        transcript[end:],
        end=end,
        previous=previous,
        summaries=1 if previous is not None else 0,
        recent="",
        mode="sync",
        bill=bill or Bill(),
    )


def read_by_summarizer(parts: Parts) -> str:
    return "\n".join(str(m["content"]) for m in parts.upstream.summaries[-1])


async def test_a_folds_summary_covers_exactly_its_span(make_parts: Callable[..., Parts]) -> None:
    parts = make_parts(context=STUBBING)
    request, transcript = await stored_session(parts)
    made = await fold(parts, request, transcript, 0, 10)
    assert (made.covers_until, made.chain_hash) == (10, transcript[9].chain)
    assert made.segments == (SUMMARY,)
    # The summary left out the fact the span said: it is pinned after it.
    assert made.pinned == ("API port: 8443",) and made.text.startswith(SUMMARY)
    assert made.before == {"o200k_base": sum(s.tokens["o200k_base"] for s in transcript[:10])}
    read = read_by_summarizer(parts)
    assert PLANTED in read and "function_1_119" in read  # its span, the file it read too
    assert "module_2" not in read  # nothing after the span


async def test_a_fold_freezes_stubs_of_the_large_results_it_leaves_in_the_window(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(context=STUBBING)
    request, transcript = await stored_session(parts)
    made = await fold(parts, request, transcript, 0, 10)
    # The results after the span, but the one the last user turn brought.
    assert RESULTS == [4, 8, 12, 16, 20, 24]
    assert made.stubbed == (12, 16, 20)
    # What they save is what the window, sent with them, is lighter by: at least half
    # of each result (a stub that would not save that much is not made).
    after = transcript[10:]
    sent = parts.engine.parts.planning.stubs.counted(after, made, request.counter)
    whole = sum(s.tokens["o200k_base"] for s in after)
    saved = made.stubs_saved["o200k_base"]
    assert saved == whole - sum(s.tokens["o200k_base"] for s in sent)
    assert 2 * saved >= sum(transcript[at].tokens["o200k_base"] for at in made.stubbed)
    assert made.stubs_index is not None  # recalled whole when asked about


async def test_without_cache_awareness_a_fold_freezes_no_stub(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(context={**STUBBING, "cache_aware": False})
    request, transcript = await stored_session(parts)
    made = await fold(parts, request, transcript, 0, 10)
    assert (made.stubbed, made.stubs_saved) == ((), {})


async def test_a_later_fold_follows_its_previous_summary_and_keeps_its_facts(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(context=STUBBING)
    request, transcript = await stored_session(parts)
    first = await fold(parts, request, transcript, 0, 10)
    assert any(fact.value == "8443" for fact in first.ledger or ())
    assert await parts.engine.summaries.store(KEY, first) is not None
    second = await fold(parts, request, transcript, 10, 14, previous=first)
    assert second.covers_until == 14
    assert second.segments == (SUMMARY, SUMMARY)  # the first left byte for byte
    read = read_by_summarizer(parts)
    assert "module_2" in read and "module_1" not in read  # the previous summary, not its span
    assert second.before == {
        "o200k_base": first.before["o200k_base"]
        + sum(s.tokens["o200k_base"] for s in transcript[10:14])
    }
    # The facts said before it stay in its ledger, though its span never said them.
    assert any(fact.value == "8443" for fact in second.ledger or ())
    # The stubs still in the window stay frozen; the one it folded is gone.
    assert second.stubbed == (16, 20)


async def test_the_stubs_an_earlier_summary_froze_stay_frozen_whatever_the_setting_now(
    make_parts: Callable[..., Parts],
) -> None:
    """Stubs are the same bytes from one summary to the next: a later fold keeps those
    still in the window, though the threshold was raised since (a restart with another
    `stub_tool_results_over`) and would choose none of them now."""
    parts = make_parts(context=STUBBING)
    request, transcript = await stored_session(parts)
    first = await fold(parts, request, transcript, 0, 10)
    assert first.stubbed == (12, 16, 20)
    assert await parts.engine.summaries.store(KEY, first) is not None
    engine = parts.engine
    raised = engine.settings.context.model_copy(update={"stub_tool_results_over": 100_000})
    later = Folding(
        engine.summaries,
        Stubs(raised, CountCache()),
        engine.archive.ledger,
        engine.parts.continuing,
        engine.parts.clock,
    )
    second = await later.fold(
        request,
        transcript[10:14],
        transcript[14:],
        end=14,
        previous=first,
        summaries=1,
        recent="",
        mode="sync",
        bill=Bill(),
    )
    assert second.stubbed == (16, 20)


async def test_a_folds_calls_go_on_its_bill(make_parts: Callable[..., Parts]) -> None:
    parts = make_parts(context=STUBBING)
    parts.upstream.usage = lambda params: {"prompt_tokens": 2000, "completion_tokens": 100}
    request, transcript = await stored_session(parts)
    bill = Bill()
    made = await fold(parts, request, transcript, 0, 10, bill=bill)
    assert bill.calls == 1 and bill.usage is not None
    assert (bill.usage.prompt, bill.usage.output) == (2000, 100)
    # $0.15 and $0.60 a million tokens: 2000 in, 100 out.
    assert bill.charge == pytest.approx(2000 * 0.15e-6 + 100 * 0.6e-6)
    assert made.usage == bill.usage
