"""The pinned dependency set resolves from the public index alone, as on a generic Linux x86_64 machine:
pip in isolated mode (no pip config, so none of this machine's local wheel folders, extra indexes or global
constraints), the public PyPI index, `-c constraints.txt`, the `ml` and `dev` extras. A dry run: the
resolution is checked, nothing is installed. Needs PyPI (about 40 s).

Not checked here: the CPU build from download.pytorch.org (the Makefile's TORCH_INDEX), which this machine
cannot reach; with PyPI alone torch resolves to PyPI's default build of the same version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_constraints_resolve_from_the_public_index_alone(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)
    env.pop("PIP_FIND_LINKS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
         "--index-url", "https://pypi.org/simple", "--report", str(report),
         "-c", str(ROOT / "constraints.txt"), "-e", f"{ROOT}[ml,dev]"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed = {i["metadata"]["name"].lower(): i for i in json.loads(report.read_text())["install"]}
    urls = [i["download_info"]["url"] for i in installed.values() if i["metadata"]["name"].lower() != "streamgrpo"]
    assert all(u.startswith("https://files.pythonhosted.org/") for u in urls), [u for u in urls if "pythonhosted" not in u]
    assert installed["torch"]["metadata"]["version"] == "2.13.0"
