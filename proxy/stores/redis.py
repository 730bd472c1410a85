"""Session store on Redis, for several workers or replicas (DESIGN.md section 11).

A session is an append-only LIST of transcript entries (orjson, one per
message) plus a small meta HASH.  Both keys share a hash tag, so they live on
one cluster slot and a single Lua script can update them atomically.  Sessions
are history, not cache: we never touch eviction settings; only a configured TTL
or an explicit delete removes a session.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import OrderedDict
from typing import Any

import orjson
import redis.asyncio as aioredis

from proxy.sessions import Checkpoint, Session, StoredMessage

__all__ = ["RedisSessionStore"]

_CACHE_SIZE = 1024  # sessions whose stored entry digests we remember (16 bytes per message)
_DIGEST = 16

# KEYS: meta, msgs.  ARGV: expected version, base etag ("" = rewrite all), keep,
# ttl ms (0 = none), n meta items, meta field/value pairs..., entries to push...
# Returns 1 stored, 0 version conflict, -1 list is not what the caller assumed.
_PUT = """
local stored = redis.call('HGET', KEYS[1], 'version')
if (stored and tonumber(stored) or 0) ~= tonumber(ARGV[1]) then return 0 end
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], 'etag') ~= ARGV[2] then return -1 end
local keep = tonumber(ARGV[3])
if keep == 0 then
  redis.call('DEL', KEYS[2])
elseif keep < redis.call('LLEN', KEYS[2]) then
  redis.call('LTRIM', KEYS[2], 0, keep - 1)
end
local first = 6 + tonumber(ARGV[5])
-- RPUSH in chunks: Lua's unpack() fails beyond ~8000 values.
for i = first, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], unpack(ARGV, 6, first - 1))
local ttl = tonumber(ARGV[4])
for _, key in ipairs(KEYS) do
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) else redis.call('PERSIST', key) end
end
return 1
"""

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisSessionStore:
    """SessionStore on Redis; put is one atomic compare-and-set script.

    A normal turn sends and writes only the new messages.  To know which stored
    entries are unchanged, the store remembers (per session, bounded LRU) a
    random etag of the last write it read or made and a digest of each stored
    entry.  Entries are compared byte for byte with what is stored, so updated
    token counts on old messages are persisted too: the list is truncated at the
    first differing entry and re-pushed from there.  Without a matching memory
    (another replica wrote, or the session was never read here) put rewrites
    the whole list: always correct, only slower.  The TTL restarts on every put.
    """

    def __init__(
        self, url: str, ttl_seconds: float | None = None, prefix: str = "context-proxy"
    ) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError("prefix must not contain '{' or '}' (they pick the cluster slot)")
        self._redis = aioredis.Redis.from_url(url)
        self._ttl_ms = max(1, round(ttl_seconds * 1000)) if ttl_seconds else 0
        self._prefix = prefix
        self._put_script = self._redis.register_script(_PUT)
        self._unlock_script = self._redis.register_script(_UNLOCK)
        self._known: OrderedDict[str, tuple[str, bytes]] = OrderedDict()

    async def get(self, tenant: str, session_id: str) -> Session | None:
        meta_key, msgs_key = self._keys(tenant, session_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(meta_key)
            pipe.lrange(msgs_key, 0, -1)
            raw_meta, entries = await pipe.execute()
        if not raw_meta:
            self._known.pop(meta_key, None)
            return None
        meta = {key.decode(): value.decode() for key, value in raw_meta.items()}
        self._remember(meta_key, meta["etag"], _digests(entries))
        return Session(
            tenant=meta["tenant"],
            session_id=meta["session_id"],
            transcript=[StoredMessage.from_dict(orjson.loads(entry)) for entry in entries],
            head=meta["head"],
            checkpoints=[Checkpoint.from_dict(c) for c in orjson.loads(meta["checkpoints"])],
            version=int(meta["version"]),
            created=float(meta["created"]),
            updated=float(meta["updated"]),
        )

    async def put(self, session: Session, expected_version: int) -> bool:
        """Compare-and-set; False if someone else wrote (or deleted) the session first."""
        meta_key, msgs_key = self._keys(session.tenant, session.session_id)
        entries = [orjson.dumps(stored.to_dict()) for stored in session.transcript]
        etag = secrets.token_hex(8)
        meta: dict[str, Any] = {
            "version": session.version,
            "head": session.head,
            "checkpoints": orjson.dumps([c.to_dict() for c in session.checkpoints]),
            "created": repr(session.created),
            "updated": repr(session.updated),
            "tenant": session.tenant,
            "session_id": session.session_id,
            "length": len(entries),
            "etag": etag,
        }
        digests = _digests(entries)
        known = self._known.get(meta_key)
        base, keep = ("", 0) if known is None else (known[0], _common_prefix(known[1], digests))
        result = await self._run_put(
            meta_key, msgs_key, expected_version, base, keep, meta, entries
        )
        if result == -1:  # our memory was stale (e.g. deleted and recreated elsewhere)
            result = await self._run_put(meta_key, msgs_key, expected_version, "", 0, meta, entries)
        if result != 1:
            if self._known.get(meta_key) is known:  # not replaced by a concurrent winner
                self._known.pop(meta_key, None)
            return False
        self._remember(meta_key, etag, digests)
        return True

    async def delete(self, tenant: str, session_id: str) -> bool:
        meta_key, msgs_key = self._keys(tenant, session_id)
        self._known.pop(meta_key, None)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(meta_key)
            pipe.delete(msgs_key)
            deleted_meta, _ = await pipe.execute()
        return bool(deleted_meta)

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except Exception:
            return False

    async def close(self) -> None:
        await self._redis.aclose()

    async def try_lock(self, tenant: str, session_id: str, ttl_seconds: float) -> str | None:
        """Take the per-session lock (e.g. one background summarization across replicas).

        Returns a token for `unlock`, or None if someone else holds it.  The lock
        expires after ttl_seconds, so a crashed holder cannot block it forever.
        """
        token = secrets.token_hex(16)
        ttl_ms = max(1, round(ttl_seconds * 1000))
        acquired = await self._redis.set(
            self._key(tenant, session_id, "lock"), token, nx=True, px=ttl_ms
        )
        return token if acquired else None

    async def unlock(self, tenant: str, session_id: str, token: str) -> None:
        """Release the lock only if we still hold it (it may have expired and been retaken)."""
        await self._unlock_script(keys=[self._key(tenant, session_id, "lock")], args=[token])

    async def _run_put(
        self,
        meta_key: str,
        msgs_key: str,
        expected: int,
        base: str,
        keep: int,
        meta: dict[str, Any],
        entries: list[bytes],
    ) -> int:
        pairs = [item for pair in meta.items() for item in pair]
        args = [expected, base, keep, self._ttl_ms, len(pairs), *pairs, *entries[keep:]]
        return int(await self._put_script(keys=[meta_key, msgs_key], args=args))

    def _remember(self, meta_key: str, etag: str, digests: bytes) -> None:
        self._known[meta_key] = (etag, digests)
        self._known.move_to_end(meta_key)
        while len(self._known) > _CACHE_SIZE:
            self._known.popitem(last=False)

    def _keys(self, tenant: str, session_id: str) -> tuple[str, str]:
        return self._key(tenant, session_id, "meta"), self._key(tenant, session_id, "msgs")

    def _key(self, tenant: str, session_id: str, suffix: str) -> str:
        # Tenants never contain ":" (see tenant_id), so user-chosen session ids
        # cannot reach another tenant; the suffixes differ in their last bytes,
        # so no session id can alias another session's keys.  Whatever braces a
        # session id holds, all keys of one session share the same hash tag.
        if ":" in tenant:
            raise ValueError("tenant must not contain ':'")
        return f"{self._prefix}:{{{tenant}:{session_id}}}:{suffix}"


def _digests(entries: list[bytes]) -> bytes:
    """Fixed-width digests of the serialized entries, packed to keep the memory small."""
    return b"".join(hashlib.blake2b(entry, digest_size=_DIGEST).digest() for entry in entries)


def _common_prefix(known: bytes, digests: bytes) -> int:
    """Number of leading entries identical in both digest strings."""
    size = min(len(known), len(digests))
    keep = 0
    while keep < size and known[keep : keep + _DIGEST] == digests[keep : keep + _DIGEST]:
        keep += _DIGEST
    return keep // _DIGEST
