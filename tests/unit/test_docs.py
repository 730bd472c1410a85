"""The README and `docs/` hang together: every relative link leads to a file of the
repository, every anchor (`page.md#heading`) to a heading of that page as GitHub names
it, and every repository path a page names in code (`proxy/engine/turn.py`) exists. A
page moved, a heading renamed or a module moved fails here, naming the file and line."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from tests.readme import ROOT, documents

_FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)
_REPO_PATH = re.compile(r"(?:proxy|tests|deploy|grafana|docs|\.ci)/[\w./-]*")


def _prose(text: str) -> str:
    """The page without its fenced blocks (blank lines in their place, so line numbers
    hold): a `# comment` in a block is no heading, a `[x](y)` in one no link."""
    return _FENCE.sub(lambda block: "\n" * block[0].count("\n"), text)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: its text lowercased, punctuation but `-`
    and `_` removed, spaces made hyphens."""
    text = _LINK.sub(lambda link: link[0][1 : link[0].index("](")], heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a page; a repeated heading's gets `-1`, `-2`, … as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    for match in _HEADING.finditer(_prose(path.read_text())):
        name = slug(match[2])
        found.add(f"{name}-{seen[name]}" if seen[name] else name)
        seen[name] += 1
    return found


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, offset) + 1}"


def test_the_documents_are_the_readme_and_every_page_of_docs() -> None:
    names = [path.relative_to(ROOT).as_posix() for path in documents()]
    assert names[0] == "README.md" and len(names) >= 7, names
    for page in ("clients", "memory", "configuration", "operations", "performance"):
        assert f"docs/{page}.md" in names, names
    assert "docs/development.md" in names and "docs/architecture.md" in names


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for path in documents():
        text = _prose(path.read_text())
        for link in _LINK.finditer(_CODE.sub(lambda code: " " * len(code[0]), text)):
            target = link[1]
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            page = (path.parent / file).resolve() if file else path
            if not page.is_relative_to(ROOT) or not page.exists():
                broken.append(f"{_where(path, text, link.start())}: {target}: no such file")
            elif anchor and (page.suffix != ".md" or anchor not in anchors(page)):
                broken.append(f"{_where(path, text, link.start())}: {target}: no such heading")
    assert not broken, "\n".join(broken)


def test_every_path_a_page_names_in_code_exists() -> None:
    """`proxy/…`, `tests/…`, `deploy/…`, `grafana/…`, `docs/…` and `.ci/…` in inline
    code are files or folders of the repository (the pages once named modules that a
    reorganisation had moved)."""
    missing = []
    for path in documents():
        text = _prose(path.read_text())
        for code in _CODE.finditer(text):
            for word in code[2].split():
                named = _REPO_PATH.fullmatch(word.strip(".,;:()"))
                if named and not (ROOT / named[0]).exists():
                    missing.append(f"{_where(path, text, code.start())}: {named[0]}")
    assert not missing, "\n".join(missing)


def test_slugs_are_githubs() -> None:
    assert slug("Nothing is lost: recall, facts and memory") == (
        "nothing-is-lost-recall-facts-and-memory"
    )
    assert slug("In the provider's own API") == "in-the-providers-own-api"
    assert slug("openai SDK, Responses API") == "openai-sdk-responses-api"
    assert slug("`overhead`") == "overhead"
    assert slug("A real model, locally") == "a-real-model-locally"
