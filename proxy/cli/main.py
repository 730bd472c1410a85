"""`context-proxy serve`: validate the config, then hand the app to uvicorn; and the
commands beside it (`sessions`, `demo`, `hash-key`, `--version`)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import getpass
import importlib.metadata
import ipaddress
import os
import sys
import tempfile
from pathlib import Path

from proxy.cli import sessions as sessions_cli
from proxy.config.settings import CONFIG_ENV, ConfigError, Settings, hash_key, load_settings
from proxy.observability.metrics import MULTIPROCESS_ENV

__all__ = ["anonymous_refusal", "main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="context-proxy", description=__doc__)
    parser.add_argument("--version", action="version", version=f"context-proxy {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", help=f"YAML config file (default: ${CONFIG_ENV}, else none)")
    serve.add_argument("--host", help="bind address (default: server.host)")
    serve.add_argument("--port", type=int, help="port (default: server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (default: server.workers)")
    demo = commands.add_parser(
        "demo", help="a scripted conversation through the proxy and the local model"
    )
    demo.add_argument("--turns", type=int, default=40, help="conversation turns (default: 40)")
    demo.add_argument("--n-ctx", type=int, default=2048, help="model context window")
    commands.add_parser(
        "hash-key", help="print a proxy key's hash for `auth.keys[].key_hash` (key from stdin)"
    )
    sessions_cli.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "sessions":
        return sessions_cli.run(args)
    if args.command == "hash-key":
        key = getpass.getpass("key: ") if sys.stdin.isatty() else sys.stdin.readline()
        if not key.strip():
            print("context-proxy: no key given", file=sys.stderr)
            return 2
        print(hash_key(key.strip()))
        return 0
    if args.command == "demo":
        from proxy.cli.demo import main as demo_main
        from proxy.cli.local import LocalModelUnavailable

        try:
            return demo_main(args.turns, args.n_ctx)
        except LocalModelUnavailable as exc:
            print(f"context-proxy: {exc}", file=sys.stderr)
            return 2

    if argv is None:  # the command itself, not a caller's function call
        _with_the_system_malloc()
    if args.config:
        os.environ[CONFIG_ENV] = os.path.abspath(args.config)
    try:
        settings = load_settings()
        _check_upstream(settings)
    except ConfigError as exc:
        print(f"context-proxy: {exc}", file=sys.stderr)
        return 2

    host = args.host or settings.server.host
    refusal = anonymous_refusal(settings, host)
    if refusal:
        print(f"context-proxy: {refusal}", file=sys.stderr)
        return 2

    workers = args.workers or settings.server.workers
    if workers > 1:
        _prepare_multiprocess_metrics()
    _keep_large_buffers_apart()

    import uvicorn

    from proxy.observability.logs import log_config

    # Workers import the app by name and read the same config through the environment.
    uvicorn.run(
        "proxy.http.app:create_app",
        factory=True,
        host=host,
        port=args.port or settings.server.port,
        workers=workers,
        log_config=log_config(settings.server.log_format, settings.server.log_level),
        # Annotated `int`; uvicorn waits it out with asyncio.wait_for, which takes a float.
        timeout_graceful_shutdown=settings.server.shutdown_grace_seconds,  # type: ignore[arg-type]
        access_log=False,  # the proxy writes its own line per request
    )
    return 0


# A long conversation's request is megabytes of JSON, parsed, serialized and sent each
# turn. glibc's malloc serves such buffers from mmap at first, then raises its mmap
# threshold each time one is freed, and its trim threshold with it, so the heap keeps
# its high-water mark. Fixed, the trim threshold stays low (the heap gives back its top);
# at 32 MiB, buffers up to that come from the heap: a buffer in mmap of its own costs
# its page faults each time (0.4-0.9 ms for 1.4 MB here, 0.03 ms from the heap). Two
# proxies taking turns on the same 5,000-message turns: 4-5 ms less CPU a request at
# 32 MiB than at 256 KiB (a third), resident memory within 3% (docs/performance.md).
_MMAP_THRESHOLD = 32 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number, in glibc's malloc.h


# Python keeps its small objects in arenas of 1 MiB that it gives back only when every
# object in them is gone; a request of megabytes of JSON makes millions, a few of which
# stay (a cache entry, a session's index), so the arenas the peak took stay too. After
# the issue 51 fuzz (4,000 hostile bodies) they had grown from 142 to 290-310, and the
# process stayed at 1.66-1.69 times its fresh size however often the heap was trimmed.
# With glibc's malloc for small objects too, the heap trimmer (`proxy.http.heap`) gives
# back each free page: 1.32 times, for 10 MiB more at start.
_MALLOC = "malloc"


def _with_the_system_malloc() -> None:
    """Run again with `PYTHONMALLOC=malloc` (read only when Python starts: so the process
    replaces itself, same pid, before it has done anything), unless the operator set
    PYTHONMALLOC; and on glibc only."""
    if "PYTHONMALLOC" in os.environ or not _glibc():
        return
    os.environ["PYTHONMALLOC"] = _MALLOC
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)


def _glibc() -> bool:
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    return False


def _keep_large_buffers_apart() -> None:
    """Fix malloc's mmap threshold for this process and, through the environment its
    workers start with, for theirs; unless the operator set one. Nothing on a libc
    other than glibc."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(_MMAP_THRESHOLD)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def _check_upstream(settings: Settings) -> None:
    """What only LiteLLM can check (each deployment's provider, the Router's settings,
    the summary model's route), checked here, so it fails in one line before uvicorn
    starts rather than as a traceback in each worker."""
    from proxy.upstream.client import Upstream

    Upstream(settings).close_router()


def _version() -> str:
    try:
        return importlib.metadata.version("context-proxy")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown"


def anonymous_refusal(settings: Settings, host: str) -> str | None:
    """Why the proxy will not serve on `host`, if it will not: with no keys, anyone who
    can reach a non-loopback address spends the provider keys and reads the anonymous
    tenant's sessions."""
    if settings.auth.required() or settings.auth.allow_anonymous or _is_loopback(host):
        return None
    return (
        f"refusing to serve on {host} without keys: configure auth.keys"
        " (see docs/configuration.md), use auth.mode: passthrough, or set"
        " auth.allow_anonymous: true to accept the risk"
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def _prepare_multiprocess_metrics() -> None:
    """Several workers share one /metrics through prometheus-client's multiprocess mode:
    a fresh directory, named before any worker imports prometheus_client."""
    directory = os.environ.get(MULTIPROCESS_ENV)
    if directory:
        for stale in Path(directory).glob("*.db"):
            stale.unlink()
    else:
        directory = tempfile.mkdtemp(prefix="context-proxy-metrics-")
        os.environ[MULTIPROCESS_ENV] = directory
