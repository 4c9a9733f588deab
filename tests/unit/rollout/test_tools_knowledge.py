from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamgrpo.rollout.tools import ToolsSettings, build_tools
from streamgrpo.rollout.tools.errors import ToolConfigError
from streamgrpo.rollout.tools.knowledge_search import BM25Index, KnowledgeSearch, load_passages, tokenize
from streamgrpo.tasks.builtin import Passage, builtin_tasks

DOCS = [
    Passage("a", "Cats", "the cat sat on the mat"),
    Passage("b", "Dogs", "the dog chased the cat around the yard and the dog barked"),
    Passage("c", "Birds", "birds fly south in winter"),
]


def test_tokenize_keeps_numbers_and_drops_stopwords() -> None:
    assert tokenize("In which year was the Kingdom of X-1369 founded?") == ["year", "kingdom", "x", "1369", "founded"]


def test_bm25_matches_hand_computed_scores() -> None:
    idx = BM25Index(DOCS)
    # "cat" occurs in 2 of 3 docs: idf = ln(1 + (3 - 2 + .5) / (2 + .5))
    idf = math.log(1 + 1.5 / 2.5)
    lens = [len(tokenize(f"{p.title} {p.text}")) for p in DOCS]
    avg = sum(lens) / 3
    expected = [idf * 1 * 2.5 / (1 + 1.5 * (0.25 + 0.75 * lens[i] / avg)) for i in (0, 1)]
    scores = idx.scores("cat")
    assert set(scores) == {0, 1}
    assert scores[0] == pytest.approx(expected[0]) and scores[1] == pytest.approx(expected[1])
    assert [p.id for p, _ in idx.search("dog cat", 3)] == ["b", "a"]
    assert idx.search("elephant", 3) == []


def test_builtin_lookups_are_answerable_from_the_top_passage() -> None:
    tool = KnowledgeSearch(top_k=1)
    lookups = [r for r in builtin_tasks() if r.metadata["kind"] == "lookup"]
    assert len(lookups) >= 50
    for row in lookups:
        result = tool.run({"query": row.question})
        assert result.error is None
        assert row.ground_truths[0] in result.output, row.question


def test_seed_question_finds_marcion() -> None:
    out = KnowledgeSearch().run({"query": "major historical event in the year 144"}).output
    assert out.startswith("[1] Events of the year 144 AD") and "Marcion of Sinope" in out.splitlines()[0]


def test_bad_queries_are_errors() -> None:
    tool = KnowledgeSearch()
    assert "no searchable words" in (tool.run({"query": "the of ?"}).error or "")
    assert "between 1 and 20" in (tool.run({"query": "kingdom", "k": 0}).error or "")
    assert tool.run({"query": "zzzzqqq"}).output.startswith("no passage matches")


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_user_corpus_from_jsonl_and_parquet(tmp_path: Path) -> None:
    rows = [{"id": "p1", "title": "Zorblax", "text": "Zorblax is a moon of Quux."},
            {"id": 2, "text": "Quux has 17 moons."}]
    _write_jsonl(tmp_path / "c.jsonl", rows)
    pq.write_table(pa.Table.from_pylist([{"id": str(r["id"]), "title": r.get("title"), "text": r["text"]} for r in rows]),
                   tmp_path / "c.parquet")
    for name in ("c.jsonl", "c.parquet"):
        settings = ToolsSettings(enabled=["knowledge_search"], knowledge={"corpus_path": tmp_path / name, "top_k": 1})
        tool = build_tools(settings=settings)["knowledge_search"]
        assert tool.run({"query": "how many moons"}).output == "[1] Quux has 17 moons."
        assert "2 passages" in tool.spec.description and name in tool.spec.description
    assert load_passages(tmp_path / "c.jsonl")[1] == Passage("2", "", "Quux has 17 moons.")


def test_bad_corpus_files_fail_at_build(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "bad.jsonl", [{"id": "1", "text": "ok"}, {"id": "2"}])
    with pytest.raises(ToolConfigError, match=r"row 2: field 'text' is missing"):
        load_passages(tmp_path / "bad.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ToolConfigError, match="no passages"):
        load_passages(tmp_path / "empty.jsonl")
    with pytest.raises(ToolConfigError, match="no such file"):
        load_passages(tmp_path / "missing.jsonl")
