"""The snippets of the README and of `docs/` work when pasted: every Python and shell
block is run, as written, against the loopback test upstream: here, or by the test of
what it sets up (the Claude Code and Codex setups with the real agents in
`test_agents.py`, the other clients' in `test_python_clients.py` and
`test_node_clients.py`, the benchmark command in `tests/benchmarks/test_harness.py`).

The README's own config file and serve command start the proxy (`OPENAI_BASE_URL` and
`ANTHROPIC_BASE_URL` point LiteLLM at the test upstream; the key the serve command
generates is read from the proxy's environment), and every client block then runs as a
script of its own. Only the port is changed, 4000 to a free one. One program does not
exist here and is stood in for, checking what the real one would need: `docker` (no
Docker engine runs on this machine: it checks that the compose file's required
variables are set and that the proxy's config loads with them). The test command is
the one block not run by a test: `.ci/run` runs it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from proxy.cli.local import held_port
from tests.readme import RUN, Snippet, on_port, snippet, snippets
from tests.servers import DEPLOY_PYTHON, guarded_env, wait_ready
from tests.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"
SESSION = "support-ticket-4711"

# Claude Code, for what the README's block gives it: its base URL, its bearer token, its
# model and its extra headers ("Name: value" lines).
# `docker compose -f FILE up -d --build`, up to where an engine would take over: every
# `${NAME:?…}` the compose file requires is set, and the proxy's config loads with them.
DOCKER_STAND_IN = r"""
    import os, re, sys
    from pathlib import Path
    from proxy.config.settings import load_settings

    assert sys.argv[1:3] == ["compose", "-f"] and sys.argv[4:] == ["up", "-d", "--build"]
    compose = Path(sys.argv[3])
    required = re.findall(r"\$\{(\w+):\?", compose.read_text())
    missing = [name for name in required if not os.environ.get(name)]
    assert required and not missing, f"not set: {missing}"
    load_settings(compose.parent / "config.yaml", environ=dict(os.environ))
    print("checked", " ".join(sorted(set(required))))
"""


@dataclass
class Quickstart:
    """The proxy as the README starts it, and what a client of it needs."""

    url: str
    port: int
    key: str
    directory: Path
    upstream: FakeUpstream

    def run(self, found: Snippet, stdin: str = "", path: Path | None = None) -> str:
        """Runs a README block (Python or shell) against this proxy; returns its stdout."""
        text = on_port(found.text, self.port)
        env = self.client_env(path)
        if found.language == "python":
            command = [str(VENV / "bin" / "python"), "-c", text]
        else:
            command = ["bash", "-euo", "pipefail", "-c", text]
        done = subprocess.run(
            command,
            cwd=self.directory,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{found}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def client_env(self, path: Path | None = None) -> dict[str, str]:
        env = {**os.environ, "PROXY_API_KEY": self.key}
        if path is not None:
            env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
        return env

    def session(self, session_id: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.get(f"{self.url}/v1/sessions/{session_id}", headers=headers, timeout=10)


def _process_tree(pid: int) -> Iterator[int]:
    yield pid
    for task in Path(f"/proc/{pid}/task").glob("*"):
        children = (task / "children").read_text().split()
        for child in children:
            yield from _process_tree(int(child))


def _environment_value(pid: int, name: str) -> str | None:
    """`name` as the process `pid` or one of its children sees it (Linux)."""
    prefix = f"{name}=".encode()
    for each in _process_tree(pid):
        try:
            entries = Path(f"/proc/{each}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in entries:
            if entry.startswith(prefix):
                return entry[len(prefix) :].decode()
    return None


@pytest.fixture(scope="module")
def quickstart(
    _shared_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Quickstart]:
    """The README's config.yaml and serve command, in a directory of their own."""
    directory = tmp_path_factory.mktemp("readme")
    (directory / "config.yaml").write_text(snippet("# config.yaml").text)
    (directory / ".venv").symlink_to(DEPLOY_PYTHON.parents[1])  # the proxy as users install it
    netlog = directory / "net.log"
    env = guarded_env(netlog) | {
        "OPENAI_BASE_URL": _shared_upstream.base_url,
        "ANTHROPIC_BASE_URL": _shared_upstream.base_url.removesuffix("/v1"),
    }
    with held_port() as port:
        serve = on_port(snippet("--config config.yaml --port 4000").text, port)
        assert f"--port {port}" in serve
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", serve],
            cwd=directory,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, limit=60)
        key = _environment_value(process.pid, "PROXY_API_KEY")
        assert key and re.fullmatch(r"[0-9a-f]{64}", key), "the serve block sets no key"
        yield Quickstart(url, port, key, directory, _shared_upstream)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    attempts = netlog.read_text() if netlog.exists() else ""
    assert attempts == "", f"the proxy tried to reach the network:\n{attempts}"
    assert b"Traceback" not in output, output.decode()[-3000:]


# --- every block is run ---------------------------------------------------------------


def test_every_python_and_shell_block_is_run_by_a_test() -> None:
    """Each block of the README and of every page of `docs/` is named by exactly one
    `snippet("…")` in the tests, except the test command, which `.ci/run` runs (the
    README's block after `<!-- test-command -->`). A block that is not is named by its
    file and line."""
    named = {
        node.args[0].value
        for path in (ROOT / "tests").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "snippet"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    readme = (ROOT / "README.md").read_text()
    assert "<!-- test-command -->" in (ROOT / ".ci" / "run").read_text()
    test_command = readme.split("<!-- test-command -->\n```sh\n", 1)[1].split("```", 1)[0]
    run = [block for block in snippets() if block.language in RUN]
    assert len(run) >= 12, run
    assert {block.path.name for block in run} >= {"README.md", "clients.md", "operations.md"}
    for block in run:
        if block.text == test_command:
            continue
        names = [name for name in named if name in block.text]
        assert len(names) == 1, f"{block} is run by {len(names)} tests: {names}"


def test_the_test_command_installs_everything_through_one_script() -> None:
    """The test command builds llama.cpp the way `.ci/run` does, because it is the same
    script: `.ci/run` runs the README's line and sets no build flags of its own."""
    command = snippet("sh tests/install.sh").text
    assert command.strip() == "sh tests/install.sh && .venv/bin/python -m pytest"
    script = (ROOT / "tests" / "install.sh").read_text()
    assert "-DGGML_NATIVE=OFF" in script and "CMAKE_ARGS" not in (ROOT / ".ci/run").read_text()
    assert "--require-hashes -r tests/pip.lock" in script.split("tests/requirements.lock")[0]


# --- Quick start and the openai SDK (README.md, docs/clients.md) -----------------------


def test_install_and_run_command(tmp_path: Path, _shared_upstream: FakeUpstream) -> None:
    """The first line of the README, pasted in a fresh copy of the checkout: it installs
    the proxy alone from its lock and serves a provider-prefixed model with no config."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in tracked)):
        if (ROOT / name).is_file():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp_path / name)
    line = snippet("-r deploy/requirements.lock").text
    with held_port() as port:
        env = {
            **os.environ,
            "CONTEXT_PROXY_SERVER_PORT": str(port),
            "OPENAI_BASE_URL": _shared_upstream.base_url,
            "OPENAI_API_KEY": "sk-from-the-environment",
        }
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", line],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, limit=600)
        reply = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "echo: hi"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=30)
    # The proxy it installed is the copy's own, from the runtime lock alone.
    assert (tmp_path / ".venv" / "bin" / "context-proxy").is_file()
    assert not (tmp_path / ".venv" / "bin" / "pytest").exists()


def test_chat_block(quickstart: Quickstart, upstream: FakeUpstream) -> None:
    out = quickstart.run(snippet("print(reply.choices[0].message.content)"))
    assert out.startswith("echo: Hello!\n"), out
    assert out.endswith("echo: Count to five."), out
    sent = [r.body for r in upstream.requests]
    assert [body["messages"][-1]["content"] for body in sent] == ["Hello!", "Count to five."]
    assert sent[1]["stream"] is True


def test_session_block(quickstart: Quickstart, upstream: FakeUpstream) -> None:
    """The session loop, one turn per line typed: the proxy keeps the conversation and
    says what it sent in its response headers."""
    out = quickstart.run(snippet("for line in sys.stdin"), stdin="I am Ada.\nWho am I?\n")
    lines = out.splitlines()
    assert re.fullmatch(r"none \d+", lines[0]) and lines[1] == "echo: I am Ada.", out
    assert re.fullmatch(r"none \d+", lines[2]) and lines[3] == "echo: Who am I?", out
    contents = [m["content"] for m in upstream.requests[-1].body["messages"]]
    assert contents == ["You are a support agent.", "I am Ada.", "echo: I am Ada.", "Who am I?"]
    stored = quickstart.session(SESSION).json()
    assert stored["messages"][-1] == {"role": "assistant", "content": "echo: Who am I?"}, stored


# --- Anthropic Messages and OpenAI Responses (docs/clients.md) -------------------------


def test_anthropic_block(quickstart: Quickstart, upstream: FakeUpstream) -> None:
    out = quickstart.run(snippet("import anthropic"))
    assert "TextBlock" in out and "echo: Count to five." in out, out
    assert re.fullmatch(r"\d+", out.splitlines()[-1]) and int(out.splitlines()[-1]) > 0, out
    # claude-sonnet is an anthropic/ deployment: LiteLLM spoke the Messages API upstream.
    assert len(upstream.messages_requests()) == 2
    assert upstream.messages_requests()[0].body["model"] == "claude-sonnet-4-5"


def test_responses_block(quickstart: Quickstart, upstream: FakeUpstream) -> None:
    out = quickstart.run(snippet("client.responses.create("))
    events = out.split()
    assert events[0] == "response.created" and events[-1] == "response.completed", out
    # The second turn continued the first by its id: the upstream saw both turns (and, as
    # in OpenAI's API, the first turn's instructions do not carry over).
    contents = [m["content"] for m in upstream.requests[1].body["messages"]]
    assert contents == ["I am Ada.", "echo: I am Ada.", "Who am I?"], contents


# --- Sessions, deployment, a real model (docs/operations.md); locks (docs/development.md)


def test_sessions_api_block(quickstart: Quickstart) -> None:
    """The curl calls, on a session the session block's client made."""
    quickstart.run(snippet("for line in sys.stdin"), stdin="Hello.\n")
    out = quickstart.run(snippet('curl -H "$auth"'))
    listed, shown, preview, deleted = (json.loads(part) for part in _json_documents(out))
    assert SESSION in [s["id"] for s in listed["data"]], listed
    assert shown["id"] == SESSION and shown["messages"][-1]["content"] == "echo: Hello.", shown
    assert preview["model"] == "gpt-4o-mini" and preview["budget"] > 0, preview
    assert deleted.get("deleted") is True, deleted
    assert quickstart.session(SESSION).status_code == 404


def test_sessions_cli_block(quickstart: Quickstart) -> None:
    """`context-proxy sessions` list, show and delete, on a session the session block's
    client made."""
    quickstart.run(snippet("for line in sys.stdin"), stdin="Hello.\n")
    out = quickstart.run(snippet("context-proxy sessions list"), path=VENV / "bin")
    assert re.search(rf"^{SESSION} +\S+ +2 ", out, re.MULTILINE), out  # listed: 2 messages
    assert f"session   {SESSION}" in out and "messages  2, summaries 0" in out, out
    assert re.search(r"^ +\d+ none +\d+ +\d+ +0  system \d+, window \d+$", out, re.MULTILINE), out
    assert out.endswith(f"deleted {SESSION}\n"), out
    assert quickstart.session(SESSION).status_code == 404


def _json_documents(text: str) -> list[str]:
    """Concatenated JSON documents (curl prints no newline between them)."""
    decoder, found, position = json.JSONDecoder(), [], 0
    while position < len(text):
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            break
        document, end = decoder.raw_decode(text, position)
        found.append(json.dumps(document))
        position = end
    return found


def test_docker_compose_block(quickstart: Quickstart, tmp_path: Path) -> None:
    """No Docker engine runs here: `docker` is a stand-in that checks what `up` would
    need first, that every variable the compose file requires is set and non-empty and
    that the proxy's config (deploy/config.yaml) loads with them."""
    _executable(tmp_path / "docker", DOCKER_STAND_IN)
    directory = quickstart.directory / "compose"
    shutil.copytree(ROOT / "deploy", directory / "deploy")
    found = snippet("docker compose -f")
    env = quickstart.client_env(tmp_path)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", found.text],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [
        "checked",
        "CONTEXT_PROXY_SESSION_TENANT_SECRET",
        "OPENAI_API_KEY",
        "PROXY_ADMIN_KEY",
        "PROXY_API_KEY",
    ], done.stdout


@pytest.mark.local_model
def test_local_model_demo_block() -> None:
    """The demo as written (40 turns on SmolLM2 through llama.cpp, about 4 minutes)."""
    found = snippet("context-proxy demo")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", found.text],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    turns = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)  (\w+)$", out, re.M)
    assert [int(t[0]) for t in turns] == list(range(1, 41)), out
    assert turns[-1][3] == "summary" and int(turns[-1][2]) < int(turns[-1][1]), out
    assert "stored messages: 80" in out
    kept = re.search(r"kept with the pinned-facts pass:\s+(\d+)/(\d+)", out)
    assert kept and kept[1] == kept[2], out


def test_lock_commands(tmp_path: Path) -> None:
    """The lock commands, in a copy: pip-compile keeps the committed pins, so what they
    write is exactly what is committed (a lock out of step with pyproject.toml fails)."""
    locks = ("tests/requirements.lock", "deploy/requirements.lock")
    for name in ("pyproject.toml", "README.md", *locks):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / ".venv").symlink_to(VENV)
    found = snippet("pip-compile")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", found.text],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in locks:
        assert (tmp_path / name).read_text() == (ROOT / name).read_text(), name


def _executable(path: Path, source: str) -> None:
    path.write_text(f"#!{VENV / 'bin' / 'python'}\n" + textwrap.dedent(source).lstrip())
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
