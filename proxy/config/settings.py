"""Settings: one YAML file plus `CONTEXT_PROXY_*` environment overrides.

The file is a LiteLLM config (`model_list`, `router_settings`, …) with this
project's own sections beside it, so an existing LiteLLM config works as-is.
Every default lives here and nowhere else.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any, Literal, NoReturn

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from proxy.config.litellm_sections import translate

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "KEY_HASH_PREFIX",
    "LOOPBACK_HOSTS",
    "MIN_KEY_BITS",
    "MIN_KEY_LENGTH",
    "SECRET_REF",
    "AuthSettings",
    "ConfigError",
    "ContextSettings",
    "KeyEntry",
    "MemorySettings",
    "ModelEntry",
    "ServerSettings",
    "SessionSettings",
    "Settings",
    "hash_key",
    "load_settings",
    "strength_bits",
]

ENV_PREFIX = "CONTEXT_PROXY_"
CONFIG_ENV = "CONTEXT_PROXY_CONFIG"
SECRET_REF = "os.environ/"
KEY_HASH_PREFIX = "sha256:"
_KEY_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MIN_KEY_LENGTH = 20
MIN_KEY_BITS = 64  # `strength_bits`: 16 random hex digits hold 64
# The names a browser uses for this machine: no attacker's DNS name can be one of them.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
# Keys printed in LiteLLM's docs and example configs: whoever has read them has these.
_EXAMPLE_KEYS = frozenset(
    {
        "sk-1234",
        "sk-12345",
        "sk-1234567890",
        "sk-master-key",
        "sk-my-master-key",
        "sk-litellm-master-key",
        "sk-my-litellm-master-key",
        "changeme",
    }
)


class ConfigError(Exception):
    """The configuration cannot be used; the message names the offending key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(4000, ge=1, le=65535)
    workers: int = Field(1, ge=1, le=64)
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    # A request body not received whole within this is a 408 (a client sending half of
    # one would otherwise hold a connection, and its session's turn, for as long as it likes).
    body_timeout_seconds: float = Field(20.0, gt=0)
    # With an empty model_list, provider-prefixed names always pass through.
    allow_unlisted_models: bool = False
    request_timeout_seconds: float = Field(600.0, gt=0)
    # The largest reply, and the largest event of a streamed one, read from a provider:
    # past it the reply is read no further and the turn is a 502. 256 bytes for each of
    # 128k output tokens (see docs/configuration.md).
    max_upstream_reply_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    # On SIGTERM: stop accepting, let requests in flight finish for this long, then end them.
    shutdown_grace_seconds: float = Field(30.0, ge=0)
    # OpenAI-compatible deployments are called directly once the Router chose them.
    lean_upstream: bool = True
    # A parameter the model does not take: None or true, dropped (the response's
    # X-Context-Dropped says so); false, a 400 (LiteLLM's `drop_params`).
    drop_params: bool | None = None
    # Web origins whose pages may call the proxy (CORS); others are refused (proxy/browser.py).
    cors_origins: list[str] = Field(default_factory=list)
    # Host names the proxy answers to (`Host` header, any port; `*`: any). None: any with
    # keys, only loopback names without (a page whose name an attacker rebinds to
    # 127.0.0.1 must not reach a keyless proxy: proxy/http/browser.py).
    allowed_hosts: list[str] | None = None
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"


class ContextSettings(_Section):
    mode: Literal["auto", "off"] = "auto"
    budget_ratio: float = Field(0.8, ge=0.1, le=0.95)
    # The share of the budget (less system and tools) a fold keeps verbatim. None: chosen
    # at each fold as what costs least over the turns until the next one (with cache_aware;
    # 0.5 without it).
    keep_recent_ratio: float | None = Field(None, ge=0.1, le=0.9)
    summarize_at: float = Field(0.7, ge=0.1, le=1.0)
    summary_model: str | None = None
    max_summary_tokens: int = Field(1024, ge=64)
    # A fold adds a segment to the summary and leaves the earlier ones byte-identical
    # (prompt caches keep them); false: every fold rewrites the summary into one.
    summary_segments: bool = True
    # Spend as the provider's prompt cache bills: fold when the budget forces it, when the
    # cache went cold, or earlier only where that pays for the rewrite; mark cache
    # breakpoints and a session's prompt_cache_key. false: fold at summarize_at.
    cache_aware: bool = True
    summary_timeout_seconds: float = Field(60.0, gt=0)
    # An agent's request for a summary of its conversation (Claude Code's /compact, Codex's
    # compaction) is answered from the session's summary, with no model call, when that
    # summary covers all of the conversation but its last max_summary_tokens.
    answer_compaction: bool = True
    # After this many failed summaries in a row the summarizer is left alone (turns
    # truncate) for summary_backoff_seconds, doubled after each failed retry (to 300 s).
    summary_breaker_failures: int = Field(3, ge=1)
    summary_backoff_seconds: float = Field(5.0, gt=0)
    token_counting: Literal["auto", "tiktoken", "char"] = "auto"
    default_context_window: int = Field(8192, ge=256)
    # Facts the summary dropped (and current values of updated ones) pinned after it.
    pin_facts: bool = True
    # Recall brings back messages the summary covers, the most relevant to the user's
    # latest message first, in what the window leaves of the budget, at most this share
    # of it (1: all it leaves; on real conversations a full block finds more of what a
    # question needs than a few units); 0 turns it off.
    recall_ratio: float = Field(1.0, ge=0, le=1)
    # ... and at most this many tokens: a turn's block is written to the provider's
    # prompt cache again each turn (1.25x the input price on Claude), so a big window's
    # share (16k tokens on a 200k model) costs more than the units it needs. On an 8k
    # model the room the plan leaves binds first: a new session's question under a
    # memory id fills it (on LoCoMo, 4,096 found 73% of what questions need, 8,192 80%).
    recall_max_tokens: int = Field(8192, ge=0)
    recall_relevance_weight: float = Field(0.8, ge=0)
    recall_recency_weight: float = Field(0.2, ge=0)
    # How long a provider's prompt cache keeps a prefix after its last use (a model's
    # `model_info.cache_ttl_seconds` wins): the net saving's counterfactual uses it.
    cache_ttl_seconds: float = Field(300.0, gt=0)
    # When a summary is made, tool results over this many tokens left in the verbatim
    # window before the latest user turn are sent as stubs from then on (what the tool
    # was, its size, first and last lines, error lines); recall brings them back whole.
    # 0 turns it off.
    stub_tool_results_over: int = Field(1000, ge=0)

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_words(cls, value: Any) -> Any:
        """YAML 1.1 reads a bare `off` as false (and `on` as true): take them as written."""
        if isinstance(value, bool):
            return "auto" if value else "off"
        return value


class SessionSettings(_Section):
    header: str = "X-Session-Id"
    store: Literal["disk", "redis"] = "disk"
    path: str = "./.context-proxy"
    redis_url: str = "redis://127.0.0.1:6379/0"
    ttl_seconds: float | None = Field(None, gt=0)
    tenant_secret: str | None = None
    min_free_mb: float = Field(64, ge=0)  # disk store: below this, turns get a 503 first
    turn_wait_seconds: float = Field(120, gt=0)  # for the session's turn before, else 409
    # A reply whose JSON is longer is answered whole and stored as a marked cut. None:
    # sized to the model, 32 bytes per output token it may write, at least 1 MiB.
    max_reply_bytes: int | None = Field(None, ge=1024)
    # Body fields that name the session when the header is absent (agents that cannot
    # set a header per conversation); dotted for nested fields. A door uses those its
    # API has: Anthropic's `metadata.user_id`, the Responses API's `prompt_cache_key`
    # and `conversation` (a string, or an object's `id`).
    id_fields: list[str] = ["metadata.user_id", "prompt_cache_key", "conversation"]


class MemorySettings(_Section):
    """Facts remembered across sessions that share a memory id (off by default)."""

    enabled: bool = False
    header: str = "X-Memory-Id"
    # Without the header, a caller's sessions share its tenant's memory.
    per_tenant: bool = False
    # None: 2% of the request's budget; never more than the budget.
    max_injection_tokens: int | None = Field(None, ge=0)
    similarity_weight: float = Field(0.6, ge=0)
    confidence_weight: float = Field(0.4, ge=0)
    # A user message is also searched for, verbatim, in the memory's other sessions.
    recall: bool = True


class KeyEntry(_Section):
    """One proxy key. Given as `key` (the secret, or an `os.environ/VAR` reference), it is
    hashed as the config loads and only `key_hash` is kept."""

    key: str | None = Field(None, min_length=1)
    key_hash: str | None = None
    tenant: str | None = None  # None: the key is a tenant of its own
    models: list[str] | None = None  # None: every model
    rpm: int | None = Field(None, ge=1)  # requests per minute, per worker process

    @field_validator("key_hash")
    @classmethod
    def _is_hash(cls, value: str | None) -> str | None:
        if value is not None and not _KEY_HASH.fullmatch(value):
            raise ValueError("must be `sha256:` and 64 lowercase hex digits")
        return value

    @field_validator("tenant")
    @classmethod
    def _is_name(cls, value: str | None) -> str | None:
        if value is not None and not _TENANT.fullmatch(value):
            raise ValueError("1-64 letters, digits, `.`, `_` or `-`; a letter or digit first")
        return value

    @model_validator(mode="after")
    def _one_secret(self) -> KeyEntry:
        if (self.key is None) == (self.key_hash is None):
            raise ValueError("give exactly one of `key` and `key_hash`")
        return self


class AuthSettings(_Section):
    mode: Literal["keys", "passthrough"] = "keys"
    keys: list[KeyEntry] = Field(default_factory=list)
    admin_keys: list[KeyEntry] = Field(default_factory=list)
    # Serve without keys on a non-loopback address: anyone who reaches the port can
    # spend the provider keys and read the anonymous tenant's sessions.
    allow_anonymous: bool = False

    @model_validator(mode="after")
    def _passthrough_has_no_keys(self) -> AuthSettings:
        if self.mode == "passthrough" and self.keys:
            raise ValueError(
                "`keys` cannot be used with `mode: passthrough`, where the bearer token "
                "is the caller's provider key (`admin_keys` can)"
            )
        return self

    def required(self) -> bool:
        """Whether every request must carry a credential."""
        return self.mode == "passthrough" or bool(self.keys or self.admin_keys)


def hash_key(key: str) -> str:
    """The form a proxy key is kept in: `sha256:<hex>`."""
    return KEY_HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


class ModelEntry(BaseModel):
    """One `model_list` deployment, in LiteLLM's own format."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model_name: str = Field(min_length=1)
    litellm_params: dict[str, Any]
    model_info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("litellm_params")
    @classmethod
    def _needs_model(cls, params: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(params.get("model"), str) or not params["model"]:
            raise ValueError("`model` is required (e.g. openai/gpt-4o)")
        return params


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_list: list[ModelEntry] = Field(default_factory=list)
    router_settings: dict[str, Any] = Field(default_factory=dict)
    server: ServerSettings = ServerSettings()
    context: ContextSettings = ContextSettings()
    session: SessionSettings = SessionSettings()
    memory: MemorySettings = MemorySettings()
    auth: AuthSettings = AuthSettings()

    def model_names(self) -> list[str]:
        return list(dict.fromkeys(entry.model_name for entry in self.model_list))

    def allowed_hosts(self) -> frozenset[str] | None:
        """The host names the proxy answers to, lower case; None: any."""
        listed = self.server.allowed_hosts
        if listed is None:
            return None if self.auth.required() else LOOPBACK_HOSTS
        names = frozenset(name.lower().rstrip(".") for name in listed)
        return None if "*" in names else names

    def allows_unlisted_models(self) -> bool:
        return self.server.allow_unlisted_models or not self.model_list


_SECTIONS: dict[str, type[_Section]] = {
    "server": ServerSettings,
    "context": ContextSettings,
    "session": SessionSettings,
    "memory": MemorySettings,
    "auth": AuthSettings,
}


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: dict[str, str] | None = None
) -> Settings:
    """Read the YAML file (if any), apply env overrides, validate everything."""
    exported = environ is None  # a config's environment_variables reach the process
    environ = dict(os.environ if environ is None else environ)
    path = path or environ.get(CONFIG_ENV) or None
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: top level must be a mapping")
        raw = dict(loaded or {})
    _check_master_key(raw, environ)
    before = set(environ)
    raw, refused = translate(raw, environ)
    if refused:
        raise ConfigError("; ".join(refused))
    if exported:
        os.environ.update({name: environ[name] for name in set(environ) - before})
    _apply_env_overrides(raw, environ)
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    _check_secret_refs(settings, environ)
    return _hashed_keys(settings, environ)


def _apply_env_overrides(raw: dict[str, Any], environ: dict[str, str]) -> None:
    """`CONTEXT_PROXY_<SECTION>_<KEY>=value` overrides `<section>.<key>`."""
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section, _, key = rest.partition("_")
        if section not in _SECTIONS or key not in _SECTIONS[section].model_fields:
            raise ConfigError(f"{name}: unknown setting (expected {ENV_PREFIX}<SECTION>_<KEY>)")
        current = raw.setdefault(section, {})
        if not isinstance(current, dict):
            raise ConfigError(f"{section}: must be a mapping")
        current[key] = None if value.lower() in ("", "none", "null") else yaml.safe_load(value)


def _check_secret_refs(settings: Settings, environ: dict[str, str]) -> None:
    """Fail at start, naming the key, when an `os.environ/VAR` reference is unset."""
    for index, entry in enumerate(settings.model_list):
        for key, value in entry.litellm_params.items():
            if isinstance(value, str) and value.startswith(SECRET_REF):
                variable = value[len(SECRET_REF) :]
                if variable not in environ:
                    raise ConfigError(
                        f"model_list[{index}].litellm_params.{key}: "
                        f"environment variable {variable} is not set"
                    )


def _hashed_keys(settings: Settings, environ: dict[str, str]) -> Settings:
    """The settings with every proxy key replaced by its hash: the secret itself is not
    kept past this point."""
    sections = {}
    for section in ("keys", "admin_keys"):
        entries = []
        for index, entry in enumerate(getattr(settings.auth, section)):
            if entry.key is not None:
                key = entry.key
                if key.startswith(SECRET_REF):
                    variable = key[len(SECRET_REF) :]
                    if not environ.get(variable):
                        raise ConfigError(
                            f"auth.{section}[{index}].key: "
                            f"environment variable {variable} is not set"
                        )
                    key = environ[variable]
                _check_strength(key, f"auth.{section}[{index}].key")
                entry = entry.model_copy(update={"key": None, "key_hash": hash_key(key)})
            elif entry.key_hash is not None:
                _check_hash(entry.key_hash, f"auth.{section}[{index}].key_hash")
            entries.append(entry)
        sections[section] = entries
    return settings.model_copy(update={"auth": settings.auth.model_copy(update=sections)})


def _check_master_key(raw: dict[str, Any], environ: dict[str, str]) -> None:
    """LiteLLM's `master_key` becomes an admin key: refuse a weak one under its own name."""
    general = raw.get("general_settings")
    master = general.get("master_key") if isinstance(general, dict) else None
    if isinstance(master, str) and master:
        if master.startswith(SECRET_REF):
            master = environ.get(master[len(SECRET_REF) :]) or None
        if master is not None:
            _check_strength(master, "general_settings.master_key")


def _check_strength(key: str, where: str) -> None:
    """Refuse a key anyone could guess: short, one that example configs publish, or one
    whose characters mostly follow from those before them."""
    if key in _EXAMPLE_KEYS or key.lower() in _EXAMPLE_KEYS:
        problem = "is an example key from published configs"
    elif len(key) < MIN_KEY_LENGTH:
        problem = f"is shorter than {MIN_KEY_LENGTH} characters"
    elif (bits := strength_bits(key)) < MIN_KEY_BITS:
        problem = (
            f"holds about {bits:.0f} bits of randomness, fewer than {MIN_KEY_BITS}"
            " (runs such as 1234 or abcd and repeats count for nothing)"
        )
    else:
        return
    _refuse_weak(where, problem)


def _check_hash(key_hash: str, where: str) -> None:
    """Refuse a `key_hash` of a published example key (the hash of `sk-1234` is as
    guessable as the key)."""
    if key_hash in _EXAMPLE_HASHES:
        _refuse_weak(where, "is the hash of an example key from published configs")


def _refuse_weak(where: str, problem: str) -> NoReturn:
    raise ConfigError(
        f"{where}: refusing a weak proxy key: it {problem}; "
        "use a long random one (`openssl rand -hex 32`)"
    )


_EXAMPLE_HASHES = frozenset(hash_key(key) for key in _EXAMPLE_KEYS)
_CHARACTER_CLASSES = (
    (str.isdigit, 10),
    (str.islower, 26),
    (str.isupper, 26),
    (lambda c: not c.isalnum(), 33),
)


def strength_bits(key: str) -> float:
    """An estimate of how many bits of randomness `key` holds, on the side of too few:
    each character that does not follow from what came before adds log2 of the alphabet
    its classes span; one that continues a run (`1234`, `aaaa`, `cba`) or repeats a
    pair of characters already seen (`passwordpassword`) adds nothing."""
    alphabet = sum(size for test, size in _CHARACTER_CLASSES if any(map(test, key)))
    seen: set[str] = set()
    surprising = 0
    for index, char in enumerate(key):
        pair = key[index - 1 : index + 1]
        if index and (abs(ord(char) - ord(key[index - 1])) <= 1 or pair in seen):
            seen.add(pair)
            continue
        seen.add(pair)
        surprising += 1
    return surprising * math.log2(max(alphabet, 2))


_UNKNOWN_SECTION = (
    "unknown key: not a context-proxy setting, nor a LiteLLM one it honours; remove it"
)


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        location = ".".join(
            f"[{part}]" if isinstance(part, int) else str(part) for part in error["loc"]
        ).replace(".[", "[")
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key" if len(error["loc"]) > 1 else _UNKNOWN_SECTION
        message = message.removeprefix("Value error, ")
        lines.append(f"{location or 'config'}: {message}")
    return "invalid config: " + "; ".join(lines)
