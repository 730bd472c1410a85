"""The planner: the engine's pure floor. What a request can send is decided here, from
counts and records alone, with no I/O, no framework and no metric: the window
(`window`), the budget and its calibration (`budget`, `calibration`), when a fold pays
for the cache rewrite it causes (`payoff`), cache marks and keys (`caching`), what the
client sent against what is stored (`reconcile`), agents' own compactions as their
requests show them (`agent_compaction`) and large tool results as stubs (`stubs`).
Everything else in the engine builds on it; it imports nothing else of the engine
(`tests/unit/test_layers.py`), and is type-checked strictly.
"""

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
