"""Schema compatibility: can today's reader read what every released writer wrote?

Implements the Avro specification's schema-resolution rules structurally (records by field name,
defaults for new fields, enum symbols, unions, arrays, maps, fixed, numeric promotions
int->long->float->double and string<->bytes). ``make schemas-check`` (and a unit test) checks the
current ``schemas/`` against every version under ``released/``: BACKWARD compatibility, the
guarantee replay depends on (old events on a topic must decode with the new code).

Releasing: ``python -m streamgrpo.avro.compat release vN`` copies ``schemas/`` to
``released/vN/`` after checking it.

FORWARD compatibility (an older release's reader on today's data) is reported by :func:`check_forward`,
not enforced: each contract version so far only adds defaulted fields, so an older reader that is given the
writer schema resolves today's bytes (the new fields are skipped). It is given the writer schema only in the
Confluent wire format (the schema registry serves it); in the single-object encoding an older release does not
know today's fingerprints and dead-letters today's events (``unknown schema fingerprint``). Upgrade readers
before writers, or all services together.

What is not covered: logical-type compatibility beyond the underlying types.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

from streamgrpo.avro import registry
from streamgrpo.avro.errors import IncompatibleSchemaError

_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema.get("type"))


def _full_name(schema: Any) -> str | None:
    if isinstance(schema, dict) and "name" in schema:
        name = schema["name"]
        ns = schema.get("namespace")
        return name if "." in name or not ns else f"{ns}.{name}"
    return None


def _deref(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        return named.get(schema, schema)
    if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES and len(schema) <= 2:
        return schema["type"] if "logicalType" not in schema else schema
    return schema


def _collect(schema: Any, named: dict[str, Any]) -> None:
    if isinstance(schema, list):
        for s in schema:
            _collect(s, named)
    elif isinstance(schema, dict):
        full = _full_name(schema)
        if full and schema.get("type") in ("record", "enum", "fixed"):
            named[full] = schema
        for f in schema.get("fields", []):
            _collect(f["type"], named)
        for key in ("items", "values"):
            if key in schema:
                _collect(schema[key], named)


def problems(writer: Any, reader: Any, path: str = "") -> list[str]:
    """Every reason ``reader`` cannot read data written with ``writer`` (empty list: compatible)."""
    wn: dict[str, Any] = {}
    rn: dict[str, Any] = {}
    _collect(writer, wn)
    _collect(reader, rn)
    return _check(writer, reader, path or _full_name(reader) or "<root>", wn, rn, set())


def _check(w: Any, r: Any, path: str, wn: dict[str, Any], rn: dict[str, Any], seen: set[tuple[str, str]]) -> list[str]:
    w, r = _deref(w, wn), _deref(r, rn)
    wt, rt = _type_name(w), _type_name(r)
    if wt == "union":
        out = []
        for branch in w:
            out += _check(branch, r, path, wn, rn, seen)
        return out
    if rt == "union":
        for branch in r:
            if not _check(w, branch, path, wn, rn, seen):
                return []
        return [f"{path}: writer type {wt} matches no branch of the reader union"]
    if wt in _PROMOTIONS or wt in ("null", "boolean"):
        if rt == wt or rt in _PROMOTIONS.get(wt, set()):
            return []
        return [f"{path}: writer {wt} cannot be read as {rt}"]
    if wt != rt:
        return [f"{path}: writer {wt} cannot be read as {rt}"]
    if wt == "array":
        return _check(w["items"], r["items"], f"{path}[]", wn, rn, seen)
    if wt == "map":
        return _check(w["values"], r["values"], f"{path}{{}}", wn, rn, seen)
    if wt == "enum":
        missing = set(w["symbols"]) - set(r["symbols"])
        if missing and "default" not in r:
            return [f"{path}: reader enum lacks symbols {sorted(missing)} and has no default"]
        return []
    if wt == "fixed":
        return [] if w.get("size") == r.get("size") else [f"{path}: fixed size changed"]
    if wt == "record":
        key = (_full_name(w) or "", _full_name(r) or "")
        if key in seen:
            return []
        return _check_record(w, r, path, wn, rn, seen | {key})
    return []


def _check_record(w: Any, r: Any, path: str, wn: dict[str, Any], rn: dict[str, Any],
                  seen: set[tuple[str, str]]) -> list[str]:
    out = []
    wfields = {f["name"]: f for f in w["fields"]}
    for rf in r["fields"]:
        names = [rf["name"], *rf.get("aliases", [])]
        wf = next((wfields[n] for n in names if n in wfields), None)
        if wf is None:
            if "default" not in rf:
                out.append(f"{path}.{rf['name']}: new field without a default (old events cannot fill it)")
            continue
        out += _check(wf["type"], rf["type"], f"{path}.{rf['name']}", wn, rn, seen)
    return out


def check_all() -> dict[str, list[str]]:
    """Problems of every current schema against every released version (empty dict: all compatible)."""
    report: dict[str, list[str]] = {}
    current = registry.current()
    for version, schemas in registry.released().items():
        for name, old in schemas.items():
            new = current.get(name)
            if new is None:
                report.setdefault(name, []).append(f"{version}: type removed (released events can no longer be read)")
                continue
            found = problems(old.parsed, new.parsed)
            if found:
                report.setdefault(name, []).extend(f"{version}: {p}" for p in found)
    return report


def check_forward(reader_release: str) -> dict[str, list[str]]:
    """Problems of ``reader_release``'s schemas reading what the current schemas write (empty dict: the readers of
    that release resolve every current event, given its writer schema)."""
    report: dict[str, list[str]] = {}
    current = registry.current()
    for name, old in registry.released()[reader_release].items():
        new = current.get(name)
        found = [f"{name}: type removed"] if new is None else problems(new.parsed, old.parsed)
        if found:
            report[name] = found
    return report


def assert_compatible() -> None:
    report = check_all()
    if report:
        lines = [f"{name}: {p}" for name, ps in sorted(report.items()) for p in ps]
        raise IncompatibleSchemaError("schema change is not backward compatible:\n  " + "\n  ".join(lines))


def release(version: str) -> None:
    """Freeze the current schemas as ``released/<version>/`` (after checking compatibility)."""
    assert_compatible()
    target = registry.RELEASED_DIR / version
    if target.exists():
        raise IncompatibleSchemaError(f"{target} already exists; released versions are immutable")
    shutil.copytree(registry.SCHEMA_DIR, target)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["release"] and len(args) == 2:
            release(args[1])
            print(f"released {args[1]}")
        else:
            assert_compatible()
            versions = ", ".join(registry.released()) or "none"
            print(f"schemas compatible with released versions: {versions}")
    except IncompatibleSchemaError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
