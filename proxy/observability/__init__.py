"""What the proxy tells its operator: every Prometheus metric defined once
(`metrics`), one log line per request (`logs`), and credentials kept out of every text it
writes (`redaction`). Imports nothing of ours but the settings.
"""

__all__ = ["logs", "metrics", "redaction"]  # its modules, each with its own `__all__`
