"""BM25 search over a corpus of passages (default: the built-in fact archive).

:class:`BM25Index` is Okapi BM25 (k1=1.5, b=0.75, Lucene-style idf ``log(1 + (N-n+0.5)/(n+0.5))``)
over a simple tokenizer: lower-cased ``[a-z0-9]+`` runs, numbers kept whole (``1369`` is one token,
which is what year/number lookups need), a short English stop-word list removed. Ties are broken
by corpus order, so results are deterministic.

A user corpus is a JSONL or Parquet file of passages with fields ``id``, ``text`` and optional
``title`` (``[tools.knowledge] corpus_path``); rows missing ``id`` or ``text`` make the build fail
with the row number (an operator error, raised once at start).

Not covered: stemming, phrase queries, incremental updates, corpora that do not fit in memory
(fine up to a few hundred thousand passages).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    """Okapi BM25 over a fixed list of passages."""

    def __init__(self, passages: Sequence[Passage], k1: float = 1.5, b: float = 0.75) -> None:
        self.passages = list(passages)
        self.k1, self.b = k1, b
        self.doc_tf: list[Counter[str]] = [Counter(tokenize(f"{p.title} {p.text}")) for p in self.passages]
        self.doc_len = [sum(tf.values()) for tf in self.doc_tf]
        self.avg_len = sum(self.doc_len) / len(self.doc_len) if self.doc_len else 0.0
        df: Counter[str] = Counter()
        for tf in self.doc_tf:
            df.update(tf.keys())
        n = len(self.passages)
        self.idf = {term: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self.doc_tf):
            for term in tf:
                self.postings.setdefault(term, []).append(i)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every passage sharing at least one query term (doc index -> score)."""
        out: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i in self.postings[term]:
                tf = self.doc_tf[i][term]
                norm = tf + self.k1 * (1 - self.b + self.b * self.doc_len[i] / (self.avg_len or 1.0))
                out[i] = out.get(i, 0.0) + idf * tf * (self.k1 + 1) / norm
        return out

    def search(self, query: str, k: int) -> list[tuple[Passage, float]]:
        """Top ``k`` passages by score (ties by corpus order); empty when nothing matches."""
        ranked = sorted(self.scores(query).items(), key=lambda item: (-item[1], item[0]))
        return [(self.passages[i], score) for i, score in ranked[:k]]


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
