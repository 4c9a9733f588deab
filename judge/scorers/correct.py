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

One more thing is not an answer: the question's arithmetic, restated. The math judge reads "413 * 24 - 416"
as the number it denotes, so a planner that copies the question's expression (or its own calculator input)
into the answer would be paid for the computation without doing it -- the "answer without tools" shortcut
again, and one a 135M planner finds (`bench/probe_signal.py` shows it). Against a ground truth that is a
plain number, an answer whose whole text is an unevaluated expression of number literals
(:func:`unevaluated_expression`) scores 0 with the component ``correctness:unevaluated``. An answer that
states the value ("9496", "413*24-416 = 9496", "The result is 9496") is read by the math judge as before.

What is covered: correctness against the ground truths. What is not: judging reasoning or tool use (the
``hybrid`` judge, with its format and tool-use terms, stays available for sources that want them).
"""

from __future__ import annotations

import re

from streamgrpo.judge.config import MathSettings, QASettings
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer, rubric_hash
from streamgrpo.judge.scorers.math import MathScorer, is_math_truth
from streamgrpo.judge.scorers.qa import QAScorer

RUBRIC_VERSION = "correct-v2"

_NUM = r"[-+]?\s*\d[\d,]*(?:\.\d+)?"
_OP = r"(?:\*\*|[-+*/^%\u00d7\u00f7\u00b7x]|\\times|\\cdot|\\div|mod)"
#: Two or more number literals joined by operators, with brackets; nothing else (no "=", no words).
_EXPRESSION = re.compile(rf"[\s(\[{{]*{_NUM}[\s)\]}}]*(?:{_OP}[\s(\[{{]*{_NUM}[\s)\]}}]*)+(?:squared|cubed)?\s*\.?")
_SQUARED = re.compile(rf"\s*\(?\s*{_NUM}\s*\)?\s*(?:squared|cubed|\^\s*\d+|\*\*\s*\d+)\s*\.?", re.IGNORECASE)
_FRACTION = re.compile(r"\s*[-+]?\d+\s*/\s*\d+\s*")  # "3/4" is an exact value, not a computation
_PLAIN_NUMBER = re.compile(r"\s*[-+]?\d[\d,]*(?:\.\d+)?\s*")


def unevaluated_expression(answer: str) -> bool:
    """True when ``answer`` is only arithmetic on number literals ("413 * 24 - 416", "(5+3)*2", "17 squared"):
    the computation asked for, not its result. A lone fraction ("3/4") is a value."""
    text = answer.strip().strip("$").strip()
    if len(text) > 200:  # a restated question is short; bounds the regex work on hostile answers
        return False
    return not _FRACTION.fullmatch(text) and bool(_EXPRESSION.fullmatch(text) or _SQUARED.fullmatch(text))


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
        if (math and all(_PLAIN_NUMBER.fullmatch(t) for t in candidate.ground_truths)
                and unevaluated_expression(candidate.answer)):
            return Score(0.0, (("correctness:unevaluated", 0.0, 1.0),), self.name, self.rubric_hash, None, False)
        inner = (self.math if math else self.qa).score(candidate)
        correct = bool(inner.correct) if inner.correct is not None else inner.score >= 1.0
        components = ((f"correctness:{inner.judge_name}", float(correct), 1.0),)
        components += tuple((f"correctness/{n}", v, 0.0) for n, v, _ in inner.components)
        return Score(float(correct), components, self.name, self.rubric_hash, None, correct)
