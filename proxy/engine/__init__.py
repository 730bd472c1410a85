"""The session engine: one turn, whatever the door, within a budget; it knows no wire format,
and its parts and the order only the turn knows are drawn in docs/architecture.md."""

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
