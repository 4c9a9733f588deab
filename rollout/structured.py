"""Parse and repair the structured (JSON) outputs of the agent roles.

Small models rarely emit clean JSON. :func:`extract_object` tries, in order:

1. **strict**: the whole text is one JSON object -> ``ParseStatus.STRICT``;
2. **repair** -> ``ParseStatus.REPAIRED``: drop code fences and text around the first ``{``,
   cut at the matching ``}`` (string-aware), close a truncated object (open string, brackets,
   braces), then fix single quotes, unquoted keys, trailing commas and Python literals
   (``True``/``False``/``None``); a Python-dict literal is accepted through ``ast.literal_eval``;
3. otherwise ``ParseStatus.FAILED`` with the reason. It never raises on model text.

:func:`parse_into` then validates the object against a typed output model (a frozen dataclass
with a ``from_obj`` classmethod that raises :class:`ValueError` on bad content), so a well-formed
object with the wrong fields is also a recorded ``FAILED``.

What is covered: one top-level object per output (the first one found), nested values.
What is not covered: JSON arrays at top level, several objects in one output (the first wins),
repairing semantically wrong values (that is the validator's job: it rejects them).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from streamgrpo.avro.records import ParseStatus

T = TypeVar("T", covariant=True)
M = TypeVar("M")

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_UNQUOTED_KEY = re.compile(r'([{,]\s*)([A-Za-z_][A-Za-z0-9_\-]*)(\s*:)')
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}


class FromObj(Protocol[T]):
    """A typed output model: build from a parsed JSON object or raise ValueError."""

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> T: ...  # pragma: no cover - protocol


@dataclass(frozen=True)
class Parsed(Generic[M]):
    """Outcome of parsing one model output: ``value`` is None exactly when ``status`` is FAILED."""

    value: M | None
    status: ParseStatus
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not ParseStatus.FAILED


def extract_object(text: str) -> tuple[dict[str, Any] | None, ParseStatus, str | None]:
    """Find the first JSON object in ``text``: ``(object, status, error)``; object None on FAILED."""
    stripped = text.strip()
    try:
        obj = json.loads(stripped)
    except (json.JSONDecodeError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        return obj, ParseStatus.STRICT, None
    candidate = _isolate_object(_FENCE.sub("", stripped))
    if candidate is None:
        return None, ParseStatus.FAILED, "no JSON object found in the output"
    for attempt in _repairs(candidate):
        try:
            obj = json.loads(attempt)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj, ParseStatus.REPAIRED, None
    literal = _python_literal(candidate)
    if literal is not None:
        return literal, ParseStatus.REPAIRED, None
    return None, ParseStatus.FAILED, f"could not repair output into a JSON object: {candidate[:80]!r}"


def parse_into(text: str, model: type[FromObj[M]]) -> Parsed[M]:
    """Extract an object from ``text`` and validate it with ``model.from_obj``."""
    obj, status, error = extract_object(text)
    if obj is None:
        return Parsed(None, ParseStatus.FAILED, error)
    try:
        value = model.from_obj(obj)
    except (ValueError, TypeError) as exc:
        return Parsed(None, ParseStatus.FAILED, f"invalid {getattr(model, '__name__', 'output')}: {exc}")
    return Parsed(value, status, None)


def _isolate_object(text: str) -> str | None:
    """Text from the first ``{`` to its matching ``}``; a truncated object is closed."""
    start = text.find("{")
    if start < 0:
        return None
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch in "\"'" and _opens_string(text, i, ch):
            quote = ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if stack and stack[-1] == ch:
                stack.pop()
            if not stack:
                return text[start : i + 1]
    # truncated: close the open string, then every open bracket/brace
    tail = text[start:].rstrip()
    if quote:
        tail += quote
    tail = tail.rstrip().rstrip(",").rstrip(":")
    return tail + "".join(reversed(stack))


def _opens_string(text: str, i: int, ch: str) -> bool:
    """A single quote inside a word (``don't``) does not open a string; a double quote always does."""
    if ch == '"':
        return True
    prev = text[i - 1] if i > 0 else " "
    return not prev.isalnum()


def _repairs(candidate: str) -> list[str]:
    """Successively stronger textual repairs of a near-JSON object."""
    no_trailing = _TRAILING_COMMA.sub(r"\1", candidate)
    keys_quoted = _UNQUOTED_KEY.sub(r'\1"\2"\3', no_trailing)
    literals = _replace_bare_words(keys_quoted)
    single = _single_to_double_quotes(literals)
    return [no_trailing, keys_quoted, literals, _TRAILING_COMMA.sub(r"\1", single),
            _UNQUOTED_KEY.sub(r'\1"\2"\3', _TRAILING_COMMA.sub(r"\1", single))]


def _replace_bare_words(text: str) -> str:
    """``True``/``False``/``None`` outside strings -> JSON literals."""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'" and _opens_string(text, i, ch):
            quote = ch
            out.append(ch)
        else:
            for word, repl in _PY_LITERALS.items():
                if text.startswith(word, i) and not text[i + len(word) : i + len(word) + 1].isalnum():
                    out.append(repl)
                    i += len(word)
                    break
            else:
                out.append(ch)
                i += 1
            continue
        i += 1
    return "".join(out)


def _single_to_double_quotes(text: str) -> str:
    """Rewrite single-quoted strings as JSON strings (escaping inner double quotes)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif ch == "'" and _opens_string(text, i, ch):
            j = i + 1
            buf: list[str] = []
            while j < len(text) and text[j] != "'":
                if text[j] == "\\" and j + 1 < len(text):
                    buf.append(text[j : j + 2])
                    j += 2
                    continue
                buf.append('\\"' if text[j] == '"' else text[j])
                j += 1
            out.append('"' + "".join(buf) + '"')
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _python_literal(candidate: str) -> dict[str, Any] | None:
    try:
        value = ast.literal_eval(_TRAILING_COMMA.sub(r"\1", candidate))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return json.loads(json.dumps(value, default=str))
    return None


def as_text(value: Any, limit: int = 2000) -> str:
    """A model-provided value as a bounded string (dicts/lists as compact JSON)."""
    if isinstance(value, str):
        text = value
    elif value is None:
        text = ""
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text[:limit]
