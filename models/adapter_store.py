"""Local directory store of immutable adapter versions, with SHA-256 integrity.

Layout: ``<root>/<adapter_name>/v<version>/`` holding the peft adapter (``adapter_config.json``,
``adapter_model.safetensors``), the trainer state (``trainer_state.pt``: optimizer + scheduler
state, when given) and ``manifest.json`` (version, parent, base model, trainer step, lineage,
metrics, and the typed facts of its ``AdapterPublished``). A version is written to a temporary sibling directory and renamed into place, so a
reader never sees a half-written version; an existing version is never overwritten.

Shared with rollout workers and ``eval``, which only call :func:`verify_and_load_path` /
:func:`local_path`. The sha256 is :func:`sha256_dir`: SHA-256 over (relative name, bytes) of every file,
sorted by name.

Guarantees (the one place adapter paths are resolved and confined):
- An adapter name is one path component (:func:`check_name`): ``../x``, ``a/b`` or an empty name is an
  :class:`AdapterStoreError`, so no version directory is ever read or written outside ``<root>/<name>/``.
- :func:`local_path` resolves a plain path or ``file://`` URI and, given the store root, refuses one that
  resolves outside it (symlinks followed). A chained fsspec URL (``simplecache::file://``) or a local
  fsspec protocol (``local://``) is refused; only the object-store schemes of :data:`REMOTE_SCHEMES` are
  remote (:func:`is_remote`).
- A version directory that holds a symlink or anything but regular files and directories does not
  verify (:func:`sha256_dir`): what is hashed is what lies in the store, not a copy somewhere else that
  could be swapped between verification and load.
- A store that cannot be written (full, read-only, no permission) is :class:`AdapterStoreUnwritableError`,
  a :class:`~streamgrpo.errors.ConfigError`: the trainer exits misconfigured (78) instead of crash-looping.

Not covered: a writer of the store itself replacing files between verification and load (the store is
trusted to those who can write it), garbage collection of old versions.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from streamgrpo.avro.records import OffsetRange
from streamgrpo.models.errors import (
    AdapterIntegrityError,
    AdapterOutsideStoreError,
    AdapterStoreError,
    AdapterStoreUnwritableError,
)

MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.pt"
_VERSION_DIR = re.compile(r"^v(\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: fsspec protocols an adapter uri may name besides local paths: object stores and http(s), downloaded into
#: the store. Local or caching protocols (``local``, ``simplecache::...``) would copy from anywhere.
REMOTE_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "http", "https", "hf"})
#: errno values that mean the store itself cannot take a version (not a bug of this process).
_UNWRITABLE = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EFBIG,
                         errno.ENOTDIR})


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
    # the typed facts of the announcement (AdapterPublished v4; None in a manifest written before v4)
    drops: dict[str, int] | None = None
    samples_dequeued: int | None = None
    max_staleness: int | None = None
    auto_promote: bool | None = None

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        try:
            data = json.loads((directory / MANIFEST).read_text())
            data["lineage"] = [OffsetRange(**r) for r in data.get("lineage", [])]
            return cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise AdapterStoreError(f"unreadable manifest in {directory}: {exc}") from exc


def check_name(adapter_name: str) -> str:
    """``adapter_name`` if it is one safe path component (letters, digits, ``._-``, not starting with a dot)."""
    if not isinstance(adapter_name, str) or not _NAME.fullmatch(adapter_name):
        raise AdapterStoreError(f"adapter name {adapter_name!r} is not a plain name (1-128 letters, digits, '.', "
                                "'_' or '-', starting with a letter or digit); it would name a path outside the "
                                "adapter store")
    return adapter_name


def version_dir(root: Path, adapter_name: str, version: int) -> Path:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise AdapterStoreError(f"adapter version {version!r} is not a non-negative integer")
    return Path(root) / check_name(adapter_name) / f"v{version}"


def _files(base: Path) -> list[Path]:
    """Every regular file under ``base``; a symlink or special file anywhere is an integrity error."""
    found = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        for name in dirnames + filenames:
            entry = Path(dirpath) / name
            mode = entry.lstat().st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise AdapterIntegrityError(f"adapter directory {base} holds {entry.relative_to(base)}, which is "
                                            "a symlink or special file; adapters load only from regular files")
            if stat.S_ISREG(mode):
                found.append(entry)
    return found


def sha256_dir(path: str | os.PathLike[str]) -> str:
    """SHA-256 over (relative POSIX name, NUL, size, NUL, bytes) of every file under ``path``, sorted by name.
    A symlink or special file under ``path`` raises :class:`AdapterIntegrityError`."""
    base = Path(path)
    if not base.is_dir():
        raise AdapterIntegrityError(f"adapter directory {base} does not exist")
    digest = hashlib.sha256()
    for file in sorted(_files(base), key=lambda p: p.relative_to(base).as_posix()):
        rel = file.relative_to(base).as_posix()
        digest.update(rel.encode() + b"\0" + str(file.stat().st_size).encode() + b"\0")
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


#: The files an adapter version directory must hold to be loaded.
REQUIRED_FILES = ("adapter_config.json", "adapter_model.safetensors")


def verify(path: str | os.PathLike[str], expected_sha256: str) -> None:
    """Raise :class:`AdapterIntegrityError` unless ``path`` holds an adapter whose sha256 matches."""
    base = Path(path)
    for required in REQUIRED_FILES:
        if not (base / required).is_file():
            raise AdapterIntegrityError(f"adapter at {base} is missing {required}; refusing to load it")
    actual = sha256_dir(base)
    if actual != expected_sha256.lower():
        raise AdapterIntegrityError(
            f"adapter at {base} has sha256 {actual}, the announcing event says {expected_sha256}; refusing to load it"
        )


def is_remote(uri: str) -> bool:
    """True for an object-store / http(s) uri (:data:`REMOTE_SCHEMES`), False for a local path or ``file://``;
    any other scheme, and every chained fsspec URL (``a::b``), is an :class:`AdapterStoreError`."""
    if "::" in uri:
        raise AdapterStoreError(f"adapter uri {uri!r}: chained fsspec URLs (e.g. simplecache::) are not accepted")
    scheme = urlparse(uri).scheme.lower()
    if scheme in ("", "file"):
        return False
    if scheme in REMOTE_SCHEMES:
        return True
    raise AdapterStoreError(f"adapter uri {uri!r}: scheme {scheme!r} is not accepted; use a path or file:// uri "
                            f"inside the adapter store, or one of {', '.join(sorted(REMOTE_SCHEMES))}")


def local_path(uri: str, store_root: str | os.PathLike[str] | None = None) -> Path:
    """The resolved local directory of a plain path or ``file://`` uri; with ``store_root``, one that resolves
    outside the store (``..``, a symlink) is an :class:`AdapterOutsideStoreError`."""
    if is_remote(uri):
        raise AdapterStoreError(f"adapter uri {uri!r} is remote; a local path or file:// uri is needed here (the "
                                "rollout follower downloads remote adapters into the store first)")
    parsed = urlparse(uri)
    if parsed.scheme and parsed.netloc not in ("", "localhost"):
        raise AdapterStoreError(f"adapter uri {uri!r} names host {parsed.netloc!r}; file:// uris are local")
    path = Path(unquote(parsed.path) if parsed.scheme else uri).resolve()
    if store_root is not None and not path.is_relative_to(Path(store_root).resolve()):
        raise AdapterOutsideStoreError(f"{uri} resolves to {path}, outside the adapter store {Path(store_root).resolve()} "
                                       "([loop] adapter_store); adapters load only from the store")
    return path


def verify_and_load_path(uri: str, expected_sha256: str, store_root: str | os.PathLike[str] | None = None) -> Path:
    """For rollout workers and ``eval``: the verified local directory of the adapter at ``uri`` (confined to
    ``store_root`` when given; pass it to ``PeftModel.from_pretrained`` / ``load_adapter``). Raises
    :class:`AdapterIntegrityError` or :class:`AdapterStoreError`."""
    path = local_path(uri, store_root)
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
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".v{manifest.version}.", dir=target.parent))
        _write_files(tmp, manifest, model, trainer_state)
        os.rename(tmp, target)  # atomic; fails if target appeared meanwhile
    except (OSError, RuntimeError) as exc:  # RuntimeError: torch.save's stream writer, SafetensorError's base
        raise _write_error(target, exc) from exc
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target, sha256_dir(target)


def _write_files(tmp: Path, manifest: Manifest, model: Any, trainer_state: dict[str, Any] | None) -> None:
    from safetensors import SafetensorError

    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
    except SafetensorError as exc:  # an Exception, not an OSError: "I/O error: ... (os error 28)"
        code = re.search(r"(?:code: |os error )(\d+)", str(exc))
        raise OSError(int(code.group(1)) if code else errno.EIO, f"safetensors could not write: {exc}") from exc
    if trainer_state is not None:
        import torch

        torch.save(trainer_state, tmp / TRAINER_STATE)
    (tmp / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2, sort_keys=True))
    _fsync_tree(tmp)


def _write_error(target: Path, exc: OSError | RuntimeError) -> AdapterStoreError:
    """A store that cannot take the version (full, read-only, no permission) is a ConfigError; else a store error."""
    unwritable = (exc.errno in _UNWRITABLE if isinstance(exc, OSError)
                  else "write failed" in str(exc) or "failed writing" in str(exc))
    if unwritable:
        return AdapterStoreUnwritableError(
            f"the adapter store cannot take {target}: {exc}. Free space or fix permissions on "
            f"{target.parent.parent} ([loop] adapter_store), then restart; nothing was committed past the last "
            "stored version")
    return AdapterStoreError(f"could not write adapter version {target}: {exc}")


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
