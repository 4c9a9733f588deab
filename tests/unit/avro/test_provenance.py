"""The ``human:<name>`` provenance has one home (avro/provenance.py): its rules, and a scan of the product.

Covered: building and recognising the name, the SQL predicate on real DuckDB rows, every writer and reader
going through it, and no other product module spelling the prefix as a value (an AST scan of string
constants and f-string parts; docstrings and help texts that merely mention ``human:<name>`` are fine).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import duckdb
import pytest
import tomllib

from streamgrpo.avro import provenance
from streamgrpo.lifecycle.actions import operator
from streamgrpo.models.errors import AdapterActionError
from streamgrpo.topics.sdk import LabelError, labeller

ROOT = Path(__file__).resolve().parents[3]
#: A string that IS the prefix as a value: it starts with it, or quotes it (SQL).
_SPELLING = re.compile(r"(^|['\"])human:")


def test_human_names_are_built_once_whatever_was_passed() -> None:
    assert provenance.human("ada") == provenance.human("human:ada") == provenance.human(" ada ") == "human:ada"
    assert provenance.human("") is None and provenance.human("human: ") is None
    assert provenance.is_human("human:mcp:claude") and not provenance.is_human("correct")
    assert labeller("human:ada") == operator("ada") == "human:ada"
    with pytest.raises(LabelError):
        labeller("human:")
    with pytest.raises(AdapterActionError):
        operator("  ")


def test_the_sql_predicate_keeps_judges_and_drops_people() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE rewards AS SELECT * FROM (VALUES ({'name': 'correct'}), ({'name': 'human:ada'}),"
                " ({'name': 'humane'})) t(judge)")
    kept = [r[0] for r in con.execute(f"SELECT judge.name FROM rewards WHERE {provenance.JUDGE_SQL}").fetchall()]
    assert sorted(kept) == ["correct", "humane"]


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return {id(n.body[0].value) for n in nodes  # type: ignore[attr-defined]
            if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}  # type: ignore[attr-defined]


def spellings(source: str) -> list[int]:
    """Line numbers of string constants (not docstrings) that spell the human prefix as a value."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and id(n) not in docs and _SPELLING.search(n.value))


def test_the_scanner_finds_what_it_must() -> None:
    assert spellings('P = "human:"\nQ = f"human:{x}"\nS = "WHERE name LIKE \'human:%\'"\n') == [1, 2, 3]
    assert spellings('"""Docs: human:<name>."""\nhelp_text = "recorded as human:<name>"\n') == []


def test_no_product_module_spells_the_prefix_but_its_home() -> None:
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    home = ROOT / "avro" / "provenance.py"
    found = {}
    for folder in set(package_dir.values()):
        for path in sorted((ROOT / folder).glob("*.py")):
            if path != home and (lines := spellings(path.read_text())):
                found[str(path.relative_to(ROOT))] = lines
    assert not found, f"spell the human provenance through streamgrpo.avro.provenance: {found}"
    assert spellings(home.read_text()), "the home itself must hold the spelling"
