"""Local directory store of immutable adapter versions, with SHA-256 integrity.

Layout: ``<root>/<adapter_name>/v<version>/`` holding the peft adapter (``adapter_config.json``,
``adapter_model.safetensors``), the trainer state (``trainer_state.pt``: optimizer + scheduler
state, when given) and ``manifest.json`` (version, parent, base model, trainer step, lineage,
metrics). A version is written to a temporary sibling directory and renamed into place, so a
reader never sees a half-written version; an existing version is never overwritten.

Shared with rollout workers, which only call :func:`verify_and_load_path`. The sha256 is
:func:`sha256_dir`: SHA-256 over (relative name, bytes) of every file, sorted by name.

Not covered: fsspec/object-store URLs (only local paths and ``file://`` URIs), garbage
collection of old versions.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from streamgrpo.avro.records import OffsetRange
from streamgrpo.models.errors import AdapterIntegrityError, AdapterStoreError

MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.pt"
_VERSION_DIR = re.compile(r"^v(\d+)$")


@dataclass(frozen=True)
class Manifest:
    """What ``manifest.json`` records about one version."""

    adapter_name: str
    version: int
    parent_version: int | None
    base_model: str
    trainer_step: int
    lineage: list[OffsetRange] = field(default_factory=list)  # stored as [{topic, partition, start, end}]
    metrics: dict[str, float] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset to read

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        try:
            data = json.loads((directory / MANIFEST).read_text())
            data["lineage"] = [OffsetRange(**r) for r in data.get("lineage", [])]
            return cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise AdapterStoreError(f"unreadable manifest in {directory}: {exc}") from exc


def version_dir(root: Path, adapter_name: str, version: int) -> Path:
    return Path(root) / adapter_name / f"v{version}"


def sha256_dir(path: str | os.PathLike[str]) -> str:
    """SHA-256 over (relative POSIX name, NUL, size, NUL, bytes) of every file under ``path``, sorted by name."""
    base = Path(path)
    if not base.is_dir():
        raise AdapterIntegrityError(f"adapter directory {base} does not exist")
    digest = hashlib.sha256()
    for file in sorted((p for p in base.rglob("*") if p.is_file()), key=lambda p: p.relative_to(base).as_posix()):
        rel = file.relative_to(base).as_posix()
        digest.update(rel.encode() + b"\0" + str(file.stat().st_size).encode() + b"\0")
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def verify(path: str | os.PathLike[str], expected_sha256: str) -> None:
    """Raise :class:`AdapterIntegrityError` unless ``path`` holds an adapter whose sha256 matches."""
    base = Path(path)
    for required in ("adapter_config.json", "adapter_model.safetensors"):
        if not (base / required).is_file():
            raise AdapterIntegrityError(f"adapter at {base} is missing {required}; refusing to load it")
    actual = sha256_dir(base)
    if actual != expected_sha256.lower():
        raise AdapterIntegrityError(
            f"adapter at {base} has sha256 {actual}, the announcing event says {expected_sha256}; refusing to load it"
        )


def uri_to_path(uri: str) -> Path:
    """A local path from a plain path or a ``file://`` URI (other schemes are not supported)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else uri)
    raise AdapterStoreError(f"adapter uri {uri!r}: only local paths and file:// URIs are supported")


def verify_and_load_path(uri: str, expected_sha256: str) -> Path:
    """For rollout workers: the verified local directory of the adapter at ``uri`` (pass it to
    ``PeftModel.from_pretrained`` / ``load_adapter``). Raises :class:`AdapterIntegrityError`."""
    path = uri_to_path(uri)
    verify(path, expected_sha256)
    return path


def write_version(
    root: str | os.PathLike[str], manifest: Manifest, model: Any, trainer_state: dict[str, Any] | None = None
) -> tuple[Path, str]:
    """Store ``model``'s adapter (+ ``trainer_state``) as ``manifest.version``; returns (dir, sha256).

    Raises :class:`AdapterStoreError` if the version already exists (versions are immutable).
    """
    target = version_dir(Path(root), manifest.adapter_name, manifest.version)
    if target.exists():
        raise AdapterStoreError(f"{target} already exists; adapter versions are immutable")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".v{manifest.version}.", dir=target.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        if trainer_state is not None:
            import torch

            torch.save(trainer_state, tmp / TRAINER_STATE)
        (tmp / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2, sort_keys=True))
        _fsync_tree(tmp)
        os.rename(tmp, target)  # atomic; fails if target appeared meanwhile
    except OSError as exc:
        raise AdapterStoreError(f"could not write adapter version {target}: {exc}") from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target, sha256_dir(target)


def _fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as fh:
                os.fsync(fh.fileno())


def versions(root: str | os.PathLike[str], adapter_name: str) -> list[int]:
    """Complete stored versions of ``adapter_name`` (those with a manifest), ascending."""
    base = Path(root) / adapter_name
    if not base.is_dir():
        return []
    found = []
    for child in base.iterdir():
        m = _VERSION_DIR.match(child.name)
        if m and (child / MANIFEST).is_file():
            found.append(int(m.group(1)))
    return sorted(found)


def latest(root: str | os.PathLike[str], adapter_name: str) -> tuple[Path, Manifest] | None:
    """The newest stored version of ``adapter_name`` and its manifest, or ``None``."""
    stored = versions(root, adapter_name)
    if not stored:
        return None
    path = version_dir(Path(root), adapter_name, stored[-1])
    return path, Manifest.read(path)


def load_trainer_state(path: Path) -> dict[str, Any] | None:
    """The optimizer/scheduler state stored with a version, or ``None`` if it has none."""
    file = path / TRAINER_STATE
    if not file.is_file():
        return None
    import torch

    return torch.load(file, map_location="cpu", weights_only=True)
