"""The engine's parts, built once per process and handed to each other: the one place that
says which part stands on which."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from proxy.config.settings import Settings
from proxy.conversation.tokens import CountCache
from proxy.engine.archive import Archive
from proxy.engine.commit import Commits
from proxy.engine.folds.ahead import SummariesAhead
from proxy.engine.folds.chapters import Chapters
from proxy.engine.folds.continuing import Continuing
from proxy.engine.folds.inline import InlineFold
from proxy.engine.folds.spans import Folding
from proxy.engine.folds.summarizer import Summaries
from proxy.engine.history import History
from proxy.engine.hooks import AfterCommit
from proxy.engine.intake import Intake
from proxy.engine.planner.stubs import stub
from proxy.engine.planning import Planning
from proxy.engine.remembering import Memories
from proxy.observability.metrics import ModelLabels
from proxy.sessions.locks import TurnLocks
from proxy.sessions.store import SessionStore
from proxy.upstream.client import Upstream

__all__ = ["Parts", "wired"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Parts:
    """One process's engine parts: `clock` (epoch seconds) is every "now" that decides money
    or a cache's warmth, and `secret` keys what reaches a provider's cache."""

    settings: Settings
    upstream: Upstream
    store: SessionStore
    secret: bytes
    clock: Callable[[], float]
    label: ModelLabels
    summaries: Summaries
    continuing: Continuing
    folding: Folding
    history: History
    archive: Archive
    memories: Memories
    planning: Planning
    inline: InlineFold
    locks: TurnLocks
    chapters: Chapters
    intake: Intake
    commits: Commits
    after: AfterCommit


def wired(
    *,
    settings: Settings,
    upstream: Upstream,
    store: SessionStore,
    clock: Callable[[], float],
    monotonic: Callable[[], float],
    secret: bytes,
) -> Parts:
    """The parts, each given the ones it stands on; `monotonic` times what waits (the
    summarizer's back-off, a turn's wait for its session's lock)."""
    label = ModelLabels(upstream.models.served_as)
    summaries = Summaries(
        settings=settings,
        upstream=upstream,
        store=store,
        labels=label,
        clock=monotonic,
        wall_clock=clock,
    )
    counts = CountCache()
    recalls = settings.context.recall_ratio > 0
    history = History(store, counts, functools.partial(stub, recalled=recalls))
    archive = Archive(settings, store)
    memories = Memories(settings, store, archive)
    planning = Planning(settings=settings, history=history, counts=counts, clock=clock)
    continuing = Continuing(upstream)
    folding = Folding(summaries, planning.stubs, archive.ledger, continuing, clock)
    ahead = SummariesAhead(
        settings=settings,
        store=store,
        history=history,
        summaries=summaries,
        planning=planning,
        folding=folding,
    )
    return Parts(
        settings=settings,
        upstream=upstream,
        store=store,
        secret=secret,
        clock=clock,
        label=label,
        summaries=summaries,
        continuing=continuing,
        folding=folding,
        history=history,
        archive=archive,
        memories=memories,
        planning=planning,
        inline=InlineFold(
            settings=settings,
            store=store,
            history=history,
            summaries=summaries,
            planning=planning,
            folding=folding,
        ),
        locks=TurnLocks(
            store=store, wait_seconds=settings.session.turn_wait_seconds, clock=monotonic
        ),
        chapters=Chapters(
            settings=settings,
            store=store,
            history=history,
            summaries=summaries,
            ledger=archive.ledger,
        ),
        intake=Intake(
            settings=settings,
            upstream=upstream,
            counts=counts,
            planning=planning,
            label=label,
            secret=secret,
        ),
        commits=Commits(
            store=store, history=history, summaries=summaries, label=label, clock=clock
        ),
        after=AfterCommit(ahead=ahead, memories=memories, label=label, redact=summaries.redact),
    )
