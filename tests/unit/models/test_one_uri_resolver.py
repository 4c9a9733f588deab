"""One uri resolver: only ``models/adapter_store.py`` turns an adapter uri into a path (``local_path``, which
confines it to the store when given one); nothing else in the product parses a uri or strips ``file://``.

Read from the syntax tree of every product package (the folders of pyproject's package-dir): a call to
``urlparse`` / ``urlsplit`` / ``unquote`` / ``url2pathname``, a ``file://`` string handled by ``removeprefix`` /
``startswith`` / ``replace``, and ``Path(x.uri)`` are findings outside the home, and so is importing one of those
functions (under any alias). :data:`ALLOWED` lists the one
parse that is not of an adapter uri. Not covered: a uri handed to a third-party loader by name (fsspec's download
in rollout/adapters.py goes through the store's ``is_remote`` first).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[3]
HOME = "models/adapter_store.py"
PARSERS = frozenset({"urlparse", "urlsplit", "unquote", "url2pathname"})
#: (file, function called) -> why it is not an adapter uri
ALLOWED = {("inference/vllm_server.py", "urlparse"): "the vLLM server's base URL (host and port), not an adapter"}


def product_files() -> Iterator[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for folder in sorted({d.split("/")[0] for d in config["tool"]["setuptools"]["package-dir"].values()}):
        yield from sorted((ROOT / folder).rglob("*.py"))


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def findings(source: str, rel: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("urllib.parse", "urllib.request"):
            out += [f"{rel}:{node.lineno}: import {a.name}" for a in node.names
                    if a.name in PARSERS and (rel, a.name) not in ALLOWED]  # an alias would hide the call
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        uri_arg = any(isinstance(a, ast.Attribute) and a.attr == "uri" for a in node.args)
        if (name in PARSERS and (rel, name) not in ALLOWED) \
                or (name in ("removeprefix", "startswith", "replace") and any("file:" in s for s in strings)) \
                or (name == "Path" and uri_arg):
            out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_only_the_adapter_store_resolves_a_uri() -> None:
    found = [f for path in product_files() if (rel := path.relative_to(ROOT).as_posix()) != HOME
             for f in findings(path.read_text(), rel)]
    assert not found, "a uri resolved outside models/adapter_store.py (call store.local_path):\n" + "\n".join(found)


def test_the_allowed_parse_still_exists() -> None:
    for rel, name in ALLOWED:
        tree = ast.parse((ROOT / rel).read_text())
        assert any(isinstance(n, ast.Call) and _name(n.func) == name for n in ast.walk(tree)), f"{rel}: no {name}"


def test_the_scanner_finds_what_it_must() -> None:
    bad = '''
from pathlib import Path
from urllib.parse import unquote, urlparse

def resolve(ann):
    return Path(unquote(urlparse(ann.uri).path))

def strip(uri):
    return Path(uri.removeprefix("file://"))

def load(event):
    return Path(event.uri)
'''
    got = findings(bad, "x.py")
    assert any(f.endswith(": urlparse(ann.uri)") for f in got) and any(f.endswith(": unquote(urlparse(ann.uri).path)")
                                                                       for f in got)
    assert any("removeprefix('file://')" in f for f in got) and any(f.endswith("Path(event.uri)") for f in got)
    assert any(f.endswith(": import unquote") for f in findings("from urllib.parse import unquote as u\n", "x.py"))
    assert findings("from streamgrpo.models import adapter_store as store\n"
                    "def load(ann, root):\n    return store.local_path(ann.uri, root)\n", "x.py") == []
