"""Logging setup. Called only by the CLI (never at import time).

Secrets never reach logs: settings hold them as ``pydantic.SecretStr`` (printed as ``**********``)
and :class:`RedactingFilter` masks any registered secret value (see :mod:`streamgrpo.redact`, the
one redaction path) that slips into a message, its arguments, its traceback or its stack anyway.
"""

from __future__ import annotations

import logging
import sys

from streamgrpo.redact import redact, register_secret

__all__ = ["RedactingFilter", "printable", "redact", "register_secret", "setup_logging"]

_KEEP = frozenset("\n\t")
_SEPARATORS = frozenset({"Zl", "Zp"})  # U+2028, U+2029: escaped like every C* category


def printable(text: str, *, keep_newlines: bool = True, limit: int | None = None) -> str:
    """``text`` safe for a terminal or one log line: control characters (ESC of ANSI/OSC sequences, CR, BEL,
    C1, bidi overrides) and the Unicode line and paragraph separators (U+2028, U+2029: line breaks to
    ``str.splitlines`` and to many viewers) become ``\\x1b``-style escapes; newlines too unless ``keep_newlines``;
    cut to ``limit`` characters (marked with an ellipsis)."""
    import unicodedata

    keep = _KEEP if keep_newlines else frozenset()
    out = "".join(ch if ch in keep or ch == " " or (cat := unicodedata.category(ch))[0] != "C"
                  and cat not in _SEPARATORS
                  else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return out if limit is None or len(out) <= limit else out[:limit] + "…"

_FORMATTER = logging.Formatter()


class RedactingFilter(logging.Filter):
    """Masks registered secrets in the final text of a record (every handler after it sees that)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s", "%H:%M:%S"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "kafka", "librdkafka", "faust", "mode", "httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
