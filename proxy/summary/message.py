"""The summary as the model reads it: its text (segments, then the pinned facts) in one
system message right after the client's own, labelled as a summary of the earlier
conversation."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.conversation.identity import Message

__all__ = ["PINNED_LABEL", "SUMMARY_PREFIX", "summary_message", "summary_text"]

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
PINNED_LABEL = "Pinned facts: "


def summary_message(text: str, kept: Sequence[str] = ()) -> Message:
    """The summary as one system message, after the agent context it keeps (`kept`: the
    agent's blocks in the first user message, such as Claude Code's `<system-reminder>`,
    which the summary folded)."""
    context = "".join(f"{block}\n\n" for block in kept)
    return {"role": "system", "content": context + SUMMARY_PREFIX + text}


def summary_text(segments: Sequence[str], pinned: Sequence[str] = ()) -> str:
    """A summary's text: its segments in order, then the facts pinned after them. A fold
    that adds a segment leaves the text before it byte-identical, so a provider's prompt
    cache keeps the summary up to there (the pinned facts, chosen again by each fold, come
    last)."""
    text = "\n\n".join(segments)
    return f"{text}\n\n{PINNED_LABEL}{'; '.join(pinned)}" if pinned else text
