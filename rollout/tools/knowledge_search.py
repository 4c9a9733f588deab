"""BM25 search over a corpus of passages (default: the built-in fact archive), on bm25s.

:class:`BM25Index`: bm25s's eager sparse BM25 (Lucene idf ``log(1 + (N-n+0.5)/(n+0.5))``, k1=1.5,
b=0.75; float32 scores times (k1 + 1), the classic Okapi values that Lucene 8+ and bm25s drop) on our
tokens: lower-cased ``[a-z0-9]+`` runs, numbers whole (``1369``), one-letter tokens kept, a short
English stop-word list removed; no stemming (Snowball moved none of the 110 built-in lookups and
merges "founded" with "found"). Repeated query words count once; ties go by corpus order.
bm25s, not tantivy: exact configurable formula, numpy only (tantivy fixes k1=1.2, stores lengths lossily).

A user corpus is a JSONL or Parquet file of passages with fields ``id``, ``text`` and optional
``title`` (``[rollout.tools.knowledge] corpus_path``); rows missing ``id`` or ``text`` make the build fail
with the row number (an operator error, raised once at start).
Not covered: phrase queries, incremental updates, corpora that do not fit in memory (100k: BENCHMARKS.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streamgrpo.rollout.tools.base import Param, Tool, ToolExample, ToolSpec
from streamgrpo.rollout.tools.errors import ToolConfigError, ToolInputError
from streamgrpo.tasks.builtin import Passage, builtin_corpus
from streamgrpo.tasks.datasets import DatasetError, RowError, iter_records

_TOKEN = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how in is it its of on or she "
    "that the their then this to was were what when where which who whom why will with according archive "
    "find tell me please".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric tokens without stop words."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class BM25Index:
    """Okapi BM25 (bm25s, Lucene idf) over a fixed list of passages."""

    def __init__(self, passages: Sequence[Passage], k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s

        self.passages = list(passages)
        self._scale = k1 + 1  # bm25s follows Lucene >= 8 in dropping Okapi's (k1 + 1) factor; ranks are the same
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        vocab: dict[str, int] = {}  # token ids assigned while tokenising: bm25s skips its own vocab pass
        ids = [[vocab.setdefault(t, len(vocab)) for t in tokenize(f"{p.title} {p.text}")] for p in self.passages]
        if self.passages:  # bm25s cannot index an empty corpus
            self._bm25.index((ids, vocab), show_progress=False)

    def _scores(self, query: str) -> Any:
        """(N,) float32 scores of every passage; None when no query term is in the corpus."""
        vocab = getattr(self._bm25, "vocab_dict", {})  # absent for an empty corpus
        ids = sorted({vocab[t] for t in tokenize(query) if t in vocab})
        return self._bm25.get_scores_from_ids(ids) * self._scale if ids else None

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every passage sharing at least one query term (doc index -> score)."""
        s = self._scores(query)
        return {} if s is None else {int(i): float(s[i]) for i in s.nonzero()[0]}

    def search(self, query: str, k: int) -> list[tuple[Passage, float]]:
        """Top ``k`` passages by score (ties by corpus order); empty when nothing matches."""
        s = self._scores(query)
        if s is None:
            return []
        k = min(k, len(s))
        floor = s[np.argpartition(-s, k - 1)[:k]].min()  # O(N); every tie at the k-th score is kept
        cand = np.flatnonzero((s >= floor) & (s > 0))
        top = cand[np.lexsort((cand, -s[cand]))][:k]
        return [(self.passages[i], float(s[i])) for i in top]


def load_passages(path: str | Path) -> list[Passage]:
    """Passages of a JSONL or Parquet file (fields id, text, optional title); ToolConfigError naming
    the row and field when a row is unusable."""
    out: list[Passage] = []
    try:
        for n, rec in iter_records(path, parquet_engine="pyarrow"):
            if isinstance(rec, RowError):
                raise ToolConfigError(f"corpus {path}: {rec}")
            for name in ("id", "text"):
                if rec.get(name) is None or not str(rec[name]).strip():
                    raise ToolConfigError(f"corpus {path}: row {n}: field {name!r} is missing or empty")
            out.append(Passage(str(rec["id"]), str(rec.get("title") or ""), str(rec["text"])))
    except DatasetError as exc:
        raise ToolConfigError(f"corpus {path}: {exc}") from exc
    if not out:
        raise ToolConfigError(f"corpus {path} has no passages")
    return out


def format_hits(hits: list[tuple[Passage, float]]) -> str:
    """Numbered passages, one block each."""
    return "\n".join(f"[{i}] {p.title}: {p.text}" if p.title else f"[{i}] {p.text}"
                     for i, (p, _) in enumerate(hits, start=1))


class KnowledgeSearch(Tool):
    """``{"query": "kingdom founded 1369"}`` -> the best matching passages of the corpus."""

    def __init__(self, passages: Sequence[Passage] | None = None, *, top_k: int = 3,
                 max_output_chars: int = 2000, corpus_name: str = "the built-in archive") -> None:
        super().__init__(max_output_chars=max_output_chars)
        self.index = BM25Index(builtin_corpus() if passages is None else passages)
        self.top_k = top_k
        self.spec = ToolSpec(
            name="knowledge_search",
            description=f"Keyword search (BM25) over {corpus_name}: {len(self.index.passages)} passages about "
            "kingdoms, cities, inventors and historical events by year. Returns the best matching passages. "
            "Put the distinctive words and numbers of what you need in the query.",
            params=(Param("query", "string", "Keywords, e.g. 'kingdom founded 1369' or 'events year 144'."),
                    Param("k", "integer", f"How many passages to return (default {top_k}).", required=False,
                          default=top_k)),
            limits="exact keyword matching (no synonyms); at most 20 passages per query.",
            examples=(ToolExample({"query": "historical event year 144"},
                                  "[1] Events of the year 144 AD: In the year 144 AD: Marcion of Sinope was ..."),),
        )

    def _call(self, args: dict[str, Any]) -> str:
        query = args["query"]
        k = args["k"]
        if not 1 <= k <= 20:
            raise ToolInputError(f"k must be between 1 and 20, got {k}")
        if not tokenize(query):
            raise ToolInputError("the query has no searchable words; use names, places or numbers")
        hits = self.index.search(query, k)
        if not hits:
            return f"no passage matches {query!r}; try other keywords"
        return format_hits(hits)
