"""What a store raises for a turn's commit that its lapsed turn lock fences off."""

from __future__ import annotations

__all__ = ["LeaseLost"]


class LeaseLost(Exception):
    """A turn's commit, refused because its turn lock lapsed while it ran (its process
    stalled past the lease) and the session went on without it: another turn holds the
    lock now, or another turn was stored since. Nothing of it was applied."""
