"""Property tests (hypothesis) of what ``submit`` reads and builds: any file content (JSONL, JSON,
CSV, Parquet bytes; random JSON rows of the known columns; random CSV cells) gives rows that are a
TaskRow or a RowError, or one DatasetError for the whole file, never another exception; and any
row becomes an encodable, size-checked record or a TaskValidationError (no broker needed)."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from fixtures.fuzz import EXAMPLES, fuzz
from hypothesis import given
from hypothesis import strategies as st

from streamgrpo.avro.codec import Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.tasks.datasets import DatasetError, RowError, TaskRow, iter_rows
from streamgrpo.topics.sdk import MAX_GROUP_SIZE, TaskValidationError, encode_row

COLUMNS = ["question", "answer", "ground_truths", "golden_answers", "final_answer", "difficulty", "topic", "id",
           "source", "metadata", "group_size"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=30))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)
ROWS = st.dictionaries(st.sampled_from(COLUMNS), VALUES, max_size=6)


def _read_all(suffix: str, data: bytes) -> list[tuple[int, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"tasks{suffix}"
        path.write_bytes(data)
        try:
            rows = list(iter_rows(path))
        except DatasetError:
            return []
    for n, row in rows:
        assert isinstance(n, int) and n >= 1
        assert isinstance(row, (TaskRow, RowError)), type(row)
        if isinstance(row, TaskRow):
            assert row.question.strip() and all(isinstance(t, str) and t for t in row.ground_truths)
            assert row.group_size is None or isinstance(row.group_size, int)
    return rows


@fuzz()
@given(st.sampled_from([".jsonl", ".json", ".csv"]), st.binary(max_size=300))
def test_arbitrary_bytes_in_a_text_format(suffix: str, data: bytes) -> None:
    _read_all(suffix, data)


@fuzz(max(1, EXAMPLES // 10))
@given(st.binary(max_size=300))
def test_arbitrary_bytes_as_parquet(data: bytes) -> None:
    _read_all(".parquet", b"PAR1" + data + b"PAR1")


@fuzz(max(1, EXAMPLES // 2))
@given(st.lists(ROWS, max_size=5), st.booleans())
def test_random_rows_of_the_known_columns_as_jsonl_or_json(rows: list[dict[str, Any]], as_array: bool) -> None:
    text = json.dumps(rows, allow_nan=True) if as_array else "".join(json.dumps(r) + "\n" for r in rows)
    _read_all(".json" if as_array else ".jsonl", text.encode("utf-8", "surrogatepass"))


@fuzz()
@given(st.lists(st.lists(st.text(max_size=12), min_size=1, max_size=6), max_size=5), st.lists(
    st.sampled_from(COLUMNS), min_size=1, max_size=6, unique=True))
def test_random_csv_cells(cells: list[list[str]], header: list[str]) -> None:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(cells)
    _read_all(".csv", out.getvalue().encode("utf-8", "surrogatepass"))


TEXT = st.text(max_size=40)  # includes lone surrogates
TASK_ROWS = st.builds(
    TaskRow, question=TEXT, ground_truths=st.lists(TEXT, max_size=3), source=TEXT,
    metadata=st.dictionaries(TEXT, TEXT, max_size=3),
    group_size=st.one_of(st.none(), st.integers(-5, MAX_GROUP_SIZE + 5), st.integers()),
)


@fuzz()
@given(TASK_ROWS, st.integers(1, MAX_GROUP_SIZE), st.sampled_from([None, "override"]), st.integers(300, 2000))
def test_any_row_is_a_record_or_a_validation_error(row: TaskRow, group_size: int, source: str | None,
                                                   max_bytes: int) -> None:
    try:
        rec = encode_row(7, row, Codec(), KafkaSettings(), group_size=group_size, source=source, max_bytes=max_bytes)
    except TaskValidationError as exc:
        assert str(exc)
        return
    assert rec.row == 7 and len(rec.value) + 512 <= max_bytes
    task = Codec().decode(rec.value)
    assert task.group_size == (group_size if row.group_size is None else row.group_size)  # type: ignore[attr-defined]
    assert 1 <= task.group_size <= MAX_GROUP_SIZE  # type: ignore[attr-defined]


ANY = st.one_of(VALUES, st.lists(TEXT, max_size=3), st.dictionaries(TEXT, TEXT, max_size=3), TEXT)


@fuzz()
@given(ANY, ANY, ANY, ANY, st.one_of(st.none(), TEXT, st.integers()), st.one_of(st.integers(), st.none(), TEXT))
def test_make_task_builds_what_it_was_given_or_names_the_field(question: Any, source: Any, truths: Any, meta: Any,
                                                               task_id: Any, group_size: Any) -> None:
    from streamgrpo.topics.sdk import make_task

    try:
        task = make_task(question, source=source, group_size=group_size, ground_truths=truths, metadata=meta,
                         task_id=task_id)
    except TaskValidationError as exc:
        assert str(exc).startswith(("question:", "source:", "group_size:", "ground_truths", "metadata", "task_id:",
                                    "the task is")), str(exc)
        return
    # nothing converted: the Task holds exactly what was passed (question stripped)
    assert task.question == question.strip() and task.source == source and task.group_size == group_size
    assert task.ground_truths == list(truths) and all(isinstance(t, str) for t in truths)
    assert task.metadata == (meta or {}) and (task_id is None or task.envelope.task_id == task_id)
    assert Codec().decode(Codec().encode(task)) == task
