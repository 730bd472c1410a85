"""Config loading: LiteLLM's format accepted as-is, errors name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.litellm_sections import translate
from proxy.config.settings import ConfigError, Settings, hash_key, load_settings

LITELLM_CONFIG = """
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_key: os.environ/OPENAI_API_KEY
    model_info:
      max_input_tokens: 4096
router_settings:
  routing_strategy: simple-shuffle
  num_retries: 2
litellm_settings:
  drop_params: true
general_settings:
  master_key: sk-master-0123456789abcdef
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_need_no_file() -> None:
    settings = load_settings(None, environ={})
    assert settings == Settings()
    assert settings.context.budget_ratio == 0.8
    assert settings.server.port == 4000
    assert settings.model_list == []
    assert settings.allows_unlisted_models()  # nothing configured: provider/model names route


def test_existing_litellm_config_loads(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, LITELLM_CONFIG), environ={"OPENAI_API_KEY": "sk-x"})
    assert settings.model_names() == ["gpt-4o"]
    entry = settings.model_list[0]
    # The reference is left for LiteLLM to resolve; the secret is not copied around.
    assert entry.litellm_params["api_key"] == "os.environ/OPENAI_API_KEY"
    assert entry.model_info["max_input_tokens"] == 4096
    assert settings.router_settings["num_retries"] == 2
    assert not settings.allows_unlisted_models()


def test_missing_secret_reference_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"model_list\[0\]\.litellm_params\.api_key.*OPENAI_API_KEY"
    ):
        load_settings(write(tmp_path, LITELLM_CONFIG), environ={})


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("context:\n  budget_ratio: 1.5\n", "context.budget_ratio"),
        ("context:\n  budgt_ratio: 0.5\n", "context.budgt_ratio"),
        ("server:\n  port: lots\n", "server.port"),
        ("session:\n  store: mongo\n", "session.store"),
        ("colour: blue\n", "colour"),
        (
            "model_list:\n  - model_name: x\n    litellm_params: {}\n",
            "model_list[0].litellm_params",
        ),
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), environ={})
    assert key in str(caught.value)


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(write(tmp_path, "a: [1, 2\n"), environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml", environ={})


def test_env_overrides_file(tmp_path: Path) -> None:
    path = write(tmp_path, "context:\n  budget_ratio: 0.5\nserver:\n  port: 5000\n")
    environ = {
        "CONTEXT_PROXY_CONTEXT_BUDGET_RATIO": "0.6",
        "CONTEXT_PROXY_SERVER_ALLOW_UNLISTED_MODELS": "true",
        "CONTEXT_PROXY_SESSION_TTL_SECONDS": "3600",
    }
    settings = load_settings(path, environ=environ)
    assert settings.context.budget_ratio == 0.6
    assert settings.server.port == 5000
    assert settings.server.allow_unlisted_models is True
    assert settings.session.ttl_seconds == 3600


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  port: 5111\n")
    assert load_settings(None, environ={"CONTEXT_PROXY_CONFIG": str(path)}).server.port == 5111


@pytest.mark.parametrize(
    ("name", "value", "key"),
    [
        ("CONTEXT_PROXY_CONTEXT_BUDGET_RATIO", "2", "context.budget_ratio"),
        ("CONTEXT_PROXY_CONTEXT_NOPE", "1", "CONTEXT_PROXY_CONTEXT_NOPE"),
        ("CONTEXT_PROXY_SERVER_PORT", "x", "server.port"),
    ],
)
def test_bad_env_override_names_it(name: str, value: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, environ={name: value})
    assert key in str(caught.value)


@pytest.mark.parametrize("word", ["off", "Off", "no", "false"])
def test_context_mode_off_reads_as_written(tmp_path: Path, word: str) -> None:
    """YAML 1.1 reads a bare `off` as false: the file and the variable both mean off."""
    path = write(tmp_path, f"context:\n  mode: {word}\n")
    assert load_settings(path, environ={}).context.mode == "off"
    environ = {"CONTEXT_PROXY_CONTEXT_MODE": word}
    assert load_settings(None, environ=environ).context.mode == "off"


def test_context_mode_on_is_auto(tmp_path: Path) -> None:
    assert (
        load_settings(write(tmp_path, "context:\n  mode: on\n"), environ={}).context.mode == "auto"
    )
    assert (
        load_settings(None, environ={"CONTEXT_PROXY_CONTEXT_MODE": "auto"}).context.mode == "auto"
    )


def test_litellm_sections_become_settings_or_one_line_refusals(tmp_path: Path) -> None:
    text = LITELLM_CONFIG + "environment_variables:\n  SOME_HOST: 127.0.0.1\n  UNSET:\n"
    environ = {"OPENAI_API_KEY": "sk-x"}
    settings = load_settings(write(tmp_path, text), environ=environ)
    assert settings.server.drop_params is True
    assert [key.key_hash for key in settings.auth.admin_keys] == [
        hash_key("sk-master-0123456789abcdef")
    ]
    assert settings.auth.required()

    conflicting = LITELLM_CONFIG.replace("drop_params: true", "num_retries: 5")
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, conflicting), environ=environ)
    assert str(refused.value) == (
        "litellm_settings.num_retries and router_settings.num_retries differ: keep one"
    )
    alias = LITELLM_CONFIG.replace(
        "router_settings:\n", "router_settings:\n  model_group_alias: {gpt-4: gpt-5}\n"
    )
    with pytest.raises(ConfigError, match=r"model_group_alias.gpt-4: `gpt-5` is not in model_list"):
        load_settings(write(tmp_path, alias), environ=environ)


@pytest.mark.parametrize(
    ("auth", "environ", "where", "problem"),
    [
        (
            "general_settings:\n  master_key: sk-1234\n",
            {},
            "general_settings.master_key",
            "example",
        ),
        (
            "general_settings:\n  master_key: os.environ/MASTER\n",
            {"MASTER": "sk-1234"},
            "general_settings.master_key",
            "example",
        ),
        ("auth:\n  keys:\n    - key: k\n", {}, "auth.keys[0].key", "shorter than 20"),
        (
            "auth:\n  admin_keys:\n    - key: os.environ/ADMIN\n",
            {"ADMIN": "sk-admin-0123456"},
            "auth.admin_keys[0].key",
            "shorter than 20",
        ),
        ("auth:\n  keys:\n    - key: sk-litellm-master-key\n", {}, "auth.keys[0].key", "example"),
        (  # long enough, but a run anyone would try
            "auth:\n  keys:\n    - key: sk-1234567890abcdefghij\n",
            {},
            "auth.keys[0].key",
            "bits of randomness",
        ),
        (
            "auth:\n  admin_keys:\n    - key: os.environ/ADMIN\n",
            {"ADMIN": "sk-adminadminadminadminadmin"},
            "auth.admin_keys[0].key",
            "bits of randomness",
        ),
        (  # the hash of an example key is as guessable as the key
            f"auth:\n  keys:\n    - key_hash: {hash_key('sk-1234')}\n",
            {},
            "auth.keys[0].key_hash",
            "hash of an example key",
        ),
        (
            "general_settings:\n  master_key: os.environ/MASTER\n",
            {"MASTER": "sk-aaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
            "general_settings.master_key",
            "bits of randomness",
        ),
    ],
)
def test_weak_keys_are_refused_in_one_line(
    tmp_path: Path, auth: str, environ: dict[str, str], where: str, problem: str
) -> None:
    """A guessable key would let anyone spend the provider keys: the proxy does not start."""
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, auth), environ=environ)
    message = str(refused.value)
    assert message.startswith(f"{where}: refusing a weak proxy key") and problem in message
    assert "\n" not in message and "sk-1234" not in message and "sk-admin" not in message


def test_environment_variables_fill_only_what_is_unset() -> None:
    environ = {"KEPT": "mine"}
    raw, refused = translate(
        {"environment_variables": {"KEPT": "theirs", "NEW": 1, "NONE": None}}, environ
    )
    assert refused == [] and "environment_variables" not in raw
    assert environ == {"KEPT": "mine", "NEW": "1"}
