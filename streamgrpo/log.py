"""Logging setup. Called only by the CLI (never at import time).

Secrets never reach logs: settings hold them as ``pydantic.SecretStr`` (printed as ``**********``)
and :class:`RedactingFilter` masks any registered secret value that slips into a message anyway.
"""

from __future__ import annotations

import logging
import sys

_SECRETS: set[str] = set()


def register_secret(value: str | None) -> None:
    """Mask ``value`` in every log line from now on (ignored when empty or very short)."""
    if value and len(value) >= 4:
        _SECRETS.add(value)


def redact(text: str) -> str:
    for secret in _SECRETS:
        text = text.replace(secret, "**********")
    return text


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _SECRETS:
            record.msg = redact(record.getMessage())
            record.args = ()
        return True


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s", "%H:%M:%S"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "kafka", "faust", "mode", "httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
