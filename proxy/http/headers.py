"""HTTP header names, defined once, and the headers that tell a client what its turn
sent."""

from __future__ import annotations

import time
from collections.abc import Mapping

from proxy.config.settings import MemorySettings
from proxy.conversation.validation import header_session_id
from proxy.engine import Turn

__all__ = [
    "BUDGET_RATIO",
    "COMPRESSION",
    "DROPPED",
    "FALLBACKS_REFUSED",
    "REQUEST_ID",
    "SESSION_MODE",
    "SESSION_TURN",
    "SUMMARY_AGE",
    "TOKENS_ORIGINAL",
    "TOKENS_SENT",
    "memory_id",
    "turn_headers",
]

# Request headers (the session header's name is configurable: `session.header`).
SESSION_MODE = "X-Session-Mode"
BUDGET_RATIO = "X-Context-Budget-Ratio"

# Response headers.
REQUEST_ID = "X-Request-Id"
TOKENS_ORIGINAL = "X-Context-Tokens-Original"
TOKENS_SENT = "X-Context-Tokens-Sent"
COMPRESSION = "X-Context-Compression"
# What the request carried that did not reach the provider (fields, server tools).
DROPPED = "X-Context-Dropped"
# Fallbacks of the requested model that the caller's key may not use: never tried for it.
FALLBACKS_REFUSED = "X-Context-Fallbacks-Refused"
SUMMARY_AGE = "X-Context-Summary-Age"
# "side": a request beside its session (an agent's title or quota check), not stored;
# "answered": an agent's request for a summary, answered from the session's, not stored.
SESSION_TURN = "X-Context-Session-Turn"


def turn_headers(turn: Turn) -> dict[str, str]:
    """What the proxy did to a managed turn's context, said in response headers."""
    if not turn.managed:
        return {}
    values: dict[str, str] = {COMPRESSION: turn.compression}
    if turn.tokens_original is not None and turn.tokens_sent is not None:
        values[TOKENS_ORIGINAL] = str(turn.tokens_original)
        values[TOKENS_SENT] = str(turn.tokens_sent)
    if turn.summary_created is not None:
        values[SUMMARY_AGE] = str(max(0, int(time.time() - turn.summary_created)))
    if turn.side_request:
        values[SESSION_TURN] = "side" if turn.answer is None else "answered"
    return values


def memory_id(headers: Mapping[str, str], memory: MemorySettings) -> str | None:
    """The memory a session's request shares (`memory.enabled`): the header's, else with
    `memory.per_tenant` the caller's tenant's own. One reading for a turn and its
    preview, so a preview plans with the memory the turn would."""
    if not memory.enabled:
        return None
    value = headers.get(memory.header)
    if value:
        return header_session_id(value, memory.header)
    return "tenant" if memory.per_tenant else None
