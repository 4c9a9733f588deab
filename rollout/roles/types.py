"""Typed outputs shared by the agent roles, and the one prompt-hash function.

Each structured output is a frozen dataclass with ``from_obj`` (build from a parsed JSON object,
raise :class:`ValueError` on bad content; see :mod:`streamgrpo.rollout.structured`) and a compact
``SCHEMA`` line that the role's prompt shows to the model. Schemas are deliberately tiny: the
default planner is a 135M model with a 2k context.

What is covered: the value types and their validation. What is not: prompts (each role module owns
its template) and any model call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from streamgrpo.avro.records import ParseStatus
from streamgrpo.rollout.structured import as_text

#: Keys a small model tends to use instead of "input"; accepted as synonyms.
_INPUT_ALIASES = ("input", "query", "expression", "args", "arguments", "command", "code", "text", "question")


def prompt_hash(*templates: str) -> str:
    """Version hash of a role's prompt templates: first 12 hex digits of sha256 over their text."""
    digest = hashlib.sha256("\x1e".join(templates).encode("utf-8")).hexdigest()
    return digest[:12]


@dataclass(frozen=True)
class NextStep:
    """The planner's decision: call ONE tool with an input, or answer.

    ``{"tool": "calculator", "input": "12**2"}`` or ``{"answer": "144"}``.
    """

    SCHEMA = '{"tool": "<name>", "input": "<text>"} or {"answer": "<text>"}'
    tool: str | None = None
    input: str = ""
    answer: str | None = None

    @property
    def is_final(self) -> bool:
        return self.answer is not None

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> NextStep:
        if "answer" in obj and obj["answer"] not in (None, ""):
            return cls(answer=as_text(obj["answer"]).strip())
        tool = obj.get("tool") or obj.get("action") or obj.get("name")
        if not isinstance(tool, str) or not tool.strip():
            raise ValueError('expected {"tool": ..., "input": ...} or {"answer": ...}')
        for key in _INPUT_ALIASES:
            if key in obj and obj[key] not in (None, ""):
                return cls(tool=tool.strip().lower(), input=as_text(obj[key]).strip())
        raise ValueError(f"tool {tool!r} chosen without an input")


class ToolFirstStep(NextStep):
    """A :class:`NextStep` where an object with a tool call AND an answer is the tool call (the answer,
    written before the tool's result was seen, is dropped)."""

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> NextStep:
        tool = obj.get("tool") or obj.get("action") or obj.get("name")
        if isinstance(tool, str) and tool.strip() and "answer" in obj:
            obj = {k: v for k, v in obj.items() if k != "answer"}
        return NextStep.from_obj(obj)


@dataclass(frozen=True)
class ToolCommand:
    """The executor's concrete tool input: ``{"input": "<text>"}``."""

    SCHEMA = '{"input": "<exact tool input>"}'
    input: str

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> ToolCommand:
        for key in _INPUT_ALIASES:
            if key in obj and obj[key] not in (None, ""):
                return cls(input=as_text(obj[key]).strip())
        raise ValueError('expected {"input": ...}')


@dataclass(frozen=True)
class Verification:
    """The verifier's decision after a tool call: ``{"stop": true, "reason": "..."}``."""

    SCHEMA = '{"stop": true or false, "reason": "<short>"}'
    stop: bool
    reason: str = ""

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> Verification:
        raw = obj.get("stop", obj.get("decision", obj.get("done")))
        if isinstance(raw, bool):
            stop = raw
        elif isinstance(raw, str) and raw.strip().lower() in {"true", "yes", "stop"}:
            stop = True
        elif isinstance(raw, str) and raw.strip().lower() in {"false", "no", "continue"}:
            stop = False
        else:
            raise ValueError('expected {"stop": true|false, ...}')
        return cls(stop=stop, reason=as_text(obj.get("reason", obj.get("analysis", "")), 500))


@dataclass(frozen=True)
class QueryAnalysis:
    """What the query needs: ``{"skills": ["math"], "tools": ["calculator"]}``."""

    SCHEMA = '{"skills": ["<skill>"], "tools": ["<tool name>"]}'
    skills: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    mode: str = "rule"

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> QueryAnalysis:
        skills, tools = obj.get("skills", []), obj.get("tools", [])
        if isinstance(skills, str):
            skills = [skills]
        if isinstance(tools, str):
            tools = [tools]
        if not isinstance(skills, list) or not isinstance(tools, list):
            raise ValueError('expected {"skills": [...], "tools": [...]}')
        return cls(tuple(as_text(s, 40) for s in skills[:6]), tuple(as_text(t, 40).lower() for t in tools[:6]),
                   mode="model")


@dataclass(frozen=True)
class Observation:
    """What one tool call returned (output is already bounded by the tool)."""

    tool: str
    command: str
    output: str
    error: str | None = None
    truncated: bool = False
    duration_ms: int = 0
    executor_mode: str = "passthrough"
    prompt_hash: str = ""

    def summary(self, limit: int = 160) -> str:
        text = f"error: {self.error}" if self.error else self.output
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class TurnRecord:
    """One finished planner turn of a trajectory, as the next prompts see it."""

    turn: int
    action_text: str
    parse_status: ParseStatus
    step: NextStep | None
    parse_error: str | None = None
    observation: Observation | None = None
    notes: dict[str, str] = field(default_factory=dict)


RoleT = TypeVar("RoleT")


def require_model(role: str, model: Any) -> Any:
    """The text model a role's 'model' mode needs, or a clear error naming the setting."""
    if model is None:
        raise ValueError(f"{role} mode 'model' needs a text model (set role_model in the rollout settings)")
    return model


def pick_mode(role: str, registry: Mapping[str, Callable[..., RoleT]], mode: str, model: Any, **options: Any) -> RoleT:
    """Build the role implementation registered for ``mode`` (one rule for every role's registry)."""
    if mode not in registry:
        raise ValueError(f"unknown {role} mode {mode!r}; choose one of {sorted(registry)}")
    return registry[mode](model, **options)
