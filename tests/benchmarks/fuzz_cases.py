"""The fuzz benchmark's cases: `case(seed, index)` is one request, always the same.

The first cases are the guaranteed ones (`guaranteed()`): every repro of issue 51, then
every way the upstream misbehaves on every door, streamed and not. After them, each
case draws from `fuzz_bodies`' mix: mutated valid bodies, a hostile upstream, a repro
again, or a valid body.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

from tests.benchmarks.fuzz_bodies import (
    BUILDERS,
    CHAT,
    CLAUDE,
    HOSTILE_UPSTREAM,
    MODELS,
    MUTATED,
    REPRO,
    REPRO_WEIGHTS,
    REPROS,
    RESPONSES,
    SESSIONS,
    UPSTREAM_WEIGHTS,
    Case,
    Raw,
    dumps,
    nested,
    valid,
    words,
)
from tests.benchmarks.fuzz_upstream import KINDS

SESSION_HEADER = "X-Session-Id"
NATIVE = {"chat": CHAT, "messages": CLAUDE, "count_tokens": CLAUDE, "responses": RESPONSES}
DOORS = {"chat": 0.34, "messages": 0.26, "count_tokens": 0.08, "responses": 0.32}
UPSTREAM_DOORS = ("chat", "messages", "responses")
HEAVY = ("huge", "endless-event")

Tree = Any
Mutation = Callable[[random.Random, Tree], Tree]


# -- where in a body ---------------------------------------------------------------------


def paths(value: Tree, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `value` (its own root aside)."""
    out: list[tuple[Any, ...]] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, inner in items:
        out.append((*prefix, key))
        out += paths(inner, (*prefix, key))
    return out


def _parent(tree: Tree, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        tree = tree[key]
    return tree


def _place(rng: random.Random, tree: Tree, wanted: type | None = None) -> tuple[Any, ...] | None:
    found = [
        p for p in paths(tree) if wanted is None or isinstance(_parent(tree, p)[p[-1]], wanted)
    ]
    return rng.choice(found) if found else None


def _set(rng: random.Random, tree: Tree, value: Any, wanted: type | None = None) -> Tree:
    path = _place(rng, tree, wanted)
    if path is None:
        return value if not isinstance(tree, dict) else tree | {"x": value}
    _parent(tree, path)[path[-1]] = value
    return tree


# -- what goes there ---------------------------------------------------------------------

LONE = (Raw(b'"\\ud800"'), Raw(b'"a\\udfff\\ud800b"'), Raw(b'"\xff\xfe\xfd"'), Raw(b'"\xc0\xaf"'))
ODD_TEXTS = (
    "",
    "\u0000",
    "\u202eevil\u202c",
    "\u200b" * 1000,
    "e\u0301" * 5000,
    "👩‍👩‍👧‍👦" * 500,
    "\ufeffhi",
    "\x00\x01\x1f\x7f",
    "\u2028\u2029",
    "𝕳𝖊𝖑𝖑𝖔",
    "%s%n{0}${{x}}",
    "../../etc/passwd",
)
HUGE_NUMBERS: tuple[Any, ...] = (
    2**63,
    2**64 - 1,
    -(2**63),
    1e308,
    -1e308,
    Raw(b"1" * 400),
    Raw(b"-1e999"),
)
NAN_LIKE: tuple[Any, ...] = (
    Raw(b"NaN"),
    Raw(b"Infinity"),
    Raw(b"-Infinity"),
    Raw(b"-0"),
    Raw(b"1e-999"),
)
NAN_LIKE += ("NaN", "Infinity", Raw(b"0x10"), Raw(b"+1"), Raw(b".5"))
ROLES: tuple[Any, ...] = (
    "developer",
    "function",
    "tool",
    "",
    "SYSTEM",
    "ai",
    "model",
    "user ",
    None,
    5,
)
ROLES += ("assistant\u0000", ["user"], {"role": "user"})
FIELDS = (
    "cache_control",
    "__proto__",
    "",
    "x" * 1000,
    "metadata",
    "prompt_cache_key",
    "container",
    "thinking",
    "betas",
    "n",
    "logprobs",
    "parallel_tool_calls",
    "previous_response_id",
    "store",
    "background",
    "mcp_servers",
    "service_tier",
    "tool_choice",
    "response_format",
    "reasoning",
    "include",
    "truncation",
)
ID_KEYS = ("id", "tool_call_id", "tool_use_id", "call_id")


def odd_value(rng: random.Random) -> Any:
    """A value of any type, likely the wrong one wherever it goes."""
    pick = rng.randrange(8)
    if pick == 0:  # a copy: a later mutation of the same body may change it in place
        return copy.deepcopy(
            rng.choice((None, True, False, 0, -1, 1.5, "", "x", [], {}, [[["x"]]]))
        )
    if pick == 1:
        return rng.choice(HUGE_NUMBERS)
    if pick == 2:
        return rng.choice(NAN_LIKE)
    if pick == 3:
        return rng.choice(ODD_TEXTS)
    if pick == 4:
        return rng.choice(LONE)
    if pick == 5:
        return {"a": {"b": [1, {"c": None}]}, "type": rng.choice(("text", 3, None))}
    if pick == 6:
        return [rng.choice((1, "x", None, {})) for _ in range(rng.randint(1, 5))]
    return words(rng, 1, 5)


# -- the mutations -----------------------------------------------------------------------


def wrong_type(rng: random.Random, tree: Tree) -> Tree:
    return _set(rng, tree, odd_value(rng))


def deleted(rng: random.Random, tree: Tree) -> Tree:
    path = _place(rng, tree)
    if path is not None:
        del _parent(tree, path)[path[-1]]
    return tree


def huge_number(rng: random.Random, tree: Tree) -> Tree:
    return _set(rng, tree, rng.choice(HUGE_NUMBERS))


def nan_like(rng: random.Random, tree: Tree) -> Tree:
    return _set(rng, tree, rng.choice(NAN_LIKE))


def unicode(rng: random.Random, tree: Tree) -> Tree:
    """An odd string where a string was, or a key spelt oddly (a homoglyph, a NUL)."""
    if rng.random() < 0.3 and isinstance(tree, dict) and tree:
        key = rng.choice(list(tree))
        odd = rng.choice((key.replace("o", "о"), key + "\u0000", key.upper(), key + " "))
        tree[odd] = tree.pop(key)
        return tree
    return _set(rng, tree, rng.choice((*ODD_TEXTS, *LONE)), str)


def huge_array(rng: random.Random, tree: Tree) -> Tree:
    """A list (or any value) as thousands of items, up to ~3 MB."""
    path = _place(rng, tree, list) or _place(rng, tree)
    if path is None:
        return tree
    parent = _parent(tree, path)
    item = (parent[path[-1]] or [1])[0] if isinstance(parent[path[-1]], list) else parent[path[-1]]
    size = max(1, len(dumps(item)))
    count = min(rng.choice((1000, 10_000, 100_000)), (3 << 20) // size)
    parent[path[-1]] = [item] * count  # one object many times: it is applied last
    return tree


def deep(rng: random.Random, tree: Tree) -> Tree:
    return _set(rng, tree, nested(rng.choice((64, 200, 255, 256, 300, 1000, 10_000))))


def duplicate_ids(rng: random.Random, tree: Tree) -> Tree:
    """Every id the same, or a message of the conversation twice."""
    places = [p for p in paths(tree) if p[-1] in ID_KEYS]
    if places and rng.random() < 0.6:
        for path in places:
            _parent(tree, path)[path[-1]] = "dup_1"
        return tree
    for key in ("messages", "input"):
        items = tree.get(key) if isinstance(tree, dict) else None
        if isinstance(items, list) and items:
            items.insert(rng.randrange(len(items)), copy.deepcopy(rng.choice(items)))
    return tree


def unknown_role(rng: random.Random, tree: Tree) -> Tree:
    for key in ("messages", "input"):
        items = tree.get(key) if isinstance(tree, dict) else None
        if isinstance(items, list) and items and isinstance(items[-1], dict):
            role = copy.deepcopy(rng.choice(ROLES))  # its own, as `odd_value`'s
            rng.choice([i for i in items if isinstance(i, dict)] or [{}])["role"] = role
    return tree


def unknown_field(rng: random.Random, tree: Tree) -> Tree:
    dicts = [p for p in paths(tree) if isinstance(_parent(tree, p)[p[-1]], dict)]
    place = rng.choice(dicts) if dicts and rng.random() < 0.5 else None
    target = _parent(tree, place)[place[-1]] if place else tree
    if isinstance(target, dict):
        target[rng.choice(FIELDS)] = odd_value(rng)
    return tree


def long_string(rng: random.Random, tree: Tree) -> Tree:
    size = rng.choice((10_000, 100_000, 1_000_000))
    text = rng.choice(("x" * size, (words(rng, 50, 50) + " ") * (size // 300)))
    return _set(rng, tree, text, str)


def other_door(rng: random.Random, tree: Tree) -> Tree:
    """A valid body of another door's API."""
    door = rng.choice(list(BUILDERS))
    return BUILDERS[door](rng, rng.choice(MODELS), words(rng), rng.random() < 0.5)


MUTATIONS: dict[str, Mutation] = {
    "wrong type": wrong_type,
    "deleted": deleted,
    "huge number": huge_number,
    "NaN-like": nan_like,
    "unicode": unicode,
    "huge array": huge_array,
    "deep": deep,
    "duplicate ids": duplicate_ids,
    "unknown role": unknown_role,
    "unknown field": unknown_field,
    "long string": long_string,
    "other door's body": other_door,
}
# Applied last, in this order, each at most once: a huge array repeats one object, so
# whatever changed inside it afterwards would be repeated as often.
LAST = ("long string", "huge array")
WEIGHTS = {"wrong type": 6, "deleted": 4, "unknown field": 3, "huge array": 0.5}
WEIGHTS |= {"long string": 0.5, "other door's body": 0.5}


def not_an_object(rng: random.Random, body: bytes) -> bytes:
    """The body's bytes broken: not JSON, not an object, cut short, prefixed, empty."""
    pick = rng.randrange(9)
    if pick == 0:
        return body[: rng.randrange(max(1, len(body)))]
    if pick == 1:
        return b"\xef\xbb\xbf" + body
    if pick == 2:
        return body + b" garbage"
    if pick == 3:
        return b'{"model": 5, ' + body[1:]  # a duplicate key (when the body has `model`)
    if pick == 4:
        return b"\x1f\x8b\x08\x00" + body  # gzip's magic, and no gzip
    return rng.choice((b"", b"[]", b"null", b'"x"', b"5", b"{", b"\x00" * 100))


def odd_headers(rng: random.Random, headers: dict[str, str]) -> str:
    """An odd session header, session mode, content type or API version; its name."""
    name, value = rng.choice(
        (
            (SESSION_HEADER, rng.choice(("", " ", "a" * 10_000, "../../x", "s\xe9ssion", "a\tb"))),
            ("X-Session-Mode", rng.choice(("APPEND", "nonsense", "", "append, full"))),
            ("Content-Type", rng.choice(("text/plain", "application/json; charset=latin-1", ""))),
            ("Content-Encoding", "gzip"),
            ("anthropic-version", rng.choice(("x", "2023-06-01" * 100))),
            ("anthropic-beta", "a," * 500),
        )
    )
    headers[name] = value
    return name


# -- the cases ---------------------------------------------------------------------------


def guaranteed() -> list[tuple[str, ...]]:
    """Each repro by name and each (upstream kind, door, streamed) with a model in turn;
    the heavy ones (megabytes each way) spread among the others, so that only a few
    are in flight at once."""
    light: list[tuple[str, ...]] = [("repro", str(n)) for n in range(len(REPROS))]
    heavy = [light.pop(n) for n, (name, *_) in reversed(list(enumerate(REPROS))) if "MB" in name]
    for k, kind in enumerate(KINDS):
        for d, door in enumerate(UPSTREAM_DOORS):
            for s in (0, 1):
                what = ("upstream", kind, door, MODELS[(k + d + s) % 3], str(s))
                (heavy if kind in HEAVY else light).append(what)
    every = len(light) // len(heavy) + 1
    out = []
    for n, other in enumerate(light):
        if n % every == 0 and heavy:
            out.append(heavy.pop())
        out.append(other)
    return out + heavy


def case(seed: int, index: int) -> Case:
    """The `index`th request of the run seeded `seed`."""
    rng = random.Random(seed * 1_000_003 + index)
    fixed = guaranteed()
    if index < len(fixed):
        what = fixed[index]
        if what[0] == "repro":
            return _repro(rng, index, int(what[1]))
        _, kind, door, model, streamed = what
        return _hostile(rng, index, kind, door, model, streamed == "1")
    draw = rng.random()
    if draw < REPRO:
        return _repro(rng, index, rng.choices(range(len(REPROS)), REPRO_WEIGHTS)[0])
    door = rng.choices(list(DOORS), list(DOORS.values()))[0]
    model = NATIVE[door] if rng.random() < 0.5 else rng.choice(MODELS)
    stream = door != "count_tokens" and rng.random() < 0.5
    if draw < REPRO + HOSTILE_UPSTREAM:
        door = door if door != "count_tokens" else "messages"
        kind = rng.choices(list(UPSTREAM_WEIGHTS), list(UPSTREAM_WEIGHTS.values()))[0]
        return _hostile(rng, index, kind, door, model, stream)
    headers = _session(rng)
    body = valid(rng, index, door, model, stream)
    if draw > REPRO + HOSTILE_UPSTREAM + MUTATED:
        return Case(index, "valid", door, model, dumps(body), stream, headers)
    return _mutated(rng, index, door, model, body, headers)


def valid_case(seed: int, index: int, door: str) -> Case:
    """A valid request to `door`'s own model, streamed every other one (the warm-up's)."""
    rng = random.Random(-(seed * 1_000_003 + index))
    stream = door != "count_tokens" and index % 2 == 1
    body = valid(rng, index, door, NATIVE[door], stream)
    return Case(index, "valid", door, NATIVE[door], dumps(body), stream)


def _session(rng: random.Random) -> dict[str, str]:
    return {SESSION_HEADER: f"fuzz-{rng.randrange(SESSIONS)}"} if rng.random() < 0.5 else {}


def _repro(rng: random.Random, index: int, number: int) -> Case:
    name, door, model, stream, session, build = REPROS[number]
    headers = {SESSION_HEADER: f"fuzz-repro-{index}"} if session else {}
    kind = f"repro: {name}{', streamed' if stream else ''}{', session' if session else ''}"
    return Case(index, kind, door, model, dumps(build(rng)), stream, headers)


def _hostile(
    rng: random.Random, index: int, kind: str, door: str, model: str, stream: bool
) -> Case:
    assert kind in KINDS
    text = f"[case {index}] {words(rng)} [[fuzz-upstream:{kind}]]"
    body = BUILDERS[door](rng, model, text, stream)
    name = f"upstream: {kind}{', streamed' if stream else ''}"
    return Case(index, name, door, model, dumps(body), stream, _session(rng), upstream=kind)


def _mutated(
    rng: random.Random, index: int, door: str, model: str, body: Tree, headers: dict[str, str]
) -> Case:
    names = list(MUTATIONS)
    body = copy.deepcopy(body)  # nothing a body shares with another is changed
    chosen = rng.choices(names, [WEIGHTS.get(n, 1.0) for n in names], k=rng.choice((1, 1, 2, 3)))
    chosen = list(dict.fromkeys(chosen))
    for name in sorted(chosen, key=lambda name: LAST.index(name) if name in LAST else -1):
        body = MUTATIONS[name](rng, body)
    stream = isinstance(body, dict) and body.get("stream") is True
    raw = dumps(body)
    if rng.random() < 0.05:
        raw = not_an_object(rng, raw)
        chosen.append("not an object")
    if rng.random() < 0.05:
        chosen.append("odd " + odd_headers(rng, headers))
    kind = "mutated: " + " + ".join(sorted(set(chosen)))
    return Case(index, kind, door, model, raw, stream, headers)
