"""The event schemas: ``.avsc`` files by full name, parsed with ``fastavro.schema.load_schema``.

``schemas/`` holds the current contract; ``released/<version>/`` holds every released version
verbatim (copied by ``make schemas-release``). The registry knows all of them by their
CRC-64-AVRO fingerprint, so an event written by any released version decodes with today's reader.

What is not covered: schemas that are not under ``streamgrpo.events``.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form

from streamgrpo.avro.errors import UnknownSchemaError

SCHEMA_DIR = Path(__file__).with_name("schemas")
RELEASED_DIR = Path(__file__).with_name("released")
NAMESPACE = "streamgrpo.events"


@dataclass(frozen=True)
class SchemaVersion:
    """One parsed schema: its full name, where it came from, and its fingerprint."""

    name: str
    release: str  # "current" or a released version such as "v1"
    parsed: Any
    fingerprint: bytes  # 8 bytes, little-endian CRC-64-AVRO of the parsing canonical form

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()


def fingerprint_of(parsed: Any) -> bytes:
    """8-byte little-endian CRC-64-AVRO fingerprint of a parsed schema (single-object encoding)."""
    value = int(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"), 16)
    return struct.pack("<Q", value)


def _load_dir(directory: Path, release: str) -> dict[str, SchemaVersion]:
    out: dict[str, SchemaVersion] = {}
    for path in sorted(directory.glob(f"{NAMESPACE}.*.avsc")):
        name = path.name[: -len(".avsc")]
        parsed = load_schema(str(path))
        out[name] = SchemaVersion(name, release, parsed, fingerprint_of(parsed))
    return out


@functools.lru_cache(maxsize=1)
def current() -> dict[str, SchemaVersion]:
    """The current schema of every named type, by full name."""
    return _load_dir(SCHEMA_DIR, "current")


@functools.lru_cache(maxsize=1)
def released() -> dict[str, dict[str, SchemaVersion]]:
    """Released versions: ``{"v1": {full_name: SchemaVersion}}``, oldest first."""
    if not RELEASED_DIR.is_dir():
        return {}
    versions = sorted((p for p in RELEASED_DIR.iterdir() if p.is_dir()), key=lambda p: int(p.name.lstrip("v")))
    return {p.name: _load_dir(p, p.name) for p in versions}


@functools.lru_cache(maxsize=1)
def by_fingerprint() -> dict[bytes, SchemaVersion]:
    """Every known writer schema (current and released) by fingerprint."""
    out: dict[bytes, SchemaVersion] = {}
    for versions in released().values():
        for sv in versions.values():
            out[sv.fingerprint] = sv
    for sv in current().values():
        out[sv.fingerprint] = sv
    return out


def get(name: str) -> SchemaVersion:
    """Current schema of ``name`` (full name, or short name under ``streamgrpo.events``)."""
    full = name if "." in name else f"{NAMESPACE}.{name}"
    try:
        return current()[full]
    except KeyError:
        raise UnknownSchemaError(f"no schema named {full!r} in {SCHEMA_DIR}") from None
