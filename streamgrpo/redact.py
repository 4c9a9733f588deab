"""The one redaction path: secret values registered here are masked wherever text leaves a process.

Secrets are held as ``pydantic.SecretStr`` (printed as ``**********``), but their *values* can still
come back inside third-party text: an endpoint that echoes the ``Authorization`` header in an error
body puts the API key into the exception message. Every exit of text goes through :func:`redact`:

- logs: :class:`streamgrpo.log.RedactingFilter` (message, arguments, formatted traceback, stack);
- the CLI: ``streamgrpo.cli.main`` prints ``error: ...`` through it, and :func:`install_excepthook`
  makes uncaught tracebacks (main thread and other threads) go through it;
- events: error and reason text built for ``Reward.error`` and ``DeadLetter.reason`` (the judge's
  fallback reasons and the judge service's emit step).

:func:`register_secret` is called where a secret is loaded or used (the judge's chat endpoint,
which every LLM-backed scorer calls through, registers its API key; the judge service every secret of its
settings); :func:`register_secrets_in`
walks a settings model for every ``SecretStr``.
Each value is also matched in its JSON-escaped and URL-quoted forms (how an echo usually carries
it). What is NOT covered: a secret transformed some other way (base64, truncated, split), and
secrets shorter than :data:`MIN_LENGTH` characters (too likely to mask ordinary words).
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import quote

MASK = "**********"
MIN_LENGTH = 4

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first; replaced whole, so readers need no lock


def _forms(value: str) -> set[str]:
    return {value, json.dumps(value)[1:-1], quote(value, safe="")}


class _Secret(Protocol):
    def get_secret_value(self) -> str: ...


def register_secret(value: str | _Secret | None) -> None:
    """Mask ``value`` (a string or a ``SecretStr``; and its escaped forms) in everything redacted from now on."""
    global _secrets
    if value is not None and not isinstance(value, str):
        value = value.get_secret_value()
    if not value or len(value) < MIN_LENGTH:
        return
    with _lock:
        _secrets = tuple(sorted(set(_secrets) | {f for f in _forms(value) if len(f) >= MIN_LENGTH},
                                key=lambda s: (-len(s), s)))


def register_secrets_in(model: Any) -> None:
    """Register every ``SecretStr`` value of a pydantic settings model and its nested models, except
    a field's own default (a placeholder like ``"EMPTY"`` is not a secret). Duck-typed, so this floor
    module does not import pydantic and the CLI starts fast."""
    for name, field in getattr(type(model), "model_fields", {}).items():
        value = getattr(model, name)
        if hasattr(value, "get_secret_value"):
            if value != field.default:
                register_secret(value)
        elif hasattr(type(value), "model_fields"):
            register_secrets_in(value)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by :data:`MASK`."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_optional(text: str | None) -> str | None:
    """:func:`redact` that lets None through (optional event fields)."""
    return None if text is None else redact(text)


def _print_redacted(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(exc_type, exc, tb))))


def _thread_hook(args: Any) -> None:
    if args.exc_type is SystemExit:
        return
    name = getattr(args.thread, "name", "?")
    sys.stderr.write(f"Exception in thread {name}:\n")
    _print_redacted(args.exc_type, args.exc_value, args.exc_traceback)


def install_excepthook() -> None:
    """Uncaught exceptions (main thread and other threads) print their traceback redacted."""
    sys.excepthook = _print_redacted
    threading.excepthook = _thread_hook
