"""The .avsc files are the contract: records mirror them, docs everywhere, compatibility enforced."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
import typing

import pytest

from streamgrpo.avro import compat, records, registry


def _raw(name: str) -> dict:
    return json.loads((registry.SCHEMA_DIR / f"{name}.avsc").read_text())


@pytest.mark.parametrize("name", sorted(records.RECORD_TYPES))
def test_dataclass_fields_match_avsc_fields(name: str) -> None:
    cls = records.RECORD_TYPES[name]
    avsc = _raw(name)
    assert {f.name for f in dataclasses.fields(cls)} == {f["name"] for f in avsc["fields"]}
    hints = typing.get_type_hints(cls)
    for f in avsc["fields"]:
        optional = isinstance(f["type"], list) and "null" in f["type"]
        hint_optional = type(None) in typing.get_args(hints[f["name"]])
        assert optional == hint_optional, f"{name}.{f['name']}: nullability differs"


@pytest.mark.parametrize("path", sorted(registry.SCHEMA_DIR.glob("*.avsc")), ids=lambda p: p.stem)
def test_every_schema_and_field_is_documented_and_named_after_its_file(path) -> None:
    schema = json.loads(path.read_text())
    assert f"{schema['namespace']}.{schema['name']}" == path.stem
    assert schema.get("doc")
    for f in schema.get("fields", []):
        assert f.get("doc"), f"{path.stem}.{f['name']} has no doc"


def test_group_closed_reason_doc_names_every_reason_and_the_wire_form_is_v4s() -> None:
    """GroupClosed.reason's doc lists every reason the advantage window writes, the A/B control arm's included,
    and a doc edit leaves the parsing canonical form alone: the fingerprint is the one in v4's golden bytes."""
    from pathlib import Path

    from streamgrpo.lifecycle.pacing import CONTROL_ARM

    doc = next(f["doc"] for f in _raw("streamgrpo.events.GroupClosed")["fields"] if f["name"] == "reason")
    for reason in ("complete", "timed_out_scored", "zero_variance", "timed_out_dropped", "too_few_rewards", CONTROL_ARM):
        assert reason in doc, f"GroupClosed.reason's doc does not name {reason!r}"
    golden = Path(__file__).parents[2] / "fixtures" / "golden" / "v4" / "streamgrpo.events.GroupClosed.bin"
    assert registry.get("GroupClosed").fingerprint == golden.read_bytes()[2:10]


def test_every_event_has_the_shared_envelope_first() -> None:
    for name in records.EVENT_TYPES:
        assert _raw(name)["fields"][0]["type"] == "streamgrpo.events.Envelope"


def test_current_schemas_are_compatible_with_every_released_version() -> None:
    assert registry.released(), "at least one released version must be kept in the repo"
    assert compat.check_all() == {}


def test_compatibility_check_rejects_a_new_field_without_default() -> None:
    old = registry.get("Reward").parsed
    new = copy.deepcopy(old)
    new["fields"].append({"name": "judge_cost", "type": "double"})
    found = compat.problems(old, new)
    assert any("judge_cost" in p and "default" in p for p in found)


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda s: [f for f in s["fields"] if f["name"] == "score"][0].update(type="int"), "double cannot be read as int"),
        (lambda s: [f for f in s["fields"] if f["name"] == "status"][0].update(
            type={"type": "enum", "name": "RewardStatus2", "symbols": ["OK"]}), "enum"),
    ],
)
def test_compatibility_check_rejects_breaking_type_changes(mutate, fragment) -> None:
    old = registry.get("Reward").parsed
    new = copy.deepcopy(old)
    mutate(new)
    assert any(fragment in p or "cannot be read" in p for p in compat.problems(old, new))


def test_compatibility_check_accepts_a_defaulted_new_field_and_a_promotion() -> None:
    old = registry.get("ToolObservation").parsed
    new = copy.deepcopy(old)
    new["fields"].append({"name": "exit_code", "type": ["null", "int"], "default": None})
    [f for f in new["fields"] if f["name"] == "duration_ms"][0]["type"] = "long"
    assert compat.problems(old, new) == []


def test_schemas_check_command_fails_on_an_incompatible_release(tmp_path, monkeypatch) -> None:
    """End to end through the module: a released version that the current reader cannot read."""
    released = tmp_path / "v1"
    released.mkdir()
    for p in registry.SCHEMA_DIR.glob("*.avsc"):
        raw = json.loads(p.read_text())
        if raw["name"] == "Verdict":
            raw["fields"].append({"name": "confidence", "type": "double", "doc": "x"})  # dropped later
            raw["fields"][-1]["doc"] = "old field"
        (released / p.name).write_text(json.dumps(raw))
    # a writer field the reader lacks is fine (ignored); make the reader need a field the writer lacks:
    raw = json.loads((released / "streamgrpo.events.Task.avsc").read_text())
    raw["fields"] = [f for f in raw["fields"] if f["name"] != "source"]
    (released / "streamgrpo.events.Task.avsc").write_text(json.dumps(raw))
    code = (
        "import sys; from pathlib import Path; from streamgrpo.avro import registry, compat;"
        f"registry.RELEASED_DIR = Path({str(tmp_path)!r}); sys.exit(compat.main([]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Task.source" in proc.stderr and "default" in proc.stderr


def test_sdk_packages_do_not_import_ml_or_stream_frameworks() -> None:
    code = (
        "import sys; import streamgrpo.avro.codec, streamgrpo.avro.compat, streamgrpo.topics.sdk, "
        "streamgrpo.topics.consumer, streamgrpo.topics.admin, streamgrpo.topics.cli, streamgrpo.tasks.reader, "
        "streamgrpo.tasks.builtin, streamgrpo.tasks.datasets;"
        "bad = [m for m in ('torch', 'transformers', 'vllm', 'faust', 'peft') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, f"imported: {proc.stdout} {proc.stderr[-500:]}"
