"""Server-sent events cut out of a stream's pieces (`proxy.upstream.reading`): the same
events however the bytes are split, each byte searched once however long an event
takes to arrive, and an event refused as soon as it passes the limit."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import UpstreamFailure
from proxy.upstream.reading import PART, EventReader, events_of

PIECE = 4096


def whole_events(data: bytes) -> list[bytes]:
    """The events of a stream read at once, by the SSE rules: lines end in CRLF or LF,
    a blank line ends an event."""
    events = data.replace(b"\r\n", b"\n").split(b"\n\n")[:-1]
    return [event.lstrip(b"\n") for event in events if event.lstrip(b"\n")]


def read(pieces: list[bytes], limit: int = 1 << 30) -> tuple[list[bytes], EventReader]:
    reader = EventReader(limit)
    events = [event for piece in pieces for event in reader.feed(piece)]
    return events, reader


LINE = st.sampled_from([b"data: {}", b'data: {"a": 1}', b"event: x", b": keep-alive", b""])
STREAM = st.lists(
    st.tuples(st.lists(LINE, min_size=1, max_size=4), st.sampled_from([b"\n", b"\r\n"])),
    max_size=12,
).map(lambda events: b"".join(end.join(lines) + end + end for lines, end in events))


@given(STREAM, st.lists(st.integers(min_value=0, max_value=400), max_size=20))
def test_the_events_are_the_same_however_the_bytes_are_split(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]
    events, reader = read(pieces)
    assert events == whole_events(data)
    assert reader.rest().strip() == b""


def test_an_event_that_never_ends_is_searched_once_per_byte() -> None:
    """2,000 reads of one event with no blank line: each byte searched once (a buffer
    grown and split again on every read searches the square of that)."""
    pieces = [b"data: " + b"x" * (PIECE - 6)] + [b"x" * PIECE] * 1999
    events, reader = read(pieces)
    assert events == []
    assert reader.scanned == PIECE * 2000
    assert reader.rest() == b"".join(pieces)


def test_a_piece_of_many_events_is_searched_once() -> None:
    piece = b"".join(b'data: {"n": %d}\n\n' % n for n in range(5000))
    events, reader = read([piece])
    assert len(events) == 5000
    assert reader.scanned == len(piece)


def test_an_event_split_at_its_blank_line_is_one_event() -> None:
    assert read([b"data: 1\n", b"\ndata: 2\r", b"\n\r\n"])[0] == [b"data: 1", b"data: 2"]


def test_an_event_past_the_limit_is_refused_as_soon_as_it_passes() -> None:
    reader = EventReader(limit=10 * PIECE)
    for _ in range(10):
        assert reader.feed(b"x" * PIECE) == []
    with pytest.raises(UpstreamFailure) as refused:
        reader.feed(b"x")  # one byte past: no need to wait for the rest of it
    assert "server.max_upstream_reply_bytes (40960 bytes)" in refused.value.message


def test_an_event_that_arrives_whole_past_the_limit_is_refused() -> None:
    with pytest.raises(UpstreamFailure):
        EventReader(limit=100).feed(b"data: " + b"x" * 200 + b"\n\n")


def test_events_within_the_limit_pass_however_many() -> None:
    events, _ = read([b"data: " + b"x" * 90 + b"\n\n"] * 1000, limit=100)
    assert len(events) == 1000


async def test_all_that_one_read_took_is_cut_into_parts() -> None:
    """One read of a fast provider's stream takes all the bytes that came (megabytes):
    they are cut into events `PART` bytes at a time, each part's yielded before the
    next is searched, every event whole and in order."""
    events = [b"data: %d" % n + b"x" * 1000 + b"\n\n" for n in range(2000)]
    piece = b"".join(events)

    async def pieces() -> AsyncIterator[bytes]:
        yield piece

    batches = [batch async for batch in events_of(pieces(), limit=1 << 20)]
    assert [event for batch in batches for event in batch] == events
    assert len(batches) >= len(piece) // PART
    assert max(sum(map(len, batch)) for batch in batches) <= PART + len(events[0])
