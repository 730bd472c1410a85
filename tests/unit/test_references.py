"""Prose is drawn from the code: every module, package and class docs/architecture.md
names in backquotes exists, and so does every member our docstrings and comments name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROXY = ROOT / "proxy"
DOC = ROOT / "docs" / "architecture.md"
PATHS = {p.relative_to(PROXY).as_posix() for p in PROXY.rglob("*") if "__pycache__" not in p.parts}
TREES = {path: ast.parse(path.read_text()) for path in PROXY.rglob("*.py")}


def named() -> list[str]:
    return sorted(set(re.findall(r"`([^`\s]+)`", DOC.read_text())))


def _classes() -> dict[str, set[str]]:
    """Each class of ours and the names defined in it (methods, fields, `self.` ones)."""
    found: dict[str, set[str]] = {}
    for tree in TREES.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                members = found.setdefault(node.name, set())
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        members.add(inner.name)
                    elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                        members.add(inner.target.id)
                    elif isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name):
                        members.add(inner.attr)
    return found


def _identifiers() -> set[str]:
    """The attributes our code sets or reads and the strings it holds (a setting, a key,
    an event's type): what a lowercase name in the map may be besides a module."""
    found: set[str] = set()
    for tree in TREES.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


CLASSES, IDENTIFIERS = _classes(), _identifiers()
TOOLS = {"mypy", "ruff", "pytest"}  # named as the tools the project runs
STEMS = {Path(p).stem for p in PATHS} | {Path(p).name for p in PATHS}


def exists(token: str) -> bool:
    """What a backquoted token names is in the tree (a token that names no code, such as
    a command line or an HTTP route, is not checked)."""
    if token.startswith(("/", "GET", "POST")) or "-" in token or "*" in token or "[" in token:
        return True  # a route, a command, a pattern: not code
    if token.startswith("tests/"):
        return (ROOT / token).exists()
    if "/" in token or token.endswith(".py"):
        path = token.removeprefix("proxy/").rstrip("/")
        return any(
            p in (path, path + ".py") or p.endswith(("/" + path, f"/{path}.py")) for p in PATHS
        )
    if token.startswith("proxy."):
        return (PROXY.parent / token.replace(".", "/")).with_suffix(".py").exists() or (
            PROXY.parent / token.replace(".", "/")
        ).is_dir()
    owner, _, member = token.partition(".")
    if owner[:1].isupper():
        return owner in CLASSES and (not member or member in CLASSES[owner])
    return token in STEMS or token in IDENTIFIERS or token in TOOLS


def test_every_module_and_class_the_architecture_names_exists() -> None:
    assert [token for token in named() if not exists(token)] == []


def test_every_member_a_docstring_or_comment_names_exists() -> None:
    """A backquoted `Class.member` in our code's prose names a member that is there: a
    docstring that points at code since renamed or deleted misleads its next reader."""
    named_in_code = {
        f"{path.relative_to(PROXY)}: {token}"
        for path in TREES
        for token in re.findall(r"`([A-Z]\w+\.\w+)`", path.read_text())
        if token.split(".")[0] in CLASSES and not exists(token)
    }
    assert sorted(named_in_code) == []


def test_no_prose_names_another_modules_private_code() -> None:
    """A private name is its module's own: prose elsewhere that names one
    (`Totals._bounded` from the summaries made ahead) is out of date at its next rename."""
    defined = {
        path: {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for path, tree in TREES.items()
    }
    elsewhere = sorted(
        f"{path.relative_to(PROXY)}: {token}"
        for path in TREES
        for token in re.findall(r"`([A-Z]\w+)\._\w+`", path.read_text())
        if token not in defined[path]
    )
    assert elsewhere == []


def test_no_prose_names_a_private_function_of_another_module() -> None:
    """`proxy.x.y._name` in prose must be a private name of the module it sits in."""
    elsewhere = []
    for path in TREES:
        here = "proxy." + ".".join(path.relative_to(PROXY).with_suffix("").parts)
        for module, _ in re.findall(r"`(proxy(?:\.\w+)+)\.(_\w+)`", path.read_text()):
            if module != here:
                elsewhere.append(f"{path.relative_to(PROXY)}: {module}")
    assert sorted(elsewhere) == []
