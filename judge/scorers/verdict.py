"""Parsing LLM judge replies: strict JSON first, then a bounded repair of near-JSON, then failure.

Repairs, applied cumulatively and re-tried after each step: strip Markdown code fences; cut the
first balanced ``{...}`` (or ``[...]``) out of surrounding prose; Python literals
(True/False/None) -> JSON; single quotes -> double quotes (only when the text has no double
quotes); trailing commas removed; bare keys quoted. A reply that still does not load, or whose
fields are missing / of the wrong type / out of range, raises :class:`VerdictParseError`. A score is
never invented: the only derived value is ``score = 1.0 if correct else 0.0`` when the reply gives
``correct`` but no ``score`` (marked repaired).

What is not covered: truncated replies (an unclosed string or object fails), scores on other scales
(e.g. 0..10 fails rather than being rescaled).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamgrpo.judge.errors import VerdictParseError

_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*|\s*```\s*$")


@dataclass(frozen=True)
class Verdict:
    """One answer's verdict; ``repaired`` when the reply needed repair or a derived field."""

    correct: bool
    score: float
    explanation: str
    repaired: bool


def _balanced(text: str, open_ch: str, close_ch: str) -> str | None:
    start = text.find(open_ch)
    if start < 0:
        return None
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            esc = (ch == "\\") and not esc
            if ch == '"' and not esc:
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == open_ch:
            depth += 1
        elif ch == close_ch:
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def _cut(text: str) -> str:
    obj, arr = text.find("{"), text.find("[")
    if arr >= 0 and (obj < 0 or arr < obj):
        return _balanced(text, "[", "]") or text
    return _balanced(text, "{", "}") or text


def _quotes(text: str) -> str:
    return text.replace("'", '"') if '"' not in text else text


_REPAIRS: tuple[Callable[[str], str], ...] = (
    lambda t: _FENCE.sub("", t),
    _cut,
    lambda t: re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", re.sub(r"\bNone\b", "null", t))),
    _quotes,
    lambda t: re.sub(r",\s*([}\]])", r"\1", t),
    lambda t: re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:", r'\1"\2":', t),
)


def load_json(text: str) -> tuple[Any, bool]:
    """(value, repaired) of ``text``; raises VerdictParseError when no repair makes it load."""
    try:
        return json.loads(text), False
    except json.JSONDecodeError:
        pass
    fixed = text
    for repair in _REPAIRS:
        fixed = repair(fixed)
        try:
            return json.loads(fixed), True
        except json.JSONDecodeError:
            continue
    raise VerdictParseError(f"reply is not JSON even after repair: {text[:200]!r}")


def _as_bool(value: Any) -> tuple[bool, bool]:
    if isinstance(value, bool):
        return value, False
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true", True
    raise VerdictParseError(f"'correct' must be a boolean, got {value!r}")


def as_score(value: Any) -> tuple[float, bool]:
    """A score in [0, 1] (numbers, or numeric strings as a repair); anything else fails."""
    repaired = False
    if isinstance(value, str):
        try:
            value, repaired = float(value.strip()), True
        except ValueError as exc:
            raise VerdictParseError(f"'score' is not a number: {value!r}") from exc
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise VerdictParseError(f"'score' must be a number in [0, 1], got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise VerdictParseError(f"'score' {value!r} is outside [0, 1]")
    return float(value), repaired


def parse_verdict(text: str) -> Verdict:
    """A single-answer verdict ``{"correct": bool, "score": 0..1, "explanation": str}``."""
    data, repaired = load_json(text)
    if not isinstance(data, dict) or "correct" not in data:
        raise VerdictParseError(f"verdict must be an object with 'correct': {text[:200]!r}")
    correct, r1 = _as_bool(data["correct"])
    if "score" in data and data["score"] is not None:
        score, r2 = as_score(data["score"])
    else:
        score, r2 = (1.0 if correct else 0.0), True
    explanation = data.get("explanation")
    return Verdict(correct, score, explanation if isinstance(explanation, str) else "", repaired or r1 or r2)


def parse_group_scores(text: str, n: int) -> tuple[list[float], bool]:
    """Scores of a group of ``n`` answers: ``{"scores": [...]}`` with numbers or ``{"id", "score"}``
    objects (ids 1..n, each exactly once), or a bare list as a repair. Returns (scores, repaired)."""
    data, repaired = load_json(text)
    if isinstance(data, list):
        items, repaired = data, True
    elif isinstance(data, dict) and isinstance(data.get("scores"), list):
        items = data["scores"]
    else:
        raise VerdictParseError(f"group verdict must hold a 'scores' list: {text[:200]!r}")
    if len(items) != n:
        raise VerdictParseError(f"group verdict has {len(items)} scores for {n} answers")
    if all(isinstance(it, dict) for it in items):
        by_id = {it.get("id"): it.get("score") for it in items}
        if set(by_id) != set(range(1, n + 1)):
            raise VerdictParseError(f"group verdict ids {sorted(map(str, by_id))} are not 1..{n}")
        items = [by_id[i] for i in range(1, n + 1)]
    scores = []
    for it in items:
        value, r = as_score(it)
        scores.append(value)
        repaired = repaired or r
    return scores, repaired
