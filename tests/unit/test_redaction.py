"""The redactor: known secrets of any shape, proxy keys known only by hash, credential shapes."""

from __future__ import annotations

from proxy.config.settings import Settings, hash_key
from proxy.observability.redaction import Redactor, configured_secrets


def test_proxy_keys_known_only_by_hash_are_removed() -> None:
    redact = Redactor(key_hashes=[hash_key("cp.team.key.123")])
    text = "bad key 'cp.team.key.123'; also cp.team.key.123. and cp.team.key.1234"
    assert redact(text) == "bad key '***'; also ***. and cp.team.key.1234"


def test_settings_and_environment_secrets_of_any_shape() -> None:
    settings = Settings.model_validate(
        {
            "model_list": [
                {
                    "model_name": "m",
                    "litellm_params": {
                        "model": "openai/m",
                        "api_key": "os.environ/MY_PROVIDER",
                        "aws_secret_access_key": "plain words secret",
                    },
                }
            ],
            "session": {"tenant_secret": "tenant-secret-9", "redis_url": "redis://:pw1234@h/0"},
        }
    )
    environ = {
        "MY_PROVIDER": "zz-provider-value",
        "HF_TOKEN": "hf0123456789",
        "WATSONX_APIKEY": "abcdefgh",
        "PATH": "/usr/bin:/bin",
        "SHORT_KEY": "1234",
    }
    secrets = configured_secrets(settings, environ)
    for value in ("zz-provider-value", "plain words secret", "hf0123456789", "abcdefgh"):
        assert value in secrets
    assert {"tenant-secret-9", "pw1234"} <= set(secrets)
    assert "/usr/bin:/bin" not in secrets and "1234" not in secrets
    redact = Redactor(secrets)
    assert redact("key=zz-provider-value, hf0123456789!") == "key=***, ***!"
    assert redact("Bearer anything-at-all", ["caller-own"]) == "Bearer ***"
    assert redact("sk-abcdef123456 and caller-own", ["caller-own"]) == "sk-*** and ***"


def test_credentials_of_a_known_format_are_removed_whatever_surrounds_them() -> None:
    """The formats conversations are checked for (`proxy.facts.secrets`) leave no log
    line or error body either."""
    redact = Redactor()
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N"
    text = (
        f"pat ghp_abcdefghijklmnopqrstuvwxyz0123456789. jwt {jwt}, "
        "url postgres://app:S3cr3t!@db:5432/x; Authorization: Basic YWRtaW46aHVudGVyMg=="
    )
    assert redact(text) == "pat ***. jwt ***, url postgres://***@db:5432/x; ***"
