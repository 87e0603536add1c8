"""Structured logs: JSON lines for operators (or readable lines on a terminal).

Secrets never reach a log: config values are SecretStr, nothing logs request bodies, and
every line — ours and the libraries' (an HTTP client logging a request URL may carry a bot
token in its path) — passes a filter that masks provider tokens.
"""

from __future__ import annotations

import logging
import re
import sys

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# Bot tokens in API paths (`bot<id>:<secret>`), `xox…` workspace tokens, Bearer credentials.
_SECRETS = re.compile(
    r"(?P<tg>\bbot)\d{5,}:[A-Za-z0-9_-]{20,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{8,}"
    r"|(?P<bearer>\bBearer\s+)[A-Za-z0-9._~+/=-]{8,}",
)


def redact(text: str) -> str:
    def mask(match: re.Match[str]) -> str:
        if match.group("tg"):
            return "bot<redacted>"
        if match.group("bearer"):
            return match.group("bearer") + "<redacted>"
        return "<redacted>"

    return _SECRETS.sub(mask, text)


class RedactSecrets(logging.Filter):
    """Mask tokens in a record's final text (libraries format their own messages)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def _redact_event(_logger: object, _name: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    return {k: redact(v) if isinstance(v, str) else v for k, v in event.items()}


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json
        else structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks if as_json else structlog.processors.StackInfoRenderer(),
            _redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets())
    handler.set_name("handoff-desk")
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if h.get_name() != "handoff-desk"]  # configuring twice adds no twin
    root.addHandler(handler)
    root.setLevel(_LEVELS[level])
    # Chatty per-request lines from the HTTP clients the SDKs use; warnings still show.
    for name in ("httpx", "httpcore", "apscheduler", "aiohttp.access"):
        logging.getLogger(name).setLevel(max(_LEVELS[level], logging.WARNING))
