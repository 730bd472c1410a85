"""The README's code blocks, as a user would paste them.

Tests name a block by a piece of its text (`snippet("import anthropic")`), so the README
needs no markup, and `tests/integration/test_readme.py` checks that every Python and shell
block is named by exactly one test: a block that breaks when pasted fails CI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
RUN = ("python", "sh")  # the languages whose blocks are run
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Snippet:
    language: str
    line: int  # of the opening fence, 1-based
    text: str

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.language}): {self.text.splitlines()[0]!r}"


def snippets(text: str | None = None) -> list[Snippet]:
    """Every fenced block of the README, in order."""
    text = README.read_text() if text is None else text
    return [
        Snippet(match[1], text.count("\n", 0, match.start()) + 1, match[2])
        for match in _FENCE.finditer(text)
    ]


def snippet(piece: str) -> Snippet:
    """The one block whose text contains `piece`."""
    found = [s for s in snippets() if piece in s.text]
    assert len(found) == 1, f"{len(found)} README blocks contain {piece!r}"
    return found[0]


def on_port(text: str, port: int) -> str:
    """The block with the README's port, 4000, replaced by `port` (the tests' own)."""
    return re.sub(r"(?<=127\.0\.0\.1:)4000\b|(?<=--port )4000\b", str(port), text)
