"""A real proxy for the integration tests: the config dict that routes MODEL to the test
upstream (`tests/upstream.py`), and a proxy served from such a dict on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.upstream import FakeUpstream

__all__ = ["MODEL", "UPSTREAM_KEY", "proxy_config", "serving"]

UPSTREAM_KEY = "sk-test-upstream-secret-0123456789"
MODEL = "gpt-4o-mini"


def proxy_config(upstream: FakeUpstream, **sections: Any) -> dict[str, Any]:
    """A config dict routing MODEL to the test upstream; each keyword is a section merged
    into it (a dict) or put in place (anything else)."""
    config: dict[str, Any] = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": upstream.base_url,
                    "api_key": UPSTREAM_KEY,
                },
            }
        ],
        "router_settings": {"num_retries": 0},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values} if isinstance(values, dict) else values
    return config


@contextmanager
def serving(
    config: dict[str, Any], directory: Path, clock: Callable[[], float] | None = None
) -> Iterator[str]:
    """A real proxy (uvicorn on loopback, in this process) for `config`, written to
    `directory`/config.yaml, its sessions in `directory`/sessions unless the config says
    where, on `clock` (epoch seconds) when given; yields its base URL."""
    import yaml

    from proxy.config.settings import load_settings
    from proxy.http.app import create_app
    from tests.servers import serve

    config.setdefault("session", {}).setdefault("path", str(directory / "sessions"))
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = load_settings(path, environ={})
    app = create_app(settings) if clock is None else create_app(settings, clock=clock)
    with serve(app) as url:
        yield url
