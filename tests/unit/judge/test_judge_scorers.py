"""Registry, rubric hashes, the hybrid judge and verdict parsing."""

from __future__ import annotations

import pytest

from streamgrpo.judge.config import HybridSettings, JudgeSettings, MathSettings
from streamgrpo.judge.errors import UnknownJudgeError, VerdictParseError
from streamgrpo.judge.scorers import SCORERS, build_scorer
from streamgrpo.judge.scorers.base import Candidate, Score
from streamgrpo.judge.scorers.hybrid import HybridScorer
from streamgrpo.judge.scorers.math import MathScorer
from streamgrpo.judge.scorers.verdict import load_json, parse_group_scores, parse_verdict


def test_registry_builds_every_judge() -> None:
    assert set(SCORERS) == {"correct", "math", "qa", "hybrid", "llm", "group_relative"}
    for name in SCORERS:
        scorer = build_scorer(name, JudgeSettings())
        assert scorer.name == name and len(scorer.rubric_hash) == 64


def test_unknown_judge_names_the_choices() -> None:
    with pytest.raises(UnknownJudgeError, match="hybrid"):
        build_scorer("vibes")


def test_rubric_hash_differs_per_judge_and_version() -> None:
    hashes = {build_scorer(n).rubric_hash for n in SCORERS}
    assert len(hashes) == len(SCORERS)
    assert MathScorer(MathSettings(rel_tol=1e-3)).rubric_hash != MathScorer().rubric_hash
    assert MathScorer().rubric_hash == MathScorer().rubric_hash


def test_score_json_round_trip() -> None:
    s = Score(0.5, (("a", 1.0, 0.5),), "qa", "h" * 64, None, False)
    assert Score.from_json(s.to_json()) == s


def _cand(answer: str, truths: tuple[str, ...], status: str = "ANSWERED", calls: int = 0) -> Candidate:
    return Candidate("q", answer, truths, status, 3, {"calculator": calls} if calls else {})


def test_hybrid_routes_correctness_by_ground_truth() -> None:
    h = HybridScorer()
    math_s = h.score(_cand(r"\boxed{12}", ("12",)))
    qa_s = h.score(_cand("Paris, France", ("Paris",)))
    assert math_s.components[0][0] == "correctness:math" and math_s.correct is True
    assert qa_s.components[0][0] == "correctness:qa" and qa_s.correct is True
    assert math_s.score == pytest.approx(1.0 + 0.1)  # correct + full format, no penalty


def test_hybrid_components_sum_to_score_and_penalties() -> None:
    settings = HybridSettings(tool_budget=2, tool_penalty=0.1, tool_penalty_cap=0.25, format_weight=0.3)
    h = HybridScorer(settings)
    s = h.score(_cand("7", ("8",), status="MAX_TURNS", calls=5))
    assert s.correct is False
    names = {n: (v, w) for n, v, w in s.components}
    assert names["format"][0] == pytest.approx(2 / 3)  # non-empty, short, but not answered
    assert names["tool_penalty"][0] == pytest.approx(-0.25)  # 3 extra calls * 0.1, capped at 0.25
    assert s.score == pytest.approx(0.0 + 0.3 * 2 / 3 - 0.25)
    assert sum(v * w for _, v, w in s.components) == pytest.approx(s.score)


def test_hybrid_empty_and_too_long_answers_fail_format() -> None:
    h = HybridScorer(HybridSettings(max_answer_chars=10))
    empty = {n: v for n, v, _ in h.score(_cand("", ("Paris",))).components}
    long = {n: v for n, v, _ in h.score(_cand("Paris " * 5, ("Paris",))).components}
    assert empty["format/non_empty"] == 0.0
    assert long["format/not_too_long"] == 0.0 and long["format/non_empty"] == 1.0


def test_verdict_strict_and_repairs() -> None:
    v = parse_verdict('{"correct": true, "score": 1, "explanation": "ok"}')
    assert (v.correct, v.score, v.repaired) == (True, 1.0, False)
    v = parse_verdict('Here you go: {correct: "false", score: "0.2",}')
    assert (v.correct, v.score, v.repaired) == (False, 0.2, True)
    v = parse_verdict('{"correct": true}')
    assert (v.score, v.repaired) == (1.0, True)


@pytest.mark.parametrize(
    "text",
    ["", "yes", '{"score": 0.5}', '{"correct": "maybe", "score": 0.5}', '{"correct": true, "score": -0.1}',
     '{"correct": true, "score": "high"}', '{"correct": true, "score": 0.5', "[1, 2]"],
)
def test_verdict_failures(text: str) -> None:
    with pytest.raises(VerdictParseError):
        parse_verdict(text)


def test_group_scores_parse() -> None:
    assert parse_group_scores('{"scores": [0.1, 0.9]}', 2) == ([0.1, 0.9], False)
    with pytest.raises(VerdictParseError, match="ids"):
        parse_group_scores('{"scores": [{"id": 1, "score": 0.1}, {"id": 1, "score": 0.2}]}', 2)
    with pytest.raises(VerdictParseError):
        parse_group_scores('{"scores": [0.1, true]}', 2)


def test_load_json_python_literals() -> None:
    assert load_json("{'a': None, 'b': False}") == ({"a": None, "b": False}, True)
