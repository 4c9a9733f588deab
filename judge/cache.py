"""Score cache: identical judgements are served from memory (bounded LRU), optionally from sqlite.

Key = sha256 over (judge name, rubric hash, question, answer, ground truths) — and, for judges whose
score also reads the rollout context (``context_free = False``, e.g. hybrid), status, turns and
tool calls. The rubric hash is part of the key, so a new rubric version never reads old scores.
Not cached: fallback scores (an LLM outage must not pin a programmatic score) and groupwise judges
(a relative score depends on the whole group).

The sqlite file (``cache.sqlite_path``) is shared across restarts and processes on one machine
(WAL mode; last writer wins on a race, which is harmless: equal keys have equal scores).
What is not covered: expiry by age, a cache shared across machines.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

from streamgrpo import metrics
from streamgrpo.judge.config import CacheSettings
from streamgrpo.judge.errors import JudgeError
from streamgrpo.judge.scorers.base import Candidate, Score, Scorer


def cache_key(scorer: Scorer, candidate: Candidate) -> str:
    """Deterministic key of everything ``scorer`` reads from ``candidate``."""
    parts: list[object] = [scorer.name, scorer.rubric_hash, candidate.question, candidate.answer,
                           list(candidate.ground_truths)]
    if not scorer.context_free:
        parts += [candidate.status, candidate.turns, sorted(candidate.tool_calls.items())]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


class ScoreCache:
    """Thread-safe LRU of Scores with an optional sqlite backing store."""

    def __init__(self, settings: CacheSettings | None = None) -> None:
        self.settings = settings or CacheSettings()
        self._lru: OrderedDict[str, Score] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0
        if self.settings.enabled and self.settings.sqlite_path is not None:
            self._db = self._open(self.settings.sqlite_path)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, score TEXT NOT NULL)")
        except (OSError, sqlite3.Error) as exc:
            raise JudgeError(f"cannot open the judge cache {path}: {exc}; fix judge.cache.sqlite_path") from exc
        return db

    def cacheable(self, scorer: Scorer, score: Score | None = None) -> bool:
        return self.settings.enabled and not scorer.groupwise and (score is None or not score.is_fallback)

    def get(self, scorer: Scorer, candidate: Candidate) -> Score | None:
        if not self.cacheable(scorer):
            return None
        key = cache_key(scorer, candidate)
        with self._lock:
            hit = self._lru.get(key)
            if hit is not None:
                self._lru.move_to_end(key)
                self.hits += 1
                metrics.current().inc(metrics.JUDGE_CACHE, result="hit")
                return hit
            if self._db is not None:
                row = self._db.execute("SELECT score FROM scores WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    score = Score.from_json(row[0])
                    self._remember(key, score)
                    self.hits += 1
                    metrics.current().inc(metrics.JUDGE_CACHE, result="hit")
                    return score
            self.misses += 1
            metrics.current().inc(metrics.JUDGE_CACHE, result="miss")
            return None

    def put(self, scorer: Scorer, candidate: Candidate, score: Score) -> None:
        if not self.cacheable(scorer, score):
            return
        key = cache_key(scorer, candidate)
        with self._lock:
            self._remember(key, score)
            if self._db is not None:
                self._db.execute("INSERT OR REPLACE INTO scores (key, score) VALUES (?, ?)", (key, score.to_json()))

    def _remember(self, key: str, score: Score) -> None:
        self._lru[key] = score
        self._lru.move_to_end(key)
        while len(self._lru) > self.settings.max_entries:
            self._lru.popitem(last=False)

    def __len__(self) -> int:
        return len(self._lru)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
