"""The planner: the engine's pure floor, which decides what a request can send from counts
and records alone (no I/O, no framework, no metric, nothing else of the engine)."""

__all__ = [
    "agent_compaction",
    "budget",
    "caching",
    "calibration",
    "payoff",
    "reconcile",
    "stubs",
    "window",
]  # its modules, each with its own `__all__`
