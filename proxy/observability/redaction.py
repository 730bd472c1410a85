"""Keeping credentials out of every text the proxy writes: error bodies and log lines.

Provider keys from the config and the environment are known in plain and removed
wherever they appear, whatever their shape. Proxy keys are known only by their hashes:
any token in a text whose SHA-256 is a key's is removed too. Anything else shaped like a
credential (`sk-…`, `Bearer …`, `api_key=…`, and every format of `TOKEN_FORMATS`) goes
as well.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from proxy.config.settings import KEY_HASH_PREFIX, SECRET_REF, Settings

__all__ = ["TOKEN_FORMATS", "Redactor", "configured_secrets", "redact"]

MASK = "***"

# Things that look like credentials, wherever they appear in a provider's message.
_SECRET_PATTERNS = [
    re.compile(r"\b(sk|pk|rk|ak)-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{6,}"),
    re.compile(r"(?i)(api[_-]?key|token|secret|password)(['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]{4,}"),
]
# Credentials known by their format, wherever they appear (in a provider's message or a
# conversation: `proxy.facts.secrets`): platform keys (GitHub, GitLab, Slack, AWS, Google,
# Stripe, OpenAI, Anthropic, Hugging Face, npm), JWTs (a base64url JSON header, `eyJ`, and
# two more segments), private keys, an auth header's value, a URL's `user:pass`.
TOKEN_FORMATS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{16,}|xox[abposr]-[\w-]{8,}"
    r"|(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}|AIza[\w-]{30,}|[sr]k_(?:live|test)_[0-9A-Za-z]{10,}"
    r"|sk-(?:ant-|proj-)?[\w-]{12,}|hf_[A-Za-z0-9]{30,}|npm_[A-Za-z0-9]{30,})"
    r"|\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*"
    r"|-----BEGIN[A-Z ]*PRIVATE KEY(?: BLOCK)?-----"
    r"|\b(?:Basic|Bearer|Token|Digest)\s+(?=[\w.~+/=-]*\d)[\w.~+/=-]{8,}"
    r"|(?i:\bauthorization\s*:\s*(?:(?:basic|bearer|token|digest)\s+)?\S+)"
    r"|(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"
)
# Names of settings and environment variables that hold credentials (LiteLLM reads
# OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, HF_TOKEN, VERTEXAI_CREDENTIALS, WATSONX_APIKEY, …).
_SECRET_NAME = re.compile(r"(?i)key|token|secret|password|credential")
_SHORTEST_SECRET = 8  # shorter values ("true", "us-east-1") would redact ordinary words
# A word that could be a proxy key: checked against the keys' hashes.
_WORD = re.compile(r"[^\s\"'`,;()<>\[\]{}|]{8,512}")


class Redactor:
    """Removes every credential the process knows of from a text."""

    def __init__(self, secrets: Iterable[str] = (), key_hashes: Iterable[str] = ()) -> None:
        self._secrets = sorted(set(secrets), key=len, reverse=True)  # longest first
        self._hashes = {h.removeprefix(KEY_HASH_PREFIX) for h in key_hashes}

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] = os.environ) -> Redactor:
        auth = settings.auth
        hashes = [entry.key_hash for entry in [*auth.keys, *auth.admin_keys] if entry.key_hash]
        return cls(configured_secrets(settings, environ), hashes)

    def __call__(self, text: str, extra: Iterable[str] = ()) -> str:
        """`text` without the known secrets, `extra` ones (the caller's own) and proxy keys."""
        if self._hashes:
            text = _WORD.sub(self._unless_key, text)
        return redact(text, [*extra, *self._secrets])

    def _unless_key(self, match: re.Match[str]) -> str:
        word = match.group()
        for candidate in (word, word.rstrip(".:!?")):
            if hashlib.sha256(candidate.encode()).hexdigest() in self._hashes:
                return MASK + word[len(candidate) :]
        return word


def configured_secrets(settings: Settings, environ: Mapping[str, str] = os.environ) -> list[str]:
    """Every credential known in plain, whatever its shape: provider keys in the config
    (references resolved), the environment's keys, tokens and secrets, the tenant secret
    and the Redis password."""
    found = [
        value
        for name, value in environ.items()
        if _SECRET_NAME.search(name) and len(value) >= _SHORTEST_SECRET
    ]
    for entry in settings.model_list:
        for name, value in entry.litellm_params.items():
            if isinstance(value, str) and _SECRET_NAME.search(name):
                if value.startswith(SECRET_REF):
                    value = environ.get(value[len(SECRET_REF) :], "")
                found.append(value)
    found.append(settings.session.tenant_secret or "")
    found.append(urlsplit(settings.session.redis_url).password or "")
    return [value for value in found if len(value) >= 4]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove `secrets` and anything credential-shaped from `text`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    text = _SECRET_PATTERNS[0].sub(lambda m: m.group(1) + "-" + MASK, text)
    text = _SECRET_PATTERNS[1].sub("Bearer " + MASK, text)
    text = _SECRET_PATTERNS[2].sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    return TOKEN_FORMATS.sub(MASK, text)
