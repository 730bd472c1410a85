"""The code blocks of the README and of `docs/*.md`, as a user would paste them.

Tests name a block by a piece of its text (`snippet("import anthropic")`), so the
documents need no markup, and `tests/integration/test_readme.py` checks that every
Python and shell block in any of them is named by exactly one test: a block that breaks
when pasted fails CI. A block is shown by its file and line (`docs/clients.md:170`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RUN = ("python", "sh")  # the languages whose blocks are run
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def documents() -> list[Path]:
    """The README, then every page of `docs/`, by name."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Snippet:
    language: str
    line: int  # of the opening fence, 1-based
    text: str
    path: Path = README

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT).as_posix()
        return f"{where}:{self.line} ({self.language}): {self.text.splitlines()[0]!r}"


def snippets(path: Path | None = None) -> list[Snippet]:
    """Every fenced block of one document, or of all of them, in order."""
    found: list[Snippet] = []
    for each in documents() if path is None else [path]:
        text = each.read_text()
        found += [
            Snippet(match[1], text.count("\n", 0, match.start()) + 1, match[2], each)
            for match in _FENCE.finditer(text)
        ]
    return found


def snippet(piece: str) -> Snippet:
    """The one block, in the README or `docs/`, whose text contains `piece`."""
    found = [s for s in snippets() if piece in s.text]
    assert len(found) == 1, f"{len(found)} blocks contain {piece!r}: {[str(s) for s in found]}"
    return found[0]


def on_port(text: str, port: int) -> str:
    """The block with the documents' port, 4000, replaced by `port` (the tests' own)."""
    return re.sub(r"(?<=127\.0\.0\.1:)4000\b|(?<=--port )4000\b", str(port), text)
