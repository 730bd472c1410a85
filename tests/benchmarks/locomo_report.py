"""What the LoCoMo benchmark (`tests/benchmarks/locomo.py`) measures of a context, and
its report.

A question's evidence is in a context when every evidence turn's text is, verbatim, in
some message of it; its answer string is looked for too (case aside), as a secondary
figure. Tokens are counted by the test upstream's recipe
(`tests.upstream.count_prompt_tokens`), for the proxy's contexts and the baselines' alike.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from proxy.memory.facts import MEMORY_PREFIX, MEMORY_RECALL_PREFIX
from proxy.recall.index import RECALL_PREFIX
from proxy.summary.message import SUMMARY_PREFIX
from tests.benchmarks.locomo_data import CATEGORIES, Question
from tests.upstream import count_prompt_tokens

__all__ = ["Run", "Scored", "placed", "report", "scored", "text_of"]


@dataclass
class Scored:
    """One question's context under one strategy."""

    category: int
    found: bool  # every evidence turn's text is in it
    answered: bool  # the answer string is in it
    tokens: int
    whole: int  # the whole conversation's tokens, with the question


def scored(question: Question, messages: list[dict[str, Any]], whole: int) -> Scored:
    contents = [text_of(m.get("content")) for m in messages]
    joined = "\n".join(contents).lower()
    return Scored(
        question.category,
        all(any(e in c for c in contents) for e in question.evidence),
        question.answer.lower() in joined,
        count_prompt_tokens({"messages": messages}),
        whole,
    )


def placed(question: Question, messages: list[dict[str, Any]]) -> list[str]:
    """Where each evidence turn is in a context: the first part of it that holds it."""
    parts = [(_part(m), text_of(m.get("content"))) for m in messages]
    return [next((p for p, text in parts if e in text), "nowhere") for e in question.evidence]


def _part(message: dict[str, Any]) -> str:
    text = text_of(message.get("content"))
    if message.get("role") not in ("system", "developer"):
        return "the window"
    for prefix, part in (
        (RECALL_PREFIX, "a recall block"),
        (MEMORY_RECALL_PREFIX, "the memory's recall block"),
        (MEMORY_PREFIX, "the memory's facts"),
    ):
        if text.startswith(prefix):
            return part
    # An agent's context blocks may come before the summary's label, in its message.
    return "the summary or its pinned facts" if SUMMARY_PREFIX in text else "the system message"


def text_of(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


@dataclass
class Run:
    """A mode's results: per strategy, each question's score; and the budget's check."""

    budget: int  # the proxy's, in tokens
    window: int  # the model's input limit
    strategies: dict[str, list[Scored]] = field(default_factory=dict)
    requests: list[int] = field(default_factory=list)  # tokens of each upstream request
    summaries: int = 0  # of them, the summarizer's
    previews: list[int] = field(default_factory=list)  # tokens of each preview
    due: int = 0  # previews with a summary due (they show the truncation fallback)
    budgets: set[int] = field(default_factory=set)  # as the previews report it
    strays: int = 0
    unlike: int = 0  # conversations whose last question's request differed from its preview
    notes: list[str] = field(default_factory=list)
    by_conversation: list[tuple[str, int, int]] = field(default_factory=list)  # found, asked

    places: Counter[str] = field(default_factory=Counter)  # of the proxy's evidence turns

    def add(self, name: str, score: Scored) -> None:
        self.strategies.setdefault(name, []).append(score)


def table(run: Run) -> str:
    """Per strategy: the questions whose evidence is all in the context, by category; the
    context's mean tokens and their share of the whole conversation's; and the questions
    whose answer string is in it."""
    head = ["strategy", "evidence in context", *CATEGORIES.values()]
    head += ["tokens (share of the conversation)", "answer string in context"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, scores in run.strategies.items():
        tokens = sum(s.tokens for s in scores)
        by_category = [_share([s.found for s in scores if s.category == c]) for c in CATEGORIES]
        cells = [name, _share([s.found for s in scores]), *by_category]
        cells.append(f"{tokens / len(scores):,.0f} ({tokens / sum(s.whole for s in scores):.1%})")
        cells.append(_share([s.answered for s in scores]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _share(values: list[bool]) -> str:
    return f"{sum(values) / len(values):.1%}" if values else "n/a"


def budget_line(run: Run) -> str:
    """Requests and previews over the budget, and the largest of each."""
    over = sum(t > run.budget for t in run.requests)
    line = (
        f"budget {run.budget:,} tokens of {run.window:,}: upstream requests over it {over} of"
        f" {len(run.requests):,} ({run.summaries} of them summaries), largest"
        f" {max(run.requests, default=0):,}"
    )
    if run.previews:
        line += (
            f"; previews over it {sum(t > run.budget for t in run.previews)} of"
            f" {len(run.previews):,}, largest {max(run.previews):,} (the budget they report:"
            f" {', '.join(f'{b:,}' for b in sorted(run.budgets))})"
        )
    return line


def report(name: str, run: Run, seconds: float) -> list[str]:
    scores = run.strategies[next(iter(run.strategies))]
    counts = ", ".join(
        f"{label} {sum(s.category == c for s in scores)}" for c, label in CATEGORIES.items()
    )
    lines = [
        f"{name}: {len(scores)} questions ({counts})",
        table(run),
        budget_line(run),
        "the proxy by conversation: "
        + ", ".join(f"{c} {f / max(n, 1):.1%} of {n}" for c, f, n in run.by_conversation),
    ]
    turns = sum(run.places.values())
    lines.append(
        f"where the proxy's context held each evidence turn ({turns:,}): "
        + ", ".join(f"{place} {n / turns:.1%}" for place, n in run.places.most_common())
    )
    if run.previews:
        asked = len(run.by_conversation)
        lines.append(
            f"previews with a summary due (they show the truncation fallback): {run.due};"
            f" the last question of each conversation sent as a request: the request sent"
            f" what its preview showed in {asked - run.unlike} of {asked}"
        )
    if run.strays:
        lines.append(f"requests the script did not expect: {run.strays}")
    lines += run.notes[:1]
    lines.append(f"elapsed: {seconds:.0f} s")
    return lines
