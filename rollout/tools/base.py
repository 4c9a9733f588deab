"""The tool interface the executor calls and the planner reads about.

A :class:`Tool` has a :class:`ToolSpec` (name, description, typed parameters, limits, one or two
examples) that :func:`streamgrpo.rollout.tools.render_tools` turns into prompt text, and a
:meth:`Tool.run` that takes a ``dict`` of arguments and returns a frozen :class:`ToolResult`.

Contract of ``run`` (a template method; tools implement :meth:`Tool._call`):

- it never raises on bad input: missing/unknown/mistyped arguments, and any
  :class:`~streamgrpo.rollout.tools.errors.ToolInputError` raised by the tool, come back as a
  ``ToolResult`` whose ``error`` says what was wrong and how to call the tool instead;
- the output is truncated to ``max_output_chars`` (default 2000) and ``truncated`` says so;
- ``duration_ms`` is the wall time of the call.

What is covered: argument validation against the declared parameters (types string, integer,
number, boolean; required/optional with defaults), coercion of a plain string to the tool's first
parameter (:func:`coerce_args`, for planners that write ``calculator: 12**2``).
What is not covered: nested/array parameters, async tools, streaming output.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamgrpo.rollout.tools.errors import ToolInputError

DEFAULT_MAX_OUTPUT_CHARS = 2000
TRUNCATION_MARK = "\n...[truncated]"

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


@dataclass(frozen=True)
class ToolResult:
    """Outcome of one tool call. ``error`` is None on success; ``output`` may still hold partial text."""

    output: str
    error: str | None = None
    truncated: bool = False
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.error is None

    def as_text(self) -> str:
        """What the agent sees: the output, or the error (with any partial output after it)."""
        if self.error is None:
            return self.output
        return f"ERROR: {self.error}" + (f"\n{self.output}" if self.output else "")


@dataclass(frozen=True)
class Param:
    """One argument of a tool: JSON-schema-like type name, description, required or defaulted."""

    name: str
    type: str
    description: str
    required: bool = True
    default: Any = None

    def __post_init__(self) -> None:
        if self.type not in _PY_TYPES:
            raise ValueError(f"Param {self.name}: type must be one of {sorted(_PY_TYPES)}, got {self.type!r}")


@dataclass(frozen=True)
class ToolExample:
    """One example call shown to the planner: arguments and (abridged) output."""

    args: Mapping[str, Any]
    output: str


@dataclass(frozen=True)
class ToolSpec:
    """What the planner sees about a tool."""

    name: str
    description: str
    params: tuple[Param, ...]
    limits: str = ""
    examples: tuple[ToolExample, ...] = field(default_factory=tuple)

    def json_schema(self) -> dict[str, Any]:
        """The parameters as a JSON Schema object (for OpenAI-style function calling)."""
        props = {p.name: {"type": p.type, "description": p.description} for p in self.params}
        return {
            "type": "object",
            "properties": props,
            "required": [p.name for p in self.params if p.required],
            "additionalProperties": False,
        }


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit`` characters (marker included); returns (text, was_truncated)."""
    if len(text) <= limit:
        return text, False
    keep = max(0, limit - len(TRUNCATION_MARK))
    return text[:keep] + TRUNCATION_MARK[: limit - keep], True


def validate_args(spec: ToolSpec, args: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``args`` against ``spec.params``; fill defaults. Raises ToolInputError with a usage hint."""
    if not isinstance(args, Mapping):
        raise ToolInputError(f"arguments must be a JSON object, got {type(args).__name__}; {usage(spec)}")
    known = {p.name for p in spec.params}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ToolInputError(f"unknown argument(s) {unknown}; {usage(spec)}")
    out: dict[str, Any] = {}
    for p in spec.params:
        if p.name not in args or args[p.name] is None:
            if p.required:
                raise ToolInputError(f"missing required argument {p.name!r}; {usage(spec)}")
            out[p.name] = p.default
            continue
        value = args[p.name]
        if p.type in ("number", "integer") and isinstance(value, bool):
            raise ToolInputError(f"argument {p.name!r} must be of type {p.type}, got a boolean; {usage(spec)}")
        if not isinstance(value, _PY_TYPES[p.type]):
            value = _coerce_scalar(p, value, spec)
        if isinstance(value, str):
            _check_text(p.name, value)
        out[p.name] = value
    return out


def _check_text(name: str, value: str) -> None:
    """A string argument must be text UTF-8 can carry: a lone surrogate (a JSON ``"\\ud800"``) is refused."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolInputError(f"argument {name!r} contains {ascii(value[exc.start])} at position {exc.start}, a lone "
                             "UTF-16 surrogate that is not text; remove it") from exc


def _coerce_scalar(p: Param, value: Any, spec: ToolSpec) -> Any:
    """Accept "3" for an integer and 3 for a string (small models mix them up); else ToolInputError."""
    try:
        if p.type == "integer" and isinstance(value, (str, float)) and float(value) == int(float(value)):
            return int(float(value))
        if p.type == "number" and isinstance(value, str):
            return float(value)
        if p.type == "string" and isinstance(value, (int, float)):
            return str(value)
    except (ValueError, OverflowError):
        pass
    raise ToolInputError(
        f"argument {p.name!r} must be of type {p.type}, got {type(value).__name__} {value!r:.60}; {usage(spec)}"
    )


def usage(spec: ToolSpec) -> str:
    """One-line usage hint, e.g. ``call calculator with {"expression": <string>}``."""
    fields = ", ".join(f'"{p.name}": <{p.type}{"" if p.required else ", optional"}>' for p in spec.params)
    return f"call {spec.name} with {{{fields}}}"


def coerce_args(spec: ToolSpec, raw: str | Mapping[str, Any]) -> dict[str, Any]:
    """Turn a planner command into arguments: a JSON object is used as is; any other text becomes the
    value of the tool's first parameter (``"12**2"`` -> ``{"expression": "12**2"}``)."""
    if isinstance(raw, Mapping):
        return dict(raw)
    text = raw.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            return obj
    if not spec.params:
        return {}
    return {spec.params[0].name: text}


class Tool(ABC):
    """Base of every tool: subclasses set ``spec`` and implement :meth:`_call`."""

    spec: ToolSpec

    def __init__(self, *, max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> None:
        if max_output_chars < len(TRUNCATION_MARK):
            raise ValueError(f"max_output_chars must be >= {len(TRUNCATION_MARK)}")
        self.max_output_chars = max_output_chars

    @property
    def name(self) -> str:
        """The tool's registry name."""
        return self.spec.name

    def run(self, args: Mapping[str, Any]) -> ToolResult:
        """Validate ``args``, call the tool, bound its output. Never raises on bad input."""
        start = time.monotonic()
        try:
            result = self._call(validate_args(self.spec, args))
        except ToolInputError as exc:
            result = ToolResult(output="", error=str(exc))
        if isinstance(result, str):
            result = ToolResult(output=result)
        output, cut = truncate(result.output, self.max_output_chars)
        return ToolResult(
            output=output,
            error=result.error,
            truncated=cut or result.truncated,
            duration_ms=int((time.monotonic() - start) * 1000),
        )

    @abstractmethod
    def _call(self, args: dict[str, Any]) -> str | ToolResult:
        """Do the work on validated arguments; raise ToolInputError for unusable input."""
