"""The net saving of a session's turns: what resending the client's whole conversation
would have cost on the same model with its prompt cache, minus what the proxy spent.

The counterfactual client resends its whole conversation each turn. Its provider's cache
holds the previous turn's whole conversation if that was sent within the cache's TTL
(and, for an automatic cache, was at least 1,024 tokens long; it is read in 128-token
steps beyond that, as OpenAI's is): that part is priced as a
cache read, the rest as new input (at the cache-write price where the cache has
breakpoints, as a client that marks them writes it), and the reply at the output price.
What the proxy spent is the turn at its reported usage plus the summaries charged to it.
Both sides are in the provider's tokens: the proxy's count of the conversation is scaled
by the provider's prompt tokens over the proxy's count, as measured on the session's
latest turn that sent its conversation whole (a folded prompt, system and summary for the
most part, is counted unlike the messages it left out), or on this turn before any did.
The net may be negative: then the proxy cost more than resending would have.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from proxy.costs.prices import AUTOMATIC_MIN_TOKENS, AUTOMATIC_STEP, Prices
from proxy.costs.usage import Usage

__all__ = ["Receipt", "TurnCost", "resend_cost", "turn_cost"]


@dataclass(frozen=True, slots=True)
class TurnCost:
    """One turn's money (USD): spent (the turn at its usage plus `summaries`), the part
    of it spent on summaries, and what resending would have cost."""

    spent: float
    summaries: float
    resend: float

    @property
    def net(self) -> float:
        return self.resend - self.spent

    def to_dict(self) -> dict[str, float]:
        return {
            "spent": round(self.spent, 9),
            "summaries": round(self.summaries, 9),
            "resend": round(self.resend, 9),
            "net": round(self.net, 9),
        }


@dataclass(frozen=True, slots=True)
class Receipt:
    """A session's money so far (USD, over its priced turns), and what its next turn's
    counterfactual needs: the previous turn's whole conversation (provider's tokens)
    and when it was sent. `owed`: summaries made for the session (in the background)
    and not yet charged to a turn; the next priced turn is charged them."""

    spent: float = 0.0
    summaries: float = 0.0
    resend: float = 0.0
    turns: int = 0
    owed: float = 0.0
    last_tokens: int = 0
    last_at: float | None = None
    ratio: float | None = None
    """The provider's prompt tokens over the proxy's count, on the latest whole turn."""

    @property
    def net(self) -> float:
        return self.resend - self.spent

    def owing(self, usd: float) -> Receipt:
        """With a summary's calls to charge to the next priced turn."""
        return replace(self, owed=self.owed + usd)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spent": self.spent,
            "summaries": self.summaries,
            "resend": self.resend,
            "turns": self.turns,
            "owed": self.owed,
            "last_tokens": self.last_tokens,
            "last_at": self.last_at,
            "ratio": self.ratio,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Receipt:
        return cls(**data) if data else cls()

    def shown(self) -> dict[str, float | int] | None:
        """What a user reads (the sessions API, the viewer): None before a priced turn."""
        if not self.turns:
            return None
        return {
            "turns": self.turns,
            "spent": round(self.spent, 9),
            "summaries": round(self.summaries, 9),
            "resend": round(self.resend, 9),
            "net": round(self.net, 9),
            "summaries_uncharged": round(self.owed, 9),
        }


def resend_cost(
    prices: Prices,
    conversation: int,
    output: int,
    previous: int,
    previous_at: float | None,
    now: float,
) -> float:
    """What sending the whole `conversation` (tokens) and getting `output` tokens back
    would cost, with the cache holding the `previous` turn's conversation if it was sent
    (at `previous_at`) within the cache's TTL of `now`."""
    cached = 0
    warm = previous_at is not None and now - previous_at <= prices.ttl_seconds
    if warm and prices.cache != "none":
        cached = min(previous, conversation)
        if prices.cache == "automatic":
            beyond = cached - AUTOMATIC_MIN_TOKENS
            cached = (
                0
                if beyond < 0
                else AUTOMATIC_MIN_TOKENS + beyond // AUTOMATIC_STEP * AUTOMATIC_STEP
            )
    new = prices.cache_write if prices.cache == "breakpoints" else prices.input
    return cached * prices.cache_read + (conversation - cached) * new + output * prices.output


def turn_cost(
    prices: Prices | None,
    usage: Usage | None,
    original: int,
    sent: int | None,
    summaries: float,
    receipt: Receipt,
    now: float,
) -> tuple[TurnCost | None, Receipt]:
    """A turn's money and the session's receipt after it. `original` is the proxy's
    count of the client's whole conversation, `sent` of what the proxy sent; `summaries`
    the summaries made for this turn (the receipt's `owed` is added). No price or no
    usage: no money figure (never a zero that looks measured), and the summaries stay
    owed; the conversation is remembered for the next turn's counterfactual either way.
    `sent` None: the conversation went whole, uncounted, so the provider's count is its."""
    measured = usage.prompt / sent if usage is not None and usage.prompt and sent else None
    whole = sent is not None and sent >= original  # nothing left out: what it counts is so
    if sent is None and usage is not None and usage.prompt:
        conversation = usage.prompt
    else:
        ratio = receipt.ratio if not whole and receipt.ratio else measured
        conversation = round(original * (ratio or 1.0))
    learned = measured if whole and measured else receipt.ratio
    after = replace(receipt, last_tokens=conversation, last_at=now, ratio=learned)
    if prices is None or usage is None:
        return None, after.owing(summaries)
    charged = summaries + receipt.owed
    spent = prices.cost(usage) + charged
    resend = resend_cost(
        prices, conversation, usage.output, receipt.last_tokens, receipt.last_at, now
    )
    cost = TurnCost(spent, charged, resend)
    after = replace(
        after,
        spent=receipt.spent + spent,
        summaries=receipt.summaries + charged,
        resend=receipt.resend + resend,
        turns=receipt.turns + 1,
        owed=0.0,
    )
    return cost, after
