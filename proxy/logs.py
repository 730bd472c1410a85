"""Logging setup: one line per request, as text or JSON, never message content."""

from __future__ import annotations

import logging
from typing import Any

import orjson

# Attributes every LogRecord has; anything else was passed with `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(data, default=str).decode()


def log_config(log_format: str, level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for uvicorn (applied in every worker)."""
    formatter: dict[str, Any] = (
        {"()": "proxy.logs.JsonFormatter"}
        if log_format == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "context_proxy": {"handlers": ["default"], "level": level.upper()},
            "uvicorn": {"handlers": ["default"], "level": level.upper()},
            # LiteLLM logs provider payloads at debug level; keep it to warnings.
            "LiteLLM": {"handlers": ["default"], "level": "WARNING", "propagate": False},
        },
    }
