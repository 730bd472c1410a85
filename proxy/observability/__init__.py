"""What the proxy tells its operator: every Prometheus metric defined once
(`metrics`), one log line per request (`logs`), and credentials kept out of every text it
writes (`redaction`). Imports nothing of ours but the settings.
"""
