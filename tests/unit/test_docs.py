"""The docs describe main: README's layout names every package, RELIABILITY.md names tests that exist.

Covered: every package of pyproject's ``package-dir`` has a line in README's ``## Layout`` section (and no line
names a folder that is not a package); every ``tests/``-relative test file and ``::test_name`` RELIABILITY.md
cites exists, with the number of tests or properties it claims. Not covered: whether a line's words are true.
"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^{re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"no {heading!r} section"
    return match.group(1)


def _package_folders() -> set[str]:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {folder.rstrip("/") + "/" for folder in setuptools["package-dir"].values()}


def test_readme_layout_names_every_package() -> None:
    layout = _section((ROOT / "README.md").read_text(), "## Layout")
    listed = set(re.findall(r"^- `([\w/]+/)`", layout, flags=re.M))
    packages = _package_folders()
    assert not packages - listed, f"README '## Layout' misses packages: {sorted(packages - listed)}"
    assert not listed - packages, f"README '## Layout' lists folders that are no package: {sorted(listed - packages)}"


def test_the_layout_check_reads_pyproject() -> None:
    packages = _package_folders()
    assert {"streamgrpo/", "avro/", "topics/", "trainer/losses/"} <= packages and len(packages) >= 20


def test_reliability_cites_tests_that_exist() -> None:
    text = (ROOT / "RELIABILITY.md").read_text()
    cites = list(re.finditer(r"`((?:unit|integration|e2e)/[\w/]+\.py)(?:::(\w+))?`((?:, `::\w+`)*)"
                             r"(?: \((\d+) (?:tests|properties)\))?", text))
    assert len(cites) >= 20
    for cite in cites:
        path = ROOT / "tests" / cite.group(1)
        assert path.is_file(), f"RELIABILITY.md cites {cite.group(1)}, which does not exist"
        source = path.read_text()
        for name in ([cite.group(2)] if cite.group(2) else []) + re.findall(r"::(\w+)", cite.group(3) or ""):
            assert re.search(rf"^(async )?def {name}\(", source, flags=re.M), f"{cite.group(1)} has no {name}"
        if cite.group(4):
            count = len(re.findall(r"^(?:async )?def test_", source, flags=re.M))
            assert count >= int(cite.group(4)), f"{cite.group(1)}: {count} tests, RELIABILITY.md says {cite.group(4)}"
