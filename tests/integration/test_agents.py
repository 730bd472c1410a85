"""The real coding agents through the proxy: Claude Code (`claude -p`, then `--continue`)
on the Messages door and Codex (`codex exec`, then `exec resume --last`) on the
Responses door, as installed by the test command (tests/agents), against the loopback
test upstream. Each runs with a home of its own, and with no proxy workaround: what
they send beyond the published APIs is the doors' business."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL
from tests.integration.test_messages import CLAUDE, claude_config
from tests.upstream import FakeUpstream

AGENTS = Path(__file__).resolve().parents[1] / "agents" / "node_modules" / ".bin"
KEY = "agent-key-0123456789abcdef"


@pytest.fixture
def url(upstream: FakeUpstream, start_proxy: Any) -> str:
    return start_proxy(claude_config(upstream, auth={"keys": [{"key": KEY}]}))


def agent(name: str) -> str:
    path = AGENTS / name
    if not path.is_file():
        pytest.fail(f"{name} is not installed (the README's test command installs it)")
    return str(path)


def run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def sessions(url: str) -> list[dict[str, Any]]:
    listed = httpx.get(url + "/v1/sessions", headers={"Authorization": f"Bearer {KEY}"})
    assert listed.status_code == 200, listed.text
    return listed.json()["data"]


def transcript(url: str, session_id: str) -> list[dict[str, Any]]:
    path = f"{url}/v1/sessions/{session_id}"
    return httpx.get(path, headers={"Authorization": f"Bearer {KEY}"}).json()["messages"]


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    texts = []
    for message in messages:
        if message["role"] != "user":
            continue
        content = message["content"]
        parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
        texts.append(parts[-1].strip())
    return texts


def test_claude_code_print_mode_then_continue(url: str, tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_AUTH_TOKEN": KEY,
        "ANTHROPIC_MODEL": CLAUDE,
        # Its own telemetry and update checks: this machine has no way out.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    claude = agent("claude")
    assert run([claude, "-p", "turn 1"], env, work).strip().endswith("turn 1")
    for turn in range(2, 5):
        out = run([claude, "-p", "--continue", f"turn {turn}"], env, work)
        assert out.strip().endswith(f"turn {turn}"), out
    # One proxy session holds the whole conversation, in order.
    [session] = sessions(url)
    asked = user_texts(transcript(url, session["id"]))
    assert asked[-4:] == ["turn 1", "turn 2", "turn 3", "turn 4"], asked


def test_codex_exec_then_resume(url: str, tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    (home / ".codex" / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "context-proxy"\n\n'
        "[model_providers.context-proxy]\n"
        'name = "context-proxy"\n'
        f'base_url = "{url}/v1"\n'
        'env_key = "PROXY_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    env = {**os.environ, "HOME": str(home), "PROXY_API_KEY": KEY}
    codex = [agent("codex"), "exec", "--skip-git-repo-check"]
    assert "echo: turn 1" in run([*codex, "turn 1"], env, work)
    for turn in range(2, 4):
        out = run([*codex, "resume", "--last", f"turn {turn}"], env, work)
        assert f"echo: turn {turn}" in out, out
    [session] = sessions(url)
    asked = user_texts(transcript(url, session["id"]))
    assert asked[-3:] == ["turn 1", "turn 2", "turn 3"], asked
