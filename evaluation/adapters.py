"""Which adapter versions an evaluation serves, and where their verified files are.

A target is the base model (version 0) or an adapter version:
- ``planner@v3`` (or ``v3`` / ``3``): from the ``AdapterPublished`` events on ``adapter-events``
  when a broker is reachable -- the files are loaded only if their sha256 matches the event --
  else from the events of the run's Parquet archive (``<run dir>/archive``, the directory beside a
  run's store ``<run dir>/adapters``, or ``eval --run ID``), checked the same way; a mismatch is
  refused. Only when neither has the version, from the adapter store directory
  (``<store>/<name>/v<N>``; its checksum is computed and reported, but there is no announcement to
  check it against, and the output says so);
- ``--adapter-dir DIR``: a directory holding a peft adapter (its ``manifest.json`` names the
  version when it comes from the store; otherwise it is labelled by the directory);
- ``--all-versions``: every published version (events), else every version in the store.

Adapter names and announced uris go through the adapter store's one resolver
(:mod:`streamgrpo.models.adapter_store`): ``--adapter ../outside@v1`` is refused, and so is an announced
uri that is not a local path, that resolves outside the adapter store (the session's store: ``--store``,
the run's ``<run dir>/adapters`` with ``--run``, else ``[loop] adapter_store``; ``..`` and symlinks are
followed first) or whose directory holds a symlink. A matching sha256 does not make an outside path
acceptable: whoever can write ``adapter-events`` can compute it. What is not covered: remote (fsspec) URIs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.errors import StreamGRPOError
from streamgrpo.models import adapter_store as store
from streamgrpo.models.errors import AdapterOutsideStoreError
from streamgrpo.topics import catalog


class TargetError(StreamGRPOError):
    """An adapter to evaluate cannot be found or does not verify."""


@dataclass(frozen=True)
class Target:
    label: str  # "base" or "planner@v3" or the directory name
    adapter_name: str
    version: int  # 0 = base model
    path: Path | None = None
    sha256: str | None = None
    verified: bool = False  # sha256 checked against an AdapterPublished event


def parse_version(spec: str, default_name: str) -> tuple[str, int]:
    """``planner@v3`` / ``v3`` / ``3`` -> (name, version)."""
    m = re.fullmatch(r"(?:(?P<name>[^@\s]+)@)?v?(?P<version>\d+)", spec.strip())
    if not m:
        raise TargetError(f"adapter {spec!r}: expected NAME@vN, vN or N (e.g. planner@v3)")
    try:
        name = store.check_name(m.group("name") or default_name)
    except StreamGRPOError as exc:
        raise TargetError(f"adapter {spec!r}: {exc}") from exc
    return name, int(m.group("version"))


def base_target(adapter_name: str) -> Target:
    return Target("base", adapter_name, 0)


def published(events: Sequence[R.Event], adapter_name: str) -> dict[int, R.AdapterPublished]:
    """The AdapterPublished events of ``adapter_name`` by version."""
    return {e.version: e for e in events if isinstance(e, R.AdapterPublished) and e.adapter_name == adapter_name}


def from_event(event: R.AdapterPublished, store_root: Path | None) -> Target:
    """Verify the announced files, confined to ``store_root`` when given (raises TargetError on a mismatch, a
    path outside the store, a symlink, a non-local uri)."""
    try:
        path = store.verify_and_load_path(event.uri, event.sha256, store_root)
    except StreamGRPOError as exc:
        raise TargetError(f"{event.adapter_name}@v{event.version}: {exc}") from exc
    return Target(f"{event.adapter_name}@v{event.version}", event.adapter_name, event.version, path, event.sha256,
                  verified=True)


def from_store(root: Path, adapter_name: str, version: int) -> Target:
    """An unannounced version of the store, confined to it like an announced one: a version directory that is a
    symlink leading outside the store, or holds one, is a TargetError."""
    try:
        path = store.version_dir(root, adapter_name, version)
        if not path.is_dir():
            known = store.versions(root, adapter_name)
            raise TargetError(f"{adapter_name}@v{version} is not in the adapter store {root} "
                              f"(versions there: {known or 'none'}); pass --store or --adapter-dir")
        path = store.local_path(str(path), root)
        return Target(f"{adapter_name}@v{version}", adapter_name, version, path, store.sha256_dir(path))
    except StreamGRPOError as exc:
        if isinstance(exc, TargetError):
            raise
        raise TargetError(f"{adapter_name}@v{version}: {exc}; refusing to evaluate it") from exc


def from_dir(path: Path, adapter_name: str) -> Target:
    if not (path / "adapter_config.json").is_file():
        raise TargetError(f"{path} holds no peft adapter (adapter_config.json is missing)")
    version = store.Manifest.read(path).version if (path / "manifest.json").is_file() else 1
    return Target(path.name if version == 1 and not (path / "manifest.json").is_file() else f"{adapter_name}@v{version}",
                  adapter_name, version, path, store.sha256_dir(path))


def archive_beside(store_root: Path | None) -> Path | None:
    """The event archive of the run whose adapter store is ``store_root`` (``<run dir>/adapters`` ->
    ``<run dir>/archive``, the layout of ``streamgrpo run``), when it exists."""
    if store_root is None:
        return None
    archive = Path(store_root).parent / "archive"
    return archive if (archive / catalog.ADAPTER_EVENTS).is_dir() else None


def archived_events(archive: Path) -> list[R.Event]:
    """The ``adapter-events`` of a Parquet event archive, in log order."""
    from streamgrpo.archive.store import read_events

    return [event for event, _ in read_events(archive, catalog.ADAPTER_EVENTS)]


def resolve(specs: Sequence[str], dirs: Sequence[Path], *, all_versions: bool, include_base: bool,
            adapter_name: str, events: Sequence[R.Event] | None, store_root: Path | None,
            archive: Path | None = None) -> list[Target]:
    """The targets in evaluation order: base first (when asked or when nothing else is), then versions.
    ``events`` None (no broker): the announcements come from ``archive`` (default: the one beside the store)."""
    source = catalog.ADAPTER_EVENTS
    archive = archive or archive_beside(store_root)
    if events is None and archive is not None:
        events, source = archived_events(archive), f"the event archive {archive}"
    announced = published(events or [], adapter_name)
    wanted: list[tuple[str, int]] = [parse_version(s, adapter_name) for s in specs]
    if all_versions:
        versions = sorted(announced) if announced else (store.versions(store_root, adapter_name) if store_root else [])
        if not versions:
            raise TargetError(f"--all-versions found no published adapter (no {catalog.ADAPTER_EVENTS} reachable "
                              "and no versions in the store); pass --store or --bootstrap")
        wanted += [(adapter_name, v) for v in versions]
    targets: list[Target] = []
    for name, version in dict.fromkeys(wanted):
        if version == 0:
            include_base = True
            continue
        event = published(events or [], name).get(version)
        if event is not None:
            try:
                targets.append(from_event(event, store_root))
            except TargetError as exc:
                hint = (" (a run's adapters are in its own store: pass --run RUN_DIR or --store DIR)"
                        if isinstance(exc.__cause__, AdapterOutsideStoreError) else "")
                raise TargetError(f"{exc} (announced on {source}); refusing to evaluate it{hint}") from exc
        elif store_root is not None:
            targets.append(from_store(store_root, name, version))
        else:
            raise TargetError(f"{name}@v{version} was not announced on {catalog.ADAPTER_EVENTS} and no --store was "
                              "given")
    targets += [from_dir(Path(d), adapter_name) for d in dirs]
    seen: dict[tuple[str, int], str] = {}
    for t in targets:
        if (t.adapter_name, t.version) in seen:
            raise TargetError(f"{t.label} and {seen[(t.adapter_name, t.version)]} are both version {t.version}; "
                              "evaluate them in separate runs")
        seen[(t.adapter_name, t.version)] = t.label
    if include_base or not targets:
        targets.insert(0, base_target(adapter_name))
    return targets
