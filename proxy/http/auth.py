"""Who is calling: proxy keys, kept as hashes, name a principal (tenant, models, limit).

Every route but the health checks and `/metrics` is behind `AuthMiddleware`, which
answers 401 or 429 before a byte of the body is read. With no key configured the proxy
is anonymous (callers are told apart by their bearer token, if any); in `passthrough`
mode the caller's bearer token is their own provider key, forwarded upstream.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.config.settings import AuthSettings, KeyEntry
from proxy.errors import ProxyError, RateLimited, Unauthenticated
from proxy.sessions.records import tenant_id

__all__ = ["OPEN_PATHS", "Auth", "AuthMiddleware", "Principal", "credential"]

# Routes a load balancer or Prometheus calls without a key; they show no session data.
OPEN_PATHS = frozenset({"/health/live", "/health/ready", "/metrics"})


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller."""

    tenant: str  # whose sessions it sees
    admin: bool = False  # may list, read and delete every tenant's sessions
    models: frozenset[str] | None = None  # None: every model
    provider_key: str | None = None  # passthrough: the caller's own provider key
    presented: tuple[str, ...] = ()  # every credential the caller sent: no error echoes one

    def may_use(self, model: str, route: str | None = None) -> bool:
        """Whether the key may use `model`, named or through the wildcard route (`openai/*`)
        that serves it."""
        return self.models is None or model in self.models or route in self.models


class RateLimit:
    """A token bucket: `rpm` requests a minute, in bursts of up to `rpm`."""

    def __init__(self, rpm: int) -> None:
        self._rate = rpm / 60.0
        self._capacity = float(rpm)
        self._tokens = float(rpm)
        self._updated = time.monotonic()
        self._lock = threading.Lock()  # several event loops may share one Auth in tests

    def take(self) -> float:
        """0 when the request may go ahead, else the seconds until it could."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._capacity, self._tokens + (now - self._updated) * self._rate)
            self._updated = now
            if self._tokens >= 1:
                self._tokens -= 1
                return 0.0
            return (1 - self._tokens) / self._rate


@dataclass(frozen=True, slots=True)
class _Key:
    digest: bytes
    entry: KeyEntry
    admin: bool
    limit: RateLimit | None


class Auth:
    def __init__(self, settings: AuthSettings, tenant_secret: bytes) -> None:
        self.settings = settings
        self._secret = tenant_secret
        self._keys = [
            _Key(
                bytes.fromhex(entry.key_hash.removeprefix("sha256:")),
                entry,
                admin,
                RateLimit(entry.rpm) if entry.rpm else None,
            )
            for admin, entries in ((False, settings.keys), (True, settings.admin_keys))
            for entry in entries
            if entry.key_hash is not None
        ]
        self._by_tag = {self._tag(key.digest): key for key in self._keys}

    def authenticate(self, headers: Headers) -> Principal:
        """The caller, or a 401/429 `ProxyError`."""
        token = credential(headers)
        presented = _presented(headers)
        passthrough = self.settings.mode == "passthrough"
        if not self.settings.required():
            return Principal(tenant_id(token, self._secret), presented=presented)
        if token is None:
            what = "your provider API key" if passthrough else "a proxy key"
            raise Unauthenticated(
                f"Missing credentials: pass {what} as `Authorization: Bearer …`.",
                code="missing_api_key",
            )
        key = self._match(token)
        if key is None and passthrough:
            tenant = tenant_id(token, self._secret)
            return Principal(tenant, provider_key=token, presented=presented)
        if key is None:
            raise Unauthenticated("Invalid proxy key.", code="invalid_api_key")
        return _admitted(key, key.entry.tenant or tenant_id(token, self._secret), presented)

    def tag(self, token: str) -> str | None:
        """What a viewer login made with `token` keeps of its key: a keyed hash of the
        key's hash, which names the key and holds nothing a key could be guessed from.
        None: `token` is no configured key (anonymous, or a passthrough provider key)."""
        key = self._match(token)
        return self._tag(key.digest) if key is not None else None

    def tagged(self, tag: str, tenant: str, presented: tuple[str, ...]) -> Principal | None:
        """The caller a viewer login made with the key `tag` names: that key's rights as
        configured now, its rate limit taken (a 429); None once the key is removed, so
        removing a key ends its logins."""
        key = self._by_tag.get(tag)
        if key is None:
            return None
        return _admitted(key, key.entry.tenant or tenant, presented)

    def _tag(self, digest: bytes) -> str:
        return hmac.new(self._secret, b"viewer-login:" + digest, hashlib.sha256).hexdigest()

    def _match(self, token: str) -> _Key | None:
        """The key whose hash is the token's; every key is compared, in constant time."""
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for key in self._keys:
            if hmac.compare_digest(key.digest, digest):
                found = key
        return found


def _admitted(key: _Key, tenant: str, presented: tuple[str, ...]) -> Principal:
    """The caller `key` names, once its rate limit lets it in (else a 429)."""
    wait = key.limit.take() if key.limit is not None else 0.0
    if wait:
        raise RateLimited(
            f"This key's limit of {key.entry.rpm} requests per minute is reached.",
            code="rate_limit_exceeded",
            retry_after=str(max(1, math.ceil(wait))),
        )
    entry = key.entry
    return Principal(
        tenant=tenant,
        admin=key.admin,
        models=frozenset(entry.models) if entry.models is not None else None,
        presented=presented,
    )


def credential(headers: Headers) -> str | None:
    """The caller's token: `Authorization: Bearer …`, else `x-api-key` (Anthropic's)."""
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return headers.get("x-api-key") or None


def _presented(headers: Headers) -> tuple[str, ...]:
    values = [headers.get("authorization", ""), headers.get("x-api-key", "")]
    words = [word for value in values for word in value.split()]
    return tuple(word for word in words if len(word) >= 8 and word.lower() != "bearer")


class AuthMiddleware:
    """Authenticates before routing, so an unknown caller costs no body read."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        auth: Auth,
        render: Callable[[str, ProxyError], Response],
        open_paths: frozenset[str] = OPEN_PATHS,
        fallback: Callable[[Scope], Awaitable[Principal | None]] | None = None,
    ) -> None:
        self.app = app
        self.auth = auth
        self.render = render  # an error in the shape of the door it was meant for
        self.open_paths = open_paths
        # A caller a request without a key in its headers names otherwise, if any (the
        # session viewer's login cookie, on the viewer's own paths).
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            principal = None
            if self.fallback is not None and credential(headers) is None:
                principal = await self.fallback(scope)
            if principal is None:
                principal = self.auth.authenticate(headers)
        except ProxyError as exc:
            await self.render(scope["path"], exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
