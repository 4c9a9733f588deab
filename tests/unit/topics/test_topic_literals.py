"""Topic names only from the catalog: product code outside topics/catalog.py refers to ``catalog.TASKS`` etc.

An AST scan of every module of pyproject's ``package-dir`` folders flags a string constant equal to a topic name
where it names a topic: a hyphenated name anywhere but in a docstring; a one-word name (``tasks``, ``rewards``,
``groups`` ... which are also ordinary words) as a direct argument of a call (or in a list/tuple/set that is
one), as the value of a name or parameter default whose name contains ``topic``, as the tuple a ``for topic in``
loops over, or as an index of ``.topics[...]``. Dict keys, ``.get()`` keys and f-string text are metric and
column names, not topic references. Not covered: a topic name built by concatenation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

from streamgrpo.topics import catalog

ROOT = Path(__file__).resolve().parents[3]
NAMES = {spec.name for spec in catalog.TOPICS}
#: (path, line text fragment) -> why the literal is not a topic reference, or why it stays for now.
ALLOWED = {
    ("analysis/plots.py", 'set_ylabel("rollouts")'): "an axis label: the word, not the topic",
    ("streams/fanout.py", 'ctx.topics["tasks"]'): "streams/fanout.py is being changed by another engineer (issue 24"
                                                  " stop/curriculum work); switch to catalog.TASKS when it lands",
}
_KEY_CALLS = {"get", "pop", "setdefault"}


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return {id(n.body[0].value) for n in nodes  # type: ignore[attr-defined]
            if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}  # type: ignore[attr-defined]


def _elements(node: ast.AST) -> list[ast.AST]:
    return list(node.elts) if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]


def _named(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _topic_positions(tree: ast.AST) -> set[int]:
    """ids of the nodes that stand where a topic name stands."""
    spots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _named(node.func) not in _KEY_CALLS:
            spots += [e for arg in node.args for e in _elements(arg)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any("topic" in _named(t).lower() for target in targets for t in _elements(target)):
                spots += [e for e in _elements(node.value)]
        elif isinstance(node, (ast.For, ast.AsyncFor)) and "topic" in _named(node.target).lower():
            spots += _elements(node.iter)
        elif isinstance(node, ast.Subscript) and _named(node.value) == "topics":
            spots.append(node.slice)
        elif isinstance(node, ast.arguments):
            args = [*node.posonlyargs, *node.args]
            for arg, default in zip(args[len(args) - len(node.defaults):], node.defaults, strict=True):
                if "topic" in arg.arg.lower():
                    spots.append(default)
    return {id(s) for s in spots}


def topic_literals(source: str) -> list[tuple[int, str]]:
    """(line, topic name) of every literal that names a topic in ``source``."""
    tree = ast.parse(source)
    docs, spots = _docstrings(tree), _topic_positions(tree)
    return sorted((n.lineno, n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in NAMES
                  and id(n) not in docs and ("-" in n.value or id(n) in spots))


def test_the_scanner_finds_what_it_must_and_leaves_words_alone() -> None:
    found = topic_literals(
        'A = read_topic(k, "groups")\nSAMPLES_TOPIC = "training-samples"\nx = ctx.topics["rewards"]\n'
        'for topic in ("rewards", "evaluations"):\n    pass\ndef f(topic: str = "tasks"): ...\n'
        'y = {"rollouts": 1, "tasks": 2}\nz = m.get("rollouts", 0)\nw = f"{n} tasks"\nv = archive / "adapter-events"\n'
        'c = LogFollower(k, ["adapter-events", "groups"], h)\n')
    assert found == [(1, "groups"), (2, "training-samples"), (3, "rewards"), (4, "evaluations"), (4, "rewards"),
                     (6, "tasks"), (10, "adapter-events"), (11, "adapter-events"), (11, "groups")]


def test_the_catalog_spells_each_name_once() -> None:
    constants = {v for k, v in vars(catalog).items() if k.isupper() and isinstance(v, str)}
    assert NAMES <= constants


def test_no_topic_literal_in_product_code_outside_the_catalog() -> None:
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found, allowed_seen = [], set()
    for folder in sorted(set(package_dir.values())):
        for path in sorted((ROOT / folder).glob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel == "topics/catalog.py":
                continue
            lines = path.read_text().splitlines()
            for line, name in topic_literals(path.read_text()):
                allowed = [key for key in ALLOWED if key[0] == rel and key[1] in lines[line - 1]]
                allowed_seen.update(allowed)
                if not allowed:
                    found.append(f"{rel}:{line}: {name!r}")
    assert not found, "use the catalog's constant (streamgrpo.topics.catalog):\n" + "\n".join(found)
    assert allowed_seen == set(ALLOWED), f"stale allowlist entries: {set(ALLOWED) - allowed_seen}"
