"""The engine's parts that planning and folds stand on, replaced by fakes: a six-message
session whose messages each count 10 tokens, a store and history that read it."""

from __future__ import annotations

from typing import Any

from proxy.conversation.tokens import counter_for_model
from proxy.engine.planner.reconcile import Match
from proxy.engine.types import Request, SessionView
from proxy.sessions.records import Checkpoint
from tests.unit.sessions_factory import COUNTER, entries, meta

KEY = ("t1", "s")
TOKENIZER = counter_for_model("gpt-4o-mini")
TRANSCRIPT = entries(*(f"message {i}" for i in range(6)))
CONVERSATION = [s.message for s in TRANSCRIPT]


class Store:
    """Reads the meta record a background summary just stored."""

    def __init__(self, version: int) -> None:
        self.version = version

    async def load(self, tenant: str, session_id: str) -> Any:
        return meta(TRANSCRIPT, version=self.version)


class History:
    """Reads the session again: with the summary that landed."""

    def __init__(self, state: SessionView) -> None:
        self.fresh = state
        self.reads = 0

    async def state(self, request: Request) -> SessionView:
        self.reads += 1
        return self.fresh


class Summaries:
    """No background summary running now; none may be made here."""

    def running(self, key: Any) -> None:
        return None

    async def make(self, *args: Any, **kwargs: Any) -> Checkpoint:
        raise AssertionError("summarized again what a background summary had just summarized")


def state(version: int, checkpoint: Checkpoint | None) -> SessionView:
    match = Match("full", len(TRANSCRIPT), len(TRANSCRIPT), [], TRANSCRIPT[-1].chain)
    return SessionView(
        base=meta(TRANSCRIPT, version=version),
        match=match,
        new=(),
        totals={COUNTER: 10 * len(TRANSCRIPT)},
        checkpoint=checkpoint,
        checkpoints=1 if checkpoint else 0,
        expected_version=version,
        serialized=None,
    )


def planned_request(budget: int, system_tokens: int) -> Request:
    """A request for the conversation, with no system message or tools but
    `system_tokens` (the model's input limit a quarter over the budget)."""
    return Request(
        model="gpt-4o-mini",
        counter=TOKENIZER,
        budget=budget,
        input_limit=budget + budget // 4,
        messages=CONVERSATION,
        system=[],
        conversation=CONVERSATION,
        system_tokens=system_tokens,
        tools_tokens=0,
        mode="auto",
        key=KEY,
        size=None,
    )


class FailingPlanStore(Store):
    async def messages(self, tenant: str, session_id: str, start: int, end: int) -> Any:
        return TRANSCRIPT[start:end]


class CountingSummaries(Summaries):
    def __init__(self) -> None:
        self.failures: list[tuple[str, str]] = []

    def failed(self, model: str, mode: str) -> None:
        self.failures.append((model, mode))


class FilledHistory(History):
    async def counted(self, entries: Any, *args: Any) -> Any:
        return entries


class StoredHistory(FilledHistory):
    async def window(self, request: Request, state: SessionView, start: int) -> Any:
        return TRANSCRIPT[start:]

    async def counted_window(
        self, request: Request, state: SessionView, start: int, names: set[str]
    ) -> Any:
        return TRANSCRIPT[start:]
