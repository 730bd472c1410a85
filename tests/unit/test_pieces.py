"""A body sent in its pieces arrives as the bytes they make, with its length declared
(no chunked encoding a provider might refuse), and can be sent again as it was."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from proxy.upstream.pieces import Pieces

pytestmark = pytest.mark.unit


def test_a_body_in_pieces_arrives_whole_with_its_length() -> None:
    pieces = (b'{"model":"m","messages":', b"[" + b'"x",' * 100_000 + b'"y"]', b"}")
    received: list[tuple[str | None, str | None, bytes]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        received.append(
            (request.headers.get("Content-Length"), request.headers.get("Transfer-Encoding"), body)
        )
        return web.json_response({})

    async def run() -> None:
        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                body = Pieces(pieces)
                for _ in range(2):  # the same payload sent again, as a resend does
                    async with session.post(f"http://127.0.0.1:{port}/", data=body) as reply:
                        assert reply.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(run())
    whole = b"".join(pieces)
    assert received == [(str(len(whole)), None, whole)] * 2
