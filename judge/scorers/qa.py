"""The `qa` judge: open-domain QA match against several golden answers (NQ / SQuAD style).

Normalisation (SQuAD): lowercase, drop punctuation, drop the articles a/an/the, collapse
whitespace. Per golden answer g and prediction p (token lists after normalisation):
- exact match: p == g;
- containment: g occurs as a contiguous token run inside p, p has at most ``max_extra_tokens``
  tokens beyond g, and none of the extra tokens is a hedge word ("or", "either", "maybe", "not"...):
  "Paris, France" vs "Paris" and "the Eiffel Tower in Paris" vs "Eiffel Tower" are correct;
  "Paris or London" vs "Paris" and "not Paris" vs "Paris" are not;
- token F1 (SQuAD): harmonic mean of token precision and recall (bag of tokens).
``correct`` = exact match or containment for ANY golden answer; ``score`` = 1.0 when correct, else
the best F1 over golden answers (or 0.0 without ``partial_credit``).

What is not covered: a golden answer only partly inside the prediction ("Eiffel" vs "Eiffel
Tower" is incorrect, F1 0.67), paraphrases and aliases ("JFK" vs "John F. Kennedy"), numbers
written as words, lists that name the gold among other candidates without a hedge word
("Paris, London" vs "Paris" counts as correct — use the llm judge where that matters).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

from streamgrpo.judge.config import QASettings
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer, rubric_hash

RUBRIC_VERSION = "qa-v1"
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…"}


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower, remove punctuation, articles and extra whitespace."""
    text = text.lower()
    text = "".join(" " if ch in _PUNCT else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between two (unnormalised) strings."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def _find_run(haystack: list[str], needle: list[str]) -> int:
    """Start index of the first contiguous occurrence of ``needle`` in ``haystack``, or -1."""
    n = len(needle)
    for i in range(len(haystack) - n + 1):
        if haystack[i : i + n] == needle:
            return i
    return -1


def contains_gold(prediction: str, gold: str, settings: QASettings) -> bool:
    """Containment rule of the module docstring."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not g or len(p) - len(g) > settings.max_extra_tokens:
        return False
    start = _find_run(p, g)
    if start < 0:
        return False
    extra = p[:start] + p[start + len(g) :]
    hedges = {normalize_answer(w) for w in settings.hedge_words}
    return not any(tok in hedges for tok in extra)


def qa_match(prediction: str, golds: Sequence[str], settings: QASettings | None = None) -> tuple[bool, float, float]:
    """(correct, best exact match, best F1) of ``prediction`` over ``golds``."""
    settings = settings or QASettings()
    norm_pred = normalize_answer(prediction)
    em = max((float(norm_pred == normalize_answer(g)) for g in golds), default=0.0)
    f1 = max((token_f1(prediction, g) for g in golds), default=0.0)
    correct = em == 1.0 or any(contains_gold(prediction, g, settings) for g in golds)
    return correct, em, f1


class QAScorer(SingleScorer):
    """Exact match / containment (1.0) or best token F1 against the golden answers."""

    name = "qa"
    needs_ground_truth = True
    context_free = True

    def __init__(self, settings: QASettings | None = None) -> None:
        self.settings = settings or QASettings()
        self.rubric_hash = rubric_hash(RUBRIC_VERSION, self.settings.model_dump_json())

    def score(self, candidate: Candidate) -> Score:
        correct, em, f1 = qa_match(candidate.answer, candidate.ground_truths, self.settings)
        value = 1.0 if correct else (f1 if self.settings.partial_credit else 0.0)
        components = (("qa_correct", float(correct), 0.0), ("qa_em", em, 0.0), ("qa_f1", f1, 0.0),
                      ("qa_score", value, 1.0))
        return Score(value, components, self.name, self.rubric_hash, None, correct)
