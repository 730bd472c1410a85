"""Session store on Redis (or Redis Cluster), for several workers or replicas.

A session is a meta HASH (`version`, `data`), a LIST of messages, a LIST of
checkpoints and a LIST of its newest plan records, append-only: a turn pushes its new
messages and plan record and replaces the meta in one Lua script under compare-and-set
on the version. Every key of a session carries the same hash tag (`{tenant:session}`),
so all of them, the scripts and the locks, live in one cluster slot: the store runs
unchanged on Redis Cluster. Sessions are history, not cache: eviction settings are
never touched; only a TTL or a delete removes a session.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, TypedDict, cast
from urllib.parse import parse_qs, urlsplit

import orjson
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import OutOfMemoryError

from proxy.sessions.records import (
    COMMIT_GRACE_SECONDS,
    COMMIT_SECONDS,
    PLANS_KEPT,
    Checkpoint,
    Commit,
    LateCommit,
    LockName,
    ParsedMetas,
    SessionMeta,
    StoredMessage,
    parsed,
    serialized,
)
from proxy.sessions.stores.fencing import LeaseLost

__all__ = ["RedisSessionStore"]

# KEYS: meta, messages, checkpoints, plans, the turn lock.
# ARGV: expected version, keep, checkpoints kept, ttl ms (0 = none), version, meta data,
#       n = how many of the last values are checkpoints, the turn lock's token to give
#       back once stored ("" = none), the deadline (ms, Redis's clock), the plan record
#       ("" = none), plan records kept, the session's inserts (the meta's `inserts`
#       field; "" = unchanged), messages..., checkpoints...
# Returns 1 stored, 0 version conflict, -1 past its deadline, -2 its turn lock lost
# (nothing done but for 1). Fenced on the turn lock named: refused while another token
# holds it, and on a version conflict unless it is still held by this one (a background
# summary's commit, which the turn may be replayed onto; not another turn's).
_COMMIT = """
local now = redis.call('TIME')
if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[9]) then
  return -1
end
local holder = false
if ARGV[8] ~= '' then
  holder = redis.call('GET', KEYS[5])
  if holder and holder ~= ARGV[8] then return -2 end
end
local stored = redis.call('HGET', KEYS[1], 'version')
if (stored and tonumber(stored) or 0) ~= tonumber(ARGV[1]) then
  if ARGV[8] ~= '' and holder ~= ARGV[8] then return -2 end
  return 0
end
local keep = tonumber(ARGV[2])
if keep == 0 then
  redis.call('DEL', KEYS[2])
elseif keep < redis.call('LLEN', KEYS[2]) then
  redis.call('LTRIM', KEYS[2], 0, keep - 1)
end
local kept = tonumber(ARGV[3])
if kept == 0 then
  redis.call('DEL', KEYS[3])
elseif kept < redis.call('LLEN', KEYS[3]) then
  redis.call('LTRIM', KEYS[3], 0, kept - 1)
end
local last = #ARGV - tonumber(ARGV[7])
-- RPUSH in chunks: Lua's unpack() fails beyond ~8000 values.
for i = 13, last, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, last)))
end
for i = last + 1, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], 'version', ARGV[5], 'data', ARGV[6])
if ARGV[12] ~= '' then redis.call('HSET', KEYS[1], 'inserts', ARGV[12]) end
if ARGV[10] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[10])
  redis.call('LTRIM', KEYS[4], -tonumber(ARGV[11]), -1)
end
local ttl = tonumber(ARGV[4])
for i = 1, 4 do
  if ttl > 0 then redis.call('PEXPIRE', KEYS[i], ttl) else redis.call('PERSIST', KEYS[i]) end
end
if ARGV[8] ~= '' and holder == ARGV[8] then redis.call('DEL', KEYS[5]) end
return 1
"""

# KEYS: meta, messages, checkpoints, plans. Deletes them; 1 if the session existed.
_DELETE = """
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return existed
"""

# KEYS: the memory. ARGV: expected version (0 = absent), data. 1 stored, 0 conflict.
_PUT_MEMORY = """
local stored = redis.call('HGET', KEYS[1], 'version')
if (stored and tonumber(stored) or 0) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', tonumber(ARGV[1]) + 1, 'data', ARGV[2])
return 1
"""

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: lock. ARGV: token, ms. Returns 1 if the lock was still ours and now lasts ms more.
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


# A Redis that does not answer fails a request within seconds rather than hanging it; a
# commit is waited for until its deadline has passed, with the grace for its answer.


class _Timeouts(TypedDict):
    socket_connect_timeout: float
    socket_timeout: float


_TIMEOUTS: _Timeouts = {
    "socket_connect_timeout": 5.0,
    "socket_timeout": COMMIT_SECONDS + COMMIT_GRACE_SECONDS,
}
_MEMORY_EVERY = 1.0  # seconds between two looks at Redis's memory before turns


def connect(url: str) -> aioredis.Redis | RedisCluster:
    """A client for `url`; `?cluster=true` (or a `redis+cluster://` URL) for a cluster,
    given the address of any one of its nodes. It leaves answers undecoded, so every
    string it returns is `bytes` (redis-py types them `bytes | str`: the store casts)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    cluster = parts.scheme.endswith("+cluster") or query.get("cluster", [""])[0] in ("1", "true")
    if not cluster:
        return aioredis.Redis.from_url(url, **_TIMEOUTS)
    scheme = parts.scheme.removesuffix("+cluster")
    rest = [f"{k}={v}" for k, values in query.items() if k != "cluster" for v in values]
    plain = parts._replace(scheme=scheme, query="&".join(rest)).geturl()
    return RedisCluster.from_url(plain, **_TIMEOUTS)


class RedisSessionStore:
    """SessionStore on Redis; commit is one atomic compare-and-set script."""

    def __init__(
        self, url: str, ttl_seconds: float | None = None, prefix: str = "context-proxy"
    ) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError("prefix must not contain '{' or '}' (they pick the cluster slot)")
        self._redis = connect(url)
        self._ttl_ms = max(1, round(ttl_seconds * 1000)) if ttl_seconds else 0
        self._prefix = prefix
        self._commit = self._redis.register_script(_COMMIT)
        self._delete = self._redis.register_script(_DELETE)
        self._unlock = self._redis.register_script(_UNLOCK)
        self._extend = self._redis.register_script(_EXTEND)
        self._put_memory = self._redis.register_script(_PUT_MEMORY)
        self._parsed = ParsedMetas()
        self._index = f"{prefix}:index"
        self._offset: float | None = None  # Redis's clock minus ours
        self._memory_checked = 0.0  # monotonic time of the last INFO memory
        self._headroom: int | None = None  # bytes below maxmemory then; None: no limit

    async def load(self, tenant: str, session_id: str) -> SessionMeta | None:
        meta_key = self._key(tenant, session_id, "meta")
        data = cast("bytes | None", await self._redis.hget(meta_key, "data"))
        if data is None:
            return await self._legacy(tenant, session_id)
        return self._parsed(data)

    async def messages(
        self, tenant: str, session_id: str, start: int, end: int
    ) -> list[StoredMessage]:
        if end <= start:
            return []
        key = self._key(tenant, session_id, "msgs")
        entries = cast("list[bytes]", await self._redis.lrange(key, start, end - 1))
        if len(entries) != end - start:
            raise LookupError(f"session is missing messages in [{start}, {end})")
        return await parsed(entries, StoredMessage.from_dict)

    async def checkpoints(self, tenant: str, session_id: str, start: int = 0) -> list[Checkpoint]:
        key = self._key(tenant, session_id, "ckpts")
        entries = cast("list[bytes]", await self._redis.lrange(key, start, -1))
        return await parsed(entries, Checkpoint.from_dict)

    async def commit(self, change: Commit) -> bool:
        """Compare-and-set; False if someone else wrote (or deleted) the session first.
        The script runs by the deadline on Redis's own clock, or does nothing; with
        `release`, only while that turn lock is not another's (`LeaseLost`)."""
        meta, expected_version, keep = change.meta, change.expected_version, change.keep
        appended, checkpoints, release = change.appended, change.checkpoints, change.release
        plan, inserts = change.plan, change.inserts
        offset = await self._clock_offset()
        entries, summaries = await serialized(appended), await serialized(checkpoints)
        deadline = time.time() + COMMIT_SECONDS + offset  # from when it is sent
        data = orjson.dumps(meta.to_dict())
        # One argument an entry, as Redis reads them fastest: as one framed argument the
        # script split, 87,381 messages held Redis (every replica's store) ~400 ms, not
        # ~200, to spare this process's event loop ~150 ms of redis-py's packing.
        args: list[Any] = [
            expected_version,
            keep,
            meta.checkpoints - len(checkpoints),
            self._ttl_ms,
            meta.version,
            data,
            len(checkpoints),
            release or "",
            round(deadline * 1000),
            plan or "",
            PLANS_KEPT,
            inserts or "",
            *entries,
            *summaries,
        ]
        keys = [
            *self._keys(meta.tenant, meta.session_id),
            self._lock_key(meta.tenant, meta.session_id, "turn"),
        ]
        if expected_version == 0:  # indexed first, so no stored session is ever unlisted
            await self._redis.zadd(self._index, {_member(meta.tenant, meta.session_id): 0})
        answer = await self._commit(keys=keys, args=args)
        if answer == -1:
            raise LateCommit("the commit reached Redis after its deadline")
        if answer == -2:
            raise LeaseLost("the turn lock lapsed and the session went on without the turn")
        done = bool(answer)
        if done:
            self._parsed.remember(data, meta)
        return done

    async def plans(self, tenant: str, session_id: str) -> list[bytes]:
        plans = await self._redis.lrange(self._key(tenant, session_id, "plans"), 0, -1)
        return list(cast("list[bytes]", plans))

    async def inserts(self, tenant: str, session_id: str) -> bytes | None:
        found = await self._redis.hget(self._key(tenant, session_id, "meta"), "inserts")
        return cast("bytes | None", found)

    async def delete(self, tenant: str, session_id: str) -> bool:
        existed = bool(await self._delete(keys=self._keys(tenant, session_id)))
        await self._redis.zrem(self._index, _member(tenant, session_id))
        return existed

    async def sessions(
        self, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[SessionMeta]:
        """From the index (a sorted set of `tenant:session`, ordered by bytes); entries of
        sessions that expired meanwhile are dropped from it as they are met."""
        prefix = f"{tenant}:".encode() if tenant is not None else b""
        low = b"(" + _member(*after) if after else b"[" + prefix
        high = b"[" + prefix + b"\xff" if tenant is not None else b"+"
        found: list[SessionMeta] = []
        while len(found) < limit:
            members = cast(
                "list[bytes]", await self._redis.zrangebylex(self._index, low, high, 0, limit)
            )
            if not members:
                break
            for member in members:
                owner, _, session_id = member.decode().partition(":")
                meta_key = self._key(owner, session_id, "meta")
                data = cast("bytes | None", await self._redis.hget(meta_key, "data"))
                if data is None:
                    await self._redis.zrem(self._index, member)
                elif len(found) < limit:
                    found += self._parsed.listed([data])
            low = b"(" + members[-1]
        return found

    async def memory(self, tenant: str, memory_id: str) -> tuple[int, bytes] | None:
        version, data = cast(
            "list[bytes | None]",
            await self._redis.hmget(self._memory_key(tenant, memory_id), ["version", "data"]),
        )
        return (int(version), data) if version is not None and data is not None else None

    async def put_memory(self, tenant: str, memory_id: str, expected: int, data: bytes) -> bool:
        key = self._memory_key(tenant, memory_id)
        return bool(await self._put_memory(keys=[key], args=[expected, data]))

    async def delete_memory(self, tenant: str, memory_id: str) -> bool:
        return bool(await self._redis.delete(self._memory_key(tenant, memory_id)))

    def _memory_key(self, tenant: str, memory_id: str) -> str:
        return f"{self._prefix}:memory:{{{tenant}:{memory_id}}}"

    async def writable(self, need: int = 0) -> None:
        """Raise if Redis has a `maxmemory` and less than `need` bytes below it (it would
        refuse the turn's commit). Asked at most once a second (`INFO memory`); that it
        answers at all is learned from the turn's own reads."""
        now = time.monotonic()
        if now >= self._memory_checked + _MEMORY_EVERY:
            info = await self._redis.info("memory")
            self._memory_checked = now
            self._headroom = _headroom(info)
        if self._headroom is not None and self._headroom < need:
            raise OutOfMemoryError("less memory below maxmemory than a turn needs")

    async def ping(self) -> None:
        """A real write, as a commit makes one: a Redis at its `maxmemory` answers reads
        and refuses writes."""
        await self._redis.set(f"{self._prefix}:probe", b"1", px=60_000)
        self._memory_checked = 0.0  # and the next look at its memory is now
        self._offset = None  # and at its clock

    async def _clock_offset(self) -> float:
        """Redis's clock minus ours (seconds), learned once and again on each readiness
        check: commit deadlines are set on the clock that enforces them."""
        if self._offset is None:
            before = time.time()
            seconds, micros = await self._redis.time()
            after = time.time()
            self._offset = seconds + micros / 1e6 - (before + after) / 2
        return self._offset

    async def close(self) -> None:
        await self._redis.aclose()

    async def try_lock(
        self,
        tenant: str,
        session_id: str,
        seconds: float,
        name: LockName,
        token: str | None = None,
    ) -> str | None:
        token = token or secrets.token_hex(16)
        key = self._lock_key(tenant, session_id, name)
        acquired = await self._redis.set(key, token, nx=True, px=_ms(seconds))
        return token if acquired else None

    async def extend(
        self, tenant: str, session_id: str, token: str, seconds: float, name: LockName
    ) -> bool:
        key = self._lock_key(tenant, session_id, name)
        return bool(await self._extend(keys=[key], args=[token, _ms(seconds)]))

    async def unlock(self, tenant: str, session_id: str, token: str, name: LockName) -> None:
        """Release the lock only if we still hold it (it may have expired and been retaken)."""
        await self._unlock(keys=[self._lock_key(tenant, session_id, name)], args=[token])

    def _lock_key(self, tenant: str, session_id: str, name: LockName) -> str:
        return self._key(tenant, session_id, "lock" if name == "summary" else "turn")

    async def _legacy(self, tenant: str, session_id: str) -> SessionMeta | None:
        """A session written by release 0.1 (meta fields in the HASH, entries without
        chain values): converted to this layout on first read."""
        from proxy.sessions.stores.legacy import convert

        meta_key, msgs_key, *_ = self._keys(tenant, session_id)
        raw = cast("dict[bytes, bytes]", await self._redis.hgetall(meta_key))
        if not raw or b"head" not in raw:
            return None
        fields = {key.decode(): value.decode() for key, value in raw.items()}
        entries = await self._redis.lrange(msgs_key, 0, -1)
        meta, messages, checkpoints = convert(
            {
                "tenant": fields["tenant"],
                "session_id": fields["session_id"],
                "transcript": [orjson.loads(entry) for entry in entries],
                "head": fields["head"],
                "checkpoints": orjson.loads(fields["checkpoints"]),
                "version": int(fields["version"]),
                "created": float(fields["created"]),
                "updated": float(fields["updated"]),
            }
        )
        # Rewritten in place, at the same version: the entries gain their chain values.
        converted = meta.evolve(checkpoints=len(checkpoints))
        await self._redis.zadd(self._index, {_member(tenant, session_id): 0})
        await self.commit(Commit(converted, converted.version, 0, messages, checkpoints))
        return await self.load(tenant, session_id)

    def _keys(self, tenant: str, session_id: str) -> list[str]:
        suffixes = ("meta", "msgs", "ckpts", "plans")
        return [self._key(tenant, session_id, suffix) for suffix in suffixes]

    def _key(self, tenant: str, session_id: str, suffix: str) -> str:
        # Tenants never contain ":" (see tenant_id), so user-chosen session ids cannot
        # reach another tenant; no suffix ends another (nor "}:" and another), so no session
        # id can alias another session's keys. Whatever braces a session id holds, all
        # keys of one session share the same hash tag (the first {...}).
        if ":" in tenant:
            raise ValueError("tenant must not contain ':'")
        return f"{self._prefix}:{{{tenant}:{session_id}}}:{suffix}"


def _headroom(info: dict[str, Any]) -> int | None:
    """Bytes Redis may still take before `maxmemory` (a cluster node reports its own;
    a cluster's INFO maps each node to its fields: the fullest node counts)."""
    nodes = [info] if "used_memory" in info else [v for v in info.values() if isinstance(v, dict)]
    limits = [
        int(node["maxmemory"]) - int(node["used_memory"])
        for node in nodes
        if int(node.get("maxmemory", 0) or 0) > 0
    ]
    return min(limits) if limits else None


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _member(tenant: str, session_id: str) -> bytes:
    return f"{tenant}:{session_id}".encode()
