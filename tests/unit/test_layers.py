"""The package layout holds: each layer imports only the layers below it, no module
imports another in a cycle, and the pure core imports no framework
(`docs/architecture.md`)."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "proxy"

# Lowest first: a package may import its own modules and those of the packages above it
# in this list, never one below.
LAYERS = (
    "proxy.errors",
    "proxy.concurrency",
    "proxy.config",
    "proxy.conversation",
    "proxy.costs",
    "proxy.observability",
    "proxy.facts",
    "proxy.summary",
    "proxy.recall",
    "proxy.memory",
    "proxy.sessions",
    "proxy.upstream",
    "proxy.engine",
    "proxy.doors",
    "proxy.http",
    "proxy.cli",
)
# The pure core: no I/O framework, no LiteLLM, no store client.
PURE = (
    "proxy.conversation",
    "proxy.costs",
    "proxy.facts",
    "proxy.summary",
    "proxy.recall",
    "proxy.memory",
    "proxy.engine.planner",
)
FRAMEWORKS = ("starlette", "litellm", "httpx", "aiohttp", "redis", "diskcache", "uvicorn")


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports, wherever in the file (a function's import counts)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def layer(name: str) -> int | None:
    for rank, prefix in enumerate(LAYERS):
        if name == prefix or name.startswith(prefix + "."):
            return rank
    return None


MODULES = modules()
GRAPH = {
    name: {found for found in imports(name, path) if found in MODULES and found != name}
    for name, path in MODULES.items()
}


def test_every_module_has_a_layer() -> None:
    assert [name for name in MODULES if name != "proxy" and layer(name) is None] == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers(name: str) -> None:
    rank = layer(name)
    upward = sorted(
        found for found in GRAPH[name] if rank is not None and (layer(found) or 0) > rank
    )
    assert upward == [], f"{name} (layer {LAYERS[rank or 0]}) imports a layer above it"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith(PURE)))
def test_the_pure_core_imports_no_framework(name: str) -> None:
    """No I/O framework, and no metric, directly or through another module of ours: a
    pure function writes nothing, not even a count (the budget, the planner and a
    preview of a turn can run as often as wanted), and imports in milliseconds."""
    reached = closure(name)
    found = {f for module in reached for f in imports(module, MODULES[module])}
    assert sorted(f for f in found if f.split(".")[0] in FRAMEWORKS) == []
    assert "proxy.observability.metrics" not in reached


def closure(name: str) -> set[str]:
    """`name` and every module of ours it imports, directly or through another."""
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += GRAPH[current]
    return seen


def test_no_import_cycle() -> None:
    """Packages import each other's modules only downward, so a cycle could only be
    within a package: none there either."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for found in sorted(GRAPH[name]):
            if state.get(found) == 1:
                cycles.append([*stack[stack.index(found) :], found])
            elif found not in state:
                visit(found)
        stack.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert cycles == []


def near_synonyms(a: str, b: str) -> bool:
    """One name is the other with its ending changed: `memory`/`memories`,
    `summary`/`summarize`, `turns`/`turn_locks`."""
    common = len(os.path.commonprefix([a, b]))  # noqa: RUF071 - characters, not paths
    return a != b and common >= 4 and common >= min(len(a), len(b)) - 2


def test_no_two_module_names_differ_only_by_a_suffix() -> None:
    """Two modules anywhere in the tree: one concept, one name. (A door's package holds
    a `door` module, as `doors/` holds doors.)"""
    names = {name.rsplit(".", 1)[-1] for name, path in MODULES.items() if path.stem != "__init__"}
    assert sorted((a, b) for a in names for b in names if a < b and near_synonyms(a, b)) == []


def test_only_the_adapter_imports_litellm() -> None:
    """LiteLLM is behind one module (`proxy.upstream.adapter`), whose private parts
    `tests/integration/test_litellm_contract.py` pins."""
    importers = sorted(
        name
        for name, path in MODULES.items()
        if any(found.split(".")[0] == "litellm" for found in imports(name, path))
    )
    assert importers == ["proxy.upstream.adapter"]


def test_every_imported_package_is_declared() -> None:
    """What the proxy imports is in pyproject.toml's dependencies, pinned: a package that
    arrives only because another depends on it can leave with that one's next release."""
    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["project"]
    declared = {_normal(re.split(r"[=<>\[;]", r, maxsplit=1)[0]) for r in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    imported = {
        found.split(".")[0]
        for name, path in MODULES.items()
        for found in imports(name, path)
        if found.split(".")[0] not in (*sys.stdlib_module_names, "proxy", "__future__", "")
    }
    missing = {
        top: distributions.get(top)
        for top in imported
        if not {_normal(d) for d in distributions.get(top, [top])} & declared
    }
    assert missing == {}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_code_points_into_the_repository_never_outside_it() -> None:
    """Docstrings and comments name documents of this repository that exist."""
    for name, path in MODULES.items():
        text = path.read_text()
        assert "DESIGN" not in text, f"{name} cites a document the repository does not have"
        for document in re.findall(r"docs/[\w./-]+\.md", text):
            assert (ROOT.parent / document).is_file(), f"{name} cites {document}"


def test_the_architecture_page_draws_the_layers_in_order() -> None:
    """docs/architecture.md's package table lists the layers as this test enforces them."""
    page = (ROOT.parent / "docs" / "architecture.md").read_text()
    section = page.split("## Packages", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w/.]+)` \|", section, flags=re.MULTILINE)
    drawn = ["proxy." + row.removeprefix("proxy/").removesuffix(".py").strip("/") for row in rows]
    assert drawn == list(LAYERS)


def test_outside_the_engine_only_its_public_surface_is_imported() -> None:
    """A door or the HTTP app imports `proxy.engine` (what its `__all__` names), never a
    module inside it: the engine's cuts can move without touching them."""
    reaching_in = sorted(
        f"{name} -> {found}"
        for name, found_set in GRAPH.items()
        if not name.startswith("proxy.engine")
        for found in found_set
        if found.startswith("proxy.engine.")
    )
    assert reaching_in == []


# The engine's parts, and the parts each may import (its own included): the planner is
# pure and stands alone; the session view (the request, its history and totals, the
# plan over them) stands on it; folds, and recall with memory, stand on both and not on
# each other; only the turn (the orchestration) wires them all.
ENGINE_PARTS = {
    "planner": ("proxy.engine.planner",),
    "session": (
        "proxy.engine.types",
        "proxy.engine.totals",
        "proxy.engine.history",
        "proxy.engine.planning",
        "proxy.engine.intake",
    ),
    "folds": ("proxy.engine.folds",),
    "recall": ("proxy.engine.archive", "proxy.engine.yielding", "proxy.engine.remembering"),
    "turn": (
        "proxy.engine.turn",
        "proxy.engine.commit",
        "proxy.engine.hooks",
        "proxy.engine.events",
        "proxy.engine.records",
        "proxy.engine.wiring",
        "proxy.engine.preview",
    ),
}
ENGINE_MAY_IMPORT = {
    "planner": {"planner"},
    "session": {"planner", "session"},
    "folds": {"planner", "session", "folds"},
    "recall": {"planner", "session", "recall"},
    "turn": set(ENGINE_PARTS),
}


def engine_part(name: str) -> str | None:
    for part, prefixes in ENGINE_PARTS.items():
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return part
    return None


def test_every_engine_module_is_in_one_part() -> None:
    inside = [n for n in MODULES if n.startswith("proxy.engine.")]
    assert [n for n in inside if engine_part(n) is None] == []


def test_the_engine_parts_import_only_what_they_stand_on() -> None:
    """Planner <- session <- (folds | recall and memory) <- turn: a one-way flow, which
    only the turn knows the order of."""
    crossing = sorted(
        f"{name} ({engine_part(name)}) -> {found} ({engine_part(found)})"
        for name, found_set in GRAPH.items()
        if engine_part(name) is not None
        for found in found_set
        if engine_part(found) is not None
        and engine_part(found) not in ENGINE_MAY_IMPORT[engine_part(name) or ""]
    )
    assert crossing == []


def declared(path: Path) -> list[str] | None:
    """The names a module's `__all__` lists (None: it has none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return None


def test_every_module_and_package_names_what_it_offers() -> None:
    """Each module says what is its public surface (`__all__`), and each package's names
    are there: a submodule, or a name its `__init__` binds (ruff checks modules')."""
    unnamed = sorted(name for name, path in MODULES.items() if declared(path) is None)
    assert unnamed == ["proxy.cli.__main__"] or unnamed == []
    missing = []
    for name, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        body = ast.parse(path.read_text()).body
        bound = (
            {
                alias.asname or alias.name
                for node in body
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
            }
            | {
                node.name
                for node in body
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            }
            | {"__version__"}
        )
        for offered in declared(path) or []:
            if offered not in bound and f"{name}.{offered}" not in MODULES:
                missing.append(f"{name}: {offered}")
    assert missing == []
