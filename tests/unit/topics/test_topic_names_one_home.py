"""Topic names have one home: product code outside topics/catalog.py names a topic by ``catalog.TASKS`` etc.

An AST scan of every module of pyproject's ``package-dir`` folders (topics/catalog.py excepted) reads every
string constant that is not a docstring, f-string text included, and flags:

- a hyphenated topic name (``adapter-events``, ``training-samples`` ...) wherever it stands as a word: in code,
  CLI help, log and error messages, pydantic descriptions, SQL. Text formats it from the constant;
- a one-word topic name (``tasks``, ``rollouts``, ``rewards``, ``groups``, ``verdicts``, ``evaluations``, which
  are also words and field names) as a whole constant, except as a dict key, a subscript index (other than
  ``.topics[...]``) or the key of ``.get/.pop/.setdefault`` (fields, columns, counters and JSON keys); and in text
  where it names a topic: right after a prefix field of an f-string (``f"{kafka.topic_prefix}tasks"``: use
  ``topics.clients.topic_name``), in backticks (`` `rollouts` ``), beside the word ``topic`` (``rollouts topic``)
  or an arrow (``rollouts -> rewards``).

Not flagged, on purpose: the word in prose ("Publish at most this many tasks."), and the identifiers of SQL text
in analysis/ and archive/ (``FROM rewards``, ``training_samples``): they are DuckDB view names, which
archive.duck derives from the catalog (one view per topic, ``view_name(topic)``) and users write in their own
SQL, not topic references. The Avro namespace ``streamgrpo.events`` names no topic.
Not covered: a topic name built by concatenation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

from streamgrpo.topics import catalog

ROOT = Path(__file__).resolve().parents[3]
NAMES = {spec.name for spec in catalog.TOPICS}
HYPHENATED = {n for n in NAMES if "-" in n}
WORDS = NAMES - HYPHENATED
_NAME = r"(?<![\w-])({})(?![\w-])"
_ANY_HYPHENATED = re.compile(_NAME.format("|".join(sorted(HYPHENATED))))
_WORD = "|".join(sorted(WORDS))
_WORD_AS_TOPIC = re.compile(rf"(?<=`)({_WORD})(?=`)|(?<![\w-])({_WORD})(?= (?:topic|->))"
                            rf"|(?:(?<=topic )|(?<=-> ))({_WORD})(?![\w-])")
_AFTER_PREFIX = re.compile(rf"({_WORD})(?![\w-])")
_KEY_CALLS = {"get", "pop", "setdefault"}

#: (path, fragment of the literal's lines) -> why the literal stays. Every entry must still match (no stale entries).
ALLOWED = {
    ("analysis/plots.py", 'set_ylabel("rollouts")'): "an axis label: the word, not the topic",
    ("analysis/plots.py", 'label="rollouts")'): "a legend label: the word, not the topic",
    ("lifecycle/view.py", 'LIVE_FIELDS = ("groups",'): "AdapterState field names",
    ("lifecycle/stats.py", 'COUNTS = ("rewards",'): "VersionStats counter names",
    ("lifecycle/stats.py", '"actions", "parse_failures", "rollouts",'): "VersionStats counter names",
    ("tasks/cli.py", "'passages' if corpus else 'tasks'"): "the word in a message: wrote N passages/tasks",
    # The root package (streamgrpo/) imports only its own modules: it sits below topics/, so its prose says the name.
    ("streamgrpo/config.py", '"fan-out chooses versions with it'): "root package: LoopSettings.canary_share help",
    ("streamgrpo/metrics.py", '"Records sent to dead-letters'): "root package: the dead_letters_total metric's help",
}


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return {id(n.body[0].value) for n in nodes  # type: ignore[attr-defined]
            if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}  # type: ignore[attr-defined]


def _named(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _field_positions(tree: ast.AST) -> set[int]:
    """ids of the constants that stand where a field, column or key name stands."""
    spots: list[ast.AST | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            spots += node.keys
        elif isinstance(node, ast.Subscript) and _named(node.value) != "topics":
            spots.append(node.slice)
        elif isinstance(node, ast.Call) and _named(node.func) in _KEY_CALLS and node.args:
            spots.append(node.args[0])
    return {id(s) for s in spots if s is not None}


def _after_prefix(tree: ast.AST) -> set[int]:
    """ids of the f-string text parts that follow a ``{...prefix...}`` field."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for field, text in zip(node.values, node.values[1:], strict=False):
                if isinstance(field, ast.FormattedValue) and "prefix" in ast.unparse(field.value).lower():
                    found.add(id(text))
    return found


def topic_literals(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, topic name) of every string constant in ``source`` that names a topic (the rules:
    module docstring)."""
    tree = ast.parse(source)
    docs, fields, prefixed = _docstrings(tree), _field_positions(tree), _after_prefix(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
            continue
        text = node.value
        names = [m.group(1) for m in _ANY_HYPHENATED.finditer(text)]
        if text in WORDS and id(node) not in fields:
            names.append(text)
        elif id(node) in prefixed and (m := _AFTER_PREFIX.match(text)):
            names.append(m.group(1))
        names += [next(g for g in m.groups() if g) for m in _WORD_AS_TOPIC.finditer(text)]
        found += [(node.lineno, node.end_lineno or node.lineno, name) for name in names]
    return sorted(found)


def test_the_scanner_finds_topic_names_and_leaves_words_and_fields_alone() -> None:
    found = [(line, name) for line, _, name in topic_literals(
        'A = read_topic(k, "groups")\nSAMPLES_TOPIC = "training-samples"\nx = ctx.topics["rewards"]\n'
        'for topic in ("rewards", "evaluations"):\n    pass\ndef f(topic: str = "tasks"): ...\n'
        'y = {"rollouts": 1, "tasks": 2}\nz = m.get("rollouts", 0) + r["groups"]\nw = f"{n} tasks"\n'
        'v = archive / "adapter-events"\nc = LogFollower(k, ["adapter-events", "groups"], h)\n'
        'h = click.option("--x", help="Every version (adapter-events, else the store).")\n'
        'e = f"published on {kafka.topic_prefix}evaluations; {n} evaluations"\n'
        'm = "no such id on `rollouts`; read the rollouts topic"\n'
        's = "judge (rollouts -> rewards)"\nq = "SELECT * FROM rewards JOIN training_samples USING (id)"\n'
        'def g():\n    """Reads adapter-events and `groups`."""\n')]
    assert found == [(1, "groups"), (2, "training-samples"), (3, "rewards"), (4, "evaluations"), (4, "rewards"),
                     (6, "tasks"), (10, "adapter-events"), (11, "adapter-events"), (11, "groups"),
                     (12, "adapter-events"), (13, "evaluations"), (14, "rollouts"), (14, "rollouts"),
                     (15, "rewards"), (15, "rollouts")]


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
            for first, last, name in topic_literals(path.read_text()):
                text = "\n".join(lines[first - 1:last])
                allowed = [key for key in ALLOWED if key[0] == rel and key[1] in text]
                allowed_seen.update(allowed)
                if not allowed:
                    found.append(f"{rel}:{first}: {name!r}")
    assert not found, f"{len(found)} topic literal(s); use streamgrpo.topics.catalog's constant:\n" + "\n".join(found)
    assert allowed_seen == set(ALLOWED), f"stale allowlist entries: {set(ALLOWED) - allowed_seen}"
