"""The rules a Task's fields must meet before anything publishes it (pure; no I/O).

:func:`~streamgrpo.topics.sdk.make_task` (the SDK, ``streamgrpo submit``, the MCP agent) applies
them, so a bad value is a :class:`TaskValidationError` naming the field, never silently rewritten:

- text fields are strings (``None`` is not ``"None"``) that UTF-8 can carry (no lone surrogates);
- ``ground_truths`` is a collection of non-empty strings, not one string (``"144"`` is not
  ``['1', '4', '4']``);
- ``metadata`` is a flat mapping of strings to strings (no nesting, hence no recursion);
- ``task_id`` is an identifier: letters, digits and ``. _ - : @ + =``, at most 128 characters, no
  ``..`` (no path traversal, no controls, no bidi overrides: ids name files and log lines);
- the encoded Task is at most :data:`~streamgrpo.topics.limits.MAX_TASK_BYTES`, the limit the
  fan-out applies, so a task the fan-out would dead-letter is refused at submit.

What is not covered: the meaning of a question or answer; the group size (checked by make_task).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from streamgrpo.topics.errors import TopicsError
from streamgrpo.topics.limits import MAX_TASK_BYTES

TASK_ID_CHARS = 128
_TASK_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._\-:@+=]{{0,{TASK_ID_CHARS - 1}}}")


class TaskValidationError(TopicsError, ValueError):
    """A task is not publishable; the message names the field."""


def text(name: str, value: object, *, required: bool = True) -> str:
    """A string field that UTF-8 can carry (Avro strings are UTF-8); non-empty when ``required``."""
    if not isinstance(value, str):
        raise TaskValidationError(f"{name}: must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise TaskValidationError(f"{name}: must be a non-empty string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TaskValidationError(
            f"{name}: contains {value[exc.start]!r} at position {exc.start}, a lone UTF-16 surrogate that UTF-8 "
            "cannot encode (fix the escape in the file)") from exc
    return value


def ground_truths(value: object) -> list[str]:
    """A list of non-empty strings (a single string or a mapping is refused, never split into items)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TaskValidationError(f"ground_truths: must be a list of strings, got {type(value).__name__} "
                                  "(wrap a single answer in a list: ['144'])")
    truths = list(value)
    for i, t in enumerate(truths):
        if not isinstance(t, str) or not t.strip():
            raise TaskValidationError(f"ground_truths[{i}]: must be a non-empty string, got {type(t).__name__}")
        text(f"ground_truths[{i}]", t)
    return truths


def metadata(value: object) -> dict[str, str]:
    """A flat mapping of strings to strings."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TaskValidationError(f"metadata: must be a mapping of strings to strings, got {type(value).__name__}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TaskValidationError(f"metadata: keys and values must be strings, got {type(k).__name__} -> "
                                      f"{type(v).__name__} (flatten nested values)")
        out[text("metadata key", k)] = text(f"metadata[{k!r:.40}]", v, required=False)
    return out


def task_id(value: object) -> str | None:
    """None (a fresh uuid is drawn) or an identifier (see the module docstring)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _TASK_ID.fullmatch(value) or ".." in value:
        shown = ascii(value)[:60] if isinstance(value, str) else type(value).__name__
        raise TaskValidationError(f"task_id: {shown} is not an identifier: letters, digits and . _ - : @ + =, "
                                  f"starting with a letter or digit, at most {TASK_ID_CHARS} characters, no '..'")
    return value


def encoded_size(size: int) -> None:
    """The fan-out's limit on an encoded Task (:data:`~streamgrpo.topics.limits.MAX_TASK_BYTES`)."""
    if size > MAX_TASK_BYTES:
        raise TaskValidationError(f"the task is {size:,} bytes encoded; at most {MAX_TASK_BYTES:,} are accepted "
                                  "(its question is copied into every request and completion of its group: "
                                  "shorten the question, answers or metadata)")
