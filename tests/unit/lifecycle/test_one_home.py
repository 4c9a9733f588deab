"""The staleness rule has one home: no admission or drop arithmetic on ``max_staleness`` / ``samples_per_step``
outside ``lifecycle/pacing.py``, and every former hot spot calls it.

Read from the syntax tree of every product package (the folders of pyproject's package-dir; tests and bench/ are
not product): an arithmetic, comparison or augmented assignment with ``max_staleness`` or ``samples_per_step`` as
an operand -- directly, as an attribute (``cfg.max_staleness``), or through a local name assigned from one --
is a finding; a call is opaque (``pacing.admit(..., cfg.max_staleness)`` hands the value to the rule). SQL text
(a string with SELECT / CASE / WHERE) that compares or multiplies either setting is a finding too. The few
expressions that are not pacing (counting samples toward one step) are listed in :data:`ALLOWED` with why.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[3]
HOME = "lifecycle/pacing.py"
WATCHED = frozenset({"max_staleness", "samples_per_step"})
#: (file, expression as ast.unparse writes it) -> why it is not the pacing rule
ALLOWED = {
    ("trainer/loop.py", "len(samples) < cfg.samples_per_step"): "collect() fills one step, the step's size",
    ("trainer/loop.py", "cfg.samples_per_step - len(samples)"): "how many samples the step still lacks",
    ("trainer/loop.py", "len(intake) < need"): "whether the intake holds what the step still lacks",
    ("lifecycle/published.py", "event.max_staleness is not None"): "whether a v4 writer recorded the setting",
}
#: Modules that applied the rule with their own formula before it had a home; each must call it now.
CALLERS = ("streams/fanout.py", "streams/follower.py", "trainer/intake.py", "trainer/rollback.py",
           "trainer/batching.py", "trainer/loop.py", "lifecycle/registry.py", "analysis/views.py")
SQL = re.compile(r"\b(SELECT|CASE|WHERE)\b")
SQL_RULE = re.compile(r"([<>]=?|\*)\s*[\w.\[\]'\"]*(max_staleness|samples_per_step)|"
                      r"(max_staleness|samples_per_step)['\"\]]*\s*\)?\s*([<>]=?|\*|\+|-)")


def product_files() -> Iterator[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = {d.split("/")[0] for d in config["tool"]["setuptools"]["package-dir"].values()}
    for folder in sorted(folders):
        yield from sorted((ROOT / folder).rglob("*.py"))


def refs(node: ast.AST, names: frozenset[str]) -> bool:
    """Whether ``node`` reads a watched value as an operand (calls are opaque)."""
    if isinstance(node, ast.Call):
        return False
    if isinstance(node, ast.Name) and node.id in names or isinstance(node, ast.Attribute) and node.attr in names:
        return True
    return any(refs(child, names) for child in ast.iter_child_nodes(node))


def tainted(scope: ast.AST) -> frozenset[str]:
    """The watched names plus the local names assigned from them in ``scope`` (to a fixpoint)."""
    names = set(WATCHED)
    while True:
        before = len(names)
        for node in ast.walk(scope):
            value = getattr(node, "value", None)
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and value is not None \
                    and refs(value, frozenset(names)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if len(names) == before:
            return frozenset(names)


def docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def findings(source: str, rel: str) -> list[str]:
    tree = ast.parse(source)
    out: list[str] = []
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        names = tainted(scope)
        for node in ast.walk(scope):
            operands: list[ast.AST] = []
            if isinstance(node, ast.BinOp):
                operands = [node.left, node.right]
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.AugAssign):
                operands = [node.target, node.value]
            if any(refs(o, names) for o in operands):
                text = ast.unparse(node)
                if (rel, text) not in ALLOWED:
                    out.append(f"{rel}:{getattr(node, 'lineno', 0)}: {text}")
    skip = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                and SQL.search(node.value) and SQL_RULE.search(node.value):
            out.append(f"{rel}:{node.lineno}: SQL {SQL_RULE.search(node.value).group(0)!r}")  # type: ignore[union-attr]
    return sorted(set(out))


def test_no_pacing_arithmetic_outside_its_home() -> None:
    found = []
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel != HOME:
            found += findings(path.read_text(), rel)
    assert not found, "staleness/admission arithmetic outside lifecycle/pacing.py (call the rule instead):\n" + \
        "\n".join(found)


def test_the_allowed_expressions_still_exist() -> None:
    """A stale allowance would let the same text back in elsewhere in that file unnoticed."""
    for rel, text in ALLOWED:
        tree = ast.parse((ROOT / rel).read_text())
        assert any(ast.unparse(n) == text for n in ast.walk(tree)), f"{rel}: {text!r} is gone; drop it from ALLOWED"


def test_every_former_hot_spot_calls_the_rule() -> None:
    for rel in CALLERS:
        source = (ROOT / rel).read_text()
        assert re.search(r"^from streamgrpo\.lifecycle(\.pacing)? import", source, re.M), f"{rel} does not use pacing"


def test_the_scanner_finds_what_it_must() -> None:
    bad = '''
def admit(policy, backlog):
    budget = (1 + policy.max_staleness) * policy.samples_per_step
    return backlog > budget

def stale(cfg, sample, current):
    s = cfg.max_staleness
    lag = current - sample.behaviour_version
    return lag > s

def renamed(max_staleness, version):
    version -= max_staleness
    return version

SQL = "SELECT CASE WHEN lag > r.max_staleness THEN 'stale' END FROM x"
'''
    got = findings(bad, "x.py")
    assert any("(1 + policy.max_staleness) * policy.samples_per_step" in f for f in got)
    assert any("lag > s" in f for f in got)  # through a local name
    assert any("version -= max_staleness" in f for f in got)
    assert any("SQL" in f for f in got)
    good = '''
def admit(policy, backlog):
    """Admitted while queued + group <= (1 + max_staleness) * samples_per_step (prose, not a formula)."""
    return pacing.admit(backlog, 4, Pacing(policy.max_staleness, policy.samples_per_step), 8) is None

def stale(cfg, sample, current):
    return pacing.drop_reason(sample.behaviour_version, current, cfg.max_staleness) == "stale"
'''
    assert findings(good, "x.py") == []
