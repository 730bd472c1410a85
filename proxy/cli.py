"""`context-proxy serve`: validate the config, then hand the app to uvicorn."""

from __future__ import annotations

import argparse
import os
import sys

from proxy.config import CONFIG_ENV, ConfigError, load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="context-proxy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", help=f"YAML config file (default: ${CONFIG_ENV}, else none)")
    serve.add_argument("--host", help="bind address (default: server.host)")
    serve.add_argument("--port", type=int, help="port (default: server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (default: server.workers)")
    args = parser.parse_args(argv)

    if args.config:
        os.environ[CONFIG_ENV] = os.path.abspath(args.config)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"context-proxy: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    # Workers import the app by name and read the same config through the environment.
    uvicorn.run(
        "proxy.app:create_app",
        factory=True,
        host=args.host or settings.server.host,
        port=args.port or settings.server.port,
        workers=args.workers or settings.server.workers,
        log_level="info",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
