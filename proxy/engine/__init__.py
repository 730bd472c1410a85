"""The session engine: one turn, whatever the door. What it offers is named here; its
modules are its own.

Its parts, each importing only those before it (`tests/unit/test_layers.py`): `planner/`
is pure (the window, the budget and its calibration, when a fold pays, cache marks,
reconciling what the client sent with what is stored, agents' own compactions, stubs);
the session view stands on it (the request's facts, the session's history and totals,
the plan over them); `folds/`, and recall with memory (`archive`, `yielding`,
`remembering`), stand on both; the turn (`turn`: the `Engine`, with `commit`, `hooks`,
`events`, `records`) alone wires them and knows the order: request, session, plan, fold
and plan again, recall and memory, upstream, commit, what follows a commit.
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
