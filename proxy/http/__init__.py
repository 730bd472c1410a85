"""The HTTP boundary: the Starlette application, its routes and the turn handler every
door's route runs (`app`), a turn's stream as server-sent events (`sse`), proxy keys and
tenants (`auth`), browser safety (`browser`), bounded body reads (`bodies`), the one table
that maps domain errors to HTTP and the app's exception handlers (`errors`), header names
(`headers`), the sessions API (`sessions`), the session viewer (`viewer`, with
`static/`), giving the heap back (`heap`) and each request's metrics and log line
(`telemetry`). Only this layer knows status codes; it may import every package but
`proxy.cli`.
"""

__all__ = [
    "app",
    "auth",
    "bodies",
    "browser",
    "errors",
    "headers",
    "heap",
    "sessions",
    "sse",
    "telemetry",
    "viewer",
]  # its modules, each with its own `__all__`
