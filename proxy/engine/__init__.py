"""The session engine: one turn, whatever the door. What it offers is named here; its
modules are its own.

Its parts, lowest first (`tests/unit/test_layers.py` holds the order): `planner/` is pure
(the window, the budget and its calibration, when a fold pays, cache marks, reconciling
what the client sent with what is stored, agents' own compactions, stubs); above it the
session's history and totals, the summaries (`summarizer`, `breaker`, `ahead`,
`chapters`), recall and memory (`archive`, `yielding`, `remembering`), the request's
facts (`intake`, `types`), and at the top the turn (`turn`: the `Engine`), which alone
knows the order: request, session, plan, fold, recall and memory, upstream, commit.
It knows budgets and nothing about wire formats: it may import every package below it,
never a door or `proxy.http`.
"""

from proxy.engine.events import TurnEvents
from proxy.engine.planner.agent_compaction import REQUEST as COMPACTION_REQUEST
from proxy.engine.planner.agent_compaction import RESUMED as COMPACTION_RESUMED
from proxy.engine.turn import Engine
from proxy.engine.types import RequestContext, Turn

__all__ = [
    "COMPACTION_REQUEST",
    "COMPACTION_RESUMED",
    "Engine",
    "RequestContext",
    "Turn",
    "TurnEvents",
]
