"""Table-driven judgement cases for the math and qa judges.

The expected outcomes were written before running the judges, from what a careful human grader
would accept under the documented rules (math: rel tol 1e-6; qa: SQuAD normalisation, EM or
bounded containment without hedge words).
"""

from __future__ import annotations

import pytest

from streamgrpo.judge.config import MathSettings
from streamgrpo.judge.scorers.base import Candidate
from streamgrpo.judge.scorers.math import MathScorer, math_equal
from streamgrpo.judge.scorers.qa import QAScorer, normalize_answer, qa_match, token_f1

MATH_CASES = [
    ("0.5", r"\frac{1}{2}", True),
    ("1,000", "1000", True),
    (r"\boxed{42}", "42", True),
    ("The answer is 7.", "7", True),
    ("-3", "3", False),
    ("3.14159", r"\pi", True),  # |diff|/pi = 8.4e-7 <= 1e-6: six significant digits count
    ("3.14", r"\pi", False),
    ("12 cm", "12", True),
    ("x = 5", "5", True),
    ("50%", "0.5", True),
    ("50%", "50", True),
    ("1.5e3", "1500", True),
    (r"1.5 \times 10^{3}", "1500", True),
    (r"\dfrac{3}{4}", "0.75", True),
    (r"$\frac{\sqrt{2}}{2}$", r"\frac{1}{\sqrt{2}}", True),
    ("2x+1", "1+2x", True),
    ("(1, 2)", "(1,2)", True),
    ("(1, 2)", "(2, 1)", False),
    ("There are 3 apples and 4 oranges, so 7 fruits in total.", "7", True),
    ("3 1/2", "7/2", True),
    ("\u22124", "-4", True),  # unicode minus sign
    (r"\frac12", "0.5", True),
    ("So the total is $1,250.", "1250", True),
    ("2^{10}", "1024", True),
    ("x^2-1", "(x-1)(x+1)", True),
    ("x^2+1", "(x-1)(x+1)", False),
    ("1/3", "0.333", False),  # rounding to 3 digits is not within 1e-6
    ("0.3333333", r"\frac{1}{3}", True),
    (r"45^\circ", "45", True),
    ("The answer is 17 because 10 + 7 = 17", "17", True),
    ("The answer is 5 apples, since 2 + 3 = 5 and 9 - 4 = 5; not 6", "5", True),
    ("007", "7", True),
    ("2e-3", "0.002", True),
    (r"\sqrt[3]{8}", "2", True),
    (r"2\sqrt{3}", r"\sqrt{12}", True),
    (r"The answer is $\boxed{-2}$.", "-2", True),
    ("10^{10^{10}}", "1", False),  # power tower: refused by the size bound, never evaluated
    ("I don't know", "5", False),
    (r"\boxed{\frac{\pi}{4}}", "0.785398163", True),
    ("12", "12.0001", False),
    ("1000000", "10^6", True),
    ("8", "8 km", True),
    ("The final answer is: 25", "25", True),
    ("0", "0.0", True),
    ("5", "x = 5", True),
    (r"\boxed{3}", "4", False),
    ("We get 4, so the result doubled is 8", "4", False),  # last number wins without a marker
]

QA_CASES = [
    ("Paris, France", ["Paris"], True),
    ("the Eiffel Tower", ["Eiffel Tower"], True),
    ("PARIS", ["paris"], True),
    ("London", ["Paris"], False),
    ("New Jersey", ["New York"], False),  # shares the token "new"
    ("Paris or London", ["Paris"], False),  # hedge
    ("not Paris", ["Paris"], False),
    ("Eiffel", ["Eiffel Tower"], False),  # only part of the gold
    ("George Washington", ["Washington", "George Washington"], True),
    ("The capital is Paris.", ["Paris"], True),
    (
        "It was the first president of the United States, a general of the war, named George Washington",
        ["George Washington"],
        False,  # containment is bounded at 6 extra tokens (documented limit)
    ),
    ("", ["Paris"], False),
    ("1969", ["1969"], True),
    ("July 20, 1969", ["1969"], True),
    ("Barack Obama", ["Obama"], True),
    ("J.K. Rowling", ["J. K. Rowling"], True),
    ("the Beatles", ["The Beatles"], True),
    ("Mount Everest", ["Everest"], True),
    ("Mount Kilimanjaro", ["Mount Everest"], False),
    ("Rome", ["Paris", "Lutetia"], False),
]


@pytest.mark.parametrize(("answer", "truth", "expected"), MATH_CASES)
def test_math_cases(answer: str, truth: str, expected: bool) -> None:
    assert bool(math_equal(answer, [truth])) is expected


@pytest.mark.parametrize(("answer", "golds", "expected"), QA_CASES)
def test_qa_cases(answer: str, golds: list[str], expected: bool) -> None:
    correct, _em, _f1 = qa_match(answer, golds)
    assert correct is expected


def test_case_table_size() -> None:
    assert len(MATH_CASES) + len(QA_CASES) >= 40


def test_math_unparsed_answer_is_none_and_scores_zero() -> None:
    assert math_equal("no idea", ["5"]) is None
    s = MathScorer().score(Candidate("q", "no idea", ("5",)))
    assert s.score == 0.0 and s.correct is False
    assert ("math_unparsed", 1.0, 0.0) in s.components


def test_math_any_of_several_truths() -> None:
    assert math_equal("0.25", ["1/3", r"\frac{1}{4}"]) is True


def test_math_tolerance_is_configurable() -> None:
    loose = MathSettings(rel_tol=1e-2)
    assert math_equal("3.14", [r"\pi"], loose) is True
    assert math_equal("3.14", [r"\pi"]) is False


def test_math_percent_as_fraction_switch() -> None:
    assert math_equal("50%", ["0.5"], MathSettings(percent_as_fraction=False)) is False
    assert math_equal("50%", ["50"], MathSettings(percent_as_fraction=False)) is True


def test_math_unparseable_truth_never_matches() -> None:
    assert math_equal("5", ["five"]) is False


def test_squad_normalisation() -> None:
    assert normalize_answer("  The  Eiffel-Tower!! ") == "eiffel tower"
    assert normalize_answer("An apple a day") == "apple day"


def test_token_f1_values() -> None:
    assert token_f1("New Jersey", "New York") == pytest.approx(0.5)
    assert token_f1("Eiffel", "Eiffel Tower") == pytest.approx(2 / 3)
    assert token_f1("London", "Paris") == 0.0


def test_qa_scorer_partial_credit_and_components() -> None:
    s = QAScorer().score(Candidate("q", "New Jersey", ("New York", "NYC")))
    assert s.correct is False and s.score == pytest.approx(0.5)
    assert sum(v * w for _, v, w in s.components) == pytest.approx(s.score)
    from streamgrpo.judge.config import QASettings

    strict = QAScorer(QASettings(partial_credit=False)).score(Candidate("q", "New Jersey", ("New York",)))
    assert strict.score == 0.0


def test_qa_correct_scores_one() -> None:
    s = QAScorer().score(Candidate("q", "Paris, France", ("Paris",)))
    assert s.correct is True and s.score == 1.0 and s.judge_name == "qa"


@pytest.mark.parametrize(
    "hostile",
    ["sqrt(10^(10^10))", "9^9^9", "2^(2^(2^(2^2)))", "exp(exp(exp(exp(10))))", "pi.n()", "x.__class__",
     "().__class__.__bases__[0].__subclasses__()", "__import__('os').system('true')", "1" * 5000,
     r"\frac{" * 60 + "1" + "}" * 60],
)
def test_math_hostile_inputs_are_refused_or_bounded(hostile: str) -> None:
    # must return (pytest-timeout guards a hang) and never match a truth the input does not contain
    assert math_equal(hostile, ["7"]) in (None, False)


@pytest.mark.parametrize(
    "hostile",
    ["10^{100000}", "9^{9^{9}}", "$9^{9^{9}}$", "1e100000", "{" * 2000 + "1" + "}" * 2000,
     "\\left(" * 300 + "1" + "\\right)" * 300, "\\boxed{" + "x^" * 200 + "2}", "a" * 20000,
     "$" + "(" * 500 + "1" + ")" * 500 + "$", "2^{2^{2^{2^{2^{2}}}}}"],
)
def test_math_more_hostile_inputs_are_bounded(hostile: str) -> None:
    # huge exponents, deep nesting, long input: refused before parsing or bounded after it
    assert math_equal(hostile, ["7"]) in (None, False)


@pytest.mark.parametrize(
    ("answer", "truth", "expected"),
    [("0.0000001", "0.0000004", False),  # override 1: math-verify alone rounds both to 0 and says equal
     ("1234567.4", "1234567", True),  # relative: 7 significant digits agree (math-verify: 6 decimals differ)
     ("1000001", "1000000", False), ("3/4", "0.75", True),  # exact rationals compare exactly
     ("1.5e+21", "1500000000000000000000", True),  # override 2: the calculator's float notation
     ("-3 1/4", "-13/4", True)],  # override 3: a negative mixed number
)
def test_math_documented_overrides(answer: str, truth: str, expected: bool) -> None:
    assert math_equal(answer, [truth]) is expected


def test_math_judge_runs_on_worker_threads() -> None:
    # math-verify's own timeout (signal.alarm) fails off the main thread; ours runs in a child process
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: bool(math_equal(c[0], [c[1]])), MATH_CASES))
    assert got == [expected for _, _, expected in MATH_CASES]


def test_math_rubric_is_a_new_version() -> None:
    from importlib.metadata import version

    from streamgrpo.judge.scorers.base import rubric_hash
    from streamgrpo.judge.scorers.math import RUBRIC_VERSION

    s = MathScorer()
    assert RUBRIC_VERSION == "math-v3"  # v3: an expression over the bounds reads nothing (issue 24, 7)
    assert s.rubric_hash != rubric_hash("math-v1", s.settings.model_dump_json())
    versions = (f"math-verify {version('math-verify')}", f"latex2sympy2_extended {version('latex2sympy2_extended')}")
    assert s.rubric_hash != rubric_hash("math-v2", s.settings.model_dump_json(), *versions)
    assert s.rubric_hash == rubric_hash("math-v3", s.settings.model_dump_json(),
                                        f"math-verify {version('math-verify')}",
                                        f"latex2sympy2_extended {version('latex2sympy2_extended')}")


@pytest.mark.parametrize(
    ("truth", "is_math"),
    [("42", True), ("x = 5", True), (r"\pi", True), (r"\frac{1}{2}", True), ("(1, 2)", True), ("12 cm", True),
     ("50%", True), ("x^2-1", True), (r"2\sqrt{3}", True), ("1969", True),
     ("Paris", False), ("George Washington", False), ("J. K. Rowling", False), ("July 20, 1969", False),
     ("the Beatles", False), ("", False)],
)
def test_is_math_truth_routes_hybrid_and_llm_fallback(truth: str, is_math: bool) -> None:
    from streamgrpo.judge.scorers.math import is_math_truth

    assert is_math_truth(truth) is is_math
