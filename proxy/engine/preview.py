"""What a turn would send, computed as the turn computes it but calling no model and storing
nothing: the sessions API's preview, and a count of a request's tokens."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.engine.remembering import with_memory_and_recall
from proxy.engine.types import RequestContext, planned_turn
from proxy.engine.wiring import Parts

__all__ = ["Previews"]


class Previews:
    def __init__(self, parts: Parts) -> None:
        self._parts = parts

    async def preview(self, body: dict[str, Any], context: RequestContext) -> dict[str, Any]:
        """What a turn would send, calling no model: where a summary is due, the span is
        reported and the messages shown are the truncation fallback."""
        # Counted, whatever the session's bound: a preview shows the proxy's own count.
        request = replace(await self._parts.intake.request(body, context), sendable_uncounted=0)
        state = await self._parts.history.state(request)
        request = self._parts.intake.calibrated(body, context, request, state)
        if state.match.kind == "chapter":
            state = await self._parts.chapters.chapter(request, state)
        due = None
        if state.match.kind == "side":  # as it would be sent: beside the session, counted
            turn = await self._parts.intake.stateless(body, request, replace(context, body=b""))
        else:
            plan = await self._parts.planning.plan(
                request, state, allow_summary=not request.own_budget
            )
            due = plan.summarize
            if due is not None:
                plan = await self._parts.planning.plan(request, state, allow_summary=False)
            plan, _ = await with_memory_and_recall(
                self._parts.memories, self._parts.archive, request, state, plan
            )
            turn = planned_turn(body, request, state, plan)
        return {
            "object": "session.preview",
            "model": request.model,
            "budget": request.budget,
            "tokens_original": turn.tokens_original,
            "tokens_sent": turn.tokens_sent,
            "compression": turn.compression,
            "summary_due": {"start": due[0], "end": due[1]} if due else None,
            "messages": turn.body["messages"],
        }

    async def count(self, body: dict[str, Any], context: RequestContext) -> int:
        """The tokens a turn would send (by the proxy's own counter), calling no model."""
        request = await self._parts.intake.request(body, context)
        if request.key is not None:
            return int((await self.preview(body, context))["tokens_sent"])
        await self._parts.intake.validated(request)
        return (await self._parts.intake.truncated(request))[1].tokens
