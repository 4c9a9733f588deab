"""A row's own group_size is read (or rejected with its row number) and a non-UTF-8 file is a clear
error, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamgrpo.tasks.datasets import DatasetError, RowError, iter_rows


@pytest.mark.parametrize(
    ("cell", "expected"),
    [(3, 3), ("16", 16), (" 4 ", 4), (8.0, 8), ("-2", -2), (None, None)],
)
def test_group_size_is_read_from_the_row(tmp_path: Path, cell: object, expected: int | None) -> None:
    import json

    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"question": "q?", "answer": "1", "group_size": cell}) + "\n")
    [(n, row)] = list(iter_rows(f))
    assert n == 1 and not isinstance(row, RowError)
    assert row.group_size == expected  # the range (1..256) is checked where the Task is built


@pytest.mark.parametrize("cell", ["many", 2.5, True, [4], "9" * 40, "+-5"])
def test_a_group_size_that_is_not_an_integer_is_a_row_error(tmp_path: Path, cell: object) -> None:
    import json

    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"question": "q?", "answer": "1", "group_size": cell}) + "\n")
    [(_, row)] = list(iter_rows(f))
    assert isinstance(row, RowError) and row.field == "group_size"


def test_group_size_in_a_csv_cell(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("question,answer,group_size\nq1?,1,12\nq2?,2,\n")
    rows = [row for _, row in iter_rows(f)]
    assert [getattr(r, "group_size", "err") for r in rows] == [12, None]


def test_non_utf8_jsonl_is_a_row_error_and_the_next_rows_still_come(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(b'{"question": "a?", "answer": "1"}\n{"question": "caf\xe9?"}\n{"question": "b?", "answer": "2"}\n')
    rows = list(iter_rows(f))
    assert [n for n, _ in rows] == [1, 2, 3]
    assert isinstance(rows[1][1], RowError) and "not UTF-8 text (byte 0xe9 at offset" in str(rows[1][1])
    assert not isinstance(rows[2][1], RowError)


@pytest.mark.parametrize("name", ["t.csv", "t.json"])
def test_non_utf8_csv_or_json_array_is_a_dataset_error(tmp_path: Path, name: str) -> None:
    f = tmp_path / name
    body = "question,answer\ncaf\u00e9?,1\n" if name.endswith(".csv") else '[{"question": "caf\u00e9?"}]'
    f.write_bytes(body.encode("latin-1"))
    with pytest.raises(DatasetError, match=r"not UTF-8 text \(byte 0xe9"):
        list(iter_rows(f))
