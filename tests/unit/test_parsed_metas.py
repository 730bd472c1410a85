"""`ParsedMetas`: the stores' parsed meta records, remembered by their bytes, bounded in
number, and each as small as its record (issue 36's soak: remembered records kept a
fold's recall index and facts ledger alive, which the record does not hold)."""

from __future__ import annotations

from dataclasses import replace

import orjson

from proxy.facts.ledger import Fact
from proxy.recall.index import segment
from proxy.sessions.records import ParsedMetas
from tests.unit.sessions_factory import checkpoint, entries, meta


def _folded(session_id: str = "s"):
    transcript = entries(*(f"the payments lead is Dana, turn {i}" for i in range(6)))
    made = replace(
        checkpoint(transcript, 4),
        index=segment(0, [s.message for s in transcript[:4]], "genesis"),
        ledger=(Fact("text", "payments lead", "Dana", 0, 1.0),),
    )
    record = meta(transcript, session_id=session_id, checkpoints=[made])
    return record, orjson.dumps(record.to_dict())


def test_a_remembered_record_is_what_its_bytes_say_without_the_archive() -> None:
    record, data = _folded()
    assert record.checkpoint is not None and record.checkpoint.index is not None
    parsed = ParsedMetas()
    remembered = parsed.remember(data, record)
    assert parsed(data) is remembered  # served from memory, not parsed again
    assert remembered.checkpoint is not None
    assert (remembered.checkpoint.index, remembered.checkpoint.ledger) == (None, None)
    # As a replica that only read the bytes has it.
    assert remembered == ParsedMetas()(data)
    assert remembered.checkpoint.text == record.checkpoint.text


def test_a_record_without_an_archive_is_kept_as_it_is() -> None:
    record, data = _folded()
    plain = record.evolve(checkpoint=record.checkpoint.without_archive())
    assert ParsedMetas().remember(data, plain) is plain


def test_the_records_remembered_are_bounded() -> None:
    parsed = ParsedMetas(size=3)
    records = [_folded(f"s{i}") for i in range(5)]
    kept = [parsed.remember(data, record) for record, data in records]
    assert len(parsed._metas) == 3
    assert parsed(records[-1][1]) is kept[-1]
    assert parsed(records[0][1]) is not kept[0]  # forgotten: parsed again
