"""The keys a request body holds that change what the proxy does with it (cache marks,
images, item references), counted in its bytes at C speed.

Each is found by a search of the whole body, a pass over 1.4 MB at 5,000 messages; but
the counts of stretches split between JSON values add up to the body's, so a resent
body is counted from where it is new (`proxy.http.resends`) and nothing searches it
whole again. A key can be spelled otherwise only with a `\\u00XX` escape of a printable
ASCII character: where a stretch holds one its counts are unknown (None), and each
reader looks the way it would without them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Needles", "needles_in"]

# A `\u00XX` escape of a printable ASCII character: the only way JSON can spell one of the
# keys other than as itself.
_ASCII_ESCAPE = re.compile(rb"\\u00[2-7][0-9a-fA-F]")


@dataclass(frozen=True, slots=True)
class Needles:
    """How often a body (or a stretch of it) names each key, as its bytes spell it."""

    marks: int  # `"cache_control"`: Anthropic's cache marks
    images: int  # `"image_url"`: image parts, which a token bound counts on their own
    references: int  # `"item_reference"`: Responses items that name a stored reply

    def __add__(self, other: Needles) -> Needles:
        return Needles(
            self.marks + other.marks,
            self.images + other.images,
            self.references + other.references,
        )


def needles_in(body: bytes, start: int = 0, end: int | None = None) -> Needles | None:
    """The keys in body[start:end]; None where an escape could spell one otherwise."""
    end = len(body) if end is None else end
    if _ASCII_ESCAPE.search(body, start, end) is not None:
        return None
    return Needles(
        body.count(b'"cache_control"', start, end),
        body.count(b'"image_url"', start, end),
        body.count(b'"item_reference"', start, end),
    )
