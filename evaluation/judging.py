"""Correctness only: the binary verdict an evaluation counts (no format bonus, no tool penalty).

The judge of a task follows the judge service's routing (``[judge] routes`` by task source). An
evaluation keeps only the correctness part of it:
- ``math`` / ``qa``: that judge's verdict;
- ``correct`` (the built-in tasks' judge in training) and ``hybrid``: the ``correct`` judge (math when the
  ground truth is mathematical, else qa, no partial credit; the question's arithmetic restated is not an
  answer) -- the hybrid's format and tool components are left out;
- ``llm`` / ``group_relative``: evaluated programmatically like ``correct`` (an evaluation must be
  reproducible and free; say so in the provenance).

What is not covered: tasks without ground truth (they cannot be evaluated and are rejected).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamgrpo.avro import records as R
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.scorers.base import Candidate, rubric_hash
from streamgrpo.judge.scorers.correct import CorrectScorer
from streamgrpo.judge.scorers.math import MathScorer
from streamgrpo.judge.scorers.qa import QAScorer

RUBRIC_VERSION = "correctness-v2"


@dataclass
class CorrectnessJudge:
    """``correct(source, question, answer, truths)`` -> bool, with one provenance for the whole evaluation."""

    settings: JudgeSettings

    def __post_init__(self) -> None:
        s = self.settings
        self.math = MathScorer(s.math)
        self.qa = QAScorer(s.qa)
        self.auto = CorrectScorer(s.math, s.qa)
        self.info = R.JudgeInfo(name="correctness", rubric_hash=rubric_hash(RUBRIC_VERSION, self.auto.rubric_hash,
                                                                          self.qa.rubric_hash, str(sorted(s.routes.items()))),
                                model=None)

    def correct(self, source: str, question: str, answer: str, truths: list[str]) -> bool:
        if not truths:
            raise ValueError(f"task {question[:60]!r} has no ground truth: it cannot be evaluated")
        candidate = Candidate(question=question, answer=answer, ground_truths=tuple(truths))
        name = self.settings.routes.get(source, self.settings.default_judge)
        scorer = {"math": self.math, "qa": self.qa}.get(name) or self.auto
        verdict = scorer.score(candidate)
        return bool(verdict.correct if verdict.correct is not None else verdict.score >= 1.0)
