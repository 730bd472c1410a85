"""The cost benchmark's two sessions, generated from a seed (`tests/benchmarks/cost.py`).

- The agent: Claude-Code-shaped. A ~35k-token system prompt and 25 tool definitions;
  every turn a user message (the scorecard's statements: planted facts, updates,
  chatter, log pastes) and then the agent's work: file reads (whole files, numbered as
  Claude Code's Read shows them), test runs (pytest logs with failures), edits, greps,
  each a tool call and its result, then a short answer.
- The chat app: the same statements as short user turns, a few long pastes, short
  answers, no tools.

Both have idle gaps between turns, several longer than the prompt caches' 5 minutes,
and end with one probe per planted fact.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from tests.benchmarks import statements
from tests.benchmarks.statements import Planted

VOCABULARY = (  # noqa: SIM905
    "agent tool file edit test run change review branch commit diff patch module function "
    "class method argument value error warning output input request response session "
    "context budget window summary message token model cache prefix system user project "
    "repository directory path command shell terminal process signal timeout retry "
    "config setting option default behaviour policy rule instruction example format"
).split()
TOOL_NAMES = (  # noqa: SIM905
    "Read Write Edit MultiEdit Glob Grep Bash BashOutput KillShell LS NotebookRead "
    "NotebookEdit WebFetch WebSearch TodoWrite Task ExitPlanMode SlashCommand "
    "ListMcpResources ReadMcpResource AskUser Diagnostics Format Lint Coverage"
).split()
MODULES = [f"src/app/{area}/{part}.py" for area in statements.AREAS for part in ("api", "store")]


@dataclass(frozen=True)
class Action:
    """One tool call the model makes, and what the tool returns."""

    name: str
    arguments: dict[str, Any]
    result: str
    error: bool = False


@dataclass(frozen=True)
class Turn:
    user: str
    actions: tuple[Action, ...]
    answer: str
    idle: float  # seconds the session was idle before this turn


@dataclass
class Session:
    system: str
    tools: list[dict[str, Any]]  # in the Messages API's shape (`name`, `input_schema`)
    turns: list[Turn]
    facts: list[Planted]
    probes: list[Turn] = field(default_factory=list)


def _prose(rng: random.Random, words: int) -> str:
    sentences = []
    while words > 0:
        count = rng.randint(8, 20)
        words -= count
        sentence = " ".join(rng.choice(VOCABULARY) for _ in range(count))
        sentences.append(sentence[:1].upper() + sentence[1:] + ".")
    return " ".join(sentences)


def system_prompt(rng: random.Random, words: int) -> str:
    """An agent's long instructions: numbered sections of guidance."""
    sections = [
        f"## Section {n}: {rng.choice(VOCABULARY)} {rng.choice(VOCABULARY)}\n\n" + _prose(rng, 400)
        for n in range(words // 400)
    ]
    return "You are an interactive coding agent.\n\n" + "\n\n".join(sections)


def tool_definitions(rng: random.Random, words: int = 220) -> list[dict[str, Any]]:
    """25 tools with long descriptions and small schemas, as an agent declares them."""
    return [
        {
            "name": name,
            "description": _prose(rng, words),
            "input_schema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": _prose(rng, 12)},
                    "pattern": {"type": "string", "description": _prose(rng, 12)},
                    "command": {"type": "string", "description": _prose(rng, 12)},
                },
                "required": ["path"],
            },
        }
        for name in TOOL_NAMES
    ]


def source_file(path: str, version: int) -> str:
    """A file as Claude Code's Read returns it: numbered lines (its content is fixed by
    its path and how often it was edited)."""
    rng = random.Random(f"{path}:{version}")
    lines: list[str] = [f'"""{path}: {_prose(rng, 12)}"""', "", "import json", ""]
    for n in range(rng.randint(14, 32)):
        name = f"{rng.choice(VOCABULARY)}_{rng.choice(VOCABULARY)}_{n}"
        lines += [
            f"def {name}(request, {rng.choice(VOCABULARY)}=None):",
            f'    """{_prose(rng, 10)}"""',
            f"    value = request.get({rng.choice(VOCABULARY)!r}, {rng.randint(0, 999)})",
            f"    if value > {rng.randint(0, 999)}:",
            f"        raise ValueError({rng.choice(VOCABULARY)!r})",
            f"    return json.dumps({{'value': value, 'step': {n}}})",
            "",
        ]
    return "\n".join(f"{n + 1:6}\u2192{line}" for n, line in enumerate(lines))


def test_log(rng: random.Random, failures: int) -> str:
    """A pytest run: a line per test, then the failures' tracebacks and a summary."""
    tests = [
        f"tests/test_{rng.choice(VOCABULARY)}.py::test_{rng.choice(VOCABULARY)}_{n}"
        for n in range(rng.randint(60, 140))
    ]
    failed = set(rng.sample(tests, failures))
    out = ["============================= test session starts =============================="]
    out += [f"{t} {'FAILED' if t in failed else 'PASSED'}" for t in tests]
    for test in sorted(failed):
        module = rng.choice(MODULES)
        out += [
            f"________________________________ {test} ________________________________",
            f"    def {test.rsplit('::', 1)[1]}():",
            f">       assert handle(request) == {rng.randint(0, 99)}",
            f"E       AssertionError: assert {rng.randint(100, 999)} == {rng.randint(0, 99)}",
            f"{module}:{rng.randint(10, 200)}: AssertionError",
        ]
    out.append(f"==== {len(failed)} failed, {len(tests) - len(failed)} passed in 4.21s ====")
    return "\n".join(out)


def grep_output(rng: random.Random, pattern: str) -> str:
    return "\n".join(
        f"{rng.choice(MODULES)}:{rng.randint(1, 300)}:    {pattern}({rng.choice(VOCABULARY)})"
        for _ in range(rng.randint(5, 40))
    )


def actions(rng: random.Random, versions: dict[str, int]) -> tuple[Action, ...]:
    """The agent's work for one turn: none to four tool calls."""
    out = []
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4])):
        kind = rng.choices(["read", "test", "edit", "grep"], [35, 20, 25, 20])[0]
        path = rng.choice(MODULES)
        version = versions.get(path, 0)
        if kind == "read":
            out.append(Action("Read", {"file_path": path}, source_file(path, version)))
        elif kind == "test":
            failures = rng.choice([0, 0, 1, 2, 3])
            log = test_log(rng, failures)
            command = {"command": "pytest -q tests", "description": "Run the tests"}
            out.append(Action("Bash", command, log, error=failures > 0))
        elif kind == "edit":
            old = source_file(path, version).splitlines()[rng.randint(4, 12)].split("\u2192")[1]
            new = old + f"  # {rng.choice(VOCABULARY)}"
            arguments = {"file_path": path, "old_string": old, "new_string": new}
            versions[path] = version + 1
            out.append(Action("Edit", arguments, f"The file {path} has been updated."))
        else:
            pattern = f"{rng.choice(VOCABULARY)}_{rng.choice(VOCABULARY)}"
            arguments = {"pattern": pattern, "path": "src"}
            out.append(Action("Grep", arguments, grep_output(rng, pattern)))
    return tuple(out)


def idle(rng: random.Random, long_share: float) -> float:
    """Seconds between turns: mostly under a few minutes, now and then a long break."""
    if rng.random() < long_share:
        return rng.uniform(360, 2400)
    return rng.uniform(5, 60) if rng.random() < 0.8 else rng.uniform(60, 240)


def answer(rng: random.Random, words: int) -> str:
    return "Done. " + _prose(rng, words)


def agent_session(turns: int, facts: int, seed: int = 38, system_words: int = 23_500) -> Session:
    """The agent's session: `turns` turns with `facts` facts planted, then the probes."""
    rng = random.Random(seed)
    script = statements.generate(turns, seed, facts, max(1, facts // 8), max(2, facts // 10))
    versions: dict[str, int] = {}
    session = Session(
        system_prompt(rng, system_words),
        tool_definitions(rng),
        [
            Turn(text, actions(rng, versions), answer(rng, rng.randint(20, 120)), idle(rng, 0.04))
            for text in script.turns
        ],
        script.facts,
    )
    session.probes = [Turn(text, (), answer(rng, 20), idle(rng, 0)) for text in script.probes]
    return session


def chat_session(turns: int, facts: int, seed: int = 39) -> Session:
    """The chat app's session: short turns, a long paste now and then, no tools."""
    rng = random.Random(seed)
    script = statements.generate(turns, seed, facts, max(1, facts // 8), max(2, facts // 10))
    texts = list(script.turns)
    for at in range(37, turns, 61):  # a few long pastes: a document to discuss
        texts[at] += "\n\nHere is the document:\n\n" + _prose(rng, 2500)
    session = Session(
        "You are a helpful assistant in a chat app. Answer briefly.",
        [],
        [Turn(text, (), answer(rng, rng.randint(15, 90)), idle(rng, 0.03)) for text in texts],
        script.facts,
    )
    session.probes = [Turn(text, (), answer(rng, 20), idle(rng, 0)) for text in script.probes]
    return session


def tool_use_id(turn: int, step: int) -> str:
    return f"toolu_{turn:03d}_{step}"


def call(action: Action, turn: int, step: int) -> dict[str, Any]:
    """The action as the test upstream's `Reply.tool_calls` entry."""
    function = {"name": action.name, "arguments": json.dumps(action.arguments)}
    return {"id": tool_use_id(turn, step), "type": "function", "function": function}
