"""Logging setup: one line per request, as text or JSON, never message content."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from proxy.config.settings import ConfigError, load_settings
from proxy.observability.redaction import Redactor

__all__ = ["LITELLM_LOGGERS", "JsonFormatter", "OneLine", "log_config"]

# LiteLLM's loggers: its own, its Router's and its proxy's (whose modules it imports).
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
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


class OneLine(logging.Filter):
    """LiteLLM's own log records (its Router's errors run to a dozen lines, with debug
    dumps and tracebacks) as one line each: the first, without a traceback, scrubbed of
    every credential the config names and anything shaped like a key."""

    def __init__(self) -> None:
        super().__init__()
        try:
            self._redact = Redactor.from_settings(load_settings())
        except ConfigError:  # the CLI checked it; whatever happens, never log a key
            self._redact = Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        lines = record.getMessage().strip().splitlines()
        record.msg, record.args = self._redact(lines[0] if lines else ""), None
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def log_config(log_format: str, level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for uvicorn (applied in every worker)."""
    formatter: dict[str, Any] = (
        {"()": "proxy.observability.logs.JsonFormatter"}
        if log_format == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {"one_line": {"()": "proxy.observability.logs.OneLine"}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            },
            "litellm": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["one_line"],
                "stream": "ext://sys.stderr",
            },
        },
        "loggers": {
            "context_proxy": {"handlers": ["default"], "level": level.upper()},
            "uvicorn": {"handlers": ["default"], "level": level.upper()},
            # LiteLLM logs provider payloads at debug level; keep it to warnings.
            **{
                name: {"handlers": ["litellm"], "level": "WARNING", "propagate": False}
                for name in LITELLM_LOGGERS
            },
        },
    }
