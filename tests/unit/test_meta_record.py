"""The meta record every turn rewrites: only what differs from what a reader assumes of
an absent field, read back whole, and the same as the whole record earlier releases
wrote (and still read, as replicas of two releases share a store). Entries read back
are parsed off the event loop when many or large."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from proxy.concurrency import MANY_MESSAGES
from proxy.costs.receipts import Receipt
from proxy.costs.usage import Usage
from proxy.sessions.records import Checkpoint, Fingerprint, SessionMeta, parsed

REQUIRED = {"tenant", "session_id", "version", "length", "head", "first", "totals"}
REQUIRED |= {"checkpoints", "tail", "created", "updated"}


def stored(meta: SessionMeta) -> dict[str, object]:
    return orjson.loads(orjson.dumps(meta.to_dict()))


def test_a_new_sessions_record_holds_only_what_every_reader_needs() -> None:
    meta = SessionMeta("t1", "s", version=1, length=2, head="h", first="f", totals={"c": 20})
    data = stored(meta)
    assert set(data) == REQUIRED
    assert SessionMeta.from_dict(data) == meta


def test_every_field_that_differs_from_its_default_is_kept() -> None:
    summary = Checkpoint(
        12,
        "chain",
        ("one", "two"),
        40,
        "m",
        3.0,
        {"c": 120},
        pinned=("Deliveries: 0",),
        kept=("<system-reminder>",),
        usage=Usage(100, 10, 0, 40),
        stubbed=(14,),
        stubs_saved={"c": 900},
    )
    meta = SessionMeta(
        "t1",
        "s",
        version=7,
        length=20,
        head="h",
        first="f",
        totals={"c": 200},
        checkpoint=summary,
        checkpoints=2,
        fingerprint=Fingerprint(19, 4096, "d" * 64, "g"),
        tail=("t",),
        frame="fr",
        settled=False,
        resent=True,
        origin=4,
        origin_head="oh",
        origin_totals={"c": 40},
        calibration={"m": 1.25},
        inserts="digest",
        created=1.5,
        updated=2.5,
        receipt=Receipt(0.1, 0.01, 0.5, 3, 0.0, 900, 2.0),
    )
    data = stored(meta)
    assert SessionMeta.from_dict(data) == meta
    assert data["receipt"] == {
        "spent": 0.1,
        "summaries": 0.01,
        "resend": 0.5,
        "turns": 3,
        "last_tokens": 900,
        "last_at": 2.0,
    }  # owed is 0.0, as absent


def test_a_whole_record_of_an_earlier_release_reads_as_the_compact_one() -> None:
    earlier = {  # as releases before the compact record wrote every field
        "tenant": "t1",
        "session_id": "s",
        "version": 1,
        "length": 2,
        "head": "h",
        "first": "f",
        "totals": {"c": 20},
        "checkpoint": {
            "covers_until": 1,
            "chain_hash": "c",
            "segments": ["one"],
            "pinned": [],
            "tokens": 3,
            "model": "m",
            "created": 1.0,
            "before": {},
        },
        "checkpoints": 1,
        "fingerprint": None,
        "tail": [],
        "frame": "",
        "settled": True,
        "resent": False,
        "origin": 0,
        "origin_head": "",
        "origin_totals": {},
        "calibration": {},
        "inserts": "",
        "created": 1.0,
        "updated": 2.0,
        "receipt": Receipt().to_dict(),
    }
    meta = SessionMeta.from_dict(earlier)
    compact = stored(meta)
    assert SessionMeta.from_dict(compact) == meta
    assert set(compact) == REQUIRED | {"checkpoint"}
    assert len(orjson.dumps(compact)) < len(orjson.dumps(earlier)) * 0.7


async def test_entries_read_back_are_parsed_off_the_event_loop_when_many_or_large() -> None:
    """A window of thousands of messages or a summary's archive of megabytes is parsed in
    a worker thread (87,381 messages held the loop ~1 s); a few small ones where read."""
    on_loop: list[bool] = []

    def reader(data: dict[str, Any]) -> dict[str, Any]:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return data

    few = [orjson.dumps({"n": n}) for n in range(3)]
    assert await parsed(few, reader) == [{"n": 0}, {"n": 1}, {"n": 2}]
    many = [orjson.dumps({"n": n}) for n in range(MANY_MESSAGES + 1)]
    assert len(await parsed(many, reader)) == MANY_MESSAGES + 1
    large = [orjson.dumps({"index": "x" * 2_000_000})]
    assert await parsed(large, reader) == [{"index": "x" * 2_000_000}]
    assert on_loop == [True] * 3 + [False] * (MANY_MESSAGES + 2)
