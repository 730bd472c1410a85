"""Response ids name their session to the proxy alone, for their tenant alone."""

from __future__ import annotations

import base64

import pytest

from proxy.doors.responses.items import ResponseIds
from proxy.errors import ProxyError

SECRET = b"0" * 64
SESSION = "A-private-session-name ☃"


def test_an_id_reads_back_for_its_tenant_and_shows_nothing_of_the_session() -> None:
    ids = ResponseIds(SECRET)
    minted = ids.mint("team-a", SESSION, 7)
    assert ids.read("team-a", minted) == (SESSION, 7)
    sealed = minted.rsplit(".", 1)[1]
    plain = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))
    assert SESSION.encode() not in plain and b"private" not in plain
    assert ResponseIds(b"1" * 64).mint("team-a", SESSION, 7) != minted  # the secret seals
    with pytest.raises(ProxyError):
        ids.read("team-b", minted)
    with pytest.raises(ProxyError):
        ids.read("team-a", minted[:-2] + ("AA" if minted[-2:] != "AA" else "BB"))


def test_ids_minted_before_names_were_sealed_are_still_read() -> None:
    """A client mid-conversation across an upgrade continues where it was."""
    ids = ResponseIds(SECRET)
    mac = ids._mac("team-a", SESSION, 3)
    legacy = base64.urlsafe_b64encode(SESSION.encode()).decode().rstrip("=")
    assert ids.read("team-a", f"resp_{mac}.3.{legacy}") == (SESSION, 3)


def test_a_reference_in_a_long_input_is_found_in_the_clients_own_json() -> None:
    """`References.resolve` looks for `item_reference` in the body's own bytes where the
    body holds the input as orjson writes it (`Written`), and in the input's JSON
    otherwise: found either way (here an id that names nothing: a 400), and a long input
    without one is left as it is."""
    import asyncio
    from typing import Any, cast

    import orjson

    from proxy.conversation.needles import needles_in
    from proxy.doors.responses.items import References
    from proxy.doors.translations import Written

    references = References(ResponseIds(SECRET), cast(Any, None))  # no store is read
    items: list[Any] = [{"role": "user", "content": f"message {n}"} for n in range(20)]
    for with_reference in (False, True):
        source = (
            [*items, {"type": "item_reference", "id": "msg_bogus.1"}] if with_reference else items
        )
        body = {"model": "m", "input": source}
        raw = orjson.dumps(body)
        start = raw.index(b'"input":') + len(b'"input":')
        for written in (
            Written(source, memoryview(raw)[start:-1]),
            Written(source, memoryview(raw)[start:-1], needles_in(raw)),
            Written(list(source), memoryview(b"[]")),
            None,
        ):
            call = references.resolve(dict(body), "team-a", written)
            if with_reference:
                with pytest.raises(ProxyError):
                    asyncio.run(call)
            else:
                assert asyncio.run(call) is None
