"""`make setup` resolves off this machine: no constraint only this machine's local wheel folder satisfies, and
torch's CPU build comes from a local wheel when pip's find-links hold one, else from the Makefile's TORCH_INDEX
(PyTorch's CPU index). The public-index resolution itself is tests/e2e/test_install_public_index.py.

What cannot be checked here: an install from download.pytorch.org (this machine reaches PyPI only).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^TORCH_SPEC\s*:=\s*(\S+)$", re.M)


def _constraints() -> list[Requirement]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return [Requirement(ln) for ln in lines if ln.strip() and not ln.startswith("#")]


def test_every_constraint_is_a_public_pin() -> None:
    """A local version label (2.13.0+cpu) or a path resolves only where such a wheel lies."""
    bad = []
    for req in _constraints():
        specs = list(req.specifier)
        if req.url or len(specs) != 1 or specs[0].operator != "==" or Version(specs[0].version).local:
            bad.append(str(req))
    assert bad == []


def test_the_makefile_the_constraints_and_the_image_pin_the_same_torch() -> None:
    m = PIN.search((ROOT / "Makefile").read_text())
    assert m, "the Makefile pins torch in TORCH_SPEC"
    pinned = Requirement(m.group(1))
    constrained = next(r for r in _constraints() if r.name == "torch")
    assert str(pinned.specifier) == str(constrained.specifier)
    assert f"{m.group(1)}" in (ROOT / "k8s" / "image" / "install.sh").read_text()


def _make_commands(**overrides: str) -> str:
    args = [f"{k}={v}" for k, v in overrides.items()]
    out = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), "VENV=/nonexistent-venv", "/nonexistent-venv/.installed",
                          *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_setup_takes_torch_from_a_local_wheel_else_from_torch_index() -> None:
    text = _make_commands()
    local = re.search(r"pip install --quiet --no-index --no-deps torch==\S+ 2>/dev/null \\?\s*\|\| "
                      r"\S+ -m pip install --quiet --index-url (\S+) torch==", text)
    assert local, text
    assert local.group(1) == "https://download.pytorch.org/whl/cpu"
    assert "--index-url https://pypi.org/simple torch==" in _make_commands(TORCH_INDEX="https://pypi.org/simple")
    constraints_step = text.index("-c constraints.txt")
    assert text.index("--no-index --no-deps torch==") < constraints_step  # torch before the pinned set


def _probe(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The Makefile's first torch step, as a dry run (nothing is installed)."""
    m = PIN.search((ROOT / "Makefile").read_text())
    assert m
    return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                           "--no-index", "--no-deps", m.group(1)], capture_output=True, text=True, timeout=120, env=env)


def test_the_local_step_uses_the_local_wheel_here_and_fails_fast_without_it() -> None:
    here = _probe(dict(os.environ))
    assert here.returncode == 0, here.stderr  # CI's `make setup` on this machine never needs the network for torch
    off = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="")  # the local wheel folder switched off
    elsewhere = _probe(off)
    assert elsewhere.returncode != 0 and "No matching distribution found for torch" in elsewhere.stderr
