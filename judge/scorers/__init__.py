"""Judges (reward functions): one module per judge, selected through a dict registry.

``build_scorer(name, settings)`` builds the judge ``name`` from :class:`JudgeSettings`.
Adding a judge = adding a module with a ``Scorer`` and one entry in :data:`SCORERS`.
LLM-backed judges import ``openai`` only when built.
"""

from __future__ import annotations

from collections.abc import Callable

from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.errors import UnknownJudgeError
from streamgrpo.judge.scorers.base import Candidate, Score, Scorer, rubric_hash


def _math(s: JudgeSettings) -> Scorer:
    from streamgrpo.judge.scorers.math import MathScorer

    return MathScorer(s.math)


def _qa(s: JudgeSettings) -> Scorer:
    from streamgrpo.judge.scorers.qa import QAScorer

    return QAScorer(s.qa)


def _correct(s: JudgeSettings) -> Scorer:
    from streamgrpo.judge.scorers.correct import CorrectScorer

    return CorrectScorer(s.math, s.qa)


def _hybrid(s: JudgeSettings) -> Scorer:
    from streamgrpo.judge.scorers.hybrid import HybridScorer

    return HybridScorer(s.hybrid, s.math, s.qa)


def _llm(s: JudgeSettings) -> Scorer:
    from streamgrpo.judge.scorers.llm import LLMScorer

    return LLMScorer(s.llm, s.math, s.qa)


def _group_relative(s: JudgeSettings) -> Scorer:
    from streamgrpo.judge.scorers.group_relative import GroupRelativeScorer

    return GroupRelativeScorer(s.llm, s.math, s.qa)


#: judge name -> factory(settings) -> Scorer
SCORERS: dict[str, Callable[[JudgeSettings], Scorer]] = {
    "correct": _correct,
    "math": _math,
    "qa": _qa,
    "hybrid": _hybrid,
    "llm": _llm,
    "group_relative": _group_relative,
}


def build_scorer(name: str, settings: JudgeSettings | None = None) -> Scorer:
    """The judge called ``name``; raises UnknownJudgeError listing the known names."""
    try:
        factory = SCORERS[name]
    except KeyError as exc:
        raise UnknownJudgeError(f"unknown judge {name!r}; choose one of {sorted(SCORERS)}") from exc
    return factory(settings or JudgeSettings())


__all__ = ["SCORERS", "Candidate", "Score", "Scorer", "build_scorer", "rubric_hash"]
