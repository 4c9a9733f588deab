"""Parse and repair the structured (JSON) outputs of the agent roles.

Small models rarely emit clean JSON. :func:`extract_object` tries, in order:

1. **strict**: the whole text is one JSON object -> ``ParseStatus.STRICT``;
2. **repair** -> ``ParseStatus.REPAIRED``: ``json_repair`` (code fences and text around the object,
   truncation, single quotes, unquoted keys, trailing commas, Python literals ``True``/``False``/
   ``None``, comments); of several objects the first is kept; a repair that recovers an object
   without any key (``{: :}``) counts as failed, and so does an output over ``MAX_REPAIR_CHARS``
   characters or ``MAX_REPAIR_BRACKETS`` brackets (bounded time on hostile text);
3. otherwise ``ParseStatus.FAILED`` with the reason. It never raises on model text.

:func:`parse_into` then validates the object against a typed output model (a frozen dataclass
with a ``from_obj`` classmethod that raises :class:`ValueError` on bad content), so a well-formed
object with the wrong fields is also a recorded ``FAILED``.

What is covered: one top-level object per output (the first one found), nested values.
What is not covered: JSON arrays at top level, several objects in one output (the first wins),
repairing semantically wrong values (that is the validator's job: it rejects them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from streamgrpo.avro.records import ParseStatus

#: json_repair is quadratic on long unterminated strings and deep nesting (1 MB: ~70 s; 16k "{": ~4 s)
MAX_REPAIR_CHARS, MAX_REPAIR_BRACKETS = 16_000, 256
T = TypeVar("T", covariant=True)
M = TypeVar("M")


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
    import json_repair

    stripped = text.strip()
    try:
        obj = json.loads(stripped)
    except (json.JSONDecodeError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        return obj, ParseStatus.STRICT, None
    if "{" not in stripped:
        return None, ParseStatus.FAILED, "no JSON object found in the output"
    if len(stripped) > MAX_REPAIR_CHARS or stripped.count("{") + stripped.count("[") > MAX_REPAIR_BRACKETS:
        return None, ParseStatus.FAILED, f"output too long or too nested to repair ({len(stripped)} chars)"
    repaired: Any
    try:
        repaired = json_repair.repair_json(stripped, return_objects=True, skip_json_loads=True)
    except (RecursionError, ValueError):  # hostile nesting; never raise on model text
        repaired = None
    if isinstance(repaired, list):
        repaired = next((x for x in repaired if isinstance(x, dict)), None)
    if isinstance(repaired, dict) and repaired:
        return repaired, ParseStatus.REPAIRED, None
    return None, ParseStatus.FAILED, f"could not repair output into a JSON object: {stripped[:80]!r}"


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


def as_text(value: Any, limit: int = 2000) -> str:
    """A model-provided value as a bounded string (dicts/lists as compact JSON)."""
    if isinstance(value, str):
        text = value
    elif value is None:
        text = ""
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text[:limit]
