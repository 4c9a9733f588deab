"""The `hybrid` judge: a weighted sum of correctness, format and tool-use components.

score = correctness_weight * correctness + format_weight * format - tool_penalty_component, where
- correctness: the math judge when a ground truth is mathematical (``is_math_truth``: digits, a
  LaTeX command or a lone letter and no words, or a number plus a unit word), else the qa judge
  (``correctness = "auto"``); or forced;
- format (0..1): mean of three checks — the answer is non-empty, at most ``max_answer_chars``
  long, and the rollout ended ANSWERED (not MAX_TURNS);
- tool penalty: ``tool_penalty`` per tool call beyond ``tool_budget``, capped at ``tool_penalty_cap``
  (stored as a component with a negative value and weight 1).
Every component is kept in the Score (the inner judge's components are prefixed "correctness/").
The score is not clipped: with the defaults it lies in [-0.5, 1.1].

What is not covered: judging the reasoning or tool outputs (only counts are read).
"""

from __future__ import annotations

from streamgrpo.judge.config import HybridSettings, MathSettings, QASettings
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer, rubric_hash
from streamgrpo.judge.scorers.math import MathScorer, is_math_truth
from streamgrpo.judge.scorers.qa import QAScorer

RUBRIC_VERSION = "hybrid-v1"


def format_checks(candidate: Candidate, max_answer_chars: int) -> tuple[float, float, float]:
    """(non_empty, not_too_long, answered) as 0/1 values."""
    answer = candidate.answer.strip()
    return (float(bool(answer)), float(len(answer) <= max_answer_chars), float(candidate.status == "ANSWERED"))


def tool_penalty(candidate: Candidate, settings: HybridSettings) -> float:
    """Non-negative penalty for tool calls beyond the budget (capped)."""
    excess = max(0, sum(candidate.tool_calls.values()) - settings.tool_budget)
    return min(settings.tool_penalty_cap, excess * settings.tool_penalty)


class HybridScorer(SingleScorer):
    """Correctness (math or qa) + format + tool-use penalty, every component kept."""

    name = "hybrid"
    needs_ground_truth = True
    context_free = False  # reads status and tool calls: they are part of the cache key

    def __init__(
        self,
        settings: HybridSettings | None = None,
        math_settings: MathSettings | None = None,
        qa_settings: QASettings | None = None,
    ) -> None:
        self.settings = settings or HybridSettings()
        self.math = MathScorer(math_settings)
        self.qa = QAScorer(qa_settings)
        self.rubric_hash = rubric_hash(
            RUBRIC_VERSION, self.settings.model_dump_json(), self.math.rubric_hash, self.qa.rubric_hash
        )

    def correctness_judge(self, candidate: Candidate) -> SingleScorer:
        mode = self.settings.correctness
        if mode == "auto":
            mode = "math" if any(is_math_truth(t) for t in candidate.ground_truths) else "qa"
        return self.math if mode == "math" else self.qa

    def score(self, candidate: Candidate) -> Score:
        s = self.settings
        inner = self.correctness_judge(candidate).score(candidate)
        checks = format_checks(candidate, s.max_answer_chars)
        fmt = sum(checks) / len(checks)
        penalty = tool_penalty(candidate, s)
        components = [
            (f"correctness:{inner.judge_name}", inner.score, s.correctness_weight),
            ("format", fmt, s.format_weight),
            ("tool_penalty", -penalty, 1.0),
            ("format/non_empty", checks[0], 0.0),
            ("format/not_too_long", checks[1], 0.0),
            ("format/answered", checks[2], 0.0),
            ("tool_calls", float(sum(candidate.tool_calls.values())), 0.0),
        ]
        components += [(f"correctness/{n}", v, 0.0) for n, v, _ in inner.components]
        total = sum(v * w for _, v, w in components)
        return Score(total, tuple(components), self.name, self.rubric_hash, None, inner.correct)
