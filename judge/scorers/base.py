"""Common types of every scorer: the input (:class:`Candidate`), the result (:class:`Score`) and the
:class:`Scorer` protocol.

A scorer is a small object built from settings; ``score(candidate)`` is pure for the programmatic
judges (math, qa, hybrid) and does network I/O for the LLM judges. ``rubric_hash`` is the sha256 of
the judge's prompt/rubric/config version string, so scores of different judges or rubric versions
are never mixed (and never share a cache entry).
What is not covered: async scoring; the service runs blocking scorers in a thread pool.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


def rubric_hash(*parts: object) -> str:
    """sha256 (hex) of the judge's rubric/config version: any change of a part changes the hash."""
    text = json.dumps([str(p) for p in parts], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Candidate:
    """One answer to score, with the context a judge may read.

    ``status`` is the rollout status symbol (ANSWERED / MAX_TURNS / ERROR); ``tool_calls`` counts
    calls per tool. Programmatic correctness judges read only question, answer and ground truths.
    """

    question: str
    answer: str
    ground_truths: tuple[str, ...] = ()
    status: str = "ANSWERED"
    turns: int = 0
    tool_calls: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Score:
    """The result of one judgement.

    ``components``: every (name, value, weight) that went into ``score`` (weight 0 = informational).
    ``correct``: the judge's binary verdict, or None when it has none.
    """

    score: float
    components: tuple[tuple[str, float, float], ...]
    judge_name: str
    rubric_hash: str
    model: str | None = None
    correct: bool | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "score": self.score,
                "components": [list(c) for c in self.components],
                "judge_name": self.judge_name,
                "rubric_hash": self.rubric_hash,
                "model": self.model,
                "correct": self.correct,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Score:
        d = json.loads(text)
        return cls(
            score=float(d["score"]),
            components=tuple((str(n), float(v), float(w)) for n, v, w in d["components"]),
            judge_name=d["judge_name"],
            rubric_hash=d["rubric_hash"],
            model=d["model"],
            correct=d["correct"],
        )

    @property
    def is_fallback(self) -> bool:
        return any(name.startswith("fallback:") for name, _, _ in self.components)


@runtime_checkable
class Scorer(Protocol):
    """What the service needs of a judge.

    - ``name``: registry name (goes to ``JudgeInfo.name``); ``rubric_hash``: version hash.
    - ``needs_ground_truth``: the judge cannot score a task without ground truths.
    - ``context_free``: the score depends only on (question, answer, ground truths), so it is
      cacheable on those; otherwise the cache key also includes status, turns and tool calls.
    - ``groupwise``: the judge scores a whole group at once (``score_group``) and is not cached.
    """

    name: str
    rubric_hash: str
    needs_ground_truth: bool
    context_free: bool
    groupwise: bool

    def score(self, candidate: Candidate) -> Score: ...

    def score_group(self, candidates: Sequence[Candidate]) -> list[Score]: ...


class SingleScorer:
    """Base for judges that score one answer at a time; ``score_group`` maps ``score``."""

    name = "single"
    rubric_hash = ""
    needs_ground_truth = True
    context_free = True
    groupwise = False

    def score(self, candidate: Candidate) -> Score:  # pragma: no cover - abstract
        raise NotImplementedError

    def score_group(self, candidates: Sequence[Candidate]) -> list[Score]:
        return [self.score(c) for c in candidates]
