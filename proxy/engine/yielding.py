"""The window's older part yields to recall that serves the newest message better: on LoCoMo
(docs/performance.md) the last fifty messages held a sixth of what questions need."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from proxy.concurrency import off_loop
from proxy.conversation.identity import Message
from proxy.conversation.tokens import TokenCounter
from proxy.engine.planner.stubs import last_user
from proxy.engine.planner.window import Plan, yielded_message
from proxy.recall.index import Hit, Recalled, RecallIndex, best_first, least_tokens, segment

__all__ = ["MARGIN", "TAIL", "Asked", "Window", "older_part", "serves_better", "yielded_plan"]

TAIL = 0.15  # of the budget: the newest turns stay verbatim whatever is asked
# The units a block adds in the older part's room must rank this many times higher, on
# average, than the older units it leaves out: a yielded window is not what the
# provider cached at the last turn.
MARGIN = 1.25


@dataclass(frozen=True, slots=True)
class Window:
    """A plan as yielding sees it: where its verbatim window begins, and the room a recall
    block has in it."""

    plan: Plan
    start: int  # where its verbatim window begins, an index of its messages
    offset: int  # what to add to an index of its messages for a transcript position
    budget: int
    system: int  # the client's system messages
    fixed: int  # their tokens with the tools'
    room: int  # what the plan left a recall block
    cap: int  # the most a block may take


@dataclass(frozen=True, slots=True)
class Asked:
    """The newest message and what recall made of it: its hits, the block they made in the
    window's room (`kept`) and the archive's chain value (`head`)."""

    text: str
    hits: list[Hit]
    kept: Recalled
    head: str


async def yielded_plan(
    window: Window,
    asked: Asked,
    counter: TokenCounter,
    unit: Callable[[Hit], Awaitable[list[Message]]],
    block_of: Callable[[list[tuple[Hit, list[Message]]], int], Awaitable[Recalled | None]],
) -> Plan | None:
    """The plan with its window's older part left out for a block, in its room, that serves
    the newest message better; None where none does."""
    plan, start, offset = window.plan, window.start, window.offset
    asking = last_user(plan.messages)
    tail, older_tokens = older_part(window, asking, counter)
    if tail is None:
        return None
    older = plan.messages[start:tail]
    first = offset + start  # where the older part is in the transcript
    made = await off_loop(older, lambda: segment(first, older, asked.head))
    index = RecallIndex().extended([made])
    precise = [hit for hit in asked.hits if hit.precise]
    rest = [hit for hit in asked.hits if not hit.precise]
    order = [*precise, *best_first([*rest, *index.ranked(asked.text, len(index.units))])]
    marker = yielded_message(tail - start)
    marker_tokens = counter.count_message(marker)
    room = window.room + older_tokens - marker_tokens  # within the cap: `older_part`
    found: list[tuple[Hit, list[Message]]] = []
    least = 0.0  # the tokens they take at the least
    for hit in order:
        if hit.start >= first:
            read = plan.messages[hit.start - offset : hit.end - offset]
        else:
            read = await unit(hit)
        found.append((hit, read))
        least += least_tokens(read)
        if least > room:
            break
    block = await block_of(found, room)
    starts = [unit[0] for unit in index.units]
    if block is None or not serves_better(order, block.shown, asked.kept.shown, starts):
        return None
    messages = [*plan.messages[:start], marker, *plan.messages[tail:]]
    tokens = plan.tokens - older_tokens + marker_tokens
    yielded = replace(plan, messages=messages, tokens=tokens, dropped=plan.dropped + tail - start)
    at = asking - (tail - start) + 1  # the newest message, in the yielded plan
    return yielded.with_message(
        at, block.message, counter.count_message(block.message), "recall", block.shown
    )


def older_part(window: Window, asking: int, counter: TokenCounter) -> tuple[int | None, int]:
    """Where the window's older part ends (a user message's index in the plan) and its tokens: at
    most what a block could use, leaving `TAIL` of the budget; (None, 0) where nothing yields."""
    plan, start = window.plan, window.start
    extra = window.cap - window.room  # what a block could take beyond its room
    between = sum(counter.count_message(m) for m in plan.messages[window.system : start])
    verbatim = plan.tokens - window.fixed - between  # the window's tokens, the newest included
    end, older, tokens = None, 0, 0
    for at in range(start, asking):
        message = plan.messages[at]
        # Even from a client that does not resend its tools.
        if message.get("role") == "tool" or message.get("tool_calls"):
            return None, 0  # an agent's window: its stubs and blocks stay byte for byte
        if at > start and message.get("role") == "user":
            if verbatim - older < TAIL * window.budget:
                break
            end, tokens = at, older
        older += counter.count_message(message)
        if older > extra:
            break
    return end, tokens


def serves_better(
    order: Sequence[Hit], shown: Iterable[int], kept: Iterable[int], older: Iterable[int]
) -> bool:
    """Whether the units a block adds in the older part's room rank, on average, `MARGIN` times
    higher in `order` than the older units it leaves out (one not in `order` ranks last)."""
    rank = {hit.start: at for at, hit in enumerate(order)}
    older = set(older)
    added = [rank[start] for start in set(shown) - set(kept) - older if start in rank]
    left = [rank.get(start, len(order)) for start in older - set(shown)]
    if not added or not left:
        return bool(added)  # it adds units and leaves none out
    return MARGIN * sum(added) / len(added) < sum(left) / len(left)
