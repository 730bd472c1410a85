"""The HTTP boundary: the Starlette application and its routes (`app`), proxy keys and
tenants (`auth`), browser safety (`browser`), bounded body reads (`bodies`), the one table
that maps domain errors to HTTP (`errors`), header names (`headers`), the sessions API
(`sessions`), the session viewer (`viewer`, with `static/`) and each request's metrics
and log line (`telemetry`). Only this layer knows status codes; it may import every
package but `proxy.cli`.
"""
