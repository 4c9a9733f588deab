"""``inference/`` sits below the agent: its modules import nothing from ``streamgrpo.rollout`` (the policy errors
live in ``inference/errors.py``; the vLLM server takes its settings as ``vllm_server.ServerSettings``, and its
launcher, which reads ``[rollout]``, is ``rollout/vllm_serve.py``), read from the syntax tree (function-level imports
included). :data:`ALLOWED` lists an exception with its reason; there is none."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: (module, imported module) -> why it is still there
ALLOWED: dict[tuple[str, str], str] = {}


def upward_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names[:1] if n == "streamgrpo.rollout" or n.startswith("streamgrpo.rollout.")}
        found |= {n for n in names[1:] if n == "streamgrpo.rollout.errors"}  # from streamgrpo.rollout import errors
    return found


def test_inference_imports_nothing_from_the_agent_but_the_allowed() -> None:
    found = {(str(p.relative_to(ROOT)), m) for p in sorted((ROOT / "inference").rglob("*.py")) for m in upward_imports(p)}
    assert found - set(ALLOWED) == set(), "inference/ imports the agent (rollout/); raise inference.errors instead"
    assert set(ALLOWED) <= found, "an allowed import is gone: remove it from ALLOWED"


def test_the_scanner_sees_what_it_must(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from streamgrpo.rollout.errors import PolicyError\n"
                      "def f():\n    from streamgrpo.rollout import errors\n    import streamgrpo.rollout.loop\n"
                      "from streamgrpo.inference.errors import PolicyError\n")
    assert upward_imports(module) == {"streamgrpo.rollout.errors", "streamgrpo.rollout", "streamgrpo.rollout.loop"}
