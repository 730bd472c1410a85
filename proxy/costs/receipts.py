"""The net saving of a session's turns: what resending the client's whole conversation
would have cost on the same model with its prompt cache, minus what the proxy spent.

The counterfactual client resends its whole conversation each turn. Its provider's cache
holds the previous turn's whole conversation if that was sent within the cache's TTL
(and, for an automatic cache, was at least 1,024 tokens long; it is read in 128-token
steps beyond that, as OpenAI's is): that part is priced as a
cache read, the rest as new input (at the cache-write price where the cache has
breakpoints, as a client that marks them writes it), and the reply at the output price.
What the proxy spent is the turn at its reported usage plus the summaries charged to it.
Both sides are in the provider's tokens. A turn that sent its conversation whole is
counted as the provider counted it. A folded turn's conversation is the latest whole
turn's, in the provider's tokens, plus what the conversation grew since at the rate the
provider counted growth between whole turns: a folded prompt, system and summary for the
most part, is counted unlike the messages it left out, and so is a conversation's start
(system and tools) unlike what it grows by. Before two whole turns measured growth, the
latest whole turn's ratio scales the whole conversation (before any, this turn's own).
The net may be negative: then the proxy cost more than resending would have.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from proxy.costs.prices import AUTOMATIC_MIN_TOKENS, AUTOMATIC_STEP, Prices
from proxy.costs.usage import Usage

__all__ = ["Receipt", "TurnCost", "resend_cost", "turn_cost"]

# Growth between whole turns (proxy tokens) below which its rate is not trusted: a few
# short messages count mostly their framing.
GROWTH_MEASURED = 1_000


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
    whole: tuple[int, int] | None = None
    """The latest whole turn's conversation: the proxy's count and the provider's."""
    growth: tuple[int, int] = (0, 0)
    """What the conversation grew between whole turns, in the proxy's count and the
    provider's: the rate at which a folded turn's growth since `whole` is counted."""

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
            "whole": self.whole,
            "growth": self.growth,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Receipt:
        if not data:
            return cls()
        whole, growth = data.get("whole"), data.get("growth")
        pairs = {"whole": tuple(whole) if whole else None, "growth": tuple(growth or (0, 0))}
        return cls(**(data | pairs))

    def conversation(self, original: int) -> int | None:
        """A folded turn's `original` conversation in the provider's tokens, from the
        latest whole turn and the rate growth was counted at (None: not measured yet)."""
        grown, counted = self.growth
        if self.whole is None or grown < GROWTH_MEASURED:
            return None
        tokens, provider = self.whole
        return max(round(provider + (original - tokens) * counted / grown), 0)

    def counted_whole(self, original: int, conversation: int) -> Receipt:
        """After a whole turn of `original` tokens the provider counted as `conversation`."""
        growth = self.growth
        if self.whole is not None and original > self.whole[0]:
            tokens, provider = self.whole
            growth = (growth[0] + original - tokens, growth[1] + conversation - provider)
        return replace(self, whole=(original, conversation), growth=growth)

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
    grown = None if whole else receipt.conversation(original)
    if sent is None and usage is not None and usage.prompt:
        conversation = usage.prompt
    elif grown is not None:
        conversation = grown
    else:
        ratio = receipt.ratio if not whole and receipt.ratio else measured
        conversation = round(original * (ratio or 1.0))
    learned = measured if whole and measured else receipt.ratio
    after = replace(receipt, last_tokens=conversation, last_at=now, ratio=learned)
    if whole and measured:
        after = after.counted_whole(original, conversation)
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
