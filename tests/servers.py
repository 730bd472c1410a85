"""Run an ASGI app on a real loopback socket in a background thread."""

from __future__ import annotations

from proxy.local import serve_in_background as serve

__all__ = ["serve"]
