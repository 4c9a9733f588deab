"""The `group_relative` judge (RULER-style): all N answers of a group scored in ONE LLM call.

The model sees the question, the reference answers (if any) and the N answers numbered 1..N, and
returns ``{"scores": [{"id": i, "score": 0..1, "explanation": ...}, ...]}`` — scores meant to rank
the answers against each other (GRPO only uses differences within a group). Parsing, repair and
failure follow :mod:`verdict`; ids must be exactly 1..N. On failure every answer is scored by the
programmatic fallback (math or qa) and marked ``fallback:<judge>`` as in :mod:`llm`.
``correct`` is None for model scores (a relative score is not a verdict).

The service buffers a group's rollouts until all N arrived (or ``group_wait_s`` passed) and calls
``score_group`` once. Scores depend on the whole group, so they are never cached per answer.
What is not covered: groups larger than the model's context (answers are not truncated here).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from streamgrpo.judge.config import LLMSettings, MathSettings, QASettings
from streamgrpo.judge.endpoint import ChatEndpoint
from streamgrpo.judge.errors import JudgeCallError, VerdictParseError
from streamgrpo.judge.scorers.base import Candidate, Score, rubric_hash
from streamgrpo.judge.scorers.llm import ProgrammaticFallback, references_text
from streamgrpo.judge.scorers.verdict import parse_group_scores

log = logging.getLogger(__name__)

RUBRIC_VERSION = "group-relative-v1"
SYSTEM_PROMPT = (
    "You compare several candidate answers to the same question and score each from 0 to 1 relative to "
    "the others: a correct, direct answer scores high, a wrong or evasive one low; equally good answers get "
    "equal scores; use the reference answers when given. Reply with ONLY a JSON object: "
    '{"scores": [{"id": 1, "score": <0..1>, "explanation": "<short>"}, ...]} with one entry per candidate.'
)


class GroupRelativeScorer:
    """One LLM call per group; programmatic per-answer fallback on failure."""

    name = "group_relative"
    needs_ground_truth = False
    context_free = False
    groupwise = True

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
            RUBRIC_VERSION, SYSTEM_PROMPT, self.settings.model, self.settings.temperature, self.settings.fallback
        )

    def messages(self, candidates: Sequence[Candidate]) -> list[dict[str, str]]:
        first = candidates[0]
        answers = "\n\n".join(f"Candidate {i}:\n{c.answer}" for i, c in enumerate(candidates, start=1))
        user = (
            f"Question:\n{first.question}\n\nReference answers:\n{references_text(first.ground_truths)}\n\n"
            f"{answers}\n"
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def score(self, candidate: Candidate) -> Score:
        return self.score_group([candidate])[0]

    def score_group(self, candidates: Sequence[Candidate]) -> list[Score]:
        """Scores of ``candidates`` (same question), in order."""
        if not candidates:
            return []
        try:
            text = self.endpoint.complete(self.messages(candidates))
            scores, repaired = parse_group_scores(text, len(candidates))
        except (JudgeCallError, VerdictParseError) as exc:
            log.warning("group_relative judge failed, using the programmatic fallback: %s", exc)
            return [self.fallback.score(c, self.name, self.rubric_hash, exc) for c in candidates]
        n = float(len(candidates))
        return [
            Score(
                s,
                (("relative_score", s, 1.0), ("parse_repaired", float(repaired), 0.0), ("group_n", n, 0.0)),
                self.name, self.rubric_hash, self.settings.model, None,
            )
            for s in scores
        ]
