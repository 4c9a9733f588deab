"""Knowledge search at NQ scale: the BM25 index before (own, pure Python, at ``V1_COMMIT``) and now (bm25s).

Corpus: ``--passages`` synthetic passages shaped like DPR's Wikipedia passages (a 2-4 word title, 60-140
words of text), words drawn from a Zipf distribution (s = 1.07) over a 60k-word vocabulary of
syllable words, ~35% English stop words, ~6% numbers (years, counts); seeded, identical every run.
Queries: ``--queries`` questions built from a random passage (a question word, 1-3 of its words picked
at random, so mostly frequent ones, plus 1-2 of its rarest words, stop words between).
Each implementation runs in its own process on the same corpus: build time (tokenising included),
resident memory added by the index, query latency p50/p95 for ``search(q, k=3)``, one query at a time,
and the top-1 agreement between the two. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V1_COMMIT = "55f9357"
_STOP = ("the of and in to a is was for on as by with at from that it his which an were are this be "
         "its has had or their also after first into two new other been".split())
_ONSET = "b c d f g h j k l m n p r s t v w z br ch dr gr kr pl st th tr".split()
_VOWEL = "a e i o u ai ea ie ou".split()


def corpus(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(id, title, text) of ``n`` passages; deterministic for ``seed``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab_size = 60_000
    syl = [o + v for o in _ONSET for v in _VOWEL]
    picks = rng.integers(0, len(syl), size=(vocab_size, 3))
    lens = rng.integers(2, 4, size=vocab_size)
    vocab = np.array(list(dict.fromkeys("".join(syl[j] for j in row[:k]) for row, k in zip(picks, lens, strict=True))))
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.07
    p /= p.sum()
    sizes = rng.integers(60, 141, size=n)
    words = vocab[rng.choice(len(vocab), size=int(sizes.sum()), p=p)]
    kind = rng.random(int(sizes.sum()))
    stops = np.array(_STOP)[rng.integers(0, len(_STOP), size=int(sizes.sum()))]
    nums = rng.integers(1000, 2025, size=int(sizes.sum())).astype(str)
    tokens = np.where(kind < 0.35, stops, np.where(kind < 0.41, nums, words))
    out, at = [], 0
    for i, size in enumerate(sizes):
        text = " ".join(tokens[at : at + size]).capitalize() + "."
        title = " ".join(w.capitalize() for w in words[at : at + 2 + i % 3])
        out.append((f"p{i}", title, text))
        at += size
    return out


def queries(passages: list[tuple[str, str, str]], n: int, seed: int = 1) -> list[str]:
    """Questions made from random passages, using their rarer words (what a searcher would type)."""
    import random
    from collections import Counter

    rng = random.Random(seed)
    df: Counter[str] = Counter()
    for _, title, text in passages:
        df.update(set(f"{title} {text}".lower().replace(".", "").split()))
    out = []
    for _ in range(n):
        _, title, text = passages[rng.randrange(len(passages))]
        words = sorted(w for w in set(f"{title} {text}".lower().replace(".", "").split()) if w not in _STOP)
        rare = sorted(words, key=lambda w: (df[w], w))[: rng.randint(1, 2)]
        common = rng.sample(words, rng.randint(1, 3))  # a passage's own words: mostly frequent ones (Zipf)
        out.append(f"{rng.choice(['when did', 'what is', 'who was', 'where is'])} the {' of '.join(common + rare)}")
    return out


def _index_class(impl: str) -> type:
    if impl == "bm25s":
        from streamgrpo.rollout.tools.knowledge_search import BM25Index

        return BM25Index
    tmp = Path(tempfile.mkdtemp(prefix="search_v1_"))
    src = subprocess.run(["git", "show", f"{V1_COMMIT}:rollout/tools/knowledge_search.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    (tmp / "knowledge_search_v1.py").write_text(src)
    sys.path.insert(0, str(tmp))
    return importlib.import_module("knowledge_search_v1").BM25Index  # type: ignore[no-any-return]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_one(impl: str, n: int, nq: int) -> dict[str, object]:
    from streamgrpo.tasks.builtin import Passage

    index_class = _index_class(impl)
    rows = corpus(n)
    qs = queries(rows, nq)
    passages = [Passage(*r) for r in rows]
    del rows
    gc.collect()
    before = _rss_mb()
    t = time.perf_counter()
    index = index_class(passages)
    build_s = time.perf_counter() - t
    gc.collect()
    index_mb = _rss_mb() - before
    lat, top = [], []
    for q in qs:
        t = time.perf_counter()
        hits = index.search(q, 3)
        lat.append(time.perf_counter() - t)
        top.append(hits[0][0].id if hits else None)
    lat.sort()
    return {"build_s": round(build_s, 2), "index_rss_mb": round(index_mb, 1),
            "query_p50_ms": round(statistics.median(lat) * 1e3, 3),
            "query_p95_ms": round(lat[int(0.95 * (len(lat) - 1))] * 1e3, 3),
            "queries_per_s": round(len(lat) / sum(lat), 1), "top1": top}


def main(argv: list[str]) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--impl", choices=["own", "bm25s", "both"], default="both")
    args = ap.parse_args(argv)
    if args.impl != "both":
        return run_one(args.impl, args.passages, args.queries)
    res = {}
    for impl in ("own", "bm25s"):  # each in its own process: memory figures do not mix
        cmd = [sys.executable, __file__, "--impl", impl, "--passages", str(args.passages),
               "--queries", str(args.queries)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
        res[impl] = json.loads(out.strip().splitlines()[-1])
    own, new = res["own"], res["bm25s"]
    agree = sum(a == b for a, b in zip(own.pop("top1"), new.pop("top1"), strict=True)) / args.queries
    lines = ["| metric | own BM25 (before) | bm25s (now) | own / bm25s |", "|---|---|---|---|"]
    for key in own:
        ratio = own[key] / new[key] if new[key] else float("nan")
        lines.append(f"| {key} | {own[key]:,} | {new[key]:,} | {ratio:.2f}x |")
    return {"bench": "search", "passages": args.passages, "queries": args.queries, "own": own, "bm25s": new,
            "top1_agreement": round(agree, 4), "table": "\n".join(lines)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
