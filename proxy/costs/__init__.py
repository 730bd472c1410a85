"""Money, as the provider bills it: a turn's usage in one shape whatever the door
(`usage`), what a model's tokens cost and how its prompt cache works (`prices`), and
the net saving of a session's turns against resending the whole conversation
(`receipts`). Pure: no I/O, no framework; prices are handed in by `proxy.upstream.limits`.
"""

from proxy.costs.prices import CacheStyle, Prices
from proxy.costs.usage import Usage, usage_of

__all__ = ["CacheStyle", "Prices", "Usage", "usage_of"]
