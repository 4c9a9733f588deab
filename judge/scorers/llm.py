"""The `llm` judge: one chat call per answer to an OpenAI-compatible model, structured verdict JSON.

Protocol: the model answers ``{"correct": bool, "score": 0..1, "explanation": str}``; the reply is
parsed strictly, then repaired (:mod:`verdict`), else it fails. On failure (unrepairable reply, or
timeouts / HTTP errors after the endpoint's retries) the answer is scored by a programmatic judge
(math or qa, ``llm.fallback``) and the Score says so: judge name stays "llm", the first component
is ``fallback:<judge>``, an ``llm_error:<kind>`` component (weight 0) names the failure, ``model``
is None (no model produced the score) and the rubric hash is that of the fallback inside the llm
judge (so fallback scores never mix with model scores). Fallback scores are not cached. Without a
ground truth there is no fallback: :class:`ScoringError` is raised (the service dead-letters it).

What is not covered: judgement quality (that is the model's), explanations in the Reward (logged
at DEBUG only), multi-sample voting.
"""

from __future__ import annotations

import logging

from streamgrpo.judge.config import LLMSettings, MathSettings, QASettings
from streamgrpo.judge.endpoint import ChatEndpoint
from streamgrpo.judge.errors import JudgeCallError, ScoringError, VerdictParseError
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer, rubric_hash
from streamgrpo.judge.scorers.math import MathScorer, is_math_truth
from streamgrpo.judge.scorers.qa import QAScorer
from streamgrpo.judge.scorers.verdict import parse_verdict
from streamgrpo.redact import redact

log = logging.getLogger(__name__)

RUBRIC_VERSION = "llm-v1"
SYSTEM_PROMPT = (
    "You are a strict grader. Decide whether the candidate answer correctly answers the question. "
    "When reference answers are given, the candidate is correct if it states the same final answer "
    "(equivalent forms, units and phrasing are fine); extra correct context is fine; hedging between "
    "several answers is incorrect. Reply with ONLY a JSON object: "
    '{"correct": true|false, "score": <number from 0 to 1>, "explanation": "<one sentence>"}.'
)
USER_TEMPLATE = "Question:\n{question}\n\nReference answers:\n{references}\n\nCandidate answer:\n{answer}\n"


def references_text(truths: tuple[str, ...]) -> str:
    return "\n".join(f"- {t}" for t in truths) if truths else "(none given; judge on your own knowledge)"


class ProgrammaticFallback:
    """Chooses math or qa for a candidate (``auto``: math when a ground truth is mathematical)."""

    def __init__(self, mode: str, math_settings: MathSettings | None, qa_settings: QASettings | None) -> None:
        self.mode = mode
        self.math = MathScorer(math_settings)
        self.qa = QAScorer(qa_settings)

    def pick(self, candidate: Candidate) -> SingleScorer:
        mode = self.mode
        if mode == "auto":
            mode = "math" if any(is_math_truth(t) for t in candidate.ground_truths) else "qa"
        return self.math if mode == "math" else self.qa

    def score(self, candidate: Candidate, judge_name: str, judge_hash: str, error: Exception) -> Score:
        """The fallback Score, recorded as such; ScoringError without ground truths."""
        kind = "parse" if isinstance(error, VerdictParseError) else "call"
        if not candidate.ground_truths:
            raise ScoringError(redact(  # becomes Reward.error / DeadLetter.reason: no echoed API key
                f"{judge_name} judge failed ({kind}: {error}) and the programmatic fallback needs a ground truth"
            )) from error
        inner = self.pick(candidate).score(candidate)
        components = [(f"fallback:{inner.judge_name}", inner.score, 1.0), (f"llm_error:{kind}", 1.0, 0.0)]
        components += [(f"fallback/{n}", v, 0.0) for n, v, _ in inner.components]
        return Score(
            inner.score, tuple(components), judge_name,
            rubric_hash(judge_hash, "fallback", inner.rubric_hash), None, inner.correct,
        )


class LLMScorer(SingleScorer):
    """Verdict of an OpenAI-compatible model, with a programmatic fallback recorded as such."""

    name = "llm"
    needs_ground_truth = False
    context_free = True

    def __init__(
        self,
        settings: LLMSettings | None = None,
        math_settings: MathSettings | None = None,
        qa_settings: QASettings | None = None,
        endpoint: ChatEndpoint | None = None,
    ) -> None:
        self.settings = settings or LLMSettings()
        self.endpoint = endpoint or ChatEndpoint(self.settings)
        self.fallback = ProgrammaticFallback(self.settings.fallback, math_settings, qa_settings)
        self.rubric_hash = rubric_hash(
            RUBRIC_VERSION, SYSTEM_PROMPT, USER_TEMPLATE, self.settings.model, self.settings.temperature,
            self.settings.fallback,
        )

    def messages(self, candidate: Candidate) -> list[dict[str, str]]:
        user = USER_TEMPLATE.format(
            question=candidate.question, references=references_text(candidate.ground_truths), answer=candidate.answer
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def score(self, candidate: Candidate) -> Score:
        try:
            verdict = parse_verdict(self.endpoint.complete(self.messages(candidate)))
        except (JudgeCallError, VerdictParseError) as exc:
            log.warning("llm judge failed, using the programmatic fallback: %s", redact(str(exc)))
            return self.fallback.score(candidate, self.name, self.rubric_hash, exc)
        log.debug("llm verdict correct=%s score=%.3f: %s", verdict.correct, verdict.score, verdict.explanation)
        components = (
            ("llm_score", verdict.score, 1.0),
            ("llm_correct", float(verdict.correct), 0.0),
            ("parse_repaired", float(verdict.repaired), 0.0),
        )
        return Score(verdict.score, components, self.name, self.rubric_hash, self.settings.model, verdict.correct)
