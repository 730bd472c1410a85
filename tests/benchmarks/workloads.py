"""The cost benchmark's three sessions, generated from a seed (`tests/benchmarks/cost.py`).

- The agent: Claude-Code-shaped. A ~35k-token system prompt and 25 tool definitions;
  every turn a user message (the scorecard's statements: planted facts, updates,
  chatter, log pastes) and then the agent's work: file reads (whole files, numbered as
  Claude Code's Read shows them), test runs (pytest logs with failures), edits, greps,
  each a tool call and its result, then a short answer.
- The chat app: the same statements as short user turns, a few long pastes, short
  answers, no tools.
- The Codex session: the agent's session (the same statements, work, answers and idle
  gaps) as Codex does that work: its instructions, its initial context (permissions,
  AGENTS.md, environment) and function tools in the Responses API's shape, reads and
  test runs and greps through `shell`, edits through `apply_patch`.

All have idle gaps between turns, several longer than the prompt caches' 5 minutes,
and end with one probe per planted fact.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
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
    system: str  # the system prompt (Codex: its `instructions`)
    # in the API's shape: Messages (`name`, `input_schema`), Responses (`type`, `parameters`)
    tools: list[dict[str, Any]]
    turns: list[Turn]
    facts: list[Planted]
    probes: list[Turn] = field(default_factory=list)
    context: list[dict[str, Any]] = field(default_factory=list)  # Codex's initial input items


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


def call(
    action: Action, turn: int, step: int, ident: Callable[[int, int], str] = tool_use_id
) -> dict[str, Any]:
    """The action as the test upstream's `Reply.tool_calls` entry (`ident` names the call
    as its client's provider does: `toolu_…` for Anthropic, `call_…` for OpenAI)."""
    function = {"name": action.name, "arguments": json.dumps(action.arguments)}
    return {"id": ident(turn, step), "type": "function", "function": function}


CODEX_OPENING = (
    "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI on a"
    " user's computer."
)
CODEX_CWD = "/home/user/project"


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    """A function tool in the Responses API's shape, as Codex declares its tools."""
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "name": name,
        "description": description,
        "strict": False,
        "parameters": parameters,
    }


def codex_tools(rng: random.Random) -> list[dict[str, Any]]:
    """Codex's function tools (shell, apply_patch, update_plan, view_image), shaped as
    codex-rs declares them; apply_patch's long grammar is prose of its length."""
    string = {"type": "string"}
    return [
        _function(
            "shell",
            "Runs a shell command and returns its output.",
            {
                "command": {
                    "type": "array",
                    "items": string,
                    "description": "The command to execute",
                },
                "workdir": {**string, "description": "The working directory to run it in"},
                "timeout_ms": {"type": "number", "description": "The timeout in milliseconds"},
                "with_escalated_permissions": {
                    "type": "boolean",
                    "description": "Whether to request escalated permissions.",
                },
                "justification": {**string, "description": "Why escalation is needed."},
            },
            ["command"],
        ),
        _function(
            "apply_patch",
            "Use the `apply_patch` tool to edit files. " + _prose(rng, 700),
            {"input": {**string, "description": "The entire contents of the apply_patch command"}},
            ["input"],
        ),
        _function(
            "update_plan",
            "Updates the task plan. Provide an optional explanation and a list of plan items,"
            " each with a step and status. At most one step can be in_progress at a time.",
            {
                "explanation": string,
                "plan": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"step": string, "status": string},
                        "required": ["step", "status"],
                        "additionalProperties": False,
                    },
                },
            },
            ["plan"],
        ),
        _function(
            "view_image",
            "Attach a local image (by filesystem path) to the conversation context for this turn.",
            {"path": {**string, "description": "Local filesystem path to an image file"}},
            ["path"],
        ),
    ]


def _said(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def codex_context(rng: random.Random, words: int = 1200) -> list[dict[str, Any]]:
    """Codex's initial context, the input items it opens every conversation with: its
    permissions (a developer message), the project's AGENTS.md and the environment."""
    permissions = (
        "<permissions instructions>Filesystem sandboxing: workspace-write. Network access is"
        " restricted. Approval policy: on-request.</permissions instructions>"
    )
    agents = (
        f"# AGENTS.md instructions for {CODEX_CWD}\n\n<INSTRUCTIONS>\n{_prose(rng, words)}"
        "\n</INSTRUCTIONS>"
    )
    environment = (
        f"<environment_context>\n  <cwd>{CODEX_CWD}</cwd>\n  <approval_policy>on-request"
        "</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>"
        "restricted</network_access>\n  <shell>bash</shell>\n</environment_context>"
    )
    return [_said("developer", permissions), _said("user", agents), _said("user", environment)]


def _executed(output: str, failed: bool) -> str:
    """A shell call's output as Codex shows it to the model."""
    return f"Exit code: {1 if failed else 0}\nWall time: 0.4 seconds\nOutput:\n{output}"


def codex_action(action: Action) -> Action:
    """One of the agent's actions as Codex takes it: a read is `sed`, a test run and a grep
    are shell commands, an edit is a patch."""
    arguments = action.arguments
    if action.name == "Edit":
        path = arguments["file_path"]
        patch = (
            f"*** Begin Patch\n*** Update File: {path}\n@@\n-{arguments['old_string']}\n"
            f"+{arguments['new_string']}\n*** End Patch\n"
        )
        done = f"Success. Updated the following files:\nM {path}\n"
        return Action("apply_patch", {"input": patch}, done)
    if action.name == "Read":
        command = f"sed -n '1,400p' {arguments['file_path']}"
        lines = (line.split("\u2192", 1)[-1] for line in action.result.splitlines())
        output = "\n".join(lines)
    elif action.name == "Grep":
        command = f"rg -n {arguments['pattern']} {arguments['path']}"
        output = action.result
    else:
        command, output = arguments["command"], action.result
    shell = {"command": ["bash", "-lc", command], "workdir": CODEX_CWD, "timeout_ms": 120000}
    return Action("shell", shell, _executed(output, action.error), action.error)


def codex_session(turns: int, facts: int, seed: int = 38, words: int = 3000) -> Session:
    """The agent's session (`agent_session` of the same seed: its statements, work,
    answers, idle gaps and probes) as a Codex session."""
    agent = agent_session(turns, facts, seed)
    rng = random.Random(f"codex:{seed}")
    instructions = system_prompt(rng, words).replace(
        "You are an interactive coding agent.", CODEX_OPENING, 1
    )
    tools = codex_tools(rng)
    worked = [
        Turn(t.user, tuple(map(codex_action, t.actions)), t.answer, t.idle) for t in agent.turns
    ]
    return Session(instructions, tools, worked, agent.facts, agent.probes, codex_context(rng))


def codex_call_id(turn: int, step: int) -> str:
    return f"call_{turn:03d}_{step}"
