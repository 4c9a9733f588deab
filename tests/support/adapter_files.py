"""Adapter version directories with real files in a test's adapter store, for tests that announce versions without
training them: the A/B controller checks the files of every version that may serve (lifecycle/file_check.py)."""

from __future__ import annotations

import json
from pathlib import Path

from streamgrpo.models import adapter_store as store


def write_version(root: Path, version: int, name: str = "planner", weights: bytes = b"weights") -> tuple[str, str]:
    """``<root>/<name>/v<version>/`` with the files an adapter needs (not loadable weights); (its uri, its sha256)."""
    d = store.version_dir(root, name, version)
    d.mkdir(parents=True)
    (d / "adapter_config.json").write_text(json.dumps({"r": 4, "v": version}))
    (d / "adapter_model.safetensors").write_bytes(weights + bytes([version % 256]))
    return d.as_uri(), store.sha256_dir(d)
