"""The package list is written once, in pyproject.toml's ``package-dir``, and the rest reads it.

Covered: setuptools' ``packages`` repeats exactly ``package-dir``'s keys (setuptools needs both: its discovery
cannot map top-level folders under ``streamgrpo.``); every folder holding Python files below a package folder is a
package there (a forgotten one would be missing from the wheel); ``make lint`` runs mypy on the folders it reads
from ``package-dir``, also for a package added to it. The image's COPY lines are checked against the same list by
tests/unit/test_k8s_manifests.py. Not covered: building a wheel.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _setuptools(pyproject: Path) -> dict[str, object]:
    return dict(tomllib.loads(pyproject.read_text())["tool"]["setuptools"])


def _folders(package_dir: dict[str, str]) -> list[str]:
    return list(dict.fromkeys(folder.split("/")[0] for folder in package_dir.values()))


def test_setuptools_packages_are_the_package_dir_keys() -> None:
    setuptools = _setuptools(ROOT / "pyproject.toml")
    package_dir = setuptools["package-dir"]
    assert isinstance(package_dir, dict) and isinstance(setuptools["packages"], list)
    assert sorted(setuptools["packages"]) == sorted(package_dir)


def test_every_folder_of_python_files_is_a_package() -> None:
    package_dir = _setuptools(ROOT / "pyproject.toml")["package-dir"]
    assert isinstance(package_dir, dict)
    mapped = {ROOT / folder for folder in package_dir.values()}
    unmapped = sorted({path.parent.relative_to(ROOT).as_posix() for top in _folders(package_dir)
                       for path in (ROOT / top).rglob("*.py") if path.parent not in mapped})
    assert unmapped == [], f"folders with Python files that pyproject.toml's package-dir does not list: {unmapped}"


def _mypy_args(directory: Path) -> list[str]:
    """The folders `make -n lint`, run in ``directory`` with this repository's Makefile, hands mypy."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed: `make lint` is how CI runs mypy")
    out = subprocess.run(["make", "-n", "-f", str(ROOT / "Makefile"), "-C", str(directory), "lint",
                          f"BIN={Path(sys.executable).parent}"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines() if line.split()[:1] and line.split()[0].endswith("/mypy")]
    assert len(lines) == 1, out.stdout
    return lines[0][1:]


def test_make_lint_runs_mypy_on_every_package_folder() -> None:
    package_dir = _setuptools(ROOT / "pyproject.toml")["package-dir"]
    assert isinstance(package_dir, dict)
    assert _mypy_args(ROOT) == _folders(package_dir)


def test_make_lint_reads_a_new_package_from_pyproject(tmp_path: Path) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '"streamgrpo.serve" = "serve" }' in text
    (tmp_path / "pyproject.toml").write_text(text.replace('"streamgrpo.serve" = "serve" }',
                                                          '"streamgrpo.serve" = "serve", "streamgrpo.newpkg" = "newpkg" }'))
    (tmp_path / "constraints.txt").write_text("")
    assert _mypy_args(tmp_path)[-2:] == ["serve", "newpkg"]
