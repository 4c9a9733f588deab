"""The default reward (`correct` judge): correctness and nothing else.

Properties: a wrong answer scores 0 whatever the trajectory did (answered at once, used tools, ran out of
turns, errored); a correct answer scores 1 whatever it did; no component with a non-zero weight can be
earned without the correct answer. The built-in tasks route to it by default.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.scorers import build_scorer
from streamgrpo.judge.scorers.base import Candidate
from streamgrpo.judge.scorers.correct import unevaluated_expression
from streamgrpo.tasks.builtin import heldout_tasks

SCORER = build_scorer("correct")


def candidate(answer: str, truths: tuple[str, ...], status: str = "ANSWERED", calls: int = 0) -> Candidate:
    return Candidate("q", answer, truths, status=status, turns=calls + 1,
                     tool_calls={"calculator": calls} if calls else {})


def test_builtin_tasks_and_unknown_sources_are_judged_by_correctness_only() -> None:
    settings = JudgeSettings()
    assert settings.routes["builtin"] == "correct" and settings.default_judge == "correct"


def test_a_wrong_immediate_answer_and_a_wrong_tool_using_trajectory_get_the_same_reward() -> None:
    truths = ("10063",)
    at_once = SCORER.score(candidate("42", truths, calls=0))
    with_tools = SCORER.score(candidate("10062", truths, status="MAX_TURNS", calls=4))
    empty = SCORER.score(candidate("", truths, status="MAX_TURNS", calls=4))
    assert at_once.score == with_tools.score == empty.score == 0.0
    assert SCORER.score(candidate("10063", truths, calls=0)).score == 1.0
    assert SCORER.score(candidate("10,063", truths, status="MAX_TURNS", calls=3)).score == 1.0


def test_no_partial_credit_for_words_of_the_answer() -> None:
    truths = ("Marcion of Sinope",)
    assert SCORER.score(candidate("Marcion", truths)).score == 0.0  # the qa judge's F1 would pay ~0.5
    assert build_scorer("qa").score(candidate("Marcion", truths)).score > 0.0  # (it does, by its own setting)
    assert SCORER.score(candidate("It was Marcion of Sinope", truths)).score == 1.0


STATUSES = st.sampled_from(["ANSWERED", "MAX_TURNS", "ERROR"])
TRUTHS = st.sampled_from([tuple(t.ground_truths) for t in heldout_tasks()])


@settings(max_examples=300, deadline=None)
@given(truths=TRUTHS, answer=st.text(max_size=40), status=STATUSES, calls=st.integers(0, 8))
def test_every_weighted_component_needs_the_correct_answer(truths: tuple[str, ...], answer: str, status: str,
                                                         calls: int) -> None:
    """Whatever the answer, status and tool calls: the reward is exactly 1 or 0, it is 1 only when the
    correctness judge (math or qa, no partial credit) says correct, and every component that carries
    weight is the correctness indicator itself."""
    score = SCORER.score(candidate(answer, truths, status, calls))
    assert score.score in (0.0, 1.0) and score.score == float(bool(score.correct))
    weighted = [(name, value) for name, value, weight in score.components if weight != 0.0]
    assert weighted == [(weighted[0][0], score.score)] and weighted[0][0].startswith("correctness:")
    same_answer_other_path = SCORER.score(candidate(answer, truths, "ANSWERED", 0))
    assert same_answer_other_path.score == score.score  # how the trajectory ended never pays


@settings(max_examples=200, deadline=None)
@given(truths=TRUTHS, noise=st.text(alphabet="0123456789+-*/^ .,{}x()", max_size=20))
def test_a_mathematical_looking_wrong_answer_scores_zero(truths: tuple[str, ...], noise: str) -> None:
    """Near-miss numbers and expressions: 1 only when the inner judge says the value is the truth and the answer
    is not the computation restated (an unevaluated expression against plain-number truths)."""
    truth = truths[0]
    answer = f"{truth}{noise}"
    score = SCORER.score(candidate(answer, truths))
    inner = build_scorer("math" if any(c.isdigit() for c in truth) else "qa").score(candidate(answer, truths))
    restated = all(re.fullmatch(r"-?\d+(\.\d+)?", t) for t in truths) and unevaluated_expression(answer)
    assert score.score == (1.0 if inner.correct and not restated else 0.0)


def test_the_questions_arithmetic_restated_is_not_an_answer() -> None:
    """The math judge reads "413 * 24 - 416" as 9496: a planner that copies the question's expression into its
    answer would be paid for a computation it never did. Against a plain-number truth it scores 0; an answer
    that states the value still scores 1, and a lone fraction is a value."""
    truths = ("9496",)
    for echo in ("413 * 24 - 416", "413*24-416", "(413 * 24) - 416", "$413 \\times 24 - 416$", "97 squared"):
        s = SCORER.score(candidate(echo, truths if "squared" not in echo else ("9409",), calls=1))
        assert s.score == 0.0 and s.components[0][0] == "correctness:unevaluated", echo
    for stated in ("9496", "9,496", "413*24-416 = 9496", "The result is 9496."):
        assert SCORER.score(candidate(stated, truths, calls=1)).score == 1.0, stated
    assert SCORER.score(candidate("3/4", ("0.75",))).score == 1.0
    # A truth that is itself an expression keeps the math judge's equivalence.
    assert SCORER.score(candidate("2*x + 2", ("2(x+1)",))).score == 1.0
