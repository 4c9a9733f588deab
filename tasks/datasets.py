"""Turn task files into :class:`TaskRow` lists: JSONL, JSON, CSV and Parquet; generic columns or the
two mission datasets.

Kinds (a dict registry, :data:`CONVERTERS`):

- ``deepmath`` (DeepMath-103K): ``question``, ``final_answer``, ``difficulty``, ``topic`` ->
  ``TaskRow(source="deepmath", ground_truths=[final_answer], metadata={difficulty, topic})``;
- ``nq`` (Natural Questions as shipped by FlashRAG): ``id``, ``question``, ``golden_answers`` (list)
  -> ``TaskRow(source="nq", ground_truths=golden_answers, metadata={id})``;
- ``generic``: ``question`` plus one of ``ground_truths`` / ``golden_answers`` (list, or a JSON
  list in a CSV cell) or ``answer`` / ``final_answer`` (one value); optional ``source``, ``id``,
  ``metadata`` (object of strings);
- every kind: an optional ``group_size`` column (integer) is the row's own GRPO group size;
- ``auto``: chosen from the first row's columns (``final_answer`` + ``difficulty`` -> deepmath,
  ``golden_answers`` -> nq, else generic).

The format comes from the extension (``.jsonl``/``.ndjson``, ``.json`` (array or lines), ``.csv``,
``.parquet``/``.pq``) or ``fmt``. Parquet is read with the Hugging Face ``datasets`` library
(``load_dataset("parquet", data_files=..., streaming=True)``: no cache copy, works on a 100k-row
file) when it is installed, else with pyarrow in batches; a directory means all its ``*.parquet``.

Bad rows never stop iteration: :func:`iter_rows` yields ``(row_number, TaskRow | RowError)`` with
1-based row numbers, so the caller decides to stop at the first error or to skip and report.
A file that cannot be opened at all raises :class:`DatasetError`; so does a CSV or JSON-array file
that is not UTF-8 (in JSONL the offending line is a RowError).

This module is part of the light producer SDK: no torch; ``datasets`` and ``pyarrow`` are imported
lazily. Not covered: remote URLs / hub ids (download the files first), compressed JSONL.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamgrpo.errors import StreamGRPOError

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet",
           ".pq": "parquet"}
KINDS = ("auto", "generic", "deepmath", "nq")


@dataclass(frozen=True)
class TaskRow:
    """One task read from a file or the built-in set (what ``streamgrpo submit`` publishes)."""

    question: str
    ground_truths: list[str] = field(default_factory=list)
    source: str = "generic"
    metadata: dict[str, str] = field(default_factory=dict)
    group_size: int | None = None  # the row's own GRPO group size (column ``group_size``); None: the caller's


class DatasetError(StreamGRPOError):
    """A task file cannot be read at all (missing, unknown format, unreadable Parquet)."""


class RowError(StreamGRPOError):
    """One row is unusable; names the 1-based row, the field and what is wrong."""

    def __init__(self, row: int, field_name: str, problem: str) -> None:
        super().__init__(f"row {row}: field {field_name!r}: {problem}")
        self.row = row
        self.field = field_name
        self.problem = problem


Record = dict[str, Any]
Converter = Callable[[int, Mapping[str, Any]], TaskRow]


def detect_format(path: Path, fmt: str | None = None) -> str:
    """The file format from ``fmt`` or the extension; DatasetError when unknown."""
    if fmt is not None:
        if fmt not in set(FORMATS.values()):
            raise DatasetError(f"unknown format {fmt!r}; use one of {sorted(set(FORMATS.values()))}")
        return fmt
    if path.is_dir():
        return "parquet"
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise DatasetError(f"{path}: cannot tell the format from the extension {path.suffix!r}; "
                           f"use one of {sorted(FORMATS)} or pass fmt=")
    return found


# -- raw records --------------------------------------------------------------------------------
TOO_DEEP = "JSON nested too deeply"


def _loads(text: str) -> Any:
    """``json.loads`` for untrusted text: nesting deeper than the decoder's recursion limit (a file, a
    line or a CSV/JSONL cell such as ``[[[[...``) raises a JSONDecodeError whose ``msg`` is TOO_DEEP
    instead of a RecursionError, so each caller handles one exception and names the row or file."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None


def _not_utf8(exc: UnicodeDecodeError) -> str:
    return (f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            "re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`")


def _jsonl(path: Path) -> Iterator[tuple[int, Record | RowError]]:
    with path.open("rb") as fh:
        n = 0
        for raw in fh:
            if not raw.strip():
                continue
            n += 1
            try:
                obj = _loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield n, RowError(n, "<line>", _not_utf8(exc))
                continue
            except json.JSONDecodeError as exc:
                yield n, RowError(n, "<line>", TOO_DEEP if exc.msg == TOO_DEEP
                                  else f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            yield n, obj if isinstance(obj, dict) else RowError(n, "<line>", "must be a JSON object")


def _json(path: Path) -> Iterator[tuple[int, Record | RowError]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: {_not_utf8(exc)}") from exc
    if not text.lstrip().startswith("["):
        yield from _jsonl(path)
        return
    try:
        items = _loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: {TOO_DEEP}" if exc.msg == TOO_DEEP
                           else f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    for n, obj in enumerate(items, start=1):
        yield n, obj if isinstance(obj, dict) else RowError(n, "<item>", "must be a JSON object")


def _csv(path: Path) -> Iterator[tuple[int, Record | RowError]]:
    with path.open(encoding="utf-8", newline="") as fh:
        try:
            for n, rec in enumerate(csv.DictReader(fh), start=1):
                if None in rec:
                    yield n, RowError(n, "<line>", "has more cells than the header")
                    continue
                yield n, {k: v for k, v in rec.items() if v not in (None, "")}
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path}: {_not_utf8(exc)}") from exc
        except csv.Error as exc:
            raise DatasetError(f"{path}: not a readable CSV file: {exc}") from exc


def _parquet_files(path: Path) -> list[str]:
    files = sorted(str(p) for p in path.glob("*.parquet")) if path.is_dir() else [str(path)]
    if not files:
        raise DatasetError(f"{path}: no *.parquet files in this directory")
    return files


def _parquet(path: Path, engine: str = "datasets") -> Iterator[tuple[int, Record | RowError]]:
    files = _parquet_files(path)
    if engine == "pyarrow":
        yield from _parquet_arrow(files)
        return
    try:
        import datasets  # noqa: PLC0415 - optional (ml extra); heavy
    except ImportError:
        yield from _parquet_arrow(files)
        return
    try:
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        yield from enumerate(iter(ds), start=1)
    except (OSError, ValueError, datasets.exceptions.DatasetGenerationError) as exc:
        raise DatasetError(f"{path}: cannot read Parquet with datasets: {exc}") from exc


def _parquet_arrow(files: list[str]) -> Iterator[tuple[int, Record | RowError]]:
    import pyarrow.parquet as pq  # noqa: PLC0415 - lazy

    n = 0
    for name in files:
        try:
            pf = pq.ParquetFile(name)
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{name}: cannot read Parquet: {exc}") from exc
        for batch in pf.iter_batches(batch_size=1024):
            for rec in batch.to_pylist():
                n += 1
                yield n, rec


READERS: dict[str, Callable[[Path], Iterator[tuple[int, Record | RowError]]]] = {
    "jsonl": _jsonl, "json": _json, "csv": _csv, "parquet": _parquet,
}


def iter_records(path: str | Path, fmt: str | None = None, *,
                 parquet_engine: str = "datasets") -> Iterator[tuple[int, Record | RowError]]:
    """Raw rows of a file as dicts (1-based numbers); unparseable rows come as RowError.

    ``parquet_engine="pyarrow"`` skips the (slow to import) ``datasets`` library for Parquet."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    fmt = detect_format(path, fmt)
    if fmt == "parquet":
        return _parquet(path, parquet_engine)
    return READERS[fmt](path)


# -- field helpers ------------------------------------------------------------------------------
def _question(n: int, rec: Mapping[str, Any]) -> str:
    if "question" not in rec or rec["question"] is None:
        raise RowError(n, "question", "missing")
    q = rec["question"]
    if not isinstance(q, str):
        raise RowError(n, "question", f"must be a string, got {type(q).__name__}")
    if not q.strip():
        raise RowError(n, "question", "empty")
    return q.strip()


def _answer(n: int, name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RowError(n, name, f"answers must be strings or numbers, got {type(value).__name__}")
    text = str(value).strip()
    if not text:
        raise RowError(n, name, "empty answer")
    return text


def _answer_list(n: int, name: str, value: Any) -> list[str]:
    if isinstance(value, str) and value.lstrip().startswith("["):  # a JSON list in a CSV cell
        try:
            value = _loads(value)
        except json.JSONDecodeError as exc:  # incl. TOO_DEEP: a cell of "[" x 30000
            raise RowError(n, name, f"looks like a JSON list but does not parse ({exc.msg})") from exc
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise RowError(n, name, f"must be a list of strings, got {type(value).__name__}")
    if not value:
        raise RowError(n, name, "empty list; at least one accepted answer is needed")
    return [_answer(n, name, v) for v in value]


def _group_size(n: int, rec: Mapping[str, Any]) -> int | None:
    """The row's own ``group_size`` column (an integer, or its text in a CSV cell); None when absent.
    Its range is checked where the Task is built (topics.sdk.make_task)."""
    value = rec.get("group_size")
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,18}", value.strip()):
        value = int(value.strip())
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RowError(n, "group_size", f"must be an integer, got {value!r:.40}")
    return value


def _scalar(value: Any) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


# -- converters ---------------------------------------------------------------------------------
def from_deepmath(n: int, rec: Mapping[str, Any]) -> TaskRow:
    """DeepMath-103K row -> TaskRow(source="deepmath")."""
    question = _question(n, rec)
    if rec.get("final_answer") is None:
        raise RowError(n, "final_answer", "missing")
    meta = {"row": str(n)}
    for key in ("difficulty", "topic"):
        if rec.get(key) is not None:
            meta[key] = _scalar(rec[key])
    return TaskRow(question, [_answer(n, "final_answer", rec["final_answer"])], "deepmath", meta, _group_size(n, rec))


def from_nq(n: int, rec: Mapping[str, Any]) -> TaskRow:
    """FlashRAG Natural Questions row -> TaskRow(source="nq")."""
    question = _question(n, rec)
    if rec.get("golden_answers") is None:
        raise RowError(n, "golden_answers", "missing")
    meta = {"row": str(n)}
    if rec.get("id") is not None:
        meta["id"] = _scalar(rec["id"])
    return TaskRow(question, _answer_list(n, "golden_answers", rec["golden_answers"]), "nq", meta, _group_size(n, rec))


def from_generic(n: int, rec: Mapping[str, Any]) -> TaskRow:
    """Generic row: question + ground_truths/golden_answers (list) or answer/final_answer (one)."""
    question = _question(n, rec)
    truths: list[str] = []
    for name in ("ground_truths", "golden_answers", "answer", "final_answer"):
        if rec.get(name) is not None:
            truths = _answer_list(n, name, rec[name])
            break
    meta: dict[str, str] = {"row": str(n)}
    raw_meta = rec.get("metadata")
    if raw_meta is not None:
        if isinstance(raw_meta, str):
            try:
                raw_meta = _loads(raw_meta)
            except json.JSONDecodeError as exc:  # incl. TOO_DEEP: '{"k":{"k":...' 100k deep
                raise RowError(n, "metadata", f"not a JSON object ({exc.msg})") from exc
        if not isinstance(raw_meta, Mapping):
            raise RowError(n, "metadata", f"must be an object, got {type(raw_meta).__name__}")
        for k, v in raw_meta.items():
            if isinstance(v, (Mapping, list)):  # str() would write a Python repr of it (and recurse without bound)
                raise RowError(n, "metadata", f"the value of {str(k)[:40]!r} must be a string, number or boolean, "
                               f"got {type(v).__name__} (flatten it)")
        meta.update({str(k): _scalar(v) for k, v in raw_meta.items() if v is not None})
    if rec.get("id") is not None:
        meta["id"] = _scalar(rec["id"])
    source = rec.get("source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise RowError(n, "source", "must be a non-empty string")
    return TaskRow(question, truths, source or "generic", meta, _group_size(n, rec))


CONVERTERS: dict[str, Converter] = {"deepmath": from_deepmath, "nq": from_nq, "generic": from_generic}


def detect_kind(rec: Mapping[str, Any]) -> str:
    """Which converter fits a row's columns."""
    if "final_answer" in rec and ("difficulty" in rec or "topic" in rec):
        return "deepmath"
    if "golden_answers" in rec:
        return "nq"
    return "generic"


def iter_rows(path: str | Path, fmt: str | None = None, kind: str = "auto") -> Iterator[tuple[int, TaskRow | RowError]]:
    """``(row_number, TaskRow | RowError)`` for every row of ``path`` (see the module docstring).

    ``kind="auto"`` picks the converter from the first row that is a JSON object/record.
    Raises DatasetError (file missing, unknown format or kind) before yielding anything.
    """
    if kind not in KINDS:
        raise DatasetError(f"unknown kind {kind!r}; use one of {KINDS}")
    records = iter_records(path, fmt)
    convert: Converter | None = None if kind == "auto" else CONVERTERS[kind]
    for n, rec in records:
        if isinstance(rec, RowError):
            yield n, rec
            continue
        if convert is None:
            convert = CONVERTERS[detect_kind(rec)]
        try:
            yield n, convert(n, rec)
        except RowError as err:
            yield n, err


def load_rows(path: str | Path, fmt: str | None = None, kind: str = "auto", *,
              skip_invalid: bool = False) -> tuple[list[TaskRow], list[RowError]]:
    """All rows of a file: raises the first RowError unless ``skip_invalid`` (then returns them)."""
    rows: list[TaskRow] = []
    errors: list[RowError] = []
    for _, row in iter_rows(path, fmt, kind):
        if isinstance(row, RowError):
            if not skip_invalid:
                raise row
            errors.append(row)
        else:
            rows.append(row)
    return rows, errors
