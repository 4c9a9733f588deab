"""The `correct` judge: the reward is correctness, and nothing else (the default for built-in tasks).

score = 1.0 when the final answer is correct, else 0.0. Correctness is the math judge when a ground truth
is mathematical (:func:`~streamgrpo.judge.scorers.math.is_math_truth`), else the qa judge's exact match or
containment -- with NO partial token-F1 credit, whatever ``[judge.qa] partial_credit`` says.

Why no other term: every credit that can be earned without the right answer becomes what GRPO teaches
when most groups are all wrong (the std-normalised advantage turns any difference into +-1). A format or
"answered" credit paid for answering at once without tools (docs/learning.md); a partial-F1 credit pays
for echoing the question's words. With grammar-constrained replies a reply cannot be malformed, so there
is nothing to penalise either; a wrong answer, an empty answer, a run out of turns and an error all score 0,
whether the trajectory used tools or not.

What is covered: correctness against the ground truths. What is not: judging reasoning or tool use (the
``hybrid`` judge, with its format and tool-use terms, stays available for sources that want them).
"""

from __future__ import annotations

from streamgrpo.judge.config import MathSettings, QASettings
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer, rubric_hash
from streamgrpo.judge.scorers.math import MathScorer, is_math_truth
from streamgrpo.judge.scorers.qa import QAScorer

RUBRIC_VERSION = "correct-v1"


class CorrectScorer(SingleScorer):
    """1.0 for a correct final answer (math or qa match, no partial credit), else 0.0."""

    name = "correct"
    needs_ground_truth = True
    context_free = True  # reads the answer and the truths only

    def __init__(self, math_settings: MathSettings | None = None, qa_settings: QASettings | None = None) -> None:
        self.math = MathScorer(math_settings)
        strict = (qa_settings or QASettings()).model_copy(update={"partial_credit": False})
        self.qa = QAScorer(strict)
        self.rubric_hash = rubric_hash(RUBRIC_VERSION, self.math.rubric_hash, self.qa.rubric_hash)

    def score(self, candidate: Candidate) -> Score:
        math = any(is_math_truth(t) for t in candidate.ground_truths)
        inner = (self.math if math else self.qa).score(candidate)
        correct = bool(inner.correct) if inner.correct is not None else inner.score >= 1.0
        components = ((f"correctness:{inner.judge_name}", float(correct), 1.0),)
        components += tuple((f"correctness/{n}", v, 0.0) for n, v, _ in inner.components)
        return Score(float(correct), components, self.name, self.rubric_hash, None, correct)
