"""HTTP header names, defined once."""

from __future__ import annotations

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
